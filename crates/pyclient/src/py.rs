//! The `memfleet._native` module: what `memfleet._conn`, `memfleet._proto` and
//! `memfleet.ketama` build on.

use std::collections::HashMap;
use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::sync::Mutex;
use std::time::Duration;

use pyo3::exceptions::{PyTimeoutError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use crate::ketama::{self, Ketama};
use crate::py_err::connection_error;
pub(crate) use crate::py_err::server_error;
use crate::py_reply::Reply;
use crate::wire::{self, Kind, ReplyParser, Stop};

const RECV: usize = 65536;
/// Values at least this long leave by scatter-gather, uncopied.
const GATHER_FROM: usize = 16384;

/// An I/O error as Python's socket module would raise it: a timeout is `TimeoutError`
/// (SO_RCVTIMEO ends a read with EAGAIN), the rest the matching `OSError`.
pub(crate) fn io_error(e: io::Error) -> PyErr {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => PyTimeoutError::new_err("timed out"),
        _ => e.into(),
    }
}

fn timeout_of(seconds: Option<f64>) -> Option<Duration> {
    // socket.settimeout(None) blocks; 0 would mean non-blocking, which the pool never asks for
    seconds.map(|s| Duration::from_secs_f64(s.max(1e-6)))
}

pub(crate) enum Io {
    /// Plain TCP: reads and writes release the GIL.
    Tcp(TcpStream),
    /// A Python socket (an `ssl.SSLSocket`): called with the GIL held.
    Py(PyObject),
    Closed,
}

/// One connection with its read buffer; bytes `pos..end` of `buf` are received and unread.
/// Not thread-safe: a pool hands it to one user at a time.
#[pyclass(subclass, module = "memfleet._native")]
pub struct Conn {
    pub(crate) io: Io,
    pub(crate) buf: Vec<u8>,
    pub(crate) pos: usize,
    pub(crate) end: usize,
    /// Whether the server speaks the meta protocol.
    #[pyo3(get, set)]
    pub(crate) meta: bool,
    /// The tracking listener this connection's reads are registered for.
    #[pyo3(get, set)]
    track_id: Option<i64>,
    #[pyo3(get)]
    tls: bool,
}

impl Conn {
    fn closed(py: Python<'_>) -> PyErr {
        connection_error(py, "server closed the connection".to_owned())
    }

    /// With the GIL released once: send `request`, then receive until `parser` has the whole
    /// reply, or finds it bad (then [`Self::parse`] reports that). Each GIL hand-back costs a
    /// wait when other threads run Python, so a reply is not taken one recv at a time. Over a
    /// Python socket (TLS) the request is sent and [`Self::parse`] receives as it reads.
    fn exchange(
        &mut self,
        py: Python<'_>,
        request: &[&[u8]],
        parser: &mut ReplyParser,
    ) -> PyResult<()> {
        let Io::Tcp(s) = &mut self.io else {
            return if request.is_empty() {
                Ok(())
            } else {
                self.write(py, request)
            };
        };
        let (buf, pos, end) = (&mut self.buf, &mut self.pos, &mut self.end);
        let mut slices: Vec<IoSlice<'_>> = request.iter().map(|p| IoSlice::new(p)).collect();
        let mut rest: &mut [IoSlice<'_>] = &mut slices;
        loop {
            let r = py.allow_threads(|| -> io::Result<()> {
                while !rest.is_empty() {
                    let n = write_some(s, rest)?;
                    IoSlice::advance_slices(&mut rest, n);
                }
                receive_reply(s, buf, pos, end, parser)
            });
            match r {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => py.check_signals()?,
                Err(e) => return Err(io_error(e)),
            }
        }
    }

    /// Reads until `parser` has the whole reply (receiving what is missing); a bad reply is a
    /// `MemfleetServerError`.
    pub(crate) fn parse(&mut self, py: Python<'_>, parser: &mut ReplyParser) -> PyResult<()> {
        loop {
            let (pos, end) = (self.pos, self.end);
            match parser.advance(&self.buf[pos..end]) {
                Ok(()) => return Ok(()),
                Err(Stop::More { want }) => self.fill(py, want.saturating_sub(end - pos))?,
                Err(Stop::Bad(e)) => return Err(server_error(py, e)),
            }
        }
    }

    /// Receive more bytes after `end`, growing the buffer so that at least `want` more fit.
    fn fill(&mut self, py: Python<'_>, want: usize) -> PyResult<()> {
        make_room(&mut self.buf, &mut self.pos, &mut self.end, want);
        let n = match &mut self.io {
            Io::Tcp(s) => {
                let spare = &mut self.buf[self.end..];
                loop {
                    match py.allow_threads(|| s.read(spare)) {
                        // a signal: its Python handler runs now (Ctrl-C ends a blocked read)
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => py.check_signals()?,
                        r => break r.map_err(io_error)?,
                    }
                }
            }
            Io::Py(sock) => {
                let chunk = sock
                    .bind(py)
                    .call_method1("recv", (self.buf.len() - self.end,))?;
                let chunk = chunk.downcast::<PyBytes>()?.as_bytes();
                self.buf[self.end..self.end + chunk.len()].copy_from_slice(chunk);
                chunk.len()
            }
            Io::Closed => return Err(connection_error(py, "connection is closed".to_owned())),
        };
        if n == 0 {
            return Err(Self::closed(py));
        }
        self.end += n;
        Ok(())
    }

    /// The range of the next line (without CRLF), consumed.
    fn line(&mut self, py: Python<'_>) -> PyResult<(usize, usize)> {
        let mut scanned = 0;
        loop {
            let at = wire::line_end(&self.buf[self.pos..self.end], scanned)
                .map_err(|e| server_error(py, e))?;
            if let Some(cr) = at {
                let start = self.pos;
                self.pos += cr + 2;
                return Ok((start, start + cr));
            }
            // a CR already received may be followed by the LF still to come
            scanned = (self.end - self.pos).saturating_sub(1);
            self.fill(py, 0)?;
        }
    }

    pub(crate) fn write(&mut self, py: Python<'_>, parts: &[&[u8]]) -> PyResult<()> {
        match &mut self.io {
            Io::Tcp(s) => {
                let mut slices: Vec<IoSlice<'_>> = parts.iter().map(|p| IoSlice::new(p)).collect();
                let mut rest: &mut [IoSlice<'_>] = &mut slices;
                while !rest.is_empty() {
                    match py.allow_threads(|| write_some(s, rest)) {
                        Ok(n) => IoSlice::advance_slices(&mut rest, n),
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => py.check_signals()?,
                        Err(e) => return Err(io_error(e)),
                    }
                }
                Ok(())
            }
            Io::Py(sock) => {
                let sock = sock.bind(py);
                for p in parts {
                    sock.call_method1("sendall", (PyBytes::new(py, p),))?;
                }
                Ok(())
            }
            Io::Closed => Err(connection_error(py, "connection is closed".to_owned())),
        }
    }
}

/// Makes room after `end` for at least `want` more bytes (a full receive's worth at least),
/// moving the unread bytes to the front when that frees enough.
pub(crate) fn make_room(buf: &mut Vec<u8>, pos: &mut usize, end: &mut usize, want: usize) {
    if *pos == *end {
        *pos = 0;
        *end = 0;
    } else if *pos > 0 && buf.len() - *end < want.max(RECV / 4) {
        buf.copy_within(*pos..*end, 0);
        *end -= *pos;
        *pos = 0;
    }
    let room = want.clamp(RECV, 1 << 24);
    if buf.len() - *end < room {
        buf.resize(*end + room, 0);
    }
}

/// Receives into `buf` until `parser` has the whole reply after `pos`, finds it bad, or the
/// server closes the connection (the parser then says where the reply runs out).
pub(crate) fn receive_reply(
    s: &mut TcpStream,
    buf: &mut Vec<u8>,
    pos: &mut usize,
    end: &mut usize,
    parser: &mut ReplyParser,
) -> io::Result<()> {
    while let Err(Stop::More { want }) = parser.advance(&buf[*pos..*end]) {
        make_room(buf, pos, end, want.saturating_sub(*end - *pos));
        let n = s.read(&mut buf[*end..])?;
        if n == 0 {
            return Ok(());
        }
        *end += n;
    }
    Ok(())
}

/// Writes what the socket takes now (blocking until it takes something).
pub(crate) fn write_some(s: &mut TcpStream, parts: &[IoSlice<'_>]) -> io::Result<usize> {
    match s.write_vectored(parts)? {
        0 => Err(io::ErrorKind::WriteZero.into()),
        n => Ok(n),
    }
}

fn connect(host: &str, port: u16, timeout: Option<Duration>) -> io::Result<TcpStream> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
    for addr in (host, port).to_socket_addrs()? {
        let r = match timeout {
            Some(t) => TcpStream::connect_timeout(&addr, t),
            None => TcpStream::connect(addr),
        };
        match r {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(last)
}

#[pymethods]
impl Conn {
    /// Connects to `host:port`, or, given `sock` (a connected TLS socket), speaks over it.
    #[new]
    #[pyo3(signature = (host, port, connect_timeout, timeout, sock=None))]
    fn new(
        py: Python<'_>,
        host: &str,
        port: u16,
        connect_timeout: Option<f64>,
        timeout: Option<f64>,
        sock: Option<PyObject>,
    ) -> PyResult<Conn> {
        let (io, tls) = match sock {
            Some(sock) => (Io::Py(sock), true),
            None => {
                let (ct, t) = (timeout_of(connect_timeout), timeout_of(timeout));
                let stream = py
                    .allow_threads(|| {
                        let s = connect(host, port, ct)?;
                        s.set_nodelay(true)?;
                        s.set_read_timeout(t)?;
                        s.set_write_timeout(t)?;
                        Ok::<_, io::Error>(s)
                    })
                    .map_err(|e| {
                        connection_error(py, format!("connect to {host}:{port} failed: {e}"))
                    })?;
                (Io::Tcp(stream), false)
            }
        };
        Ok(Conn {
            io,
            buf: Vec::new(),
            pos: 0,
            end: 0,
            meta: true,
            track_id: None,
            tls,
        })
    }

    fn close(&mut self, py: Python<'_>) {
        match std::mem::replace(&mut self.io, Io::Closed) {
            Io::Tcp(s) => {
                let _ = s.shutdown(Shutdown::Both);
            }
            Io::Py(sock) => {
                let _ = sock.bind(py).call_method0("close");
            }
            Io::Closed => {}
        }
    }

    fn send(&mut self, py: Python<'_>, data: &[u8]) -> PyResult<()> {
        self.write(py, &[data])
    }

    /// Header, value and CRLF; a big value goes out by scatter-gather, uncopied.
    fn send_value(&mut self, py: Python<'_>, head: &[u8], data: &[u8]) -> PyResult<()> {
        if data.len() >= GATHER_FROM {
            if let (Io::Py(sock), false) = (&self.io, self.tls) {
                // a plain Python socket (one a test put in): one sendmsg, as over TCP
                let sock = sock.bind(py);
                let parts = (
                    PyBytes::new(py, head),
                    PyBytes::new(py, data),
                    PyBytes::new(py, b"\r\n"),
                );
                let sent: usize = sock.call_method1("sendmsg", (parts,))?.extract()?;
                let total = head.len() + data.len() + 2;
                if sent < total {
                    let mut one = Vec::with_capacity(total);
                    one.extend_from_slice(head);
                    one.extend_from_slice(data);
                    one.extend_from_slice(b"\r\n");
                    sock.call_method1("sendall", (PyBytes::new(py, &one[sent..]),))?;
                }
                return Ok(());
            }
            if let Io::Tcp(_) = self.io {
                return self.write(py, &[head, data, b"\r\n"]);
            }
        }
        let mut one = Vec::with_capacity(head.len() + data.len() + 2);
        one.extend_from_slice(head);
        one.extend_from_slice(data);
        one.extend_from_slice(b"\r\n");
        self.write(py, &[&one])
    }

    /// The connection's socket: a Python socket on a duplicate of the TCP one, or the TLS
    /// socket. Setting it makes the connection speak over the object set (a test's wrapper).
    #[getter]
    fn get_sock(&self, py: Python<'_>) -> PyResult<PyObject> {
        match &self.io {
            Io::Tcp(s) => {
                let fd = py.import("os")?.call_method1("dup", (s.as_raw_fd(),))?;
                let kwargs = PyDict::new(py);
                kwargs.set_item("fileno", fd)?;
                Ok(py
                    .import("socket")?
                    .getattr("socket")?
                    .call((), Some(&kwargs))?
                    .unbind())
            }
            Io::Py(sock) => Ok(sock.clone_ref(py)),
            Io::Closed => Err(connection_error(py, "connection is closed".to_owned())),
        }
    }

    #[setter]
    fn set_sock(&mut self, sock: PyObject) {
        self.io = Io::Py(sock);
    }

    /// The next reply line, without its CRLF.
    fn readline<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let (a, b) = self.line(py)?;
        Ok(PyBytes::new(py, &self.buf[a..b]))
    }

    /// One fetch: `(data, flags)`, or None on a miss.
    fn get<'py>(
        &mut self,
        py: Python<'py>,
        key: &[u8],
    ) -> PyResult<Option<(Bound<'py, PyBytes>, u32)>> {
        let meta = self.meta;
        let mut parser = ReplyParser::new(Kind::Get, meta);
        self.exchange(py, &[&wire::req_get(key, meta)], &mut parser)?;
        self.parse(py, &mut parser)?;
        let start = self.pos;
        self.pos += parser.consumed();
        Ok(match parser.take() {
            wire::Reply::Value(Some(item)) => Some((
                PyBytes::new(py, item.data.of(&self.buf[start..])),
                item.flags,
            )),
            _ => None,
        })
    }

    /// A store: sends the command line, the value and CRLF; whether it was stored (`NS`,
    /// `EX`, `NF` and their text forms are not; any other line is an error).
    fn store(&mut self, py: Python<'_>, head: &[u8], data: &[u8]) -> PyResult<bool> {
        let mut parser = ReplyParser::new(Kind::Store, self.meta);
        if let Io::Tcp(_) = self.io {
            if data.len() >= GATHER_FROM {
                self.exchange(py, &[head, data, b"\r\n"], &mut parser)?;
            } else {
                let mut one = Vec::with_capacity(head.len() + data.len() + 2);
                one.extend_from_slice(head);
                one.extend_from_slice(data);
                one.extend_from_slice(b"\r\n");
                self.exchange(py, &[&one], &mut parser)?;
            }
        } else {
            self.send_value(py, head, data)?;
        }
        self.parse(py, &mut parser)?;
        self.pos += parser.consumed();
        Ok(matches!(parser.take(), wire::Reply::Bool(true)))
    }

    /// One reply, read whole and parsed (`memfleet._proto`'s `parse_*` make `reply`).
    fn read_reply(&mut self, py: Python<'_>, mut reply: PyRefMut<'_, Reply>) -> PyResult<PyObject> {
        self.parse(py, &mut reply.parser)?;
        let r = reply.result(py, &self.buf[self.pos..self.end]);
        self.pos += reply.parser.consumed();
        r
    }

    /// A request and its reply, parsed: the blocking client's one-key fast paths.
    fn call(
        &mut self,
        py: Python<'_>,
        request: &[u8],
        reply: PyRefMut<'_, Reply>,
    ) -> PyResult<PyObject> {
        let mut reply = reply;
        self.exchange(py, &[request], &mut reply.parser)?;
        self.read_reply(py, reply)
    }
}

/// The weighted ketama ring of `memfleet.ketama`.
#[pyclass(frozen, module = "memfleet._native")]
pub struct Ring {
    ring: Ketama,
    /// Routing key -> server index: a hot key skips md5 (the ring never changes; a new one is
    /// built when the live servers do).
    pub(crate) memo: Mutex<Memo>,
}

/// Routing key -> server index, with a fast hasher (the keys are the application's, and
/// the memo starts over at `MEMO_MAX` entries).
pub(crate) type Memo = HashMap<Vec<u8>, usize, foldhash::fast::RandomState>;

/// Entries the memo holds before it starts over.
const MEMO_MAX: usize = 65536;

impl Ring {
    pub(crate) fn index_memo(&self, memo: &mut Memo, key: &[u8]) -> PyResult<usize> {
        if let Some(&at) = memo.get(key) {
            return Ok(at);
        }
        let at = self.index_for(key)?;
        if memo.len() >= MEMO_MAX {
            memo.clear();
        }
        memo.insert(key.to_vec(), at);
        Ok(at)
    }
}

#[pymethods]
impl Ring {
    #[new]
    fn new(names: Vec<String>, weights: Vec<u32>) -> PyResult<Ring> {
        if names.len() != weights.len() {
            return Err(PyValueError::new_err("names and weights differ in length"));
        }
        Ok(Ring {
            ring: Ketama::new(&names, &weights),
            memo: Mutex::new(Memo::default()),
        })
    }

    fn __len__(&self) -> usize {
        self.ring.len()
    }

    pub(crate) fn index_for(&self, key: &[u8]) -> PyResult<usize> {
        self.ring
            .index_for(key)
            .ok_or_else(|| PyValueError::new_err("the ring is empty"))
    }

    /// The keys grouped by server: `[(index, [wire, ...]), ...]` in the order servers first
    /// appear, where `wires[i]` is sent for routing key `rks[i]`.
    fn group<'py>(
        &self,
        py: Python<'py>,
        rks: &Bound<'py, PyList>,
        wires: &Bound<'py, PyList>,
    ) -> PyResult<Vec<(usize, Bound<'py, PyList>)>> {
        if rks.len() != wires.len() {
            return Err(PyValueError::new_err("rks and wires differ in length"));
        }
        // the servers are found under the memo's lock and the lists built after it: building
        // them may run the garbage collector, and another thread waiting on this lock (with the
        // GIL, or, without a GIL, for a collection to pause it) would then never let it finish
        let keys: Vec<Bound<'py, PyBytes>> = rks
            .iter()
            .map(|rk| rk.downcast_into::<PyBytes>().map_err(PyErr::from))
            .collect::<PyResult<_>>()?;
        let at: Vec<usize> = {
            let mut memo = self.memo.lock().unwrap_or_else(|e| e.into_inner());
            keys.iter()
                .map(|k| self.index_memo(&mut memo, k.as_bytes()))
                .collect::<PyResult<_>>()?
        };
        let mut groups: Vec<(usize, Bound<'py, PyList>)> = Vec::new();
        for (at, wire) in at.into_iter().zip(wires.iter()) {
            match groups.iter().find(|(i, _)| *i == at) {
                Some((_, list)) => list.append(wire)?,
                None => groups.push((at, PyList::new(py, [wire])?)),
            }
        }
        Ok(groups)
    }

    fn index_for_hash(&self, h: u32) -> PyResult<usize> {
        self.ring
            .index_for_hash(h)
            .ok_or_else(|| PyValueError::new_err("the ring is empty"))
    }
}

#[pyfunction]
pub(crate) fn key_hash(key: &[u8]) -> u32 {
    ketama::key_hash(key)
}

/// Whether memcached takes `key` (1 to 250 bytes, no space or control character): the
/// client's one key rule, which `plan_fetch` applies too.
#[pyfunction]
pub(crate) fn valid_key(key: &[u8]) -> bool {
    wire::valid_key(key)
}

/// Whether a zstd frame's sequences all use its dictionary's tables (`zstd_frame`): read with
/// another dictionary of its id, such a frame nearly always fails without a content checksum.
#[pyfunction]
pub(crate) fn zstd_sequences_use_dictionary_tables(frame: &[u8]) -> bool {
    crate::zstd_frame::sequences_use_dictionary_tables(frame)
}

#[pyfunction]
pub(crate) fn points_for(weight: u32, total_weight: u32, live_servers: u32) -> u32 {
    ketama::points_for(weight, total_weight, live_servers)
}

#[pyfunction]
pub(crate) fn req_get_many<'py>(
    py: Python<'py>,
    keys: Vec<Bound<'py, PyBytes>>,
    meta: bool,
) -> Bound<'py, PyBytes> {
    let keys: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
    PyBytes::new(py, &wire::req_get_many(&keys, meta))
}
