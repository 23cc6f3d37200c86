//! Reply lines (exact memcached bytes, CRLF included) and fast writers.

/// The version memfleet answers `version` with (and `stats`' `version`). It starts with the
/// memcached release memfleet behaves as, because client libraries parse it: libmemcached
/// reads `major.minor.micro` with `strtol` (and fails the request otherwise), and copies the
/// `stats` value into a 24-byte field.
pub const VERSION: &str = concat!("1.6.18-memfleet-", env!("CARGO_PKG_VERSION"));
const _: () = assert!(VERSION.len() < 24, "libmemcached's stats version field");

/// The reply `STORED`.
pub const STORED: &[u8] = b"STORED\r\n";
/// The reply `NOT_STORED`.
pub const NOT_STORED: &[u8] = b"NOT_STORED\r\n";
/// The reply `EXISTS`.
pub const EXISTS: &[u8] = b"EXISTS\r\n";
/// The reply `NOT_FOUND`.
pub const NOT_FOUND: &[u8] = b"NOT_FOUND\r\n";
/// The reply `DELETED`.
pub const DELETED: &[u8] = b"DELETED\r\n";
/// The reply `TOUCHED`.
pub const TOUCHED: &[u8] = b"TOUCHED\r\n";
/// The reply `END`.
pub const END: &[u8] = b"END\r\n";
/// The reply `OK`.
pub const OK: &[u8] = b"OK\r\n";
/// The reply `RESET`.
pub const RESET: &[u8] = b"RESET\r\n";
/// The reply `ERROR`.
pub const ERROR: &[u8] = b"ERROR\r\n";

// Meta status codes.
/// The reply `HD`.
pub const HD: &[u8] = b"HD\r\n";
/// The reply `NF`.
pub const NF: &[u8] = b"NF\r\n";
/// The reply `EN`.
pub const EN: &[u8] = b"EN\r\n";
/// The reply `EX`.
pub const EX: &[u8] = b"EX\r\n";
/// The reply `NS`.
pub const NS: &[u8] = b"NS\r\n";
/// The reply `MN`.
pub const MN: &[u8] = b"MN\r\n";

/// The reply `CLIENT_ERROR bad command line format`.
pub const CLIENT_ERROR_BAD_FORMAT: &[u8] = b"CLIENT_ERROR bad command line format\r\n";
/// The reply `CLIENT_ERROR bad data chunk`.
pub const CLIENT_ERROR_BAD_DATA_CHUNK: &[u8] = b"CLIENT_ERROR bad data chunk\r\n";
/// The reply `CLIENT_ERROR invalid exptime argument`.
pub const CLIENT_ERROR_INVALID_EXPTIME: &[u8] = b"CLIENT_ERROR invalid exptime argument\r\n";
/// The reply `CLIENT_ERROR invalid numeric delta argument`.
pub const CLIENT_ERROR_INVALID_DELTA: &[u8] = b"CLIENT_ERROR invalid numeric delta argument\r\n";
/// The reply `CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]`.
pub const CLIENT_ERROR_DELETE_USAGE: &[u8] =
    b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n";
/// The reply `CLIENT_ERROR cannot increment or decrement non-numeric value`.
pub const CLIENT_ERROR_NON_NUMERIC: &[u8] =
    b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n";
/// The reply `CLIENT_ERROR invalid shutdown mode`.
pub const CLIENT_ERROR_INVALID_SHUTDOWN: &[u8] = b"CLIENT_ERROR invalid shutdown mode\r\n";
/// The reply `CLIENT_ERROR flush_all not allowed`.
pub const CLIENT_ERROR_FLUSH_NOT_ALLOWED: &[u8] = b"CLIENT_ERROR flush_all not allowed\r\n";
/// The reply `ERROR: shutdown not enabled`.
pub const ERROR_SHUTDOWN_NOT_ENABLED: &[u8] = b"ERROR: shutdown not enabled\r\n";
/// The reply `SERVER_ERROR object too large for cache`.
pub const SERVER_ERROR_TOO_LARGE: &[u8] = b"SERVER_ERROR object too large for cache\r\n";
/// The reply `SERVER_ERROR out of memory storing object`.
pub const SERVER_ERROR_OOM_STORING: &[u8] = b"SERVER_ERROR out of memory storing object\r\n";
/// The reply `SERVER_ERROR out of memory`.
pub const SERVER_ERROR_OOM: &[u8] = b"SERVER_ERROR out of memory\r\n";
/// The reply `MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m`.
pub const MEMLIMIT_TOO_SMALL: &[u8] = b"MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m\r\n";
/// The reply `MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes`.
pub const MEMLIMIT_ADJUST_FAILED_UNITS: &[u8] =
    b"MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes\r\n";

// Meta errors.
/// The reply `CLIENT_ERROR options flags are too long`.
pub const CLIENT_ERROR_MG_FLAGS_TOO_LONG: &[u8] = b"CLIENT_ERROR options flags are too long\r\n";
/// The reply `CLIENT_ERROR options flags too long`.
pub const CLIENT_ERROR_FLAGS_TOO_LONG: &[u8] = b"CLIENT_ERROR options flags too long\r\n";
/// The reply `CLIENT_ERROR duplicate flag`.
pub const CLIENT_ERROR_DUPLICATE_FLAG: &[u8] = b"CLIENT_ERROR duplicate flag\r\n";
/// The reply `CLIENT_ERROR invalid flag`.
pub const CLIENT_ERROR_INVALID_FLAG: &[u8] = b"CLIENT_ERROR invalid flag\r\n";
/// The reply `CLIENT_ERROR invalid or duplicate flag`.
pub const CLIENT_ERROR_INVALID_OR_DUPLICATE_FLAG: &[u8] =
    b"CLIENT_ERROR invalid or duplicate flag\r\n";
/// The reply `CLIENT_ERROR bad token in command line format`.
pub const CLIENT_ERROR_BAD_TOKEN: &[u8] = b"CLIENT_ERROR bad token in command line format\r\n";
/// The reply `CLIENT_ERROR error decoding key`.
pub const CLIENT_ERROR_DECODING_KEY: &[u8] = b"CLIENT_ERROR error decoding key\r\n";
/// The reply `CLIENT_ERROR incorrect length for M token`.
pub const CLIENT_ERROR_M_TOKEN_LENGTH: &[u8] = b"CLIENT_ERROR incorrect length for M token\r\n";
/// The reply `CLIENT_ERROR invalid numeric initial value`.
pub const CLIENT_ERROR_INVALID_INITIAL: &[u8] = b"CLIENT_ERROR invalid numeric initial value\r\n";
/// The reply `CLIENT_ERROR invalid numeric delta value`.
pub const CLIENT_ERROR_INVALID_DELTA_VALUE: &[u8] = b"CLIENT_ERROR invalid numeric delta value\r\n";
/// The reply `CLIENT_ERROR invalid mode for ms M token`.
pub const CLIENT_ERROR_MS_MODE: &[u8] = b"CLIENT_ERROR invalid mode for ms M token\r\n";
/// The reply `CLIENT_ERROR invalid mode for ma M token`.
pub const CLIENT_ERROR_MA_MODE: &[u8] = b"CLIENT_ERROR invalid mode for ma M token\r\n";
/// The reply `CLIENT_ERROR opaque token too long`.
pub const CLIENT_ERROR_OPAQUE_TOO_LONG: &[u8] = b"CLIENT_ERROR opaque token too long\r\n";

/// Appends `v` in decimal.
#[inline]
pub fn write_u64(out: &mut Vec<u8>, v: u64) {
    let mut b = itoa::Buffer::new();
    out.extend_from_slice(b.format(v).as_bytes());
}

/// Appends `v` in decimal.
#[inline]
pub fn write_i64(out: &mut Vec<u8>, v: i64) {
    let mut b = itoa::Buffer::new();
    out.extend_from_slice(b.format(v).as_bytes());
}

/// Appends `VALUE <key> <flags> <bytes>[ <cas>]\r\n<data>\r\n`.
#[inline]
pub fn write_value(out: &mut Vec<u8>, key: &[u8], flags: u32, data: &[u8], cas: Option<u64>) {
    write_value_header(out, key, flags, data.len(), cas);
    out.reserve(data.len() + 2);
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// Appends only `VALUE <key> <flags> <bytes>[ <cas>]\r\n` (for writev of the data).
#[inline]
pub fn write_value_header(out: &mut Vec<u8>, key: &[u8], flags: u32, len: usize, cas: Option<u64>) {
    out.reserve(6 + key.len() + 48);
    out.extend_from_slice(b"VALUE ");
    out.extend_from_slice(key);
    out.push(b' ');
    write_u64(out, u64::from(flags));
    out.push(b' ');
    write_u64(out, len as u64);
    if let Some(c) = cas {
        out.push(b' ');
        write_u64(out, c);
    }
    out.extend_from_slice(b"\r\n");
}

/// Appends standard base64 with padding (memcached's encoder; used for `k` with `b`).
pub fn write_base64(out: &mut Vec<u8>, src: &[u8]) {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    out.reserve(src.len().div_ceil(3) * 4);
    let mut chunks = src.chunks_exact(3);
    for c in &mut chunks {
        let n = (u32::from(c[0]) << 16) | (u32::from(c[1]) << 8) | u32::from(c[2]);
        out.extend_from_slice(&[
            T[(n >> 18) as usize & 63],
            T[(n >> 12) as usize & 63],
            T[(n >> 6) as usize & 63],
            T[n as usize & 63],
        ]);
    }
    match *chunks.remainder() {
        [a] => {
            out.extend_from_slice(&[T[(a >> 2) as usize], T[((a & 3) << 4) as usize], b'=', b'='])
        }
        [a, b] => out.extend_from_slice(&[
            T[(a >> 2) as usize],
            T[(((a & 3) << 4) | (b >> 4)) as usize],
            T[((b & 15) << 2) as usize],
            b'=',
        ]),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_lines() {
        let mut out = Vec::new();
        write_value(&mut out, b"k", 5, b"hello", None);
        write_value(&mut out, b"k2", 0, b"", Some(18446744073709551615));
        assert_eq!(
            out,
            b"VALUE k 5 5\r\nhello\r\nVALUE k2 0 0 18446744073709551615\r\n\r\n".to_vec()
        );
    }

    #[test]
    fn integers() {
        let mut out = Vec::new();
        write_u64(&mut out, 0);
        out.push(b' ');
        write_i64(&mut out, -1);
        out.push(b' ');
        write_u64(&mut out, u64::MAX);
        assert_eq!(out, b"0 -1 18446744073709551615".to_vec());
    }

    #[test]
    fn base64_encoding() {
        for (src, enc) in [
            (&b""[..], &b""[..]),
            (b"k", b"aw=="),
            (b"ke", b"a2U="),
            (b"key", b"a2V5"),
            (b"\x00\xff\x10\x80", b"AP8QgA=="),
        ] {
            let mut out = Vec::new();
            write_base64(&mut out, src);
            assert_eq!(out, enc.to_vec());
            if !src.is_empty() {
                let mut buf = [0u8; 16];
                let n = crate::base64_decode(enc, &mut buf).unwrap();
                assert_eq!(&buf[..n], src);
            }
        }
    }
}
