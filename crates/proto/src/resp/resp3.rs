//! RESP3 replies for clients that sent `HELLO 3`, made from the RESP2 replies of a Redis
//! pool's backend connections (which stay RESP2 because they are shared by clients of both
//! protocols). Most commands only change their nils (`$-1`, `*-1` become `_`); the few whose
//! RESP3 reply has another type are named by [`Shape`], the types as redis-server 7.0 sends
//! them (checked live).

use super::reply::reply_line;
use super::{parse_ll, RespError, RespRequest};

/// How a command's RESP2 reply becomes its RESP3 reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Same types; nils become `_`.
    Plain,
    /// A flat field/value array becomes a map (`HGETALL`).
    Map,
    /// An array becomes a set (`SMEMBERS`, `SINTER`, `SUNION`, `SDIFF`, `SPOP` with count).
    Set,
    /// A bulk string holding a number becomes a double (`ZSCORE`, `ZINCRBY`, `ZADD INCR`).
    Double,
    /// An array of bulk numbers becomes an array of doubles (`ZMSCORE`).
    Doubles,
    /// A flat member/score array becomes an array of `[member, double]` pairs (`WITHSCORES`,
    /// `ZPOPMIN`/`ZPOPMAX` with a count).
    ScorePairs,
    /// A flat member/score array whose scores become doubles (`ZPOPMIN`/`ZPOPMAX`, no count).
    FlatScores,
    /// A flat field/value array becomes an array of pairs (`HRANDFIELD ... WITHVALUES`).
    Pairs,
}

impl Shape {
    /// The shape of `req`'s reply.
    pub fn of(req: &RespRequest<'_>) -> Shape {
        let name = req.name().to_ascii_lowercase();
        let has = |word: &[u8]| req.args().skip(1).any(|a| a.eq_ignore_ascii_case(word));
        match name.as_slice() {
            b"hgetall" => Shape::Map,
            b"smembers" | b"sinter" | b"sunion" | b"sdiff" => Shape::Set,
            b"spop" if req.argc() > 2 => Shape::Set,
            b"zscore" | b"zincrby" | b"zadd" => Shape::Double,
            b"zmscore" => Shape::Doubles,
            b"zpopmin" | b"zpopmax" if req.argc() > 2 => Shape::ScorePairs,
            b"zpopmin" | b"zpopmax" => Shape::FlatScores,
            b"zrange" | b"zrangebyscore" | b"zrevrange" | b"zrevrangebyscore" | b"zrandmember"
            | b"zunion" | b"zinter" | b"zdiff"
                if has(b"withscores") =>
            {
                Shape::ScorePairs
            }
            b"hrandfield" if has(b"withvalues") => Shape::Pairs,
            _ => Shape::Plain,
        }
    }
}

/// Appends the RESP3 form of `reply`, one complete RESP2 reply (as framed by
/// [`super::reply_len`]). A reply that does not have the shape's expected form (an error, a
/// nil, an odd-length pair array) is converted as [`Shape::Plain`].
pub fn write_resp3(reply: &[u8], shape: Shape, out: &mut Vec<u8>) -> Result<(), RespError> {
    let mark = out.len();
    match shaped(reply, shape, out) {
        Ok(true) => return Ok(()),
        Ok(false) => {}
        Err(e) => {
            out.truncate(mark);
            return Err(e);
        }
    }
    out.truncate(mark);
    let end = plain(reply, 0, out)?;
    if end != reply.len() {
        out.truncate(mark);
        return Err(RespError::BadLength);
    }
    Ok(())
}

/// Type byte and number of the header line at `pos`, and where the line ends.
fn header(buf: &[u8], pos: usize) -> Result<(u8, &[u8], usize), RespError> {
    let t = *buf.get(pos).ok_or(RespError::BadTerminator)?;
    let cr = reply_line(buf, pos)?.ok_or(RespError::BadTerminator)?;
    Ok((t, &buf[pos + 1..cr], cr + 2))
}

fn number(line: &[u8]) -> Result<i64, RespError> {
    parse_ll(line).ok_or(RespError::BadLength)
}

/// A top-level array's element count, or None when the reply is not a non-nil array.
fn array_len(reply: &[u8]) -> Result<Option<(usize, usize)>, RespError> {
    let (t, line, body) = header(reply, 0)?;
    Ok(match (t, number(line)) {
        (b'*', Ok(n)) if n >= 0 => Some((n as usize, body)),
        _ => None,
    })
}

fn write_header(out: &mut Vec<u8>, tag: u8, n: usize) {
    out.push(tag);
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Ok(false): the reply has not the shape's form; the caller converts it as Plain.
fn shaped(reply: &[u8], shape: Shape, out: &mut Vec<u8>) -> Result<bool, RespError> {
    if shape == Shape::Plain {
        return Ok(false);
    }
    if shape == Shape::Double {
        return Ok(reply.first() == Some(&b'$') && double(reply, 0, out)? == reply.len());
    }
    let Some((n, mut pos)) = array_len(reply)? else {
        return Ok(false);
    };
    let paired = matches!(shape, Shape::Map | Shape::ScorePairs | Shape::Pairs);
    if paired && n % 2 != 0 {
        return Ok(false);
    }
    match shape {
        Shape::Map => write_header(out, b'%', n / 2),
        Shape::Set => write_header(out, b'~', n),
        Shape::Doubles | Shape::FlatScores => write_header(out, b'*', n),
        _ => write_header(out, b'*', n / 2),
    }
    for i in 0..n {
        if matches!(shape, Shape::ScorePairs | Shape::Pairs) && i % 2 == 0 {
            out.extend_from_slice(b"*2\r\n");
        }
        let as_double = match shape {
            Shape::Doubles => true,
            Shape::ScorePairs | Shape::FlatScores => i % 2 == 1,
            _ => false,
        };
        pos = if as_double {
            double(reply, pos, out)?
        } else {
            plain(reply, pos, out)?
        };
    }
    Ok(pos == reply.len())
}

/// One bulk string at `pos` as a double (`,<text>`); a nil as `_`; anything else as Plain.
fn double(buf: &[u8], pos: usize, out: &mut Vec<u8>) -> Result<usize, RespError> {
    let (t, line, body) = header(buf, pos)?;
    if t != b'$' {
        return plain(buf, pos, out);
    }
    match number(line)? {
        -1 => {
            out.extend_from_slice(b"_\r\n");
            Ok(body)
        }
        n if n >= 0 && body + n as usize + 2 <= buf.len() => {
            let end = body + n as usize;
            out.push(b',');
            out.extend_from_slice(&buf[body..end]);
            out.extend_from_slice(b"\r\n");
            Ok(end + 2)
        }
        _ => Err(RespError::BadLength),
    }
}

/// Copies the value at `pos` (nested arrays included) with nils as `_`; returns its end.
/// Iterative, so deep nesting cannot overflow the stack.
fn plain(buf: &[u8], mut pos: usize, out: &mut Vec<u8>) -> Result<usize, RespError> {
    let mut pending: u64 = 1;
    while pending > 0 {
        let (t, line, next) = header(buf, pos)?;
        pending -= 1;
        match t {
            b'+' | b'-' | b':' => {
                out.extend_from_slice(&buf[pos..next]);
                pos = next;
            }
            b'$' | b'*' => match number(line)? {
                -1 => {
                    out.extend_from_slice(b"_\r\n");
                    pos = next;
                }
                n if n < 0 => return Err(RespError::BadLength),
                n if t == b'*' => {
                    out.extend_from_slice(&buf[pos..next]);
                    pending = pending.saturating_add(n as u64);
                    pos = next;
                }
                n => {
                    let end = next + n as usize + 2;
                    if end > buf.len() || &buf[end - 2..end] != b"\r\n" {
                        return Err(RespError::BadTerminator);
                    }
                    out.extend_from_slice(&buf[pos..end]);
                    pos = end;
                }
            },
            other => return Err(RespError::BadType(other)),
        }
    }
    Ok(pos)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp::drive::with_command;

    fn conv(reply: &[u8], shape: Shape) -> Vec<u8> {
        let mut out = Vec::new();
        write_resp3(reply, shape, &mut out).unwrap();
        out
    }

    fn shape(args: &[&[u8]]) -> Shape {
        with_command(args, Shape::of)
    }

    // Expected bytes are what redis-server 7.0.15 answers after `HELLO 3`.
    #[test]
    fn nils_become_null_at_any_depth() {
        assert_eq!(conv(b"$-1\r\n", Shape::Plain), b"_\r\n");
        assert_eq!(conv(b"*-1\r\n", Shape::Plain), b"_\r\n");
        assert_eq!(
            conv(b"*3\r\n$-1\r\n*1\r\n$-1\r\n$2\r\nab\r\n", Shape::Plain),
            b"*3\r\n_\r\n*1\r\n_\r\n$2\r\nab\r\n"
        );
        for same in [
            &b"+OK\r\n"[..],
            b"-ERR x\r\n",
            b":7\r\n",
            b"$0\r\n\r\n",
            b"*0\r\n",
        ] {
            assert_eq!(conv(same, Shape::Plain), same);
        }
    }

    #[test]
    fn maps_sets_and_doubles() {
        let hgetall = b"*4\r\n$1\r\nf\r\n$1\r\nv\r\n$1\r\ng\r\n$1\r\nw\r\n";
        assert_eq!(
            conv(hgetall, Shape::Map),
            b"%2\r\n$1\r\nf\r\n$1\r\nv\r\n$1\r\ng\r\n$1\r\nw\r\n"
        );
        assert_eq!(conv(b"*0\r\n", Shape::Map), b"%0\r\n");
        assert_eq!(conv(b"*1\r\n$1\r\na\r\n", Shape::Set), b"~1\r\n$1\r\na\r\n");
        assert_eq!(conv(b"$3\r\n1.5\r\n", Shape::Double), b",1.5\r\n");
        assert_eq!(conv(b"$-1\r\n", Shape::Double), b"_\r\n");
        assert_eq!(conv(b":1\r\n", Shape::Double), b":1\r\n");
        assert_eq!(
            conv(b"*2\r\n$3\r\n1.5\r\n$-1\r\n", Shape::Doubles),
            b"*2\r\n,1.5\r\n_\r\n"
        );
        assert_eq!(conv(b"-WRONGTYPE x\r\n", Shape::Map), b"-WRONGTYPE x\r\n");
    }

    #[test]
    fn score_and_field_pairs() {
        let flat = b"*4\r\n$1\r\na\r\n$3\r\n2.5\r\n$1\r\nb\r\n$1\r\n3\r\n";
        assert_eq!(
            conv(flat, Shape::ScorePairs),
            b"*2\r\n*2\r\n$1\r\na\r\n,2.5\r\n*2\r\n$1\r\nb\r\n,3\r\n"
        );
        assert_eq!(
            conv(flat, Shape::FlatScores),
            b"*4\r\n$1\r\na\r\n,2.5\r\n$1\r\nb\r\n,3\r\n"
        );
        assert_eq!(
            conv(b"*2\r\n$1\r\nf\r\n$1\r\nv\r\n", Shape::Pairs),
            b"*1\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n"
        );
        // Odd length: not a pair array, passed on as it is.
        assert_eq!(
            conv(b"*1\r\n$1\r\na\r\n", Shape::Pairs),
            b"*1\r\n$1\r\na\r\n"
        );
    }

    #[test]
    fn shapes_follow_the_command() {
        assert_eq!(shape(&[b"HGETALL", b"h"]), Shape::Map);
        assert_eq!(shape(&[b"smembers", b"s"]), Shape::Set);
        assert_eq!(shape(&[b"SPOP", b"s"]), Shape::Plain);
        assert_eq!(shape(&[b"SPOP", b"s", b"2"]), Shape::Set);
        assert_eq!(shape(&[b"ZSCORE", b"z", b"m"]), Shape::Double);
        assert_eq!(shape(&[b"ZMSCORE", b"z", b"m"]), Shape::Doubles);
        assert_eq!(shape(&[b"ZPOPMIN", b"z"]), Shape::FlatScores);
        assert_eq!(shape(&[b"ZPOPMAX", b"z", b"2"]), Shape::ScorePairs);
        assert_eq!(shape(&[b"ZRANGE", b"z", b"0", b"-1"]), Shape::Plain);
        assert_eq!(
            shape(&[b"zrange", b"z", b"0", b"-1", b"withscores"]),
            Shape::ScorePairs
        );
        assert_eq!(
            shape(&[b"HRANDFIELD", b"h", b"2", b"WITHVALUES"]),
            Shape::Pairs
        );
        assert_eq!(shape(&[b"GET", b"k"]), Shape::Plain);
    }

    #[test]
    fn malformed_replies_are_errors_and_write_nothing() {
        let mut out = b"keep".to_vec();
        assert!(write_resp3(b"$5\r\nab\r\n", Shape::Plain, &mut out).is_err());
        assert!(write_resp3(b"?x\r\n", Shape::Map, &mut out).is_err());
        assert!(write_resp3(b"*2\r\n$1\r\na\r\n", Shape::Set, &mut out).is_err());
        assert_eq!(out, b"keep");
    }
}
