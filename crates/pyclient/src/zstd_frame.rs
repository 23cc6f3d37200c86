//! What a zstd frame's first bytes say about the entropy tables its sequences use: the managed
//! dictionaries' checksum rule (clients/python/src/memfleet/_dicts.py). Read with another
//! dictionary of the same id, a frame whose sequences all take the dictionary's tables fails
//! zstd's own checks; any other frame needs the content checksum to fail. Layout: RFC 8878, 3.1.

/// The mode "Repeat" of all three sequence codes (literal lengths, offsets, match lengths): the
/// tables of the dictionary, which is where a frame's first block takes "previous" tables from.
const ALL_REPEAT: u8 = 0b1111_1100;

/// Whether `frame` is one compressed block with at least one sequence, whose literal lengths,
/// offsets and match lengths are all coded with the dictionary's tables.
pub fn sequences_use_dictionary_tables(frame: &[u8]) -> bool {
    sequence_modes(frame).is_some_and(|modes| modes & ALL_REPEAT == ALL_REPEAT)
}

/// The Symbol_Compression_Modes byte of a frame made of one compressed block with sequences.
fn sequence_modes(frame: &[u8]) -> Option<u8> {
    let descriptor = *frame.get(4)?;
    let single_segment = descriptor & 0x20 != 0;
    let window = usize::from(!single_segment);
    let dict_id = [0, 1, 2, 4][usize::from(descriptor & 3)];
    let content_size = [usize::from(single_segment), 2, 4, 8][usize::from(descriptor >> 6)];
    let block = 4 + 1 + window + dict_id + content_size;
    // bit 0: the last block; bits 1-2: block type 2, compressed
    if *frame.get(block)? & 7 != 5 {
        return None;
    }
    let literals = block + 3;
    let first = *frame.get(literals)?;
    let size_format = usize::from((first >> 2) & 3);
    let header_value = |len: usize| -> Option<u64> {
        let bytes = frame.get(literals..literals + len)?;
        Some(bytes.iter().rev().fold(0, |v, &b| v << 8 | u64::from(b)))
    };
    let sequences = if first & 3 < 2 {
        // raw or RLE literals: a 1-3 byte header with the size, then the bytes or the one byte
        let len = [1, 2, 1, 3][size_format];
        let size = if len == 1 {
            u64::from(first >> 3)
        } else {
            header_value(len)? >> 4
        };
        let body = if first & 3 == 0 { size } else { 1 };
        literals + len + usize::try_from(body).ok()?
    } else {
        // Huffman-coded: a 3-5 byte header, the coded size after the regenerated size
        let len = [3, 3, 4, 5][size_format];
        let coded = header_value(len)? >> [14, 14, 18, 22][size_format];
        literals + len + usize::try_from(coded).ok()?
    };
    let count = *frame.get(sequences)?;
    let count_len = match count {
        0 => return None,
        1..=127 => 1,
        128..=254 => 2,
        255 => 3,
    };
    frame.get(sequences + count_len).copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A single-segment frame with a 4-byte dictionary id and one block.
    fn frame(block_bits: u32, literals: &[u8], count: &[u8], modes: u8) -> Vec<u8> {
        let mut body = literals.to_vec();
        body.extend_from_slice(count);
        body.push(modes);
        body.extend_from_slice(&[0; 6]);
        let mut f = vec![0x28, 0xb5, 0x2f, 0xfd, 0x23];
        f.extend_from_slice(&77777u32.to_le_bytes());
        f.push(0x40); // content size, one byte
        let header = (body.len() as u32) << 3 | block_bits;
        f.extend_from_slice(&header.to_le_bytes()[..3]);
        f.extend_from_slice(&body);
        f
    }

    const RAW_ABC: &[u8] = b"\x18abc"; // raw literals, 1-byte header, 3 bytes

    #[test]
    fn all_three_codes_with_the_dictionarys_tables() {
        assert!(sequences_use_dictionary_tables(&frame(
            5,
            RAW_ABC,
            &[2],
            0xFC
        )));
        for modes in [0xF0, 0xCC, 0x3C, 0x00, 0xA8] {
            assert!(
                !sequences_use_dictionary_tables(&frame(5, RAW_ABC, &[2], modes)),
                "{modes:#x}"
            );
        }
    }

    #[test]
    fn sequence_counts_of_one_two_and_three_bytes() {
        assert!(sequences_use_dictionary_tables(&frame(
            5,
            RAW_ABC,
            &[0x81, 0],
            0xFC
        )));
        assert!(sequences_use_dictionary_tables(&frame(
            5,
            RAW_ABC,
            &[0xff, 0, 1],
            0xFC
        )));
        assert!(!sequences_use_dictionary_tables(&frame(
            5,
            RAW_ABC,
            &[0],
            0xFC
        )));
    }

    #[test]
    fn literal_headers_of_every_size() {
        // raw: 2- and 3-byte headers; RLE: one byte of literal whatever the size
        let raw2 = [&((5u32 << 4) | 0b0100).to_le_bytes()[..2], b"abcde"].concat();
        let raw3 = [&((5u32 << 4) | 0b1100).to_le_bytes()[..3], b"abcde"].concat();
        let rle = [0b1001_0001u8, b'a'];
        for literals in [&raw2[..], &raw3[..], &rle[..]] {
            assert!(sequences_use_dictionary_tables(&frame(
                5,
                literals,
                &[2],
                0xFC
            )));
            assert!(!sequences_use_dictionary_tables(&frame(
                5,
                literals,
                &[2],
                0xF0
            )));
        }
        // Huffman-coded with the dictionary's table, 2 bytes coded: headers of 3, 4 and 5 bytes
        for (size_format, len, shift) in [(0u64, 3, 14), (2, 4, 18), (3, 5, 22)] {
            let value = 3 | size_format << 2 | 2 << shift;
            let literals = [&value.to_le_bytes()[..len], b"xx"].concat();
            assert!(sequences_use_dictionary_tables(&frame(
                5,
                &literals,
                &[2],
                0xFC
            )));
            assert!(!sequences_use_dictionary_tables(&frame(
                5,
                &literals,
                &[2],
                0xF0
            )));
        }
    }

    #[test]
    fn other_blocks_and_short_frames() {
        let raw_block = frame(1, RAW_ABC, &[2], 0xFC);
        let not_last = frame(4, RAW_ABC, &[2], 0xFC);
        assert!(!sequences_use_dictionary_tables(&raw_block));
        assert!(!sequences_use_dictionary_tables(&not_last));
        let whole = frame(5, RAW_ABC, &[2], 0xFC);
        let modes_at = whole.len() - 7;
        for cut in 0..=modes_at {
            assert!(!sequences_use_dictionary_tables(&whole[..cut]), "{cut}");
        }
        assert!(sequences_use_dictionary_tables(&whole[..=modes_at]));
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Frames libzstd 1.5.7 wrote (python-zstandard 0.25): a msgpack profile with a trained
    /// dictionary at level 3 (single segment, 4-byte id, 2-byte content size; treeless literals,
    /// all three codes "repeat"), and the same with a window byte, a 2-byte id and no content
    /// size; 300 bytes of that dictionary, copied with the default tables; text without a
    /// dictionary.
    #[test]
    fn frames_libzstd_wrote() {
        let profile = hex(concat!(
            "28b52ffd6385db7b4c2100050400d3c5136f8686d980f46f20975fb984e6715653f3844db3413aef2f",
            "2a3303ba6d20670865def0447481041c04ed67323d13ba898c2d976011e6771c9b69d8e012834751da",
            "5aa5ec15da3ea590d53f120d060413fc3a407f3440978a9399816097c3ed6311e7b359f32cb6a25399",
            "0ac0e9702f6a20a1192e48773ec055a1f63107"
        ));
        let copy = hex("28b52ffd6385db7b4c2c0065000000023c0c2fe905c0f7970202");
        let text = hex("28b52ffd0000d500006068656c6c6f20776f726c642c040000a1288001f04c4abc5204");
        assert!(sequences_use_dictionary_tables(&profile));
        // the same block after a header with a window byte, a 2-byte id and no content size
        let windowed = [&hex("28b52ffd0200409c")[..], &profile[11..]].concat();
        assert!(sequences_use_dictionary_tables(&windowed));
        assert!(!sequences_use_dictionary_tables(&copy));
        assert!(!sequences_use_dictionary_tables(&text));
    }

    proptest! {
        #[test]
        fn any_bytes_give_an_answer(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = sequences_use_dictionary_tables(&bytes);
        }

        #[test]
        fn any_frame_header_and_literals_size(descriptor in any::<u8>(), literals in any::<[u8; 5]>(), modes in any::<u8>()) {
            let mut f = vec![0x28, 0xb5, 0x2f, 0xfd, descriptor];
            f.extend_from_slice(&[0; 13]);
            f.extend_from_slice(&literals);
            f.push(2);
            f.push(modes);
            let _ = sequences_use_dictionary_tables(&f);
        }
    }
}
