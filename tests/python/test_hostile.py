"""Hostile and malformed requests against a real `trtis serve`: a table of
cases, each sent as raw bytes where a client library would refuse to send it
(raw sockets for HTTP/1.1 and HTTP/2 framing, the generated gRPC stub or
raw-bytes unary calls for gRPC messages).

After EVERY case the test checks that
  - the server process is still alive (a death is counted as a crash, and a
    fresh server is started so the remaining cases still run),
  - a normal inference on `simple` still answers correctly over HTTP and
    over gRPC,
  - the answer to the hostile case was a clear one: an HTTP 4xx (or 5xx where
    the case allows it) with a Triton-shape `{"error": "..."}` body, a gRPC
    status with a message, or, for framing the server cannot parse, a refusal
    (a bare 4xx from the HTTP layer, or the connection closed/reset, or an
    HTTP/2 GOAWAY/RST_STREAM) within the case's time bound. Client mistakes
    are 4xx, not 500 (and INVALID_ARGUMENT/NOT_FOUND, not INTERNAL, over
    gRPC), also where Triton itself answers 500.

The server under test is started for this module only, in explicit model
control mode with `simple`, `identity_fp32` and `identity_bytes` loaded,
client shared memory on, `--http-max-input-size 1 MiB` and (when the binary
has it) `--grpc-max-input-size 2 MiB`, so oversize bodies and messages can
be sent cheaply. Every byte goes to 127.0.0.1; every loop is
bounded in count and time. A summary line
`hostile: N cases, F failures, C crashes` is printed at the end of the run.

Families: malformed JSON, wrong JSON types, NaN/huge numbers, duplicate
keys, binary framing (Inference-Header-Content-Length, binary_data_size),
shape/size overflows, duplicate and missing tensors, unknown outputs,
huge headers and parameter maps, chunked and Content-Length bodies over
the size limit (refused before they are buffered), HTTP/1.1 framing
garbage, raw HTTP/2 garbage on both ports, HTTP requests and gRPC
streams cut mid-request, repository and shared-memory control requests
that are client mistakes, malformed gRPC messages.
"""

from __future__ import annotations

import json
import random
import select
import socket
import struct
import time
from dataclasses import dataclass, field

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from trtis_harness import (
    ShmRegions,
    TrtisServer,
    build_shm_repository,
    client_shm_supported,
    missing_shm_key,
    serve_help_text,
    stop_and_check,
)

LIMIT = 1 << 20  # --http-max-input-size of the server under test
GRPC_LIMIT = 2 << 20  # --grpc-max-input-size (room for 100k parameters)
CASE_TIMEOUT_S = 15.0  # no case may take longer than this
READ_TIMEOUT_S = 8.0  # how long a case waits for an answer
SIMPLE = "/v2/models/simple/infer"
IDENTITY = "/v2/models/identity_fp32/infer"
IDENTITY_BYTES = "/v2/models/identity_bytes/infer"

A = list(range(16))
B = [1] * 16
SUM = [a + b for a, b in zip(A, B)]
DIFF = [a - b for a, b in zip(A, B)]


# ---------------------------------------------------------------------------
# The server under test (restarted if a case kills it)
# ---------------------------------------------------------------------------


class Hostile:
    """Holds the server under test, its gRPC channel and the tally."""

    def __init__(self, repo):
        self.repo = repo
        self.server: TrtisServer | None = None
        self.channel = None
        self.stub = None
        self.cases = 0
        self.failures = 0
        self.crashes = 0
        self.failed: list[str] = []
        self.shm = ShmRegions()
        self.start()

    def args(self) -> list[str]:
        args = [
            "--model-control-mode", "explicit",
            "--load-model", "simple",
            "--load-model", "identity_fp32",
            "--load-model", "identity_bytes",
            "--http-max-input-size", str(LIMIT),
        ]
        if client_shm_supported():
            args.append("--allow-client-shm=true")
        if "--grpc-max-input-size" in serve_help_text():
            args += ["--grpc-max-input-size", str(GRPC_LIMIT)]
        return args

    def start(self) -> None:
        self.server = TrtisServer(self.repo, self.args(), name="hostile server").start()
        if self.server.grpc_port is None:
            pytest.fail("the hostile server has no gRPC listener", pytrace=False)
        self.channel = grpc.insecure_channel(
            self.server.grpc_url,
            options=[
                ("grpc.max_send_message_length", 2**31 - 1),
                ("grpc.max_receive_message_length", 2**31 - 1),
                # Error messages may quote a 100 KB name in grpc-message.
                ("grpc.max_metadata_size", 4 << 20),
            ],
        )
        self.stub = service_pb2_grpc.GRPCInferenceServiceStub(self.channel)

    def restart(self) -> None:
        if self.channel is not None:
            self.channel.close()
        if self.server is not None:
            self.server.kill()
        self.start()

    def close(self) -> None:
        if self.channel is not None:
            self.channel.close()
        if self.server is not None:
            stop_and_check(self.server)
        self.shm.destroy_all()

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def grpc_port(self) -> int:
        return self.server.grpc_port


@pytest.fixture(scope="module")
def hostile(tmp_path_factory, request):
    repo = build_shm_repository(tmp_path_factory.mktemp("trtis_hostile") / "models")
    h = Hostile(repo)

    class Summary:
        def pytest_terminal_summary(self, terminalreporter):
            terminalreporter.write_line(
                f"hostile: {h.cases} cases, {h.failures} failures, {h.crashes} crashes"
            )
            for name in h.failed:
                terminalreporter.write_line(f"hostile: FAILED {name}")

    request.config.pluginmanager.register(Summary(), "trtis-hostile-summary")
    try:
        yield h
    finally:
        h.close()


# ---------------------------------------------------------------------------
# Raw HTTP/1.1
# ---------------------------------------------------------------------------


@dataclass
class Answer:
    """What came back on a raw connection."""

    status: int | None = None
    headers: dict = field(default_factory=dict)
    body: bytes = b""
    raw: bytes = b""
    closed: bool = False  # EOF seen
    reset: bool = False  # ECONNRESET / EPIPE
    timed_out: bool = False
    sent: int = 0  # bytes of the request actually sent

    def describe(self) -> str:
        if self.status is not None:
            return f"HTTP {self.status} {self.body[:300]!r}"
        if self.reset:
            return "connection reset"
        if self.closed:
            return f"connection closed ({len(self.raw)} bytes: {self.raw[:80]!r})"
        return f"no answer within {READ_TIMEOUT_S} s ({len(self.raw)} bytes: {self.raw[:80]!r})"


def connect(port: int, timeout: float = READ_TIMEOUT_S) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def parse_http(raw: bytes, ans: Answer) -> None:
    end = raw.find(b"\r\n\r\n")
    if not raw.startswith(b"HTTP/") or end < 0:
        return
    head = raw[:end].decode("latin-1").split("\r\n")
    try:
        ans.status = int(head[0].split(" ")[1])
    except (IndexError, ValueError):
        return
    for line in head[1:]:
        k, _, v = line.partition(":")
        ans.headers[k.strip().lower()] = v.strip()
    rest = raw[end + 4:]
    if "content-length" in ans.headers:
        try:
            ans.body = rest[: int(ans.headers["content-length"])]
        except ValueError:
            ans.body = rest
    elif ans.headers.get("transfer-encoding", "").lower() == "chunked":
        body, buf = b"", rest
        while True:
            line_end = buf.find(b"\r\n")
            if line_end < 0:
                break
            try:
                size = int(buf[:line_end].split(b";")[0], 16)
            except ValueError:
                break
            if size == 0:
                break
            body += buf[line_end + 2: line_end + 2 + size]
            buf = buf[line_end + 2 + size + 2:]
        ans.body = body
    else:
        ans.body = rest


def response_complete(raw: bytes) -> bool:
    ans = Answer()
    parse_http(raw, ans)
    if ans.status is None:
        return False
    if "content-length" in ans.headers:
        end = raw.find(b"\r\n\r\n") + 4
        try:
            return len(raw) - end >= int(ans.headers["content-length"])
        except ValueError:
            return False
    if ans.headers.get("transfer-encoding", "").lower() == "chunked":
        return raw.endswith(b"0\r\n\r\n")
    return False


def receive(s: socket.socket, ans, timeout: float, on_data) -> None:
    """Reads chunks until EOF, a reset, the timeout (each marked on `ans`)
    or `on_data(chunk)` returns True."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            ans.timed_out = True
            return
        s.settimeout(left)
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            ans.timed_out = True
            return
        except (ConnectionResetError, BrokenPipeError):
            ans.reset = True
            return
        if not chunk:
            ans.closed = True
            return
        if on_data(chunk):
            return


def read_answer(s: socket.socket, ans: Answer, timeout: float = READ_TIMEOUT_S) -> Answer:
    """Reads until EOF, reset, a complete first response or the timeout."""
    buf = bytearray()

    def on_data(chunk: bytes) -> bool:
        buf.extend(chunk)
        return len(buf) > (4 << 20) or response_complete(bytes(buf))

    receive(s, ans, timeout, on_data)
    ans.raw = bytes(buf)
    parse_http(ans.raw, ans)
    return ans


def exchange(port: int, parts, *, shut_write: bool = False, pause: float = 0.0,
             timeout: float = READ_TIMEOUT_S) -> Answer:
    """Sends `parts` (bytes or a list of bytes, `pause` seconds apart) on a
    fresh connection, optionally half-closes, then reads the answer."""
    if isinstance(parts, (bytes, bytearray)):
        parts = [bytes(parts)]
    ans = Answer()
    s = connect(port)
    try:
        try:
            for i, p in enumerate(parts):
                if i and pause:
                    time.sleep(pause)
                s.sendall(p)
                ans.sent += len(p)
            if shut_write:
                s.shutdown(socket.SHUT_WR)
        except (ConnectionResetError, BrokenPipeError):
            ans.reset = True
        return read_answer(s, ans, timeout)
    finally:
        s.close()


def http_request(path: str, body: bytes = b"", headers: dict | None = None,
                 method: str = "POST", content_length: bool = True) -> bytes:
    """Request bytes. A header whose value is None is left out; a list value
    repeats the header."""
    hdrs: dict = {"Host": "127.0.0.1", "Connection": "close"}
    if content_length:
        hdrs["Content-Length"] = str(len(body))
    hdrs.update(headers or {})
    lines = [f"{method} {path} HTTP/1.1"]
    for k, v in hdrs.items():
        if v is None:
            continue
        for one in v if isinstance(v, list) else [v]:
            lines.append(f"{k}: {one}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def post(path: str, body, headers: dict | None = None) -> bytes:
    if not isinstance(body, (bytes, bytearray)):
        body = json.dumps(body).encode()
    hdrs = {"Content-Type": "application/json"}
    hdrs.update(headers or {})
    return http_request(path, bytes(body), hdrs)


def tensor(name, shape, data, datatype="INT32", **params):
    t = {"name": name, "shape": shape, "datatype": datatype, "data": data}
    if params:
        t["parameters"] = params
    return t


def good_doc():
    return {"inputs": [tensor("INPUT0", [1, 16], A), tensor("INPUT1", [1, 16], B)]}


def good_body() -> bytes:
    return json.dumps(good_doc()).encode()


def binary_request(path: str, header: dict, tail: bytes, ihcl=None, extra: dict | None = None) -> bytes:
    head = json.dumps(header).encode()
    hdrs = {
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(len(head)) if ihcl is None else ihcl,
    }
    hdrs.update(extra or {})
    return http_request(path, head + tail, hdrs)


def bin_input(name, shape, size, datatype="INT32"):
    return {"name": name, "shape": shape, "datatype": datatype,
            "parameters": {"binary_data_size": size}}


def simple_binary(sizes=(64, 64), tail=None, ihcl=None, **kw) -> bytes:
    a = np.arange(16, dtype=np.int32).tobytes()
    b = np.ones(16, dtype=np.int32).tobytes()
    header = {"inputs": [bin_input("INPUT0", [1, 16], sizes[0]), bin_input("INPUT1", [1, 16], sizes[1])]}
    return binary_request(SIMPLE, header, a + b if tail is None else tail, ihcl=ihcl, **kw)


def simple_answer_ok(body: bytes) -> bool:
    """Whether `body` is a correct JSON answer of `simple` to good_doc()."""
    try:
        doc = json.loads(body)
        outs = {o["name"]: o["data"] for o in doc["outputs"]}
        return outs["OUTPUT0"] == SUM and outs["OUTPUT1"] == DIFF
    except (ValueError, KeyError, TypeError):
        return False


# ---------------------------------------------------------------------------
# Expectations
# ---------------------------------------------------------------------------


def json_error(ans: Answer) -> str | None:
    """The problem with `ans` as a Triton-shape error body, or None."""
    try:
        doc = json.loads(ans.body)
    except ValueError:
        return f"error body is not JSON: {ans.body[:200]!r}"
    if not (isinstance(doc, dict) and isinstance(doc.get("error"), str) and doc["error"]):
        return f'error body is not {{"error": "..."}}: {ans.body[:200]!r}'
    return None


def expect_4xx(ans: Answer) -> str | None:
    """A client mistake: 4xx with {"error": "..."}."""
    if ans.status is None or not 400 <= ans.status < 500:
        return f"expected a 4xx with a JSON error, got {ans.describe()}"
    return json_error(ans)


def expect_4xx_or_ok(ans: Answer) -> str | None:
    """Either refused as a client mistake or answered correctly (cases where
    Triton itself accepts the request, e.g. duplicate JSON keys)."""
    if ans.status == 200:
        return None if simple_answer_ok(ans.body) else f"200 with a wrong answer: {ans.body[:300]!r}"
    return expect_4xx(ans)


def expect_4xx_or_200(ans: Answer) -> str | None:
    """As above, for models other than `simple` (any 200 JSON body)."""
    if ans.status == 200:
        try:
            json.loads(ans.body)
            return None
        except ValueError:
            return f"200 with a body that is not JSON: {ans.body[:200]!r}"
    return expect_4xx(ans)


def expect_4xx_or_outputs_once(ans: Answer) -> str | None:
    """Refused, or answered with each requested output once."""
    if ans.status == 200:
        try:
            names = [o["name"] for o in json.loads(ans.body)["outputs"]]
        except (ValueError, KeyError, TypeError):
            return f"200 with a body that is not an inference response: {ans.body[:200]!r}"
        if len(names) != len(set(names)):
            return f"200 with an output repeated: {names}"
        return None
    return expect_4xx(ans)


def expect_refused(ans: Answer) -> str | None:
    """Framing the server cannot parse: a 4xx/5xx from the HTTP layer (any
    body), or the connection closed or reset; never silence."""
    if ans.status is not None:
        if 400 <= ans.status < 600:
            return None
        return f"expected a refusal, got {ans.describe()}"
    if ans.closed or ans.reset:
        return None
    return f"expected a refusal, got {ans.describe()}"


def expect_refused_or_ok(ans: Answer) -> str | None:
    """Framing that is legal but extreme (large headers): refused, or
    answered correctly."""
    if ans.status == 200:
        return None if simple_answer_ok(ans.body) else f"200 with a wrong answer: {ans.body[:300]!r}"
    return expect_refused(ans)


def expect_answered(ans: Answer) -> str | None:
    """Any HTTP answer or a closed connection, not silence."""
    if ans.status is not None or ans.closed or ans.reset:
        return None
    return f"expected an answer, got {ans.describe()}"


def expect_ok(ans: Answer) -> str | None:
    """A positive control: a correct answer."""
    if ans.status == 200 and simple_answer_ok(ans.body):
        return None
    return f"expected a correct 200, got {ans.describe()}"


# ---------------------------------------------------------------------------
# HTTP cases: (id, request bytes, expectation, options)
# ---------------------------------------------------------------------------


def nested(depth: int, inner: str = "1") -> str:
    return "[" * depth + inner + "]" * depth


def with_input(i: int, **changes) -> dict:
    doc = good_doc()
    doc["inputs"][i].update(changes)
    return doc


def without(i: int, key: str) -> dict:
    doc = good_doc()
    del doc["inputs"][i][key]
    return doc


def short_key(i: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    out = ""
    while True:
        out = digits[i % 62] + out
        i //= 62
        if not i:
            return out


def params_map(n: int) -> dict:
    return {short_key(i): 0 for i in range(n)}


def compact(doc) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def bytes_elem(b: bytes) -> bytes:
    return struct.pack("<I", len(b)) + b


GOOD = good_body()
RNG = random.Random(20240)
GARBAGE = bytes(RNG.getrandbits(8) for _ in range(4096))
# A TLS 1.2 ClientHello prefix (record header + handshake header + version).
TLS_HELLO = bytes.fromhex("16030100a5010000a10303") + bytes(range(32)) + b"\x00" * 80
U64 = 2**64
I64 = 2**63


def json_cases():
    c = []
    # -- malformed JSON ----------------------------------------------------
    c += [
        ("json-empty-body", post(SIMPLE, b""), expect_4xx),
        ("json-whitespace-only", post(SIMPLE, b"  \r\n\t "), expect_4xx),
        ("json-truncated-half", post(SIMPLE, GOOD[: len(GOOD) // 2]), expect_4xx),
        ("json-truncated-in-string", post(SIMPLE, b'{"inputs": [{"name": "INP'), expect_4xx),
        ("json-truncated-in-number", post(SIMPLE, GOOD[: GOOD.index(b"15") + 1]), expect_4xx),
        ("json-truncated-escape", post(SIMPLE, b'{"id": "\\u12'), expect_4xx),
        ("json-invalid-utf8", post(SIMPLE, b'{"id": "\xff\xfe", "inputs": []}'), expect_4xx),
        ("json-lone-surrogate", post(SIMPLE, b'{"id": "\\ud800", "inputs": []}'), expect_4xx),
        ("json-nul-byte", post(SIMPLE, b'{"inputs"\x00: []}'), expect_4xx),
        ("json-bom-prefix", post(SIMPLE, b"\xef\xbb\xbf" + GOOD), expect_4xx_or_ok),
        ("json-trailing-garbage", post(SIMPLE, GOOD + b"xyz"), expect_4xx),
        ("json-two-documents", post(SIMPLE, GOOD + GOOD), expect_4xx),
        ("json-top-level-array", post(SIMPLE, b"[]"), expect_4xx),
        ("json-top-level-string", post(SIMPLE, b'"inputs"'), expect_4xx),
        ("json-top-level-null", post(SIMPLE, b"null"), expect_4xx),
        ("json-single-quotes", post(SIMPLE, GOOD.replace(b'"', b"'")), expect_4xx),
        ("json-comments", post(SIMPLE, b"/* c */" + GOOD), expect_4xx),
        ("json-deep-array-10k", post(SIMPLE, ('{"inputs": ' + nested(10_000) + "}").encode()), expect_4xx),
        ("json-deep-object-10k",
         post(SIMPLE, ('{"parameters": ' + '{"a":' * 10_000 + "1" + "}" * 10_000 + ', "inputs": []}').encode()),
         expect_4xx),
        ("json-deep-data-10k",
         post(SIMPLE, ('{"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": '
                       + nested(10_000, "0") + "}, " + json.dumps(good_doc()["inputs"][1]) + "]}").encode()),
         expect_4xx),
        ("json-deep-unclosed-100k", post(SIMPLE, b"[" * 100_000), expect_4xx),
        ("json-deep-data-unclosed-500k",
         post(SIMPLE, b'{"inputs": [{"name": "INPUT0", "shape": [1,16], "datatype": "INT32", "data": '
              + b"[" * 500_000), expect_4xx),
        ("json-huge-string-900k",
         post(SIMPLE, json.dumps({"id": "x" * 900_000, **good_doc()}).encode()), expect_4xx_or_ok),
        ("json-huge-input-name-500k",
         post(SIMPLE, json.dumps(with_input(0, name="N" * 500_000)).encode()), expect_4xx),
        ("json-12k-inputs",
         post(SIMPLE, json.dumps({"inputs": [tensor(f"X{i}", [1], [1]) for i in range(12_000)]}).encode()),
         expect_4xx),
        ("json-6k-duplicate-inputs",
         post(SIMPLE, json.dumps({"inputs": [tensor("INPUT0", [1, 16], A)] * 6_000}).encode()),
         expect_4xx),
    ]
    # -- wrong types everywhere -------------------------------------------
    wrong = {
        "inputs-object": {"inputs": {}},
        "inputs-string": {"inputs": "INPUT0"},
        "inputs-null": {"inputs": None},
        "inputs-numbers": {"inputs": [1, 2]},
        "inputs-nested-arrays": {"inputs": [[good_doc()["inputs"][0]]]},
        "input-name-number": with_input(0, name=5),
        "input-name-null": with_input(0, name=None),
        "input-name-missing": without(0, "name"),
        "input-shape-string": with_input(0, shape="1,16"),
        "input-shape-object": with_input(0, shape={"0": 1}),
        "input-shape-floats": with_input(0, shape=[1.5, 16]),
        "input-shape-strings": with_input(0, shape=["1", "16"]),
        "input-shape-bools": with_input(0, shape=[True, 16]),
        "input-shape-null": with_input(0, shape=None),
        "input-shape-missing": without(0, "shape"),
        "input-shape-nested": with_input(0, shape=[[1], [16]]),
        "input-datatype-number": with_input(0, datatype=7),
        "input-datatype-unknown": with_input(0, datatype="INT33"),
        "input-datatype-lowercase": with_input(0, datatype="int32"),
        "input-datatype-empty": with_input(0, datatype=""),
        "input-datatype-missing": without(0, "datatype"),
        "input-data-object": with_input(0, data={"a": 1}),
        "input-data-string": with_input(0, data="0123"),
        "input-data-strings": with_input(0, data=[str(a) for a in A]),
        "input-data-bools": with_input(0, data=[True] * 16),
        "input-data-nulls": with_input(0, data=[None] * 16),
        "input-data-null": with_input(0, data=None),
        "input-data-missing": without(0, "data"),
        "input-data-floats-for-int32": with_input(0, data=[0.5] * 16),
        "input-data-objects": with_input(0, data=[{}] * 16),
        "input-data-mixed-nesting": with_input(0, data=[A[:8], 8, 9, 10, 11, 12, 13, 14, 15]),
        "input-parameters-array": with_input(0, parameters=[]),
        "input-parameters-string": with_input(0, parameters="binary"),
        "parameters-array": {**good_doc(), "parameters": []},
        "parameters-string": {**good_doc(), "parameters": "x"},
        "parameters-null": {**good_doc(), "parameters": None},
        "outputs-object": {**good_doc(), "outputs": {}},
        "outputs-string": {**good_doc(), "outputs": "OUTPUT0"},
        "outputs-strings": {**good_doc(), "outputs": ["OUTPUT0"]},
        "output-name-number": {**good_doc(), "outputs": [{"name": 0}]},
        "output-name-missing": {**good_doc(), "outputs": [{}]},
        "output-binary-data-string": {**good_doc(), "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": "yes"}}]},
        "output-classification-string": {**good_doc(), "outputs": [{"name": "OUTPUT0", "parameters": {"classification": "2"}}]},
        "output-classification-negative": {**good_doc(), "outputs": [{"name": "OUTPUT0", "parameters": {"classification": -3}}]},
        "output-parameters-array": {**good_doc(), "outputs": [{"name": "OUTPUT0", "parameters": [1]}]},
        "id-number": {**good_doc(), "id": 5},
        "id-object": {**good_doc(), "id": {"a": 1}},
        "binary-data-output-string": {**good_doc(), "parameters": {"binary_data_output": "true"}},
        "priority-negative": {**good_doc(), "parameters": {"priority": -1}},
        "priority-string": {**good_doc(), "parameters": {"priority": "high"}},
        "priority-float": {**good_doc(), "parameters": {"priority": 1.5}},
        "timeout-negative": {**good_doc(), "parameters": {"timeout": -100}},
        "timeout-object": {**good_doc(), "parameters": {"timeout": {}}},
        "sequence-start-string": {**good_doc(), "parameters": {"sequence_start": "yes"}},
        "sequence-id-negative": {**good_doc(), "parameters": {"sequence_id": -7}},
        "sequence-id-object": {**good_doc(), "parameters": {"sequence_id": {"a": 1}}},
        "shm-region-number": with_input(0, data=None, parameters={"shared_memory_region": 5}),
        "shm-region-unknown": {"inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32",
             "parameters": {"shared_memory_region": "nope", "shared_memory_byte_size": 64}},
            tensor("INPUT1", [1, 16], B)]},
    }
    # Triton flattens nested `data` whatever its nesting, as trtis does.
    lenient = {"input-data-mixed-nesting"}
    for name, doc in wrong.items():
        if name == "shm-region-number":
            del doc["inputs"][0]["data"]
        c.append((f"type-{name}", post(SIMPLE, json.dumps(doc).encode()),
                  expect_4xx_or_ok if name in lenient else expect_4xx))
    # -- NaN and huge numbers -----------------------------------------------
    fp = lambda data: post(IDENTITY, json.dumps({"inputs": [tensor("INPUT0", [1, len(data)], data, "FP32")]}).encode())
    c += [
        ("num-nan-literal", post(IDENTITY, b'{"inputs": [{"name": "INPUT0", "shape": [1, 1], '
                                           b'"datatype": "FP32", "data": [NaN]}]}'), expect_4xx),
        ("num-infinity-literal", post(IDENTITY, b'{"inputs": [{"name": "INPUT0", "shape": [1, 1], '
                                                b'"datatype": "FP32", "data": [-Infinity]}]}'), expect_4xx),
        ("num-1e999-fp32", post(IDENTITY, b'{"inputs": [{"name": "INPUT0", "shape": [1, 1], '
                                          b'"datatype": "FP32", "data": [1e999]}]}'), expect_4xx),
        ("num-1e39-fp32", fp([1e39]), expect_4xx_or_200),
        ("num-long-mantissa-fp32", post(IDENTITY, b'{"inputs": [{"name": "INPUT0", "shape": [1, 1], '
                                                  b'"datatype": "FP32", "data": [' + b"1" * 100_000 + b"]}]}"),
         expect_4xx_or_200),
        ("num-int32-overflow", post(SIMPLE, json.dumps(with_input(0, data=[2**31] * 16)).encode()), expect_4xx_or_200),
        ("num-u64-overflow", post(SIMPLE, json.dumps(with_input(0, data=[U64] * 16)).encode()), expect_4xx),
        ("num-negative-huge", post(SIMPLE, json.dumps(with_input(0, data=[-1e30] * 16)).encode()), expect_4xx),
        ("num-shape-1e20", post(SIMPLE, json.dumps(with_input(0, shape=[1e20, 16])).encode()), expect_4xx),
        ("num-shape-u64-max", post(SIMPLE, json.dumps(with_input(0, shape=[U64 - 1, 16])).encode()), expect_4xx),
        ("num-shape-u64-plus-one", post(SIMPLE, json.dumps(with_input(0, shape=[U64, 16])).encode()), expect_4xx),
        ("num-shape-i64-min", post(SIMPLE, json.dumps(with_input(0, shape=[-I64, 16])).encode()), expect_4xx),
        ("num-shape-exponent", post(SIMPLE, GOOD.replace(b"[1, 16]", b"[1e0, 16]", 1)), expect_4xx_or_ok),
        ("num-priority-u64-plus-one", post(SIMPLE, json.dumps({**good_doc(), "parameters": {"priority": U64}}).encode()),
         expect_4xx),
        ("num-timeout-u64-max", post(SIMPLE, json.dumps({**good_doc(), "parameters": {"timeout": U64 - 1}}).encode()),
         expect_4xx_or_ok),
        ("num-classification-u64-max",
         post(SIMPLE, json.dumps({**good_doc(), "outputs": [{"name": "OUTPUT0", "parameters": {"classification": U64 - 1}}]}).encode()),
         expect_4xx_or_200),
    ]
    # -- duplicate keys (Triton reads the first, serde the last: either a
    #    correct answer or a 4xx, never a crash) --------------------------------
    good_in0 = json.dumps(good_doc()["inputs"][0])
    good_in1 = json.dumps(good_doc()["inputs"][1])
    c += [
        ("dupkey-inputs", post(SIMPLE, ('{"inputs": [], "inputs": [' + good_in0 + "," + good_in1 + "]}").encode()),
         expect_4xx_or_ok),
        ("dupkey-inputs-reversed", post(SIMPLE, ('{"inputs": [' + good_in0 + "," + good_in1 + '], "inputs": 7}').encode()),
         expect_4xx_or_ok),
        ("dupkey-name", post(SIMPLE, ('{"inputs": [' + good_in0.replace('"name": "INPUT0"', '"name": "INPUT0", "name": "BOGUS"')
                                      + "," + good_in1 + "]}").encode()), expect_4xx_or_ok),
        ("dupkey-shape", post(SIMPLE, ('{"inputs": [' + good_in0.replace('"shape": [1, 16]', '"shape": [1, 16], "shape": [1, 1099511627776]')
                                       + "," + good_in1 + "]}").encode()), expect_4xx_or_ok),
        ("dupkey-data", post(SIMPLE, ('{"inputs": [' + good_in0.replace('"data": [', '"data": [1], "data": [', 1)
                                      + "," + good_in1 + "]}").encode()), expect_4xx_or_ok),
        ("dupkey-parameters-1000", post(SIMPLE, ("{" + ", ".join(['"parameters": {}'] * 1000) + ', "inputs": ['
                                                 + good_in0 + "," + good_in1 + "]}").encode()), expect_4xx_or_ok),
    ]
    # -- shape / size overflows ---------------------------------------------
    idj = lambda shape, data, dt="FP32", **p: post(IDENTITY if dt == "FP32" else IDENTITY_BYTES,
                                                   json.dumps({"inputs": [tensor("INPUT0", shape, data, dt, **p)]}).encode())
    c += [
        ("shape-product-overflow-u64", idj([2**32, 2**32], [1.0]), expect_4xx),
        ("shape-product-overflow-bytes", idj([1, 2**62], [1.0]), expect_4xx),
        ("shape-product-overflow-3d", post(SIMPLE, json.dumps(with_input(0, shape=[2**21, 2**21, 2**22])).encode()), expect_4xx),
        ("shape-i64-max", idj([1, I64 - 1], [1.0]), expect_4xx),
        ("shape-negative-dim", idj([1, -4], [1.0] * 4), expect_4xx),
        ("shape-negative-batch", idj([-1, 4], [1.0] * 4), expect_4xx),
        ("shape-minus-two", post(SIMPLE, json.dumps(with_input(0, shape=[1, -2])).encode()), expect_4xx),
        ("shape-1e12-elements-json", idj([1, 10**12], [1.0]), expect_4xx),
        ("shape-batch-1e12", idj([10**12, 1], [1.0]), expect_4xx),
        ("shape-empty", idj([], [1.0]), expect_4xx),
        ("shape-rank-1000", idj([1] * 1000, [1.0]), expect_4xx),
        ("shape-rank-100k", idj([1] * 100_000, [1.0]), expect_4xx),
        ("shape-zero-elements", idj([1, 0], []), expect_4xx_or_200),
        ("shape-zero-batch", idj([0, 4], []), expect_4xx_or_200),
        ("shape-1e12-elements-binary",
         binary_request(IDENTITY, {"inputs": [bin_input("INPUT0", [1, 10**12], 4, "FP32")]}, b"\0" * 4), expect_4xx),
        ("shape-1e12-bytes-declared-binary",
         binary_request(IDENTITY, {"inputs": [bin_input("INPUT0", [1, 4], 10**12, "FP32")]}, b"\0" * 16), expect_4xx),
        ("shape-overflow-binary",
         binary_request(IDENTITY, {"inputs": [bin_input("INPUT0", [4, 2**62], 16, "FP32")]}, b"\0" * 16), expect_4xx),
        ("shape-bytes-1e12-elements",
         binary_request(IDENTITY_BYTES, {"inputs": [bin_input("INPUT0", [1, 10**12], 5, "BYTES")]}, bytes_elem(b"x")),
         expect_4xx),
        ("shape-bytes-overflow",
         binary_request(IDENTITY_BYTES, {"inputs": [bin_input("INPUT0", [2**32, 2**32], 5, "BYTES")]}, bytes_elem(b"x")),
         expect_4xx),
    ]
    # -- binary framing ------------------------------------------------------
    head = json.dumps({"inputs": [bin_input("INPUT0", [1, 16], 64), bin_input("INPUT1", [1, 16], 64)]}).encode()
    n = len(head)
    c += [
        ("ihcl-larger-than-body", simple_binary(ihcl=str(n + 10_000)), expect_4xx),
        ("ihcl-body-length-plus-one", simple_binary(ihcl=str(n + 128 + 1)), expect_4xx),
        ("ihcl-smaller-than-json", simple_binary(ihcl=str(n - 5)), expect_4xx),
        ("ihcl-one", simple_binary(ihcl="1"), expect_4xx),
        ("ihcl-negative", simple_binary(ihcl="-5"), expect_4xx),
        ("ihcl-non-numeric", simple_binary(ihcl="abc"), expect_4xx),
        ("ihcl-float", simple_binary(ihcl=f"{n}.0"), expect_4xx),
        ("ihcl-empty", simple_binary(ihcl=""), expect_4xx),
        ("ihcl-hex", simple_binary(ihcl=hex(n)), expect_4xx),
        ("ihcl-u64-overflow", simple_binary(ihcl=str(U64)), expect_4xx),
        ("ihcl-u64-max", simple_binary(ihcl=str(U64 - 1)), expect_4xx),
        ("ihcl-5000-digits", simple_binary(ihcl="9" * 5000), expect_4xx),
        ("ihcl-two-headers", simple_binary(ihcl=[str(n), str(n + 100_000)]), expect_4xx_or_ok),
        ("ihcl-zero-two-input-model", simple_binary(ihcl="0"), expect_4xx),
        ("ihcl-zero-odd-bytes", http_request(IDENTITY, b"\0" * 7, {"Inference-Header-Content-Length": "0",
                                                                    "Content-Type": "application/octet-stream"}),
         expect_4xx_or_200),
        ("binary-without-ihcl", http_request(SIMPLE, head + b"\0" * 128, {"Content-Type": "application/octet-stream"}),
         expect_4xx),
        ("bds-negative", simple_binary(sizes=(-64, 64)), expect_4xx),
        ("bds-string", simple_binary(sizes=("64", 64)), expect_4xx),
        ("bds-float", simple_binary(sizes=(64.0, 64)), expect_4xx),
        ("bds-null", simple_binary(sizes=(None, 64)), expect_4xx),
        ("bds-zero", simple_binary(sizes=(0, 64), tail=b"\1" * 64), expect_4xx),
        ("bds-one-byte-short", simple_binary(sizes=(63, 65)), expect_4xx),
        ("bds-u64-max", simple_binary(sizes=(U64 - 1, 64)), expect_4xx),
        ("bds-u64-plus-one", simple_binary(sizes=(U64, 64)), expect_4xx),
        ("bds-sum-overflow", simple_binary(sizes=(I64, I64)), expect_4xx),
        ("bds-sum-wraps-to-body", simple_binary(sizes=(U64 - 1, 129)), expect_4xx),
        ("bds-sum-wraps-u63", simple_binary(sizes=(I64 + 64, I64 + 64)), expect_4xx),
        ("bds-and-data",
         binary_request(SIMPLE, {"inputs": [{**bin_input("INPUT0", [1, 16], 64), "data": A}, bin_input("INPUT1", [1, 16], 64)]},
                        b"\0" * 128), expect_4xx),
        ("bds-no-binary-tail", simple_binary(tail=b""), expect_4xx),
        ("bytes-length-prefix-max",
         binary_request(IDENTITY_BYTES, {"inputs": [bin_input("INPUT0", [1, 1], 8, "BYTES")]}, b"\xff\xff\xff\xffabcd"),
         expect_4xx),
        ("bytes-length-prefix-short",
         binary_request(IDENTITY_BYTES, {"inputs": [bin_input("INPUT0", [1, 1], 7, "BYTES")]}, struct.pack("<I", 100) + b"abc"),
         expect_4xx),
        ("bytes-truncated-prefix",
         binary_request(IDENTITY_BYTES, {"inputs": [bin_input("INPUT0", [1, 1], 2, "BYTES")]}, b"\x01\x00"),
         expect_4xx),
        ("bytes-count-mismatch",
         binary_request(IDENTITY_BYTES, {"inputs": [bin_input("INPUT0", [1, 3], 10, "BYTES")]}, bytes_elem(b"a") + bytes_elem(b"b")),
         expect_4xx),
        ("bytes-extra-elements",
         binary_request(IDENTITY_BYTES, {"inputs": [bin_input("INPUT0", [1, 1], 10, "BYTES")]}, bytes_elem(b"a") + bytes_elem(b"b")),
         expect_4xx),
        ("bytes-json-numbers", idj([1, 2], [1, 2], "BYTES"), expect_4xx),
        ("bytes-json-nested-objects", idj([1, 1], [{"a": "b"}], "BYTES"), expect_4xx),
    ]
    # -- duplicate and missing tensors, unknown outputs -------------------------
    doc = good_doc()
    c += [
        ("tensors-no-inputs-key", post(SIMPLE, b"{}"), expect_4xx),
        ("tensors-inputs-empty", post(SIMPLE, json.dumps({"inputs": []}).encode()), expect_4xx),
        ("tensors-input-name-empty", post(SIMPLE, json.dumps(with_input(0, name="")).encode()), expect_4xx),
        ("tensors-duplicate-input1", post(SIMPLE, json.dumps({"inputs": [doc["inputs"][0], doc["inputs"][1], doc["inputs"][1]]}).encode()),
         expect_4xx),
        ("tensors-duplicate-json-and-binary",
         binary_request(SIMPLE, {"inputs": [bin_input("INPUT0", [1, 16], 64), tensor("INPUT0", [1, 16], A),
                                            tensor("INPUT1", [1, 16], B)]}, b"\0" * 64), expect_4xx),
        ("tensors-extra-unknown-input", post(SIMPLE, json.dumps({"inputs": doc["inputs"] + [tensor("INPUT2", [1, 16], A)]}).encode()),
         expect_4xx),
        ("tensors-only-unknown", post(SIMPLE, json.dumps({"inputs": [tensor("X", [1, 16], A), tensor("Y", [1, 16], A)]}).encode()),
         expect_4xx),
        ("tensors-case-mismatch", post(SIMPLE, json.dumps({"inputs": [tensor("input0", [1, 16], A), doc["inputs"][1]]}).encode()),
         expect_4xx),
        # Triton keeps requested outputs in a set: a 4xx, or one OUTPUT0.
        ("tensors-duplicate-output", post(SIMPLE, json.dumps({**doc, "outputs": [{"name": "OUTPUT0"}, {"name": "OUTPUT0"}]}).encode()),
         expect_4xx_or_outputs_once),
        ("tensors-1000-unknown-outputs",
         post(SIMPLE, json.dumps({**doc, "outputs": [{"name": f"O{i}"} for i in range(1000)]}).encode()), expect_4xx),
        ("tensors-output-name-empty", post(SIMPLE, json.dumps({**doc, "outputs": [{"name": ""}]}).encode()), expect_4xx),
        ("tensors-output-is-input-name", post(SIMPLE, json.dumps({**doc, "outputs": [{"name": "INPUT0"}]}).encode()), expect_4xx),
        ("tensors-output-shm-unknown",
         post(SIMPLE, json.dumps({**doc, "outputs": [{"name": "OUTPUT0", "parameters": {
             "shared_memory_region": "nope", "shared_memory_byte_size": 64}}]}).encode()), expect_4xx),
    ]
    # -- parameter maps ------------------------------------------------------
    c += [
        # Compact JSON with short keys, so 100k entries fit the 1 MiB limit.
        ("params-100k-request", post(SIMPLE, compact({**good_doc(), "parameters": params_map(100_000)})),
         expect_4xx_or_ok),
        ("params-50k-input",
         post(SIMPLE, compact(with_input(0, parameters={f"q{i}": True for i in range(50_000)}))),
         expect_4xx_or_ok),
        ("params-50k-output",
         post(SIMPLE, compact({**good_doc(), "outputs": [{"name": "OUTPUT0", "parameters": {f"o{i}": "" for i in range(50_000)}},
                                                         {"name": "OUTPUT1"}]})),
         expect_4xx_or_ok),
        ("params-nested-values", post(SIMPLE, json.dumps({**good_doc(), "parameters": {"a": {"b": [1, {"c": None}]}}}).encode()),
         expect_4xx_or_ok),
        ("params-huge-key", post(SIMPLE, json.dumps({**good_doc(), "parameters": {"k" * 500_000: 1}}).encode()),
         expect_4xx_or_ok),
    ]
    # -- control routes: client mistakes are 4xx -----------------------------
    c += [
        ("load-missing-model", post("/v2/repository/models/does_not_exist/load", b""), expect_4xx),
        ("load-dotdot", post("/v2/repository/models/../load", b""), expect_4xx),
        ("load-encoded-dotdot", post("/v2/repository/models/..%2F..%2Fetc/load", b""), expect_4xx),
        ("load-encoded-slash", post("/v2/repository/models/simple%2F1/load", b""), expect_4xx),
        ("load-encoded-nul", post("/v2/repository/models/simple%00/load", b""), expect_4xx),
        ("load-absolute-path", post("/v2/repository/models/%2Fetc%2Fpasswd/load", b""), expect_4xx),
        ("load-name-10k", post("/v2/repository/models/" + "a" * 10_000 + "/load", b""), expect_4xx),
        ("load-body-not-json", post("/v2/repository/models/identity_fp32/load", b"{not json"), expect_4xx),
        ("load-parameters-array", post("/v2/repository/models/identity_fp32/load", b'{"parameters": []}'), expect_4xx),
        ("unload-dotdot", post("/v2/repository/models/..%2F..%2Fetc/unload", b""), expect_4xx_or_200),
        ("index-body-not-json", post("/v2/repository/index", b"[[[["), expect_4xx),
        ("logging-deep-json", post("/v2/logging", nested(10_000).encode()), expect_4xx),
        ("logging-wrong-types", post("/v2/logging", b'{"log_info": "maybe", "log_verbose_level": -1}'), expect_4xx),
        ("trace-wrong-types", post("/v2/trace/setting", b'{"trace_rate": {"a": 1}}'), expect_4xx),
        ("shm-register-not-json", post("/v2/systemsharedmemory/region/r/register", b"\x00\x01"), expect_4xx),
        ("shm-register-wrong-types",
         post("/v2/systemsharedmemory/region/r/register", b'{"key": 5, "offset": "0", "byte_size": -1}'), expect_4xx),
        ("stats-unknown-model", http_request("/v2/models/nope/stats", method="GET"), expect_4xx),
        ("config-encoded-dotdot", http_request("/v2/models/..%2F..%2Fetc/config", method="GET"), expect_4xx),
        ("infer-version-garbage", post("/v2/models/simple/versions/%ff%fe/infer", GOOD), expect_4xx),
        ("infer-version-negative", post("/v2/models/simple/versions/-1/infer", GOOD), expect_4xx),
        ("infer-version-u64-overflow", post(f"/v2/models/simple/versions/{U64}/infer", GOOD), expect_4xx),
    ]
    return c


def framing_cases():
    """HTTP/1.1 framing and header abuse: a refusal is enough."""
    req = lambda **kw: http_request(SIMPLE, GOOD, {"Content-Type": "application/json", **kw})
    junk = lambda n: "a" * n
    c = [
        ("http-random-bytes", GARBAGE, expect_refused),
        ("http-request-line-garbage", b"GARBAGE\r\n\r\n", expect_refused),
        ("http-0.9", b"GET /v2/health/ready\r\n\r\n", expect_refused),
        ("http-version-9.9", b"GET /v2/health/ready HTTP/9.9\r\nHost: x\r\n\r\n", expect_refused),
        ("http-tls-client-hello", TLS_HELLO, expect_refused),
        ("http-nul-in-request-line", b"POST /v2/models/simple\x00/infer HTTP/1.1\r\nHost: x\r\n\r\n", expect_refused),
        ("http-header-no-colon", b"POST " + SIMPLE.encode() + b" HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n", expect_refused),
        ("http-header-nul-value", req(**{"X-Bad": "a\x00b"}), expect_refused),
        ("http-header-obs-fold", req(**{"X-Fold": "a\r\n b"}), expect_refused_or_ok),
        ("http-header-100kb-line", req(**{"X-Junk": junk(100_000)}), expect_refused_or_ok),
        ("http-header-1mb-line", req(**{"X-Junk": junk(1_000_000)}), expect_refused),
        ("http-10k-headers", http_request(SIMPLE, GOOD, {"Content-Type": "application/json",
                                                         **{f"X-H{i}": "v" for i in range(10_000)}}),
         expect_refused),
        ("http-path-100kb", post("/v2/models/" + junk(100_000) + "/infer", GOOD), expect_refused),
        ("http-content-type-100kb", req(**{"Content-Type": "application/json; " + junk(100_000)}), expect_refused_or_ok),
        ("http-cl-negative", http_request(SIMPLE, GOOD, {"Content-Length": "-1"}, content_length=False), expect_refused),
        ("http-cl-non-numeric", http_request(SIMPLE, GOOD, {"Content-Length": "abc"}, content_length=False), expect_refused),
        ("http-cl-u64-overflow", http_request(SIMPLE, GOOD, {"Content-Length": str(U64)}, content_length=False),
         expect_refused),
        ("http-cl-two-values", http_request(SIMPLE, GOOD, {"Content-Length": [str(len(GOOD)), str(len(GOOD) + 5)]},
                                            content_length=False), expect_refused),
        ("http-cl-comma-list", http_request(SIMPLE, GOOD, {"Content-Length": f"{len(GOOD)}, {len(GOOD) + 5}"},
                                            content_length=False), expect_refused),
        ("http-cl-smaller-than-body", http_request(SIMPLE, GOOD, {"Content-Length": "10", "Content-Type": "application/json"},
                                                   content_length=False), expect_4xx),
        ("http-te-and-cl", http_request(SIMPLE, b"%x\r\n" % len(GOOD) + GOOD + b"\r\n0\r\n\r\n",
                                        {"Transfer-Encoding": "chunked", "Content-Length": "5",
                                         "Content-Type": "application/json"}, content_length=False),
         expect_refused_or_ok),
        ("http-te-unknown", http_request(SIMPLE, GOOD, {"Transfer-Encoding": "gzip, chunked"}, content_length=False),
         expect_refused),
        ("http-chunk-size-garbage", http_request(SIMPLE, b"zz\r\nabc\r\n0\r\n\r\n", {"Transfer-Encoding": "chunked"},
                                                 content_length=False), expect_refused),
        ("http-chunk-size-overflow", http_request(SIMPLE, b"F" * 40 + b"\r\nabc\r\n0\r\n\r\n",
                                                  {"Transfer-Encoding": "chunked"}, content_length=False),
         expect_refused),
        ("http-chunk-ext-100kb", http_request(SIMPLE, b"3;" + junk(100_000).encode() + b"\r\nabc\r\n0\r\n\r\n",
                                              {"Transfer-Encoding": "chunked"}, content_length=False),
         expect_refused),
        ("http-h2-preface-then-garbage", H2_PREFACE + GARBAGE[:512], expect_refused),
        ("http-h2-upgrade-garbage", http_request("/v2/health/ready", b"", {
            "Connection": "Upgrade, HTTP2-Settings", "Upgrade": "h2c", "HTTP2-Settings": "!!!notbase64!!!"},
            method="GET") + GARBAGE[:256], expect_answered),
    ]
    return c


def valid_http_cases():
    """Positive controls: legal but unusual framing that must work."""
    chunks = b"".join(b"%x\r\n" % len(GOOD[i:i + 7]) + GOOD[i:i + 7] + b"\r\n" for i in range(0, len(GOOD), 7))
    return [
        ("ok-chunked-small-chunks", http_request(SIMPLE, chunks + b"0\r\n\r\n",
                                                 {"Transfer-Encoding": "chunked", "Content-Type": "application/json"},
                                                 content_length=False), expect_ok),
        ("ok-binary-request", simple_binary(extra={"Content-Type": "application/octet-stream"}), None),
    ]


# ---------------------------------------------------------------------------
# Raw HTTP/2
# ---------------------------------------------------------------------------

H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0, 1, 3, 4, 6, 7, 8, 9
END_STREAM, END_HEADERS = 0x1, 0x4


def h2_frame(ftype: int, flags: int, stream: int, payload: bytes = b"", length: int | None = None) -> bytes:
    n = len(payload) if length is None else length
    return n.to_bytes(3, "big") + bytes([ftype, flags]) + (stream & 0x7FFFFFFF).to_bytes(4, "big") + payload


def hpack_int(value: int, prefix_bits: int, flags: int = 0) -> bytes:
    top = (1 << prefix_bits) - 1
    if value < top:
        return bytes([flags | value])
    out = [flags | top]
    value -= top
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def hpack_literal(name: str, value: str) -> bytes:
    """Literal header field without indexing, new name, no Huffman."""
    n, v = name.encode(), value.encode()
    return b"\x00" + hpack_int(len(n), 7) + n + hpack_int(len(v), 7) + v


def grpc_headers(port: int, method: str = "ModelInfer", extra: list | None = None) -> bytes:
    fields = [
        (":method", "POST"), (":scheme", "http"),
        (":path", f"/inference.GRPCInferenceService/{method}"),
        (":authority", f"127.0.0.1:{port}"),
        ("content-type", "application/grpc"), ("te", "trailers"),
    ] + (extra or [])
    return b"".join(hpack_literal(k, v) for k, v in fields)


def grpc_message(payload: bytes, compressed: bool = False, length: int | None = None) -> bytes:
    n = len(payload) if length is None else length
    return bytes([1 if compressed else 0]) + struct.pack(">I", n) + payload


@dataclass
class H2Answer:
    frames: list = field(default_factory=list)  # (type, flags, stream, payload)
    closed: bool = False
    reset: bool = False
    timed_out: bool = False
    sent: int = 0

    def goaway(self) -> bool:
        return any(f[0] == GOAWAY for f in self.frames)

    def stream_ended(self, stream: int) -> bool:
        return any(
            f[2] == stream and (f[0] == RST_STREAM or (f[0] in (HEADERS, DATA) and f[1] & END_STREAM))
            for f in self.frames
        )

    def describe(self) -> str:
        kinds = {DATA: "DATA", HEADERS: "HEADERS", RST_STREAM: "RST_STREAM", SETTINGS: "SETTINGS", PING: "PING",
                 GOAWAY: "GOAWAY", WINDOW_UPDATE: "WINDOW_UPDATE"}
        names = [f"{kinds.get(t, t)}(s{s},f{fl:#x})" for t, fl, s, _ in self.frames]
        state = "reset" if self.reset else "closed" if self.closed else "timed out" if self.timed_out else "open"
        return f"frames {names[:12]}, connection {state}"


def h2_exchange(port: int, parts, *, until_stream: int | None = None, close_after_send: bool = False,
                timeout: float = READ_TIMEOUT_S) -> H2Answer:
    """Sends raw HTTP/2 bytes; reads frames until EOF, a GOAWAY, the end of
    `until_stream` or the timeout. Acknowledges the server's SETTINGS."""
    if isinstance(parts, (bytes, bytearray)):
        parts = [bytes(parts)]
    ans = H2Answer()
    s = connect(port)
    try:
        try:
            for p in parts:
                s.sendall(p)
                ans.sent += len(p)
        except (ConnectionResetError, BrokenPipeError):
            ans.reset = True
            return ans
        if close_after_send:
            return ans
        pending = bytearray()

        def on_data(chunk: bytes) -> bool:
            pending.extend(chunk)
            while len(pending) >= 9:
                n = int.from_bytes(pending[:3], "big")
                if len(pending) < 9 + n:
                    break
                ftype, flags = pending[3], pending[4]
                stream = int.from_bytes(pending[5:9], "big") & 0x7FFFFFFF
                ans.frames.append((ftype, flags, stream, bytes(pending[9:9 + n])))
                del pending[:9 + n]
                if ftype == SETTINGS and not flags & 1:
                    try:
                        s.sendall(h2_frame(SETTINGS, 1, 0))
                    except OSError:
                        pass
            return ans.goaway() or (until_stream is not None and ans.stream_ended(until_stream))

        receive(s, ans, timeout, on_data)
        return ans
    finally:
        s.close()


def expect_h2_refused(ans: H2Answer) -> str | None:
    """A connection error: GOAWAY, or closed/reset, not silence."""
    if ans.goaway() or ans.closed or ans.reset:
        return None
    return f"expected GOAWAY or a closed connection, got {ans.describe()}"


def expect_stream_answered(stream: int):
    def check(ans: H2Answer) -> str | None:
        if ans.stream_ended(stream) or ans.goaway() or ans.closed or ans.reset:
            return None
        return f"expected stream {stream} to end (trailers/RST_STREAM) or the connection to close, got {ans.describe()}"

    return check


def expect_nothing(_ans) -> str | None:
    """Cases where the client hangs up itself: only the server's health
    afterwards counts."""
    return None


SETTINGS_EMPTY = h2_frame(SETTINGS, 0, 0)


def h2_cases():
    """(id, builder(port) -> parts, expectation, options). Sent to the gRPC
    port unless the id starts with http-."""
    simple_req = service_pb2.ModelInferRequest(model_name="simple")
    for name, data in (("INPUT0", np.arange(16, dtype=np.int32)), ("INPUT1", np.ones(16, dtype=np.int32))):
        simple_req.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        simple_req.raw_input_contents.append(data.tobytes())
    msg = simple_req.SerializeToString()
    head = lambda port, method="ModelInfer", flags=END_HEADERS: h2_frame(HEADERS, flags, 1, grpc_headers(port, method))
    base = lambda port: H2_PREFACE + SETTINGS_EMPTY
    big_headers = [hpack_literal(f"x-flood-{i}", "v" * 4000) for i in range(4)]
    return [
        ("h2-random-garbage", lambda p: GARBAGE, expect_h2_refused, {}),
        ("h2-http1-request", lambda p: http_request("/v2/health/ready", b"", method="GET"), expect_h2_refused, {}),
        ("h2-preface-then-garbage", lambda p: H2_PREFACE + GARBAGE, expect_h2_refused, {}),
        ("h2-half-preface-then-garbage", lambda p: H2_PREFACE[:10] + GARBAGE[:100], expect_h2_refused, {}),
        ("h2-frame-too-large", lambda p: base(p) + h2_frame(DATA, 0, 1, b"", length=0xFFFFFF) + b"\0" * 1000,
         expect_h2_refused, {}),
        ("h2-settings-bad-length", lambda p: H2_PREFACE + h2_frame(SETTINGS, 0, 0, b"\0" * 5), expect_h2_refused, {}),
        ("h2-settings-on-stream", lambda p: base(p) + h2_frame(SETTINGS, 0, 3, b""), expect_h2_refused, {}),
        ("h2-settings-bad-window", lambda p: H2_PREFACE + h2_frame(SETTINGS, 0, 0, struct.pack(">HI", 4, 2**31)),
         expect_h2_refused, {}),
        ("h2-data-on-stream-0", lambda p: base(p) + h2_frame(DATA, 0, 0, b"abc"), expect_h2_refused, {}),
        ("h2-headers-on-stream-0", lambda p: base(p) + h2_frame(HEADERS, END_HEADERS, 0, grpc_headers(p)),
         expect_h2_refused, {}),
        ("h2-even-stream-id", lambda p: base(p) + h2_frame(HEADERS, END_HEADERS, 2, grpc_headers(p)), expect_h2_refused, {}),
        ("h2-bad-hpack-index", lambda p: base(p) + h2_frame(HEADERS, END_HEADERS | END_STREAM, 1, b"\xff\xff\xff\xff\x0f"),
         expect_h2_refused, {}),
        ("h2-hpack-int-overflow",
         lambda p: base(p) + h2_frame(HEADERS, END_HEADERS | END_STREAM, 1, b"\x00\x7f" + b"\xff" * 20 + b"\x01"),
         expect_h2_refused, {}),
        ("h2-window-update-overflow",
         lambda p: base(p) + h2_frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 2**31 - 1)) * 2, expect_h2_refused, {}),
        ("h2-window-update-zero", lambda p: base(p) + h2_frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 0)),
         expect_h2_refused, {}),
        ("h2-continuation-without-headers", lambda p: base(p) + h2_frame(CONTINUATION, END_HEADERS, 1, b"\x82"),
         expect_h2_refused, {}),
        ("h2-goaway-then-garbage", lambda p: base(p) + h2_frame(GOAWAY, 0, 0, struct.pack(">II", 0, 0)) + GARBAGE[:200],
         expect_h2_refused, {}),
        # Bounded CONTINUATION flood: 2000 frames of 16 KB of header literals
        # (32 MB) must not be buffered without limit: the server ends the
        # stream or the connection before (or when) the flood ends.
        ("h2-continuation-flood",
         lambda p: [base(p) + head(p, flags=0)]
         + [h2_frame(CONTINUATION, 0, 1, b"".join(big_headers)) for _ in range(2000)]
         + [h2_frame(CONTINUATION, END_HEADERS, 1, b"")],
         expect_stream_answered(1), {"chunked_send": True}),
        # Rapid reset (bounded): 1000 streams opened and reset at once.
        ("h2-rapid-reset-1000",
         lambda p: base(p) + b"".join(h2_frame(HEADERS, END_HEADERS, 2 * i + 1, grpc_headers(p))
                                      + h2_frame(RST_STREAM, 0, 2 * i + 1, struct.pack(">I", 8)) for i in range(1000)),
         expect_nothing, {"close_after_send": True}),
        ("h2-ping-flood-5000", lambda p: base(p) + h2_frame(PING, 0, 0, b"\0" * 8) * 5000, expect_nothing,
         {"close_after_send": True}),
        # gRPC framing inside a valid HTTP/2 stream.
        ("grpc-length-prefix-larger-then-end",
         lambda p: base(p) + head(p) + h2_frame(DATA, END_STREAM, 1, grpc_message(msg[:20], length=1000)),
         expect_stream_answered(1), {}),
        # A message declared over --grpc-max-input-size (2 MiB): refused from
        # its 5-byte prefix, without waiting for the 64 MiB it announces.
        ("grpc-declared-64mib-no-body",
         lambda p: base(p) + head(p) + h2_frame(DATA, 0, 1, grpc_message(msg, length=64 << 20)),
         expect_stream_answered(1), {}),
        ("grpc-stream-declared-64mib-no-body",
         lambda p: base(p) + head(p, "ModelStreamInfer") + h2_frame(DATA, 0, 1, grpc_message(msg))
         + h2_frame(DATA, 0, 1, grpc_message(msg, length=64 << 20)),
         expect_stream_answered(1), {}),
        ("grpc-length-prefix-4gib-then-end",
         lambda p: base(p) + head(p) + h2_frame(DATA, END_STREAM, 1, grpc_message(msg, length=0xFFFFFFFF)),
         expect_stream_answered(1), {}),
        ("grpc-compressed-flag-no-encoding",
         lambda p: base(p) + head(p) + h2_frame(DATA, END_STREAM, 1, grpc_message(msg, compressed=True)),
         expect_stream_answered(1), {}),
        ("grpc-bad-compression-flag",
         lambda p: base(p) + head(p) + h2_frame(DATA, END_STREAM, 1, b"\x07" + grpc_message(msg)[1:]),
         expect_stream_answered(1), {}),
        ("grpc-unknown-encoding",
         lambda p: base(p) + h2_frame(HEADERS, END_HEADERS, 1, grpc_headers(p, extra=[("grpc-encoding", "zstd-x")]))
         + h2_frame(DATA, END_STREAM, 1, grpc_message(msg, compressed=True)),
         expect_stream_answered(1), {}),
        ("grpc-trailing-partial-prefix",
         lambda p: base(p) + head(p) + h2_frame(DATA, END_STREAM, 1, grpc_message(msg) + b"\x00\x00"),
         expect_stream_answered(1), {}),
        ("grpc-two-messages-unary",
         lambda p: base(p) + head(p) + h2_frame(DATA, END_STREAM, 1, grpc_message(msg) * 2),
         expect_stream_answered(1), {}),
        ("grpc-no-message-end", lambda p: base(p) + head(p, flags=END_HEADERS | END_STREAM),
         expect_stream_answered(1), {}),
        ("grpc-wrong-content-type",
         lambda p: base(p) + h2_frame(HEADERS, END_HEADERS, 1, b"".join(
             hpack_literal(k, v) for k, v in [(":method", "POST"), (":scheme", "http"),
                                              (":path", "/inference.GRPCInferenceService/ModelInfer"),
                                              (":authority", "x"), ("content-type", "text/plain")]))
         + h2_frame(DATA, END_STREAM, 1, grpc_message(msg)),
         expect_stream_answered(1), {}),
        ("grpc-get-method",
         lambda p: base(p) + h2_frame(HEADERS, END_HEADERS | END_STREAM, 1, b"".join(
             hpack_literal(k, v) for k, v in [(":method", "GET"), (":scheme", "http"),
                                              (":path", "/inference.GRPCInferenceService/ModelInfer"),
                                              (":authority", "x")])),
         expect_stream_answered(1), {}),
        # Streams cut mid-request: the client goes away with half a message.
        ("grpc-unary-cut-mid-message",
         lambda p: base(p) + head(p) + h2_frame(DATA, 0, 1, grpc_message(msg)[: len(msg) // 2]),
         expect_nothing, {"close_after_send": True}),
        ("grpc-stream-cut-mid-message",
         lambda p: base(p) + head(p, "ModelStreamInfer") + h2_frame(DATA, 0, 1, grpc_message(msg))
         + h2_frame(DATA, 0, 1, grpc_message(msg)[:30]),
         expect_nothing, {"close_after_send": True}),
        ("grpc-stream-cut-mid-headers",
         lambda p: base(p) + h2_frame(HEADERS, 0, 1, grpc_headers(p, "ModelStreamInfer")[:40]),
         expect_nothing, {"close_after_send": True}),
        ("grpc-stream-100-streams-cut",
         lambda p: base(p) + b"".join(h2_frame(HEADERS, END_HEADERS, 2 * i + 1, grpc_headers(p, "ModelStreamInfer"))
                                      + h2_frame(DATA, 0, 2 * i + 1, grpc_message(msg) + grpc_message(msg)[:9])
                                      for i in range(100)),
         expect_nothing, {"close_after_send": True}),
        ("grpc-cut-mid-preface", lambda p: H2_PREFACE[:12], expect_nothing, {"close_after_send": True}),
    ]


# ---------------------------------------------------------------------------
# gRPC message cases (generated stub or raw bytes)
# ---------------------------------------------------------------------------


def simple_grpc_request(n_raw: int = 2, shape=(1, 16)) -> service_pb2.ModelInferRequest:
    req = service_pb2.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        req.inputs.add(name=name, datatype="INT32", shape=list(shape))
    for i in range(n_raw):
        req.raw_input_contents.append((np.arange(16, dtype=np.int32) if i == 0 else np.ones(16, dtype=np.int32)).tobytes())
    return req


def identity_grpc_request(shape, raw: bytes, datatype="FP32", model="identity_fp32") -> service_pb2.ModelInferRequest:
    req = service_pb2.ModelInferRequest(model_name=model)
    req.inputs.add(name="INPUT0", datatype=datatype, shape=list(shape))
    req.raw_input_contents.append(raw)
    return req


CLIENT_CODES = ("INVALID_ARGUMENT", "NOT_FOUND")
TOO_LARGE_CODES = ("OUT_OF_RANGE", "RESOURCE_EXHAUSTED", "INVALID_ARGUMENT")


def outputs_once(resp) -> str | None:
    names = [o.name for o in resp.outputs]
    return None if len(names) == len(set(names)) else f"OK with an output repeated: {names}"
# A malformed protobuf message: grpc++ (Triton) and tonic both answer
# INTERNAL for a message they cannot deserialize.
DECODE_CODES = ("INVALID_ARGUMENT", "INTERNAL")


def grpc_burst(h: Hostile) -> None:
    """Sends every gRPC case once, their refusals expected (a burst of
    hostile traffic, for memory checks)."""
    for _, call, _, _ in grpc_cases():
        try:
            call(h)
        except grpc.RpcError:
            pass


def grpc_cases():
    """(id, call(h) -> raises grpc.RpcError or returns, codes, accept_ok):
    the status codes accepted, and whether OK is accepted too (True, or a
    check of the response returning the problem or None)."""

    def infer(req):
        return lambda h: h.stub.ModelInfer(req, timeout=READ_TIMEOUT_S)

    def raw_infer(payload: bytes, method="ModelInfer"):
        def call(h):
            fn = h.channel.unary_unary(f"/inference.GRPCInferenceService/{method}",
                                       request_serializer=lambda b: b, response_deserializer=lambda b: b)
            return fn(payload, timeout=READ_TIMEOUT_S)
        return call

    good = simple_grpc_request().SerializeToString()
    more_raw = simple_grpc_request(3)
    no_inputs = service_pb2.ModelInferRequest(model_name="simple")
    no_inputs.raw_input_contents.append(b"\0" * 64)
    dup_out = simple_grpc_request()
    dup_out.outputs.add(name="OUTPUT0")
    dup_out.outputs.add(name="OUTPUT0")
    params_req = simple_grpc_request()
    for i in range(100_000):
        params_req.parameters[f"p{i}"].int64_param = i
    in_params = simple_grpc_request()
    for i in range(50_000):
        in_params.inputs[0].parameters[f"q{i}"].bool_param = True
    prio = simple_grpc_request()
    prio.parameters["priority"].string_param = "high"
    timeout_p = simple_grpc_request()
    timeout_p.parameters["timeout"].bool_param = True
    seq = simple_grpc_request()
    seq.parameters["sequence_start"].string_param = "yes"
    bds = simple_grpc_request()
    bds.inputs[0].parameters["binary_data_size"].int64_param = -5
    shm_unknown = simple_grpc_request(0)
    for t in shm_unknown.inputs:
        t.parameters["shared_memory_region"].string_param = "nope"
        t.parameters["shared_memory_byte_size"].int64_param = 64
    shm_huge = simple_grpc_request(0)
    for t in shm_huge.inputs:
        t.parameters["shared_memory_region"].string_param = "nope"
        t.parameters["shared_memory_byte_size"].int64_param = -1
        t.parameters["shared_memory_offset"].int64_param = 2**63 - 1
    typed_and_huge = service_pb2.ModelInferRequest(model_name="identity_fp32")
    t = typed_and_huge.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 10**12])
    t.contents.fp32_contents.extend([1.0])
    unknown_field = good + b"\xf8\x3e\x01"  # field 999, varint 1

    # A hand-made ModelInferRequest: field 1 (model_name) with a length of 2^62.
    huge_len = b"\x0a" + bytes([0x80] * 8 + [0x40]) + b"simple"
    c = [
        ("grpc-more-raw-contents-than-inputs", infer(more_raw), ("INVALID_ARGUMENT",), False),
        # Over --grpc-max-input-size (2 MiB): tonic says OUT_OF_RANGE, grpc++
        # (Triton) RESOURCE_EXHAUSTED.
        ("grpc-message-over-limit", infer(identity_grpc_request([1, 750_000], b"\0" * 3_000_000)),
         TOO_LARGE_CODES, False),
        ("grpc-stream-message-over-limit", lambda h: list(h.stub.ModelStreamInfer(
            iter([identity_grpc_request([1, 750_000], b"\0" * 3_000_000)]), timeout=READ_TIMEOUT_S)),
         TOO_LARGE_CODES, False),
        ("grpc-raw-contents-no-inputs", infer(no_inputs), ("INVALID_ARGUMENT",), False),
        ("grpc-shape-overflow", infer(identity_grpc_request([1, 2**62], b"\0" * 4)), ("INVALID_ARGUMENT",), False),
        ("grpc-shape-product-overflow-u64", infer(identity_grpc_request([2**32, 2**32], b"\0" * 4)),
         ("INVALID_ARGUMENT",), False),
        ("grpc-shape-negative", infer(identity_grpc_request([1, -4], b"\0" * 16)), ("INVALID_ARGUMENT",), False),
        ("grpc-shape-i64-min", infer(identity_grpc_request([-(2**63), 1], b"\0" * 4)), ("INVALID_ARGUMENT",), False),
        ("grpc-shape-1e12-elements", infer(identity_grpc_request([1, 10**12], b"\0" * 4)), ("INVALID_ARGUMENT",), False),
        ("grpc-shape-1e12-typed-contents", infer(typed_and_huge), ("INVALID_ARGUMENT",), False),
        ("grpc-shape-rank-1000", infer(identity_grpc_request([1] * 1000, b"\0" * 4)), ("INVALID_ARGUMENT",), False),
        ("grpc-shape-empty", infer(identity_grpc_request([], b"\0" * 4)), ("INVALID_ARGUMENT",), False),
        ("grpc-datatype-unknown", infer(identity_grpc_request([1, 1], b"\0" * 4, "INT33")), ("INVALID_ARGUMENT",), False),
        ("grpc-datatype-empty", infer(identity_grpc_request([1, 1], b"\0" * 4, "")), ("INVALID_ARGUMENT",), False),
        ("grpc-input-name-empty",
         infer(service_pb2.ModelInferRequest(model_name="identity_fp32", inputs=[service_pb2.ModelInferRequest.InferInputTensor(
             name="", datatype="FP32", shape=[1, 1])], raw_input_contents=[b"\0" * 4])), ("INVALID_ARGUMENT",), False),
        ("grpc-duplicate-output", infer(dup_out), ("INVALID_ARGUMENT",), outputs_once),
        ("grpc-bytes-length-prefix-max",
         infer(identity_grpc_request([1, 1], b"\xff\xff\xff\xffabcd", "BYTES", "identity_bytes")), ("INVALID_ARGUMENT",), False),
        ("grpc-bytes-length-prefix-short",
         infer(identity_grpc_request([1, 1], struct.pack("<I", 100) + b"abc", "BYTES", "identity_bytes")),
         ("INVALID_ARGUMENT",), False),
        ("grpc-bytes-count-mismatch",
         infer(identity_grpc_request([1, 3], bytes_elem(b"a"), "BYTES", "identity_bytes")), ("INVALID_ARGUMENT",), False),
        ("grpc-params-100k", infer(params_req), ("INVALID_ARGUMENT",), True),
        ("grpc-input-params-50k", infer(in_params), ("INVALID_ARGUMENT",), True),
        ("grpc-priority-wrong-type", infer(prio), ("INVALID_ARGUMENT",), False),
        ("grpc-timeout-wrong-type", infer(timeout_p), ("INVALID_ARGUMENT",), False),
        ("grpc-sequence-start-wrong-type", infer(seq), ("INVALID_ARGUMENT",), True),
        ("grpc-binary-data-size-negative", infer(bds), ("INVALID_ARGUMENT",), True),
        ("grpc-shm-unknown-region", infer(shm_unknown), CLIENT_CODES, False),
        ("grpc-shm-negative-size", infer(shm_huge), CLIENT_CODES, False),
        ("grpc-model-name-100kb", infer(service_pb2.ModelInferRequest(model_name="m" * 100_000)), CLIENT_CODES, False),
        ("grpc-malformed-protobuf", raw_infer(b"\xff\xff\xff\xff\xff"), DECODE_CODES, False),
        ("grpc-truncated-protobuf", raw_infer(good[: len(good) // 2]), DECODE_CODES, False),
        ("grpc-wrong-wire-type", raw_infer(b"\x08\x05" + good), DECODE_CODES, False),
        ("grpc-length-2-62", raw_infer(huge_len), DECODE_CODES, False),
        ("grpc-invalid-utf8-name", raw_infer(b"\x0a\x02\xff\xfe"), DECODE_CODES + ("NOT_FOUND",), False),
        ("grpc-random-bytes-stream", lambda h: list(h.channel.stream_stream(
            "/inference.GRPCInferenceService/ModelStreamInfer", request_serializer=lambda b: b,
            response_deserializer=lambda b: b)(iter([GARBAGE[:300], good]), timeout=READ_TIMEOUT_S)),
         DECODE_CODES, False),
        ("grpc-unknown-fields-ignored", raw_infer(unknown_field), (), True),
        ("grpc-load-missing-model",
         lambda h: h.stub.RepositoryModelLoad(service_pb2.RepositoryModelLoadRequest(model_name="does_not_exist"),
                                              timeout=READ_TIMEOUT_S), CLIENT_CODES, False),
        ("grpc-load-dotdot",
         lambda h: h.stub.RepositoryModelLoad(service_pb2.RepositoryModelLoadRequest(model_name="../../etc"),
                                              timeout=READ_TIMEOUT_S), CLIENT_CODES, False),
        ("grpc-load-absolute",
         lambda h: h.stub.RepositoryModelLoad(service_pb2.RepositoryModelLoadRequest(model_name="/etc/passwd"),
                                              timeout=READ_TIMEOUT_S), CLIENT_CODES, False),
        ("grpc-load-empty-name",
         lambda h: h.stub.RepositoryModelLoad(service_pb2.RepositoryModelLoadRequest(model_name=""),
                                              timeout=READ_TIMEOUT_S), CLIENT_CODES, False),
        ("grpc-shm-register-missing-key",
         lambda h: h.stub.SystemSharedMemoryRegister(service_pb2.SystemSharedMemoryRegisterRequest(
             name="hx", key=missing_shm_key("hostile"), offset=0, byte_size=64), timeout=READ_TIMEOUT_S),
         ("INVALID_ARGUMENT",), False),
    ]
    return c


# ---------------------------------------------------------------------------
# Health after every case
# ---------------------------------------------------------------------------


def normal_http_ok(h: Hostile) -> str | None:
    try:
        ans = exchange(h.port, post(SIMPLE, GOOD), timeout=5.0)
    except OSError as e:
        return f"normal HTTP inference failed: {e}"
    if ans.status == 200 and simple_answer_ok(ans.body):
        return None
    return f"normal HTTP inference: {ans.describe()}"


def normal_grpc_ok(h: Hostile) -> str | None:
    try:
        resp = h.stub.ModelInfer(simple_grpc_request(), timeout=5.0)
    except grpc.RpcError as e:
        return f"normal gRPC inference failed: {e.code().name} {e.details()!r}"
    outs = {o.name: np.frombuffer(r, dtype=np.int32).tolist() for o, r in zip(resp.outputs, resp.raw_output_contents)}
    if outs.get("OUTPUT0") == SUM and outs.get("OUTPUT1") == DIFF:
        return None
    return f"normal gRPC inference answered wrongly: {outs}"


def run_checked(h: Hostile, case_id: str, body) -> None:
    """Runs one case (`body(h)` returns the problem with the answer or
    None), then the health checks; records the tally; fails with all the
    problems found."""
    h.cases += 1
    problems = []
    t0 = time.monotonic()
    try:
        problem = body(h)
        if problem:
            problems.append(problem)
    except Exception as e:  # a client-side surprise is a failure of the case
        problems.append(f"case raised {type(e).__name__}: {e}")
    elapsed = time.monotonic() - t0
    if elapsed > CASE_TIMEOUT_S:
        problems.append(f"case took {elapsed:.1f} s (bound {CASE_TIMEOUT_S} s)")
    crashed = False
    # A dying process may need a moment to be seen as dead.
    for _ in range(3):
        if not h.server.alive():
            break
        time.sleep(0.01)
    if not h.server.alive():
        crashed = True
        problems.append(f"SERVER DIED (exit {h.server.proc.returncode})\n{h.server.log_tail(30)}")
    else:
        for check in (normal_http_ok, normal_grpc_ok):
            p = check(h)
            if p:
                problems.append(p)
        if not h.server.alive():
            crashed = True
            problems.append(f"SERVER DIED during the health check\n{h.server.log_tail(30)}")
    if crashed:
        h.crashes += 1
        h.restart()
    if problems:
        h.failures += 1
        h.failed.append(f"{case_id}: {problems[0].splitlines()[0][:300]}")
        pytest.fail(f"{case_id}: " + "\n".join(problems), pytrace=False)


# ---------------------------------------------------------------------------
# The tests
# ---------------------------------------------------------------------------

HTTP_CASES = json_cases() + framing_cases() + valid_http_cases()


@pytest.mark.parametrize("case_id,request_bytes,expect", HTTP_CASES, ids=[c[0] for c in HTTP_CASES])
def test_http_hostile(hostile, case_id, request_bytes, expect):
    def body(h):
        ans = exchange(h.port, request_bytes)
        if expect is None:  # the binary control: a binary answer
            if ans.status != 200:
                return f"expected a 200, got {ans.describe()}"
            return None
        return expect(ans)

    run_checked(hostile, case_id, body)


H2_CASES = h2_cases()


@pytest.mark.parametrize("case_id,build,expect,opts", H2_CASES, ids=[c[0] for c in H2_CASES])
def test_h2_hostile(hostile, case_id, build, expect, opts):
    def body(h):
        port = h.port if case_id.startswith("http-") else h.grpc_port
        parts = build(port)
        if opts.get("chunked_send"):
            # Sent frame by frame; stops early when the server hangs up.
            return expect(h2_send_until_refused(port, parts))
        ans = h2_exchange(port, parts, until_stream=1, close_after_send=opts.get("close_after_send", False))
        return expect(ans)

    run_checked(hostile, case_id, body)


def h2_send_until_refused(port: int, parts) -> H2Answer:
    """Sends `parts` one by one, reading what the server sends between them
    (so its SETTINGS are acknowledged and its GOAWAY/RST seen); stops when
    the connection breaks or the stream ends, then waits for the answer."""
    ans = H2Answer()
    s = connect(port)
    buf = b""

    def pump(wait: float) -> None:
        nonlocal buf
        while True:
            r, _, _ = select.select([s], [], [], wait)
            if not r:
                return
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, BrokenPipeError):
                ans.reset = True
                return
            if not chunk:
                ans.closed = True
                return
            buf += chunk
            while len(buf) >= 9:
                n = int.from_bytes(buf[:3], "big")
                if len(buf) < 9 + n:
                    break
                f = (buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF, buf[9:9 + n])
                ans.frames.append(f)
                buf = buf[9 + n:]
                if f[0] == SETTINGS and not f[1] & 1:
                    try:
                        s.sendall(h2_frame(SETTINGS, 1, 0))
                    except (ConnectionResetError, BrokenPipeError):
                        # The server hung up after its SETTINGS (a refusal).
                        ans.reset = True
                        return
            wait = 0

    try:
        deadline = time.monotonic() + READ_TIMEOUT_S
        for p in parts:
            try:
                s.sendall(p)
                ans.sent += len(p)
            except (ConnectionResetError, BrokenPipeError, socket.timeout):
                ans.reset = True
                break
            pump(0)
            if ans.closed or ans.reset or ans.goaway() or ans.stream_ended(1) or time.monotonic() > deadline:
                break
        if not (ans.closed or ans.reset or ans.goaway() or ans.stream_ended(1)):
            end = time.monotonic() + READ_TIMEOUT_S
            while time.monotonic() < end and not (ans.closed or ans.reset or ans.goaway() or ans.stream_ended(1)):
                pump(0.2)
            if not (ans.closed or ans.reset or ans.goaway() or ans.stream_ended(1)):
                ans.timed_out = True
        return ans
    finally:
        s.close()


GRPC_CASES = grpc_cases()


@pytest.mark.parametrize("case_id,call,codes,accept_ok", GRPC_CASES, ids=[c[0] for c in GRPC_CASES])
def test_grpc_hostile(hostile, case_id, call, codes, accept_ok):
    def body(h):
        try:
            resp = call(h)
        except grpc.RpcError as e:
            name = e.code().name
            if name not in codes:
                return f"expected gRPC {' or '.join(codes) or 'OK'}, got {name}: {e.details()!r}"
            if not e.details():
                return f"gRPC {name} without a message"
            return None
        if not accept_ok:
            return f"expected gRPC {' or '.join(codes)}, got OK"
        return accept_ok(resp) if callable(accept_ok) else None

    run_checked(hostile, case_id, body)


# -- body size limits: refused before the body is buffered ---------------------

BIG = 64 << 20  # what the oversize cases claim or try to send
REFUSE_BEFORE = 16 << 20  # a refusal must come before this much was sent


def declared_oversize(h: Hostile, path: str) -> str | None:
    """Headers only, Content-Length 64 MiB: the server must answer without
    waiting for the body."""
    head = http_request(path, b"", {"Content-Type": "application/json", "Content-Length": str(BIG)},
                        content_length=False)
    s = connect(h.port)
    try:
        s.sendall(head)
        ans = read_answer(s, Answer(sent=len(head)), timeout=3.0)
    finally:
        s.close()
    if ans.status is None:
        if ans.timed_out:
            return ("no answer within 3 s to a Content-Length of 64 MiB over the 1 MiB limit: "
                    "the server waits for (buffers) the body instead of refusing it up front")
        return f"connection closed without an answer: {ans.describe()}"
    return expect_4xx(ans)


def streamed_oversize(h: Hostile, path: str, chunked: bool, declared: int | None = None) -> str | None:
    """Sends a 64 MiB body in 64 KiB pieces (chunked, or with a
    Content-Length), watching for an answer after each piece: the server
    must answer or hang up before 16 MiB have been sent."""
    hdrs = {"Content-Type": "application/json"}
    if chunked:
        hdrs["Transfer-Encoding"] = "chunked"
    else:
        hdrs["Content-Length"] = str(declared or BIG)
    head = http_request(path, b"", hdrs, content_length=False)
    piece = b"[" + b"1," * (32 * 1024 - 1) + b"1"  # 64 KiB of JSON-ish bytes
    frame = (b"%x\r\n" % len(piece) + piece + b"\r\n") if chunked else piece
    s = connect(h.port)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
    ans = Answer()
    deadline = time.monotonic() + 10.0
    answered = False
    try:
        s.sendall(head)
        while ans.sent < BIG and time.monotonic() < deadline:
            r, w, _ = select.select([s], [s], [], 1.0)
            if r:
                answered = True
                break
            if not w:
                continue
            try:
                s.sendall(frame)
                ans.sent += len(piece)
            except (ConnectionResetError, BrokenPipeError):
                answered = True
                break
        if answered:
            # The answer may be queued before the reset: read it.
            read_answer(s, ans, timeout=3.0)
    finally:
        s.close()
    sent_mib = ans.sent / (1 << 20)
    if not answered:
        return f"no refusal after sending {sent_mib:.1f} MiB of a 64 MiB body (limit 1 MiB): the body is being buffered"
    if ans.sent >= REFUSE_BEFORE:
        return f"refused only after {sent_mib:.1f} MiB had been sent (limit 1 MiB)"
    if ans.status is None:
        return None  # hung up on the client: refused before buffering
    return expect_4xx(ans)


SIZE_CASES = [
    ("size-infer-declared-cl", lambda h: declared_oversize(h, SIMPLE)),
    ("size-infer-streamed-cl", lambda h: streamed_oversize(h, SIMPLE, chunked=False)),
    ("size-infer-chunked", lambda h: streamed_oversize(h, SIMPLE, chunked=True)),
    ("size-identity-chunked", lambda h: streamed_oversize(h, IDENTITY, chunked=True)),
    ("size-load-declared-cl", lambda h: declared_oversize(h, "/v2/repository/models/identity_fp32/load")),
    ("size-load-chunked", lambda h: streamed_oversize(h, "/v2/repository/models/identity_fp32/load", chunked=True)),
    ("size-index-chunked", lambda h: streamed_oversize(h, "/v2/repository/index", chunked=True)),
    ("size-logging-declared-cl", lambda h: declared_oversize(h, "/v2/logging")),
    ("size-trace-chunked", lambda h: streamed_oversize(h, "/v2/trace/setting", chunked=True)),
    ("size-shm-register-declared-cl", lambda h: declared_oversize(h, "/v2/systemsharedmemory/region/r/register")),
    ("size-unknown-route-chunked", lambda h: streamed_oversize(h, "/v2/no/such/route", chunked=True)),
]


@pytest.mark.parametrize("case_id,body", SIZE_CASES, ids=[c[0] for c in SIZE_CASES])
def test_size_limit_hostile(hostile, case_id, body):
    run_checked(hostile, case_id, body)


# -- HTTP requests cut mid-way -------------------------------------------------


def cut_cases():
    full = post(SIMPLE, GOOD)
    header_end = full.index(b"\r\n\r\n") + 4
    chunked = http_request(SIMPLE, b"%x\r\n" % len(GOOD) + GOOD[:40], {"Transfer-Encoding": "chunked"},
                           content_length=False)

    def hang_up(data: bytes, repeat: int = 1):
        def run(h):
            for _ in range(repeat):
                s = connect(h.port)
                try:
                    s.sendall(data)
                finally:
                    s.close()
            return None
        return run

    def half_close(data: bytes):
        def run(h):
            return expect_refused(exchange(h.port, data, shut_write=True))
        return run

    return [
        ("cut-mid-request-line", hang_up(full[:9])),
        ("cut-mid-headers", hang_up(full[: header_end // 2])),
        ("cut-after-headers", hang_up(full[:header_end])),
        ("cut-mid-body", hang_up(full[: header_end + len(GOOD) // 2])),
        ("cut-mid-chunk", hang_up(chunked)),
        ("cut-after-full-request", hang_up(full)),
        ("cut-mid-body-200-times", hang_up(full[: header_end + 30], repeat=200)),
        ("cut-after-full-request-200-times", hang_up(full, repeat=200)),
        ("halfclose-mid-headers", half_close(full[: header_end // 2])),
        ("halfclose-mid-body", half_close(full[: header_end + len(GOOD) // 2])),
        ("halfclose-mid-chunk", half_close(chunked)),
        ("slow-body-1-byte-per-10ms", lambda h: expect_ok(exchange(
            h.port, [full[:header_end]] + [GOOD[i:i + 1] for i in range(0, min(len(GOOD), 120))]
            + [GOOD[120:]], pause=0.01))),
    ]


CUT_CASES = cut_cases()


@pytest.mark.parametrize("case_id,body", CUT_CASES, ids=[c[0] for c in CUT_CASES])
def test_cut_hostile(hostile, case_id, body):
    run_checked(hostile, case_id, body)


def grpc_stream_cancel_mid_flight(h: Hostile) -> str | None:
    """A ModelStreamInfer stream with 200 requests queued, cancelled by the
    client after the first answers."""
    req = simple_grpc_request()
    call = h.stub.ModelStreamInfer(iter([req] * 200), timeout=READ_TIMEOUT_S)
    got = 0
    try:
        for _ in call:
            got += 1
            if got == 3:
                call.cancel()
    except grpc.RpcError as e:
        if e.code() != grpc.StatusCode.CANCELLED:
            return f"stream ended with {e.code().name}: {e.details()!r}"
    return None if got >= 3 else f"only {got} stream answers before the cancel"


def grpc_stream_half_open_generator(h: Hostile) -> str | None:
    """A stream whose client sends one request and then stalls; the client
    cancels after the first answer."""
    import threading

    stall = threading.Event()

    def requests():
        yield simple_grpc_request()
        stall.wait(READ_TIMEOUT_S)

    call = h.stub.ModelStreamInfer(requests(), timeout=READ_TIMEOUT_S)
    try:
        first = next(call)
        if first.error_message:
            return f"stream answered an error: {first.error_message!r}"
    finally:
        call.cancel()
        stall.set()
    return None


@pytest.mark.parametrize("case_id,body", [
    ("grpc-stream-cancel-mid-flight", grpc_stream_cancel_mid_flight),
    ("grpc-stream-stalled-then-cancelled", grpc_stream_half_open_generator),
], ids=["grpc-stream-cancel-mid-flight", "grpc-stream-stalled-then-cancelled"])
def test_grpc_stream_cut_hostile(hostile, case_id, body):
    run_checked(hostile, case_id, body)


# -- system shared memory: client mistakes are 400 ------------------------------


def shm_register_missing_key(h: Hostile) -> str | None:
    body = {"key": missing_shm_key("hostile"), "offset": 0, "byte_size": 64}
    return expect_4xx(exchange(h.port, post("/v2/systemsharedmemory/region/hx/register", body)))


def shm_register_sizes(byte_size, offset):
    def run(h: Hostile) -> str | None:
        _, key = h.shm.create("hostile_sz", 64)
        body = {"key": key, "offset": offset, "byte_size": byte_size}
        ans = exchange(h.port, post("/v2/systemsharedmemory/region/hsz/register", body))
        exchange(h.port, post("/v2/systemsharedmemory/region/hsz/unregister", b""))
        return expect_4xx(ans)
    return run


def shm_output_too_small(h: Hostile) -> str | None:
    import tritonclient.utils.shared_memory as shm

    handle, key = h.shm.create("hostile_in", 128)
    shm.set_shared_memory_region(handle, [np.arange(16, dtype=np.int32), np.ones(16, dtype=np.int32)])
    _, out_key = h.shm.create("hostile_out", 4)
    for name, k, size in (("hin", key, 128), ("hout", out_key, 4)):
        r = exchange(h.port, post(f"/v2/systemsharedmemory/region/{name}/register",
                                  {"key": k, "offset": 0, "byte_size": size}))
        if r.status != 200:
            return f"registering {name} failed: {r.describe()}"
    try:
        doc = {
            "inputs": [
                {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32",
                 "parameters": {"shared_memory_region": "hin", "shared_memory_byte_size": 64}},
                {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32",
                 "parameters": {"shared_memory_region": "hin", "shared_memory_byte_size": 64,
                                "shared_memory_offset": 64}},
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": {"shared_memory_region": "hout",
                                                           "shared_memory_byte_size": 4}}],
        }
        return expect_4xx(exchange(h.port, post(SIMPLE, doc)))
    finally:
        for name in ("hin", "hout"):
            exchange(h.port, post(f"/v2/systemsharedmemory/region/{name}/unregister", b""))


@pytest.mark.parametrize("case_id,body", [
    ("shm-register-missing-key", shm_register_missing_key),
    ("shm-register-size-u64-max", shm_register_sizes(U64 - 1, 0)),
    ("shm-register-offset-overflow", shm_register_sizes(I64, I64)),
    ("shm-register-size-zero", shm_register_sizes(0, 0)),
    ("shm-output-region-too-small", shm_output_too_small),
], ids=["shm-register-missing-key", "shm-register-size-u64-max", "shm-register-offset-overflow",
        "shm-register-size-zero", "shm-output-region-too-small"])
def test_shm_hostile(hostile, case_id, body):
    if not client_shm_supported():
        pytest.fail("`trtis serve --help` has no --allow-client-shm", pytrace=False)
    if case_id == "shm-register-size-zero":
        # A zero-sized region is legal in Triton: a 200 is fine too.
        def zero(h):
            _, key = h.shm.create("hostile_zero", 64)
            ans = exchange(h.port, post("/v2/systemsharedmemory/region/hz/register",
                                        {"key": key, "offset": 0, "byte_size": 0}))
            exchange(h.port, post("/v2/systemsharedmemory/region/hz/unregister", b""))
            return None if ans.status == 200 else expect_4xx(ans)
        body = zero
    run_checked(hostile, case_id, body)
