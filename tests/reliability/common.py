"""Shared pieces of the long reliability drivers (tests/reliability/*.py, run
by scripts/reliability.sh, not by the test command).

- the server: tests/python/trtis_harness.py's TrtisServer (ephemeral ports on
  127.0.0.1), with TRTIS_BIN defaulting to the release binary here;
- /proc readings of the server: RSS (MiB), open file descriptors;
- a minimal keep-alive HTTP/1.1 client sending one prepared request and
  comparing the answer with the expected bytes (cheap enough for 1000
  requests/s from Python), and a fixed-rate load generator built on it;
- least-squares slope; the RESULT line and the JSON record each driver
  leaves for the summary.

Every loop here is bounded in count and time; all traffic goes to
127.0.0.1.
"""

from __future__ import annotations

import json
import os
import resource
import socket
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "python"))
os.environ.setdefault("TRTIS_BIN", str(ROOT / "target" / "release" / "trtis"))

from trtis_harness import EXAMPLES, ServerError, TrtisServer  # noqa: E402,F401

OUT_DIR = Path(os.environ.get("RELIABILITY_OUT", ROOT / "target" / "bench" / "reliability"))


# ---------------------------------------------------------------------------
# /proc
# ---------------------------------------------------------------------------


def rss_mib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def fd_count(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def thread_count(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return -1


def raise_nofile(want: int) -> int:
    """Raises this process's (and so its children's) open-file limit to
    `want` (or the hard limit); returns the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def slope_per_min(samples: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) samples, per minute."""
    n = len(samples)
    if n < 2:
        return float("nan")
    mx = sum(t for t, _ in samples) / n
    my = sum(v for _, v in samples) / n
    sxx = sum((t - mx) ** 2 for t, _ in samples)
    if sxx == 0:
        return float("nan")
    sxy = sum((t - mx) * (v - my) for t, v in samples)
    return sxy / sxx * 60.0


class RssSampler:
    """Samples a process's RSS every `every` seconds on a thread."""

    def __init__(self, pid: int, every: float):
        self.pid, self.every = pid, every
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "RssSampler":
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.monotonic() - self._t0, rss_mib(self.pid)))
            self._stop.wait(self.every)

    def stop(self) -> list[tuple[float, float]]:
        self._stop.set()
        self._thread.join(timeout=5)
        self.samples.append((time.monotonic() - self._t0, rss_mib(self.pid)))
        return self.samples


# ---------------------------------------------------------------------------
# HTTP keep-alive client and fixed-rate load
# ---------------------------------------------------------------------------


def http_post_bytes(port: int, path: str, body: bytes, content_type: str = "application/json",
                    keep_alive: bool = True) -> bytes:
    conn = "keep-alive" if keep_alive else "close"
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: {conn}\r\n"
            f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body


class KeepAlive:
    """One persistent HTTP/1.1 connection sending prepared requests."""

    def __init__(self, port: int, timeout: float = 5.0):
        self.port, self.timeout = port, timeout
        self.sock: socket.socket | None = None
        self.buf = b""

    def _connect(self) -> None:
        self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
        self.sock = None

    def send(self, request: bytes) -> tuple[int, bytes]:
        """(status, body); raises OSError on transport failures (the
        connection is dropped and reopened on the next call)."""
        if self.sock is None:
            self._connect()
        try:
            self.sock.sendall(request)
            head_end = -1
            while head_end < 0:
                head_end = self.buf.find(b"\r\n\r\n")
                if head_end >= 0:
                    break
                chunk = self.sock.recv(65536)
                if not chunk:
                    raise ConnectionError("server closed the connection")
                self.buf += chunk
            head = self.buf[:head_end].decode("latin-1")
            status = int(head.split(" ", 2)[1])
            length = 0
            close = False
            for line in head.split("\r\n")[1:]:
                k, _, v = line.partition(":")
                k = k.strip().lower()
                if k == "content-length":
                    length = int(v)
                elif k == "connection" and v.strip().lower() == "close":
                    close = True
            need = head_end + 4 + length
            while len(self.buf) < need:
                chunk = self.sock.recv(65536)
                if not chunk:
                    raise ConnectionError("server closed the connection mid-response")
                self.buf += chunk
            body = self.buf[head_end + 4: need]
            self.buf = self.buf[need:]
            if close:
                self.close()
            return status, body
        except (OSError, ValueError, IndexError):
            self.close()
            raise


SIMPLE_BODY = json.dumps({
    "inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16},
    ]
}).encode()


def simple_expected(port: int, model: str = "simple") -> bytes:
    """The answer body of `model` (an example `simple`) to SIMPLE_BODY,
    checked once by value, then compared byte for byte."""
    c = KeepAlive(port)
    try:
        status, body = c.send(http_post_bytes(port, f"/v2/models/{model}/infer", SIMPLE_BODY))
    finally:
        c.close()
    doc = json.loads(body)
    outs = {o["name"]: o["data"] for o in doc["outputs"]}
    assert status == 200, (status, body)
    assert outs["OUTPUT0"] == [i + 1 for i in range(16)], outs
    assert outs["OUTPUT1"] == [i - 1 for i in range(16)], outs
    return body


class RateLoad:
    """`rate` requests/s for `seconds` (or until stop()) on `threads`
    keep-alive connections, each thread on its own schedule. Counts sent,
    good (200 and the expected bytes), failed (with a few samples), late
    (sent more than 100 ms behind schedule) and the worst latency."""

    def __init__(self, port: int, request: bytes, expected: bytes, rate: float, seconds: float,
                 threads: int = 4):
        self.port, self.request, self.expected = port, request, expected
        self.rate, self.seconds, self.threads = rate, seconds, threads
        self.sent = self.good = self.failed = self.late = 0
        self.max_latency = 0.0
        self.errors: list[str] = []
        self.latencies: list[float] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._workers: list[threading.Thread] = []
        self.elapsed = 0.0

    def start(self) -> "RateLoad":
        self._t0 = time.monotonic()
        for i in range(self.threads):
            t = threading.Thread(target=self._run, args=(i,), daemon=True)
            t.start()
            self._workers.append(t)
        return self

    def _run(self, i: int) -> None:
        period = self.threads / self.rate
        client = KeepAlive(self.port)
        next_at = self._t0 + period * i / self.threads
        end = self._t0 + self.seconds
        sent = good = failed = late = 0
        max_lat = 0.0
        lat_sample: list[float] = []
        errors: list[str] = []
        while not self._stop.is_set():
            now = time.monotonic()
            if now >= end:
                break
            if next_at > now:
                time.sleep(next_at - now)
            elif now - next_at > 0.1:
                late += 1
            t = time.monotonic()
            sent += 1
            try:
                status, body = client.send(self.request)
                if status == 200 and body == self.expected:
                    good += 1
                else:
                    failed += 1
                    if len(errors) < 5:
                        errors.append(f"HTTP {status}: {body[:200]!r}")
            except OSError as e:
                failed += 1
                if len(errors) < 5:
                    errors.append(f"{type(e).__name__}: {e}")
            lat = time.monotonic() - t
            max_lat = max(max_lat, lat)
            if sent % 50 == 0:
                lat_sample.append(lat)
            next_at += period
        client.close()
        with self._lock:
            self.sent += sent
            self.good += good
            self.failed += failed
            self.late += late
            self.max_latency = max(self.max_latency, max_lat)
            self.latencies += lat_sample
            self.errors += errors[: max(0, 10 - len(self.errors))]

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float | None = None) -> "RateLoad":
        deadline = None if timeout is None else time.monotonic() + timeout
        for t in self._workers:
            t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        self.elapsed = time.monotonic() - self._t0
        return self

    def p99_ms(self) -> float:
        if not self.latencies:
            return float("nan")
        xs = sorted(self.latencies)
        return xs[min(len(xs) - 1, int(len(xs) * 0.99))] * 1000

    def summary(self) -> dict:
        return {
            "sent": self.sent, "good": self.good, "failed": self.failed, "late": self.late,
            "achieved_rps": round(self.sent / self.elapsed, 1) if self.elapsed else 0.0,
            "max_latency_ms": round(self.max_latency * 1000, 1), "p99_latency_ms": round(self.p99_ms(), 1),
            "errors": self.errors[:5],
        }


# ---------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------


def report(name: str, passed: bool, figures: dict, checks: list[tuple[str, bool]], notes: list[str] = ()) -> int:
    """Prints the RESULT line and the checks, writes OUT_DIR/<name>.json;
    returns the exit code."""
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    shown = " ".join(f"{k}={v}" for k, v in figures.items() if not isinstance(v, (list, dict)))
    for what, ok in checks:
        print(f"  [{'ok' if ok else 'FAILED'}] {what}", flush=True)
    for n in notes:
        print(f"  note: {n}", flush=True)
    print(f"RESULT {name} {'PASS' if passed else 'FAIL'} {shown}", flush=True)
    record = {"name": name, "passed": passed, "figures": figures,
              "checks": [{"what": w, "ok": ok} for w, ok in checks], "notes": list(notes)}
    (OUT_DIR / f"{name}.json").write_text(json.dumps(record, indent=2))
    return 0 if passed else 1


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)
