use super::super::get_batch::Member;
use super::*;
use proto::response::Framer;

#[test]
fn a_failed_merged_get_answers_only_those_still_waiting() {
    let to = |client| ReplyTo {
        client,
        gen: 1,
        seq: 0,
        frag: 0,
    };
    let mut batch = GetBatch::default();
    batch.push(
        Member {
            to: to(1),
            nkeys: 0,
        },
        [&b"a"[..]],
    );
    batch.push(
        Member {
            to: to(2),
            nkeys: 0,
        },
        [&b"b"[..]],
    );
    // a's item and b's, whole: 1 is answered before the connection fails
    let partial = b"VALUE a 0 1\r\nA\r\nVALUE b 0 1\r\nB\r\n";
    let mut framer = Framer::new();
    framer.next(partial, Expect::Get, batch.asked());
    let items = framer.items_so_far().to_vec();
    let mut answered = Vec::new();
    let mut scratch = Default::default();
    batch.split_partial(partial, &items, &mut scratch, |m, _, _| {
        answered.push(m.to.client)
    });
    assert_eq!(answered, [1]);
    let p = Pending {
        to: to(1),
        expect: Expect::Get,
        at: Instant::now(),
        bytes: 0,
        reqs: 2,
        batch: Some(Box::new(batch)),
        resend: None,
    };
    assert_eq!(p.targets().map(|t| t.client).collect::<Vec<_>>(), [2]);
}

#[test]
fn redis_handshake_sends_only_what_is_configured() {
    let mut out = Vec::new();
    assert_eq!(redis_handshake(None, 0, &mut out), 0);
    assert!(out.is_empty());
    assert_eq!(redis_handshake(Some((None, "pw")), 3, &mut out), 2);
    assert_eq!(
        out,
        b"*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n*2\r\n$6\r\nSELECT\r\n$1\r\n3\r\n"
    );
    out.clear();
    assert_eq!(redis_handshake(None, 1, &mut out), 1);
    assert!(out.starts_with(b"*2\r\n$6\r\nSELECT"));
    out.clear();
    assert_eq!(redis_handshake(Some((Some("app"), "pw")), 0, &mut out), 1);
    assert_eq!(out, b"*3\r\n$4\r\nAUTH\r\n$3\r\napp\r\n$2\r\npw\r\n");
}

proptest::proptest! {
    /// Kept bytes come out as a plain queue of them would give them, across the moves
    /// down and the emptying.
    #[test]
    fn resend_bytes_is_a_queue(ops in proptest::collection::vec((0usize..3000, proptest::bool::ANY), 1..200)) {
        let mut kept = ResendBytes::default();
        let mut model: VecDeque<Vec<u8>> = VecDeque::new();
        let mut n = 0u8;
        for (len, push) in ops {
            if push || model.is_empty() {
                n = n.wrapping_add(1);
                let frame: Vec<u8> = (0..len).map(|i| n ^ i as u8).collect();
                kept.push(&frame);
                model.push_back(frame);
            } else {
                let frame = model.pop_front().unwrap();
                proptest::prop_assert_eq!(kept.front(frame.len()), &frame[..]);
                kept.pop_front(frame.len());
            }
        }
        for frame in model {
            proptest::prop_assert_eq!(kept.front(frame.len()), &frame[..]);
            kept.pop_front(frame.len());
        }
        proptest::prop_assert!(kept.buf.is_empty() && kept.head == 0);
    }
}
