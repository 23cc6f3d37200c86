//! The write path under the shard lock: storage commands (memcached's do_store_item, decided
//! before and after allocation, then written by copy or in place).

use crate::item::{self, Header, ACCESSED, STALE, TOKEN_SENT};
use crate::segments::Queue;
use crate::shard::{Found, Global, NeedMem, Shard, Unlink};
use crate::types::{StoreMode, StoreOpts, StoreOutcome, StoreResult, Value};

/// Where a storage command's value bytes come from, once the store has decided how to write it.
pub(crate) enum Source<'a> {
    /// Copied into a segment or a large buffer.
    Copy(&'a [u8]),
    /// Already in `owned` (taken when it becomes the item's segment); the item starts at
    /// `item_off`, the value `len` bytes long follows its header.
    InPlace {
        owned: Option<Box<[u8]>>,
        item_off: usize,
        len: usize,
    },
}

impl<'a> Source<'a> {
    /// How `value` is written for `mode`. A received buffer that cannot be adopted is copied
    /// from: `hold` keeps it alive for the borrow.
    pub fn of(
        mode: StoreMode,
        key: &[u8],
        flags: u32,
        value: Value<'a>,
        hold: &'a mut Option<Box<[u8]>>,
    ) -> Source<'a> {
        let (buf, at, len) = match value {
            Value::Bytes(v) => return Source::Copy(v),
            Value::Received { buf, at, len } => (buf, at, len),
        };
        match adoptable_at(mode, key.len(), flags, buf.len(), at, len) {
            Some(item_off) => Source::InPlace {
                owned: Some(buf),
                item_off,
                len,
            },
            None => {
                let buf = hold.insert(buf);
                let end = buf.len();
                Source::Copy(&buf[at.min(end)..(at + len).min(end)])
            }
        }
    }

    /// The value's length.
    pub fn len(&self) -> usize {
        match self {
            Source::Copy(v) => v.len(),
            Source::InPlace { len, .. } => *len,
        }
    }
}

/// Where the item starts when a value received at `at..at + len` of a `buf_len` buffer can
/// become the item in place: modes that replace the whole value, and room in front for the
/// header that is either exact or fits a dead filler item.
fn adoptable_at(
    mode: StoreMode,
    key_len: usize,
    flags: u32,
    buf_len: usize,
    at: usize,
    len: usize,
) -> Option<usize> {
    // The cas is not known yet: room for a wide one (`write_in_place` narrows it if it can).
    let head = item::max_header_len(key_len, len, flags);
    let room = at.checked_sub(head)?;
    let whole_value = matches!(
        mode,
        StoreMode::Set | StoreMode::Add | StoreMode::Replace | StoreMode::Cas(_)
    );
    let fits = at + len <= buf_len && (room == 0 || (item::MIN_ITEM..=16_000).contains(&room));
    (whole_value && fits).then_some(at - head)
}

/// One storage command as the shard decides it: the key's hash, the command and the new
/// value's length (its bytes are written only after the decision).
#[derive(Clone, Copy)]
pub(crate) struct StoreReq<'a> {
    pub h: u64,
    pub mode: StoreMode,
    pub key: &'a [u8],
    pub flags: u32,
    pub exptime: u32,
    pub vlen: usize,
    pub now: u32,
    pub opts: &'a StoreOpts,
}

/// Decides, finds memory and writes one storage command. `Err(NeedMem)`: the caller frees
/// memory elsewhere and calls again (an adopted buffer is only taken on success).
pub(crate) fn store_in_shard(
    s: &mut Shard,
    g: &Global,
    req: &StoreReq<'_>,
    src: &mut Source<'_>,
) -> Result<StoreOutcome, NeedMem> {
    let now = req.now;
    let planned = match src {
        Source::Copy(_) => plan_and_alloc(s, g, req, |s, g, size, q| s.alloc(g, size, now, q))?,
        Source::InPlace { owned, .. } => plan_and_alloc(s, g, req, |s, g, _, _| {
            let had_old = needs_old_item(req) && s.find_live(g, req.h, req.key, now).is_some();
            s.adopt_large(g, owned, |s, g| {
                !had_old || s.find_live(g, req.h, req.key, now).is_some()
            })
        })?,
    };
    let (plan, seg) = match planned {
        Ok(p) => p,
        Err(o) => return Ok(o),
    };
    let cas = req.opts.new_cas.unwrap_or_else(|| s.next_cas());
    let hdr = plan.header(cas, now);
    let off = match *src {
        Source::Copy(value) => write_copy(s, &plan, seg, &hdr, req.key, value),
        Source::InPlace { item_off, len, .. } => {
            s.write_in_place(seg, item_off, &hdr, req.key, len).0
        }
    };
    s.link(g, req.h, plan.old, seg, off);
    Ok(StoreOutcome {
        result: StoreResult::Stored,
        cas,
    })
}

/// Writes the new item into `seg`, with the old value around `value` for append/prepend.
fn write_copy(
    s: &mut Shard,
    plan: &Plan,
    seg: u32,
    hdr: &Header,
    key: &[u8],
    value: &[u8],
) -> usize {
    let total_len = plan.value_len;
    let (off, l) = s.write(seg, hdr, key, total_len, |dst| match plan.kind {
        Kind::New => dst.copy_from_slice(value),
        Kind::Append => dst[total_len - value.len()..].copy_from_slice(value),
        Kind::Prepend => dst[..value.len()].copy_from_slice(value),
    });
    if let Some(old) = plan.old {
        let old_len = old.l.value_len;
        let src = (old.seg, old.off + old.l.value);
        match plan.kind {
            Kind::Append => s.copy_value(src, old_len, (seg, off + l.value)),
            Kind::Prepend => s.copy_value(src, old_len, (seg, off + l.value + value.len())),
            Kind::New => {}
        }
    }
    off
}

#[derive(Clone, Copy)]
enum Kind {
    New,
    Append,
    Prepend,
}

struct Plan {
    old: Option<Found>,
    kind: Kind,
    flags: u32,
    exptime: u32,
    bits: u8,
    value_len: usize,
    size: usize,
    /// `-M`: every item gets an exptime field (see `Global::force_exptime`).
    force_exptime: bool,
}

impl Plan {
    fn header(&self, cas: u64, now: u32) -> Header {
        Header {
            bits: self.bits,
            cas,
            exptime: self.exptime,
            time: now,
            flags: self.flags,
            force_exptime: self.force_exptime,
        }
    }
}

/// Decides once to learn the size (and to skip allocation for a refusal), allocates with
/// `alloc(size)`, then decides again: allocation may have evicted or moved the old item.
/// `Ok(Err(outcome))` is a final refusal (anything allocated has been given back).
fn plan_and_alloc(
    s: &mut Shard,
    g: &Global,
    req: &StoreReq<'_>,
    alloc: impl FnOnce(&mut Shard, &Global, usize, Queue) -> Result<u32, NeedMem>,
) -> Result<Result<(Plan, u32), StoreOutcome>, NeedMem> {
    let plan = match plan_store(s, g, req, false) {
        Ok(p) => p,
        Err(o) => return Ok(Err(o)),
    };
    let q = s.queue_for_store(req.h, plan.old.as_ref());
    let seg = alloc(s, g, plan.size, q)?;
    // A command that needs the old item, which the allocation just evicted (to flash, say):
    // with memory found elsewhere, the caller's retry finds it again. A plain set does not
    // care; an adopted buffer is not given back, so that case is left to the final decision.
    // (An adopted buffer, which is not given back, was checked before it was taken.)
    let needs_old = plan.old.is_some() && needs_old_item(req) && !s.segs[seg].large();
    let old = s.find_live(g, req.h, req.key, req.now);
    if needs_old && old.is_none() {
        s.unalloc(g, seg);
        return Err(NeedMem);
    }
    match plan_found(s, g, req, true, old) {
        Ok(p) => Ok(Ok((p, seg))),
        Err(o) => {
            s.unalloc(g, seg);
            Ok(Err(o))
        }
    }
}

/// Whether the command's outcome depends on the key's old item (all but a plain set).
fn needs_old_item(req: &StoreReq<'_>) -> bool {
    req.mode != StoreMode::Set || req.opts.meta
}

/// memcached's do_store_item decision. `Err` is a final (non-stored) outcome, counted at
/// once; hits are counted on the final pass only.
fn plan_store(
    s: &mut Shard,
    g: &Global,
    req: &StoreReq<'_>,
    last: bool,
) -> Result<Plan, StoreOutcome> {
    let old = s.find_live(g, req.h, req.key, req.now);
    plan_found(s, g, req, last, old)
}

/// `plan_store` with the key's live item `old` already looked up.
fn plan_found(
    s: &mut Shard,
    g: &Global,
    req: &StoreReq<'_>,
    last: bool,
    old: Option<Found>,
) -> Result<Plan, StoreOutcome> {
    let StoreReq {
        h: _,
        mode,
        key,
        flags,
        exptime,
        vlen,
        now,
        opts,
    } = *req;
    let reject = |result| StoreOutcome { result, cas: 0 };
    let mut plan = Plan {
        old,
        kind: Kind::New,
        flags,
        exptime,
        bits: 0,
        value_len: vlen,
        size: 0,
        force_exptime: g.force_exptime(),
    };
    match (old, mode) {
        (None, StoreMode::Cas(_)) => {
            s.stats.cas_misses += 1;
            return Err(reject(StoreResult::NotFound));
        }
        (None, StoreMode::Replace | StoreMode::Append | StoreMode::Prepend) => {
            return Err(reject(StoreResult::NotStored));
        }
        (None, StoreMode::Set | StoreMode::Add) => {}
        (Some(o), _) => {
            let buf = s.buf(o.seg, o.off);
            let old_cas = item::cas(buf, &o.l);
            let old_bits = buf[0];
            let old_exptime = item::exptime(buf, &o.l);
            let old_flags = item::flags(buf, &o.l);
            let req_cas = match mode {
                StoreMode::Cas(c) => c,
                _ => opts.compare_cas,
            };
            let stale_ok = opts.invalidate && req_cas != 0 && req_cas < old_cas;
            match mode {
                StoreMode::Add => {
                    // memcached promotes the existing item on a failed add.
                    s.set_bits(&o, ACCESSED, 0);
                    return Err(reject(StoreResult::NotStored));
                }
                StoreMode::Cas(c) => {
                    if c != 0 && c == old_cas {
                        if last {
                            s.stats.cas_hits += 1;
                        }
                    } else if stale_ok {
                        if last {
                            s.stats.cas_hits += 1;
                        }
                        plan.exptime = old_exptime;
                        plan.bits = STALE | (old_bits & TOKEN_SENT);
                    } else {
                        s.stats.cas_badval += 1;
                        return Err(reject(StoreResult::Exists));
                    }
                }
                StoreMode::Append | StoreMode::Prepend => {
                    if req_cas != 0 && req_cas != old_cas {
                        return Err(reject(StoreResult::Exists));
                    }
                    plan.flags = old_flags;
                    plan.exptime = old_exptime;
                    plan.value_len = vlen + o.l.value_len;
                    plan.kind = if mode == StoreMode::Append {
                        Kind::Append
                    } else {
                        Kind::Prepend
                    };
                }
                StoreMode::Set | StoreMode::Replace => {}
            }
        }
    }
    let cas = opts.new_cas.unwrap_or_else(|| s.peek_cas());
    plan.size = plan.header(cas, now).encoded_len(key.len(), plan.value_len);
    Ok(plan)
}

/// memcached drops the old value when a set is refused (too large, out of memory).
pub(crate) fn unlink_after_failed_set(s: &mut Shard, g: &Global, h: u64, key: &[u8]) {
    if let Some(f) = s.find(h, key) {
        s.unlink(f, Unlink::Deleted);
    }
    s.flash_unlink(g, h, true);
    s.settle(g);
}

#[cfg(test)]
mod tests {
    use super::Source;
    use crate::test_util::*;
    use crate::*;

    /// How `Source::of` takes a value received `in_front` bytes into its buffer.
    fn source_of(mode: StoreMode, in_front: usize, len: usize) -> Option<usize> {
        let (buf, at) = received(&vec![b'v'; len], in_front);
        let mut hold = None;
        let value = Value::Received { buf, at, len };
        match Source::of(mode, b"key", 0, value, &mut hold) {
            Source::InPlace {
                item_off, len: l, ..
            } => {
                assert_eq!(l, len);
                assert!(hold.is_none());
                Some(item_off)
            }
            Source::Copy(v) => {
                assert_eq!(v, &vec![b'v'; len][..]);
                None
            }
        }
    }

    #[test]
    fn a_received_value_is_adopted_only_with_room_for_header_or_filler() {
        let len = 70_000;
        // key 3 + bits/key_len 2 + varint 3 + cas 8, exptime 4, time 2 = 22 header bytes
        // (room for a wide cas and an exptime: the cas is not known until the item is
        // written; the smaller header it may get leaves a longer filler in front).
        let head = 22;
        assert_eq!(source_of(StoreMode::Set, head, len), Some(0));
        assert_eq!(source_of(StoreMode::Add, head + 15, len), Some(15));
        assert_eq!(
            source_of(StoreMode::Cas(9), head + 16_000, len),
            Some(16_000)
        );
        assert_eq!(source_of(StoreMode::Replace, head + 100, len), Some(100));
        // Too little room for a header, or for a filler in front of it: copied.
        assert_eq!(source_of(StoreMode::Set, head - 1, len), None);
        assert_eq!(source_of(StoreMode::Set, head + 8, len), None);
        assert_eq!(source_of(StoreMode::Set, head + 9, len), Some(9));
        assert_eq!(source_of(StoreMode::Set, head + 16_001, len), None);
        // Modes that keep the old value are copied.
        assert_eq!(source_of(StoreMode::Append, head, len), None);
        assert_eq!(source_of(StoreMode::Prepend, head, len), None);
    }

    #[test]
    fn a_received_value_past_its_buffer_is_copied_clipped() {
        let (buf, at) = received(b"abc", 40);
        let mut hold = None;
        let value = Value::Received { buf, at, len: 10 };
        match Source::of(StoreMode::Set, b"k", 0, value, &mut hold) {
            Source::Copy(v) => assert_eq!(v, b"abc"),
            Source::InPlace { .. } => panic!("adopted a value that does not fit its buffer"),
        }
        let mut hold = None;
        let src = Source::of(StoreMode::Set, b"k", 0, Value::Bytes(b"xyz"), &mut hold);
        assert_eq!(src.len(), 3);
    }

    #[test]
    fn set_get_flags_and_unique_cas() {
        let s = store_mb(8);
        let a = s.store(
            StoreRequest::new(StoreMode::Set, b"k", b"hello").flags(42),
            T0,
        );
        assert_eq!(a.result, StoreResult::Stored);
        assert_eq!(get(&s, "k", T0), Some((b"hello".to_vec(), 42, a.cas)));
        let b = set(&s, "k", "world", T0);
        assert_ne!(a.cas, b.cas);
        assert_eq!(get(&s, "k", T0), Some((b"world".to_vec(), 0, b.cas)));
        assert_eq!(get(&s, "missing", T0), None);
        let mut seen = std::collections::HashSet::new();
        for i in 0..1000 {
            assert!(seen.insert(set(&s, &format!("key{i}"), "v", T0).cas));
        }
        let st = s.stats();
        assert_eq!(st.counters.curr_items, 1001);
        assert_eq!(st.counters.total_items, 1002);
        assert_eq!(s.len(), 1001);
    }

    #[test]
    fn add_replace_append_prepend() {
        let s = store_mb(8);
        assert_eq!(
            s.store(StoreRequest::new(StoreMode::Replace, b"k", b"x"), T0)
                .result,
            StoreResult::NotStored
        );
        assert_eq!(
            s.store(StoreRequest::new(StoreMode::Append, b"k", b"x"), T0)
                .result,
            StoreResult::NotStored
        );
        assert_eq!(
            s.store(StoreRequest::new(StoreMode::Prepend, b"k", b"x"), T0)
                .result,
            StoreResult::NotStored
        );
        let exp = s.exptime(100, T0);
        assert_eq!(
            s.store(
                StoreRequest::new(StoreMode::Add, b"k", b"mid")
                    .flags(7)
                    .exptime(exp),
                T0
            )
            .result,
            StoreResult::Stored
        );
        assert_eq!(
            s.store(StoreRequest::new(StoreMode::Add, b"k", b"again"), T0)
                .result,
            StoreResult::NotStored
        );
        // append/prepend keep the original flags and exptime.
        let r = s.store(
            StoreRequest::new(StoreMode::Append, b"k", b">>").flags(99),
            T0,
        );
        assert_eq!(r.result, StoreResult::Stored);
        assert_eq!(
            s.store(
                StoreRequest::new(StoreMode::Prepend, b"k", b"<<").flags(98),
                T0
            )
            .result,
            StoreResult::Stored
        );
        s.peek(b"k", T0, |v| {
            let v = v.unwrap();
            assert_eq!(v.value, b"<<mid>>");
            assert_eq!(v.flags, 7);
            assert_eq!(v.exptime, exp);
            assert_eq!(v.ttl_remaining, 100);
        });
        assert_eq!(
            s.store(
                StoreRequest::new(StoreMode::Replace, b"k", b"new").flags(1),
                T0
            )
            .result,
            StoreResult::Stored
        );
        assert_eq!(get(&s, "k", T0).unwrap().1, 1);
        // meta append with a compare cas.
        let cas = get(&s, "k", T0).unwrap().2;
        let o = StoreOpts {
            compare_cas: cas + 1,
            ..StoreOpts::default()
        };
        assert_eq!(
            s.store(StoreRequest::new(StoreMode::Append, b"k", b"!").opts(o), T0)
                .result,
            StoreResult::Exists
        );
        let o = StoreOpts {
            compare_cas: cas,
            ..StoreOpts::default()
        };
        assert_eq!(
            s.store(StoreRequest::new(StoreMode::Append, b"k", b"!").opts(o), T0)
                .result,
            StoreResult::Stored
        );
        assert_eq!(val(&s, "k", T0).unwrap(), "new!");
    }

    #[test]
    fn cas_command() {
        let s = store_mb(8);
        assert_eq!(
            s.store(StoreRequest::new(StoreMode::Cas(5), b"k", b"x"), T0)
                .result,
            StoreResult::NotFound
        );
        let c = set(&s, "k", "v1", T0).cas;
        assert_eq!(
            s.store(StoreRequest::new(StoreMode::Cas(c + 1000), b"k", b"x"), T0)
                .result,
            StoreResult::Exists
        );
        assert_eq!(
            s.store(StoreRequest::new(StoreMode::Cas(0), b"k", b"x"), T0)
                .result,
            StoreResult::Exists
        );
        let o = s.store(StoreRequest::new(StoreMode::Cas(c), b"k", b"v2"), T0);
        assert_eq!(o.result, StoreResult::Stored);
        assert_ne!(o.cas, c);
        assert_eq!(
            s.store(StoreRequest::new(StoreMode::Cas(c), b"k", b"v3"), T0)
                .result,
            StoreResult::Exists
        );
        let st = s.stats().counters;
        assert_eq!((st.cas_misses, st.cas_hits, st.cas_badval), (1, 1, 3));
        // E: explicit new cas.
        let o = s.store(
            StoreRequest::new(StoreMode::Set, b"k", b"e").opts(StoreOpts {
                new_cas: Some(777),
                ..StoreOpts::default()
            }),
            T0,
        );
        assert_eq!(o.cas, 777);
        assert_eq!(get(&s, "k", T0).unwrap().2, 777);
    }

    #[test]
    fn ms_invalidate_stores_stale_when_cas_is_older() {
        let s = store_mb(8);
        let c1 = s
            .store(
                StoreRequest::new(StoreMode::Set, b"k", b"v1").exptime(T0 + 100),
                T0,
            )
            .cas;
        let inv = DeleteOpts {
            invalidate: true,
            ..DeleteOpts::default()
        };
        s.delete(b"k", T0, &inv);
        // A winner with the older cas writes back: stored, but stays stale and keeps the TTL.
        let o = StoreOpts {
            invalidate: true,
            ..StoreOpts::default()
        };
        let r = s.store(
            StoreRequest::new(StoreMode::Cas(c1), b"k", b"v2").opts(o),
            T0,
        );
        assert_eq!(r.result, StoreResult::Stored);
        s.peek(b"k", T0, |v| {
            let v = v.unwrap();
            assert!(v.stale);
            assert_eq!(v.value, b"v2");
            assert_eq!(v.exptime, T0 + 100);
        });
        // Without I the same cas is just a mismatch.
        let c = get(&s, "k", T0).unwrap().2;
        let r = s.store(StoreRequest::new(StoreMode::Cas(c - 1), b"k", b"v3"), T0);
        assert_eq!(r.result, StoreResult::Exists);
    }

    #[test]
    fn too_large_and_large_items() {
        let s = store_mb(8);
        let big = vec![b'x'; (1 << 20) - 48 - 8 - 2 - 2 - 1];
        assert_eq!(
            s.store(StoreRequest::new(StoreMode::Set, b"k", &big), T0)
                .result,
            StoreResult::Stored
        );
        s.peek(b"k", T0, |v| assert_eq!(v.unwrap().value.len(), big.len()));
        assert_eq!(s.stats().large_items, 1);
        let bigger = vec![b'x'; 1 << 20];
        assert_eq!(
            s.store(StoreRequest::new(StoreMode::Set, b"k", &bigger), T0)
                .result,
            StoreResult::TooLarge
        );
        // A failed set removes the old value (memcached avoids serving stale data).
        assert_eq!(val(&s, "k", T0), None);
        assert_eq!(s.stats().large_items, 0);
        // Appending to a large item.
        s.store(
            StoreRequest::new(StoreMode::Set, b"l", &vec![b'a'; 100_000]),
            T0,
        );
        s.store(StoreRequest::new(StoreMode::Append, b"l", b"tail"), T0);
        s.peek(b"l", T0, |v| {
            let v = v.unwrap().value;
            assert_eq!(v.len(), 100_004);
            assert_eq!(&v[99_998..], b"aatail");
        });
    }

    #[test]
    fn a_value_received_in_place_is_stored_without_a_copy() {
        let s = store_mb(64);
        let value: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let (buf, at) = received(&value, 64);
        let where_received = buf[at..].as_ptr();
        let r = s.store(
            StoreRequest::received(StoreMode::Set, b"big", buf, at, value.len()).flags(7),
            T0,
        );
        assert_eq!(r.result, StoreResult::Stored);
        let (ptr, got) = s
            .get(b"big", T0, |v| {
                v.map(|v| (v.value.as_ptr(), v.value.to_vec()))
            })
            .unwrap();
        assert_eq!(ptr, where_received);
        assert_eq!(got, value);
        assert_eq!(get(&s, "big", T0).map(|(_, f, c)| (f, c)), Some((7, r.cas)));
        // Modes keep their rules: add refuses an existing key, cas compares.
        let (buf, at) = received(&value, 64);
        let add = s.store(
            StoreRequest::received(StoreMode::Add, b"big", buf, at, value.len()),
            T0,
        );
        assert_eq!(add.result, StoreResult::NotStored);
        let (buf, at) = received(b"new", 40);
        let cas = s.store(
            StoreRequest::received(StoreMode::Cas(r.cas + 1), b"big", buf, at, 3),
            T0,
        );
        assert_eq!(cas.result, StoreResult::Exists);
        let (buf, at) = received(b"new", 40);
        let cas = s.store(
            StoreRequest::received(StoreMode::Cas(r.cas), b"big", buf, at, 3),
            T0,
        );
        assert_eq!(cas.result, StoreResult::Stored);
        assert_eq!(val(&s, "big", T0).as_deref(), Some("new"));
        // No room for a header in front: stored by copying.
        let (buf, at) = received(b"tight", 3);
        let r = s.store(
            StoreRequest::received(StoreMode::Set, b"tight", buf, at, 5),
            T0,
        );
        assert_eq!(r.result, StoreResult::Stored);
        assert_eq!(val(&s, "tight", T0).as_deref(), Some("tight"));
        // Append copies (it needs the old value too).
        let (buf, at) = received(b"!", 64);
        let r = s.store(
            StoreRequest::received(StoreMode::Append, b"tight", buf, at, 1),
            T0,
        );
        assert_eq!(r.result, StoreResult::Stored);
        assert_eq!(val(&s, "tight", T0).as_deref(), Some("tight!"));
    }

    #[test]
    fn values_received_in_place_survive_eviction_expiry_and_reclaim() {
        // 4 MiB: 100 KB values evict each other; the filler in front of every value must keep
        // segment walks (eviction, reclaim, flush) on item boundaries.
        let s = store_mb(4);
        for i in 0..200u32 {
            let value = vec![b'a' + (i % 26) as u8; 100_000 + i as usize];
            let in_front = 19 + (i as usize * 7) % 200;
            let (buf, at) = received(&value, in_front + 30);
            let exptime = if i % 3 == 0 { T0 + 5 } else { 0 };
            let key = format!("v{i}");
            let r = s.store(
                StoreRequest::received(StoreMode::Set, key.as_bytes(), buf, at, value.len())
                    .exptime(exptime),
                T0,
            );
            assert_eq!(r.result, StoreResult::Stored);
        }
        assert!(s.stats().counters.evictions > 0);
        s.reclaim(T0 + 10, 100_000);
        for i in 0..200u32 {
            if let Some(v) = val(&s, &format!("v{i}"), T0 + 10) {
                assert_eq!(v.len(), 100_000 + i as usize);
                assert!(v.bytes().all(|b| b == b'a' + (i % 26) as u8));
                assert_ne!(i % 3, 0, "v{i} expired");
            }
        }
        s.flush_all(0, T0 + 10);
        assert!((0..200).all(|i| val(&s, &format!("v{i}"), T0 + 11).is_none()));
        assert!(s.mem_used() <= s.mem_limit());
    }
}
