//! The Redis commands a Redis pool of `memfleet route` supports (twemproxy 0.5's set), how
//! each one is routed, and how multi-key commands are split per server and merged back.
//!
//! [`classify`] turns a [`RespRequest`] into a [`CommandPlan`]:
//! * [`Kind::Keyed`]: forward the request unchanged to the server owning its key(s). When a
//!   command names several keys (SMOVE, SUNIONSTORE, EVAL, ...) they must all live on one
//!   server (use hash tags); [`CommandPlan::server`] checks that. twemproxy only hashes the
//!   first key and silently runs such commands on the wrong data; we refuse instead.
//! * [`Kind::MultiGet`] / [`Kind::MultiSum`] / [`Kind::MultiSet`]: MGET, DEL-family, MSET:
//!   [`split_multi`] builds one sub-request per server, [`merge`] joins the replies in order.
//! * [`Kind::Local`]: PING, ECHO, QUIT, AUTH, SELECT are answered by the router.
//! * [`Kind::AnyServer`]: COMMAND, LOLWUT: no key; any backend can answer.
//!
//! Arity is checked only as far as routing needs (the keys must be there); the backend
//! checks the rest and answers with its own exact error.

use crate::resp::{self, view_reply, ReplyView, RespError, RespRequest};

/// Commands the router answers itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Local {
    /// `PING`
    Ping,
    /// `ECHO`
    Echo,
    /// `QUIT`
    Quit,
    /// `AUTH`
    Auth,
    /// `SELECT`
    Select,
}

/// How a command is executed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Goes to the server that owns its key(s) (all on one server).
    Keyed,
    /// MGET: array reply in the original key order.
    MultiGet,
    /// DEL, UNLINK, EXISTS, TOUCH: sum of the integer replies.
    MultiSum,
    /// MSET: `+OK` when every part answered `+OK`.
    MultiSet,
    /// Answered by the router itself.
    Local(Local),
    /// Needs no key: any server may answer.
    AnyServer,
}

/// Which arguments are keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KeyArgs {
    None,
    /// args[a], args[b]: both must be present.
    Two(usize, usize),
    /// args[first..argc] (every one, or every second for key/value pairs).
    Rest {
        first: usize,
        step: usize,
    },
    /// A count at args[at] and that many keys after it; `dest` adds args[1] (…STORE forms).
    NumKeys {
        at: usize,
        dest: bool,
    },
}

/// One row of the command table.
#[derive(Debug)]
pub struct CommandSpec {
    /// Lower-case name, as redis spells it in errors.
    pub name: &'static str,
    /// How the command is routed.
    pub kind: Kind,
    keys: KeyArgs,
    /// Never writes (Redis's `readonly` flag; none with a STORE option): a replica may
    /// answer it.
    pub read_only: bool,
    /// redis's `-ERR wrong number of arguments for '<name>' command`.
    pub wrong_args: &'static [u8],
    /// redis's `-ERR at least 1 input key is needed for '<name>' command` (Z* numkeys forms).
    at_least_one: &'static [u8],
}

macro_rules! spec {
    ($name:literal, $kind:expr, $keys:expr, RO) => {
        CommandSpec {
            read_only: true,
            ..spec!($name, $kind, $keys)
        }
    };
    ($name:literal, $kind:expr, $keys:expr) => {
        CommandSpec {
            name: $name,
            kind: $kind,
            keys: $keys,
            read_only: false,
            wrong_args: concat!(
                "-ERR wrong number of arguments for '",
                $name,
                "' command\r\n"
            )
            .as_bytes(),
            at_least_one: concat!(
                "-ERR at least 1 input key is needed for '",
                $name,
                "' command\r\n"
            )
            .as_bytes(),
        }
    };
}

use KeyArgs::{NumKeys, Rest, Two};
const FIRST: KeyArgs = Two(1, 1);
const K: Kind = Kind::Keyed;

/// The command table.
static COMMANDS: &[CommandSpec] = COMMAND_TABLE;
const COMMAND_COUNT: usize = COMMAND_TABLE.len();

/// Sorted by name (kept so for reading; [`lookup`] hashes).
const COMMAND_TABLE: &[CommandSpec] = &[
    spec!("append", K, FIRST),
    spec!("auth", Kind::Local(Local::Auth), KeyArgs::None),
    spec!("bitcount", K, FIRST, RO),
    spec!("bitfield", K, FIRST),
    spec!("bitpos", K, FIRST, RO),
    spec!("command", Kind::AnyServer, KeyArgs::None),
    spec!("copy", K, Two(1, 2)),
    spec!("decr", K, FIRST),
    spec!("decrby", K, FIRST),
    spec!("del", Kind::MultiSum, Rest { first: 1, step: 1 }),
    spec!("dump", K, FIRST, RO),
    spec!("echo", Kind::Local(Local::Echo), KeyArgs::None),
    spec!("eval", K, NumKeys { at: 2, dest: false }),
    spec!("evalsha", K, NumKeys { at: 2, dest: false }),
    spec!("exists", Kind::MultiSum, Rest { first: 1, step: 1 }, RO),
    spec!("expire", K, FIRST),
    spec!("expireat", K, FIRST),
    spec!("geoadd", K, FIRST),
    spec!("geodist", K, FIRST, RO),
    spec!("geohash", K, FIRST, RO),
    spec!("geopos", K, FIRST, RO),
    spec!("georadius", K, FIRST),
    spec!("georadiusbymember", K, FIRST),
    spec!("geosearch", K, FIRST, RO),
    spec!("geosearchstore", K, Two(1, 2)),
    spec!("get", K, FIRST, RO),
    spec!("getbit", K, FIRST, RO),
    spec!("getdel", K, FIRST),
    spec!("getex", K, FIRST),
    spec!("getrange", K, FIRST, RO),
    spec!("getset", K, FIRST),
    spec!("hdel", K, FIRST),
    spec!("hexists", K, FIRST, RO),
    spec!("hget", K, FIRST, RO),
    spec!("hgetall", K, FIRST, RO),
    spec!("hincrby", K, FIRST),
    spec!("hincrbyfloat", K, FIRST),
    spec!("hkeys", K, FIRST, RO),
    spec!("hlen", K, FIRST, RO),
    spec!("hmget", K, FIRST, RO),
    spec!("hmset", K, FIRST),
    spec!("hrandfield", K, FIRST, RO),
    spec!("hscan", K, FIRST, RO),
    spec!("hset", K, FIRST),
    spec!("hsetnx", K, FIRST),
    spec!("hstrlen", K, FIRST, RO),
    spec!("hvals", K, FIRST, RO),
    spec!("incr", K, FIRST),
    spec!("incrby", K, FIRST),
    spec!("incrbyfloat", K, FIRST),
    spec!("lindex", K, FIRST, RO),
    spec!("linsert", K, FIRST),
    spec!("llen", K, FIRST, RO),
    spec!("lmove", K, Two(1, 2)),
    spec!("lolwut", Kind::AnyServer, KeyArgs::None),
    spec!("lpop", K, FIRST),
    spec!("lpos", K, FIRST, RO),
    spec!("lpush", K, FIRST),
    spec!("lpushx", K, FIRST),
    spec!("lrange", K, FIRST, RO),
    spec!("lrem", K, FIRST),
    spec!("lset", K, FIRST),
    spec!("ltrim", K, FIRST),
    spec!("mget", Kind::MultiGet, Rest { first: 1, step: 1 }, RO),
    spec!("move", K, FIRST),
    spec!("mset", Kind::MultiSet, Rest { first: 1, step: 2 }),
    spec!("persist", K, FIRST),
    spec!("pexpire", K, FIRST),
    spec!("pexpireat", K, FIRST),
    spec!("pfadd", K, FIRST),
    spec!("pfcount", K, Rest { first: 1, step: 1 }, RO),
    spec!("pfmerge", K, Rest { first: 1, step: 1 }),
    spec!("ping", Kind::Local(Local::Ping), KeyArgs::None),
    spec!("psetex", K, FIRST),
    spec!("pttl", K, FIRST, RO),
    spec!("quit", Kind::Local(Local::Quit), KeyArgs::None),
    spec!("rename", K, Two(1, 2)),
    spec!("renamenx", K, Two(1, 2)),
    spec!("restore", K, FIRST),
    spec!("rpop", K, FIRST),
    spec!("rpoplpush", K, Two(1, 2)),
    spec!("rpush", K, FIRST),
    spec!("rpushx", K, FIRST),
    spec!("sadd", K, FIRST),
    spec!("scard", K, FIRST, RO),
    spec!("sdiff", K, Rest { first: 1, step: 1 }, RO),
    spec!("sdiffstore", K, Rest { first: 1, step: 1 }),
    spec!("select", Kind::Local(Local::Select), KeyArgs::None),
    spec!("set", K, FIRST),
    spec!("setbit", K, FIRST),
    spec!("setex", K, FIRST),
    spec!("setnx", K, FIRST),
    spec!("setrange", K, FIRST),
    spec!("sinter", K, Rest { first: 1, step: 1 }, RO),
    spec!("sinterstore", K, Rest { first: 1, step: 1 }),
    spec!("sismember", K, FIRST, RO),
    spec!("smembers", K, FIRST, RO),
    spec!("smismember", K, FIRST, RO),
    spec!("smove", K, Two(1, 2)),
    spec!("sort", K, FIRST),
    spec!("spop", K, FIRST),
    spec!("srandmember", K, FIRST, RO),
    spec!("srem", K, FIRST),
    spec!("sscan", K, FIRST, RO),
    spec!("strlen", K, FIRST, RO),
    spec!("sunion", K, Rest { first: 1, step: 1 }, RO),
    spec!("sunionstore", K, Rest { first: 1, step: 1 }),
    spec!("touch", Kind::MultiSum, Rest { first: 1, step: 1 }),
    spec!("ttl", K, FIRST, RO),
    spec!("type", K, FIRST, RO),
    spec!("unlink", Kind::MultiSum, Rest { first: 1, step: 1 }),
    spec!("zadd", K, FIRST),
    spec!("zcard", K, FIRST, RO),
    spec!("zcount", K, FIRST, RO),
    spec!("zdiff", K, NumKeys { at: 1, dest: false }, RO),
    spec!("zdiffstore", K, NumKeys { at: 2, dest: true }),
    spec!("zincrby", K, FIRST),
    spec!("zinter", K, NumKeys { at: 1, dest: false }, RO),
    spec!("zinterstore", K, NumKeys { at: 2, dest: true }),
    spec!("zlexcount", K, FIRST, RO),
    spec!("zmscore", K, FIRST, RO),
    spec!("zpopmax", K, FIRST),
    spec!("zpopmin", K, FIRST),
    spec!("zrandmember", K, FIRST, RO),
    spec!("zrange", K, FIRST, RO),
    spec!("zrangebylex", K, FIRST, RO),
    spec!("zrangebyscore", K, FIRST, RO),
    spec!("zrangestore", K, Two(1, 2)),
    spec!("zrank", K, FIRST, RO),
    spec!("zrem", K, FIRST),
    spec!("zremrangebylex", K, FIRST),
    spec!("zremrangebyrank", K, FIRST),
    spec!("zremrangebyscore", K, FIRST),
    spec!("zrevrange", K, FIRST, RO),
    spec!("zrevrangebylex", K, FIRST, RO),
    spec!("zrevrangebyscore", K, FIRST, RO),
    spec!("zrevrank", K, FIRST, RO),
    spec!("zscan", K, FIRST, RO),
    spec!("zscore", K, FIRST, RO),
    spec!("zunion", K, NumKeys { at: 1, dest: false }, RO),
    spec!("zunionstore", K, NumKeys { at: 2, dest: true }),
];

/// The error reply `-ERR unsupported command: memfleet route does not proxy this command`.
pub const ERR_UNSUPPORTED: &[u8] =
    b"-ERR unsupported command: memfleet route does not proxy this command\r\n";
/// The error reply `-ERR keys of this command hash to different servers; use a hash tag to keep them together`.
pub const ERR_CROSS_SERVER: &[u8] =
    b"-ERR keys of this command hash to different servers; use a hash tag to keep them together\r\n";
/// The error reply `-ERR memfleet route needs at least one key to route EVAL/EVALSHA`.
pub const ERR_EVAL_NO_KEYS: &[u8] =
    b"-ERR memfleet route needs at least one key to route EVAL/EVALSHA\r\n";
/// The error reply `-ERR value is not an integer or out of range`.
pub const ERR_NOT_INTEGER: &[u8] = b"-ERR value is not an integer or out of range\r\n";
/// The error reply `-ERR Number of keys can't be negative`.
pub const ERR_NEGATIVE_KEYS: &[u8] = b"-ERR Number of keys can't be negative\r\n";
/// The error reply `-ERR Number of keys can't be greater than number of args`.
pub const ERR_TOO_MANY_KEYS: &[u8] =
    b"-ERR Number of keys can't be greater than number of args\r\n";
/// The error reply `-ERR syntax error`.
pub const ERR_SYNTAX: &[u8] = b"-ERR syntax error\r\n";

/// Longest name [`lookup`] can match, rounded up to whole words.
const NAME_WORDS: usize = 3;

/// A name of at most `8 * NAME_WORDS` bytes as words, every byte (the zero padding too)
/// `| 0x20`: that maps a letter of either case to lower case and anything else to a
/// non-letter, so as the table's names are all letters, equal words and lengths mean
/// the same name case-insensitively, without a loop over bytes.
const fn name_words(name: &[u8]) -> [u64; NAME_WORDS] {
    let mut padded = [0u8; 8 * NAME_WORDS];
    let mut i = 0;
    while i < name.len() {
        padded[i] = name[i];
        i += 1;
    }
    words_of(&padded)
}

const fn words_of(padded: &[u8; 8 * NAME_WORDS]) -> [u64; NAME_WORDS] {
    let mut words = [0u64; NAME_WORDS];
    let mut w = 0;
    while w < NAME_WORDS {
        let mut b = [0u8; 8];
        let mut i = 0;
        while i < 8 {
            b[i] = padded[8 * w + i];
            i += 1;
        }
        words[w] = u64::from_le_bytes(b) | 0x2020_2020_2020_2020;
        w += 1;
    }
    words
}

const fn name_hash(len: usize, words: &[u64; NAME_WORDS]) -> usize {
    let h = (words[0] ^ words[1].rotate_left(21) ^ words[2].rotate_left(42) ^ len as u64)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (h >> (64 - NAME_BITS)) as usize
}

/// The hash table of [`lookup`]: 2^NAME_BITS buckets, linear probing.
const NAME_BITS: u32 = 9;

/// Each name's length and words, in table order.
static NAME_KEYS: [(usize, [u64; NAME_WORDS]); COMMAND_COUNT] = {
    let mut keys = [(0, [0u64; NAME_WORDS]); COMMAND_COUNT];
    let mut i = 0;
    while i < COMMAND_COUNT {
        let name = COMMAND_TABLE[i].name.as_bytes();
        assert!(name.len() <= 8 * NAME_WORDS);
        keys[i] = (name.len(), name_words(name));
        i += 1;
    }
    keys
};

// Room for every name, so a probe always ends at an empty bucket.
const _: () = assert!(COMMAND_COUNT < 255 && 2 * COMMAND_COUNT < 1 << NAME_BITS);

/// Bucket -> table index + 1 (0: empty).
static NAME_BUCKETS: [u8; 1 << NAME_BITS] = {
    let mut buckets = [0u8; 1 << NAME_BITS];
    let mut i = 0;
    while i < COMMAND_COUNT {
        let name = COMMAND_TABLE[i].name.as_bytes();
        let mut h = name_hash(name.len(), &name_words(name));
        while buckets[h] != 0 {
            h = (h + 1) & ((1 << NAME_BITS) - 1);
        }
        buckets[h] = (i + 1) as u8;
        i += 1;
    }
    buckets
};

/// Whether table entry `i` is the name of `len` bytes and these words (the length tells a
/// name from one with spaces after it, which the words alone do not).
#[inline(always)]
fn same_name(i: usize, len: usize, words: &[u64; NAME_WORDS]) -> bool {
    NAME_KEYS[i] == (len, *words)
}

/// Looks a command name up, case-insensitively.
pub fn lookup(name: &[u8]) -> Option<&'static CommandSpec> {
    let len = name.len();
    if len > 8 * NAME_WORDS {
        return None;
    }
    let mut padded = [0u8; 8 * NAME_WORDS];
    padded[..len].copy_from_slice(name);
    let words = words_of(&padded);
    let mut h = name_hash(len, &words);
    loop {
        let i = usize::from(NAME_BUCKETS[h]).checked_sub(1)?;
        if same_name(i, len, &words) {
            return Some(&COMMANDS[i]);
        }
        h = (h + 1) & ((1 << NAME_BITS) - 1);
    }
}

/// What to do with one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommandPlan {
    /// The command table entry.
    pub spec: &'static CommandSpec,
    /// Argument indexes holding keys: `dest` (if any), then `first..end` by `step`.
    dest: Option<usize>,
    first: usize,
    end: usize,
    step: usize,
}

impl PartialEq for CommandSpec {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}
impl Eq for CommandSpec {}

impl CommandPlan {
    /// How the command is routed.
    pub fn kind(&self) -> Kind {
        self.spec.kind
    }

    /// Whether a replica may answer it.
    #[inline]
    pub fn read_only(&self) -> bool {
        self.spec.read_only
    }

    /// The command's name as the table spells it.
    pub fn name(&self) -> &'static str {
        self.spec.name
    }

    /// Indexes (into the request's arguments) of the keys, in order.
    pub fn key_indexes(&self) -> impl Iterator<Item = usize> + '_ {
        self.dest
            .into_iter()
            .chain((self.first..self.end).step_by(self.step.max(1)))
    }

    /// Number of keys.
    pub fn key_count(&self) -> usize {
        self.key_indexes().count()
    }

    /// The one server owning every key of a `Keyed` command, or [`ERR_CROSS_SERVER`].
    /// `server_of` hashes a key (hash tag applied) to a server index.
    pub fn server(
        &self,
        req: &RespRequest<'_>,
        mut server_of: impl FnMut(&[u8]) -> usize,
    ) -> Result<usize, &'static [u8]> {
        let mut found = None;
        for i in self.key_indexes() {
            let s = server_of(req.arg(i).unwrap_or_default());
            match found {
                None => found = Some(s),
                Some(f) if f != s => return Err(ERR_CROSS_SERVER),
                _ => {}
            }
        }
        found.ok_or(ERR_EVAL_NO_KEYS)
    }
}

fn parse_count(arg: Option<&[u8]>) -> Option<i64> {
    arg.and_then(resp::parse_ll)
}

/// Classifies a request. `Err` is the complete `-ERR` reply to send; the connection stays
/// usable.
pub fn classify(req: &RespRequest<'_>) -> Result<CommandPlan, &'static [u8]> {
    let spec = lookup(req.name()).ok_or(ERR_UNSUPPORTED)?;
    let argc = req.argc();
    let plan = |dest, first, end, step| CommandPlan {
        spec,
        dest,
        first,
        end,
        step,
    };
    match spec.keys {
        KeyArgs::None => {
            let ok = match spec.kind {
                Kind::Local(Local::Ping) => argc <= 2,
                Kind::Local(Local::Echo) | Kind::Local(Local::Select) => argc == 2,
                Kind::Local(Local::Auth) => argc == 2 || argc == 3,
                _ => true,
            };
            if ok {
                Ok(plan(None, 0, 0, 1))
            } else if spec.kind == Kind::Local(Local::Auth) {
                Err(ERR_SYNTAX)
            } else {
                Err(spec.wrong_args)
            }
        }
        Two(a, b) => {
            if argc <= a.max(b) {
                return Err(spec.wrong_args);
            }
            Ok(if a == b {
                plan(None, a, a + 1, 1)
            } else {
                plan(Some(a), b, b + 1, 1)
            })
        }
        Rest { first, step } => {
            let n = argc.saturating_sub(first);
            if n == 0 || n % step != 0 {
                return Err(spec.wrong_args);
            }
            Ok(plan(None, first, argc, step))
        }
        NumKeys { at, dest } => {
            let eval = at == 2 && !dest;
            // redis arity: EVAL needs the count, the Z* forms at least one key after it.
            if argc < at + if eval { 1 } else { 2 } {
                return Err(spec.wrong_args);
            }
            let n = parse_count(req.arg(at)).ok_or(ERR_NOT_INTEGER)?;
            let avail = (argc - at - 1) as i64;
            if eval {
                if n < 0 {
                    return Err(ERR_NEGATIVE_KEYS);
                }
                if n > avail {
                    return Err(ERR_TOO_MANY_KEYS);
                }
                if n == 0 {
                    return Err(ERR_EVAL_NO_KEYS);
                }
            } else {
                if n < 1 {
                    return Err(spec.at_least_one);
                }
                if n > avail {
                    return Err(ERR_SYNTAX);
                }
            }
            let first = at + 1;
            Ok(plan(dest.then_some(1), first, first + n as usize, 1))
        }
    }
}

/// One per-server part of a split multi-key command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubRequest {
    /// The server this part goes to.
    pub server: usize,
    /// The multibulk frame to send to `server`.
    pub bytes: Vec<u8>,
    /// For each key of this part, its position among the command's keys (for MGET merging).
    pub positions: Vec<usize>,
}

/// Splits MGET / DEL-family / MSET into one sub-request per server, keys in their original
/// relative order. Parts are ordered by the first key they hold.
pub fn split_multi(
    plan: &CommandPlan,
    req: &RespRequest<'_>,
    mut server_of: impl FnMut(&[u8]) -> usize,
) -> Vec<SubRequest> {
    let name = req.name();
    let pair = plan.kind() == Kind::MultiSet;
    // (server, key positions); few servers, so a linear search beats a map.
    let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
    let keys: Vec<usize> = plan.key_indexes().collect();
    for (pos, &i) in keys.iter().enumerate() {
        let s = server_of(req.arg(i).unwrap_or_default());
        match groups.iter_mut().find(|g| g.0 == s) {
            Some(g) => g.1.push(pos),
            None => groups.push((s, vec![pos])),
        }
    }
    groups
        .into_iter()
        .map(|(server, positions)| {
            let per_key = if pair { 2 } else { 1 };
            let mut bytes = Vec::new();
            resp::write_array_header(&mut bytes, 1 + per_key * positions.len());
            resp::write_bulk(&mut bytes, name);
            for &p in &positions {
                let i = keys[p];
                resp::write_bulk(&mut bytes, req.arg(i).unwrap_or_default());
                if pair {
                    resp::write_bulk(&mut bytes, req.arg(i + 1).unwrap_or_default());
                }
            }
            SubRequest {
                server,
                bytes,
                positions,
            }
        })
        .collect()
}

/// Why replies could not be merged. The client gets an error reply; the backend connection
/// can stay, since each part was a well-framed reply (only its type or size did not fit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MergeError {
    /// A reply that is not valid RESP.
    Resp(RespError),
    /// A reply of the wrong type or size for its part.
    Unexpected,
}

impl From<RespError> for MergeError {
    fn from(e: RespError) -> Self {
        MergeError::Resp(e)
    }
}

/// Joins the replies of [`split_multi`]'s parts (`parts[i]` = (positions, one complete reply))
/// into the client's reply. The first error reply of any part becomes the whole reply, as in
/// twemproxy.
pub fn merge(
    kind: Kind,
    nkeys: usize,
    parts: &[(&[usize], &[u8])],
    out: &mut Vec<u8>,
) -> Result<(), MergeError> {
    for (_, reply) in parts {
        if let ReplyView::Error(_) = view_reply(reply)? {
            out.extend_from_slice(reply);
            return Ok(());
        }
    }
    match kind {
        Kind::MultiGet => {
            let mut slots: Vec<&[u8]> = vec![&[]; nkeys];
            for (positions, reply) in parts {
                let ReplyView::Array(Some((n, body))) = view_reply(reply)? else {
                    return Err(MergeError::Unexpected);
                };
                if n != positions.len() {
                    return Err(MergeError::Unexpected);
                }
                for (&p, elem) in positions.iter().zip(resp::array_elements(body)) {
                    *slots.get_mut(p).ok_or(MergeError::Unexpected)? = elem?;
                }
            }
            if slots.iter().any(|s| s.is_empty()) {
                return Err(MergeError::Unexpected);
            }
            resp::write_array_header(out, nkeys);
            for s in slots {
                out.extend_from_slice(s);
            }
        }
        Kind::MultiSum => {
            let mut sum: i64 = 0;
            for (_, reply) in parts {
                let ReplyView::Integer(n) = view_reply(reply)? else {
                    return Err(MergeError::Unexpected);
                };
                sum = sum.saturating_add(n);
            }
            resp::write_integer(out, sum);
        }
        Kind::MultiSet => {
            for (_, reply) in parts {
                if view_reply(reply)? != ReplyView::Simple(b"OK") {
                    return Err(MergeError::Unexpected);
                }
            }
            out.extend_from_slice(b"+OK\r\n");
        }
        _ => return Err(MergeError::Unexpected),
    }
    Ok(())
}

/// redis 7's replies for a connection that must authenticate first / gave a wrong password.
/// (nutcracker says `-NOAUTH Authentication required` and `-ERR invalid password`.)
pub const ERR_NOAUTH: &[u8] = b"-NOAUTH Authentication required.\r\n";
/// The error reply `-WRONGPASS invalid username-password pair or user is disabled.`.
pub const ERR_WRONGPASS: &[u8] =
    b"-WRONGPASS invalid username-password pair or user is disabled.\r\n";
/// redis 7's reply to AUTH when no password is configured.
pub const ERR_AUTH_NOT_SET: &[u8] = b"-ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?\r\n";
/// The error reply `-ERR memfleet route only supports SELECT 0 (the pool's redis_db selects the database)`.
pub const ERR_SELECT_NONZERO: &[u8] =
    b"-ERR memfleet route only supports SELECT 0 (the pool's redis_db selects the database)\r\n";

/// Reply to `SELECT <db>`: `+OK` for 0 (the pool's `redis_db` is already selected on the
/// backend connections), redis's error for a non-integer, [`ERR_SELECT_NONZERO`] otherwise.
pub fn select_reply(db: &[u8]) -> &'static [u8] {
    match resp::parse_ll(db) {
        Some(0) => b"+OK\r\n",
        Some(_) => ERR_SELECT_NONZERO,
        None => ERR_NOT_INTEGER,
    }
}

/// Answers PING / ECHO / QUIT (AUTH and SELECT depend on the pool's settings).
/// Returns false for other commands.
pub fn answer_local(plan: &CommandPlan, req: &RespRequest<'_>, out: &mut Vec<u8>) -> bool {
    match plan.kind() {
        Kind::Local(Local::Ping) => match req.arg(1) {
            None => out.extend_from_slice(b"+PONG\r\n"),
            Some(msg) => resp::write_bulk(out, msg),
        },
        Kind::Local(Local::Echo) => resp::write_bulk(out, req.arg(1).unwrap_or_default()),
        Kind::Local(Local::Quit) => out.extend_from_slice(b"+OK\r\n"),
        _ => return false,
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp::drive::with_command;
    use crate::resp::write_command;
    use proptest::prelude::*;

    fn plan_of(args: &[&[u8]]) -> Result<(Kind, Vec<usize>), &'static [u8]> {
        with_command(args, |r| {
            classify(r).map(|p| (p.kind(), p.key_indexes().collect()))
        })
    }

    /// Server = first byte of the key modulo 3.
    fn by_first_byte(k: &[u8]) -> usize {
        usize::from(k.first().copied().unwrap_or(0)) % 3
    }

    #[test]
    fn table_is_sorted_and_lowercase() {
        for w in COMMANDS.windows(2) {
            assert!(w[0].name < w[1].name, "{} !< {}", w[0].name, w[1].name);
        }
        for c in COMMANDS {
            assert_eq!(c.name, c.name.to_ascii_lowercase());
            assert!(lookup(c.name.to_ascii_uppercase().as_bytes()).is_some());
        }
        assert_eq!(lookup(b"GeT").unwrap().name, "get");
        assert!(lookup(b"keys").is_none());
        assert!(lookup(b"georadiusbymemberxxxxxxxx").is_none());
        // Only letters fold: `|0x20` must not make these equal to a name.
        assert!(lookup(b"GET\x00").is_none());
        assert!(lookup(b"get ").is_none());
        assert!(lookup(b"g\x05t").is_none());
        assert!(lookup(b"\xc7ET").is_none());
        assert!(lookup(b"").is_none());
    }

    #[test]
    fn same_name_needs_the_length() {
        let get = COMMANDS.iter().position(|c| c.name == "get").unwrap();
        assert!(same_name(get, 3, &name_words(b"GeT")));
        assert!(!same_name(get, 4, &name_words(b"get ")));
        assert!(!same_name(get, 4, &name_words(b"get\0")));
    }

    /// The old lookup: lower-cased, then an exact match.
    fn lookup_by_scan(name: &[u8]) -> Option<&'static str> {
        let lower = name.to_ascii_lowercase();
        COMMANDS
            .iter()
            .find(|c| c.name.as_bytes() == lower)
            .map(|c| c.name)
    }

    proptest! {
        #[test]
        fn lookup_matches_a_scan(
            pick in 0..COMMANDS.len(),
            flips in any::<u32>(),
            edit in proptest::option::of((0usize..24, any::<u8>())),
            noise in proptest::collection::vec(any::<u8>(), 0..26),
        ) {
            // A table name with some letters upper-cased and maybe one byte changed.
            let mut name: Vec<u8> = COMMANDS[pick].name.bytes().enumerate()
                .map(|(i, b)| if flips >> (i % 32) & 1 == 1 { b.to_ascii_uppercase() } else { b })
                .collect();
            if let Some((at, b)) = edit {
                if at < name.len() { name[at] = b } else { name.push(b) }
            }
            prop_assert_eq!(lookup(&name).map(|c| c.name), lookup_by_scan(&name));
            prop_assert_eq!(lookup(&noise).map(|c| c.name), lookup_by_scan(&noise));
        }
    }

    #[test]
    fn read_only_commands_are_flagged() {
        let ro = |name: &str| lookup(name.as_bytes()).unwrap().read_only;
        for name in [
            "get",
            "GET",
            "mget",
            "exists",
            "strlen",
            "getrange",
            "hget",
            "hgetall",
            "lrange",
            "smembers",
            "zrange",
            "zrevrangebyscore",
            "ttl",
            "pttl",
            "type",
            "zscore",
        ] {
            assert!(ro(name), "{name} is read-only");
        }
        // Writes, scripts, and reads with a STORE option (SORT, GEORADIUS) go to the primary.
        for name in [
            "set",
            "del",
            "incr",
            "getset",
            "getdel",
            "getex",
            "expire",
            "eval",
            "evalsha",
            "sort",
            "georadius",
            "zrangestore",
            "sunionstore",
            "touch",
            "mset",
            "command",
        ] {
            assert!(!ro(name), "{name} is not read-only");
        }
        assert!(with_command(&[b"GET", b"k"], |r| classify(r)
            .unwrap()
            .read_only()));
        assert!(!with_command(&[b"SET", b"k", b"v"], |r| classify(r)
            .unwrap()
            .read_only()));
    }

    #[test]
    fn single_key_commands() {
        assert_eq!(plan_of(&[b"GET", b"k"]), Ok((Kind::Keyed, vec![1])));
        assert_eq!(
            plan_of(&[b"set", b"k", b"v", b"EX", b"10"]),
            Ok((Kind::Keyed, vec![1]))
        );
        assert_eq!(
            plan_of(&[b"hset", b"h", b"f", b"v"]),
            Ok((Kind::Keyed, vec![1]))
        );
        // Arity beyond the key is the backend's business.
        assert_eq!(
            plan_of(&[b"get", b"k", b"extra"]),
            Ok((Kind::Keyed, vec![1]))
        );
    }

    // Error texts observed from redis-server 7.0.15 with redis-cli.
    #[test]
    fn arity_errors_like_redis() {
        assert_eq!(
            plan_of(&[b"get"]),
            Err(&b"-ERR wrong number of arguments for 'get' command\r\n"[..])
        );
        assert_eq!(
            plan_of(&[b"SET"]),
            Err(&b"-ERR wrong number of arguments for 'set' command\r\n"[..])
        );
        assert_eq!(
            plan_of(&[b"mget"]),
            Err(&b"-ERR wrong number of arguments for 'mget' command\r\n"[..])
        );
        assert_eq!(
            plan_of(&[b"mset", b"a"]),
            Err(&b"-ERR wrong number of arguments for 'mset' command\r\n"[..])
        );
        assert_eq!(
            plan_of(&[b"mset", b"a", b"b", b"c"]),
            Err(&b"-ERR wrong number of arguments for 'mset' command\r\n"[..])
        );
        assert_eq!(
            plan_of(&[b"del"]),
            Err(&b"-ERR wrong number of arguments for 'del' command\r\n"[..])
        );
        assert_eq!(
            plan_of(&[b"exists"]),
            Err(&b"-ERR wrong number of arguments for 'exists' command\r\n"[..])
        );
        assert_eq!(
            plan_of(&[b"ping", b"a", b"b"]),
            Err(&b"-ERR wrong number of arguments for 'ping' command\r\n"[..])
        );
        assert_eq!(
            plan_of(&[b"echo"]),
            Err(&b"-ERR wrong number of arguments for 'echo' command\r\n"[..])
        );
        assert_eq!(
            plan_of(&[b"select", b"1", b"2"]),
            Err(&b"-ERR wrong number of arguments for 'select' command\r\n"[..])
        );
        assert_eq!(
            plan_of(&[b"zdiff", b"x"]),
            Err(&b"-ERR wrong number of arguments for 'zdiff' command\r\n"[..])
        );
        assert_eq!(plan_of(&[b"auth", b"a", b"b", b"c"]), Err(ERR_SYNTAX));
    }

    #[test]
    fn numkeys_errors_like_redis() {
        assert_eq!(
            plan_of(&[b"eval", b"x", b"abc", b"k"]),
            Err(&b"-ERR value is not an integer or out of range\r\n"[..])
        );
        assert_eq!(
            plan_of(&[b"eval", b"x", b"-1", b"k"]),
            Err(&b"-ERR Number of keys can't be negative\r\n"[..])
        );
        assert_eq!(
            plan_of(&[b"eval", b"x", b"3", b"k"]),
            Err(&b"-ERR Number of keys can't be greater than number of args\r\n"[..])
        );
        assert_eq!(plan_of(&[b"eval", b"x", b"0"]), Err(ERR_EVAL_NO_KEYS));
        assert_eq!(
            plan_of(&[b"zunionstore", b"d", b"abc", b"k"]),
            Err(ERR_NOT_INTEGER)
        );
        assert_eq!(
            plan_of(&[b"zunionstore", b"d", b"0", b"k"]),
            Err(&b"-ERR at least 1 input key is needed for 'zunionstore' command\r\n"[..])
        );
        assert_eq!(
            plan_of(&[b"zunion", b"0", b"k"]),
            Err(&b"-ERR at least 1 input key is needed for 'zunion' command\r\n"[..])
        );
        assert_eq!(
            plan_of(&[b"zunionstore", b"d", b"3", b"k"]),
            Err(&b"-ERR syntax error\r\n"[..])
        );
    }

    #[test]
    fn multi_key_positions() {
        assert_eq!(
            plan_of(&[b"EVAL", b"s", b"2", b"a", b"b", b"argv"]),
            Ok((Kind::Keyed, vec![3, 4]))
        );
        assert_eq!(
            plan_of(&[b"evalsha", b"s", b"1", b"a"]),
            Ok((Kind::Keyed, vec![3]))
        );
        assert_eq!(
            plan_of(&[
                b"zunionstore",
                b"d",
                b"2",
                b"a",
                b"b",
                b"WEIGHTS",
                b"1",
                b"2"
            ]),
            Ok((Kind::Keyed, vec![1, 3, 4]))
        );
        assert_eq!(
            plan_of(&[b"zinter", b"2", b"a", b"b"]),
            Ok((Kind::Keyed, vec![2, 3]))
        );
        assert_eq!(
            plan_of(&[b"smove", b"a", b"b", b"m"]),
            Ok((Kind::Keyed, vec![1, 2]))
        );
        assert_eq!(
            plan_of(&[b"sunionstore", b"d", b"a", b"b"]),
            Ok((Kind::Keyed, vec![1, 2, 3]))
        );
        assert_eq!(
            plan_of(&[b"mget", b"a", b"b"]),
            Ok((Kind::MultiGet, vec![1, 2]))
        );
        assert_eq!(
            plan_of(&[b"MSET", b"a", b"1", b"b", b"2"]),
            Ok((Kind::MultiSet, vec![1, 3]))
        );
        assert_eq!(plan_of(&[b"unlink", b"a"]), Ok((Kind::MultiSum, vec![1])));
        assert_eq!(
            plan_of(&[b"touch", b"a", b"b"]),
            Ok((Kind::MultiSum, vec![1, 2]))
        );
    }

    #[test]
    fn local_and_unsupported() {
        assert_eq!(plan_of(&[b"PING"]), Ok((Kind::Local(Local::Ping), vec![])));
        assert_eq!(plan_of(&[b"quit"]).unwrap().0, Kind::Local(Local::Quit));
        assert_eq!(
            plan_of(&[b"auth", b"pw"]).unwrap().0,
            Kind::Local(Local::Auth)
        );
        assert_eq!(
            plan_of(&[b"auth", b"user", b"pw"]).unwrap().0,
            Kind::Local(Local::Auth)
        );
        assert_eq!(
            plan_of(&[b"select", b"0"]).unwrap().0,
            Kind::Local(Local::Select)
        );
        assert_eq!(plan_of(&[b"command", b"docs"]).unwrap().0, Kind::AnyServer);
        // Both keys must live on one server (a hash tag keeps them together).
        assert_eq!(plan_of(&[b"rename", b"a", b"b"]).unwrap().0, Kind::Keyed);
        assert!(plan_of(&[b"renamenx", b"a"]).is_err());
        for c in [
            &b"keys"[..],
            b"flushall",
            b"multi",
            b"subscribe",
            b"info",
            b"msetnx",
            b"blpop",
            b"scan",
        ] {
            assert_eq!(plan_of(&[c, b"x"]), Err(ERR_UNSUPPORTED));
        }
        let mut out = Vec::new();
        with_command(&[b"ping"], |r| {
            assert!(answer_local(&classify(r).unwrap(), r, &mut out))
        });
        with_command(&[b"ping", b"hi"], |r| {
            assert!(answer_local(&classify(r).unwrap(), r, &mut out))
        });
        with_command(&[b"echo", b""], |r| {
            assert!(answer_local(&classify(r).unwrap(), r, &mut out))
        });
        with_command(&[b"quit"], |r| {
            assert!(answer_local(&classify(r).unwrap(), r, &mut out))
        });
        with_command(&[b"auth", b"x"], |r| {
            assert!(!answer_local(&classify(r).unwrap(), r, &mut out))
        });
        assert_eq!(out, b"+PONG\r\n$2\r\nhi\r\n$0\r\n\r\n+OK\r\n");
    }

    #[test]
    fn select_replies() {
        assert_eq!(select_reply(b"0"), b"+OK\r\n");
        assert_eq!(select_reply(b"1"), ERR_SELECT_NONZERO);
        assert_eq!(select_reply(b"x"), ERR_NOT_INTEGER);
        assert_eq!(select_reply(b"00"), ERR_NOT_INTEGER);
    }

    #[test]
    fn co_location_is_checked() {
        with_command(&[b"smove", b"a1", b"a2", b"m"], |r| {
            assert_eq!(classify(r).unwrap().server(r, by_first_byte), Ok(97 % 3));
        });
        with_command(&[b"smove", b"a", b"b", b"m"], |r| {
            assert_eq!(
                classify(r).unwrap().server(r, by_first_byte),
                Err(ERR_CROSS_SERVER)
            );
        });
        with_command(&[b"get", b"b"], |r| {
            assert_eq!(classify(r).unwrap().server(r, by_first_byte), Ok(98 % 3));
        });
    }

    #[test]
    fn split_mget_and_merge_in_order() {
        // a (97%3=1), b (98%3=2), c (99%3=0), d (100%3=1)
        let args: [&[u8]; 5] = [b"MGET", b"a", b"b", b"c", b"d"];
        let parts = with_command(&args, |r| {
            split_multi(&classify(r).unwrap(), r, by_first_byte)
        });
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[0].server, 1);
        assert_eq!(
            parts[0].bytes,
            b"*3\r\n$4\r\nMGET\r\n$1\r\na\r\n$1\r\nd\r\n"
        );
        assert_eq!(parts[0].positions, vec![0, 3]);
        assert_eq!((parts[1].server, &parts[1].positions[..]), (2, &[1][..]));
        assert_eq!((parts[2].server, &parts[2].positions[..]), (0, &[2][..]));
        let replies: [&[u8]; 3] = [
            b"*2\r\n$2\r\nva\r\n$-1\r\n",
            b"*1\r\n$2\r\nvb\r\n",
            b"*1\r\n$2\r\nvc\r\n",
        ];
        let joined: Vec<(&[usize], &[u8])> = parts
            .iter()
            .zip(replies)
            .map(|(p, r)| (&p.positions[..], r))
            .collect();
        let mut out = Vec::new();
        merge(Kind::MultiGet, 4, &joined, &mut out).unwrap();
        assert_eq!(out, b"*4\r\n$2\r\nva\r\n$2\r\nvb\r\n$2\r\nvc\r\n$-1\r\n");
    }

    #[test]
    fn split_mset_keeps_pairs() {
        let args: [&[u8]; 5] = [b"mset", b"a", b"1", b"b", b"2"];
        let parts = with_command(&args, |r| {
            split_multi(&classify(r).unwrap(), r, by_first_byte)
        });
        assert_eq!(
            parts[0].bytes,
            b"*3\r\n$4\r\nmset\r\n$1\r\na\r\n$1\r\n1\r\n"
        );
        assert_eq!(
            parts[1].bytes,
            b"*3\r\n$4\r\nmset\r\n$1\r\nb\r\n$1\r\n2\r\n"
        );
        let mut out = Vec::new();
        merge(
            Kind::MultiSet,
            2,
            &[(&[0], b"+OK\r\n"), (&[1], b"+OK\r\n")],
            &mut out,
        )
        .unwrap();
        assert_eq!(out, b"+OK\r\n");
    }

    #[test]
    fn merge_sums_and_errors() {
        let mut out = Vec::new();
        merge(
            Kind::MultiSum,
            3,
            &[(&[0, 2], b":2\r\n"), (&[1], b":0\r\n")],
            &mut out,
        )
        .unwrap();
        assert_eq!(out, b":2\r\n");
        out.clear();
        merge(
            Kind::MultiSum,
            2,
            &[(&[0], b":1\r\n"), (&[1], b"-ERR down\r\n")],
            &mut out,
        )
        .unwrap();
        assert_eq!(out, b"-ERR down\r\n");
        assert_eq!(
            merge(Kind::MultiSum, 1, &[(&[0], b"+OK\r\n")], &mut Vec::new()),
            Err(MergeError::Unexpected)
        );
        assert_eq!(
            merge(
                Kind::MultiGet,
                2,
                &[(&[0, 1], b"*1\r\n$-1\r\n")],
                &mut Vec::new()
            ),
            Err(MergeError::Unexpected)
        );
        assert_eq!(
            merge(
                Kind::MultiGet,
                2,
                &[(&[0], b"*1\r\n$-1\r\n")],
                &mut Vec::new()
            ),
            Err(MergeError::Unexpected)
        );
        assert_eq!(
            merge(Kind::MultiSet, 1, &[(&[0], b":1\r\n")], &mut Vec::new()),
            Err(MergeError::Unexpected)
        );
        assert_eq!(
            merge(Kind::MultiSet, 1, &[(&[0], b"?\r\n")], &mut Vec::new()),
            Err(MergeError::Resp(RespError::BadType(b'?')))
        );
    }

    proptest! {
        /// Splitting MGET over any number of servers, answering each part with its keys, and
        /// merging gives the keys back in the original order.
        #[test]
        fn mget_split_merge_round_trip(keys in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..6), 1..20), nservers in 1usize..5) {
            let server_of = |k: &[u8]| k.iter().map(|&b| usize::from(b)).sum::<usize>() % nservers;
            let mut args: Vec<&[u8]> = vec![b"mget"];
            args.extend(keys.iter().map(|k| &k[..]));
            let parts = with_command(&args, |r| split_multi(&classify(r).unwrap(), r, server_of));
            let mut seen = vec![false; keys.len()];
            let replies: Vec<Vec<u8>> = parts.iter().map(|p| {
                let mut b = Vec::new();
                resp::write_array_header(&mut b, p.positions.len());
                for &pos in &p.positions {
                    prop_assert!(!seen[pos]);
                    seen[pos] = true;
                    prop_assert_eq!(server_of(&keys[pos]), p.server);
                    resp::write_bulk(&mut b, &keys[pos]);
                }
                Ok(b)
            }).collect::<Result<_, _>>()?;
            prop_assert!(seen.iter().all(|&s| s));
            let joined: Vec<(&[usize], &[u8])> = parts.iter().zip(&replies).map(|(p, r)| (&p.positions[..], &r[..])).collect();
            let mut out = Vec::new();
            merge(Kind::MultiGet, keys.len(), &joined, &mut out).unwrap();
            let mut expect = Vec::new();
            write_command(&mut expect, keys.len(), keys.iter().map(|k| &k[..]));
            prop_assert_eq!(out, expect);
        }
    }
}
