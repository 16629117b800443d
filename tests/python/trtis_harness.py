"""Runs a real `trtis serve` process for the protocol tests, builds the test
model repository, and sends raw HTTP requests where tritonclient would hide
the status or refuse to send a malformed body.

Environment:
  TRTIS_BIN              the trtis executable (default target/debug/trtis)
  TRTIS_SERVE_EXTRA_ARGS extra arguments appended to every `trtis serve`
                         (shell-split), e.g. to turn off other listeners
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = REPO_ROOT / "examples" / "model_repository"

STARTUP_TIMEOUT_S = 30.0
SHUTDOWN_TIMEOUT_S = 10.0

# Triton's log line, which trtis prints too (stderr or stdout).
STARTED_RE = re.compile(r"Started HTTPService at (\S+):(\d+)")


def trtis_bin() -> Path:
    return Path(os.environ.get("TRTIS_BIN", REPO_ROOT / "target" / "debug" / "trtis"))


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
    `identity_stats` (used only by the statistics test) and
    `identity_class` (FP32 [4] with a label file)."""
    repo.mkdir(parents=True, exist_ok=True)
    shutil.copytree(EXAMPLES / "simple", repo / "simple")
    shutil.copytree(EXAMPLES / "simple_identity", repo / "simple_identity")
    for datatype, config_type in IDENTITY_TYPES:
        _write_identity(repo, identity_model_name(datatype), config_type)
    _write_identity(repo, "identity_stats", "TYPE_FP32")
    model = _write_identity(repo, "identity_class", "TYPE_FP32", dims="4", label="labels.txt")
    (model / "labels.txt").write_text("\n".join(CLASS_LABELS) + "\n")
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
    """One `trtis serve` process on an ephemeral port of 127.0.0.1."""

    def __init__(self, repo: Path, args: list[str] | None = None, name: str = "server"):
        self.repo = Path(repo)
        self.args = list(args or [])
        self.name = name
        self.proc: subprocess.Popen | None = None
        self.host = "127.0.0.1"
        self.port: int | None = None
        self.returncode: int | None = None
        self._lines: list[str] = []
        self._lock = threading.Lock()
        self._started = threading.Event()
        self._threads: list[threading.Thread] = []

    # -- lifecycle ---------------------------------------------------------

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
        cmd += self.args
        cmd += shlex.split(os.environ.get("TRTIS_SERVE_EXTRA_ARGS", ""))
        return cmd

    def start(self, timeout: float = STARTUP_TIMEOUT_S) -> "TrtisServer":
        binary = trtis_bin()
        if not binary.exists():
            raise ServerError(
                f"trtis executable not found at {binary} (build it with `cargo build`, "
                "or point TRTIS_BIN at one)"
            )
        deadline = time.monotonic() + timeout
        self.proc = subprocess.Popen(
            self.command(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=str(self.repo.parent),
        )
        for stream, tag in ((self.proc.stdout, "out"), (self.proc.stderr, "err")):
            t = threading.Thread(target=self._pump, args=(stream, tag), daemon=True)
            t.start()
            self._threads.append(t)

        while not self._started.wait(0.05):
            if self.proc.poll() is not None:
                self._join_pumps()
                raise ServerError(
                    f"{self.name}: trtis serve exited with {self.proc.returncode} before "
                    f"printing 'Started HTTPService at ...'\n{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                self.kill()
                raise ServerError(
                    f"{self.name}: no 'Started HTTPService at <addr>:<port>' line within "
                    f"{timeout:.0f} s\n{self.log_tail()}"
                )

        while True:
            try:
                status, _, _ = self.request("GET", "/v2/health/ready", timeout=2.0)
                if status == 200:
                    return self
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise ServerError(
                    f"{self.name}: trtis serve exited with {self.proc.returncode} while "
                    f"waiting for /v2/health/ready\n{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                self.kill()
                raise ServerError(
                    f"{self.name}: /v2/health/ready not 200 within {timeout:.0f} s\n"
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

    # -- access ------------------------------------------------------------

    @property
    def url(self) -> str:
        """host:port as tritonclient.http wants it (no scheme)."""
        return f"{self.host}:{self.port}"

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

    def is_ready(self) -> bool:
        try:
            status, _, _ = self.request("GET", "/v2/health/ready", timeout=5.0)
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


def running_server(repo, args=None, name="server"):
    """Generator for fixtures: yields a started server, stops it after."""
    server = TrtisServer(repo, args, name=name)
    try:
        yield start_or_fail(server)
    finally:
        stop_and_check(server)


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


def binary_body(header: dict, *tensors: bytes) -> tuple[bytes, dict]:
    """A binary-tensor-extension body and its headers."""
    head = json.dumps(header).encode("utf-8")
    headers = {
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(len(head)),
    }
    return head + b"".join(tensors), headers


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.05):
    """Polls `predicate` until it returns a truthy value; returns it (or the
    last falsy value after `timeout`)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)
