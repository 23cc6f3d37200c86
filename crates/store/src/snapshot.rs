//! The warm-restart file format (`memfleet serve -e FILE`): items as key, value, flags, cas and
//! absolute exptime, independent of how the store lays them out in memory, so a new build
//! with another segment layout still reads a file an older build wrote.
//!
//! ```text
//! file   = MAGIC  frame(HEADER)  frame(ITEMS)*  frame(END)
//! frame  = kind u8 | payload length u32 | crc32 of kind, length and payload u32 | payload
//! HEADER = format u32 | mem_limit u64 | item_size_max u64 | saved_at u32 | items u64
//!          | version_len u16 | version
//! ITEMS  = record*   (about `BLOCK_TARGET` bytes; one large item may make a block longer)
//! record = key_len u8 | flags u32 | cas u64 | exptime u32 | value_len u32 | key | value
//! END    = item count u64 | largest cas u64
//! ```
//! Integers are little-endian. Every frame carries its own checksum, and the END frame's count
//! must match the records read, so a flipped bit, a truncated file (no END frame) or bytes
//! after END are all refused: a reader never returns an unchecked record.

use std::fmt;
use std::io::{self, Read};

use proto::KEY_MAX_LENGTH;

/// First bytes of every snapshot file.
pub const MAGIC: [u8; 8] = *b"MFWARM\r\n";
/// Version of this format; a file of another version is refused.
pub const FORMAT: u32 = 1;
/// An ITEMS block is closed once it holds this many bytes.
pub const BLOCK_TARGET: usize = 1 << 20;
/// Bytes of a frame before its payload.
pub const FRAME_HEAD: usize = 9;
/// Bytes of a record before its key.
pub const RECORD_HEAD: usize = 21;

const HEADER: u8 = b'H';
const ITEMS: u8 = b'I';
const END: u8 = b'E';
/// The largest HEADER payload accepted (the version string is short).
const HEADER_MAX: u32 = 4096;

/// What the file says about the server that wrote it; a reader compares it with its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// `-m` in bytes.
    pub mem_limit: u64,
    /// `-I` in bytes.
    pub item_size_max: u64,
    /// Unix time the file was written.
    pub saved_at: u32,
    /// Items the store held when saving began: a hint to size the index (the END frame
    /// has the count of records written).
    pub items: u64,
    /// The writing server's version string (informational).
    pub version: String,
}

/// One item as saved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    /// 1..=250 bytes.
    pub key: &'a [u8],
    /// The value without the protocol's trailing CRLF.
    pub value: &'a [u8],
    /// Client flags.
    pub flags: u32,
    /// The item's cas unique.
    pub cas: u64,
    /// Absolute unix expiry, 0 = never.
    pub exptime: u32,
}

/// Why a snapshot could not be read.
#[derive(Debug)]
pub enum SnapshotError {
    /// Reading failed.
    Io(io::Error),
    /// The file does not start with `MAGIC`.
    NotSnapshot,
    /// The file is of another format version.
    Format(u32),
    /// The file was written with another `-m` or `-I`.
    Mismatch {
        /// Which setting differs.
        what: &'static str,
        /// The file's value.
        file: u64,
        /// This server's value.
        ours: u64,
    },
    /// A checksum did not match, a length was impossible, or a record was malformed.
    Corrupt(String),
    /// The file ends before its END frame.
    Truncated,
}

impl fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SnapshotError::Io(e) => write!(f, "read error: {e}"),
            SnapshotError::NotSnapshot => write!(f, "not a memfleet warm-restart file"),
            SnapshotError::Format(v) => {
                write!(
                    f,
                    "file format version {v}, this server reads version {FORMAT}"
                )
            }
            SnapshotError::Mismatch { what, file, ours } => {
                write!(f, "saved with {what} {file}, this server has {ours}")
            }
            SnapshotError::Corrupt(why) => write!(f, "corrupt: {why}"),
            SnapshotError::Truncated => write!(f, "truncated (no end marker)"),
        }
    }
}

impl std::error::Error for SnapshotError {}

impl From<io::Error> for SnapshotError {
    fn from(e: io::Error) -> Self {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            SnapshotError::Truncated
        } else {
            SnapshotError::Io(e)
        }
    }
}

fn corrupt(why: impl Into<String>) -> SnapshotError {
    SnapshotError::Corrupt(why.into())
}

/// Builds a snapshot in memory-bounded pieces: the caller writes out what `header`,
/// `take_block` and `finish` return, in order.
#[derive(Default)]
pub struct Writer {
    block: Vec<u8>,
    /// The block was handed out framed; the next record starts a new one.
    framed: bool,
    items: u64,
    max_cas: u64,
}

impl Writer {
    /// A writer with an empty first block.
    pub fn new() -> Writer {
        Writer::default()
    }

    /// The file's first bytes: `MAGIC` and the HEADER frame.
    pub fn header(h: &Header) -> Vec<u8> {
        let version = &h.version.as_bytes()[..h.version.len().min(1024)];
        let mut p = Vec::with_capacity(32 + version.len());
        p.extend_from_slice(&FORMAT.to_le_bytes());
        p.extend_from_slice(&h.mem_limit.to_le_bytes());
        p.extend_from_slice(&h.item_size_max.to_le_bytes());
        p.extend_from_slice(&h.saved_at.to_le_bytes());
        p.extend_from_slice(&h.items.to_le_bytes());
        p.extend_from_slice(&(version.len() as u16).to_le_bytes());
        p.extend_from_slice(version);
        let mut out = MAGIC.to_vec();
        frame(HEADER, &p, &mut out);
        out
    }

    /// Adds one item. True when the block is full: write `take_block()` out next.
    pub fn push(&mut self, r: &Record<'_>) -> bool {
        if self.framed || self.block.is_empty() {
            self.block.clear();
            self.block.resize(FRAME_HEAD, 0);
            self.framed = false;
        }
        let b = &mut self.block;
        b.push(r.key.len() as u8);
        b.extend_from_slice(&r.flags.to_le_bytes());
        b.extend_from_slice(&r.cas.to_le_bytes());
        b.extend_from_slice(&r.exptime.to_le_bytes());
        b.extend_from_slice(&(r.value.len() as u32).to_le_bytes());
        b.extend_from_slice(r.key);
        b.extend_from_slice(r.value);
        self.items += 1;
        self.max_cas = self.max_cas.max(r.cas);
        self.block.len() >= BLOCK_TARGET
    }

    /// Items pushed so far.
    pub fn items(&self) -> u64 {
        self.items
    }

    /// The current block as an ITEMS frame (empty if it holds no record).
    pub fn take_block(&mut self) -> &[u8] {
        if self.framed || self.block.len() <= FRAME_HEAD {
            return &[];
        }
        seal(ITEMS, &mut self.block);
        self.framed = true;
        &self.block
    }

    /// The last ITEMS frame, if any, and the END frame.
    pub fn finish(mut self) -> Vec<u8> {
        let mut out = self.take_block().to_vec();
        let mut end = Vec::with_capacity(16);
        end.extend_from_slice(&self.items.to_le_bytes());
        end.extend_from_slice(&self.max_cas.to_le_bytes());
        frame(END, &end, &mut out);
        out
    }
}

/// Fills in the frame head reserved at the start of `block`.
fn seal(kind: u8, block: &mut [u8]) {
    let len = (block.len() - FRAME_HEAD) as u32;
    block[0] = kind;
    block[1..5].copy_from_slice(&len.to_le_bytes());
    let crc = checksum(&block[..5], &block[FRAME_HEAD..]);
    block[5..9].copy_from_slice(&crc.to_le_bytes());
}

fn frame(kind: u8, payload: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    out.resize(start + FRAME_HEAD, 0);
    out.extend_from_slice(payload);
    seal(kind, &mut out[start..]);
}

fn checksum(head: &[u8], payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(head);
    h.update(payload);
    h.finalize()
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Reads a snapshot frame by frame, checking each before anything in it is returned.
pub struct Reader<R> {
    src: R,
    header: Header,
    block: Vec<u8>,
    items: u64,
    max_cas: u64,
    done: bool,
}

impl<R: Read> Reader<R> {
    /// Reads and checks the magic and the HEADER frame.
    pub fn open(mut src: R) -> Result<Reader<R>, SnapshotError> {
        let mut magic = [0u8; 8];
        src.read_exact(&mut magic).map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof => SnapshotError::NotSnapshot,
            _ => SnapshotError::Io(e),
        })?;
        if magic != MAGIC {
            return Err(SnapshotError::NotSnapshot);
        }
        let mut p = Vec::new();
        let kind = read_frame(&mut src, &mut p, HEADER_MAX as usize)?;
        if kind != HEADER || p.len() < 34 {
            return Err(corrupt("bad header frame"));
        }
        let format = u32_at(&p, 0);
        if format != FORMAT {
            return Err(SnapshotError::Format(format));
        }
        let vlen = u16::from_le_bytes([p[32], p[33]]) as usize;
        if p.len() != 34 + vlen {
            return Err(corrupt("bad header length"));
        }
        let header = Header {
            mem_limit: u64_at(&p, 4),
            item_size_max: u64_at(&p, 12),
            saved_at: u32_at(&p, 20),
            items: u64_at(&p, 24),
            version: String::from_utf8_lossy(&p[34..]).into_owned(),
        };
        Ok(Reader {
            src,
            header,
            block: Vec::new(),
            items: 0,
            max_cas: 0,
            done: false,
        })
    }

    /// What the file says about the server that wrote it.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// Refuses a file written with another `-m` or `-I`.
    pub fn expect(&self, mem_limit: u64, item_size_max: u64) -> Result<(), SnapshotError> {
        let h = &self.header;
        for (what, file, ours) in [
            ("-m (bytes)", h.mem_limit, mem_limit),
            ("-I (bytes)", h.item_size_max, item_size_max),
        ] {
            if file != ours {
                return Err(SnapshotError::Mismatch { what, file, ours });
            }
        }
        Ok(())
    }

    /// The next checked block of records, or None after a valid END frame (which must be
    /// the last bytes of the input).
    pub fn next_block(&mut self) -> Result<Option<Records<'_>>, SnapshotError> {
        if self.done {
            return Ok(None);
        }
        let max = BLOCK_TARGET + RECORD_HEAD + 255 + self.header.item_size_max as usize;
        let kind = read_frame(&mut self.src, &mut self.block, max)?;
        match kind {
            ITEMS => {
                let records = parse_records(&self.block, self.header.item_size_max)?;
                self.items += records.len() as u64;
                self.max_cas = self.max_cas.max(records.max_cas);
                Ok(Some(records))
            }
            END => {
                if self.block.len() != 16 {
                    return Err(corrupt("bad end frame"));
                }
                let (count, max_cas) = (u64_at(&self.block, 0), u64_at(&self.block, 8));
                if count != self.items || max_cas != self.max_cas {
                    return Err(corrupt(format!(
                        "end frame counts {count} items, the file holds {}",
                        self.items
                    )));
                }
                let mut extra = [0u8; 1];
                if self.src.read(&mut extra)? != 0 {
                    return Err(corrupt("data after the end frame"));
                }
                self.done = true;
                Ok(None)
            }
            k => Err(corrupt(format!("unknown frame kind {k}"))),
        }
    }

    /// Records read so far, and the largest cas among them.
    pub fn totals(&self) -> (u64, u64) {
        (self.items, self.max_cas)
    }
}

/// Reads one frame's payload into `buf` after checking its length and checksum. The buffer
/// grows with the bytes actually read, so a length that a truncated or corrupt file only
/// claims costs no memory.
fn read_frame(src: &mut impl Read, buf: &mut Vec<u8>, max: usize) -> Result<u8, SnapshotError> {
    let mut head = [0u8; FRAME_HEAD];
    src.read_exact(&mut head)?;
    let len = u32_at(&head, 1) as usize;
    if len > max {
        return Err(corrupt(format!("frame of {len} bytes")));
    }
    buf.clear();
    if src.take(len as u64).read_to_end(buf)? < len {
        return Err(SnapshotError::Truncated);
    }
    if checksum(&head[..5], buf) != u32_at(&head, 5) {
        return Err(corrupt("checksum mismatch"));
    }
    Ok(head[0])
}

/// The records of one checked ITEMS block.
pub struct Records<'a> {
    block: &'a [u8],
    at: usize,
    count: usize,
    max_cas: u64,
}

impl Records<'_> {
    /// Records in the block.
    pub fn len(&self) -> usize {
        self.count
    }

    /// No records.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Record<'a>;

    fn next(&mut self) -> Option<Record<'a>> {
        if self.at >= self.block.len() {
            return None;
        }
        let (r, used) = record_at(self.block, self.at);
        self.at += used;
        Some(r)
    }
}

/// Splits a record at `at` (already validated by `parse_records`).
fn record_at(b: &[u8], at: usize) -> (Record<'_>, usize) {
    let key_len = b[at] as usize;
    let value_len = u32_at(b, at + 17) as usize;
    let key = at + RECORD_HEAD;
    let value = key + key_len;
    let r = Record {
        key: &b[key..value],
        value: &b[value..value + value_len],
        flags: u32_at(b, at + 1),
        cas: u64_at(b, at + 5),
        exptime: u32_at(b, at + 13),
    };
    (r, RECORD_HEAD + key_len + value_len)
}

/// Checks that `block` is a whole number of well-formed records.
fn parse_records(block: &[u8], item_size_max: u64) -> Result<Records<'_>, SnapshotError> {
    let mut at = 0;
    let mut count = 0;
    let mut max_cas = 0;
    while at < block.len() {
        if block.len() - at < RECORD_HEAD {
            return Err(corrupt("record cut short"));
        }
        let key_len = block[at] as usize;
        let value_len = u32_at(block, at + 17) as u64;
        if key_len == 0 || key_len > KEY_MAX_LENGTH || value_len > item_size_max {
            return Err(corrupt("record with an impossible length"));
        }
        let total = RECORD_HEAD + key_len + value_len as usize;
        if block.len() - at < total {
            return Err(corrupt("record cut short"));
        }
        max_cas = max_cas.max(u64_at(block, at + 5));
        at += total;
        count += 1;
    }
    Ok(Records {
        block,
        at: 0,
        count,
        max_cas,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn header() -> Header {
        Header {
            mem_limit: 64 << 20,
            item_size_max: 1 << 20,
            saved_at: 1_700_000_000,
            items: 7,
            version: "1.6.18-memfleet-test".into(),
        }
    }

    type Owned = (Vec<u8>, Vec<u8>, u32, u64, u32);

    fn encode(items: &[Owned]) -> Vec<u8> {
        let mut out = Writer::header(&header());
        let mut w = Writer::new();
        for (k, v, flags, cas, exptime) in items {
            let r = Record {
                key: k,
                value: v,
                flags: *flags,
                cas: *cas,
                exptime: *exptime,
            };
            if w.push(&r) {
                out.extend_from_slice(w.take_block());
            }
        }
        out.extend_from_slice(&w.finish());
        out
    }

    fn decode(file: &[u8]) -> Result<Vec<Owned>, SnapshotError> {
        let mut r = Reader::open(file)?;
        r.expect(64 << 20, 1 << 20)?;
        let mut out = Vec::new();
        while let Some(block) = r.next_block()? {
            for rec in block {
                out.push((
                    rec.key.to_vec(),
                    rec.value.to_vec(),
                    rec.flags,
                    rec.cas,
                    rec.exptime,
                ));
            }
        }
        Ok(out)
    }

    fn sample() -> Vec<Owned> {
        (0..3000u32)
            .map(|i| {
                let v = vec![b'a' + (i % 26) as u8; (i as usize * 37) % 5000];
                (
                    format!("key:{i}").into_bytes(),
                    v,
                    i,
                    u64::from(i) * 16 + 3,
                    i % 7,
                )
            })
            .collect()
    }

    #[test]
    fn round_trip_keeps_every_field_and_order() {
        let items = sample();
        let file = encode(&items);
        assert!(file.len() > 2 * BLOCK_TARGET, "spans several blocks");
        assert_eq!(decode(&file).unwrap(), items);
        let mut r = Reader::open(&file[..]).unwrap();
        assert_eq!(r.header(), &header());
        while r.next_block().unwrap().is_some() {}
        assert_eq!(r.totals(), (3000, 2999 * 16 + 3));
    }

    #[test]
    fn empty_store_round_trips() {
        assert_eq!(decode(&encode(&[])).unwrap(), vec![]);
    }

    #[test]
    fn every_truncation_is_refused() {
        let file = encode(&sample()[..40]);
        for cut in 0..file.len() {
            assert!(decode(&file[..cut]).is_err(), "cut at {cut} accepted");
        }
    }

    /// A frame's length is checked against the limit before reading, but the bytes it
    /// claims may not be there: a truncated or corrupt file must not make the reader
    /// allocate what the length says (up to `-I` plus a block).
    #[test]
    fn a_frame_length_allocates_only_the_bytes_there() {
        let item_size_max = 128 << 20;
        let mut file = Writer::header(&Header {
            item_size_max,
            ..header()
        });
        file.push(ITEMS);
        file.extend_from_slice(&(item_size_max as u32).to_le_bytes());
        file.extend_from_slice(&[0; 4]);
        file.extend_from_slice(b"only these bytes follow");
        let mut r = Reader::open(&file[..]).unwrap();
        r.expect(64 << 20, item_size_max).unwrap();
        assert!(matches!(r.next_block(), Err(SnapshotError::Truncated)));
        assert!(
            r.block.capacity() < 1 << 20,
            "{} bytes allocated for a {}-byte file",
            r.block.capacity(),
            file.len()
        );
    }

    #[test]
    fn trailing_bytes_are_refused() {
        let mut file = encode(&sample()[..10]);
        file.push(0);
        assert!(matches!(decode(&file), Err(SnapshotError::Corrupt(_))));
    }

    #[test]
    fn other_settings_or_format_are_refused() {
        let file = encode(&sample()[..10]);
        let r = Reader::open(&file[..]).unwrap();
        assert!(matches!(
            r.expect(128 << 20, 1 << 20),
            Err(SnapshotError::Mismatch {
                what: "-m (bytes)",
                ..
            })
        ));
        assert!(matches!(
            r.expect(64 << 20, 2 << 20),
            Err(SnapshotError::Mismatch {
                what: "-I (bytes)",
                ..
            })
        ));
        let mut other = file.clone();
        other[FRAME_HEAD + MAGIC.len()] = 2;
        // The checksum catches the edit before the version is looked at; re-seal it.
        let hlen = u32_at(&other, MAGIC.len() + 1) as usize;
        seal(
            HEADER,
            &mut other[MAGIC.len()..MAGIC.len() + FRAME_HEAD + hlen],
        );
        assert!(matches!(decode(&other), Err(SnapshotError::Format(2))));
        assert!(matches!(
            decode(b"not a snapshot at all"),
            Err(SnapshotError::NotSnapshot)
        ));
    }

    proptest! {
        #[test]
        fn any_items_round_trip(items in proptest::collection::vec(
            (proptest::collection::vec(any::<u8>(), 1..=250),
             proptest::collection::vec(any::<u8>(), 0..3000),
             any::<u32>(), any::<u64>(), any::<u32>()),
            0..40,
        )) {
            prop_assert_eq!(decode(&encode(&items)).unwrap(), items);
        }

        #[test]
        fn any_flipped_bit_is_refused(
            items in proptest::collection::vec(
                (proptest::collection::vec(any::<u8>(), 1..=20),
                 proptest::collection::vec(any::<u8>(), 0..100),
                 any::<u32>(), any::<u64>(), any::<u32>()),
                1..10,
            ),
            at in any::<prop::sample::Index>(),
            bit in 0u8..8,
        ) {
            let mut file = encode(&items);
            let i = at.index(file.len());
            file[i] ^= 1 << bit;
            prop_assert!(decode(&file).is_err());
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut file = MAGIC.to_vec();
            file.extend_from_slice(&bytes);
            let _ = decode(&file);
            let _ = decode(&bytes);
        }
    }
}
