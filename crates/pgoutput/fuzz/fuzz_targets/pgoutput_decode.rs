#![no_main]
//! Arbitrary bytes as one pgoutput message (the payload of an XLogData from the replication
//! stream): decoding must return a message or an error, never panic, and never allocate
//! more than the input holds (run with `-malloc_limit_mb=64`). A decoded message must
//! encode and decode back to itself, and the encoding must be the input except for the
//! column flag bits the decoder does not keep.

use libfuzzer_sys::fuzz_target;

use pgoutput::{decode, encode, Message};

fuzz_target!(|data: &[u8]| {
    let Ok(message) = decode(data) else {
        return;
    };
    let bytes = encode::message(&message);
    assert_eq!(decode(&bytes).as_ref(), Ok(&message));
    if !matches!(message, Message::Relation { .. }) {
        assert_eq!(bytes, data, "re-encoded {message:?}");
    } else {
        assert_eq!(bytes.len(), data.len());
    }
});
