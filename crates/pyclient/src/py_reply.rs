//! Reply parsing for Python: one [`Reply`] object per request, made by `memfleet._proto`'s
//! `parse_*` functions, read whole either by a blocking connection (`Conn.read_reply`) or from
//! the chunks an asyncio protocol receives, through a [`Reader`] (`feed`: one call per chunk).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyList};

use crate::py_err::server_error;
use crate::wire::{self, Kind, ReplyParser, Stop};

/// The answer to a lease get (`memfleet._proto.parse_lease`).
#[pyclass(frozen, get_all, module = "memfleet._native")]
pub struct Lease {
    data: Py<PyBytes>,
    flags: u32,
    cas: u64,
    win: bool,
    stale: bool,
    taken: bool,
    hit: bool,
}

fn lease(py: Python<'_>, l: wire::Lease) -> Lease {
    Lease {
        data: PyBytes::new(py, &l.data).unbind(),
        flags: l.flags,
        cas: l.cas,
        win: l.win,
        stale: l.stale,
        taken: l.taken,
        hit: l.hit,
    }
}

/// One reply to parse: its kind, the server's protocol and, for many stores, the keys whose
/// stores failed are reported by.
#[pyclass(module = "memfleet._native")]
pub struct Reply {
    pub(crate) parser: ReplyParser,
    keys: Option<Py<PyList>>,
}

fn kind_of(name: &str, count: usize) -> PyResult<Kind> {
    Ok(match name {
        "get" => Kind::Get,
        "get_many" => Kind::GetMany,
        "store" => Kind::Store,
        "delete" => Kind::Delete,
        "touch" => Kind::Touch,
        "ok" => Kind::Ok,
        "set_many" => Kind::SetMany(count),
        "add_token_many" => Kind::AddTokenMany(count),
        "delete_many" => Kind::DeleteMany(count),
        "arith" => Kind::Arith,
        "lease" => Kind::Lease,
        "exists" => Kind::Exists,
        "lease_exists" => Kind::LeaseExists,
        "probe" => Kind::Probe,
        "version" => Kind::Version,
        "stats" => Kind::Stats,
        "line" => Kind::Line,
        _ => return Err(PyValueError::new_err(format!("no reply kind {name:?}"))),
    })
}

impl Reply {
    /// The parsed reply as the operations take it; `bytes` are those it was parsed from.
    pub(crate) fn result(&mut self, py: Python<'_>, bytes: &[u8]) -> PyResult<PyObject> {
        Ok(match self.parser.take() {
            wire::Reply::Value(None) | wire::Reply::Number(None) => py.None(),
            wire::Reply::Value(Some(i)) => (PyBytes::new(py, i.data.of(bytes)), i.flags, i.cas)
                .into_pyobject(py)?
                .into_any()
                .unbind(),
            wire::Reply::Items(items) => {
                let out = PyDict::new(py);
                for (key, data, flags) in items {
                    let data = PyBytes::new(py, data.of(bytes));
                    out.set_item(PyBytes::new(py, key.of(bytes)), (data, flags))?;
                }
                out.into_any().unbind()
            }
            wire::Reply::Bool(b) => b.into_pyobject(py)?.to_owned().into_any().unbind(),
            wire::Reply::Failed(failed) => {
                let out = PyList::empty(py);
                if let Some(keys) = &self.keys {
                    let keys = keys.bind(py);
                    for i in failed {
                        out.append(keys.get_item(i)?)?;
                    }
                }
                out.into_any().unbind()
            }
            wire::Reply::Count(n) => n.into_pyobject(py)?.into_any().unbind(),
            wire::Reply::Number(Some(n)) => n.into_pyobject(py)?.into_any().unbind(),
            wire::Reply::Lease(l) => Py::new(py, lease(py, l))?.into_any(),
            wire::Reply::LeaseExists(l, there) => (Py::new(py, lease(py, l))?, there)
                .into_pyobject(py)?
                .into_any()
                .unbind(),
            wire::Reply::Text(t) => t.into_pyobject(py)?.into_any().unbind(),
            wire::Reply::Stats(stats) => {
                let out = PyDict::new(py);
                for (k, v) in stats {
                    out.set_item(k, v)?;
                }
                out.into_any().unbind()
            }
            wire::Reply::Line(l) => PyBytes::new(py, &l).into_any().unbind(),
        })
    }
}

#[pymethods]
impl Reply {
    /// `kind` as the `parse_*` function's name says; `count` requests for many stores or
    /// deletes; `keys` for many stores, one per request.
    #[new]
    #[pyo3(signature = (kind, meta, count = 0, keys = None))]
    fn new(
        kind: &str,
        meta: bool,
        count: usize,
        keys: Option<Bound<'_, PyList>>,
    ) -> PyResult<Reply> {
        let count = keys.as_ref().map_or(count, |k| k.len());
        Ok(Reply {
            parser: ReplyParser::new(kind_of(kind, count)?, meta),
            keys: keys.map(Bound::unbind),
        })
    }
}

/// The bytes an asyncio connection received and not yet parsed, and the reply it waits for.
#[pyclass(module = "memfleet._native")]
pub struct Reader {
    buf: Vec<u8>,
    reply: Option<Py<Reply>>,
    /// The reply, parsed, once whole.
    done: Option<PyObject>,
}

impl Reader {
    /// Reads on in the bytes since the reply began, `data` (if any) added; true once the reply
    /// is whole.
    fn advance(&mut self, py: Python<'_>, data: Option<&[u8]>) -> PyResult<bool> {
        let Some(reply) = self.reply.as_ref().map(|r| r.clone_ref(py)) else {
            if let Some(data) = data {
                self.buf.extend_from_slice(data);
            }
            return Ok(false);
        };
        let mut reply = reply.borrow_mut(py);
        // the usual case, a whole reply in one chunk, is parsed where it lies
        if let (Some(data), true) = (data, self.buf.is_empty()) {
            match reply.parser.advance(data) {
                Ok(()) => {
                    let used = reply.parser.consumed();
                    self.done = Some(reply.result(py, data)?);
                    self.buf.extend_from_slice(&data[used..]);
                    return Ok(true);
                }
                Err(Stop::More { .. }) => self.buf.extend_from_slice(data),
                Err(Stop::Bad(e)) => return Err(self.out_of_step(py, e)),
            }
            return Ok(false);
        }
        if let Some(data) = data {
            self.buf.extend_from_slice(data);
        }
        match reply.parser.advance(&self.buf) {
            Ok(()) => {
                let used = reply.parser.consumed();
                self.done = Some(reply.result(py, &self.buf)?);
                self.buf.drain(..used);
                Ok(true)
            }
            Err(Stop::More { .. }) => Ok(false),
            Err(Stop::Bad(e)) => Err(self.out_of_step(py, e)),
        }
    }

    /// A reply that cannot be one: the stream is out of step (the connection is closed).
    fn out_of_step(&mut self, py: Python<'_>, e: wire::WireError) -> PyErr {
        self.buf.clear();
        self.reply = None;
        server_error(py, e)
    }
}

#[pymethods]
impl Reader {
    #[new]
    fn new() -> Reader {
        Reader {
            buf: Vec::new(),
            reply: None,
            done: None,
        }
    }

    /// Waits for `reply`; true if the bytes already received hold it whole.
    fn begin(&mut self, py: Python<'_>, reply: Py<Reply>) -> PyResult<bool> {
        self.reply = Some(reply);
        self.done = None;
        if self.buf.is_empty() {
            return Ok(false);
        }
        self.advance(py, None)
    }

    /// Takes received bytes; true once the reply waited for is whole (`result` has it).
    /// `MemfleetServerError` if it cannot be one.
    fn feed(&mut self, py: Python<'_>, data: &[u8]) -> PyResult<bool> {
        self.advance(py, Some(data))
    }

    /// As `feed`, with the first `n` bytes of `buffer` (the bytearray an asyncio buffered
    /// protocol receives into: no bytes object per chunk).
    fn feed_from(
        &mut self,
        py: Python<'_>,
        buffer: &Bound<'_, PyByteArray>,
        n: usize,
    ) -> PyResult<bool> {
        // SAFETY: only the protocol that owns the bytearray resizes or writes it (the transport
        // receives into it between reads, never during this call), and the bytearray is alive
        // for all of it (borrowed from the caller)
        let data = unsafe { buffer.as_bytes() };
        let n = n.min(data.len());
        self.advance(py, Some(&data[..n]))
    }

    /// The whole reply, parsed; the reader then waits for nothing.
    fn result(&mut self, py: Python<'_>) -> PyObject {
        self.reply = None;
        self.done.take().unwrap_or_else(|| py.None())
    }

    /// Forgets the reply waited for (a cancelled or timed-out request).
    fn drop_reply(&mut self) {
        self.reply = None;
        self.done = None;
    }
}

#[pyfunction]
pub fn parse_tracking(py: Python<'_>, line: &[u8]) -> PyResult<Option<u64>> {
    wire::tracking_line(line).map_err(|e| server_error(py, e))
}

/// A listener's notice: the key it invalidates, or None for all of them (`IV_ALL`);
/// `ValueError` for a line that is not a notice.
#[pyfunction]
pub fn parse_notice<'py>(py: Python<'py>, line: &[u8]) -> PyResult<Option<Bound<'py, PyBytes>>> {
    match wire::notice_line(line) {
        Some(wire::Notice::Key(key)) => Ok(Some(PyBytes::new(py, &key))),
        Some(wire::Notice::All) => Ok(None),
        None => {
            let shown = String::from_utf8_lossy(&line[..line.len().min(80)]).into_owned();
            Err(PyValueError::new_err(format!(
                "unexpected notice {shown:?}"
            )))
        }
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Lease>()?;
    m.add_class::<Reply>()?;
    m.add_class::<Reader>()?;
    m.add_function(wrap_pyfunction!(parse_tracking, m)?)?;
    m.add_function(wrap_pyfunction!(parse_notice, m)?)?;
    Ok(())
}
