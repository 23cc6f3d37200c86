//! From decoded row changes to cache keys: remembers each relation's columns (pgoutput
//! sends a Relation message before a table's first change on a connection) and renders the
//! configured templates over new and old rows. Pure.

use std::collections::HashMap;

use crate::config::{Changes, MarkerRelease, TableSpec, MARKER_MESSAGE_PREFIX};
use pgoutput::template::{check_key, BadKey, Template};
use pgoutput::{Message, Value};

struct Relation {
    /// Index into the configured tables; `None` for a table the publication carries but
    /// the configuration does not name.
    table: Option<usize>,
    columns: HashMap<String, usize>,
}

/// Keys that could not be sent, by reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Skipped {
    /// Longer than memcached's 250 bytes.
    pub too_long: u64,
    /// Containing a space or control byte.
    pub bad_byte: u64,
    /// A template column was NULL or absent from the change (an old row without
    /// REPLICA IDENTITY covering it).
    pub unresolved: u64,
}

/// What the caller should hear about a skipped key (to log it).
#[derive(Debug, PartialEq, Eq)]
pub struct SkipNote {
    pub table: String,
    pub template: String,
    pub reason: BadKey,
    pub key: Vec<u8>,
}

/// A row change's relation, new row, old row, and whether the table wants its kind.
type RowChange<'m, 'v> = (
    u32,
    Option<&'m [Value<'v>]>,
    Option<&'m [Value<'v>]>,
    fn(Changes) -> bool,
);

pub struct KeyMaker {
    tables: Vec<TableSpec>,
    relations: HashMap<u32, Relation>,
    pub skipped: Skipped,
    /// Row changes to tables the configuration does not name, and TRUNCATEs (which carry no
    /// rows to compute keys from).
    pub ignored_changes: u64,
    pub truncates: u64,
    /// `remote_markers`: each key is followed by its marker key, this prefix + the key
    /// (with `MarkerRelease::Change`).
    markers: Option<Vec<u8>>,
    release: MarkerRelease,
    /// Marker tokens read from transactions' messages, and lines of such messages that
    /// were not `<key> <token>` (or made a marker key memcached refuses).
    pub marker_tokens: u64,
    pub bad_marker_lines: u64,
}

/// A remote marker to remove if it still holds `token`: the write that set it is in the
/// transaction being invalidated, and no later write has set it again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Release {
    pub marker: Vec<u8>,
    pub token: Vec<u8>,
}

/// Longest token a marker message may carry.
pub const MAX_TOKEN: usize = 64;

/// Looks a column up in a tuple: its text, or for an unchanged TOAST value the old row's.
fn column<'v>(
    rel: &Relation,
    name: &str,
    row: &[Value<'v>],
    fallback: Option<&[Value<'v>]>,
) -> Option<&'v [u8]> {
    let &i = rel.columns.get(name)?;
    match row.get(i)? {
        Value::Text(v) | Value::Binary(v) => Some(v),
        Value::Null => None,
        Value::UnchangedToast => match fallback?.get(i)? {
            Value::Text(v) | Value::Binary(v) => Some(v),
            _ => None,
        },
    }
}

impl KeyMaker {
    pub fn new(tables: Vec<TableSpec>) -> KeyMaker {
        KeyMaker {
            tables,
            relations: HashMap::new(),
            skipped: Skipped::default(),
            ignored_changes: 0,
            truncates: 0,
            markers: None,
            release: MarkerRelease::Change,
            marker_tokens: 0,
            bad_marker_lines: 0,
        }
    }

    /// Remote markers `prefix` + key: with `Change`, every key is followed by its marker;
    /// with `Message`, markers are named by the transactions' messages ([`KeyMaker::releases`]).
    pub fn with_markers(mut self, prefix: Option<Vec<u8>>, release: MarkerRelease) -> KeyMaker {
        self.markers = prefix;
        self.release = release;
        self
    }

    /// The markers a logical decoding message asks to release: with `remote_markers_release:
    /// message`, a transactional message of prefix [`MARKER_MESSAGE_PREFIX`] whose content is
    /// lines `<key> <token>`. Anything else releases nothing.
    pub fn releases(
        &mut self,
        transactional: bool,
        prefix: &[u8],
        content: &[u8],
        out: &mut Vec<Release>,
    ) {
        let Some(mprefix) = self.markers.as_deref() else {
            return;
        };
        if self.release != MarkerRelease::Message || prefix != MARKER_MESSAGE_PREFIX.as_bytes() {
            return;
        }
        for line in content.split(|&b| b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.is_empty() {
                continue;
            }
            let mut parts = line.splitn(2, |&b| b == b' ');
            let (Some(key), Some(token)) = (parts.next(), parts.next()) else {
                self.bad_marker_lines += 1;
                continue;
            };
            let marker = [mprefix, key].concat();
            // Outside a transaction the message is tied to no write: it releases nothing.
            if !transactional
                || key.is_empty()
                || check_key(&marker).is_err()
                || token.is_empty()
                || token.len() > MAX_TOKEN
                || check_key(token).is_err()
            {
                self.bad_marker_lines += 1;
                continue;
            }
            self.marker_tokens += 1;
            out.push(Release {
                marker,
                token: token.to_vec(),
            });
        }
    }

    /// Handles one message; appends the keys a row change invalidates to `out` and returns
    /// notes on keys that were rendered but cannot be sent.
    pub fn apply(&mut self, msg: &Message<'_>, out: &mut Vec<Vec<u8>>) -> Vec<SkipNote> {
        let mut notes = Vec::new();
        let (relation, new, old, want): RowChange<'_, '_> = match msg {
            Message::Relation {
                id,
                namespace,
                name,
                columns,
                ..
            } => {
                let table = self
                    .tables
                    .iter()
                    .position(|t| &t.schema == namespace && &t.name == name);
                let columns = columns
                    .iter()
                    .enumerate()
                    .map(|(i, c)| (c.name.clone(), i))
                    .collect();
                self.relations.insert(*id, Relation { table, columns });
                return notes;
            }
            Message::Insert { relation, new } => (*relation, Some(new), None, |c| c.insert),
            Message::Update { relation, old, new } => (
                *relation,
                Some(new),
                old.as_ref().map(|(_, o)| o.as_slice()),
                |c| c.update,
            ),
            Message::Delete { relation, old } => (*relation, None, Some(&old.1), |c| c.delete),
            Message::Truncate { .. } => {
                self.truncates += 1;
                return notes;
            }
            _ => return notes,
        };
        let Some(rel) = self.relations.get(&relation) else {
            // pgoutput always describes a relation before its first change; a change for
            // an unknown one means a decoding bug, so it is counted rather than guessed at.
            self.ignored_changes += 1;
            return notes;
        };
        let Some(table) = rel.table.map(|i| &self.tables[i]) else {
            self.ignored_changes += 1;
            return notes;
        };
        if !want(table.changes) {
            return notes;
        }
        let first = out.len();
        for t in &table.templates {
            let render = |row: &[Value<'_>], fallback: Option<&[Value<'_>]>, t: &Template| {
                t.render(|name| column(rel, name, row, fallback))
            };
            let new_key = new.map(|row| render(row, old, t));
            let old_key = old.map(|row| render(row, None, t));
            let markers = match self.release {
                MarkerRelease::Change => self.markers.as_deref(),
                // Released by the transaction that set them, not by any change of the key.
                MarkerRelease::Message => None,
            };
            let skipped = &mut self.skipped;
            let mut unresolved = 0;
            let mut check = |k: Vec<u8>, marker: bool| match check_key(&k) {
                Ok(()) => Some(k),
                Err(reason) => {
                    match reason {
                        BadKey::TooLong => skipped.too_long += 1,
                        BadKey::BadByte => skipped.bad_byte += 1,
                    }
                    let template = if marker {
                        format!("{} (its remote marker)", t.source())
                    } else {
                        t.source().to_owned()
                    };
                    notes.push(SkipNote {
                        table: table.display_name(),
                        template,
                        reason,
                        key: k,
                    });
                    None
                }
            };
            let mut push = |key: Option<Vec<u8>>| {
                let Some(k) = key else {
                    unresolved += 1;
                    return;
                };
                let Some(k) = check(k, false) else { return };
                // The marker right after its key: deleted once the key is invalidated.
                let marker = markers.and_then(|p| check([p, &k[..]].concat(), true));
                for k in std::iter::once(k).chain(marker) {
                    if !out[first..].contains(&k) {
                        out.push(k);
                    }
                }
            };
            match (new_key, old_key) {
                (Some(n), None) => push(n),
                (None, Some(o)) => push(o),
                (Some(n), Some(o)) => {
                    push(n);
                    push(o);
                }
                (None, None) => {}
            }
            self.skipped.unresolved += unresolved;
        }
        notes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use pgoutput::{Column, OldKind};

    fn maker(tables: &str) -> KeyMaker {
        let text =
            format!("source: {{dsn: x}}\ntargets: [{{memcached: 127.0.0.1:1}}]\ntables:\n{tables}");
        KeyMaker::new(Config::from_yaml_str(&text).unwrap().tables)
    }

    fn relation(id: u32, name: &str, cols: &[&str]) -> Message<'static> {
        Message::Relation {
            id,
            namespace: "public".into(),
            name: name.into(),
            replica_identity: b'd',
            columns: cols
                .iter()
                .enumerate()
                .map(|(i, c)| Column {
                    key: i == 0,
                    name: (*c).into(),
                    type_oid: 25,
                    type_modifier: -1,
                })
                .collect(),
        }
    }

    fn keys(m: &mut KeyMaker, msg: Message<'_>) -> Vec<String> {
        let mut out = Vec::new();
        m.apply(&msg, &mut out);
        out.into_iter()
            .map(|k| String::from_utf8(k).unwrap())
            .collect()
    }

    #[test]
    fn insert_update_delete() {
        let mut m = maker("  users: [\"user:{id}\", \"user:{id}:profile\", \"email:{email}\"]");
        keys(&mut m, relation(5, "users", &["id", "email", "bio"]));
        let row = vec![Value::Text(b"7"), Value::Text(b"a@x"), Value::Null];
        assert_eq!(
            keys(
                &mut m,
                Message::Insert {
                    relation: 5,
                    new: row.clone()
                }
            ),
            ["user:7", "user:7:profile", "email:a@x"]
        );
        // An update that changes the email, with the full old row: both emails go.
        let new = vec![
            Value::Text(b"7"),
            Value::Text(b"b@x"),
            Value::UnchangedToast,
        ];
        assert_eq!(
            keys(
                &mut m,
                Message::Update {
                    relation: 5,
                    old: Some((OldKind::Full, row.clone())),
                    new: new.clone()
                }
            ),
            ["user:7", "user:7:profile", "email:b@x", "email:a@x"]
        );
        // Without an old row only the new keys are known.
        assert_eq!(
            keys(
                &mut m,
                Message::Update {
                    relation: 5,
                    old: None,
                    new: new.clone()
                }
            ),
            ["user:7", "user:7:profile", "email:b@x"]
        );
        // A key-only old row (primary key changed, REPLICA IDENTITY DEFAULT): the old id's
        // keys go; the old email is unknowable and counted.
        let key_only = vec![Value::Text(b"6"), Value::Null, Value::Null];
        assert_eq!(
            keys(
                &mut m,
                Message::Update {
                    relation: 5,
                    old: Some((OldKind::Key, key_only.clone())),
                    new
                }
            ),
            [
                "user:7",
                "user:6",
                "user:7:profile",
                "user:6:profile",
                "email:b@x"
            ]
        );
        assert_eq!(m.skipped.unresolved, 1);
        assert_eq!(
            keys(
                &mut m,
                Message::Delete {
                    relation: 5,
                    old: (OldKind::Key, key_only)
                }
            ),
            ["user:6", "user:6:profile"]
        );
        assert_eq!(m.skipped.unresolved, 2);
    }

    #[test]
    fn each_key_is_followed_by_its_marker() {
        let mut m = maker("  users: [\"user:{id}\", \"email:{email}\"]")
            .with_markers(Some(b"rm:".to_vec()), MarkerRelease::Change);
        keys(&mut m, relation(1, "users", &["id", "email"]));
        let old = vec![Value::Text(b"7"), Value::Text(b"a@x")];
        let new = vec![Value::Text(b"7"), Value::Text(b"b@x")];
        assert_eq!(
            keys(
                &mut m,
                Message::Update {
                    relation: 1,
                    old: Some((OldKind::Full, old)),
                    new
                }
            ),
            [
                "user:7",
                "rm:user:7",
                "email:b@x",
                "rm:email:b@x",
                "email:a@x",
                "rm:email:a@x"
            ]
        );
        // A key of 248 bytes fits; its marker (251) does not: the key goes, the marker is
        // counted as too long.
        let long = vec![b'z'; 243];
        let mut out = Vec::new();
        let notes = m.apply(
            &Message::Insert {
                relation: 1,
                new: vec![Value::Text(&long), Value::Null],
            },
            &mut out,
        );
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].len(), 248);
        assert_eq!(notes.len(), 1);
        assert_eq!(notes[0].reason, BadKey::TooLong);
        assert_eq!(notes[0].key.len(), 251);
        assert!(notes[0].template.contains("remote marker"));
        assert_eq!(m.skipped.too_long, 1);
        assert_eq!(m.skipped.unresolved, 1);
    }

    #[test]
    fn unchanged_toast_takes_the_old_value() {
        let mut m = maker("  docs: [\"doc:{slug}\"]");
        keys(&mut m, relation(1, "docs", &["id", "slug"]));
        let old = vec![Value::Text(b"1"), Value::Text(b"intro")];
        let new = vec![Value::Text(b"1"), Value::UnchangedToast];
        assert_eq!(
            keys(
                &mut m,
                Message::Update {
                    relation: 1,
                    old: Some((OldKind::Full, old)),
                    new
                }
            ),
            ["doc:intro"]
        );
    }

    #[test]
    fn change_types_and_unconfigured_tables() {
        let mut m = maker("  users: {keys: [\"user:{id}\"], changes: [delete]}");
        keys(&mut m, relation(1, "users", &["id"]));
        keys(&mut m, relation(2, "other", &["id"]));
        let row = vec![Value::Text(b"1")];
        assert!(keys(
            &mut m,
            Message::Insert {
                relation: 1,
                new: row.clone()
            }
        )
        .is_empty());
        assert_eq!(
            keys(
                &mut m,
                Message::Delete {
                    relation: 1,
                    old: (OldKind::Key, row.clone())
                }
            ),
            ["user:1"]
        );
        assert!(keys(
            &mut m,
            Message::Insert {
                relation: 2,
                new: row.clone()
            }
        )
        .is_empty());
        assert!(keys(
            &mut m,
            Message::Insert {
                relation: 3,
                new: row
            }
        )
        .is_empty());
        assert_eq!(m.ignored_changes, 2);
    }

    #[test]
    fn overlong_and_bad_keys_are_counted_not_sent() {
        let mut m = maker("  users: [\"user:{name}\"]");
        keys(&mut m, relation(1, "users", &["name"]));
        let long = vec![b'x'; 250];
        let mut out = Vec::new();
        let notes = m.apply(
            &Message::Insert {
                relation: 1,
                new: vec![Value::Text(&long)],
            },
            &mut out,
        );
        assert!(out.is_empty());
        assert_eq!(notes.len(), 1);
        assert_eq!(notes[0].reason, BadKey::TooLong);
        assert_eq!(m.skipped.too_long, 1);
        assert!(keys(
            &mut m,
            Message::Insert {
                relation: 1,
                new: vec![Value::Text(b"a b")]
            }
        )
        .is_empty());
        assert_eq!(m.skipped.bad_byte, 1);
        // 245 bytes of value + "user:" is exactly 250: sent.
        let fits = vec![b'y'; 245];
        assert_eq!(
            keys(
                &mut m,
                Message::Insert {
                    relation: 1,
                    new: vec![Value::Text(&fits)]
                }
            )
            .len(),
            1
        );
    }

    #[test]
    fn messages_release_markers_by_token() {
        let mut m = maker("  users: [\"user:{id}\"]")
            .with_markers(Some(b"rm:".to_vec()), MarkerRelease::Message);
        keys(&mut m, relation(1, "users", &["id"]));
        // Row changes no longer carry markers: only the transaction that set one removes it.
        let row = vec![Value::Text(b"7")];
        assert_eq!(
            keys(
                &mut m,
                Message::Insert {
                    relation: 1,
                    new: row
                }
            ),
            ["user:7"]
        );
        let p = MARKER_MESSAGE_PREFIX.as_bytes();
        let mut out = Vec::new();
        m.releases(true, p, b"user:7 ab01\nuser:8 cd02\n", &mut out);
        let r = |k: &[u8], t: &[u8]| Release {
            marker: k.to_vec(),
            token: t.to_vec(),
        };
        assert_eq!(out, [r(b"rm:user:7", b"ab01"), r(b"rm:user:8", b"cd02")]);
        // Someone else's messages, a message outside a transaction, malformed lines.
        out.clear();
        m.releases(true, b"other", b"user:7 ab01", &mut out);
        assert!(out.is_empty());
        m.releases(false, p, b"user:7 ab01", &mut out);
        m.releases(true, p, b"user:7\nuser:7 \n user:7\nuser:7 a b", &mut out);
        let long = [b"user:7 ".as_slice(), &[b'x'; MAX_TOKEN + 1]].concat();
        m.releases(true, p, &long, &mut out);
        let over = [&[b'k'; 248][..], b" t"].concat();
        m.releases(true, p, &over, &mut out);
        assert!(out.is_empty(), "{out:?}");
        assert_eq!((m.marker_tokens, m.bad_marker_lines), (2, 7));
        // With markers released by changes, messages are not read.
        let mut c = maker("  users: [\"user:{id}\"]")
            .with_markers(Some(b"rm:".to_vec()), MarkerRelease::Change);
        c.releases(true, p, b"user:7 ab01", &mut out);
        assert!(out.is_empty());
    }

    proptest::proptest! {
        /// Whatever a message holds: no panic, and every release is a key memcached takes
        /// (the marker prefix + a line's key) with a token of a line, at most one per line.
        #[test]
        fn marker_messages_never_yield_bad_keys(
            content in proptest::collection::vec(
                proptest::sample::select(b"ab: \n\r\x00\x7f\xff19".to_vec()), 0..300),
        ) {
            let mut m = maker("  users: [\"user:{id}\"]")
                .with_markers(Some(b"rm:".to_vec()), MarkerRelease::Message);
            let mut out = Vec::new();
            m.releases(true, MARKER_MESSAGE_PREFIX.as_bytes(), &content, &mut out);
            let lines = content.split(|&b| b == b'\n').count() as u64;
            proptest::prop_assert!(out.len() as u64 <= lines);
            proptest::prop_assert_eq!(m.marker_tokens, out.len() as u64);
            proptest::prop_assert!(m.marker_tokens + m.bad_marker_lines <= lines);
            for r in &out {
                proptest::prop_assert!(check_key(&r.marker).is_ok() && r.marker.starts_with(b"rm:"));
                proptest::prop_assert!(check_key(&r.token).is_ok() && r.token.len() <= MAX_TOKEN);
                let line = [&r.marker[3..], b" ", &r.token[..]].concat();
                proptest::prop_assert!(content.windows(line.len()).any(|w| w == line.as_slice()));
            }
        }
    }
}
