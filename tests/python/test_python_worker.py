"""Tests of the Python backend's worker (src/core/backend/python/worker.py)
and its `triton_python_backend_utils`, without the Rust server: each test
writes a small model.py into tmp_path, starts `worker.py --fd N` on one end of
a socket pair and speaks PROTOCOL.md's frames on the other end.

Every test with a worker runs twice: in pure Python, and with the worker's
native core (`--native target/debug/lib_trtis_native.so`, built by `cargo
build --workspace`; TRTIS_PYTHON_NATIVE names another file). Without the
library the native runs are skipped, unless TRTIS_REQUIRE_PYTHON=1 (as
scripts/test.sh sets), where they fail.

Run: .venv/bin/python -m pytest tests/python/test_python_worker.py -q
"""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
BACKEND_DIR = REPO_ROOT / "src" / "core" / "backend" / "python"
WORKER = BACKEND_DIR / "worker.py"
NATIVE = Path(
    os.environ.get("TRTIS_PYTHON_NATIVE") or REPO_ROOT / "target" / "debug" / "lib_trtis_native.so"
)


def native_core() -> str:
    """The native core's path for a native-mode test (skips or fails without it)."""
    if not NATIVE.is_file():
        if os.environ.get("TRTIS_REQUIRE_PYTHON") == "1":
            pytest.fail(f"the worker's native core {NATIVE} is missing (cargo build --workspace)")
        pytest.skip(f"the worker's native core {NATIVE} is not built (cargo build --workspace)")
    return str(NATIVE)
TIMEOUT_S = 10.0

# Keep the source tree free of __pycache__ (here and in the workers' env).
sys.dont_write_bytecode = True
sys.path.insert(0, str(BACKEND_DIR))
import triton_python_backend_utils as pb_utils  # noqa: E402

sys.dont_write_bytecode = False

# -- frames and tensors, written independently of the worker's code -----------

DATATYPES = {
    np.dtype(np.bool_): "BOOL",
    np.dtype(np.int32): "INT32",
    np.dtype(np.int64): "INT64",
    np.dtype(np.float32): "FP32",
    np.dtype(np.float64): "FP64",
    np.dtype(np.object_): "BYTES",
}
NUMPY_TYPES = {name: dtype for dtype, name in DATATYPES.items()}


def encode_bytes(items) -> bytes:
    out = b""
    for item in items:
        item = item if isinstance(item, bytes) else str(item).encode("utf-8")
        out += struct.pack("<I", len(item)) + item
    return out


def decode_bytes(data: bytes) -> list:
    items, offset = [], 0
    while offset < len(data):
        (length,) = struct.unpack_from("<I", data, offset)
        items.append(data[offset + 4 : offset + 4 + length])
        offset += 4 + length
    return items


def tensor(name: str, array) -> tuple[dict, bytes]:
    """(descriptor, bytes) of a tensor for a frame."""
    array = np.asarray(array)
    datatype = DATATYPES[array.dtype]
    data = encode_bytes(array.reshape(-1)) if datatype == "BYTES" else array.tobytes()
    return {"name": name, "datatype": datatype, "shape": list(array.shape), "size": len(data)}, data


def tensors_of(header: dict, body: bytes) -> dict:
    """name -> numpy array (BYTES: list of bytes) of a frame's tensors."""
    out, offset = {}, 0
    for desc in header["tensors"]:
        data = body[offset : offset + desc["size"]]
        offset += desc["size"]
        if desc["datatype"] == "BYTES":
            out[desc["name"]] = decode_bytes(data)
        else:
            out[desc["name"]] = np.frombuffer(data, NUMPY_TYPES[desc["datatype"]]).reshape(
                desc["shape"]
            )
    return out


class Worker:
    """A running worker.py and our end of its socket."""

    def __init__(
        self,
        model_dir: Path,
        fd: int | None = None,
        native: str | None = None,
        split: bool = True,
        answers: bool = False,
    ):
        """`fd`: the descriptor number the worker gets its socket on (as a
        busy server's may be high), else whatever the socket has here;
        `native`: the native core to pass as --native; `split`: a second
        socket pair for what the worker writes (`--write-fd`), else both
        directions on one; `answers`: a third for batches' answers
        (`--answer-fd`, as the server starts it: `recv_answer` reads it),
        else they come with the rest."""
        self.model_dir = model_dir
        self.read_bytes = 0  # read from the write socket (rsock)
        self.model_file = model_dir / "1" / "model.py"
        self.sock, child = socket.socketpair()
        self.sock.settimeout(TIMEOUT_S)
        self.rsock, child_out = socket.socketpair() if split else (self.sock, None)
        self.rsock.settimeout(TIMEOUT_S)
        self.asock, child_answers = socket.socketpair() if answers else (None, None)
        number = child.fileno()
        extra, fds = [], []
        if child_out is not None:
            extra, fds = ["--write-fd", str(child_out.fileno())], [child_out.fileno()]
        if child_answers is not None:
            self.asock.settimeout(TIMEOUT_S)
            extra += ["--answer-fd", str(child_answers.fileno())]
            fds.append(child_answers.fileno())
        if fd is not None:
            os.dup2(child.fileno(), fd, inheritable=False)
            number = fd
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-u", str(WORKER), "--fd", str(number)]
                + extra
                + (["--native", native] if native else []),
                pass_fds=[number, *fds],
                env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
            )
        finally:
            child.close()
            if child_out is not None:
                child_out.close()
            if child_answers is not None:
                child_answers.close()
            if fd is not None:
                os.close(fd)

    def send(self, header: dict, parts=()) -> None:
        header_bytes = json.dumps(header).encode()
        body = b"".join(parts)
        self.sock.sendall(struct.pack("<IQ", len(header_bytes), len(body)) + header_bytes + body)

    def _exactly(self, length: int, sock=None) -> bytes:
        sock = sock or self.rsock
        data = b""
        while len(data) < length:
            chunk = sock.recv(length - len(data))
            assert chunk, "the worker closed its socket"
            data += chunk
        if sock is self.rsock:
            self.read_bytes += length
        return data

    def recv(self, sock=None) -> tuple[dict, bytes]:
        header_length, body_length = struct.unpack("<IQ", self._exactly(12, sock))
        header = json.loads(self._exactly(header_length, sock))
        return header, self._exactly(body_length, sock)

    def recv_answer(self) -> tuple[dict, bytes]:
        """The next frame on the answer socket (`answers=True`)."""
        return self.recv(self.asock)

    def recv_header(self, kind: str) -> dict:
        header, _ = self.recv()
        assert header["kind"] == kind, header
        return header

    def init(self, name: str, decoupled: bool = False, config: dict | None = None) -> None:
        config = config or {"name": name, "max_batch_size": 0, "input": [], "output": []}
        self.send(
            {
                "kind": "init",
                "args": {
                    "model_config": json.dumps(config),
                    "model_instance_kind": "CPU",
                    "model_instance_name": name + "_0_0",
                    "model_instance_device_id": "0",
                    "model_repository": str(self.model_dir),
                    "model_version": "1",
                    "model_name": name,
                },
                **self.paths(),
                "decoupled": decoupled,
                "log_verbose": False,
            }
        )

    def paths(self) -> dict:
        return {
            "model_file": str(self.model_file),
            "module_name": "1.model",
            "version_dir": str(self.model_file.parent),
            "model_dir": str(self.model_dir),
        }

    def execute(self, *requests: dict) -> None:
        """Each request: {"rid", "inputs": {name: array}, optional "outputs"}."""
        headers, parts = [], []
        for request in requests:
            descs = []
            for name, array in request["inputs"].items():
                desc, data = tensor(name, array)
                descs.append(desc)
                parts.append(data)
            headers.append(
                {
                    "rid": request["rid"],
                    "id": "",
                    "correlation_id": 0,
                    "flags": 0,
                    "timeout": 0,
                    "parameters": "{}",
                    "outputs": request.get("outputs", ["OUT"]),
                    "inputs": descs,
                }
            )
        self.send({"kind": "execute", "requests": headers}, parts)

    def wait(self) -> int:
        return self.proc.wait(timeout=TIMEOUT_S)

    def close(self) -> None:
        self.sock.close()
        self.rsock.close()
        if self.asock is not None:
            self.asock.close()
        try:
            self.proc.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(params=["python", "native"])
def mode(request):
    """The worker's mode: "python", or "native" (with its native core)."""
    return request.param


@pytest.fixture
def spawn(tmp_path, mode):
    """spawn(source, name="probe") writes <tmp>/<name>/1/model.py and starts a
    worker for it (not yet initialized), in each mode."""
    workers = []
    native = native_core() if mode == "native" else None

    def start(source: str, name: str = "probe") -> Worker:
        model_dir = tmp_path / name
        (model_dir / "1").mkdir(parents=True)
        (model_dir / "1" / "model.py").write_text(textwrap.dedent(source))
        worker = Worker(model_dir, native=native)
        workers.append(worker)
        return worker

    yield start
    for worker in workers:
        worker.close()


@pytest.fixture
def ready(spawn):
    """ready(source, name="probe", decoupled=False): an initialized worker."""

    def start(source: str, name: str = "probe", decoupled: bool = False, config=None) -> Worker:
        worker = spawn(source, name)
        worker.init(name, decoupled, config)
        worker.recv_header("ready")
        return worker

    return start


def line_of(worker: Worker, marker: str) -> int:
    """The line number of the model file's line holding `marker`."""
    for number, line in enumerate(worker.model_file.read_text().splitlines(), 1):
        if marker in line:
            return number
    raise AssertionError(marker)


def batch_error(instance: str, message: str) -> str:
    return f"Failed to process the request(s) for model '{instance}', message: {message}"


HEADER = """
import json
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils
"""

# -- default mode ---------------------------------------------------------------

ADD_SUB = (
    HEADER
    + """
class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.dtypes = [
            pb_utils.triton_string_to_numpy(
                pb_utils.get_output_config_by_name(config, name)["data_type"]
            )
            for name in ("OUTPUT0", "OUTPUT1")
        ]
        assert all(isinstance(value, str) for value in args.values())
        assert pb_utils.get_model_dir() == args["model_repository"] + "/1"

    def execute(self, requests):
        responses = []
        for request in requests:
            in0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            in1 = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", (in0 + in1).astype(self.dtypes[0])),
                pb_utils.Tensor("OUTPUT1", (in0 - in1).astype(self.dtypes[1])),
            ]))
        return responses
"""
)
ADD_SUB_CONFIG = {
    "name": "add_sub",
    "max_batch_size": 0,
    "input": [
        {"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]},
        {"name": "INPUT1", "data_type": "TYPE_FP32", "dims": [4]},
    ],
    "output": [
        {"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]},
        {"name": "OUTPUT1", "data_type": "TYPE_FP32", "dims": [4]},
    ],
}


def test_add_sub_batch_of_two(ready):
    worker = ready(ADD_SUB, "add_sub", config=ADD_SUB_CONFIG)
    a = np.array([1, 2, 3, 4], np.float32)
    b = np.array([0.5, 0.5, 1, 1], np.float32)
    both = ["OUTPUT0", "OUTPUT1"]
    worker.execute(
        {"rid": 7, "inputs": {"INPUT0": a, "INPUT1": b}, "outputs": both},
        {"rid": 8, "inputs": {"INPUT0": b, "INPUT1": a}, "outputs": both},
    )
    for rid, x, y in ((7, a, b), (8, b, a)):
        header, body = worker.recv()
        assert (header["kind"], header["rid"], header["final"], header["error"]) == (
            "response",
            rid,
            True,
            None,
        )
        assert [d["datatype"] for d in header["tensors"]] == ["FP32", "FP32"]
        outputs = tensors_of(header, body)
        np.testing.assert_array_equal(outputs["OUTPUT0"], x + y)
        np.testing.assert_array_equal(outputs["OUTPUT1"], x - y)
    assert worker.recv_header("executed")["error"] is None


def test_requested_output_filtering(ready):
    worker = ready(ADD_SUB, "add_sub", config=ADD_SUB_CONFIG)
    a = np.ones(4, np.float32)
    worker.execute({"rid": 1, "inputs": {"INPUT0": a, "INPUT1": a}, "outputs": ["OUTPUT1"]})
    header, body = worker.recv()
    assert [d["name"] for d in header["tensors"]] == ["OUTPUT1"]
    np.testing.assert_array_equal(tensors_of(header, body)["OUTPUT1"], np.zeros(4))
    worker.recv_header("executed")


def test_bytes_round_trip(ready):
    worker = ready(
        HEADER
        + """
class TritonPythonModel:
    def execute(self, requests):
        text = requests[0].inputs()[0].as_numpy()
        seen = np.array([repr(text.tolist()), str(text.dtype), str(text.shape)], dtype=object)
        return [pb_utils.InferenceResponse([
            pb_utils.Tensor("OUT", text),
            pb_utils.Tensor("SEEN", seen),
            pb_utils.Tensor("MIXED", np.array(["unicode é", 3], dtype=object)),
            pb_utils.Tensor("FIXED", np.array([b"ab", b"c"], dtype=np.bytes_)),
            pb_utils.Tensor("EMPTY", np.array([], dtype=object)),
        ])]
"""
    )
    text = np.array(["info", "é"], dtype=object)
    outputs = ["OUT", "SEEN", "MIXED", "FIXED", "EMPTY"]
    worker.execute({"rid": 1, "inputs": {"IN": text}, "outputs": outputs})
    header, body = worker.recv()
    assert [(d["datatype"], d["shape"]) for d in header["tensors"]] == [
        ("BYTES", [2]),
        ("BYTES", [3]),
        ("BYTES", [2]),
        ("BYTES", [2]),
        ("BYTES", [0]),
    ]
    outputs = tensors_of(header, body)
    assert outputs["OUT"] == [b"info", b"\xc3\xa9"]
    assert outputs["SEEN"] == [b"[b'info', b'\\xc3\\xa9']", b"object", b"(2,)"]
    assert outputs["MIXED"] == ["unicode é".encode(), b"3"]
    assert outputs["FIXED"] == [b"ab", b"c"]
    assert outputs["EMPTY"] == []
    worker.recv_header("executed")


def test_request_accessors_and_triton_error_code(ready):
    worker = ready(
        HEADER
        + """
class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            facts = [request.request_id(), request.correlation_id(), request.flags(),
                     request.timeout(), request.parameters(),
                     sorted(request.requested_output_names()),
                     type(request.requested_output_names()).__name__, request.is_cancelled(),
                     pb_utils.get_input_tensor_by_name(request, "ABSENT")]
            out = pb_utils.Tensor("OUT", np.array([json.dumps(facts)], dtype=object))
            responses.append(pb_utils.InferenceResponse([out]))
        responses[0] = pb_utils.InferenceResponse(
            [], pb_utils.TritonError("nf", pb_utils.TritonError.NOT_FOUND))
        return responses
"""
    )
    worker.execute({"rid": 1, "inputs": {}}, {"rid": 2, "inputs": {}, "outputs": ["OUT", "X"]})
    header, _ = worker.recv()
    assert (header["rid"], header["error"], header["tensors"]) == (
        1,
        {"message": "nf", "code": "NOT_FOUND"},
        [],
    )
    header, body = worker.recv()
    facts = json.loads(tensors_of(header, body)["OUT"][0])
    assert facts == ["", 0, 0, 0, "{}", ["OUT", "X"], "set", False, None]
    worker.recv_header("executed")


RAISING = HEADER + """
def helper():
    raise ValueError("boom from probe")  # raise-here


class TritonPythonModel:
    def execute(self, requests):
        helper()  # call-here
"""


@pytest.mark.parametrize(
    "body, message",
    [
        ("return []", "Number of InferenceResponse objects do not match the number of "
         "InferenceRequest objects. InferenceRequest(s) size is:1, and "
         "InferenceResponse(s) size is:0\n"),
        ("return (pb_utils.InferenceResponse(),)",
         "Expected a list in the execute return, found type '<class 'tuple'>'."),
        ("return ['x']", "Expected an 'InferenceResponse' object in the execute function "
         "return list, found type '<class 'str'>'."),
    ],
)
def test_default_mode_return_errors(ready, body, message):
    worker = ready(HEADER + f"""
class TritonPythonModel:
    def execute(self, requests):
        {body}
""")
    worker.execute({"rid": 1, "inputs": {}})
    assert worker.recv_header("executed")["error"] == batch_error("probe_0_0", message)


def test_execute_raising_gives_traceback(ready):
    worker = ready(RAISING)
    worker.execute({"rid": 1, "inputs": {}}, {"rid": 2, "inputs": {}})
    file = worker.model_file
    expected = (
        "ValueError: boom from probe\n\nAt:\n"
        f"  {file}({line_of(worker, 'raise-here')}): helper\n"
        f"  {file}({line_of(worker, 'call-here')}): execute\n"
    )
    assert worker.recv_header("executed")["error"] == batch_error("probe_0_0", expected)
    # The worker carries on with the next batch.
    worker.execute({"rid": 3, "inputs": {}})
    assert worker.recv_header("executed")["error"].startswith("Failed to process")


def test_none_without_sender_fails_the_request(ready):
    worker = ready(HEADER + """
class TritonPythonModel:
    def execute(self, requests):
        return [None, pb_utils.InferenceResponse([])]
""")
    worker.execute({"rid": 1, "inputs": {}}, {"rid": 2, "inputs": {}})
    header = worker.recv_header("response")
    assert (header["rid"], header["final"], header["error"]) == (
        1,
        True,
        {
            "message": "Python model 'probe_0_0' returned no response for request 0 and "
            "did not use its response sender.",
            "code": "INTERNAL",
        },
    )
    header = worker.recv_header("response")
    assert (header["rid"], header["error"], header["tensors"]) == (2, None, [])
    assert "bare" not in header  # a response with no outputs
    assert worker.recv_header("executed")["error"] is None


def test_response_that_cannot_be_serialized_becomes_an_error(ready):
    worker = ready(HEADER + """
class TritonPythonModel:
    def execute(self, requests):
        broken = pb_utils.InferenceResponse([])
        broken.output_tensors().append("not a tensor")
        return [broken, pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.int32([5]))])]
""")
    worker.execute({"rid": 1, "inputs": {}}, {"rid": 2, "inputs": {}})
    header = worker.recv_header("response")
    assert header["rid"] == 1 and header["error"]["code"] == "INTERNAL"
    assert header["error"]["message"].startswith(
        "Failed to send a response of model 'probe_0_0', message: TypeError: expected a pb_utils.Tensor"
    )
    header, body = worker.recv()
    assert header["rid"] == 2 and tensors_of(header, body)["OUT"].tolist() == [5]
    assert worker.recv_header("executed")["error"] is None


def test_response_sender_rules_in_default_mode(ready):
    worker = ready(HEADER + """
class TritonPythonModel:
    def execute(self, requests):
        sender = requests[0].get_response_sender()
        texts = []

        def attempt(*args, **kwargs):
            try:
                sender.send(*args, **kwargs)
            except pb_utils.TritonModelException as exc:
                texts.append(str(exc))

        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        attempt()
        attempt(pb_utils.InferenceResponse([]), flags=4)
        attempt(flags=final)
        sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.int32([1]))]))
        attempt(pb_utils.InferenceResponse([]))
        sender.send(flags=final)
        attempt(flags=final)
        out = pb_utils.Tensor("OUT", np.array(texts, dtype=object))
        return [None, pb_utils.InferenceResponse([out])]
""")
    worker.execute({"rid": 1, "inputs": {}}, {"rid": 2, "inputs": {}})
    header, body = worker.recv()
    assert (header["rid"], header["final"]) == (1, True)
    assert tensors_of(header, body)["OUT"].tolist() == [1]
    header, body = worker.recv()
    assert header["rid"] == 2
    assert [t.decode() for t in tensors_of(header, body)["OUT"]] == [
        "Inference Response object must be provided when the response flags is set to zero.",
        "Unable to send response. Unsupported flag provided.",
        "Unable to send response. Non-decoupled model cannot send complete final before "
        "sending a response.",
        "Unable to send response. Non-decoupled model cannot send more than one response.",
        "Unable to send response. Response sender has been closed.",
    ]
    assert worker.recv_header("executed")["error"] is None


def test_dropped_sender_fails_the_request(ready):
    worker = ready(HEADER + """
class TritonPythonModel:
    def execute(self, requests):
        requests[0].get_response_sender()
        return None
""")
    worker.execute({"rid": 4, "inputs": {}})
    assert worker.recv_header("executed")["error"] is None
    header = worker.recv_header("response")
    assert (header["rid"], header["final"], header["error"]["message"]) == (
        4,
        True,
        "Python model 'probe_0_0' dropped the response sender of request 0 without "
        "sending the final flag.",
    )


def test_initialize_error(spawn):
    worker = spawn(HEADER + """
class TritonPythonModel:
    def initialize(self, args):
        lorem_ipsum  # here
""", "init_error")
    worker.init("init_error")
    header = worker.recv_header("error")
    assert header["message"] == (
        "NameError: name 'lorem_ipsum' is not defined\n\nAt:\n"
        f"  {worker.model_file}({line_of(worker, '# here')}): initialize\n"
    )
    assert worker.wait() == 1


def test_bls_is_refused_in_initialize(ready):
    worker = ready(HEADER + """
class TritonPythonModel:
    def initialize(self, args):
        request = pb_utils.InferenceRequest(
            model_name="add_sub", inputs=[], requested_output_names=["OUTPUT0"])
        try:
            request.exec()
        except pb_utils.TritonModelException as exc:
            self.text = str(exc)

    def execute(self, requests):
        out = pb_utils.Tensor("OUT", np.array([self.text], dtype=object))
        return [pb_utils.InferenceResponse([out])]
""")
    worker.execute({"rid": 1, "inputs": {}})
    header, body = worker.recv()  # no `bls` frame came before
    text = b"BLS is only supported during the 'execute' function."
    assert tensors_of(header, body)["OUT"] == [text]


# -- decoupled mode ---------------------------------------------------------------


def test_decoupled_responses_from_a_thread(ready):
    worker = ready(HEADER + """
class TritonPythonModel:
    def execute(self, requests):
        sender = requests[0].get_response_sender()

        def respond():
            time.sleep(0.1)
            for i in range(3):
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.int32([i]))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

        threading.Thread(target=respond).start()
        return None
""", decoupled=True)
    worker.execute({"rid": 5, "inputs": {}})
    assert worker.recv_header("executed")["error"] is None
    for i in range(3):
        header, body = worker.recv()
        assert (header["kind"], header["rid"], header["final"]) == ("response", 5, False)
        assert "bare" not in header
        assert tensors_of(header, body)["OUT"].tolist() == [i]
    header = worker.recv_header("response")
    assert (header["rid"], header["final"], header["error"]) == (5, True, None)
    assert header["tensors"] == [] and header["bare"] is True


def test_decoupled_returning_a_list_fails(ready):
    worker = ready(HEADER + """
class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([])]
""", "decoupled_return", decoupled=True)
    worker.execute({"rid": 1, "inputs": {}})
    assert worker.recv_header("executed")["error"] == batch_error(
        "decoupled_return_0_0",
        "Python model 'decoupled_return_0_0' is using the decoupled mode and the execute "
        "function must return None.",
    )


def test_decoupled_request_never_answered_fails(ready):
    worker = ready(HEADER + """
class TritonPythonModel:
    def execute(self, requests):
        return None
""", decoupled=True)
    worker.execute({"rid": 9, "inputs": {}})
    assert worker.recv_header("executed")["error"] is None
    header = worker.recv_header("response")
    assert (header["rid"], header["final"], header["error"]["code"]) == (9, True, "INTERNAL")
    assert "returned no response for request 0" in header["error"]["message"]


def test_cancel_reaches_a_running_request(ready):
    """A `cancel` that comes once the request runs turns its
    `is_cancelled()` True (the model says it runs with a first response)."""
    worker = ready(HEADER + """
class TritonPythonModel:
    def execute(self, requests):
        request = requests[0]
        sender = request.get_response_sender()
        sender.send(pb_utils.InferenceResponse(
            [pb_utils.Tensor("OUT", np.array(["running"], dtype=object))]))
        deadline = time.time() + 5
        while not sender.is_cancelled() and time.time() < deadline:
            time.sleep(0.01)
        text = np.array([str(request.is_cancelled())], dtype=object)
        sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", text)]),
                    pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
""", decoupled=True)
    worker.execute({"rid": 3, "inputs": {}})
    header, body = worker.recv()
    assert (header["rid"], header["final"]) == (3, False)
    assert tensors_of(header, body)["OUT"] == [b"running"]
    worker.send({"kind": "cancel", "rid": 3})
    header, body = worker.recv()
    assert (header["rid"], header["final"]) == (3, True)
    assert tensors_of(header, body)["OUT"] == [b"True"]
    worker.recv_header("executed")
    worker.send({"kind": "cancel", "rid": 3})  # already answered: ignored


def test_a_request_cancelled_before_its_batch_runs_is_left_out(ready):
    """A `cancel` the worker has read before it runs the batch (it came
    behind the `execute` frame): that request is not passed to execute and
    ends CANCELLED; the others run. All cancelled: execute is not called."""
    worker = ready(HEADER + """
class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUT", np.array([r.request_id() or str(len(requests))], dtype=object))])
            for r in requests]
""")
    # Both frames in one write: the worker reads the cancel with the batch.
    headers = []
    for rid in (1, 2):
        headers.append({"rid": rid, "id": "", "correlation_id": 0, "flags": 0, "timeout": 0,
                        "parameters": "{}", "outputs": ["OUT"], "inputs": []})
    frames = b""
    for header in ({"kind": "execute", "requests": headers}, {"kind": "cancel", "rid": 1}):
        text = json.dumps(header).encode()
        frames += struct.pack("<IQ", len(text), 0) + text
    worker.sock.sendall(frames)
    header, _ = worker.recv()
    assert (header["kind"], header["rid"], header["final"]) == ("response", 1, True)
    assert header["error"] == {"message": "", "code": "CANCELLED"}
    header, body = worker.recv()
    assert (header["rid"], header["error"]) == (2, None)
    assert tensors_of(header, body)["OUT"] == [b"1"], "execute got the request left"
    assert worker.recv_header("executed")["error"] is None

    frames = b""
    for header in ({"kind": "execute", "requests": headers[:1]}, {"kind": "cancel", "rid": 1}):
        text = json.dumps(header).encode()
        frames += struct.pack("<IQ", len(text), 0) + text
    worker.sock.sendall(frames)
    header, _ = worker.recv()
    assert (header["rid"], header["error"]["code"]) == (1, "CANCELLED")
    assert worker.recv_header("executed")["error"] is None


def test_decoupled_async_execute_failure_fails_open_requests(ready):
    worker = ready(HEADER + """
import asyncio

class TritonPythonModel:
    async def execute(self, requests):
        await asyncio.sleep(0.1)
        requests[0].get_response_sender().send(
            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        raise RuntimeError("late")  # here
""", decoupled=True)
    worker.execute({"rid": 1, "inputs": {}}, {"rid": 2, "inputs": {}})
    assert worker.recv_header("executed")["error"] is None
    header = worker.recv_header("response")
    assert (header["rid"], header["final"], header["error"]) == (1, True, None)
    # The failure is logged (no client may get it), then fails the rest.
    header = worker.recv_header("log")
    assert header["level"] == "E" and "RuntimeError: late" in header["message"], header
    header = worker.recv_header("response")
    assert (header["rid"], header["final"]) == (2, True)
    assert header["error"]["message"] == batch_error(
        "probe_0_0",
        f"RuntimeError: late\n\nAt:\n  {worker.model_file}({line_of(worker, '# here')}): execute\n",
    )


# -- BLS ------------------------------------------------------------------------

BLS = HEADER + """
class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            bls = pb_utils.InferenceRequest(
                model_name="add_sub",
                inputs=[pb_utils.get_input_tensor_by_name(request, "INPUT0")],
                requested_output_names=["OUTPUT0"],
                parameters={"p": 1},
            )
            reply = bls.exec()
            if reply.has_error():
                responses.append(pb_utils.InferenceResponse(error=reply.error()))
            else:
                out = pb_utils.get_output_tensor_by_name(reply, "OUTPUT0").as_numpy()
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out * 2)]))
        return responses
"""


def bls_reply(worker: Worker, bid: int, final: bool, error=None, **outputs) -> None:
    """A `bls_response` frame carrying `outputs` (name=array)."""
    descs, parts = [], []
    for name, array in outputs.items():
        desc, data = tensor(name, array)
        descs.append(desc)
        parts.append(data)
    header = {"kind": "bls_response", "bid": bid, "final": final, "error": error}
    worker.send({**header, "tensors": descs}, parts)


def test_bls_exec(ready):
    worker = ready(BLS, "bls_sync")
    a = np.array([1, 2], np.float32)
    worker.execute({"rid": 1, "inputs": {"INPUT0": a}})
    header, body = worker.recv()
    assert header["kind"] == "bls"
    assert {k: header[k] for k in ("model", "version", "outputs", "decoupled", "parameters")} == {
        "model": "add_sub",
        "version": "",
        "outputs": ["OUTPUT0"],
        "decoupled": False,
        "parameters": {"p": 1},
    }
    assert tensors_of({"tensors": header["inputs"]}, body)["INPUT0"].tolist() == [1, 2]
    bls_reply(worker, header["bid"], True, OUTPUT0=np.array([10, 20], np.float32))
    header, body = worker.recv()
    assert tensors_of(header, body)["OUT"].tolist() == [20, 40]
    worker.recv_header("executed")

    # An error reply becomes a response with has_error().
    worker.execute({"rid": 2, "inputs": {"INPUT0": a}})
    bid = worker.recv_header("bls")["bid"]
    error = {"message": "Model add_sub - Error when running inference: nope", "code": "NOT_FOUND"}
    bls_reply(worker, bid, True, error=error)
    header = worker.recv_header("response")
    assert (header["rid"], header["error"]) == (2, error)
    worker.recv_header("executed")


def test_bls_decoupled_iterator(ready):
    worker = ready(HEADER + """
class TritonPythonModel:
    def execute(self, requests):
        bls = pb_utils.InferenceRequest(
            model_name="square_int32", inputs=[pb_utils.Tensor("IN", np.int32([2]))],
            requested_output_names=["OUT"])
        seen = []
        for reply in bls.exec(decoupled=True):
            out = pb_utils.get_output_tensor_by_name(reply, "OUT")
            seen.append(-1 if out is None else int(out.as_numpy()[0]))
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.int32(seen))])]
""")
    worker.execute({"rid": 1, "inputs": {}})
    header = worker.recv_header("bls")
    assert header["decoupled"] is True
    for value in (2, 2):
        bls_reply(worker, header["bid"], False, OUT=np.int32([value]))
    bls_reply(worker, header["bid"], True)
    header, body = worker.recv()
    assert tensors_of(header, body)["OUT"].tolist() == [2, 2, -1]
    worker.recv_header("executed")


def test_async_execute_with_async_exec(ready):
    worker = ready(HEADER + """
import asyncio

class TritonPythonModel:
    async def execute(self, requests):
        calls = [
            pb_utils.InferenceRequest(
                model_name=name, inputs=[pb_utils.Tensor("IN", np.int32([1]))],
                requested_output_names=["OUT"]).async_exec()
            for name in ("first", "second")
        ]
        replies = await asyncio.gather(*calls)
        values = [int(pb_utils.get_output_tensor_by_name(r, "OUT").as_numpy()[0]) for r in replies]
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.int32(values))])]
""", "bls_async")
    worker.execute({"rid": 1, "inputs": {}})
    calls = {}
    for _ in range(2):  # both calls are out before either is answered
        header = worker.recv_header("bls")
        calls[header["model"]] = header["bid"]
    for model, value in (("second", 22), ("first", 11)):
        bls_reply(worker, calls[model], True, OUT=np.int32([value]))
    header, body = worker.recv()
    assert tensors_of(header, body)["OUT"].tolist() == [11, 22]
    assert worker.recv_header("executed")["error"] is None


# -- auto_complete, logging, shutdown --------------------------------------------


def auto_complete(worker: Worker, config: dict) -> None:
    worker.send({"kind": "auto_complete", "config": config, **worker.paths()})


def test_auto_complete(spawn):
    worker = spawn(HEADER + """
class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        config.set_max_batch_size(4)
        config.add_input({"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]})
        config.add_output({"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]})
        config.set_dynamic_batching()
        return config
""", "batch_auto_complete")
    auto_complete(
        worker, {"name": "batch_auto_complete", "max_batch_size": 0, "input": [], "output": []}
    )
    assert worker.recv_header("config")["config"] == {
        "name": "batch_auto_complete",
        "max_batch_size": 4,
        "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
        "dynamic_batching": {},
    }
    assert worker.wait() == 0


def test_auto_complete_must_return_a_model_config(spawn):
    worker = spawn(HEADER + """
class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        return config.as_dict()
""", "ac")
    auto_complete(worker, {"name": "ac", "max_batch_size": 0, "input": [], "output": []})
    assert worker.recv_header("error")["message"] == (
        "auto_complete_config function in model 'ac' must return a valid pb.ModelConfig object."
    )
    assert worker.wait() != 0


def test_model_config_rules():
    config = pb_utils.ModelConfig(json.dumps({
        "name": "m", "max_batch_size": 8, "sequence_batching": {},
        "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [4]}], "output": [],
    }))
    with pytest.raises(ValueError):
        config.set_max_batch_size(4)
    config.set_max_batch_size(16)
    with pytest.raises(ValueError):
        config.set_dynamic_batching()
    with pytest.raises(ValueError):
        config.add_input({"name": "IN", "data_type": "TYPE_INT32", "dims": [4]})
    with pytest.raises(ValueError):
        config.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [2]})
    with pytest.raises(ValueError):
        config.add_input({"name": "NO_DIMS", "data_type": "TYPE_FP32"})
    config.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [4], "optional": True})
    config.set_model_transaction_policy({"decoupled": True})
    with pytest.raises(ValueError):
        config.set_model_transaction_policy({"decoupled": False})
    assert config.as_dict()["input"] == [
        {"name": "IN", "data_type": "TYPE_FP32", "dims": [4], "optional": True}
    ]
    assert pb_utils.using_decoupled_model_transaction_policy(config.as_dict())


def test_tensor_rules():
    transposed = np.arange(6, dtype=np.int32).reshape(2, 3).T
    t = pb_utils.Tensor("T", transposed)
    assert t.shape() == [3, 2] and t.as_numpy().flags.c_contiguous
    np.testing.assert_array_equal(t.as_numpy(), transposed)
    with pytest.raises(pb_utils.TritonModelException, match="^NumPy dtype is not supported.$"):
        pb_utils.Tensor("U", np.array(["text"]))
    with pytest.raises(pb_utils.TritonModelException, match="^NumPy dtype is not supported.$"):
        pb_utils.Tensor("C", np.zeros(2, np.complex64))
    assert pb_utils.numpy_to_triton_type(np.float32) == 11
    assert pb_utils.numpy_to_triton_type(np.object_) == 13
    assert pb_utils.triton_to_numpy_type(8) is np.int32
    encoded = pb_utils.serialize_byte_tensor(np.array([b"a", "é", 3], dtype=object))
    assert encoded.item() == encode_bytes([b"a", "é", 3])
    assert pb_utils.deserialize_bytes_tensor(encoded.item()).tolist() == [b"a", "é".encode(), b"3"]


def test_logger(ready):
    worker = ready(HEADER + """
class TritonPythonModel:
    def execute(self, requests):
        pb_utils.Logger.log_info("info line")  # info
        pb_utils.Logger.log_warn("warn line")
        pb_utils.Logger.log_error("error line")
        pb_utils.Logger.log_verbose("verbose line")
        pb_utils.Logger.log("plain", pb_utils.Logger.WARNING)
        return [pb_utils.InferenceResponse([])]
""")
    worker.execute({"rid": 1, "inputs": {}})
    first = line_of(worker, "# info")
    logs = [worker.recv_header("log") for _ in range(5)]
    assert [(h["level"], h["file"], h["line"], h["message"]) for h in logs] == [
        ("I", "model.py", first, "info line"),
        ("W", "model.py", first + 1, "warn line"),
        ("E", "model.py", first + 2, "error line"),
        ("V", "model.py", first + 3, "verbose line"),
        ("W", "model.py", first + 4, "plain"),
    ]
    worker.recv_header("response")
    worker.recv_header("executed")


@pytest.mark.parametrize("mode", ["python", "native"])
def test_is_cancelled_works_on_a_socket_numbered_past_1024(tmp_path, mode):
    # A busy server's socket may get a high descriptor number; select()
    # cannot take one past 1023, so is_cancelled() must not rely on it.
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1600:
        pytest.skip(f"the hard open-files limit is {hard}")
    model_dir = tmp_path / "probe"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "1" / "model.py").write_text(HEADER + """
class TritonPythonModel:
    def execute(self, requests):
        flag = requests[0].is_cancelled()
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.int32([int(flag)]))])]
""")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1600), hard))
    try:
        worker = Worker(model_dir, fd=1500, native=native_core() if mode == "native" else None)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        worker.init("probe")
        worker.recv_header("ready")
        worker.execute({"rid": 1, "inputs": {}})
        header, body = worker.recv()
        assert header["kind"] == "response" and header["error"] is None, header
        assert tensors_of(header, body)["OUT"].tolist() == [0]
        worker.recv_header("executed")
    finally:
        worker.close()


def test_a_log_sent_in_the_middle_of_a_write(ready, mode):
    # The garbage collector may run a model's __del__ (which logs) on the
    # thread that is writing a frame, while it holds the write lock: the
    # nested frame must not deadlock that thread. The model stands in for
    # the collector by logging from inside the socket write itself.
    if mode == "native":
        pytest.skip("the native core writes with no Python code running: nothing can come between")
    worker = ready(HEADER + """
class Writing:
    def __init__(self, sock):
        self._sock = sock
        self.logged = False

    def __getattr__(self, name):
        return getattr(self._sock, name)

    def sendmsg(self, buffers):
        if not self.logged:
            self.logged = True
            pb_utils.Logger.log_info("logged while writing")
        return self._sock.sendmsg(buffers)


class TritonPythonModel:
    def execute(self, requests):
        runtime = pb_utils._runtime
        runtime.asock = Writing(runtime.asock)  # the answer's write
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.int32([7]))])]
""")
    worker.execute({"rid": 1, "inputs": {}})
    seen = {}
    while len(seen) < 3:
        header, body = worker.recv()
        seen[header["kind"]] = (header, body)
    assert set(seen) == {"response", "executed", "log"}, seen
    header, body = seen["response"]
    assert tensors_of(header, body)["OUT"].tolist() == [7]
    assert seen["log"][0]["message"] == "logged while writing"


@pytest.mark.parametrize("raises", [False, True])
def test_finalize(ready, raises):
    worker = ready(HEADER + f"""
class TritonPythonModel:
    def execute(self, requests):
        return []

    def finalize(self):
        if {raises}:
            raise RuntimeError("cleanup failed")
""")
    worker.send({"kind": "finalize"})
    if raises:
        header = worker.recv_header("log")
        assert header["level"] == "E" and "RuntimeError: cleanup failed" in header["message"]
    worker.recv_header("finalized")
    assert worker.wait() == 0


def test_end_of_file_ends_the_worker(ready):
    # A non-daemon thread of the model must not keep the process alive.
    worker = ready(HEADER + """
class TritonPythonModel:
    def initialize(self, args):
        threading.Thread(target=time.sleep, args=(60,)).start()

    def execute(self, requests):
        return []
""")
    started = time.monotonic()
    worker.sock.close()
    assert worker.wait() == 0
    assert time.monotonic() - started < 5


# -- the native core --------------------------------------------------------------

IDENTITY = HEADER + """
class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            tensors = request.inputs()
            out.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", tensors[0].as_numpy()),
                 pb_utils.Tensor("SHAPE", np.int64(tensors[0].as_numpy().shape))]))
        return out
"""


@pytest.mark.parametrize("elements", [0, 3, 300_000, 1_500_000])
def test_tensors_cross_whole_at_any_size(ready, elements):
    # Small frames come in one read; bodies past the receive buffer (64 KB)
    # are read straight into place, and responses written from the arrays.
    worker = ready(IDENTITY)
    data = np.arange(elements, dtype=np.float32).reshape(-1, 3) if elements else np.zeros((0, 3), np.float32)
    other = np.arange(7, dtype=np.int64)
    worker.execute(
        {"rid": 1, "inputs": {"IN": data}, "outputs": ["OUT", "SHAPE"]},
        {"rid": 2, "inputs": {"IN": other}, "outputs": ["OUT"]},
    )
    got = {}
    for _ in range(2):
        header, body = worker.recv()
        assert header["kind"] == "response" and header["error"] is None, header
        got[header["rid"]] = tensors_of(header, body)
    worker.recv_header("executed")
    assert got[1]["OUT"].dtype == np.float32 and np.array_equal(got[1]["OUT"], data)
    assert got[1]["SHAPE"].tolist() == list(data.shape)
    assert set(got[2]) == {"OUT"} and got[2]["OUT"].tolist() == other.tolist()


def test_the_native_core_is_used(ready, mode):
    worker = ready(IDENTITY)
    maps = Path(f"/proc/{worker.proc.pid}/maps").read_text()
    assert ("lib_trtis_native.so" in maps) == (mode == "native")


def test_a_native_core_that_does_not_load_leaves_the_worker_in_pure_python(tmp_path):
    model_dir = tmp_path / "probe"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "1" / "model.py").write_text(IDENTITY)
    bogus = tmp_path / "lib_trtis_native.so"
    bogus.write_bytes(b"not a shared library")
    worker = Worker(model_dir, native=str(bogus))
    try:
        log = worker.recv_header("log")
        assert log["level"] == "W", log
        assert f"native core {bogus} did not load" in log["message"], log
        assert "runs in pure Python" in log["message"], log
        worker.init("probe")
        worker.recv_header("ready")
        worker.execute({"rid": 1, "inputs": {"IN": np.int32([5, 6])}, "outputs": ["OUT"]})
        header, body = worker.recv()
        assert tensors_of(header, body)["OUT"].tolist() == [5, 6]
        worker.recv_header("executed")
    finally:
        worker.close()


def test_a_tensor_that_does_not_fit_its_frame_fails_the_batch_and_the_worker_lives(ready):
    # The server never sends one (it checks every input first); if it did,
    # the batch fails and the worker serves on, in both modes.
    worker = ready(IDENTITY)
    desc, data = tensor("IN", np.float32([1, 2, 3]))
    desc["shape"] = [5]  # 20 bytes claimed, 12 sent
    request = {"rid": 1, "id": "", "correlation_id": 0, "flags": 0, "timeout": 0,
               "parameters": "{}", "outputs": ["OUT"], "inputs": [desc]}
    worker.send({"kind": "execute", "requests": [request]}, [data])
    header = worker.recv_header("executed")
    assert header["error"].startswith("Failed to process the request(s) for model 'probe_0_0', message: "), header
    worker.execute({"rid": 2, "inputs": {"IN": np.int32([5, 6])}, "outputs": ["OUT"]})
    header, body = worker.recv()
    assert header["rid"] == 2 and tensors_of(header, body)["OUT"].tolist() == [5, 6]
    worker.recv_header("executed")


@pytest.mark.parametrize("mode", ["python", "native"])
def test_both_directions_on_one_socket(tmp_path, mode):
    # Without --write-fd the worker writes where it reads.
    model_dir = tmp_path / "probe"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "1" / "model.py").write_text(IDENTITY)
    worker = Worker(model_dir, native=native_core() if mode == "native" else None, split=False)
    try:
        worker.init("probe")
        worker.recv_header("ready")
        worker.execute({"rid": 1, "inputs": {"IN": np.int32([7])}, "outputs": ["OUT"]})
        header, body = worker.recv()
        assert tensors_of(header, body)["OUT"].tolist() == [7]
        worker.recv_header("executed")
    finally:
        worker.close()


@pytest.mark.parametrize("mode", ["python", "native"])
def test_batch_answers_on_their_own_socket(tmp_path, mode):
    # As the server starts it (--answer-fd): a batch's returned responses and
    # its `executed` come on the answer socket; everything else (the log
    # line, a response sender's answer) on the write socket, and `executed`
    # says how many bytes went there before it (`after`).
    model_dir = tmp_path / "probe"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "1" / "model.py").write_text(HEADER + """
class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            array = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            response = pb_utils.InferenceResponse([pb_utils.Tensor("OUT", array)])
            if int(array[0]) < 0:
                pb_utils.Logger.log_info("by the sender")
                request.get_response_sender().send(
                    response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                response = None
            out.append(response)
        return out
""")
    worker = Worker(model_dir, native=native_core() if mode == "native" else None, answers=True)
    try:
        worker.init("probe")
        worker.recv_header("ready")
        worker.execute({"rid": 1, "inputs": {"IN": np.int32([7])}, "outputs": ["OUT"]})
        header, body = worker.recv_answer()
        assert header["kind"] == "response" and header["rid"] == 1, header
        assert tensors_of(header, body)["OUT"].tolist() == [7]
        header, _ = worker.recv_answer()
        assert header["kind"] == "executed" and header["error"] is None, header
        assert header["after"] == worker.read_bytes  # the `ready` frame
        worker.execute(
            {"rid": 2, "inputs": {"IN": np.int32([-1])}, "outputs": ["OUT"]},
            {"rid": 3, "inputs": {"IN": np.int32([8])}, "outputs": ["OUT"]},
        )
        header, _ = worker.recv()
        assert header["kind"] == "log" and header["message"] == "by the sender", header
        header, body = worker.recv()
        assert header["kind"] == "response" and header["rid"] == 2, header
        assert tensors_of(header, body)["OUT"].tolist() == [-1]
        header, body = worker.recv_answer()
        assert header["kind"] == "response" and header["rid"] == 3, header
        header, _ = worker.recv_answer()
        assert header["kind"] == "executed" and header["error"] is None, header
        assert header["after"] == worker.read_bytes
        # An error `executed` comes the same way.
        worker.execute({"rid": 4, "inputs": {}, "outputs": ["OUT"]})
        header, _ = worker.recv_answer()
        assert header["kind"] == "executed" and "Failed to process" in header["error"], header
        assert header["after"] == worker.read_bytes
    finally:
        worker.close()


@pytest.mark.parametrize("body_length", [2**63, 2**64 - 1])
def test_a_frame_claiming_an_impossible_body_ends_the_worker_cleanly(ready, body_length):
    # A protocol violation: the worker exits 2 (it does not crash).
    worker = ready(IDENTITY)
    header = json.dumps({"kind": "execute", "requests": []}).encode()
    worker.sock.sendall(struct.pack("<IQ", len(header), body_length) + header + b"x" * 4096)
    assert worker.wait() == 2


# -- names and strings: every kind Triton's binding takes ----------------------

# What a name or string argument may be in Triton's pb_utils (pybind11's
# std::string): str and bytes, numpy's str_ and bytes_ scalars (the items of
# a BYTES tensor's as_numpy() are bytes) and bytearray.
STRING_KINDS = [
    pytest.param(lambda s: s, id="str"),
    pytest.param(lambda s: s.encode(), id="bytes"),
    pytest.param(lambda s: bytearray(s.encode()), id="bytearray"),
    pytest.param(lambda s: np.str_(s), id="numpy.str_"),
    pytest.param(lambda s: np.bytes_(s.encode()), id="numpy.bytes_"),
    pytest.param(lambda s: np.array([s.encode()], dtype=object)[0], id="BYTES item"),
]


def plain(value, text):
    """`value` is the plain str `text` (not a subclass, not bytes)."""
    return type(value) is str and value == text


@pytest.mark.parametrize("kind", STRING_KINDS)
def test_pb_utils_takes_every_string_kind_for_names(kind):
    key = kind("key")
    key = bytes(key) if isinstance(key, bytearray) else key  # a dict key is hashable
    request = pb_utils.InferenceRequest(
        model_name=kind("add_sub"),
        inputs=[pb_utils.Tensor(kind("INPUT0"), np.float32([1]))],
        requested_output_names=[kind("OUTPUT0"), "OUTPUT1"],
        request_id=kind("id-1"),
        correlation_id=kind("seq"),
        parameters={key: kind("value"), "n": 1},
    )
    assert plain(request._model_name, "add_sub")
    assert plain(request.inputs()[0].name(), "INPUT0")
    assert request.requested_output_names() == {"OUTPUT0", "OUTPUT1"}
    assert all(type(n) is str for n in request._outputs)
    assert plain(request.request_id(), "id-1")
    assert plain(request.correlation_id(), "seq")
    assert json.loads(request.parameters()) == {"key": "value", "n": 1}
    assert pb_utils.get_input_tensor_by_name(request, kind("INPUT0")) is request.inputs()[0]
    response = pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", np.int32([1]))])
    assert pb_utils.get_output_tensor_by_name(response, kind("OUTPUT0")) is not None
    config = {"input": [{"name": "INPUT0"}], "output": [{"name": "OUTPUT0"}]}
    assert pb_utils.get_input_config_by_name(config, kind("INPUT0")) == {"name": "INPUT0"}
    assert pb_utils.get_output_config_by_name(config, kind("OUTPUT0")) == {"name": "OUTPUT0"}
    assert plain(pb_utils.TritonError(kind("bad")).message(), "bad")


def test_pb_utils_refuses_what_is_not_a_string():
    tensor = pb_utils.Tensor("IN", np.int32([1]))
    for bad in (3, 1.5, ["add_sub"], object()):
        with pytest.raises(TypeError, match="model_name must be a str or bytes"):
            pb_utils.InferenceRequest(
                model_name=bad, inputs=[tensor], requested_output_names=["OUT"]
            )
        with pytest.raises(TypeError, match="Tensor name must be a str or bytes"):
            pb_utils.Tensor(bad, np.int32([1]))
    with pytest.raises(TypeError, match="requested output name must be a str or bytes"):
        pb_utils.InferenceRequest(model_name="m", inputs=[], requested_output_names=[1])
    with pytest.raises(TypeError, match="a list of names"):
        pb_utils.InferenceRequest(model_name="m", inputs=[], requested_output_names="OUT")
    # Integers of any kind remain correlation ids; a lookup by a name that
    # is not a string finds nothing (as in Triton).
    request = pb_utils.InferenceRequest(
        model_name="m", inputs=[tensor], requested_output_names=[], correlation_id=np.uint64(7)
    )
    assert request.correlation_id() == 7 and type(request.correlation_id()) is int
    assert pb_utils.get_input_tensor_by_name(request, 3) is None


def test_logger_decodes_bytes_messages(capsys):
    pb_utils.Logger.log_info(b"caf\xc3\xa9")
    pb_utils.Logger.log_warn(np.bytes_(b"plain"))
    err = capsys.readouterr().err
    assert "] café\n" in err and "] plain\n" in err, err


def test_a_model_may_pass_bytes_names_everywhere(ready):
    """Names taken from a BYTES input, passed on undecoded (as Triton's
    examples pass `as_numpy()[0]`): the response's tensors carry the names
    as text, in both modes (the native core answers these)."""
    worker = ready(
        HEADER
        + """
class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            names = pb_utils.get_input_tensor_by_name(request, b"NAMES").as_numpy()
            pb_utils.Logger.log_info(names[1])
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor(names[0], np.int32([1])),
                pb_utils.Tensor(np.bytes_(b"OUT2"), np.int32([2])),
                pb_utils.Tensor(np.str_("OUT3"), np.int32([3])),
            ]))
        return responses
"""
    )
    names = np.array([b"OUT1", "logged é".encode()], dtype=object)
    worker.execute({"rid": 1, "inputs": {"NAMES": names}, "outputs": ["OUT1", "OUT2", "OUT3"]})
    header, _ = worker.recv()
    assert header["kind"] == "log" and header["message"] == "logged é", header
    header, body = worker.recv()
    assert header["kind"] == "response" and header["error"] is None, header
    assert {k: v.tolist() for k, v in tensors_of(header, body).items()} == {
        "OUT1": [1],
        "OUT2": [2],
        "OUT3": [3],
    }
    worker.recv_header("executed")
