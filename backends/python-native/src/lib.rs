//! `_trtis_native`: the native core of trtis's Python backend worker.
//!
//! The worker (`src/core/backend/python/worker.py`) speaks the frame
//! protocol of PROTOCOL.md over a Unix socket. In pure Python, the glue
//! around a request (reading and parsing its frame, making the request,
//! state and tensor objects, encoding and writing the responses) costs
//! several times the model's own `execute()` for a small model. This
//! extension does that glue in Rust; the worker loads it when it can (the
//! server passes its path) and falls back to its pure-Python code when it
//! cannot (a Python older than 3.11, another architecture). Behaviour is
//! the same either way: the worker's tests run in both modes.
//!
//! What it does:
//! - `Wire.read()`: the next frame, read with the GIL released while it
//!   waits. An `execute` frame comes back as its requests, already made
//!   (`pb_utils.InferenceRequest` with zero-copy numpy views of the body,
//!   and a `pb_utils._RequestState` each, registered in the worker's
//!   `live` table by weak reference); any other frame as its header (a
//!   dict) and body (a bytearray).
//! - `Wire.answer(result, states)`: execute's return value in the usual
//!   case (a list of plain responses, one per request, none answered yet)
//!   as response frames plus `executed`, in one system call. Anything else
//!   (an error response, a response sender in use, a tensor that is not
//!   C-contiguous...) is left to the Python code: it answers False having
//!   sent and changed nothing.
//! - `Wire.send(buffers)`: writes buffers in order (frames stay whole: one
//!   lock), the GIL released.
//! - `Wire.pending()`: whether a frame is waiting, without blocking;
//!   `Wire.buffered()`: whether one was read into the buffer already.
//!
//! Hand-written with pyo3 rather than generated: the hot path is a handful
//! of object constructions and two system calls, and the point is to do
//! exactly those.

use std::os::raw::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyWeakrefReference};
use pyo3::types::{PyByteArray, PyDict, PyFrozenSet, PyList, PyString, PyTuple};
use serde::Deserialize;
use serde_json::Value;
use std::borrow::Cow;

/// A frame header as far as the reader needs it: its kind, and for an
/// `execute` frame its requests (parsed straight into these structs: no
/// map of every key).
#[derive(Deserialize)]
struct Head<'a> {
    #[serde(borrow, default)]
    kind: Cow<'a, str>,
    #[serde(borrow, default)]
    requests: Vec<Req<'a>>,
}

/// One request of an `execute` frame (PROTOCOL.md).
#[derive(Deserialize)]
struct Req<'a> {
    #[serde(default)]
    rid: u64,
    #[serde(borrow, default)]
    id: Cow<'a, str>,
    #[serde(default)]
    correlation_id: Option<Value>,
    #[serde(default)]
    flags: u64,
    #[serde(default)]
    timeout: u64,
    #[serde(default)]
    parameters: Option<Value>,
    #[serde(default)]
    trace: Option<Value>,
    #[serde(borrow, default)]
    outputs: Vec<Cow<'a, str>>,
    #[serde(borrow, default)]
    inputs: Vec<Desc<'a>>,
}

/// A tensor of a frame: its bytes are `size` bytes of the body.
#[derive(Deserialize)]
struct Desc<'a> {
    #[serde(borrow, default)]
    name: Cow<'a, str>,
    #[serde(borrow, default)]
    datatype: Cow<'a, str>,
    #[serde(default)]
    shape: Vec<i64>,
    #[serde(default)]
    size: u64,
}

/// The frame prefix: u32 header length, u64 body length (little-endian).
const PREFIX: usize = 12;
/// The largest header the server sends (it lists names and shapes).
const MAX_HEADER: usize = 64 << 20;
/// The receive buffer's usual size: small frames come in one read.
const CHUNK: usize = 1 << 16;
/// sendmsg's buffer count is bounded (IOV_MAX, 1024 on Linux).
const MAX_IOV: usize = 512;

/// Item sizes of the numeric datatypes (BYTES goes the Python way).
fn item_size(datatype: &str) -> Option<usize> {
    Some(match datatype {
        "BOOL" | "UINT8" | "INT8" => 1,
        "UINT16" | "INT16" | "FP16" | "BF16" => 2,
        "UINT32" | "INT32" | "FP32" => 4,
        "UINT64" | "INT64" | "FP64" => 8,
        _ => return None,
    })
}

/// What `pb_utils` and the worker hand over once: the classes to make and
/// the tables to fill.
struct Classes {
    tensor: Py<PyAny>,
    request: Py<PyAny>,
    state: Py<PyAny>,
    response: Py<PyAny>,
    /// `object.__new__`: an instance without running `__init__`.
    new: Py<PyAny>,
    ndarray: Py<PyAny>,
    /// datatype name -> numpy dtype (pb_utils._NUMBER_TYPES).
    dtypes: Py<PyDict>,
    /// rid -> weakref of its _RequestState (the worker's `live`).
    live: Py<PyDict>,
    allocate_lock: Py<PyAny>,
    /// `Tensor._from_wire(desc, body, offset)`, for what the short way
    /// does not take.
    from_wire: Py<PyAny>,
}

/// The receive side: a buffer of what was read and not yet used.
struct Rx {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

#[pyclass(frozen, module = "_trtis_native")]
struct Wire {
    /// The socket read from.
    fd: i32,
    /// The socket written to (the same one, or the other direction's).
    wfd: i32,
    /// The socket batches' answers are written to (`wfd`, or one of its own).
    afd: i32,
    /// Bytes written to `wfd` (an `executed` frame's `after`).
    sent: AtomicU64,
    rx: Mutex<Rx>,
    /// Frames written whole: one writer at a time (taken with the GIL
    /// released, so a writer blocked on a full socket holds nobody up).
    tx: Mutex<()>,
    classes: Classes,
}

/// A pointer that crosses into a closure run without the GIL.
struct Raw(*mut u8, usize);
// SAFETY: the memory it points to is kept alive and unshared by the caller
// for the closure's run (our own buffer, or a bytearray nobody else holds).
unsafe impl Send for Raw {}

/// recv into `dst`, retrying on EINTR: bytes read, 0 at end of file.
fn recv_into(fd: i32, dst: Raw) -> std::io::Result<usize> {
    loop {
        // SAFETY: `dst` is valid for writes of its length (see Raw).
        let n = unsafe { libc::recv(fd, dst.0 as *mut c_void, dst.1, 0) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

impl Rx {
    /// Have at least `n` bytes buffered; false at end of file (or when the
    /// socket failed: the server's end is gone either way).
    fn fill(&mut self, py: Python<'_>, fd: i32, n: usize) -> bool {
        if self.end - self.start >= n {
            return true;
        }
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        if self.start + n > self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            if n > self.buf.len() {
                self.buf.resize(n, 0);
            }
        }
        while self.end - self.start < n {
            let free = Raw(self.buf[self.end..].as_mut_ptr(), self.buf.len() - self.end);
            match py.detach(move || recv_into(fd, free)) {
                Ok(0) | Err(_) => return false,
                Ok(count) => self.end += count,
            }
        }
        true
    }
}

/// A JSON value as a Python object.
fn to_py<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                i.into_pyobject(py)?.into_any()
            } else if let Some(u) = n.as_u64() {
                u.into_pyobject(py)?.into_any()
            } else {
                PyFloat::new(py, n.as_f64().unwrap_or(f64::NAN)).into_any()
            }
        }
        Value::String(s) => PyString::new(py, s).into_any(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(to_py(py, item)?)?;
            }
            list.into_any()
        }
        Value::Object(map) => {
            let dict = PyDict::new(py);
            for (key, item) in map {
                dict.set_item(key, to_py(py, item)?)?;
            }
            dict.into_any()
        }
    })
}

impl Wire {
    /// The requests of an `execute` frame, with their states (registered
    /// in `live`): what the Python code makes in `_route` and
    /// `InferenceRequest._received`, made here.
    /// Fills `requests` and `states`; on an error (a tensor that does not
    /// fit its frame...) they hold what was made before it.
    fn received<'py>(
        &self,
        py: Python<'py>,
        items: &[Req<'_>],
        body: &Bound<'py, PyByteArray>,
        decoupled: bool,
        requests: &Bound<'py, PyList>,
        states: &Bound<'py, PyList>,
    ) -> PyResult<()> {
        let c = &self.classes;
        let body_len = body.len();
        let mut offset = 0usize;
        let new = c.new.bind(py);
        let dtypes = c.dtypes.bind(py);
        let none = py.None().into_bound(py);
        for (index, r) in items.iter().enumerate() {
            let outputs = PyList::empty(py);
            for name in &r.outputs {
                outputs.append(PyString::new(py, name))?;
            }
            let state = new.call1((c.state.bind(py),))?;
            state.setattr(pyo3::intern!(py, "rid"), r.rid)?;
            state.setattr(pyo3::intern!(py, "index"), index)?;
            state.setattr(
                pyo3::intern!(py, "requested"),
                PyFrozenSet::new(py, outputs.iter())?,
            )?;
            state.setattr(pyo3::intern!(py, "decoupled"), decoupled)?;
            state.setattr(pyo3::intern!(py, "cancelled"), false)?;
            state.setattr(pyo3::intern!(py, "sender_used"), false)?;
            state.setattr(pyo3::intern!(py, "closed"), false)?;
            state.setattr(pyo3::intern!(py, "_sent"), 0)?;
            state.setattr(pyo3::intern!(py, "_held"), &none)?;
            state.setattr(
                pyo3::intern!(py, "_lock"),
                c.allocate_lock.bind(py).call0()?,
            )?;
            c.live
                .bind(py)
                .set_item(r.rid, PyWeakrefReference::new(&state)?)?;
            // Listed at once: if making its request fails, the worker closes
            // it with the batch.
            states.append(&state)?;

            let inputs = PyList::empty(py);
            for d in &r.inputs {
                let size = usize::try_from(d.size).unwrap_or(usize::MAX);
                let count = item_size(&d.datatype).and_then(|itemsize| {
                    d.shape
                        .iter()
                        .try_fold(1usize, |acc, &dim| {
                            usize::try_from(dim)
                                .ok()
                                .and_then(|dim| acc.checked_mul(dim))
                        })
                        .and_then(|n| n.checked_mul(itemsize))
                });
                // The short way: a number tensor whose bytes lie in the body
                // and fill its shape exactly; anything else (BYTES, an empty
                // or inconsistent tensor) as Tensor._from_wire makes it.
                let short = size > 0
                    && count == Some(size)
                    && offset.checked_add(size).is_some_and(|end| end <= body_len);
                let tensor = if short {
                    let dtype = dtypes.get_item(d.datatype.as_ref())?.ok_or_else(|| {
                        PyValueError::new_err(format!("no numpy dtype for '{}'", d.datatype))
                    })?;
                    let dims = PyTuple::new(py, &d.shape)?;
                    let array = c.ndarray.bind(py).call1((&dims, dtype, body, offset))?;
                    let tensor = new.call1((c.tensor.bind(py),))?;
                    tensor.setattr(pyo3::intern!(py, "_array"), array)?;
                    tensor.setattr(pyo3::intern!(py, "_payload"), &none)?;
                    tensor.setattr(pyo3::intern!(py, "_name"), PyString::new(py, &d.name))?;
                    tensor.setattr(
                        pyo3::intern!(py, "_datatype"),
                        PyString::new(py, &d.datatype),
                    )?;
                    tensor.setattr(pyo3::intern!(py, "_shape"), PyList::new(py, &d.shape)?)?;
                    tensor
                } else {
                    let desc = PyDict::new(py);
                    desc.set_item("name", d.name.as_ref())?;
                    desc.set_item("datatype", d.datatype.as_ref())?;
                    desc.set_item("shape", PyList::new(py, &d.shape)?)?;
                    desc.set_item("size", d.size)?;
                    c.from_wire.bind(py).call1((desc, body, offset))?
                };
                inputs.append(tensor)?;
                offset = offset.saturating_add(size);
            }

            let request = new.call1((c.request.bind(py),))?;
            request.setattr(pyo3::intern!(py, "_request_id"), PyString::new(py, &r.id))?;
            request.setattr(
                "_correlation_id",
                match &r.correlation_id {
                    Some(v) => to_py(py, v)?,
                    None => 0i64.into_pyobject(py)?.into_any(),
                },
            )?;
            request.setattr(pyo3::intern!(py, "_inputs"), inputs)?;
            request.setattr(pyo3::intern!(py, "_outputs"), outputs)?;
            request.setattr(pyo3::intern!(py, "_model_name"), "")?;
            request.setattr(pyo3::intern!(py, "_model_version"), -1i64)?;
            request.setattr(pyo3::intern!(py, "_flags"), r.flags)?;
            request.setattr(pyo3::intern!(py, "_timeout"), r.timeout)?;
            request.setattr(
                "_parameters",
                match &r.parameters {
                    Some(Value::String(s)) => PyString::new(py, s).into_any(),
                    Some(other @ Value::Object(_)) => to_py(py, other)?,
                    _ => PyString::new(py, "{}").into_any(),
                },
            )?;
            request.setattr(
                "_trace",
                match &r.trace {
                    Some(v @ Value::Object(_)) => to_py(py, v)?,
                    _ => none.clone(),
                },
            )?;
            request.setattr(pyo3::intern!(py, "_state"), &state)?;
            request.setattr(pyo3::intern!(py, "_sender"), &none)?;
            requests.append(request)?;
        }
        Ok(())
    }

    /// Write `parts` in order, whole, the GIL released. The caller keeps the
    /// memory alive for the call.
    fn write_all(&self, py: Python<'_>, answer: bool, parts: Vec<(usize, usize)>) -> PyResult<()> {
        let fd = if answer { self.afd } else { self.wfd };
        let sent_total = &self.sent;
        struct Parts(Vec<(usize, usize)>);
        // SAFETY: addresses of memory the caller keeps alive (see above).
        unsafe impl Send for Parts {}
        let parts = Parts(parts);
        let tx = &self.tx;
        py.detach(move || {
            let _guard = tx.lock().unwrap_or_else(|p| p.into_inner());
            let mut parts = parts.0;
            let mut first = 0usize;
            while first < parts.len() {
                let last = (first + MAX_IOV).min(parts.len());
                let iov: Vec<libc::iovec> = parts[first..last]
                    .iter()
                    .map(|&(base, len)| libc::iovec {
                        iov_base: base as *mut c_void,
                        iov_len: len,
                    })
                    .collect();
                // SAFETY: a zeroed msghdr with only the iovec set is valid.
                let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
                msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
                msg.msg_iovlen = iov.len() as _;
                // SAFETY: every iovec points to live memory (see above).
                let sent = unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL) };
                if sent < 0 {
                    let e = std::io::Error::last_os_error();
                    if e.kind() == std::io::ErrorKind::Interrupted {
                        continue;
                    }
                    return Err(e);
                }
                let mut sent = sent as usize;
                if !answer {
                    sent_total.fetch_add(sent as u64, Ordering::Relaxed);
                }
                while first < parts.len() && sent >= parts[first].1 {
                    sent -= parts[first].1;
                    first += 1;
                }
                if sent > 0 {
                    parts[first].0 += sent;
                    parts[first].1 -= sent;
                }
            }
            Ok(())
        })
        .map_err(PyErr::from)
    }
}

/// A Python object's bytes, held (PyObject_GetBuffer) until dropped. Boxed:
/// an exporter may point the view's fields into the view itself (`shape` at
/// `len`), so it must not move.
struct Held(Box<ffi::Py_buffer>);

impl Held {
    /// The C-contiguous bytes of `obj`, or None (not a buffer, or not
    /// contiguous: the Python code copies those).
    fn get(obj: &Bound<'_, PyAny>) -> Option<Held> {
        let mut view: Box<std::mem::MaybeUninit<ffi::Py_buffer>> =
            Box::new(std::mem::MaybeUninit::zeroed());
        // SAFETY: `view` is written by the call, in place; released in Drop.
        let rc = unsafe {
            ffi::PyObject_GetBuffer(obj.as_ptr(), view.as_mut_ptr(), ffi::PyBUF_C_CONTIGUOUS)
        };
        if rc != 0 {
            // SAFETY: the failed call set an exception; it is dropped here.
            unsafe { ffi::PyErr_Clear() };
            return None;
        }
        // SAFETY: initialised by the successful call; the box keeps its place.
        Some(Held(unsafe {
            Box::from_raw(Box::into_raw(view).cast::<ffi::Py_buffer>())
        }))
    }

    fn addr(&self) -> (usize, usize) {
        (self.0.buf as usize, self.0.len as usize)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // SAFETY: a view from a successful PyObject_GetBuffer, released
        // once, with the GIL held (Held lives only where it is).
        unsafe { ffi::PyBuffer_Release(&mut *self.0) }
    }
}

/// A name as JSON text.
fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_string())
}

#[pymethods]
impl Wire {
    #[new]
    #[pyo3(signature = (fd, wfd, afd, tensor, request, state, response, ndarray, dtypes, live, allocate_lock))]
    #[allow(clippy::too_many_arguments)]
    fn py_new(
        py: Python<'_>,
        fd: i32,
        wfd: i32,
        afd: i32,
        tensor: Py<PyAny>,
        request: Py<PyAny>,
        state: Py<PyAny>,
        response: Py<PyAny>,
        ndarray: Py<PyAny>,
        dtypes: Py<PyDict>,
        live: Py<PyDict>,
        allocate_lock: Py<PyAny>,
    ) -> PyResult<Self> {
        let new = py
            .import("builtins")?
            .getattr(pyo3::intern!(py, "object"))?
            .getattr(pyo3::intern!(py, "__new__"))?
            .unbind();
        let from_wire = tensor
            .bind(py)
            .getattr(pyo3::intern!(py, "_from_wire"))?
            .unbind();
        Ok(Wire {
            fd,
            wfd,
            afd,
            sent: AtomicU64::new(0),
            rx: Mutex::new(Rx {
                buf: vec![0; CHUNK],
                start: 0,
                end: 0,
            }),
            tx: Mutex::new(()),
            classes: Classes {
                tensor,
                request,
                state,
                response,
                new,
                ndarray,
                dtypes,
                live,
                allocate_lock,
                from_wire,
            },
        })
    }

    /// The next frame as `(kind, header, body, states)`: for `execute`,
    /// header is the list of requests and states theirs; for any other kind
    /// header is the frame's header (a dict), body its body (a bytearray)
    /// and states None. None at end of file. Only one thread may read at a
    /// time (the worker's reader role); a second gets RuntimeError.
    fn read<'py>(&self, py: Python<'py>, decoupled: bool) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let mut rx = self
            .rx
            .try_lock()
            .map_err(|_| PyRuntimeError::new_err("two threads read the worker's socket"))?;
        let fd = self.fd;
        if !rx.fill(py, fd, PREFIX) {
            return Ok(None);
        }
        let at = rx.start;
        let header_len = u32::from_le_bytes(rx.buf[at..at + 4].try_into().expect("4")) as usize;
        let body_len = u64::from_le_bytes(rx.buf[at + 4..at + 12].try_into().expect("8"));
        if header_len > MAX_HEADER {
            return Err(PyValueError::new_err(format!(
                "a frame header of {header_len} bytes"
            )));
        }
        // A bytearray's length is a Py_ssize_t.
        let body_len = usize::try_from(body_len)
            .ok()
            .filter(|&n| n <= isize::MAX as usize)
            .ok_or_else(|| PyValueError::new_err(format!("a frame body of {body_len} bytes")))?;
        rx.start += PREFIX;
        if !rx.fill(py, fd, header_len) {
            return Ok(None);
        }
        // The header's text, kept while the body is read.
        let text = rx.buf[rx.start..rx.start + header_len].to_vec();
        rx.start += header_len;
        // The body: what is buffered, then the rest straight into place.
        let have = body_len.min(rx.end - rx.start);
        let body = PyByteArray::new(py, &rx.buf[rx.start..rx.start + have]);
        rx.start += have;
        if have < body_len {
            body.resize(body_len)?;
            let mut got = have;
            while got < body_len {
                // SAFETY: nobody else holds `body` yet, so its memory stays
                // put and unshared while the GIL is released.
                let dst = unsafe { Raw(body.data().add(got), body_len - got) };
                match py.detach(move || recv_into(fd, dst)) {
                    Ok(0) | Err(_) => return Ok(None),
                    Ok(count) => got += count,
                }
            }
        }
        drop(rx);
        let bad = |e: serde_json::Error| PyValueError::new_err(format!("a bad frame header: {e}"));
        let head: Head<'_> = serde_json::from_slice(&text).map_err(bad)?;
        if head.kind == "execute" {
            // A batch whose requests cannot be made fails as a batch (the
            // worker raises the error in `_execute`), as in pure Python: the
            // header is then the exception instead of the request list.
            let requests = PyList::empty(py);
            let states = PyList::empty(py);
            let made = self.received(py, &head.requests, &body, decoupled, &requests, &states);
            let header = match made {
                Ok(()) => requests.into_any(),
                Err(e) => e.into_value(py).into_bound(py).into_any(),
            };
            return Ok(Some(PyTuple::new(
                py,
                [
                    PyString::new(py, "execute").into_any(),
                    header,
                    body.into_any(),
                    states.into_any(),
                ],
            )?));
        }
        let kind = PyString::new(py, &head.kind);
        let header: Value = serde_json::from_slice(&text).map_err(bad)?;
        let header = to_py(py, &header)?;
        Ok(Some(PyTuple::new(
            py,
            [
                kind.into_any(),
                header,
                body.into_any(),
                py.None().into_bound(py),
            ],
        )?))
    }

    /// Whether bytes read from the socket wait in the buffer (the start of
    /// a frame that came behind the last one read). No system call.
    fn buffered(&self) -> bool {
        self.rx.try_lock().is_ok_and(|rx| rx.end > rx.start)
    }

    /// Whether a frame (or the end of the stream) is waiting: something
    /// buffered, or the socket readable. Never blocks.
    fn pending(&self) -> PyResult<bool> {
        let Ok(rx) = self.rx.try_lock() else {
            return Ok(false); // somebody reads: they route what comes
        };
        if rx.end > rx.start {
            return Ok(true);
        }
        let mut byte = 0u8;
        // SAFETY: one byte into a local.
        let n = unsafe {
            libc::recv(
                self.fd,
                &mut byte as *mut u8 as *mut c_void,
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        if n >= 0 {
            return Ok(true); // data, or end of file: the read that follows sees it
        }
        let e = std::io::Error::last_os_error();
        Ok(!matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
        ))
    }

    /// Write `buffers` (bytes-like objects) in order, as one piece: no other
    /// frame comes between them; to the answer socket with `answer`.
    #[pyo3(signature = (buffers, answer=false))]
    fn send(&self, py: Python<'_>, buffers: &Bound<'_, PyList>, answer: bool) -> PyResult<()> {
        let mut held = Vec::with_capacity(buffers.len());
        for buffer in buffers.iter() {
            let h = Held::get(&buffer).ok_or_else(|| {
                PyValueError::new_err("a frame part that is not a contiguous buffer")
            })?;
            held.push(h);
        }
        let parts = held.iter().map(Held::addr).filter(|p| p.1 > 0).collect();
        self.write_all(py, answer, parts)
    }

    /// The bytes written to the write socket so far.
    fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// Default mode, execute returned `result` for the requests of
    /// `states`: in the usual case (a list of InferenceResponse without
    /// error, one per request, none answered or given a response sender,
    /// every tensor a pb_utils.Tensor of contiguous data) send each
    /// response as its request's final one, then `executed`, in one write
    /// to the answer socket, and answer True. Otherwise answer False having sent and changed
    /// nothing: the Python code handles it.
    fn answer(
        &self,
        py: Python<'_>,
        result: &Bound<'_, PyAny>,
        states: &Bound<'_, PyList>,
    ) -> PyResult<bool> {
        let c = &self.classes;
        let Ok(result) = result.cast::<PyList>() else {
            return Ok(false);
        };
        if result.len() != states.len() {
            return Ok(false);
        }
        let response_cls = c.response.bind(py);
        let tensor_cls = c.tensor.bind(py);
        let mut headers: Vec<Vec<u8>> = Vec::with_capacity(states.len());
        let mut held: Vec<Held> = Vec::new();
        // (header index, first held, held count) per frame.
        let mut frames: Vec<(usize, usize, usize)> = Vec::with_capacity(states.len());
        // The plan: every frame's header and the buffers it sends. Anything
        // unusual, an error included (a model that replaced an attribute
        // with something else), leaves the batch to the Python code.
        let mut plan = || -> PyResult<bool> {
            for (state, response) in states.iter().zip(result.iter()) {
                if !response.get_type().is(response_cls)
                    || !response.getattr(pyo3::intern!(py, "_error"))?.is_none()
                    || state
                        .getattr(pyo3::intern!(py, "sender_used"))?
                        .is_truthy()?
                    || state.getattr(pyo3::intern!(py, "closed"))?.is_truthy()?
                {
                    return Ok(false);
                }
                let requested = state.getattr(pyo3::intern!(py, "requested"))?;
                let requested = requested.cast::<PyFrozenSet>().map_err(PyErr::from)?;
                let rid: u64 = state.getattr(pyo3::intern!(py, "rid"))?.extract()?;
                let tensors = response.getattr(pyo3::intern!(py, "_output_tensors"))?;
                let Ok(tensors) = tensors.cast::<PyList>() else {
                    return Ok(false);
                };
                let first = held.len();
                let mut descs = String::new();
                let mut body = 0usize;
                for tensor in tensors.iter() {
                    if !tensor.get_type().is(tensor_cls) {
                        return Ok(false);
                    }
                    let name = tensor.getattr(pyo3::intern!(py, "_name"))?;
                    if !requested.contains(&name)? {
                        continue;
                    }
                    let payload = tensor.getattr(pyo3::intern!(py, "_payload"))?;
                    let source = if payload.is_none() {
                        tensor.getattr(pyo3::intern!(py, "_array"))?
                    } else {
                        payload
                    };
                    let Some(h) = Held::get(&source) else {
                        return Ok(false);
                    };
                    let Ok(name) = name.cast::<PyString>() else {
                        return Ok(false);
                    };
                    let datatype = tensor.getattr(pyo3::intern!(py, "_datatype"))?;
                    let Ok(datatype) = datatype.cast::<PyString>() else {
                        return Ok(false);
                    };
                    let mut dims = String::new();
                    for dim in tensor.getattr(pyo3::intern!(py, "_shape"))?.try_iter()? {
                        let Ok(dim) = dim?.extract::<i64>() else {
                            return Ok(false);
                        };
                        if !dims.is_empty() {
                            dims.push(',');
                        }
                        dims.push_str(&dim.to_string());
                    }
                    let size = h.addr().1;
                    body += size;
                    if !descs.is_empty() {
                        descs.push(',');
                    }
                    descs.push_str(&format!(
                        "{{\"name\":{},\"datatype\":{},\"shape\":[{dims}],\"size\":{size}}}",
                        json_str(&name.to_cow()?),
                        json_str(&datatype.to_cow()?),
                    ));
                    held.push(h);
                }
                let text = format!(
                    "{{\"kind\":\"response\",\"rid\":{rid},\"final\":true,\"error\":null,\"tensors\":[{descs}]}}"
                );
                let mut head = Vec::with_capacity(PREFIX + text.len());
                head.extend_from_slice(&(text.len() as u32).to_le_bytes());
                head.extend_from_slice(&(body as u64).to_le_bytes());
                head.extend_from_slice(text.as_bytes());
                frames.push((headers.len(), first, held.len() - first));
                headers.push(head);
            }
            Ok(true)
        };
        if !matches!(plan(), Ok(true)) {
            return Ok(false);
        }
        // Commit: each request is answered here unless another thread
        // finished it meanwhile (under its lock, as final_frame does).
        let mut parts: Vec<(usize, usize)> = Vec::with_capacity(headers.len() + held.len() + 1);
        for (state, &(head, first, count)) in states.iter().zip(&frames) {
            let lock = state.getattr(pyo3::intern!(py, "_lock"))?;
            lock.call_method0(pyo3::intern!(py, "acquire"))?;
            let closed = state
                .getattr(pyo3::intern!(py, "closed"))
                .and_then(|v| v.is_truthy());
            let taken = match closed {
                Ok(false) => state
                    .setattr(pyo3::intern!(py, "closed"), true)
                    .map(|()| true),
                other => other.map(|_| false),
            };
            lock.call_method0(pyo3::intern!(py, "release"))?;
            if taken? {
                parts.push((headers[head].as_ptr() as usize, headers[head].len()));
                parts.extend(held[first..first + count].iter().map(Held::addr));
            }
        }
        let text = format!(
            "{{\"kind\":\"executed\",\"error\":null,\"after\":{}}}",
            self.sent.load(Ordering::Relaxed)
        );
        let mut executed = Vec::with_capacity(PREFIX + text.len());
        executed.extend_from_slice(&(text.len() as u32).to_le_bytes());
        executed.extend_from_slice(&0u64.to_le_bytes());
        executed.extend_from_slice(text.as_bytes());
        parts.push((executed.as_ptr() as usize, executed.len()));
        parts.retain(|p| p.1 > 0);
        self.write_all(py, true, parts)?;
        drop(held);
        drop(executed);
        Ok(true)
    }
}

#[pymodule]
fn _trtis_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Wire>()?;
    Ok(())
}
