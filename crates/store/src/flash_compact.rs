//! The store's side of flash compaction (`flash::compact` picks and scans the pages): each
//! frame of a page being compacted is written again by its key's shard if it is still that
//! key's current flash copy, dropped if it expired or was flushed (or, with
//! `ext_drop_unread`, was not read since it was written).

use crate::flash::Loc;
use crate::item;
use crate::shard::{Global, Shard};
use crate::Store;

impl Store {
    /// One step of flash compaction (see docs/storage.md, "Flash"): reads up to about a
    /// MiB of the page being compacted into `buf` (reused) and writes its current items
    /// again. Blocking I/O, for a background thread. The bytes read; 0 when no page is due.
    pub fn compact_flash(&self, buf: &mut Vec<u8>, now: u32) -> u64 {
        let Some(fl) = &self.g.flash else {
            return 0;
        };
        let Some((frames, drop_unread)) = fl.compact_step(buf) else {
            return 0;
        };
        for (loc, range) in frames {
            let item = &buf[range];
            let Some(l) = item::parse_checked(item) else {
                continue;
            };
            let (h, si) = self.route(&item[l.key..l.key + l.key_len]);
            self.lock(si)
                .rescue(&self.g, h, loc, (item, &l), now, drop_unread);
        }
        buf.len().max(1) as u64
    }
}

impl Shard {
    /// Compaction found `item` (its bytes and layout), the frame at `loc`: written again at the head of the log if
    /// it is still the key's current flash copy, dropped if it expired or was flushed, or if
    /// `drop_unread` and it was not read since it was written. Written again, it counts as
    /// unread: it must be read again to outlast the next such compaction.
    pub(crate) fn rescue(
        &mut self,
        g: &Global,
        h: u64,
        loc: Loc,
        (item, l): (&[u8], &item::Layout),
        now: u32,
        drop_unread: bool,
    ) {
        let Some(fl) = g.flash.as_ref() else {
            return;
        };
        let Some(was_read) = self
            .flash_loc(h)
            .filter(|&at| at == loc && fl.is_current(loc))
            .map(Loc::was_read)
        else {
            return;
        };
        if g.gone(item, l, now).is_some() || (drop_unread && !was_read) {
            self.flash_unlink(g, h, true);
            fl.count_compacted(false);
            return;
        }
        // Linking the new place forgets the old one; an item that cannot be written stays
        // where it is and is counted lost when its page is freed.
        if let Some(new) = fl.append(item) {
            self.flash_link(g, h, new);
            fl.count_compacted(true);
        }
    }
}
