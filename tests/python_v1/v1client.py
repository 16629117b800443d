"""A test client for the legacy TRTIS v1 API (HTTP `/api/...` and gRPC
`nvidia.inferenceserver.GRPCService`), built on NVIDIA's own generated
modules from the `tensorrtserver==1.11.0` wheel, so every message the tests
send or parse has exactly the 1.11 field names and numbers.

* `pb`: the wheel's generated modules (`pb.api`, `pb.request_status`,
  `pb.server_status`, `pb.model_config`, `pb.grpc_service`,
  `pb.grpc_service_grpc`). `import tensorrtserver.api` itself fails (its
  `__init__` loads a C++ library that needs libssl 1.1), so the package
  modules are registered empty, with the right `__path__`, and the generated
  submodules imported normally (v1-api-facts.md §7).
* `HttpV1`: speaks HTTP as the TRTIS 1.11 C++ client library does
  (v1-api-facts.md §3): one keep-alive connection; `NV-InferRequest` as the
  one-line text rendering of an InferRequestHeader; `Content-Type:
  application/octet-stream`; body = the inputs back to back in header order.
  It parses `NV-Status` / `NV-InferResponse` with the strict text-format
  parser (an unknown field name fails the test), splits the body by
  `raw.batch_byte_size` and parses the trailing InferResponseHeader (binary
  with `?format=binary`, text otherwise). It never raises on an HTTP error:
  the tests assert on what came back.
* `grpc_stub`, `profile_rpc`: the generated gRPC stub on a channel.
* `ShmRegion`: a POSIX shared-memory object (shm_open + mmap), unlinked by
  `destroy()`.
* Tensor helpers: v1 datatypes, STRING serialisation with 4-byte
  little-endian length prefixes.

Every network call has a timeout, so a server without the v1 API makes a
test fail quickly and clearly instead of hanging.
"""

from __future__ import annotations

import http.client
import importlib
import importlib.util
import itertools
import mmap
import os
import struct
import sys
import types
from dataclasses import dataclass, field

import numpy as np
from google.protobuf import json_format, text_format

HTTP_TIMEOUT_S = 30.0
GRPC_TIMEOUT_S = 30.0


# --------------------------------------------------------------------------
# The wheel's generated modules
# --------------------------------------------------------------------------


def _load_generated_modules() -> types.SimpleNamespace:
    names = (
        "api_pb2",
        "request_status_pb2",
        "model_config_pb2",
        "server_status_pb2",
        "grpc_service_pb2",
        "grpc_service_pb2_grpc",
    )
    if "tensorrtserver.api" not in sys.modules or not hasattr(
        sys.modules["tensorrtserver.api"], "api_pb2"
    ):
        spec = importlib.util.find_spec("tensorrtserver")
        if spec is None or not spec.submodule_search_locations:
            raise ImportError(
                "the tensorrtserver==1.11.0 wheel is not installed in this Python "
                f"({sys.executable}); run the v1 suite with .venv-v1/bin/python"
            )
        root = list(spec.submodule_search_locations)[0]
        pkg = sys.modules.get("tensorrtserver")
        if pkg is None:
            pkg = types.ModuleType("tensorrtserver")
            pkg.__path__ = [root]
            sys.modules["tensorrtserver"] = pkg
        api = types.ModuleType("tensorrtserver.api")
        api.__path__ = [os.path.join(root, "api")]
        sys.modules["tensorrtserver.api"] = api
        pkg.api = api
    mods = {n: importlib.import_module("tensorrtserver.api." + n) for n in names}
    return types.SimpleNamespace(
        api=mods["api_pb2"],
        request_status=mods["request_status_pb2"],
        model_config=mods["model_config_pb2"],
        server_status=mods["server_status_pb2"],
        grpc_service=mods["grpc_service_pb2"],
        grpc_service_grpc=mods["grpc_service_pb2_grpc"],
    )


pb = _load_generated_modules()

api_pb2 = pb.api
request_status_pb2 = pb.request_status
model_config_pb2 = pb.model_config
server_status_pb2 = pb.server_status
grpc_service_pb2 = pb.grpc_service
grpc_service_pb2_grpc = pb.grpc_service_grpc

RequestStatusCode = request_status_pb2.RequestStatusCode
SUCCESS = RequestStatusCode.Value("SUCCESS")
UNKNOWN = RequestStatusCode.Value("UNKNOWN")
INTERNAL = RequestStatusCode.Value("INTERNAL")
NOT_FOUND = RequestStatusCode.Value("NOT_FOUND")
INVALID_ARG = RequestStatusCode.Value("INVALID_ARG")
UNAVAILABLE = RequestStatusCode.Value("UNAVAILABLE")
UNSUPPORTED = RequestStatusCode.Value("UNSUPPORTED")

FLAG_SEQUENCE_START = api_pb2.InferRequestHeader.FLAG_SEQUENCE_START
FLAG_SEQUENCE_END = api_pb2.InferRequestHeader.FLAG_SEQUENCE_END


def code_name(code: int) -> str:
    try:
        return RequestStatusCode.Name(code)
    except ValueError:
        return str(code)


def one_line(msg) -> str:
    return text_format.MessageToString(msg, as_one_line=True)


# --------------------------------------------------------------------------
# Tensors
# --------------------------------------------------------------------------

# v1 datatype name (model_config DataType without "TYPE_") -> numpy dtype.
NP_DTYPES = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
}


def raw(arr: np.ndarray) -> bytes:
    """Row-major little-endian bytes of a fixed-size tensor."""
    arr = np.ascontiguousarray(arr)
    if arr.dtype.byteorder == ">":
        arr = arr.byteswap().view(arr.dtype.newbyteorder("<"))
    return arr.tobytes()


def serialize_strings(items) -> bytes:
    """TYPE_STRING elements: each a 4-byte little-endian length, then bytes."""
    out = bytearray()
    for item in items:
        if isinstance(item, str):
            item = item.encode("utf-8")
        out += struct.pack("<I", len(item))
        out += item
    return bytes(out)


def deserialize_strings(data: bytes) -> list[bytes]:
    """The inverse of serialize_strings; asserts the data parses exactly."""
    items, pos = [], 0
    while pos < len(data):
        assert pos + 4 <= len(data), f"truncated length prefix at byte {pos} of {len(data)}"
        (n,) = struct.unpack_from("<I", data, pos)
        pos += 4
        assert pos + n <= len(data), f"string of {n} bytes at {pos} overruns {len(data)} bytes"
        items.append(bytes(data[pos : pos + n]))
        pos += n
    return items


def request_header(
    batch_size: int = 1,
    inputs=(),
    outputs=(),
    id: int = 0,
    correlation_id: int = 0,
    flags: int = 0,
):
    """An InferRequestHeader. `inputs`: (name, dims or None[, batch_byte_size
    [, shared_memory (name, offset, byte_size)]]) tuples, or just names.
    `outputs`: names, or (name, cls count or None[, shared_memory]) tuples."""
    h = api_pb2.InferRequestHeader(batch_size=batch_size)
    if id:
        h.id = id
    if correlation_id:
        h.correlation_id = correlation_id
    if flags:
        h.flags = flags
    for spec in inputs:
        if isinstance(spec, str):
            spec = (spec,)
        i = h.input.add()
        i.name = spec[0]
        if len(spec) > 1 and spec[1] is not None:
            i.dims.extend(spec[1])
        if len(spec) > 2 and spec[2] is not None:
            i.batch_byte_size = spec[2]
        if len(spec) > 3 and spec[3] is not None:
            name, offset, size = spec[3]
            i.shared_memory.name = name
            i.shared_memory.offset = offset
            i.shared_memory.byte_size = size
    for spec in outputs:
        if isinstance(spec, str):
            spec = (spec,)
        o = h.output.add()
        o.name = spec[0]
        if len(spec) > 1 and spec[1] is not None:
            o.cls.count = spec[1]
        if len(spec) > 2 and spec[2] is not None:
            name, offset, size = spec[2]
            o.shared_memory.name = name
            o.shared_memory.offset = offset
            o.shared_memory.byte_size = size
    return h


# --------------------------------------------------------------------------
# HTTP
# --------------------------------------------------------------------------


@dataclass
class HttpResponse:
    status: int
    headers: dict  # lower-case names
    body: bytes
    nv_status: object = None  # RequestStatus, or None when absent
    nv_status_raw: str | None = None

    def describe(self) -> str:
        return (
            f"HTTP {self.status}, NV-Status {self.nv_status_raw!r}, "
            f"body {self.body[:300]!r}"
        )


@dataclass
class InferResult:
    """One /api/infer answer, split as the TRTIS client splits it."""

    response: HttpResponse
    header: object = None  # InferResponseHeader from NV-InferResponse, or None
    header_raw: str | None = None
    outputs: dict = field(default_factory=dict)  # name -> raw bytes of the whole batch
    order: list = field(default_factory=list)  # output names in response order
    trailer: object = None  # InferResponseHeader parsed from the body's tail
    trailer_raw: bytes = b""

    @property
    def status(self) -> int:
        return self.response.status

    @property
    def nv_status(self):
        return self.response.nv_status

    def describe(self) -> str:
        return f"{self.response.describe()}, NV-InferResponse {self.header_raw!r}"

    def array(self, name: str, datatype: str, shape=None) -> np.ndarray:
        assert name in self.outputs, f"no raw output {name!r} in {self.order}"
        arr = np.frombuffer(self.outputs[name], dtype=np.dtype(NP_DTYPES[datatype]).newbyteorder("<"))
        return arr.reshape(shape) if shape is not None else arr

    def strings(self, name: str) -> list[bytes]:
        assert name in self.outputs, f"no raw output {name!r} in {self.order}"
        return deserialize_strings(self.outputs[name])

    def out(self, name: str):
        """The NV-InferResponse `output` entry named `name`."""
        for o in self.header.output:
            if o.name == name:
                return o
        raise AssertionError(f"no output {name!r} in NV-InferResponse {self.header_raw!r}")


def parse_text(message_cls, text: str | bytes, what: str):
    """Strict text-format parse: an unknown field name or bad syntax fails
    the test with the offending text."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    msg = message_cls()
    try:
        text_format.Parse(text, msg)
    except text_format.ParseError as e:
        raise AssertionError(f"{what} is not a text-format {message_cls.__name__}: {e}: {text[:500]!r}") from e
    return msg


def parse_binary(message_cls, data: bytes, what: str):
    msg = message_cls()
    try:
        msg.ParseFromString(data)
    except Exception as e:  # DecodeError
        raise AssertionError(f"{what} is not a serialized {message_cls.__name__}: {e}: {data[:200]!r}") from e
    return msg


def parse_json(message_cls, data: bytes, what: str):
    msg = message_cls()
    try:
        json_format.Parse(data.decode("utf-8"), msg)
    except json_format.ParseError as e:
        raise AssertionError(f"{what} is not JSON of {message_cls.__name__}: {e}: {data[:500]!r}") from e
    return msg


class HttpV1:
    """A keep-alive HTTP/1.1 connection to the server, sending what the TRTIS
    1.11 C++ client library sends."""

    USER_AGENT = "libcurl-agent/1.0"

    def __init__(self, host: str, port: int, timeout: float = HTTP_TIMEOUT_S):
        self.host = host
        self.port = port
        self.timeout = timeout
        self._conn: http.client.HTTPConnection | None = None
        self.reconnects = 0

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _send(self, method, path, body, headers) -> HttpResponse:
        conn = self._conn
        reused = conn is not None
        if conn is None:
            conn = self._conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            self.close()
            if not reused:
                raise
            # The server closed the idle keep-alive connection: libcurl
            # reconnects and resends, so do we (once).
            self.reconnects += 1
            return self._send(method, path, body, headers)
        except (OSError, http.client.HTTPException):
            self.close()
            raise
        if resp.getheader("Connection", "").lower() == "close" or resp.will_close:
            self.close()
        hdrs = {k.lower(): v for k, v in resp.getheaders()}
        r = HttpResponse(resp.status, hdrs, data)
        raw_status = resp.getheader("NV-Status")
        if raw_status is not None:
            r.nv_status_raw = raw_status
            r.nv_status = parse_text(request_status_pb2.RequestStatus, raw_status, "NV-Status")
        return r

    def request(self, method: str, path: str, body: bytes | None = None, headers: dict | None = None) -> HttpResponse:
        hdrs = {"User-Agent": self.USER_AGENT, "Accept": "*/*"}
        hdrs.update(headers or {})
        if body is None and method in ("POST", "PUT"):
            body = b""
        return self._send(method, path, body, hdrs)

    def get(self, path: str, headers: dict | None = None) -> HttpResponse:
        return self.request("GET", path, headers=headers)

    def post(self, path: str, body: bytes = b"", headers: dict | None = None) -> HttpResponse:
        return self.request("POST", path, body, headers)

    # -- status -------------------------------------------------------------

    def status(self, model: str | None = None, fmt: str | None = None, accept: str | None = None):
        """GET /api/status[/<model>][?format=fmt]: (HttpResponse, ServerStatus
        or None). The body is parsed in the format asked for (text when none,
        json for Accept: application/json without format)."""
        path = "/api/status" + (f"/{model}" if model else "")
        if fmt:
            path += f"?format={fmt}"
        r = self.get(path, headers={"Accept": accept} if accept else None)
        if r.status != 200:
            return r, None
        kind = fmt or ("json" if accept == "application/json" else "text")
        return r, parse_body(server_status_pb2.ServerStatus, r.body, kind, "status body")

    # -- inference ----------------------------------------------------------

    def infer(
        self,
        model: str,
        header,
        body: bytes = b"",
        version=None,
        binary: bool = True,
        raw_header: str | None = None,
        omit_header: bool = False,
        extra_headers: dict | None = None,
    ) -> InferResult:
        """POST /api/infer/<model>[/<version>][?format=binary]."""
        path = f"/api/infer/{model}" + (f"/{version}" if version is not None else "")
        if binary:
            path += "?format=binary"
        headers = {"Content-Type": "application/octet-stream"}
        if not omit_header:
            headers["NV-InferRequest"] = raw_header if raw_header is not None else one_line(header)
        headers.update(extra_headers or {})
        r = self.post(path, body, headers)
        result = InferResult(response=r)
        raw_resp = r.headers.get("nv-inferresponse")
        if raw_resp is not None:
            result.header_raw = raw_resp
            result.header = parse_text(api_pb2.InferResponseHeader, raw_resp, "NV-InferResponse")
        if r.status != 200 or result.header is None:
            return result
        # Split the body: raw outputs in response order (those the request
        # put in shared memory or asked to classify take no bytes), then the
        # trailing header.
        in_body = set()
        if header is not None:
            for o in header.output:
                if not o.cls.count and not o.HasField("shared_memory"):
                    in_body.add(o.name)
        pos = 0
        for o in result.header.output:
            result.order.append(o.name)
            if o.name in in_body and o.HasField("raw"):
                n = o.raw.batch_byte_size
                assert pos + n <= len(r.body), (
                    f"output {o.name!r}: batch_byte_size {n} at byte {pos} overruns the "
                    f"{len(r.body)}-byte body"
                )
                result.outputs[o.name] = r.body[pos : pos + n]
                pos += n
        result.trailer_raw = r.body[pos:]
        if result.trailer_raw:
            if binary:
                result.trailer = parse_binary(api_pb2.InferResponseHeader, result.trailer_raw, "body trailer")
            else:
                result.trailer = parse_text(api_pb2.InferResponseHeader, result.trailer_raw, "body trailer")
        return result


def parse_body(message_cls, body: bytes, kind: str, what: str):
    if kind == "binary":
        return parse_binary(message_cls, body, what)
    if kind == "json":
        return parse_json(message_cls, body, what)
    return parse_text(message_cls, body, what)


# --------------------------------------------------------------------------
# gRPC
# --------------------------------------------------------------------------


def grpc_channel(url: str):
    import grpc

    return grpc.insecure_channel(
        url,
        options=[
            ("grpc.max_send_message_length", 2**31 - 1),
            ("grpc.max_receive_message_length", 2**31 - 1),
        ],
    )


def grpc_stub(channel):
    return grpc_service_pb2_grpc.GRPCServiceStub(channel)


class GrpcV1:
    """The generated stub with a deadline on every call. Any gRPC status but
    OK fails the test: v1 reports every failure in `request_status`."""

    def __init__(self, stub, timeout: float = GRPC_TIMEOUT_S):
        self.stub = stub
        self.timeout = timeout

    def call(self, method: str, request):
        import grpc

        try:
            return getattr(self.stub, method)(request, timeout=self.timeout)
        except grpc.RpcError as e:
            raise AssertionError(
                f"gRPC {method} ended with status {e.code().name}: {e.details()!r} "
                "(every v1 RPC must complete with OK, failures in request_status)"
            ) from None

    def health(self, mode: str):
        return self.call("Health", grpc_service_pb2.HealthRequest(mode=mode))

    def status(self, model: str = ""):
        return self.call("Status", grpc_service_pb2.StatusRequest(model_name=model))

    def infer(self, model: str, header, raw_inputs=(), version: int = -1):
        req = grpc_service_pb2.InferRequest(model_name=model, model_version=version)
        req.meta_data.CopyFrom(header)
        req.raw_input.extend(raw_inputs)
        return self.call("Infer", req)

    def stream(self, requests) -> list:
        """All requests on one StreamInfer call (half-closed after the last);
        the answers, once the server has ended the call."""
        import grpc

        try:
            return list(self.stub.StreamInfer(iter(list(requests)), timeout=self.timeout))
        except grpc.RpcError as e:
            raise AssertionError(
                f"gRPC StreamInfer ended with status {e.code().name}: {e.details()!r} "
                "(it must end OK after the client half-closes)"
            ) from None

    def model_control(self, model: str, load: bool):
        t = grpc_service_pb2.ModelControlRequest
        return self.call("ModelControl", t(model_name=model, type=t.LOAD if load else t.UNLOAD))

    def shm_register(self, name: str, key: str, offset: int, byte_size: int):
        req = grpc_service_pb2.SharedMemoryControlRequest()
        req.register.name = name
        req.register.system_shared_memory.shared_memory_key = key
        req.register.system_shared_memory.offset = offset
        req.register.byte_size = byte_size
        return self.call("SharedMemoryControl", req)

    def shm_unregister(self, name: str):
        req = grpc_service_pb2.SharedMemoryControlRequest()
        req.unregister.name = name
        return self.call("SharedMemoryControl", req)

    def shm_unregister_all(self):
        req = grpc_service_pb2.SharedMemoryControlRequest()
        req.unregister_all.SetInParent()
        return self.call("SharedMemoryControl", req)

    def shm_status(self):
        req = grpc_service_pb2.SharedMemoryControlRequest()
        req.status.SetInParent()
        return self.call("SharedMemoryControl", req)

    def repository_index(self):
        return self.call("Repository", grpc_service_pb2.RepositoryRequest(index=True))


def infer_request(model: str, header, raw_inputs=(), version: int = -1):
    req = grpc_service_pb2.InferRequest(model_name=model, model_version=version)
    req.meta_data.CopyFrom(header)
    req.raw_input.extend(raw_inputs)
    return req


def profile_rpc(channel):
    """`Profile` of the 0.12 service (not in the 1.11 stub): ProfileRequest
    {cmd = 1} serialised by hand, the response read as a ModelControlResponse
    (same layout: request_status = 1)."""
    return channel.unary_unary(
        "/nvidia.inferenceserver.GRPCService/Profile",
        request_serializer=lambda b: b,
        response_deserializer=grpc_service_pb2.ModelControlResponse.FromString,
    )


def profile_request(cmd: str) -> bytes:
    data = cmd.encode("utf-8")
    assert len(data) < 128
    return b"\n" + bytes([len(data)]) + data


# --------------------------------------------------------------------------
# POSIX shared memory
# --------------------------------------------------------------------------

_shm_counter = itertools.count()


class ShmRegion:
    """A POSIX shared-memory object of `size` bytes, mapped here. The key
    (`/trtis_v1_<pid>_<n>_<name>`) is unique to this process."""

    def __init__(self, name: str, size: int):
        import _posixshmem

        self.key = f"/trtis_v1_{os.getpid()}_{next(_shm_counter)}_{name}"
        self.size = size
        fd = _posixshmem.shm_open(self.key, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode=0o600)
        try:
            os.ftruncate(fd, size)
            self.map = mmap.mmap(fd, size)
        finally:
            os.close(fd)

    def write(self, data: bytes, offset: int = 0) -> None:
        self.map[offset : offset + len(data)] = data

    def read(self, size: int, offset: int = 0) -> bytes:
        return bytes(self.map[offset : offset + size])

    def destroy(self) -> None:
        import _posixshmem

        try:
            self.map.close()
        finally:
            try:
                _posixshmem.shm_unlink(self.key)
            except FileNotFoundError:
                pass


class ShmRegions:
    """Regions for one test; `destroy_all()` unlinks them all."""

    def __init__(self):
        self.regions: list[ShmRegion] = []

    def create(self, name: str, size: int) -> ShmRegion:
        r = ShmRegion(name, size)
        self.regions.append(r)
        return r

    def destroy_all(self) -> None:
        while self.regions:
            self.regions.pop().destroy()


# --------------------------------------------------------------------------
# Assertions
# --------------------------------------------------------------------------


def _p(what: str) -> str:
    return f"{what}: " if what else ""


def check_request_status(rs, what: str = "") -> None:
    """server_id and request_id as the server fills them in every answer."""
    assert rs.server_id, f"{_p(what)}RequestStatus without server_id: {one_line(rs)!r}"
    assert rs.request_id > 0, f"{_p(what)}RequestStatus without request_id: {one_line(rs)!r}"


def _resp(r) -> HttpResponse:
    return r.response if isinstance(r, InferResult) else r


def assert_http_ok(r, what: str = "") -> None:
    """HTTP 200 and NV-Status code SUCCESS."""
    resp = _resp(r)
    assert resp.status == 200, f"{_p(what)}expected HTTP 200, got {r.describe()}"
    assert resp.nv_status is not None, f"{_p(what)}no NV-Status header: {r.describe()}"
    assert resp.nv_status.code == SUCCESS, f"{_p(what)}NV-Status not SUCCESS: {r.describe()}"


def assert_http_error(r, code: int, *fragments: str, what: str = "") -> str:
    """HTTP 400 and NV-Status with `code` (and each fragment in its msg)."""
    resp = _resp(r)
    assert resp.status == 400, f"{_p(what)}expected HTTP 400, got {r.describe()}"
    assert resp.nv_status is not None, f"{_p(what)}no NV-Status header: {r.describe()}"
    assert resp.nv_status.code == code, (
        f"{_p(what)}expected NV-Status {code_name(code)}, got {r.describe()}"
    )
    msg = resp.nv_status.msg
    assert msg, f"{_p(what)}error without msg: {r.describe()}"
    for fragment in fragments:
        assert fragment in msg, f"{_p(what)}expected {fragment!r} in {msg!r}"
    return msg


def assert_infer_error(result: InferResult, code: int, *fragments: str, id: int) -> str:
    """A failed inference as 1.11 answers it: HTTP 400, NV-Status with the
    error, NV-InferResponse holding only the request's `id`, empty body."""
    msg = assert_http_error(result, code, *fragments)
    assert result.header is not None, f"no NV-InferResponse on a failure: {result.describe()}"
    want = api_pb2.InferResponseHeader(id=id)
    assert result.header == want, (
        f"NV-InferResponse of a failure should hold only id {id}: {result.header_raw!r}"
    )
    assert result.response.body == b"", f"failure with a body: {result.response.body[:200]!r}"
    return msg


def assert_grpc_ok(rs, what: str = "") -> None:
    assert rs.code == SUCCESS, f"{_p(what)}request_status not SUCCESS: {one_line(rs)!r}"


def assert_grpc_error(rs, code: int, *fragments: str, what: str = "") -> str:
    assert rs.code == code, (
        f"{_p(what)}expected request_status {code_name(code)}, got {one_line(rs)!r}"
    )
    assert rs.msg, f"{_p(what)}error without msg: {one_line(rs)!r}"
    for fragment in fragments:
        assert fragment in rs.msg, f"{_p(what)}expected {fragment!r} in {rs.msg!r}"
    return rs.msg

