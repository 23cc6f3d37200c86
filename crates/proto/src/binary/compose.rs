//! Response composition (what memcached 1.6.18 writes for each outcome) and request encoding.
//! Everything appends to the caller's Vec: no allocation beyond its growth.

use super::{
    opcode as op, BinRequest, Command, Status, OOM_ALLOCATING_ITEM, REQUEST_MAGIC, RESPONSE_MAGIC,
};
use crate::StoreCmd;

/// The header fields that vary between packets.
pub(super) struct Head {
    pub opcode: u8,
    /// vbucket in a request, status in a response.
    pub vbucket_or_status: u16,
    pub opaque: u32,
    pub cas: u64,
}

/// Appends one packet: header, extras, key, value. Data type is always 0 (raw bytes).
pub(super) fn write_packet(
    out: &mut Vec<u8>,
    magic: u8,
    head: Head,
    extras: &[u8],
    key: &[u8],
    value: &[u8],
) {
    let body = extras.len() + key.len() + value.len();
    out.reserve(super::HEADER_LEN + body);
    out.push(magic);
    out.push(head.opcode);
    out.extend_from_slice(&(key.len() as u16).to_be_bytes());
    out.push(extras.len() as u8);
    out.push(0);
    out.extend_from_slice(&head.vbucket_or_status.to_be_bytes());
    out.extend_from_slice(&(body as u32).to_be_bytes());
    out.extend_from_slice(&head.opaque.to_be_bytes());
    out.extend_from_slice(&head.cas.to_be_bytes());
    out.extend_from_slice(extras);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

/// Appends one stat packet (opcode stat, status 0, CAS 0). memcached answers a stat request
/// with one packet per statistic, then an empty one (`write_stat(out, opaque, b"", b"")`).
pub fn write_stat(out: &mut Vec<u8>, opaque: u32, name: &[u8], value: &[u8]) {
    let head = Head {
        opcode: op::STAT,
        vbucket_or_status: 0,
        opaque,
        cas: 0,
    };
    write_packet(out, RESPONSE_MAGIC, head, &[], name, value);
}

impl<'a> BinRequest<'a> {
    fn reply(&self, out: &mut Vec<u8>, status: Status, cas: u64, parts: [&[u8]; 3]) {
        let head = Head {
            opcode: self.opcode,
            vbucket_or_status: status.code(),
            opaque: self.opaque,
            cas,
        };
        write_packet(out, RESPONSE_MAGIC, head, parts[0], parts[1], parts[2]);
    }

    /// A success reply with `value` as body (nothing for a quiet request): stored (CAS of the
    /// new item), deleted, flushed, noop, quit, version (the version string), SASL list
    /// mechanisms (names separated by spaces) and SASL done (`Authenticated`).
    pub fn write_ok(&self, out: &mut Vec<u8>, cas: u64, value: &[u8]) {
        if !self.quiet {
            self.reply(out, Status::Success, cas, [&[], &[], value]);
        }
    }

    /// incr/decr success: the new value as 8 big-endian bytes, the item's CAS (nothing when
    /// quiet).
    pub fn write_arith(&self, out: &mut Vec<u8>, value: u64, cas: u64) {
        self.write_ok(out, cas, &value.to_be_bytes());
    }

    /// An error reply with memcached's text for `status` as body (sent even when quiet).
    /// Not found, exists, not stored, non-numeric, auth error, flush disabled (auth error),
    /// unknown stat group (not found).
    pub fn write_error(&self, out: &mut Vec<u8>, status: Status) {
        self.write_error_message(out, status, status.message());
    }

    /// An error reply with a specific text, for out of memory ([`super::OOM_ALLOCATING_ITEM`]
    /// and friends).
    pub fn write_error_message(&self, out: &mut Vec<u8>, status: Status, message: &[u8]) {
        self.reply(out, status, 0, [&[], &[], message]);
    }

    /// The status memcached answers when the store refuses a store command as not stored:
    /// add (without CAS) → key exists, replace (without CAS) → key not found, otherwise
    /// (append/prepend on a missing key, CAS commands) → not stored. A CAS mismatch is key
    /// exists and a CAS on a missing key is key not found, as for the other commands.
    pub fn not_stored_status(&self) -> Status {
        match (self.command, self.cas) {
            (
                Command::Store {
                    cmd: StoreCmd::Add, ..
                },
                0,
            ) => Status::KeyExists,
            (
                Command::Store {
                    cmd: StoreCmd::Replace,
                    ..
                },
                0,
            ) => Status::KeyNotFound,
            _ => Status::NotStored,
        }
    }

    /// The reply when the store cannot allocate an item of an allowed size for
    /// set/add/replace/append/prepend: out of memory, `Out of memory allocating item`.
    pub fn write_store_oom(&self, out: &mut Vec<u8>) {
        self.write_error_message(out, Status::OutOfMemory, OOM_ALLOCATING_ITEM);
    }

    /// A get/gat/touch hit: 4 bytes of flags as extras, the key for getk/gatk, the value
    /// (none for touch), the item's CAS. Sent even for quiet gets.
    pub fn write_hit(&self, out: &mut Vec<u8>, flags: u32, cas: u64, value: &[u8]) {
        let (key, value): (&[u8], &[u8]) = match self.command {
            Command::Get {
                key,
                with_key: true,
                ..
            } => (key, value),
            Command::Touch { .. } => (&[], &[]),
            _ => (&[], value),
        };
        self.reply(
            out,
            Status::Success,
            cas,
            [&flags.to_be_bytes(), key, value],
        );
    }

    /// A get/gat/touch miss: nothing when quiet; getk/gatk echo the key (body = key, no
    /// value, no text); the others answer `Not found`.
    pub fn write_miss(&self, out: &mut Vec<u8>) {
        if self.quiet {
            return;
        }
        match self.command {
            Command::Get {
                key,
                with_key: true,
                ..
            } => self.reply(out, Status::KeyNotFound, 0, [&[], key, &[]]),
            _ => self.write_error(out, Status::KeyNotFound),
        }
    }

    /// SASL needs another step: `challenge` as body.
    pub fn write_auth_continue(&self, out: &mut Vec<u8>, challenge: &[u8]) {
        self.reply(out, Status::AuthContinue, 0, [&[], &[], challenge]);
    }

    /// Appends this request in wire form (vbucket 0); [`super::parse_request`] reads it back.
    /// For clients, routers and tests. `opcode` must be one matching the command.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut ext = [0u8; 20];
        let (n, key, value): (usize, &[u8], &[u8]) = match self.command {
            Command::Get { key, touch, .. } => match touch {
                Some(t) => {
                    ext[..4].copy_from_slice(&t.to_be_bytes());
                    (4, key, &[])
                }
                None => (0, key, &[]),
            },
            Command::Touch { key, exptime } => {
                ext[..4].copy_from_slice(&exptime.to_be_bytes());
                (4, key, &[])
            }
            Command::Store {
                cmd,
                key,
                flags,
                exptime,
                data,
            } => match cmd {
                StoreCmd::Append | StoreCmd::Prepend => (0, key, data),
                _ => {
                    ext[..4].copy_from_slice(&flags.to_be_bytes());
                    ext[4..8].copy_from_slice(&exptime.to_be_bytes());
                    (8, key, data)
                }
            },
            Command::Delete { key } | Command::Stat { key } => (0, key, &[]),
            Command::Arith {
                key,
                delta,
                initial,
                exptime,
                ..
            } => {
                ext[..8].copy_from_slice(&delta.to_be_bytes());
                ext[8..16].copy_from_slice(&initial.to_be_bytes());
                ext[16..].copy_from_slice(&exptime.to_be_bytes());
                (20, key, &[])
            }
            Command::Flush { delay } => {
                ext[..4].copy_from_slice(&delay.to_be_bytes());
                (if delay == 0 { 0 } else { 4 }, &[], &[])
            }
            Command::Sasl {
                mechanism, data, ..
            } => (0, mechanism, data),
            Command::Quit | Command::Noop | Command::Version | Command::SaslListMechs => {
                (0, &[], &[])
            }
        };
        let head = Head {
            opcode: self.opcode,
            vbucket_or_status: 0,
            opaque: self.opaque,
            cas: self.cas,
        };
        write_packet(out, REQUEST_MAGIC, head, &ext[..n], key, value);
    }
}
