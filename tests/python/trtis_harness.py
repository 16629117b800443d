"""Runs a real `trtis serve` process for the protocol tests, builds the test
model repository, and sends raw HTTP requests where tritonclient would hide
the status or refuse to send a malformed body.

Every server gets `--grpc-address 127.0.0.1 --grpc-port 0` (unless the test
passes its own), so no test ever binds Triton's default gRPC port 8001; a
binary whose `serve --help` has no `--grpc-port` yet gets no gRPC flags.
`start()` waits for Triton's log lines of every listener that is on
(`Started HTTPService at ...`, `Started GRPCInferenceService at ...`).

Environment:
  TRTIS_BIN              the trtis executable (default target/debug/trtis)
  TRTIS_SERVE_EXTRA_ARGS extra arguments appended to every `trtis serve`
                         (shell-split), e.g. to turn off other listeners
"""

from __future__ import annotations

import http.client
import itertools
import json
import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = REPO_ROOT / "examples" / "model_repository"

STARTUP_TIMEOUT_S = 30.0
SHUTDOWN_TIMEOUT_S = 10.0

# Triton's log lines, which trtis prints too (stderr or stdout), in either
# order (Triton prints the gRPC one first).
STARTED_RE = re.compile(r"Started HTTPService at (\S+):(\d+)")
GRPC_STARTED_RE = re.compile(r"Started GRPCInferenceService at (\S+):(\d+)")


def trtis_bin() -> Path:
    return Path(os.environ.get("TRTIS_BIN", REPO_ROOT / "target" / "debug" / "trtis"))


_GRPC_FLAG_CACHE: dict[str, bool] = {}


def grpc_supported() -> bool:
    """Whether this `trtis serve` has the gRPC frontend (`--grpc-port` in its
    help). Cached per binary path and modification time."""
    binary = trtis_bin()
    try:
        key = f"{binary}:{binary.stat().st_mtime_ns}"
    except OSError:
        return False
    if key not in _GRPC_FLAG_CACHE:
        try:
            out = subprocess.run(
                [str(binary), "serve", "--help"],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=30,
            )
            text = (out.stdout + out.stderr).decode("utf-8", errors="replace")
            _GRPC_FLAG_CACHE[key] = "--grpc-port" in text
        except (OSError, subprocess.TimeoutExpired):
            _GRPC_FLAG_CACHE[key] = False
    return _GRPC_FLAG_CACHE[key]


_SERVE_HELP_CACHE: dict[str, str] = {}


def serve_help_text() -> str:
    """`trtis serve --help` of the binary under test ("" when it cannot be
    run). Cached per binary path and modification time."""
    binary = trtis_bin()
    try:
        key = f"{binary}:{binary.stat().st_mtime_ns}"
    except OSError:
        return ""
    if key not in _SERVE_HELP_CACHE:
        try:
            out = subprocess.run(
                [str(binary), "serve", "--help"],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=30,
            )
            _SERVE_HELP_CACHE[key] = (out.stdout + out.stderr).decode("utf-8", errors="replace")
        except (OSError, subprocess.TimeoutExpired):
            _SERVE_HELP_CACHE[key] = ""
    return _SERVE_HELP_CACHE[key]


def client_shm_supported() -> bool:
    """Whether this `trtis serve` has system shared memory: Triton's
    `--allow-client-shm` flag (default false) in its help."""
    return "--allow-client-shm" in serve_help_text()


def require_client_shm() -> None:
    """Fails (not skips, as for gRPC) when the binary has no
    `--allow-client-shm`: the shared-memory suites test that feature."""
    if not client_shm_supported():
        pytest.fail(
            "`trtis serve --help` has no --allow-client-shm: no system shared memory yet",
            pytrace=False,
        )


def _has_flag(args: list[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


def _flag_is_false(args: list[str], flag: str, env: str) -> bool:
    """`--allow-x=false` / `--allow-x false` in `args` (last one wins), else
    the TRTIS_ environment variable the server would read."""
    value = None
    for i, a in enumerate(args):
        if a.startswith(flag + "="):
            value = a.split("=", 1)[1]
        elif a == flag:
            nxt = args[i + 1] if i + 1 < len(args) else ""
            value = nxt if nxt in ("true", "false") else "true"
    if value is None:
        value = os.environ.get(env)
    return value is not None and value.strip().lower() == "false"


# --------------------------------------------------------------------------
# Test model repository
# --------------------------------------------------------------------------

# (Triton protocol datatype, config.pbtxt type) for the identity models.
IDENTITY_TYPES = [
    ("BOOL", "TYPE_BOOL"),
    ("UINT8", "TYPE_UINT8"),
    ("UINT16", "TYPE_UINT16"),
    ("UINT32", "TYPE_UINT32"),
    ("UINT64", "TYPE_UINT64"),
    ("INT8", "TYPE_INT8"),
    ("INT16", "TYPE_INT16"),
    ("INT32", "TYPE_INT32"),
    ("INT64", "TYPE_INT64"),
    ("FP16", "TYPE_FP16"),
    ("FP32", "TYPE_FP32"),
    ("FP64", "TYPE_FP64"),
    ("BYTES", "TYPE_STRING"),
]

# Labels of the classification model, index order.
CLASS_LABELS = ["cat", "dog", "bird", "fish"]


def identity_model_name(datatype: str) -> str:
    return "identity_" + datatype.lower()


def _identity_config(name: str, config_type: str, dims: str = "-1", label: str = "") -> str:
    label_line = f'\n    label_filename: "{label}"' if label else ""
    return f"""name: "{name}"
backend: "identity"
max_batch_size: 8
input [
  {{
    name: "INPUT0"
    data_type: {config_type}
    dims: [ {dims} ]
  }}
]
output [
  {{
    name: "OUTPUT0"
    data_type: {config_type}
    dims: [ {dims} ]{label_line}
  }}
]
"""


def _write_identity(repo: Path, name: str, config_type: str, dims: str = "-1", label: str = "") -> Path:
    model = repo / name
    (model / "1").mkdir(parents=True)
    (model / "1" / ".keep").write_text("")
    (model / "config.pbtxt").write_text(_identity_config(name, config_type, dims, label))
    return model


def build_full_repository(repo: Path) -> Path:
    """`simple` (ONNX), `simple_identity`, one identity model per datatype,
    `identity_stats` (used only by the HTTP statistics test),
    `identity_stats_grpc` (only by the gRPC one) and `identity_class`
    (FP32 [4] with a label file)."""
    repo.mkdir(parents=True, exist_ok=True)
    shutil.copytree(EXAMPLES / "simple", repo / "simple")
    shutil.copytree(EXAMPLES / "simple_identity", repo / "simple_identity")
    for datatype, config_type in IDENTITY_TYPES:
        _write_identity(repo, identity_model_name(datatype), config_type)
    _write_identity(repo, "identity_stats", "TYPE_FP32")
    _write_identity(repo, "identity_stats_grpc", "TYPE_FP32")
    model = _write_identity(repo, "identity_class", "TYPE_FP32", dims="4", label="labels.txt")
    (model / "labels.txt").write_text("\n".join(CLASS_LABELS) + "\n")
    return repo


def build_shm_repository(repo: Path) -> Path:
    """For the shared-memory server: `simple` (ONNX INT32 [-1,16] add/sub),
    `identity_bytes` and `identity_fp32`."""
    repo.mkdir(parents=True, exist_ok=True)
    shutil.copytree(EXAMPLES / "simple", repo / "simple")
    for datatype, config_type in IDENTITY_TYPES:
        if datatype in ("BYTES", "FP32"):
            _write_identity(repo, identity_model_name(datatype), config_type)
    return repo


def build_tiny_repository(repo: Path) -> Path:
    """Only `identity_fp32`: fast to start, for the size-limit and shutdown
    servers."""
    repo.mkdir(parents=True, exist_ok=True)
    _write_identity(repo, "identity_fp32", "TYPE_FP32")
    return repo


# --------------------------------------------------------------------------
# Server process
# --------------------------------------------------------------------------


class ServerError(Exception):
    pass


class TrtisServer:
    """One `trtis serve` process on ephemeral ports of 127.0.0.1: HTTP, and
    gRPC when the binary has it (`grpc_port`, `grpc_url`)."""

    def __init__(
        self, repo: Path, args: list[str] | None = None, name: str = "server", env: dict | None = None
    ):
        """`env`: variables set for the server on top of this process's
        (None: unset)."""
        self.repo = Path(repo)
        self.args = list(args or [])
        self.env = dict(env or {})
        # The suite's expectations are a machine without a GPU: on one, its
        # servers use none, unless a test simulates GPUs (TRTIS_GPU_COUNT),
        # chooses (TRTIS_GPUS), or is a GPU test run by scripts/test-gpu.sh.
        if not {"TRTIS_GPU_COUNT", "TRTIS_GPUS"} & set(self.env) and os.environ.get("TRTIS_GPU_TESTS") != "1":
            self.env["TRTIS_GPUS"] = "none"
        self.name = name
        self.proc: subprocess.Popen | None = None
        self.host = "127.0.0.1"
        self.port: int | None = None
        self.grpc_port: int | None = None
        self.returncode: int | None = None
        self._lines: list[str] = []
        self._lock = threading.Lock()
        self._started = threading.Event()
        self._grpc_started = threading.Event()
        self._threads: list[threading.Thread] = []

    # -- lifecycle ---------------------------------------------------------

    def _extra_args(self) -> list[str]:
        return shlex.split(os.environ.get("TRTIS_SERVE_EXTRA_ARGS", ""))

    def command(self) -> list[str]:
        cmd = [
            str(trtis_bin()),
            "serve",
            "--model-store",
            str(self.repo),
            "--http-address",
            "127.0.0.1",
            "--http-port",
            "0",
        ]
        given = self.args + self._extra_args()
        if grpc_supported():
            # Never Triton's default 8001: tests run in parallel with others.
            if not _has_flag(given, "--grpc-address"):
                cmd += ["--grpc-address", "127.0.0.1"]
            if not _has_flag(given, "--grpc-port"):
                cmd += ["--grpc-port", "0"]
            # Nor the metrics port 8002.
            if not _has_flag(given, "--metrics-port"):
                cmd += ["--metrics-port", "0"]
        cmd += self.args
        cmd += self._extra_args()
        return cmd

    @property
    def expects_http(self) -> bool:
        return not _flag_is_false(self.args + self._extra_args(), "--allow-http", "TRTIS_ALLOW_HTTP")

    @property
    def expects_grpc(self) -> bool:
        return grpc_supported() and not _flag_is_false(
            self.args + self._extra_args(), "--allow-grpc", "TRTIS_ALLOW_GRPC"
        )

    def _expected_lines(self) -> list[tuple[str, threading.Event]]:
        lines = []
        if self.expects_http:
            lines.append(("Started HTTPService at <addr>:<port>", self._started))
        if self.expects_grpc:
            lines.append(("Started GRPCInferenceService at <addr>:<port>", self._grpc_started))
        return lines

    def start(self, timeout: float = STARTUP_TIMEOUT_S) -> "TrtisServer":
        binary = trtis_bin()
        if not binary.exists():
            raise ServerError(
                f"trtis executable not found at {binary} (build it with `cargo build`, "
                "or point TRTIS_BIN at one)"
            )
        deadline = time.monotonic() + timeout
        expected = self._expected_lines()
        self.proc = subprocess.Popen(
            self.command(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=str(self.repo.parent),
            env={k: v for k, v in {**os.environ, **self.env}.items() if v is not None},
        )
        for stream, tag in ((self.proc.stdout, "out"), (self.proc.stderr, "err")):
            t = threading.Thread(target=self._pump, args=(stream, tag), daemon=True)
            t.start()
            self._threads.append(t)

        def missing() -> str:
            return " and ".join(f"'{text}'" for text, ev in expected if not ev.is_set())

        while not all(ev.wait(0.05) for _, ev in expected):
            if self.proc.poll() is not None:
                self._join_pumps()
                raise ServerError(
                    f"{self.name}: trtis serve exited with {self.proc.returncode} before "
                    f"printing {missing()}\n{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                self.kill()
                raise ServerError(
                    f"{self.name}: no {missing()} line within {timeout:.0f} s\n"
                    f"{self.log_tail()}"
                )

        while True:
            try:
                if self.is_ready(timeout=2.0):
                    return self
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise ServerError(
                    f"{self.name}: trtis serve exited with {self.proc.returncode} while "
                    f"waiting for readiness\n{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                self.kill()
                raise ServerError(
                    f"{self.name}: server not ready within {timeout:.0f} s\n"
                    f"{self.log_tail()}"
                )
            time.sleep(0.05)

    def _pump(self, stream, tag: str) -> None:
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", errors="replace").rstrip("\n")
            with self._lock:
                self._lines.append(f"[{tag}] {line}")
            if not self._started.is_set():
                m = STARTED_RE.search(line)
                if m:
                    self.port = int(m.group(2))
                    self._started.set()
            if not self._grpc_started.is_set():
                m = GRPC_STARTED_RE.search(line)
                if m:
                    self.grpc_port = int(m.group(2))
                    self._grpc_started.set()
        stream.close()

    def _join_pumps(self) -> None:
        for t in self._threads:
            t.join(timeout=2.0)

    def stop(self, timeout: float = SHUTDOWN_TIMEOUT_S) -> int | None:
        """SIGINT, then wait. Returns the exit code, or None if it had to be
        killed (did not exit within `timeout`)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                self.returncode = None
                return None
        self._join_pumps()
        self.returncode = self.proc.returncode
        return self.returncode

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=5.0)
        self._join_pumps()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, n: int = 60) -> str:
        with self._lock:
            lines = self._lines[-n:]
        return "--- trtis output (last lines) ---\n" + "\n".join(lines)

    def log_lines(self) -> list[str]:
        with self._lock:
            return list(self._lines)

    # -- access ------------------------------------------------------------

    @property
    def url(self) -> str:
        """host:port as tritonclient.http wants it (no scheme)."""
        return f"{self.host}:{self.port}"

    @property
    def grpc_url(self) -> str:
        """host:port as tritonclient.grpc wants it."""
        return f"{self.host}:{self.grpc_port}"

    def request(
        self,
        method: str,
        path: str,
        body: bytes | str | None = None,
        headers: dict | None = None,
        timeout: float = 10.0,
    ) -> tuple[int, dict, bytes]:
        """One raw HTTP request on a fresh connection: (status, headers, body)."""
        if isinstance(body, str):
            body = body.encode("utf-8")
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            hdrs = {"Connection": "close"}
            hdrs.update(headers or {})
            conn.request(method, path, body=body, headers=hdrs)
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
        finally:
            conn.close()

    def post_json(self, path: str, doc, headers: dict | None = None) -> tuple[int, dict, bytes]:
        hdrs = {"Content-Type": "application/json"}
        hdrs.update(headers or {})
        return self.request("POST", path, json.dumps(doc), hdrs)

    def grpc_ready(self, timeout: float = 5.0) -> bool:
        """ServerReady over gRPC on a fresh channel (False on any error)."""
        import grpc
        from tritonclient.grpc import service_pb2, service_pb2_grpc

        if self.grpc_port is None:
            return False
        try:
            with grpc.insecure_channel(self.grpc_url) as channel:
                stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
                resp = stub.ServerReady(service_pb2.ServerReadyRequest(), timeout=timeout)
                return bool(resp.ready)
        except grpc.RpcError:
            return False

    def is_ready(self, timeout: float = 5.0) -> bool:
        """/v2/health/ready is 200 (over HTTP, or over gRPC ServerReady when
        the server has no HTTP listener)."""
        if self.port is None:
            return self.grpc_ready(timeout=timeout)
        try:
            status, _, _ = self.request("GET", "/v2/health/ready", timeout=timeout)
        except OSError:
            return False
        return status == 200


# -- fixture helpers ---------------------------------------------------------


def start_or_fail(server: TrtisServer) -> TrtisServer:
    try:
        return server.start()
    except ServerError as e:
        pytest.fail(str(e), pytrace=False)


def stop_and_check(server: TrtisServer) -> None:
    """SIGINT must end the server with exit code 0 within 10 s."""
    was_alive = server.alive()
    code = server.stop()
    if was_alive:
        assert code == 0, (
            f"{server.name}: SIGINT should exit 0 within 10 s, got "
            f"{'a hang (killed)' if code is None else code}\n{server.log_tail()}"
        )


def require_grpc(server: TrtisServer) -> TrtisServer:
    """Fails (not skips: a missing frontend is a failure of the gRPC suite)
    when `server` has no gRPC listener."""
    if server.grpc_port is None:
        pytest.fail(
            f"{server.name} has no gRPC listener: no 'Started GRPCInferenceService at' line "
            "awaited (turned off by --allow-grpc=false / TRTIS_ALLOW_GRPC=false, or "
            "`trtis serve --help` has no --grpc-port)",
            pytrace=False,
        )
    return server


def grpc_client_for(server: TrtisServer):
    """A tritonclient.grpc client on `server`'s gRPC port."""
    import tritonclient.grpc as grpcclient

    return grpcclient.InferenceServerClient(require_grpc(server).grpc_url)


def grpc_channel_for(server: TrtisServer):
    """A raw channel to `server`'s gRPC port (no message size limits, like
    tritonclient's); wrap it with service_pb2_grpc.GRPCInferenceServiceStub."""
    import grpc

    return grpc.insecure_channel(
        require_grpc(server).grpc_url,
        options=[
            ("grpc.max_send_message_length", 2**31 - 1),
            ("grpc.max_receive_message_length", 2**31 - 1),
        ],
    )


def running_server(repo, args=None, name="server", env=None):
    """Generator for fixtures: yields a started server, stops it after."""
    server = TrtisServer(repo, args, name=name, env=env)
    try:
        yield start_or_fail(server)
    finally:
        stop_and_check(server)


def metric(server, name: str, **labels) -> float | None:
    """The value of the sample `name` on the server's /metrics (a server of
    `running_server_with_metrics`) whose labels include `labels`; None when
    there is none, or while the metrics port is not up yet (it starts just
    after the HTTP and gRPC ones the harness waits for)."""
    try:
        text = urllib.request.urlopen(server.metrics_url, timeout=10).read().decode()
    except urllib.error.URLError:
        return None
    for line in text.splitlines():
        m = re.match(r"^(\w+)(?:\{([^}]*)\})? (\S+)$", line)
        if not m or m.group(1) != name:
            continue
        have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            return float(m.group(3))
    return None


def running_server_with_metrics(repo, args=None, name="server"):
    """running_server with `--metrics-port` on a free port; the server has
    `metrics_url` (its /metrics)."""
    port = free_port()
    for server in running_server(repo, [*(args or []), "--metrics-port", str(port)], name):
        server.metrics_url = f"http://127.0.0.1:{port}/metrics"
        yield server


# --------------------------------------------------------------------------
# System shared memory (client side)
# --------------------------------------------------------------------------


class ShmRegions:
    """POSIX shared-memory objects made with tritonclient.utils.shared_memory
    for one test. Keys are unique to this process (`/trtis_test_<pid>_<n>_
    <name>`), so parallel runs never share an object; `destroy_all()` unlinks
    every one (the `shm_regions` fixture calls it, pass or fail)."""

    _counter = itertools.count()

    def __init__(self):
        self._handles: list = []

    @classmethod
    def unique_key(cls, name: str) -> str:
        return f"/trtis_test_{os.getpid()}_{next(cls._counter)}_{name}"

    def create(self, name: str, byte_size: int):
        """A new object of `byte_size` bytes: (handle, key)."""
        import tritonclient.utils.shared_memory as shm

        key = self.unique_key(name)
        handle = shm.create_shared_memory_region(name, key, byte_size)
        self._handles.append(handle)
        return handle, key

    def destroy_all(self) -> None:
        import tritonclient.utils.shared_memory as shm

        errors = []
        while self._handles:
            handle = self._handles.pop()
            try:
                shm.destroy_shared_memory_region(handle)
            except Exception as e:  # keep unlinking the others
                errors.append(e)
        if errors:
            raise errors[0]


def missing_shm_key(name: str = "missing") -> str:
    """A key no shared-memory object has (checked in /dev/shm)."""
    while True:
        key = ShmRegions.unique_key(name)
        if not os.path.exists("/dev/shm" + key):
            return key


# --------------------------------------------------------------------------
# Assertions
# --------------------------------------------------------------------------


def error_message(body: bytes) -> str:
    """The `error` string of a `{"error": "..."}` body (asserts the shape)."""
    try:
        doc = json.loads(body)
    except ValueError as e:  # pragma: no cover - reported as a test failure
        raise AssertionError(f"error body is not JSON: {body[:300]!r}") from e
    assert isinstance(doc, dict) and isinstance(doc.get("error"), str), (
        f'error body is not {{"error": "..."}}: {body[:300]!r}'
    )
    return doc["error"]


def assert_error(response: tuple[int, dict, bytes], status: int, *fragments: str) -> str:
    got_status, _, body = response
    assert got_status == status, (
        f"expected HTTP {status}, got {got_status}: {body[:500]!r}"
    )
    msg = error_message(body)
    for fragment in fragments:
        assert fragment in msg, f"expected {fragment!r} in error message {msg!r}"
    return msg


def assert_client_error(exc, status: int, *fragments: str) -> str:
    """Same for a tritonclient InferenceServerException."""
    assert exc.status() == str(status), (
        f"expected HTTP {status}, got {exc.status()}: {exc.message()!r}"
    )
    msg = exc.message()
    for fragment in fragments:
        assert fragment in msg, f"expected {fragment!r} in error message {msg!r}"
    return msg


def assert_grpc_error(exc, code: str, *fragments: str) -> str:
    """Same for a tritonclient.grpc InferenceServerException: `code` is the
    gRPC status name ("INVALID_ARGUMENT", "NOT_FOUND", ...); tritonclient
    reports it as "StatusCode.<name>". `code=None` expects no status (the
    errors tritonclient builds from a stream response's `error_message`)."""
    want = None if code is None else f"StatusCode.{code}"
    assert exc.status() == want, (
        f"expected gRPC {want}, got {exc.status()}: {exc.message()!r}"
    )
    msg = exc.message()
    for fragment in fragments:
        assert fragment in msg, f"expected {fragment!r} in error message {msg!r}"
    return msg


def assert_rpc_error(err, code: str, *fragments: str) -> str:
    """Same for a raw grpc.RpcError (calls made with the generated stub)."""
    assert err.code().name == code, (
        f"expected gRPC {code}, got {err.code().name}: {err.details()!r}"
    )
    msg = err.details() or ""
    for fragment in fragments:
        assert fragment in msg, f"expected {fragment!r} in error message {msg!r}"
    return msg


def binary_body(header: dict, *tensors: bytes) -> tuple[bytes, dict]:
    """A binary-tensor-extension body and its headers."""
    head = json.dumps(header).encode("utf-8")
    headers = {
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(len(head)),
    }
    return head + b"".join(tensors), headers


def rss_mib(pid: int) -> float:
    """A process's resident set (VmRSS) in MiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise ValueError(f"no VmRSS for process {pid}")


def free_port() -> int:
    """A TCP port of 127.0.0.1 free right now (for servers that must keep
    their port across restarts, or that the harness does not start). It is
    drawn below the kernel's ephemeral range, so a listener the server
    opens on port 0 (the harness's HTTP and gRPC ports) cannot be given the
    same port before the server binds this one."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    rng = random.Random()
    for _ in range(1000):
        port = rng.randrange(10000, max(low, 10001))
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.05):
    """Polls `predicate` until it returns a truthy value; returns it (or the
    last falsy value after `timeout`)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


# --------------------------------------------------------------------------
# gRPC streams (tritonclient.grpc start_stream / async_stream_infer)
# --------------------------------------------------------------------------

STREAM_TIMEOUT_S = 30.0


class StreamCollector:
    """A stream callback: keeps (result, error) pairs in arrival order."""

    def __init__(self):
        self.items: list[tuple] = []
        self._cond = threading.Condition()

    def __call__(self, result, error):
        with self._cond:
            self.items.append((result, error))
            self._cond.notify_all()

    def wait_for(self, n: int, timeout: float = STREAM_TIMEOUT_S) -> list[tuple]:
        with self._cond:
            ok = self._cond.wait_for(lambda: len(self.items) >= n, timeout)
            assert ok, f"only {len(self.items)} of {n} stream responses within {timeout} s"
            return list(self.items)

    def by_id(self, n: int) -> tuple[dict, list]:
        """Waits for `n` responses: ({request id: result}, [errors])."""
        results, errors = {}, []
        for result, error in self.wait_for(n):
            if error is not None:
                errors.append(error)
                continue
            rid = result.get_response().id
            assert rid not in results, f"two responses for request {rid!r}"
            results[rid] = result
        return results, errors


def streamed_text(client, model: str, prompt: str, parameters: dict, n: int) -> list[str]:
    """The `text_output` of each response of a decoupled text model to one
    request over a fresh gRPC stream of `client` (`n` responses, then the
    empty final one), as tritonclient's users stream it."""
    import numpy as np
    import tritonclient.grpc as grpcclient

    collector = StreamCollector()
    client.start_stream(callback=collector)
    text = grpcclient.InferInput("text_input", [1], "BYTES")
    text.set_data_from_numpy(np.array([prompt.encode()], dtype=np.object_))
    client.async_stream_infer(model, [text], parameters=parameters, enable_empty_final_response=True)
    tokens = []
    for result, error in collector.wait_for(n + 1):
        assert error is None, error
        if result.get_response().parameters["triton_final_response"].bool_param:
            break
        tokens.append(result.as_numpy("text_output")[0].decode())
    client.stop_stream()
    return tokens


def cancel_stream(client) -> None:
    """Cancels a client's stream without waiting for the server (so a
    broken server cannot hang the suite in close()/stop_stream())."""
    stream = client._stream
    if stream is not None and stream._response_iterator is not None:
        stream._response_iterator.cancel()


def stream_client_for(server):
    """Generator for per-test fixtures: a fresh gRPC client (tritonclient
    allows one stream per client), its stream cancelled and closed after."""
    client = grpc_client_for(server)
    yield client
    cancel_stream(client)
    client._stream = None
    client.close()


def stop_stream_within(client, timeout: float = STREAM_TIMEOUT_S) -> None:
    """stop_stream() half-closes and joins the reader thread, which only ends
    when the server finishes the call: fail instead of hanging."""
    t = threading.Thread(target=client.stop_stream, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        cancel_stream(client)
        pytest.fail(f"stop_stream() did not return within {timeout} s: the server did not end the stream")

