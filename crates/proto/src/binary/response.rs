//! Response framing, for clients, routers and tests.

use super::{Status, HEADER_LEN, RESPONSE_MAGIC};

/// One response packet. Slices borrow the buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BinResponse<'a> {
    /// The request's opcode.
    pub opcode: u8,
    /// The raw status (see [`Status::from_code`]).
    pub status: u16,
    /// The request's opaque.
    pub opaque: u32,
    /// The item's CAS (0 when none).
    pub cas: u64,
    /// Extras (flags of a get hit).
    pub extras: &'a [u8],
    /// Key (getk/gatk, stat name).
    pub key: &'a [u8],
    /// Value (item, error text, version, stat value, counter).
    pub value: &'a [u8],
}

impl BinResponse<'_> {
    /// The status, if memcached defines it.
    pub fn status(&self) -> Option<Status> {
        Status::from_code(self.status)
    }
}

/// Result of [`parse_response`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResponseParse<'a> {
    /// One response and the bytes it used.
    Response(BinResponse<'a>, usize),
    /// Read until the buffer holds `total` bytes.
    Incomplete {
        /// The buffer size needed.
        total: usize,
    },
    /// Not a response (wrong magic, or extras + key longer than the body).
    Invalid,
}

/// Parses the first response in `buf`. Never panics or allocates; `total` may be up to
/// 24 + 4 GiB, so a client should bound it.
pub fn parse_response(buf: &[u8]) -> ResponseParse<'_> {
    if buf.len() < HEADER_LEN {
        return ResponseParse::Incomplete { total: HEADER_LEN };
    }
    let h = &buf[..HEADER_LEN];
    if h[0] != RESPONSE_MAGIC {
        return ResponseParse::Invalid;
    }
    let key_len = usize::from(u16::from_be_bytes([h[2], h[3]]));
    let extras_len = usize::from(h[4]);
    let body_len = u32::from_be_bytes([h[8], h[9], h[10], h[11]]) as usize;
    if key_len + extras_len > body_len {
        return ResponseParse::Invalid;
    }
    let total = HEADER_LEN + body_len;
    if buf.len() < total {
        return ResponseParse::Incomplete { total };
    }
    let key_at = HEADER_LEN + extras_len;
    let value_at = key_at + key_len;
    ResponseParse::Response(
        BinResponse {
            opcode: h[1],
            status: u16::from_be_bytes([h[6], h[7]]),
            opaque: u32::from_be_bytes([h[12], h[13], h[14], h[15]]),
            cas: u64::from_be_bytes([h[16], h[17], h[18], h[19], h[20], h[21], h[22], h[23]]),
            extras: &buf[HEADER_LEN..key_at],
            key: &buf[key_at..value_at],
            value: &buf[value_at..total],
        },
        total,
    )
}
