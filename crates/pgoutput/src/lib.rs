//! Decoder for the `pgoutput` logical replication messages, protocol version 1
//! (PostgreSQL docs, "Logical Replication Message Formats"). Pure: bytes in, messages out.
//! Every length is checked against the input, so a malformed message is an error, never a
//! panic or an allocation larger than the input.

pub mod template;

use std::fmt;

/// One column value of a tuple, as pgoutput sends it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value<'a> {
    Null,
    /// A TOASTed value the UPDATE did not change; pgoutput leaves it out.
    UnchangedToast,
    Text(&'a [u8]),
    Binary(&'a [u8]),
}

/// A column of a `Relation` message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Column {
    /// Part of the replica identity (flag bit 1).
    pub key: bool,
    pub name: String,
    pub type_oid: u32,
    pub type_modifier: i32,
}

/// Which old-row image an UPDATE or DELETE carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OldKind {
    /// `K`: only the replica identity columns; the others are null.
    Key,
    /// `O`: the whole old row (REPLICA IDENTITY FULL).
    Full,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message<'a> {
    Begin {
        final_lsn: u64,
        commit_time: i64,
        xid: u32,
    },
    Commit {
        flags: u8,
        commit_lsn: u64,
        end_lsn: u64,
        commit_time: i64,
    },
    Origin {
        commit_lsn: u64,
        name: &'a [u8],
    },
    Relation {
        id: u32,
        namespace: String,
        name: String,
        replica_identity: u8,
        columns: Vec<Column>,
    },
    Type {
        id: u32,
        namespace: &'a [u8],
        name: &'a [u8],
    },
    Insert {
        relation: u32,
        new: Vec<Value<'a>>,
    },
    Update {
        relation: u32,
        old: Option<(OldKind, Vec<Value<'a>>)>,
        new: Vec<Value<'a>>,
    },
    Delete {
        relation: u32,
        old: (OldKind, Vec<Value<'a>>),
    },
    Truncate {
        options: u8,
        relations: Vec<u32>,
    },
    Message {
        flags: u8,
        lsn: u64,
        prefix: &'a [u8],
        content: &'a [u8],
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecodeError {
    Truncated(&'static str),
    UnknownMessage(u8),
    UnknownTupleKind(u8),
    UnexpectedByte { what: &'static str, byte: u8 },
    BadUtf8(&'static str),
    TrailingBytes(usize),
    Empty,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Truncated(what) => write!(f, "pgoutput: truncated {what}"),
            DecodeError::UnknownMessage(b) => write!(f, "pgoutput: unknown message type 0x{b:02x}"),
            DecodeError::UnknownTupleKind(b) => {
                write!(f, "pgoutput: unknown tuple column kind 0x{b:02x}")
            }
            DecodeError::UnexpectedByte { what, byte } => {
                write!(f, "pgoutput: unexpected byte 0x{byte:02x} in {what}")
            }
            DecodeError::BadUtf8(what) => write!(f, "pgoutput: {what} is not UTF-8"),
            DecodeError::TrailingBytes(n) => write!(f, "pgoutput: {n} bytes after the message"),
            DecodeError::Empty => f.write_str("pgoutput: empty message"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// A cursor over one message's bytes.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
        if self.buf.len() < n {
            return Err(DecodeError::Truncated(what));
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, DecodeError> {
        Ok(self.take(1, what)?[0])
    }

    fn i16(&mut self, what: &'static str) -> Result<i16, DecodeError> {
        Ok(i16::from_be_bytes(self.take(2, what)?.try_into().unwrap()))
    }

    fn i32(&mut self, what: &'static str) -> Result<i32, DecodeError> {
        Ok(i32::from_be_bytes(self.take(4, what)?.try_into().unwrap()))
    }

    fn i64(&mut self, what: &'static str) -> Result<i64, DecodeError> {
        Ok(i64::from_be_bytes(self.take(8, what)?.try_into().unwrap()))
    }

    /// A NUL-terminated string, without its terminator.
    fn cstr(&mut self, what: &'static str) -> Result<&'a [u8], DecodeError> {
        let end = self
            .buf
            .iter()
            .position(|&b| b == 0)
            .ok_or(DecodeError::Truncated(what))?;
        let s = &self.buf[..end];
        self.buf = &self.buf[end + 1..];
        Ok(s)
    }

    fn string(&mut self, what: &'static str) -> Result<String, DecodeError> {
        let raw = self.cstr(what)?;
        std::str::from_utf8(raw)
            .map(str::to_owned)
            .map_err(|_| DecodeError::BadUtf8(what))
    }

    fn tuple(&mut self) -> Result<Vec<Value<'a>>, DecodeError> {
        let n = self.i16("tuple column count")?;
        let n = usize::try_from(n).map_err(|_| DecodeError::Truncated("tuple column count"))?;
        // Each column takes at least one byte, so a count beyond the input is refused
        // before anything is allocated for it.
        if n > self.buf.len() {
            return Err(DecodeError::Truncated("tuple"));
        }
        let mut values = Vec::with_capacity(n);
        for _ in 0..n {
            let v = match self.u8("tuple column kind")? {
                b'n' => Value::Null,
                b'u' => Value::UnchangedToast,
                kind @ (b't' | b'b') => {
                    let len = self.i32("column length")?;
                    let len =
                        usize::try_from(len).map_err(|_| DecodeError::Truncated("column value"))?;
                    let data = self.take(len, "column value")?;
                    if kind == b't' {
                        Value::Text(data)
                    } else {
                        Value::Binary(data)
                    }
                }
                other => return Err(DecodeError::UnknownTupleKind(other)),
            };
            values.push(v);
        }
        Ok(values)
    }

    fn old_tuple(&mut self, tag: u8) -> Result<(OldKind, Vec<Value<'a>>), DecodeError> {
        let kind = match tag {
            b'K' => OldKind::Key,
            b'O' => OldKind::Full,
            byte => {
                return Err(DecodeError::UnexpectedByte {
                    what: "old tuple tag",
                    byte,
                })
            }
        };
        Ok((kind, self.tuple()?))
    }

    fn expect(&mut self, want: u8, what: &'static str) -> Result<(), DecodeError> {
        match self.u8(what)? {
            b if b == want => Ok(()),
            byte => Err(DecodeError::UnexpectedByte { what, byte }),
        }
    }
}

/// Decodes one pgoutput message (the payload of one XLogData).
pub fn decode(buf: &[u8]) -> Result<Message<'_>, DecodeError> {
    let (&tag, rest) = buf.split_first().ok_or(DecodeError::Empty)?;
    let mut r = Reader { buf: rest };
    let msg = match tag {
        b'B' => Message::Begin {
            final_lsn: r.i64("begin lsn")? as u64,
            commit_time: r.i64("begin time")?,
            xid: r.i32("begin xid")? as u32,
        },
        b'C' => Message::Commit {
            flags: r.u8("commit flags")?,
            commit_lsn: r.i64("commit lsn")? as u64,
            end_lsn: r.i64("commit end lsn")? as u64,
            commit_time: r.i64("commit time")?,
        },
        b'O' => Message::Origin {
            commit_lsn: r.i64("origin lsn")? as u64,
            name: r.cstr("origin name")?,
        },
        b'R' => {
            let id = r.i32("relation id")? as u32;
            let namespace = r.string("relation namespace")?;
            let name = r.string("relation name")?;
            let replica_identity = r.u8("replica identity")?;
            let n = r.i16("relation column count")?;
            let n =
                usize::try_from(n).map_err(|_| DecodeError::Truncated("relation column count"))?;
            if n > r.buf.len() {
                return Err(DecodeError::Truncated("relation columns"));
            }
            let mut columns = Vec::with_capacity(n);
            for _ in 0..n {
                let flags = r.u8("column flags")?;
                columns.push(Column {
                    key: flags & 1 != 0,
                    name: r.string("column name")?,
                    type_oid: r.i32("column type")? as u32,
                    type_modifier: r.i32("column type modifier")?,
                });
            }
            Message::Relation {
                id,
                namespace,
                name,
                replica_identity,
                columns,
            }
        }
        b'Y' => Message::Type {
            id: r.i32("type id")? as u32,
            namespace: r.cstr("type namespace")?,
            name: r.cstr("type name")?,
        },
        b'I' => {
            let relation = r.i32("insert relation")? as u32;
            r.expect(b'N', "insert tuple tag")?;
            Message::Insert {
                relation,
                new: r.tuple()?,
            }
        }
        b'U' => {
            let relation = r.i32("update relation")? as u32;
            let old = match r.u8("update tuple tag")? {
                b'N' => None,
                tag => {
                    let old = r.old_tuple(tag)?;
                    r.expect(b'N', "update new tuple tag")?;
                    Some(old)
                }
            };
            Message::Update {
                relation,
                old,
                new: r.tuple()?,
            }
        }
        b'D' => {
            let relation = r.i32("delete relation")? as u32;
            let tag = r.u8("delete tuple tag")?;
            Message::Delete {
                relation,
                old: r.old_tuple(tag)?,
            }
        }
        b'T' => {
            let n = r.i32("truncate relation count")?;
            let n = usize::try_from(n)
                .map_err(|_| DecodeError::Truncated("truncate relation count"))?;
            let options = r.u8("truncate options")?;
            if n > r.buf.len() / 4 {
                return Err(DecodeError::Truncated("truncate relations"));
            }
            let mut relations = Vec::with_capacity(n);
            for _ in 0..n {
                relations.push(r.i32("truncate relation")? as u32);
            }
            Message::Truncate { options, relations }
        }
        b'M' => {
            let flags = r.u8("message flags")?;
            let lsn = r.i64("message lsn")? as u64;
            let prefix = r.cstr("message prefix")?;
            let len = r.i32("message length")?;
            let len =
                usize::try_from(len).map_err(|_| DecodeError::Truncated("message content"))?;
            Message::Message {
                flags,
                lsn,
                prefix,
                content: r.take(len, "message content")?,
            }
        }
        other => return Err(DecodeError::UnknownMessage(other)),
    };
    if !r.buf.is_empty() {
        return Err(DecodeError::TrailingBytes(r.buf.len()));
    }
    Ok(msg)
}

/// The encoder the tests (and the `pgoutput_decode` fuzz target) use to build messages; the
/// inverse of [`decode`].
#[cfg(any(test, fuzzing))]
pub mod encode {
    use super::*;

    fn cstr(out: &mut Vec<u8>, s: &[u8]) {
        out.extend_from_slice(s);
        out.push(0);
    }

    pub fn tuple(out: &mut Vec<u8>, values: &[Value<'_>]) {
        out.extend_from_slice(&(values.len() as i16).to_be_bytes());
        for v in values {
            match v {
                Value::Null => out.push(b'n'),
                Value::UnchangedToast => out.push(b'u'),
                Value::Text(d) | Value::Binary(d) => {
                    out.push(if matches!(v, Value::Text(_)) {
                        b't'
                    } else {
                        b'b'
                    });
                    out.extend_from_slice(&(d.len() as i32).to_be_bytes());
                    out.extend_from_slice(d);
                }
            }
        }
    }

    fn old(out: &mut Vec<u8>, (kind, values): &(OldKind, Vec<Value<'_>>)) {
        out.push(match kind {
            OldKind::Key => b'K',
            OldKind::Full => b'O',
        });
        tuple(out, values);
    }

    pub fn message(m: &Message<'_>) -> Vec<u8> {
        let mut out = Vec::new();
        match m {
            Message::Begin {
                final_lsn,
                commit_time,
                xid,
            } => {
                out.push(b'B');
                out.extend_from_slice(&final_lsn.to_be_bytes());
                out.extend_from_slice(&commit_time.to_be_bytes());
                out.extend_from_slice(&xid.to_be_bytes());
            }
            Message::Commit {
                flags,
                commit_lsn,
                end_lsn,
                commit_time,
            } => {
                out.push(b'C');
                out.push(*flags);
                out.extend_from_slice(&commit_lsn.to_be_bytes());
                out.extend_from_slice(&end_lsn.to_be_bytes());
                out.extend_from_slice(&commit_time.to_be_bytes());
            }
            Message::Origin { commit_lsn, name } => {
                out.push(b'O');
                out.extend_from_slice(&commit_lsn.to_be_bytes());
                cstr(&mut out, name);
            }
            Message::Relation {
                id,
                namespace,
                name,
                replica_identity,
                columns,
            } => {
                out.push(b'R');
                out.extend_from_slice(&id.to_be_bytes());
                cstr(&mut out, namespace.as_bytes());
                cstr(&mut out, name.as_bytes());
                out.push(*replica_identity);
                out.extend_from_slice(&(columns.len() as i16).to_be_bytes());
                for c in columns {
                    out.push(u8::from(c.key));
                    cstr(&mut out, c.name.as_bytes());
                    out.extend_from_slice(&c.type_oid.to_be_bytes());
                    out.extend_from_slice(&c.type_modifier.to_be_bytes());
                }
            }
            Message::Type {
                id,
                namespace,
                name,
            } => {
                out.push(b'Y');
                out.extend_from_slice(&id.to_be_bytes());
                cstr(&mut out, namespace);
                cstr(&mut out, name);
            }
            Message::Insert { relation, new } => {
                out.push(b'I');
                out.extend_from_slice(&relation.to_be_bytes());
                out.push(b'N');
                tuple(&mut out, new);
            }
            Message::Update {
                relation,
                old: o,
                new,
            } => {
                out.push(b'U');
                out.extend_from_slice(&relation.to_be_bytes());
                if let Some(o) = o {
                    old(&mut out, o);
                }
                out.push(b'N');
                tuple(&mut out, new);
            }
            Message::Delete { relation, old: o } => {
                out.push(b'D');
                out.extend_from_slice(&relation.to_be_bytes());
                old(&mut out, o);
            }
            Message::Truncate { options, relations } => {
                out.push(b'T');
                out.extend_from_slice(&(relations.len() as i32).to_be_bytes());
                out.push(*options);
                for r in relations {
                    out.extend_from_slice(&r.to_be_bytes());
                }
            }
            Message::Message {
                flags,
                lsn,
                prefix,
                content,
            } => {
                out.push(b'M');
                out.push(*flags);
                out.extend_from_slice(&lsn.to_be_bytes());
                cstr(&mut out, prefix);
                out.extend_from_slice(&(content.len() as i32).to_be_bytes());
                out.extend_from_slice(content);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The Relation message for `users(id int primary key, email text)`, written out byte by
    /// byte from the documented layout rather than through the test encoder.
    fn users_relation() -> Vec<u8> {
        let mut b = vec![b'R'];
        b.extend_from_slice(&16385u32.to_be_bytes());
        b.extend_from_slice(b"public\0users\0d");
        b.extend_from_slice(&2i16.to_be_bytes());
        b.push(1);
        b.extend_from_slice(b"id\0");
        b.extend_from_slice(&23u32.to_be_bytes());
        b.extend_from_slice(&(-1i32).to_be_bytes());
        b.push(0);
        b.extend_from_slice(b"email\0");
        b.extend_from_slice(&25u32.to_be_bytes());
        b.extend_from_slice(&(-1i32).to_be_bytes());
        b
    }

    #[test]
    fn decodes_relation_from_raw_bytes() {
        let bytes = users_relation();
        let Message::Relation {
            id,
            namespace,
            name,
            replica_identity,
            columns,
        } = decode(&bytes).unwrap()
        else {
            panic!("not a relation");
        };
        assert_eq!(
            (id, namespace.as_str(), name.as_str()),
            (16385, "public", "users")
        );
        assert_eq!(replica_identity, b'd');
        assert_eq!(columns.len(), 2);
        assert!(columns[0].key && !columns[1].key);
        assert_eq!(columns[1].name, "email");
        assert_eq!(columns[1].type_oid, 25);
    }

    #[test]
    fn decodes_insert_from_raw_bytes() {
        let mut b = vec![b'I'];
        b.extend_from_slice(&16385u32.to_be_bytes());
        b.push(b'N');
        b.extend_from_slice(&2i16.to_be_bytes());
        b.push(b't');
        b.extend_from_slice(&1i32.to_be_bytes());
        b.push(b'7');
        b.push(b'n');
        assert_eq!(
            decode(&b).unwrap(),
            Message::Insert {
                relation: 16385,
                new: vec![Value::Text(b"7"), Value::Null]
            }
        );
    }

    /// What `pg_logical_emit_message(true, 'memfleet.remote_marker', 'k t')` streams, written
    /// out from the documented layout: flags (1: transactional), LSN, prefix, length, content.
    #[test]
    fn decodes_logical_message_from_raw_bytes() {
        let mut b = vec![b'M', 1];
        b.extend_from_slice(&0x0000_0001_0A00_0028u64.to_be_bytes());
        b.extend_from_slice(b"memfleet.remote_marker\0");
        b.extend_from_slice(&3i32.to_be_bytes());
        b.extend_from_slice(b"k t");
        assert_eq!(
            decode(&b).unwrap(),
            Message::Message {
                flags: 1,
                lsn: 0x0000_0001_0A00_0028,
                prefix: b"memfleet.remote_marker",
                content: b"k t",
            }
        );
        // Content shorter than its length, a negative length, a prefix without its NUL.
        let short = &b[..b.len() - 1];
        assert_eq!(
            decode(short),
            Err(DecodeError::Truncated("message content"))
        );
        let mut neg = b[..b.len() - 7].to_vec();
        neg.extend_from_slice(&(-1i32).to_be_bytes());
        assert_eq!(decode(&neg), Err(DecodeError::Truncated("message content")));
        assert_eq!(
            decode(b"M\x01\0\0\0\0\0\0\0\x01abc"),
            Err(DecodeError::Truncated("message prefix"))
        );
    }

    #[test]
    fn update_with_and_without_old_tuple() {
        for old in [
            None,
            Some((OldKind::Key, vec![Value::Text(b"1"), Value::Null])),
            Some((OldKind::Full, vec![Value::Text(b"1"), Value::Text(b"x")])),
        ] {
            let m = Message::Update {
                relation: 9,
                old,
                new: vec![Value::Text(b"2"), Value::UnchangedToast],
            };
            assert_eq!(decode(&encode::message(&m)).unwrap(), m);
        }
    }

    #[test]
    fn refuses_malformed_input() {
        assert_eq!(decode(b""), Err(DecodeError::Empty));
        assert_eq!(decode(b"Z"), Err(DecodeError::UnknownMessage(b'Z')));
        assert_eq!(decode(b"B\0\0"), Err(DecodeError::Truncated("begin lsn")));
        // A delete whose old tuple is tagged 'N' is not a valid delete.
        let mut d = vec![b'D', 0, 0, 0, 1, b'N'];
        d.extend_from_slice(&0i16.to_be_bytes());
        assert!(matches!(
            decode(&d),
            Err(DecodeError::UnexpectedByte { .. })
        ));
        // A column length past the end of the message.
        let mut i = vec![b'I', 0, 0, 0, 1, b'N', 0, 1, b't'];
        i.extend_from_slice(&1000i32.to_be_bytes());
        assert_eq!(decode(&i), Err(DecodeError::Truncated("column value")));
        // A negative column length.
        let mut i = vec![b'I', 0, 0, 0, 1, b'N', 0, 1, b't'];
        i.extend_from_slice(&(-5i32).to_be_bytes());
        assert_eq!(decode(&i), Err(DecodeError::Truncated("column value")));
        // A huge column count with no columns behind it allocates nothing.
        let i = [b'I', 0, 0, 0, 1, b'N', 0x7f, 0xff];
        assert_eq!(decode(&i), Err(DecodeError::Truncated("tuple")));
        let mut extra = encode::message(&Message::Begin {
            final_lsn: 1,
            commit_time: 2,
            xid: 3,
        });
        extra.push(0);
        assert_eq!(decode(&extra), Err(DecodeError::TrailingBytes(1)));
    }

    fn value() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(any::<u8>(), 0..12)
    }

    fn values(data: &[Vec<u8>], kinds: &[u8]) -> Vec<Value<'static>> {
        data.iter()
            .zip(kinds)
            .map(|(d, k)| {
                let d: &'static [u8] = Box::leak(d.clone().into_boxed_slice());
                match k % 4 {
                    0 => Value::Null,
                    1 => Value::UnchangedToast,
                    2 => Value::Text(d),
                    _ => Value::Binary(d),
                }
            })
            .collect()
    }

    proptest! {
        #[test]
        fn never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..64), tag in proptest::sample::select(b"BCORYIUDTMx".to_vec())) {
            let mut buf = vec![tag];
            buf.extend_from_slice(&bytes);
            let _ = decode(&buf);
            let _ = decode(&bytes);
        }

        #[test]
        fn row_messages_round_trip(
            relation in any::<u32>(),
            data in proptest::collection::vec(value(), 0..6),
            kinds in proptest::collection::vec(any::<u8>(), 6),
            which in 0u8..4,
            full in any::<bool>(),
        ) {
            let new = values(&data, &kinds);
            let kind = if full { OldKind::Full } else { OldKind::Key };
            let m = match which {
                0 => Message::Insert { relation, new },
                1 => Message::Update { relation, old: None, new },
                2 => Message::Update { relation, old: Some((kind, new.clone())), new },
                _ => Message::Delete { relation, old: (kind, new) },
            };
            let bytes = encode::message(&m);
            prop_assert_eq!(decode(&bytes).unwrap(), m);
            // Every strict prefix of a valid message is refused, never misread.
            for cut in 0..bytes.len() {
                prop_assert!(decode(&bytes[..cut]).is_err());
            }
        }

        #[test]
        fn logical_messages_round_trip(
            flags in any::<u8>(),
            lsn in any::<u64>(),
            prefix in proptest::collection::vec(1u8..=255, 0..24),
            content in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let m = Message::Message { flags, lsn, prefix: &prefix, content: &content };
            let bytes = encode::message(&m);
            prop_assert_eq!(decode(&bytes).unwrap(), m);
            for cut in 0..bytes.len() {
                prop_assert!(decode(&bytes[..cut]).is_err());
            }
        }

        #[test]
        fn relation_round_trips(
            id in any::<u32>(),
            names in proptest::collection::vec("[a-z_]{1,8}", 0..5),
            ident in proptest::sample::select(b"dnfi".to_vec()),
        ) {
            let m = Message::Relation {
                id,
                namespace: "public".into(),
                name: "t".into(),
                replica_identity: ident,
                columns: names.iter().enumerate().map(|(i, n)| Column {
                    key: i == 0,
                    name: n.clone(),
                    type_oid: 23 + i as u32,
                    type_modifier: -1,
                }).collect(),
            };
            let bytes = encode::message(&m);
            prop_assert_eq!(decode(&bytes).unwrap(), m);
        }
    }
}
