"""Benchmark of streaming over HTTP: the example text_generator (a decoupled
Python model of our own, a word bigram model that makes words as fast as
Python can, so the serving path is what is measured) streamed three ways
from one `trtis serve`, in the same run, in alternating takes:

  - gRPC streaming (ModelStreamInfer) with tritonclient.grpc, the
    reference: what a Triton user streams with today;
  - Triton's generate_stream (Server-Sent Events) over one keep-alive HTTP
    connection (http.client, reading each `data:` line as it arrives);
  - the OpenAI-compatible /v1/completions with "stream": true, the same way.

Each request asks for TOKENS words (temperature 0, "stream": true: one
response per word). Per path and take: the time to first token (p50 and
p90 over the requests, from sending the request to the first word read),
the tokens per second within a stream (median over requests, first to last
word), the total tokens per second at concurrency 1 and 4 (4 client
threads, each on its own stream or connection), and the server process's
CPU per token (from /proc/<pid>/task/*/schedstat; the Python worker's is the same work on every
path and is not counted). Then the ratios against gRPC of the same take.

The clients are Python on the same 2 cores as the server: at concurrency 4
the client is part of what is measured, for every path alike.

Environment: TRTIS_BENCH_STREAM_TOKENS (64), TRTIS_BENCH_STREAM_REQUESTS
(requests per take and path at concurrency 1, 40), TRTIS_BENCH_STREAM_TAKES
(3). Run it with scripts/bench.sh streaming. Results:
target/bench/streaming-bench.md.
"""
import http.client
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

import numpy as np
import tritonclient.grpc as grpcclient

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve import OUT, ROOT, Server  # noqa: E402

TOKENS = int(os.environ.get("TRTIS_BENCH_STREAM_TOKENS", "64"))
REQUESTS = int(os.environ.get("TRTIS_BENCH_STREAM_REQUESTS", "40"))
TAKES = int(os.environ.get("TRTIS_BENCH_STREAM_TAKES", "3"))
PROMPT = "The client sends"
PORT = 18600


def cpu_seconds(pid):
    """The CPU time of all of a process's threads, in ns resolution
    (/proc/<pid>/task/*/schedstat; /proc's utime and stime count 10 ms
    ticks, too coarse for a few thousand tokens). A thread that ended
    during the take is not counted: the server's threads live as long as
    it does."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total / 1e9


class Grpc:
    """One tritonclient gRPC stream; `one()` runs a request on it."""

    def __init__(self, server):
        self.client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        self.lock = threading.Condition()
        self.stamps = []
        self.done = False
        self.client.start_stream(callback=self.callback)
        self.text = grpcclient.InferInput("text_input", [1], "BYTES")
        self.text.set_data_from_numpy(np.array([PROMPT.encode()], dtype=np.object_))

    def callback(self, result, error):
        now = time.perf_counter()
        with self.lock:
            if error is not None:
                self.error = error
                self.done = True
            elif result.get_response().parameters["triton_final_response"].bool_param:
                self.done = True
            else:
                self.stamps.append(now)
            self.lock.notify_all()

    def one(self):
        with self.lock:
            self.stamps, self.done, self.error = [], False, None
        t0 = time.perf_counter()
        self.client.async_stream_infer(
            "text_generator", [self.text],
            parameters={"max_tokens": TOKENS, "temperature": 0, "stream": True},
            enable_empty_final_response=True,
        )  # fmt: skip
        with self.lock:
            self.lock.wait_for(lambda: self.done, timeout=60)
            if self.error is not None or not self.done:
                raise RuntimeError(f"gRPC stream: {self.error or 'no final response in 60 s'}")
            return t0, list(self.stamps)

    def close(self):
        self.client.stop_stream()
        self.client.close()


class Sse:
    """One keep-alive HTTP connection; `one()` posts a streaming request and
    stamps each `data:` line but [DONE] as it is read."""

    def __init__(self, server, path, body):
        self.conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        self.path, self.body = path, json.dumps(body).encode()

    def one(self):
        t0 = time.perf_counter()
        self.conn.request("POST", self.path, self.body, {"Content-Type": "application/json"})
        r = self.conn.getresponse()
        if r.status != 200:
            raise RuntimeError(f"{self.path}: {r.status} {r.read()[:200]!r}")
        stamps = []
        while True:
            line = r.readline()
            if not line:
                break
            if line.startswith(b"data: ") and not line.startswith(b"data: [DONE]"):
                # The OpenAI path's first and last chunks carry no text.
                if b'"text":""' not in line:
                    stamps.append(time.perf_counter())
        return t0, stamps

    def close(self):
        self.conn.close()


PATHS = {
    "gRPC stream": lambda s: Grpc(s),
    "generate_stream (SSE)": lambda s: Sse(
        s, "/v2/models/text_generator/generate_stream",
        {"text_input": PROMPT, "max_tokens": TOKENS, "temperature": 0, "stream": True},
    ),
    "/v1/completions (SSE)": lambda s: Sse(
        s, "/v1/completions",
        {"model": "text_generator", "prompt": PROMPT, "max_tokens": TOKENS, "temperature": 0, "stream": True},
    ),
}  # fmt: skip


def take(server, path, requests, concurrency):
    """`requests` requests per client thread; returns the figures."""
    results, errors = [], []

    def client():
        c = PATHS[path](server)
        try:
            for _ in range(requests):
                t0, stamps = c.one()
                if len(stamps) != TOKENS:
                    raise RuntimeError(f"{path}: {len(stamps)} tokens, expected {TOKENS}")
                results.append((t0, stamps))
        except Exception as e:  # reported, not raised: the take is marked failed
            errors.append(str(e))
        finally:
            c.close()

    cpu0, t0 = cpu_seconds(server.proc.pid), time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall, cpu = time.perf_counter() - t0, cpu_seconds(server.proc.pid) - cpu0
    if errors:
        return {"error": errors[0]}
    ttft = sorted((s[0] - t) * 1e3 for t, s in results)
    within = [(len(s) - 1) / (s[-1] - s[0]) for _, s in results if s[-1] > s[0]]
    tokens = sum(len(s) for _, s in results)
    return {
        "ttft_p50": ttft[len(ttft) // 2],
        "ttft_p90": ttft[int(len(ttft) * 0.9)],
        "stream_tps": statistics.median(within),
        "total_tps": tokens / wall,
        "cpu_us_per_token": cpu / tokens * 1e6,
    }


def main():
    os.makedirs(OUT, exist_ok=True)
    repo = tempfile.mkdtemp(prefix="trtis-streaming-")
    shutil.copytree(os.path.join(ROOT, "examples/model_repository/text_generator"),
                    os.path.join(repo, "text_generator"), ignore=shutil.ignore_patterns("__pycache__"))
    server = Server(repo, PORT)
    lines = [
        "# Streaming benchmark: SSE (generate_stream, /v1/completions) vs gRPC streaming", "",
        f"{os.cpu_count()} CPUs. trtis serve (release), the example text_generator (decoupled Python, one "
        f"response per word), {TOKENS} words per request, temperature 0; Python clients on the same machine; "
        f"{TAKES} alternating takes; at c=1 {REQUESTS} requests per take and path, at c=4 {max(REQUESTS // 4, 5)} "
        "per client. Server CPU excludes the Python worker (the same work on every path).", "",
        "| take | c | path | TTFT p50 ms | TTFT p90 ms | tokens/s in a stream | tokens/s total | server CPU µs/token |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    ratios = {}
    try:
        for path in PATHS:  # warm each path once
            take(server, path, 3, 1)
        for n in range(1, TAKES + 1):
            for conc, requests in ((1, REQUESTS), (4, max(REQUESTS // 4, 5))):
                got = {}
                for path in PATHS:
                    r = take(server, path, requests, conc)
                    got[path] = r
                    if "error" in r:
                        lines.append(f"| {n} | {conc} | {path} | failed: {r['error']} | | | | |")
                    else:
                        lines.append(
                            f"| {n} | {conc} | {path} | {r['ttft_p50']:.2f} | {r['ttft_p90']:.2f} | "
                            f"{r['stream_tps']:.0f} | {r['total_tps']:.0f} | {r['cpu_us_per_token']:.1f} |")
                    print(lines[-1], flush=True)
                ref = got["gRPC stream"]
                for path, r in got.items():
                    if path == "gRPC stream" or "error" in r or "error" in ref:
                        continue
                    ratios.setdefault((conc, path), []).append((
                        r["ttft_p50"] / ref["ttft_p50"],
                        r["total_tps"] / ref["total_tps"],
                        r["cpu_us_per_token"] / ref["cpu_us_per_token"],
                    ))
    finally:
        server.stop()
        shutil.rmtree(repo, ignore_errors=True)
    lines += ["", "Ratios against gRPC streaming in the same take (median over takes; TTFT: lower is better, "
              "tokens/s: higher is better, CPU: lower is better):", "",
              "| c | path | TTFT p50 | tokens/s total | server CPU/token |", "| --- | --- | --- | --- | --- |"]
    for (conc, path), rs in sorted(ratios.items()):
        med = [statistics.median(x) for x in zip(*rs)]
        lines.append(f"| {conc} | {path} | {med[0]:.2f}x | {med[1]:.2f}x | {med[2]:.2f}x |")
    report = os.path.join(OUT, "streaming-bench.md")
    with open(report, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines[-(len(ratios) + 4):]))
    print(f"wrote {report}")


if __name__ == "__main__":
    main()
