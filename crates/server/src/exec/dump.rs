//! Key dumps: `lru_crawler metadump` (memcached-tool's `dump` and `keys`) and `lru_crawler
//! mgdump`, streamed from the store a segment at a time (`store::Store::dump_step`).
//!
//! A dump pauses like a long multi-get (`Flow::Paused`): once `env.reply_cap` bytes are
//! built, they are written before the walk goes on from the cursor kept in `Conn::resume`,
//! so a client that does not read holds at most the cap plus one segment's lines.

use proto::reply::{self, write_u64};
use proto::url_encode;
use store::{DumpCursor, DumpItem};

use crate::exec::env::ExecEnv;
use crate::exec::flow::{Flow, Paused};

/// memcached's reply to a class id outside 1..=63 (or not a number).
const BADCLASS: &[u8] = b"BADCLASS invalid class id\r\n";

/// memcached's largest slab class id; memfleet's items are all in class 1.
const CLASS_MAX: u64 = 63;

#[derive(Clone, Copy)]
enum Format {
    /// `key=… exp=… la=… cas=… fetch=… cls=… size=…` lines, then `END`.
    Meta,
    /// `mg <key>` lines, then `EN`.
    Mg,
}

/// `lru_crawler <args>`: a dump for `metadump`/`mgdump`, None for any other subcommand.
/// `resume`: the packed cursor of a dump that paused (0 = start).
pub fn run<'a>(
    env: &ExecEnv<'_>,
    mut args: impl Iterator<Item = &'a [u8]>,
    resume: usize,
    out: &mut Vec<u8>,
) -> Option<Flow> {
    let format = match args.next()? {
        b"metadump" => Format::Meta,
        b"mgdump" => Format::Mg,
        _ => return None,
    };
    let (Some(classes), None) = (args.next(), args.next()) else {
        out.extend_from_slice(reply::ERROR);
        return Some(Flow::Continue);
    };
    let Some(any_items) = selects_class_one(classes) else {
        out.extend_from_slice(BADCLASS);
        return Some(Flow::Continue);
    };
    // A datagram reply is built whole, so it could not stay bounded; memcached's crawler
    // does not answer over UDP either.
    if env.reply_cap == usize::MAX {
        return Some(Flow::Continue);
    }
    let mut cursor = any_items.then(|| DumpCursor::unpack(resume as u32));
    while let Some(c) = cursor {
        cursor = env
            .shared
            .store
            .dump_step(c, env.now, &mut |it| write_item(format, it, out));
        if let Some(next) = cursor.filter(|_| out.len() >= env.reply_cap) {
            return Some(Flow::Paused(Paused {
                next_key: Some(next.pack() as usize),
                value: None,
            }));
        }
    }
    out.extend_from_slice(match format {
        Format::Meta => reply::END,
        Format::Mg => reply::EN,
    });
    Some(Flow::Continue)
}

/// memcached's class list: `all`, `hash`, or ids 1..=63 joined by commas (empty parts
/// skipped). Whether it names class 1, the one memfleet's items are in; None if invalid.
fn selects_class_one(classes: &[u8]) -> Option<bool> {
    if classes == b"all" || classes == b"hash" {
        return Some(true);
    }
    let mut one = false;
    for id in classes.split(|&b| b == b',').filter(|p| !p.is_empty()) {
        let id = std::str::from_utf8(id).ok()?.parse::<u64>().ok()?;
        if !(1..=CLASS_MAX).contains(&id) {
            return None;
        }
        one |= id == 1;
    }
    Some(one)
}

fn write_item(format: Format, it: &DumpItem<'_>, out: &mut Vec<u8>) {
    match format {
        Format::Meta => {
            out.extend_from_slice(b"key=");
            url_encode(out, it.key);
            out.extend_from_slice(b" exp=");
            if it.exptime == 0 {
                out.extend_from_slice(b"-1");
            } else {
                write_u64(out, u64::from(it.exptime));
            }
            out.extend_from_slice(b" la=");
            write_u64(out, u64::from(it.last_access));
            out.extend_from_slice(b" cas=");
            write_u64(out, it.cas);
            out.extend_from_slice(if it.fetched {
                b" fetch=yes"
            } else {
                b" fetch=no"
            });
            out.extend_from_slice(b" cls=1 size=");
            write_u64(out, memcached_item_size(it) as u64);
            // memcached ends these lines with a bare newline.
            out.push(b'\n');
        }
        Format::Mg => {
            out.extend_from_slice(b"mg ");
            // A key the text protocol could not carry (stored over the binary protocol)
            // goes base64-encoded with the `b` flag, as memcached writes a binary key.
            if it.key.iter().any(|&b| b <= b' ' || b == 0x7f) {
                reply::write_base64(out, it.key);
                out.extend_from_slice(b" b\r\n");
            } else {
                out.extend_from_slice(it.key);
                out.extend_from_slice(b"\r\n");
            }
        }
    }
}

/// memcached's ITEM_ntotal on a 64-bit build with cas: the 56-byte header, the key and
/// its NUL, the value and its CRLF, and 4 bytes of flags when they are not 0.
fn memcached_item_size(it: &DumpItem<'_>) -> usize {
    56 + it.key.len() + 1 + it.value_len + 2 + if it.flags != 0 { 4 } else { 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_lists_as_memcached_reads_them() {
        for (arg, want) in [
            (&b"all"[..], Some(true)),
            (b"hash", Some(true)),
            (b"1", Some(true)),
            (b"2,1", Some(true)),
            (b",1", Some(true)),
            (b"01", Some(true)),
            (b"2", Some(false)),
            (b"63", Some(false)),
            (b"64", None),
            (b"0", None),
            (b"all,", None),
            (b"ALL", None),
            (b"1,x", None),
            (b"-1", None),
            (b"99999999999999999999999", None),
        ] {
            assert_eq!(
                selects_class_one(arg),
                want,
                "{}",
                String::from_utf8_lossy(arg)
            );
        }
    }
}
