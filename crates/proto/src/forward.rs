//! A parsed classic request as a proxy passes it on: the parts of its raw bytes (as
//! [`crate::parse`] accepted them) that go to a server unchanged.

use crate::Tokens;

/// The command line of a raw request, without its line end.
pub fn request_line(raw: &[u8]) -> &[u8] {
    let end = memchr::memchr(b'\n', raw).unwrap_or(raw.len());
    let line = &raw[..end];
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// Splits a classic request ending in `noreply` into (its line without `noreply`, the data
/// block after the line), so a proxy can have the server answer and drop the answer itself
/// (it still passes on errors, which memcached sends even for `noreply`).
pub fn strip_noreply(raw: &[u8]) -> Option<(&[u8], &[u8])> {
    let nl = memchr::memchr(b'\n', raw)?;
    let trimmed = request_line(raw).trim_ascii_end();
    let head = trimmed.strip_suffix(b"noreply")?;
    if !head.ends_with(b" ") {
        return None;
    }
    Some((head.trim_ascii_end(), &raw[nl + 1..]))
}

/// `gat <exptime>` / `gats <exptime>` exactly as the client wrote it (the exptime token is
/// passed on, not re-encoded): the start of a `gat` line for a subset of its keys.
pub fn gat_command(raw: &[u8]) -> &[u8] {
    let line = request_line(raw);
    let mut tokens = Tokens::new(line);
    let (Some(cmd), Some(exptime)) = (tokens.next(), tokens.next()) else {
        return line;
    };
    let start = cmd.as_ptr() as usize - line.as_ptr() as usize;
    let end = exptime.as_ptr() as usize - line.as_ptr() as usize + exptime.len();
    &line[start..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn noreply_is_stripped_from_the_line_only() {
        let raw = b"set k 0 0 7 noreply\r\nnoreply\r\n";
        let (line, rest) = strip_noreply(raw).unwrap();
        assert_eq!(line, b"set k 0 0 7");
        assert_eq!(rest, b"noreply\r\n");
        let (line, rest) = strip_noreply(b"delete k noreply  \n").unwrap();
        assert_eq!((line, rest), (&b"delete k"[..], &b""[..]));
        assert!(strip_noreply(b"delete noreply\r\n").is_some());
        assert!(strip_noreply(b"delete xnoreply\r\n").is_none());
        assert!(strip_noreply(b"delete k noreply").is_none());
    }

    #[test]
    fn gat_keeps_the_exptime_as_written() {
        assert_eq!(gat_command(b"gat 10 a b\r\n"), b"gat 10");
        assert_eq!(gat_command(b"  gats  -0099 a\n"), b"gats  -0099");
        assert_eq!(request_line(b"get a\r\nxx"), b"get a");
        assert_eq!(request_line(b"get a"), b"get a");
    }
}
