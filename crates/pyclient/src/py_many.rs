//! Multi-key fetches in two calls: [`plan_fetch`] turns the caller's keys into wire keys and
//! groups them by server; [`FetchPlan::fetch`] sends every server its request and reads every
//! reply with the GIL released once, then puts the hits into the caller's dict under the
//! caller's own keys. Values of the simple types (bytes, text, integers) are decoded here; the
//! rest go back to Python's decoder.

use std::io::{self, Write};
use std::net::TcpStream;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};

use crate::py::{io_error, receive_reply, Conn, Io, Ring};
use crate::wire::{self, Kind, ReplyParser};

// memfleet's flags table (memfleet.serde): the types decoded here
const FLAG_BYTES: u32 = 0;
const FLAG_INTEGER: u32 = 2;
const FLAG_LONG: u32 = 4;
const FLAG_TEXT: u32 = 16;

/// The caller's keys as sent, grouped by the server that holds them.
#[pyclass(frozen, module = "memfleet._native")]
pub struct FetchPlan {
    /// Wire keys back to back: key `i` is `wires[spans[i].0..spans[i].1]`.
    wires: Vec<u8>,
    spans: Vec<(usize, usize)>,
    /// (server index in the ring, indexes of the caller's keys), servers in order of first use.
    groups: Vec<(usize, Vec<usize>)>,
}

/// Places `keys` (str or bytes) on the ring's servers (every key on server 0 without a ring);
/// `prefix` goes before each key on the wire but not into its hash, as libmemcached does.
/// None when a key is of another type or not one memcached takes: the caller's general path
/// then converts it or raises its error.
#[pyfunction]
#[pyo3(signature = (ring, keys, prefix))]
pub(crate) fn plan_fetch(
    ring: Option<&Ring>,
    keys: &Bound<'_, PyList>,
    prefix: &[u8],
) -> PyResult<Option<FetchPlan>> {
    let mut wires = Vec::with_capacity(keys.len() * (prefix.len() + 16));
    let mut spans = Vec::with_capacity(keys.len());
    for key in keys.iter() {
        let start = wires.len();
        wires.extend_from_slice(prefix);
        if let Ok(b) = key.downcast::<PyBytes>() {
            wires.extend_from_slice(b.as_bytes());
        } else if let Ok(s) = key.downcast::<PyString>() {
            let Ok(text) = s.to_cow() else {
                return Ok(None);
            };
            wires.extend_from_slice(text.as_bytes());
        } else {
            return Ok(None);
        }
        if !wire::valid_key(&wires[start..]) {
            return Ok(None);
        }
        spans.push((start, wires.len()));
    }
    let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
    // no Python object is made while the ring's memo is locked (see Ring::group)
    let mut memo = ring.map(|r| r.memo.lock().unwrap_or_else(|e| e.into_inner()));
    for (i, &(start, end)) in spans.iter().enumerate() {
        let at = match (ring, memo.as_mut()) {
            (Some(r), Some(m)) => r.index_memo(m, &wires[start + prefix.len()..end])?,
            _ => 0,
        };
        match groups.iter_mut().find(|(s, _)| *s == at) {
            Some((_, members)) => members.push(i),
            None => groups.push((at, vec![i])),
        }
    }
    drop(memo);
    Ok(Some(FetchPlan {
        wires,
        spans,
        groups,
    }))
}

/// One server's part of a fetch while the GIL is released.
struct Pending<'a> {
    group: usize,
    stream: &'a mut TcpStream,
    buf: &'a mut Vec<u8>,
    pos: &'a mut usize,
    end: &'a mut usize,
    parser: &'a mut ReplyParser,
    request: &'a [u8],
    sent: usize,
    received: bool,
    error: Option<io::Error>,
}

/// Sends what is left of each request, then receives each reply until it is whole (or cannot
/// be read as one). Err(()) when a signal interrupted a call: the caller runs the Python
/// handlers and calls again, which goes on where this stopped.
fn send_and_receive(pending: &mut [Pending<'_>]) -> Result<(), ()> {
    for p in pending.iter_mut().filter(|p| p.error.is_none()) {
        while p.sent < p.request.len() {
            match p.stream.write(&p.request[p.sent..]) {
                Ok(0) => {
                    p.error = Some(io::ErrorKind::WriteZero.into());
                    break;
                }
                Ok(n) => p.sent += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => return Err(()),
                Err(e) => {
                    p.error = Some(e);
                    break;
                }
            }
        }
    }
    for p in pending
        .iter_mut()
        .filter(|p| p.error.is_none() && !p.received)
    {
        match receive_reply(p.stream, p.buf, p.pos, p.end, p.parser) {
            Ok(()) => p.received = true,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Err(()),
            Err(e) => p.error = Some(e),
        }
    }
    Ok(())
}

/// Where a fetch puts what it reads: the caller's keys name the hits.
struct Found<'a, 'py> {
    keys: &'a Bound<'py, PyList>,
    /// Whether the simple types are decoded here (the client's flags are memfleet's).
    decode: bool,
    /// `{key: value}` of the values decoded here.
    values: Bound<'py, PyDict>,
    /// `[(key, data, flags)]` of the others.
    raw: Bound<'py, PyList>,
}

/// A value of one of the simple types, or None: Python decodes it.
fn decode_simple<'py>(py: Python<'py>, data: &[u8], flags: u32) -> Option<Bound<'py, PyAny>> {
    match flags {
        FLAG_BYTES => Some(PyBytes::new(py, data).into_any()),
        // Python's own decoder checks the UTF-8 as it copies (checking it here first, for
        // PyString::new, read every value twice); an invalid one is left to Python.
        // Sound: `py` holds the GIL, and `data` outlives the call, which copies it.
        FLAG_TEXT => unsafe {
            let s = pyo3::ffi::PyUnicode_DecodeUTF8(
                data.as_ptr().cast(),
                data.len() as pyo3::ffi::Py_ssize_t,
                std::ptr::null(),
            );
            if s.is_null() {
                pyo3::ffi::PyErr_Clear();
                None
            } else {
                Some(Bound::from_owned_ptr(py, s))
            }
        },
        FLAG_INTEGER | FLAG_LONG => {
            wire::ascii_int(data).and_then(|n| n.into_pyobject(py).ok().map(|n| n.into_any()))
        }
        _ => None,
    }
}

impl FetchPlan {
    fn wire(&self, i: usize) -> &[u8] {
        let (a, b) = self.spans[i];
        &self.wires[a..b]
    }

    /// Which of `members` a reply names: servers answer in request order, so the search starts
    /// after the last one found.
    fn find(&self, members: &[usize], cursor: &mut usize, key: &[u8]) -> Option<usize> {
        let after = (*cursor..members.len()).find(|&j| self.wire(members[j]) == key);
        let j = after.or_else(|| (0..*cursor).find(|&j| self.wire(members[j]) == key))?;
        *cursor = j + 1;
        Some(members[j])
    }

    /// Reads one server's reply, as `parser` parses it, into `found`.
    fn parse_into(
        &self,
        py: Python<'_>,
        conn: &mut Conn,
        parser: &mut ReplyParser,
        members: &[usize],
        found: &Found<'_, '_>,
    ) -> PyResult<()> {
        conn.parse(py, parser)?;
        let start = conn.pos;
        conn.pos += parser.consumed();
        let wire::Reply::Items(items) = parser.take() else {
            return Ok(());
        };
        let reply = &conn.buf[start..conn.pos];
        let mut cursor = 0;
        for (key, data, flags) in items {
            let Some(at) = self.find(members, &mut cursor, key.of(reply)) else {
                continue; // a key not asked for: nobody wants it
            };
            let key = found.keys.get_item(at)?;
            let data = data.of(reply);
            match found
                .decode
                .then(|| decode_simple(py, data, flags))
                .flatten()
            {
                Some(value) => found.values.set_item(key, value)?,
                None => found.raw.append((key, PyBytes::new(py, data), flags))?,
            }
        }
        Ok(())
    }
}

#[pymethods]
impl FetchPlan {
    /// The ring index of each server the keys are on, one per group.
    #[getter]
    fn servers(&self) -> Vec<usize> {
        self.groups.iter().map(|(s, _)| *s).collect()
    }

    /// Fetches the keys over `conns` (one per server of [`Self::servers`]; None skips that
    /// server), asking with the text protocol's `get` (`text`) or, where a connection speaks
    /// meta, one `mg` per key. Returns `(hits, raw, errors)`: `{key: value}` of the values decoded here
    /// (`decode`: the client's flags are memfleet's), `[(key, data, flags)]` of the others, and
    /// per server None or the exception that ended its part (its connection is then unusable).
    #[allow(clippy::type_complexity)]
    fn fetch<'py>(
        &self,
        py: Python<'py>,
        conns: Vec<Option<Bound<'py, Conn>>>,
        keys: &Bound<'py, PyList>,
        text: bool,
        decode: bool,
    ) -> PyResult<(
        Bound<'py, PyDict>,
        Bound<'py, PyList>,
        Vec<Option<PyObject>>,
    )> {
        if conns.len() != self.groups.len() || keys.len() != self.spans.len() {
            return Err(PyValueError::new_err("fetch does not match its plan"));
        }
        let mut guards = Vec::with_capacity(conns.len());
        for c in &conns {
            guards.push(c.as_ref().map(|c| c.try_borrow_mut()).transpose()?);
        }
        let mut errors: Vec<Option<PyErr>> = (0..conns.len()).map(|_| None).collect();
        let requests: Vec<Vec<u8>> = self
            .groups
            .iter()
            .zip(&guards)
            .map(|((_, members), conn)| match conn {
                Some(c) => {
                    let ks: Vec<&[u8]> = members.iter().map(|&i| self.wire(i)).collect();
                    wire::req_get_many(&ks, c.meta && !text)
                }
                None => Vec::new(),
            })
            .collect();
        let mut parsers: Vec<ReplyParser> = guards
            .iter()
            .map(|c| ReplyParser::new(Kind::GetMany, c.as_ref().is_some_and(|c| c.meta) && !text))
            .collect();
        // sockets of Python's (TLS) are written to now and read from while parsing; plain TCP
        // ones are all written to, then read from, in one stretch without the GIL
        let mut pending = Vec::new();
        for ((g, conn), parser) in guards.iter_mut().enumerate().zip(parsers.iter_mut()) {
            let Some(conn) = conn else { continue };
            let conn: &mut Conn = conn;
            if !matches!(conn.io, Io::Tcp(_)) {
                if let Err(e) = conn.write(py, &[&requests[g]]) {
                    errors[g] = Some(e);
                }
            } else if let Io::Tcp(stream) = &mut conn.io {
                pending.push(Pending {
                    group: g,
                    stream,
                    buf: &mut conn.buf,
                    pos: &mut conn.pos,
                    end: &mut conn.end,
                    parser,
                    request: &requests[g],
                    sent: 0,
                    received: false,
                    error: None,
                });
            }
        }
        while py.allow_threads(|| send_and_receive(&mut pending)).is_err() {
            py.check_signals()?;
        }
        for p in pending {
            if let Some(e) = p.error {
                errors[p.group] = Some(io_error(e));
            }
        }
        let found = Found {
            keys,
            decode,
            values: PyDict::new(py),
            raw: PyList::empty(py),
        };
        for ((g, conn), parser) in guards.iter_mut().enumerate().zip(parsers.iter_mut()) {
            let Some(conn) = conn else { continue };
            if errors[g].is_some() {
                continue;
            }
            if let Err(e) = self.parse_into(py, conn, parser, &self.groups[g].1, &found) {
                errors[g] = Some(e);
            }
        }
        let errors = errors
            .into_iter()
            .map(|e| e.map(|e| e.into_value(py).into_any()))
            .collect();
        Ok((found.values, found.raw, errors))
    }
}
