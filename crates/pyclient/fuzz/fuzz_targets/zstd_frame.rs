#![no_main]
//! Arbitrary bytes as a zstd frame for the managed dictionaries' checksum rule
//! (`pyclient::zstd_frame`): an answer for any input, decided by the bytes up to the sequence
//! modes: bytes after a frame that qualifies do not change the answer.

use libfuzzer_sys::fuzz_target;
use pyclient::zstd_frame::sequences_use_dictionary_tables;

fuzz_target!(|data: &[u8]| {
    let Some((&cut, frame)) = data.split_first() else {
        return;
    };
    let cut = usize::from(cut).min(frame.len());
    if sequences_use_dictionary_tables(&frame[..cut]) {
        assert!(
            sequences_use_dictionary_tables(frame),
            "more bytes changed the answer"
        );
    }
});
