"""trtis's `triton_python_backend_utils`: the module a Triton Python model
imports as `pb_utils`.

Written for trtis from the documented behaviour of Triton's Python backend.
It needs only numpy (1.x or 2.x) and Python >= 3.8. It runs inside the trtis
worker process (worker.py, in the same directory), which installs itself as
`_runtime` at start-up; everything that crosses the socket to the server
(responses, BLS calls, log lines) goes through that object:

    _runtime.instance_name             the model instance name, for messages
    _runtime.model_dir                 what get_model_dir() returns
    _runtime.bls_allowed               False before initialize() returned and
                                       once finalize started
    _runtime.send_frame(header, parts) write one frame (thread-safe)
    _runtime.start_bls(header, parts)  send a `bls` frame; returns an object
                                       whose get() waits for the next
                                       (header, body) reply
    _runtime.poll()                    take in frames already sent, without
                                       blocking (a `cancel`)
    _runtime.call(header)              send a frame the server answers (a
                                       `metric` request); like start_bls
    _runtime.defer(header)             send a frame soon, from another thread
                                       (safe to call from __del__)
    _runtime.request_abandoned(rid, index, sender_used)
                                       a request's state was garbage collected
                                       without its final response (must be safe
                                       to call from __del__)
    _runtime.live                      rid -> weakref of its _RequestState (a
                                       dict); a state leaves it when collected

The worker's native core (`_trtis_native`, when it loads) makes the
received requests, their tensors and states itself, setting the same
attributes `InferenceRequest._received`, `_tensors_from_wire` and
`_RequestState.__init__` set: keep them in step.
"""

import asyncio
import json
import operator
import os
import struct
import sys
import threading
import weakref

import numpy as np

_runtime = None

# ---------------------------------------------------------------------------
# Constants

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2
TRITONSERVER_MEMORY_CPU = 0
TRITONSERVER_MEMORY_GPU = 2

TRITON_STRING_TO_NUMPY = {
    "TYPE_BOOL": bool,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}

# Protocol datatype name -> (numpy dtype of its bytes in a frame body,
# Triton's TRITONSERVER_DataType code). BF16 has no numpy type: its bytes are
# kept as little-endian uint16 and as_numpy() refuses it.
_DATATYPES = {
    "BOOL": (np.dtype(np.bool_), 1),
    "UINT8": (np.dtype("<u1"), 2),
    "UINT16": (np.dtype("<u2"), 3),
    "UINT32": (np.dtype("<u4"), 4),
    "UINT64": (np.dtype("<u8"), 5),
    "INT8": (np.dtype("<i1"), 6),
    "INT16": (np.dtype("<i2"), 7),
    "INT32": (np.dtype("<i4"), 8),
    "INT64": (np.dtype("<i8"), 9),
    "FP16": (np.dtype("<f2"), 10),
    "FP32": (np.dtype("<f4"), 11),
    "FP64": (np.dtype("<f8"), 12),
    "BYTES": (np.dtype(np.object_), 13),
    "BF16": (np.dtype("<u2"), 14),
}
# The datatypes whose tensors are plain numbers (a numpy view of the bytes).
_NUMBER_TYPES = {name: dtype for name, (dtype, _) in _DATATYPES.items() if name != "BYTES"}
_CODE_TO_NUMPY = {
    code: (bool if name == "BOOL" else dtype.type)
    for name, (dtype, code) in _DATATYPES.items()
    if name != "BF16"
}
_INT_NAMES = {1: "INT8", 2: "INT16", 4: "INT32", 8: "INT64"}
_UINT_NAMES = {1: "UINT8", 2: "UINT16", 4: "UINT32", 8: "UINT64"}
_FLOAT_NAMES = {2: "FP16", 4: "FP32", 8: "FP64"}


def _datatype_of(dtype):
    """The protocol datatype name of a numpy dtype, or None if unsupported."""
    kind, size = dtype.kind, dtype.itemsize
    if kind == "b":
        return "BOOL"
    if kind == "u":
        return _UINT_NAMES.get(size)
    if kind == "i":
        return _INT_NAMES.get(size)
    if kind == "f":
        return _FLOAT_NAMES.get(size)
    if kind in ("O", "S"):
        return "BYTES"
    return None


# What a name or string argument may be (see _text).
_TEXT_TYPES = (str, bytes, bytearray)


def _text(value, what):
    """A name or string argument as a `str`. Taken as Triton's binding takes
    a string: a str (numpy.str_ included) or bytes (bytearray and
    numpy.bytes_ included, decoded as UTF-8), e.g. `tensor.as_numpy()[0]`
    of a BYTES tensor; anything else is a TypeError."""
    if type(value) is str:
        return value
    if isinstance(value, str):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8")
    raise TypeError("{} must be a str or bytes, not {}".format(what, type(value).__name__))


def _lookup_name(name):
    """A name to look up: a string of any kind (see _text) as a `str`;
    anything else as it is (it matches nothing, as in Triton)."""
    return _text(name, "name") if isinstance(name, _TEXT_TYPES) else name


def _message(value):
    """A message (log line, error text) as a `str`: bytes decoded as UTF-8
    (undecodable bytes escaped), anything else through str()."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "backslashreplace")
    return str(value)


# ---------------------------------------------------------------------------
# Errors


class TritonModelException(Exception):
    """Raised by pb_utils calls that are used wrongly; models may raise it too."""


class TritonError:
    """An error attached to one InferenceResponse."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    # Index = code; the names are the protocol's `code` strings.
    _NAMES = (
        "UNKNOWN",
        "INTERNAL",
        "NOT_FOUND",
        "INVALID_ARG",
        "UNAVAILABLE",
        "UNSUPPORTED",
        "ALREADY_EXISTS",
        "CANCELLED",
    )

    def __init__(self, message, code=INTERNAL):
        if code not in range(len(self._NAMES)):
            raise ValueError("invalid TritonError code: {!r}".format(code))
        self._message = _message(message)
        self._code = code

    def message(self):
        return self._message

    def code(self):
        return self._code

    def __repr__(self):
        return "TritonError({!r}, {})".format(self._message, self._NAMES[self._code])

    def _to_wire(self):
        return {"message": self._message, "code": self._NAMES[self._code]}

    @classmethod
    def _from_wire(cls, error):
        code = error.get("code", "INTERNAL")
        index = cls._NAMES.index(code) if code in cls._NAMES else cls.INTERNAL
        return cls(error.get("message", ""), index)


# Frames from these files are left out of tracebacks shown to users: this
# module and the worker written beside it (Triton shows only model frames).
_HIDDEN_FILES = frozenset(
    os.path.abspath(os.path.join(os.path.dirname(__file__), name))
    for name in ("triton_python_backend_utils.py", "worker.py")
)


def _format_exception(exc):
    """`<Type>: <text>\\n\\nAt:\\n  <file>(<line>): <function>\\n...`, innermost
    frame first (the shape of Triton's pybind11 error texts)."""
    text = "{}: {}".format(type(exc).__name__, exc)
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        filename = code.co_filename
        if os.path.abspath(filename) not in _HIDDEN_FILES and not filename.startswith(
            "<frozen importlib"
        ):
            frames.append("  {}({}): {}\n".format(filename, tb.tb_lineno, code.co_name))
        tb = tb.tb_next
    if frames:
        text += "\n\nAt:\n" + "".join(reversed(frames))
    return text


# ---------------------------------------------------------------------------
# BYTES serialization (per element: u32 little-endian length, then the bytes)


def serialize_byte_tensor(input_tensor):
    """Serialize an object or bytes_ array to Triton's BYTES format.

    Returns a 0-d object array holding the serialized `bytes`, as Triton does
    (`.item()` gives the bytes). Items that are not bytes are encoded as
    `str(item).encode("utf-8")`."""
    return np.array(_serialize_bytes(np.asarray(input_tensor)), dtype=np.object_)


def _serialize_bytes(array):
    if array.dtype.kind not in ("O", "S"):
        raise TritonModelException("cannot serialize bytes tensor: invalid datatype")
    parts = []
    for item in array.reshape(-1):
        if not isinstance(item, (bytes, bytearray)):
            item = str(item).encode("utf-8")
        parts.append(struct.pack("<I", len(item)))
        parts.append(item)
    return b"".join(parts)


def deserialize_bytes_tensor(encoded_tensor):
    """Parse Triton's BYTES format into a 1-D object array of `bytes`.

    Accepts any bytes-like object, or what serialize_byte_tensor returns."""
    if isinstance(encoded_tensor, np.ndarray) and encoded_tensor.dtype == np.object_:
        encoded_tensor = encoded_tensor.item()
    buffer = memoryview(encoded_tensor).cast("B")
    items = []
    offset = 0
    while offset < len(buffer):
        if offset + 4 > len(buffer):
            raise TritonModelException("truncated BYTES tensor")
        (length,) = struct.unpack_from("<I", buffer, offset)
        offset += 4
        if offset + length > len(buffer):
            raise TritonModelException("truncated BYTES tensor")
        items.append(bytes(buffer[offset : offset + length]))
        offset += length
    result = np.empty(len(items), dtype=np.object_)
    result[:] = items
    return result


# ---------------------------------------------------------------------------
# Type helpers


def triton_string_to_numpy(triton_type_string):
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def triton_to_numpy_type(data_type):
    """Numpy type of a TRITONSERVER_DataType code (1..13), or None."""
    return _CODE_TO_NUMPY.get(data_type)


def numpy_to_triton_type(data_type):
    """TRITONSERVER_DataType code (1..13) of a numpy type, or None."""
    if data_type is None:
        return None
    try:
        name = _datatype_of(np.dtype(data_type))
    except TypeError:
        return None
    return None if name is None else _DATATYPES[name][1]


# ---------------------------------------------------------------------------
# Tensor


class Tensor:
    """A named tensor: a request input, a response output, or a BLS input."""

    def __init__(self, name, array):
        name = _text(name, "Tensor name")
        if not name:
            raise TritonModelException("Tensor name cannot be an empty string.")
        if array is None:
            # Triton's binding refuses None as the array argument.
            raise TypeError("pb_utils.Tensor needs a NumPy array, got None")
        array = np.asarray(array)
        datatype = _datatype_of(array.dtype)
        if datatype is None:
            raise TritonModelException("NumPy dtype is not supported.")
        if not array.flags.c_contiguous:
            array = array.copy(order="C")
        if datatype == "BYTES":
            # Serialized now, as Triton does: a bad item fails in model code.
            payload = _serialize_bytes(array)
        else:
            if array.dtype.byteorder == ">":
                array = array.astype(array.dtype.newbyteorder("<"))
            payload = None
        self._name = name
        self._datatype = datatype
        self._array = array
        self._shape = list(array.shape)
        self._payload = payload

    @classmethod
    def _from_wire(cls, desc, body, offset):
        """The tensor a frame header's descriptor `desc` describes, its bytes at
        `offset` in `body` (a bytearray): a zero-copy view for numbers."""
        tensor = cls.__new__(cls)
        datatype = desc["datatype"]
        if datatype not in _DATATYPES:
            raise TritonModelException("unknown datatype '{}'".format(datatype))
        shape = desc["shape"]  # the server's: a list of ints
        size = desc["size"]
        if offset + size > len(body):
            raise TritonModelException(
                "tensor '{}' lies outside the frame body".format(desc["name"])
            )
        data = memoryview(body)[offset : offset + size]
        if datatype == "BYTES":
            array = deserialize_bytes_tensor(data).reshape(shape)
            tensor._payload = data
        else:
            array = np.frombuffer(data, dtype=_DATATYPES[datatype][0]).reshape(shape)
            tensor._payload = None
        tensor._name = desc["name"]
        tensor._datatype = datatype
        tensor._array = array
        tensor._shape = shape
        return tensor

    def _to_wire(self):
        """(descriptor, bytes-like payload) for a frame."""
        if self._payload is not None:
            payload = self._payload
        else:
            payload = self._array.reshape(-1).view(np.uint8)
        desc = {
            "name": self._name,
            "datatype": self._datatype,
            "shape": self._shape,
            "size": len(payload) if self._datatype == "BYTES" else payload.nbytes,
        }
        return desc, payload

    def name(self):
        return self._name

    def as_numpy(self):
        if self._datatype == "BF16":
            raise TritonModelException("BF16 tensors cannot be converted to NumPy.")
        return self._array

    def shape(self):
        return list(self._shape)

    def is_cpu(self):
        return True

    def triton_dtype(self):
        return _DATATYPES[self._datatype][1]

    def __repr__(self):
        return "Tensor({!r}, {}, {})".format(self._name, self._datatype, self._shape)


def _tensors_to_wire(tensors):
    """(list of descriptors, list of payloads) for a frame."""
    descs, parts = [], []
    for tensor in tensors:
        if not isinstance(tensor, Tensor):
            raise TypeError("expected a pb_utils.Tensor, found {}".format(type(tensor)))
        desc, payload = tensor._to_wire()
        descs.append(desc)
        parts.append(payload)
    return descs, parts


def _tensors_from_wire(descs, body, offset=0):
    """(tensors, offset after them) for the descriptors `descs` in `body`.
    Numbers take a short way (one numpy view, no intermediate objects); the
    rest, and anything amiss, go through Tensor._from_wire."""
    tensors = []
    limit = len(body)
    new = Tensor.__new__
    for desc in descs:
        datatype = desc["datatype"]
        size = desc["size"]
        entry = _NUMBER_TYPES.get(datatype)
        if entry is None or size <= 0 or offset + size > limit or size % entry.itemsize:
            tensors.append(Tensor._from_wire(desc, body, offset))
        else:
            tensor = new(Tensor)
            shape = desc["shape"]
            tensor._array = np.frombuffer(
                body, dtype=entry, count=size // entry.itemsize, offset=offset
            ).reshape(shape)
            tensor._payload = None
            tensor._name = desc["name"]
            tensor._datatype = datatype
            tensor._shape = shape
            tensors.append(tensor)
        offset += size
    return tensors, offset


# ---------------------------------------------------------------------------
# Responses


class InferenceResponse:
    """Output tensors for one request, or an error for it."""

    def __init__(self, output_tensors=None, error=None):
        output_tensors = [] if output_tensors is None else list(output_tensors)
        for tensor in output_tensors:
            if tensor is None:
                raise TritonModelException("Output tensor cannot be None.")
            if not isinstance(tensor, Tensor):
                raise TypeError(
                    "output_tensors must hold pb_utils.Tensor objects, found {}".format(
                        type(tensor)
                    )
                )
        if error is not None and not isinstance(error, TritonError):
            raise TypeError("error must be a pb_utils.TritonError or None")
        self._output_tensors = output_tensors
        self._error = error

    def output_tensors(self):
        return self._output_tensors

    def has_error(self):
        return self._error is not None

    def error(self):
        return self._error


_NAMES_JSON = {}  # tensor name -> the name as JSON text (names repeat)


def _name_json(name):
    text = _NAMES_JSON.get(name)
    if text is None:
        text = json.dumps(name)
        if len(_NAMES_JSON) < 4096:
            _NAMES_JSON[name] = text
    return text


def _response_frame(rid, response, final, requested, by_model=True):
    """(header, parts) of a `response` frame. `response` None is a bare final
    flag; only tensors named in `requested` go out. A response that cannot be
    serialized becomes an error response (the worker must not fail). The
    header of a response with tensors comes as JSON text, written here
    directly: the general encoder costs more than the rest of the frame."""
    if response is None:
        header = {"kind": "response", "rid": rid, "final": final, "error": None, "tensors": []}
        header["bare"] = True
        return header, []
    try:
        if response.has_error():
            header = {"kind": "response", "rid": rid, "final": final, "tensors": []}
            header["error"] = response.error()._to_wire()
            if by_model:
                header["answered"] = True  # the model's answer: counts as a success
            return header, []
        descs, parts = [], []
        for tensor in response.output_tensors():
            if not isinstance(tensor, Tensor):
                raise TypeError("expected a pb_utils.Tensor, found {}".format(type(tensor)))
            if tensor._name not in requested:
                continue
            payload = tensor._payload
            if payload is None:
                payload = tensor._array.reshape(-1).view(np.uint8)
                size = payload.nbytes
            else:
                size = len(payload)
            descs.append(
                '{"name":%s,"datatype":"%s","shape":[%s],"size":%d}'
                % (
                    _name_json(tensor._name),
                    tensor._datatype,
                    ",".join([str(int(d)) for d in tensor._shape]),
                    size,
                )
            )
            parts.append(payload)
        header = '{"kind":"response","rid":%d,"final":%s,"error":null,"tensors":[%s]}' % (
            rid,
            "true" if final else "false",
            ",".join(descs),
        )
        return header, parts
    except Exception as exc:  # any model object may misbehave
        message = "Failed to send a response of model '{}', message: {}".format(
            _runtime.instance_name, _format_exception(exc)
        )
        header = {"kind": "response", "rid": rid, "final": final, "tensors": []}
        header["error"] = {"message": message, "code": "INTERNAL"}
        return header, []


# Set once a model calls `set_release_flags` on a request it received: only
# then does the worker look for rescheduled requests after `execute`.
_release_flags_used = False


class _RequestState:
    """What the worker and the response sender share about one received
    request. It refers to neither the request nor the sender, so it is
    collected when both are gone; if that happens before the final response
    went out, the request is reported as abandoned."""

    # What `request.set_release_flags` set (a class default: the native
    # core makes states without __init__).
    release_flags = 1  # TRITONSERVER_REQUEST_RELEASE_ALL

    def __init__(self, rid, index, requested, decoupled):
        self.rid = rid
        self.index = index  # position in its batch, for messages
        self.requested = frozenset(requested)
        self.decoupled = decoupled
        self.cancelled = False
        self.sender_used = False
        self.closed = False
        self._sent = 0
        self._flagged = False  # a one-answer request's final flag was sent
        self._lock = threading.Lock()

    def send(self, response, flags):
        """InferenceResponseSender.send's rules (texts are Triton's)."""
        if flags not in (0, TRITONSERVER_RESPONSE_COMPLETE_FINAL):
            raise TritonModelException("Unable to send response. Unsupported flag provided.")
        if response is None and flags == 0:
            raise TritonModelException(
                "Inference Response object must be provided when the response "
                "flags is set to zero."
            )
        if response is not None and not isinstance(response, InferenceResponse):
            raise TypeError(
                "response must be a pb_utils.InferenceResponse, found {}".format(
                    type(response)
                )
            )
        final = flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL
        with self._lock:
            if not self.decoupled:
                if response is not None and self._sent > 0:
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send "
                        "more than one response."
                    )
                if response is None and self._sent == 0:
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send "
                        "complete final before sending a response."
                    )
            if not self.decoupled and response is None and self._sent == 1 and not self._flagged:
                # The final flag after the one response, which went out as
                # the request's answer when it was sent.
                self._flagged = True
                return
            if self.closed:
                raise TritonModelException(
                    "Unable to send response. Response sender has been closed."
                )
            if response is not None:
                self._sent += 1
            if not self.decoupled:
                # As Triton's: the one response is the answer the moment it
                # is sent (a second one, or an exception after it, does not
                # take it back).
                self._flagged = final
                final = True
            self.closed = final
            self._emit(response, final)

    def complete(self, response):
        """Send `response` as the final one, unless the request is finished."""
        frame = self.final_frame(response)
        if frame is not None:
            _runtime.send_frame(*frame)

    def final_frame(self, response, by_model=True):
        """The frame of `response` as the final one, for the caller to send;
        None when the request is finished. `by_model`: the model gave it
        (an error it gave counts as a success); else the worker's own."""
        with self._lock:
            if self.closed:
                return None
            self.closed = True
            return _response_frame(self.rid, response, True, self.requested, by_model)

    def is_cancelled(self):
        if not self.cancelled and _runtime is not None:
            _runtime.poll()  # a `cancel` may be waiting in the socket
        return self.cancelled

    def fail(self, message):
        """Finish the request with an INTERNAL error of the worker's (not the
        model's answer), unless it is finished."""
        frame = self.final_frame(InferenceResponse(error=TritonError(message)), by_model=False)
        if frame is not None:
            _runtime.send_frame(*frame)

    def close(self):
        """The server finished the request (its batch failed): send nothing more."""
        with self._lock:
            self.closed = True

    def _emit(self, response, final):
        header, parts = _response_frame(self.rid, response, final, self.requested)
        _runtime.send_frame(header, parts)

    def __del__(self):
        if _runtime is not None:
            _runtime.live.pop(self.rid, None)
            if not self.closed:
                _runtime.request_abandoned(self.rid, self.index, self.sender_used)


class InferenceResponseSender:
    """Sends a request's responses, from any thread, also after execute returned."""

    def __init__(self, state):
        self._state = state

    def send(self, response=None, flags=0):
        self._state.send(response, flags)

    def is_cancelled(self):
        return self._state.is_cancelled()


class ResponseIterator:
    """The responses of a decoupled BLS call, up to and including the final one."""

    def __init__(self, replies, first=None):
        self._replies = replies
        self._first = first
        self._done = False

    def __iter__(self):
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        if self._first is not None:
            (header, body), self._first = self._first, None
        else:
            header, body = self._replies.get()
        self._done = bool(header.get("final", True))
        return _response_from_reply(header, body)


def _response_from_reply(header, body):
    """The InferenceResponse a `bls_response` frame describes."""
    if header.get("error"):
        return InferenceResponse(error=TritonError._from_wire(header["error"]))
    try:
        tensors, _ = _tensors_from_wire(header.get("tensors", []), body)
    except Exception as exc:  # a malformed reply must not raise
        return InferenceResponse(error=TritonError(_format_exception(exc)))
    return InferenceResponse(output_tensors=tensors)


class _FailedCall:
    """A stand-in reply queue holding one error reply (a BLS call that could
    not be sent)."""

    def __init__(self, message):
        self._reply = ({"final": True, "error": {"message": message, "code": "INTERNAL"}}, b"")

    def get(self):
        return self._reply


# ---------------------------------------------------------------------------
# Requests


class InferenceTrace:
    """A request's trace, as `request.trace()` returns it."""

    def __init__(self, context=None):
        self._context = context

    def get_context(self):
        """The W3C context of the request's model span as JSON
        (`{"traceparent": "00-..."}`), or None when it is not traced in
        OpenTelemetry mode."""
        if not self._context:
            return None
        return json.dumps({"traceparent": self._context["traceparent"]})


class InferenceRequest:
    """A request the model received, or one it builds for a BLS call."""

    def __init__(
        self,
        request_id="",
        correlation_id=0,
        inputs=None,
        requested_output_names=None,
        model_name=None,
        model_version=-1,
        flags=0,
        timeout=0,
        preferred_memory=None,  # accepted for compatibility: trtis is CPU-only
        trace=None,
        parameters=None,
    ):
        for arg, value in (
            ("model_name", model_name),
            ("inputs", inputs),
            ("requested_output_names", requested_output_names),
        ):
            if value is None:
                raise TypeError("InferenceRequest() missing required argument '{}'".format(arg))
        model_name = _text(model_name, "model_name")
        if isinstance(correlation_id, _TEXT_TYPES):
            correlation_id = _text(correlation_id, "correlation_id")
        elif not hasattr(correlation_id, "__index__"):
            raise TypeError("correlation_id must be an int or a str")
        else:
            correlation_id = operator.index(correlation_id)
        inputs = list(inputs)
        for tensor in inputs:
            if tensor is None:
                raise TritonModelException("Input tensor cannot be None.")
            if not isinstance(tensor, Tensor):
                raise TypeError(
                    "inputs must hold pb_utils.Tensor objects, found {}".format(type(tensor))
                )
        if isinstance(requested_output_names, _TEXT_TYPES):
            raise TypeError("requested_output_names must be a list of names, not one name")
        outputs = [_text(name, "a requested output name") for name in requested_output_names]
        if "" in outputs:
            raise TritonModelException(
                "Requested output name for request with id '{}' and model name '{}' "
                "should not be empty.".format(request_id, model_name)
            )
        if parameters is None:
            parameters = {}
        if not isinstance(parameters, dict) or not all(
            isinstance(k, _TEXT_TYPES) and isinstance(v, (bool, int) + _TEXT_TYPES)
            for k, v in parameters.items()
        ):
            raise TritonModelException(
                "Expected a dict of str keys and bool, int or str values for 'parameters'."
            )
        parameters = {
            _text(k, "a parameter name"): (
                _text(v, "a parameter value") if isinstance(v, _TEXT_TYPES) else v
            )
            for k, v in parameters.items()
        }
        self._request_id = (
            _text(request_id, "request_id")
            if isinstance(request_id, _TEXT_TYPES)
            else str(request_id)
        )
        self._correlation_id = correlation_id
        self._inputs = inputs
        self._outputs = outputs
        self._model_name = model_name
        self._model_version = int(model_version)
        self._flags = int(flags)
        self._timeout = int(timeout)
        self._parameters = parameters
        if trace is not None and not isinstance(trace, InferenceTrace):
            raise TypeError("trace must be a pb_utils.InferenceTrace (request.trace()) or None")
        self._trace = None if trace is None else trace._context
        self._state = None
        self._sender = None

    @classmethod
    def _received(cls, header, inputs, state):
        """A request of an `execute` frame; `state` is its _RequestState."""
        request = cls.__new__(cls)
        request._request_id = header.get("id", "")
        request._correlation_id = header.get("correlation_id", 0)
        request._inputs = inputs
        request._outputs = list(header.get("outputs", []))
        request._model_name = ""
        request._model_version = -1
        request._flags = header.get("flags", 0)
        request._timeout = header.get("timeout", 0)
        request._parameters = header.get("parameters", "{}")
        request._trace = header.get("trace")
        request._state = state
        request._sender = None
        return request

    def inputs(self):
        return self._inputs

    def request_id(self):
        return self._request_id

    def correlation_id(self):
        return self._correlation_id

    def flags(self):
        return self._flags

    def timeout(self):
        return self._timeout

    def parameters(self):
        """The request's parameters as a JSON string ("{}" when none)."""
        if isinstance(self._parameters, str):
            return self._parameters
        return json.dumps(self._parameters, separators=(",", ":"))

    def requested_output_names(self):
        return set(self._outputs)

    def trace(self):
        """The request's trace (Triton's InferenceTrace): pass it to a BLS
        request (`InferenceRequest(..., trace=request.trace())`) to trace
        that call as a child of this request."""
        return InferenceTrace(getattr(self, "_trace", None))

    def is_cancelled(self):
        return self._state is not None and self._state.is_cancelled()

    def set_release_flags(self, flags):
        """How the request is released when `execute` returns:
        TRITONSERVER_REQUEST_RELEASE_RESCHEDULE puts it back in the
        scheduler's queue to run again (a model with `sequence_batching {
        iterative_sequence: true }`; return None for it, or for a decoupled
        model reschedule before `execute` returns)."""
        if isinstance(flags, bool) or not hasattr(flags, "__index__"):
            raise TypeError(
                "set_release_flags(): incompatible function arguments: flags must be an int"
            )
        flags = operator.index(flags)
        if not 0 <= flags < 2**32:
            raise TypeError("set_release_flags(): flags must fit in an unsigned 32-bit integer")
        self._release_flags = flags
        if self._state is not None:
            global _release_flags_used
            _release_flags_used = True
            self._state.release_flags = flags

    def get_response_sender(self):
        if self._state is None:
            raise TritonModelException(
                "A response sender is only available for requests the model received."
            )
        if self._sender is None:
            self._state.sender_used = True
            self._sender = InferenceResponseSender(self._state)
        return self._sender

    def exec(self, decoupled=False):
        """Run this request on another model and wait (BLS). Returns an
        InferenceResponse, or with decoupled=True an iterator of them;
        inference failures come back as responses with has_error()."""
        if _runtime is None or not _runtime.bls_allowed:
            raise TritonModelException("BLS is only supported during the 'execute' function.")
        try:
            descs, parts = _tensors_to_wire(self._inputs)
            header = {
                "kind": "bls",
                "model": self._model_name,
                "version": "" if self._model_version < 0 else str(self._model_version),
                "id": self._request_id,
                "correlation_id": self._correlation_id,
                "flags": self._flags,
                "timeout": self._timeout,
                "parameters": (
                    json.loads(self._parameters)
                    if isinstance(self._parameters, str)
                    else self._parameters
                ),
                "outputs": self._outputs,
                "inputs": descs,
                "decoupled": bool(decoupled),
                "trace": getattr(self, "_trace", None),
            }
            replies = _runtime.start_bls(header, parts)
        except Exception as exc:  # exec never raises for failures
            replies = _FailedCall(
                "Model {} - Error when running inference: {}".format(
                    self._model_name, _format_exception(exc)
                )
            )
        if decoupled:
            # As Triton's: the call returns once its first response came
            # (so async_exec waits for it in the executor, not in the
            # event loop the caller then iterates on).
            return ResponseIterator(replies, first=replies.get())
        return _response_from_reply(*replies.get())

    def async_exec(self, decoupled=False):
        """exec() as an awaitable, run in the running event loop's executor."""
        return asyncio.get_running_loop().run_in_executor(None, self.exec, decoupled)


# ---------------------------------------------------------------------------
# Module functions


def get_input_tensor_by_name(inference_request, name):
    name = _lookup_name(name)
    for tensor in inference_request.inputs():
        if tensor.name() == name:
            return tensor
    return None


def get_output_tensor_by_name(inference_response, name):
    name = _lookup_name(name)
    for tensor in inference_response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None


def get_input_config_by_name(model_config, name):
    name = _lookup_name(name)
    for config in model_config.get("input", []):
        if config["name"] == name:
            return config
    return None


def get_output_config_by_name(model_config, name):
    name = _lookup_name(name)
    for config in model_config.get("output", []):
        if config["name"] == name:
            return config
    return None


def using_decoupled_model_transaction_policy(model_config):
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))


def get_model_dir():
    """The model's version directory, e.g. `<repo>/add_sub/1`."""
    return _runtime.model_dir if _runtime is not None else ""


# ---------------------------------------------------------------------------
# auto_complete_config


class ModelConfig:
    """The model config handed to `auto_complete_config`, with Triton's helpers."""

    def __init__(self, model_config):
        """`model_config`: the config as a JSON string (as in Triton) or a dict."""
        if isinstance(model_config, str):
            model_config = json.loads(model_config)
        self._model_config = model_config

    def as_dict(self):
        return self._model_config

    def _name(self):
        return self._model_config.get("name", "")

    def set_max_batch_size(self, max_batch_size):
        current = self._model_config.get("max_batch_size", 0)
        if current > max_batch_size:
            raise ValueError(
                "configuration specified max_batch_size {}, but in auto-complete-config "
                "function for model '{}' specified max_batch_size {}".format(
                    current, self._name(), max_batch_size
                )
            )
        self._model_config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self):
        for scheduler in ("sequence_batching", "ensemble_scheduling"):
            if self._model_config.get(scheduler) is not None:
                raise ValueError(
                    "Configuration specified scheduling_choice as '{}', but "
                    "auto-complete-config function for model '{}' tries to set "
                    "scheduling_choice as 'dynamic_batching'".format(scheduler, self._name())
                )
        if self._model_config.get("dynamic_batching") is None:
            self._model_config["dynamic_batching"] = {}

    def add_input(self, input):
        self._add_io("input", input)

    def add_output(self, output):
        self._add_io("output", output)

    def _add_io(self, kind, entry):
        """Append `entry` to the config's `kind` list, or fill in the entry of
        the same name (a conflicting data_type or dims is an error)."""
        if not isinstance(entry, dict):
            raise ValueError(
                "{} passed to the add_{} function for model '{}' must be a dict".format(
                    kind, kind, self._name()
                )
            )
        for key in ("name", "data_type", "dims"):
            if key not in entry:
                raise ValueError(
                    "{} in auto-complete-config function for model '{}' is missing "
                    "'{}' property.".format(kind, self._name(), key)
                )
        entries = self._model_config.setdefault(kind, [])
        for existing in entries:
            if existing.get("name", "").strip() != entry["name"].strip():
                continue
            current_type = existing.get("data_type", "TYPE_INVALID")
            if current_type not in ("TYPE_INVALID", entry["data_type"]):
                raise ValueError(
                    "unable to load model '{}', configuration expects datatype {} for "
                    "{} '{}', model provides {}".format(
                        self._name(), current_type, kind, entry["name"], entry["data_type"]
                    )
                )
            current_dims = [int(d) for d in existing.get("dims", [])]
            new_dims = [int(d) for d in entry["dims"]]
            if current_dims and current_dims != new_dims:
                raise ValueError(
                    "unable to load model '{}', configuration expects dims {} for {} "
                    "'{}', model provides dims {}".format(
                        self._name(), current_dims, kind, entry["name"], new_dims
                    )
                )
            existing["data_type"] = entry["data_type"]
            existing["dims"] = entry["dims"]
            if kind == "input" and "optional" in entry:
                existing["optional"] = entry["optional"]
            return
        entries.append(entry)

    def set_model_transaction_policy(self, transaction_policy_dict):
        for key in transaction_policy_dict:
            if key != "decoupled":
                raise ValueError(
                    "model transaction property in auto-complete-config function for "
                    "model '{}' contains property other than 'decoupled'".format(self._name())
                )
        policy = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" in transaction_policy_dict:
            decoupled = transaction_policy_dict["decoupled"]
            if "decoupled" in policy and policy["decoupled"] != decoupled:
                raise ValueError(
                    "trying to change decoupled property in auto-complete-config for "
                    "model '{}', which is already set to '{}'.".format(
                        self._name(), policy["decoupled"]
                    )
                )
            policy["decoupled"] = decoupled


# ---------------------------------------------------------------------------
# Custom metrics


class MetricFamily:
    """A family of metrics the model defines; shown on the server's
    /metrics under its own name. Families with the same name (from other
    instances) are one family: kind and description must agree."""

    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2

    def __init__(self, name, description, kind):
        if kind not in (MetricFamily.COUNTER, MetricFamily.GAUGE, MetricFamily.HISTOGRAM):
            raise TritonModelException(
                "MetricFamily kind must be MetricFamily.COUNTER, GAUGE or HISTOGRAM."
            )
        if not isinstance(name, _TEXT_TYPES) or not isinstance(description, _TEXT_TYPES):
            raise TritonModelException("MetricFamily name and description must be strings.")
        name = _text(name, "MetricFamily name")
        description = _text(description, "MetricFamily description")
        self._name = name
        self._kind = kind
        self._id = _metric_call({"op": "family", "name": name, "description": description,
                                 "metric_kind": kind})

    def Metric(self, labels=None, buckets=None):
        return Metric(self, labels, buckets)

    def __del__(self):
        _metric_drop(getattr(self, "_id", None))


class Metric:
    """One metric of a family, for one set of labels; metrics with the same
    labels in the same family are one metric."""

    def __init__(self, family, labels=None, buckets=None):
        if not isinstance(family, MetricFamily):
            raise TritonModelException("Metric needs a MetricFamily.")
        labels = {} if labels is None else labels
        if not isinstance(labels, dict) or not all(
            isinstance(k, _TEXT_TYPES) and isinstance(v, _TEXT_TYPES) for k, v in labels.items()
        ):
            raise TritonModelException("Metric labels must be a dict of str to str.")
        labels = {_text(k, "a label name"): _text(v, "a label value") for k, v in labels.items()}
        if family._kind == MetricFamily.HISTOGRAM:
            if buckets is None:
                raise TritonModelException("A histogram metric needs buckets.")
            # +Inf is always the last bucket; a finite list names the rest.
            buckets = [float(b) for b in buckets if float(b) != float("inf")]
        elif buckets is not None:
            raise TritonModelException("Only histogram metrics take buckets.")
        # As Triton's: a metric does not keep its family alive; once the
        # model deletes the family, using the metric is an error.
        self._family = weakref.ref(family)
        self._kind = family._kind
        self._id = _metric_call({"op": "metric", "family": family._id, "labels": labels,
                                 "buckets": buckets})

    def _alive(self):
        if self._family() is None:
            raise TritonModelException(
                "Invalid metric operation as the corresponding 'MetricFamily' has been deleted."
            )

    def _update(self, op, value):
        self._alive()
        value = float(value)
        if value != value or value in (float("inf"), float("-inf")):
            raise TritonModelException("A metric value must be a finite number.")
        _runtime.send_frame({"kind": "metric", "op": op, "id": self._id, "value": value}, [])

    def increment(self, value):
        if self._kind == MetricFamily.HISTOGRAM:
            raise TritonModelException("increment() is not supported for a histogram metric.")
        if self._kind == MetricFamily.COUNTER and value < 0:
            raise TritonModelException("A counter cannot be incremented by a negative value.")
        self._update("increment", value)

    def set(self, value):
        if self._kind != MetricFamily.GAUGE:
            raise TritonModelException("set() is only supported for a gauge metric.")
        self._update("set", value)

    def observe(self, value):
        if self._kind != MetricFamily.HISTOGRAM:
            raise TritonModelException("observe() is only supported for a histogram metric.")
        self._update("observe", value)

    def value(self):
        self._alive()
        if self._kind == MetricFamily.HISTOGRAM:
            raise TritonModelException("value() is not supported for a histogram metric.")
        return _metric_call({"op": "value", "id": self._id})

    def __del__(self):
        _metric_drop(getattr(self, "_id", None))


def _metric_call(header):
    """A metric request answered by the server: its `value` (an id for a
    new family or metric), or TritonModelException with its error."""
    if _runtime is None:
        raise TritonModelException("Metrics are only available inside a running model.")
    header["kind"] = "metric"
    reply, _ = _runtime.call(header).get()
    if reply.get("error"):
        raise TritonModelException(reply["error"])
    return reply.get("value")


def _metric_drop(metric_id):
    if metric_id is not None and _runtime is not None:
        _runtime.defer({"kind": "metric", "op": "drop", "id": metric_id})


# ---------------------------------------------------------------------------
# Model control from a model (Triton's pb_utils.load_model, unload_model,
# is_model_ready): the server's own model control, as its mode allows.


def _model_control(header, parts=()):
    if _runtime is None:
        raise TritonModelException("Model control is only available inside a running model.")
    header["kind"] = "model_control"
    reply, _ = _runtime.start_bls(header, list(parts)).get()
    if reply.get("error"):
        raise TritonModelException(reply["error"])
    return reply.get("value")


def load_model(model_name, config="", files=None):
    """Loads (or reloads) model `model_name` of this server, with `config` (a
    model configuration in JSON) and `files` ({"file:<path>": bytes}) in
    place of its repository's files when given, as a load request's."""
    model_name = _text(model_name, "model_name")
    if not isinstance(config, _TEXT_TYPES):
        raise TypeError("config must be a str of JSON")
    config = _text(config, "config")
    if files is None:
        files = {}
    if not isinstance(files, dict):
        raise TypeError("files must be a dict of 'file:<path>' to bytes")
    descs, parts = [], []
    for name, content in files.items():
        name = _text(name, "a file name")
        if not name.startswith("file:"):
            raise TritonModelException(
                "Unrecognized file parameter '{}': a file's name starts with 'file:'".format(name)
            )
        if not isinstance(content, (bytes, bytearray, memoryview)):
            raise TypeError("the content of file '{}' must be bytes".format(name))
        content = bytes(content)
        descs.append({"name": name, "size": len(content)})
        parts.append(content)
    if files and not config:
        raise TritonModelException(
            "Failed to load model '{}': files need a 'config' to go with them.".format(model_name)
        )
    _model_control({"op": "load", "model": model_name, "config": config, "files": descs}, parts)


def unload_model(model_name, unload_dependents=False):
    """Unloads model `model_name` (with `unload_dependents`, an ensemble's
    composing models too)."""
    model_name = _text(model_name, "model_name")
    _model_control({"op": "unload", "model": model_name, "unload_dependents": bool(unload_dependents)})


def is_model_ready(model_name, model_version=""):
    """Whether model `model_name` (version `model_version`, "" for the one
    the server serves) is ready."""
    model_name = _text(model_name, "model_name")
    model_version = _text(str(model_version), "model_version") if model_version != "" else ""
    return bool(_model_control({"op": "ready", "model": model_name, "version": model_version}))


# ---------------------------------------------------------------------------
# Logger


class Logger:
    """Lines for the server log, tagged with the calling file and line."""

    INFO = 0
    WARNING = 1
    ERROR = 2
    VERBOSE = 3

    _LETTERS = {INFO: "I", WARNING: "W", ERROR: "E", VERBOSE: "V"}

    @staticmethod
    def log(message, level=INFO):
        Logger._emit(message, level)

    @staticmethod
    def log_info(message):
        Logger._emit(message, Logger.INFO)

    @staticmethod
    def log_warn(message):
        Logger._emit(message, Logger.WARNING)

    @staticmethod
    def log_error(message):
        Logger._emit(message, Logger.ERROR)

    @staticmethod
    def log_verbose(message):
        Logger._emit(message, Logger.VERBOSE)

    @staticmethod
    def _emit(message, level):
        if not isinstance(level, int) or isinstance(level, bool):
            # Triton's level is an enum: anything else is the wrong type.
            raise TypeError("log level must be one of pb_utils.Logger's levels, got {!r}".format(level))
        if level not in Logger._LETTERS:
            raise ValueError("invalid log level: {!r}".format(level))
        caller = sys._getframe(2)  # _emit <- log* <- the model's code
        header = {
            "kind": "log",
            "level": Logger._LETTERS[level],
            "file": os.path.basename(caller.f_code.co_filename),
            "line": caller.f_lineno,
            "message": _message(message),
        }
        if _runtime is None:
            # Imported outside a trtis worker (e.g. a model's own unit test).
            line = "{}:{}] {}\n".format(header["file"], header["line"], header["message"])
            sys.stderr.write(line)
        else:
            _runtime.send_frame(header, [])
