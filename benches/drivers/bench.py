"""What the bench drivers share: the paths (ROOT, the trtis binary, the
output folder, perf_analyzer), a server process (`Server`), its CPU time
and resident set, perf_analyzer runs, and the identity model they all use.
The drivers import it (serve.py re-exports it for the others); it imports
none of them.
"""
import csv
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRTIS = os.environ.get("TRTIS_BIN", os.path.join(ROOT, "target/release/trtis"))
FLOOR = os.path.join(ROOT, "target/release/examples/echo_floor")
PA = os.environ.get("PERF_ANALYZER", os.path.join(ROOT, "target/bench/perf_analyzer"))
OUT = os.path.join(ROOT, "target/bench")
CLK = os.sysconf("SC_CLK_TCK")


def stat_cpu_seconds(path):
    """utime + stime of a /proc stat file (a process's or a thread's)."""
    fields = open(path).read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK


def cpu_seconds(pid):
    return stat_cpu_seconds(f"/proc/{pid}/stat")


def rss_mib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except OSError:
        return None, b""


def write_identity(repo, name="identity_fp32", dims="16"):
    """An identity model (FP32, `dims`, max batch 8) in `repo`."""
    os.makedirs(os.path.join(repo, name, "1"))
    open(os.path.join(repo, name, "1", ".keep"), "w").close()
    open(os.path.join(repo, name, "config.pbtxt"), "w").write(
        'backend: "identity"\nmax_batch_size: 8\n'
        f'input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {dims} ] }} ]\n'
        f'output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {dims} ] }} ]\n')


class Server:
    def __init__(self, repo, port, env=None, args=()):
        """`env`: variables to set for the server on top of this process's;
        `args`: more `trtis serve` flags."""
        self.port = port
        self.grpc_port = port + 1
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            [TRTIS, "serve", "--model-store", repo, "--http-port", str(port), "--http-address", "127.0.0.1",
             "--allow-client-shm", "--metrics-port", "0",
             "--grpc-port", str(self.grpc_port), "--grpc-address", "127.0.0.1", *args],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **(env or {})})
        while get(self.url("/v2/health/ready"))[0] != 200:
            if self.proc.poll() is not None:
                sys.exit(f"trtis serve exited with {self.proc.returncode}")
            time.sleep(0.002)
        self.ready_s = time.perf_counter() - t0

    def url(self, path):
        return f"http://127.0.0.1:{self.port}{path}"

    def inferences(self, model):
        status, body = get(self.url(f"/v2/models/{model}/stats"))
        return sum(s["inference_count"] for s in json.loads(body)["model_stats"])

    def stop(self):
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=30)


class Floor:
    """examples/echo_floor answering for `model` as `server` (a running
    trtis) describes it; perf() measures it as it measures trtis.
    `blocking`: HTTP only, a blocking thread per connection (the kernel's
    floor) rather than axum and tonic."""

    def __init__(self, server, model, port, blocking=False):
        self.port, self.grpc_port = port, port + 1
        files = []
        for suffix in ("", "/config"):
            status, body = get(server.url(f"/v2/models/{model}{suffix}"))
            path = os.path.join(OUT, f"floor-{model}{suffix.replace('/', '-')}.json")
            open(path, "wb").write(body)
            files.append(path)
        self.proc = subprocess.Popen([FLOOR, str(port), str(port + 1), *files, *(["--blocking"] if blocking else [])],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while get(self.url("/v2/health/ready"))[0] != 200:
            if self.proc.poll() is not None:
                sys.exit(f"echo_floor exited with {self.proc.returncode}")
            time.sleep(0.002)

    url = Server.url
    inferences = Server.inferences

    def stop(self):
        self.proc.kill()
        self.proc.wait(timeout=30)


def perf(server, model, concurrency, extra=(), protocol="http"):
    csv_path = os.path.join(OUT, f"pa-{model}-{protocol}-c{concurrency}-{abs(hash(tuple(extra)))}.csv")
    cpu0, n0 = cpu_seconds(server.proc.pid), server.inferences(model)
    port = server.port if protocol == "http" else server.grpc_port
    cmd = [PA, "-m", model, "-u", f"127.0.0.1:{port}", "-i", protocol,
           "--concurrency-range", str(concurrency), "-p", "2000", "-r", "8", "-s", "15", "-f", csv_path, *extra]
    try:
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120, check=True)
    except (subprocess.TimeoutExpired, subprocess.CalledProcessError) as e:
        return {"error": type(e).__name__}
    cpu1, n1 = cpu_seconds(server.proc.pid), server.inferences(model)
    row = next(csv.DictReader(open(csv_path)))
    return {
        "throughput": float(row["Inferences/Second"]),
        "p50_ms": float(row["p50 latency"]) / 1000,
        "p99_ms": float(row["p99 latency"]) / 1000,
        "cpu_us": (cpu1 - cpu0) / max(n1 - n0, 1) * 1e6,
    }


def time_session(sess, feeds, seconds):
    """Runs an ONNX Runtime session on `feeds`, 5 times to warm up, then for
    `seconds`: (runs, wall seconds, this process's CPU seconds)."""
    for _ in range(5):
        sess.run(None, feeds)
    n, t0, c0 = 0, time.perf_counter(), os.times()
    while time.perf_counter() - t0 < seconds:
        sess.run(None, feeds)
        n += 1
    elapsed, c1 = time.perf_counter() - t0, os.times()
    return n, elapsed, (c1.user + c1.system) - (c0.user + c0.system)


def raw_ort(model_path, seconds=8.0):
    import numpy as np
    import onnxruntime as ort
    # The instance's settings: every core's intra-op threads (trtis's
    # default), spinning while a run is on and stopping when it ends.
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = len(os.sched_getaffinity(0))
    opts.inter_op_num_threads = 1
    opts.add_session_config_entry("session.intra_op.allow_spinning", "1")
    opts.add_session_config_entry("session.force_spinning_stop", "1")
    sess = ort.InferenceSession(model_path, opts, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224), dtype=np.float32)
    n, elapsed, _ = time_session(sess, {"input": x}, seconds)
    return n / elapsed


def span(rows, key):
    """(lowest, highest) of `key` over perf() results."""
    return min(r[key] for r in rows), max(r[key] for r in rows)
