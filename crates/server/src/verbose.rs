//! `-vv` logging of requests and replies on stderr, in memcached's format
//! (`<fd request line`, `>fd reply line`, `>fd sending key K` for each VALUE).

use proto::Request;

/// Logs the command line of a request.
pub fn request(fd: i32, raw: &[u8]) {
    let line_end = raw
        .iter()
        .position(|&b| b == b'\r' || b == b'\n')
        .unwrap_or(raw.len());
    stderr_line!("<{fd} {}", String::from_utf8_lossy(&raw[..line_end]));
}

/// Whether memcached logs this request's replies: its classic commands' status lines, but
/// not `stats` output or meta replies (but `mn`'s).
pub fn logs_replies(req: &Request<'_>) -> bool {
    !matches!(
        req,
        Request::Stats { .. }
            | Request::MetaGet { .. }
            | Request::MetaSet { .. }
            | Request::MetaDelete { .. }
            | Request::MetaArithmetic { .. }
            | Request::MetaDebug { .. }
    )
}

/// Logs the reply lines in `out`; a VALUE is logged by its key, its data skipped.
pub fn replies(fd: i32, out: &[u8]) {
    let mut rest = out;
    while let Some(end) = rest.windows(2).position(|w| w == b"\r\n") {
        let line = &rest[..end];
        rest = &rest[end + 2..];
        match value_header(line) {
            Some((key, len)) => {
                stderr_line!(">{fd} sending key {}", String::from_utf8_lossy(key));
                rest = rest.get(len + 2..).unwrap_or_default();
            }
            None => stderr_line!(">{fd} {}", String::from_utf8_lossy(line)),
        }
    }
}

/// The key and data length of a `VALUE <key> <flags> <bytes> [<cas>]` line.
fn value_header(line: &[u8]) -> Option<(&[u8], usize)> {
    let mut tokens = line.split(|&b| b == b' ');
    if tokens.next()? != b"VALUE" {
        return None;
    }
    let key = tokens.next()?;
    let len = std::str::from_utf8(tokens.nth(1)?).ok()?.parse().ok()?;
    Some((key, len))
}

/// Logs a binary request's 24-byte header as memcached does (`<fd Read binary protocol
/// data:`, then four bytes a line).
pub fn binary_request(fd: i32, raw: &[u8]) {
    stderr_line!(
        "<{fd} Read binary protocol data:{}",
        hex_lines(&format!("<{fd}   "), &raw[..raw.len().min(24)])
    );
}

/// Logs what memcached's `-vv` prints about a binary command besides its header: the key of
/// gets, touches and stores, the arguments of incr/decr, the group of stat.
pub fn binary_command(fd: i32, req: &proto::binary::BinRequest<'_>) {
    use proto::binary::Command;
    use proto::StoreCmd;
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    match req.command {
        Command::Get { key, touch, .. } => {
            let verb = if touch.is_some() { "TOUCH" } else { "GET" };
            stderr_line!("<{fd} {verb} {}", text(key));
        }
        Command::Touch { key, .. } => stderr_line!("<{fd} TOUCH {}", text(key)),
        Command::Store { cmd, key, data, .. } => {
            let verb = match cmd {
                StoreCmd::Append | StoreCmd::Prepend => {
                    return stderr_line!("Value len is {}", data.len());
                }
                StoreCmd::Add => "ADD",
                StoreCmd::Set => "SET",
                _ => "REPLACE",
            };
            stderr_line!("<{fd} {verb} {} Value len is {}", text(key), data.len());
        }
        Command::Delete { key } => stderr_line!("Deleting {}", text(key)),
        Command::Arith {
            key,
            delta,
            initial,
            exptime,
            ..
        } => stderr_line!("incr {} {delta}, {initial}, {}", text(key), exptime as i32),
        Command::Stat { key } => stderr_line!("<{fd} STATS {}", text(key)),
        _ => {}
    }
}

/// Logs each binary response in `out` as memcached does: `Writing an error: <text>` for an
/// error with a text body, then `Writing bin response:` and its header four bytes a line.
pub fn binary_replies(fd: i32, out: &[u8]) {
    use proto::binary::{parse_response, ResponseParse};
    let mut rest = out;
    while let ResponseParse::Response(r, n) = parse_response(rest) {
        // memcached writes statistics without logging them.
        if r.opcode == proto::binary::opcode::STAT && r.status == 0 {
            rest = &rest[n..];
            continue;
        }
        if r.status != 0 && r.status != 0x21 && r.extras.is_empty() && r.key.is_empty() {
            stderr_line!(
                ">{fd} Writing an error: {}",
                String::from_utf8_lossy(r.value)
            );
        }
        stderr_line!(
            ">{fd} Writing bin response:{}",
            hex_lines(&format!(">{fd}  "), &rest[..24])
        );
        rest = &rest[n..];
    }
}

/// `bytes` as ` 0x..` groups of four, each group on a new line starting with `prefix`.
fn hex_lines(prefix: &str, bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    for (i, b) in bytes.iter().enumerate() {
        if i % 4 == 0 {
            s.push('\n');
            s.push_str(prefix);
        }
        let _ = write!(s, " 0x{b:02x}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_lines_give_their_key_and_length() {
        assert_eq!(value_header(b"VALUE k 5 3 77"), Some((&b"k"[..], 3usize)));
        assert_eq!(value_header(b"STORED"), None);
        assert_eq!(value_header(b"VALUE k 5"), None);
    }

    #[test]
    fn binary_headers_print_four_bytes_a_line() {
        assert_eq!(
            hex_lines("<5   ", &[0x80, 1, 2, 3, 4]),
            "\n<5    0x80 0x01 0x02 0x03\n<5    0x04"
        );
    }
}
