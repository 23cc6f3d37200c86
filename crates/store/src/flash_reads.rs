//! `Store`'s flash reads, apart from the memory path: locating an item on flash, reading it
//! off the shard's lock (an I/O thread's work) and answering from a read made apart.

use std::sync::MutexGuard;

use crate::flash;
use crate::flashed::{FlashLoc, Prefetched};
use crate::read;
use crate::shard::Shard;
use crate::types::ItemView;
use crate::Store;

impl Store {
    /// `get` that leaves flash unread: Err(where) when memory misses and the key is on flash.
    /// Read it with `read_located` (blocking, no lock held: an I/O thread's work), then
    /// answer with `get_prefetched`.
    pub fn get_or_locate<R>(
        &self,
        key: &[u8],
        now: u32,
        f: impl FnOnce(Option<ItemView<'_>>) -> R,
    ) -> Result<R, FlashLoc> {
        self.read_or_locate::<true, R>(key, now, true, f)
    }

    /// Whether a get of `key` would read flash: where, when memory misses and flash has it.
    pub fn locate(&self, key: &[u8], now: u32) -> Option<FlashLoc> {
        self.g.flash.as_ref()?;
        let (h, si) = self.route(key);
        let mut s = self.lock(si);
        let found = s.find_live(&self.g, h, key, now).is_some();
        s.settle(&self.g);
        if found {
            return None;
        }
        s.flash_loc(h).map(FlashLoc)
    }

    /// Reads the flash item at `loc` into `bytes` (reused): blocking I/O under no shard lock.
    pub fn read_located(&self, loc: FlashLoc, mut bytes: Vec<u8>) -> Prefetched {
        let read = match &self.g.flash {
            Some(fl) => fl.read(loc.0, &mut bytes),
            None => flash::ReadOutcome::Gone,
        };
        Prefetched {
            loc: loc.0,
            read,
            bytes,
        }
    }

    /// `read_located` when the read needs no wait for the disk (the bytes are in the write
    /// buffer or the page cache): a worker may then make it itself. None when it would wait.
    pub fn read_located_cached(&self, loc: FlashLoc) -> Option<Prefetched> {
        let mut bytes = Vec::new();
        let read = self.g.flash.as_ref()?.read_cached(loc.0, &mut bytes)?;
        Some(Prefetched {
            loc: loc.0,
            read,
            bytes,
        })
    }

    /// Finishes a `get_or_locate` that went to flash, with what `read_located` read: as
    /// `get` would answer (`ext_recache_rate` included). A key set, deleted or moved since it
    /// was located is looked up again.
    pub fn get_prefetched<R>(
        &self,
        key: &[u8],
        now: u32,
        p: &Prefetched,
        f: impl FnOnce(Option<ItemView<'_>>) -> R,
    ) -> R {
        self.read_prefetched(key, now, true, p, f)
    }

    /// `peek` answered from the flash read `p` when one was made (as `get_prefetched`,
    /// without touching the item's state or bringing it back).
    pub fn peek_prefetched<R>(
        &self,
        key: &[u8],
        now: u32,
        p: Option<&Prefetched>,
        f: impl FnOnce(Option<ItemView<'_>>) -> R,
    ) -> R {
        match p {
            Some(p) => self.read_prefetched(key, now, false, p, f),
            None => self.peek(key, now, f),
        }
    }

    fn read_prefetched<R>(
        &self,
        key: &[u8],
        now: u32,
        bump: bool,
        p: &Prefetched,
        f: impl FnOnce(Option<ItemView<'_>>) -> R,
    ) -> R {
        let (h, si) = self.route(key);
        let mut s = self.lock(si);
        let in_memory = s.find_live(&self.g, h, key, now).is_some();
        s.settle(&self.g);
        if in_memory || s.flash_loc(h) != Some(p.loc) {
            drop(s);
            return self.read(key, now, bump, f);
        }
        self.finish_flash(s, si, h, key, now, bump, p, f)
    }

    /// A get that missed memory: served from flash without holding the shard during the
    /// read.
    #[cold]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn read_flash<R>(
        &self,
        s: MutexGuard<'_, Shard>,
        si: usize,
        h: u64,
        key: &[u8],
        now: u32,
        bump: bool,
        f: impl FnOnce(Option<ItemView<'_>>) -> R,
    ) -> R {
        let Some(loc) = s.flash_loc(h) else {
            drop(s);
            return f(None);
        };
        drop(s);
        let p = self.read_located(FlashLoc(loc), Vec::new());
        self.finish_flash(self.lock(si), si, h, key, now, bump, &p, f)
    }

    /// Answers a get from the flash read `p`, or (one in `ext_recache_rate`) brings the item
    /// back into memory from it and answers from there.
    #[cold]
    #[allow(clippy::too_many_arguments)]
    fn finish_flash<R>(
        &self,
        mut s: MutexGuard<'_, Shard>,
        si: usize,
        h: u64,
        key: &[u8],
        now: u32,
        bump: bool,
        p: &Prefetched,
        f: impl FnOnce(Option<ItemView<'_>>) -> R,
    ) -> R {
        if bump && s.recache_due(&self.g) {
            drop(s);
            let mut s = match self.with_mem(si, |s, g| s.recache(g, h, key, now, p)) {
                Some((s, ())) => s,
                None => self.lock(si),
            };
            let Some(it) = s.find_live(&self.g, h, key, now) else {
                drop(s);
                return f(None);
            };
            let (pre_bits, pre_time) = read::state_before(&s, &it, now);
            s.bump(&it, now);
            return f(Some(read::view(&s, &it, now, pre_bits, pre_time)));
        }
        let l = s.flash_checked(&self.g, h, key, now, p);
        drop(s);
        match l {
            Some(l) => f(Some(read::flash_view(&p.bytes, &l, now))),
            None => f(None),
        }
    }

    /// Brings the key's item back into memory from the flash read `p` (made off the shard's
    /// lock, e.g. by an I/O thread), so that a command on it then reads no flash. Reads
    /// again, in line, only if the item moved since `p` was located; nothing if memory has
    /// the key or flash does not.
    pub fn bring_back_prefetched(&self, key: &[u8], now: u32, p: &Prefetched) {
        let (h, si) = self.route(key);
        let _ = self.with_mem(si, |s, g| s.bring_back(g, h, key, now, Some(p)));
    }

    /// Reads the key's item from flash, without holding its shard during the read, when
    /// memory does not have it and flash does.
    pub(crate) fn prefetch(&self, si: usize, h: u64, key: &[u8]) -> Option<Prefetched> {
        let fl = self.g.flash.as_ref()?;
        let loc = {
            let s = self.lock(si);
            if s.flash_index.is_empty() || s.find(h, key).is_some() {
                return None;
            }
            s.flash_loc(h)?
        };
        let mut bytes = Vec::new();
        let read = fl.read(loc, &mut bytes);
        Some(Prefetched { loc, read, bytes })
    }
}
