"""Benchmark of OpenTelemetry tracing: what a traced request costs the
server, and what a collector that is down costs the requests.

One `trtis serve` (release) in OpenTelemetry mode exporting over OTLP/HTTP
to a sink (a separate Python process that reads each export and answers
200, as a collector would; its CPU is not counted), the identity model
(FP32 [16]) under perf_analyzer over gRPC at concurrency 1 and 4, in
alternating takes (perf_analyzer's stability at 50%: the machine is
noisy): untraced (level OFF), rate 1000, rate 1 (every request
traced: 3 spans each). A second server exports to a port where nothing
listens, at rate 1. Per row: throughput, p50 and p99 latency, and the
server process's CPU per inference (the exporter's thread included). Then
the ratios against the untraced take of the same round. The SDK's batch
processor runs with Triton's defaults (queue 2048, every 5 s, batches of
512).

Environment: TRTIS_BENCH_TRACING_ROUNDS (3). Run it with scripts/bench.sh
tracing. Results: target/bench/tracing-bench.md.
"""
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve import OUT, Server, perf, write_identity  # noqa: E402

ROUNDS = int(os.environ.get("TRTIS_BENCH_TRACING_ROUNDS", "3"))
# This machine's noise makes perf_analyzer's default 15% stability fail
# often on a 60 µs request; 50% over 3 windows, and the rounds' medians.
STABILITY = ("-s", "50")

SINK = r"""
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *a): pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def settings(server, body):
    req = urllib.request.Request(server.url("/v2/trace/setting"), json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


TAKES = {
    "untraced": {"trace_level": ["OFF"]},
    "rate 1000": {"trace_level": ["TIMESTAMPS"], "trace_rate": "1000"},
    "rate 1": {"trace_level": ["TIMESTAMPS"], "trace_rate": "1"},
}


def main():
    os.makedirs(OUT, exist_ok=True)
    repo = tempfile.mkdtemp(prefix="trtis-tracing-")
    write_identity(repo)
    sink = subprocess.Popen([sys.executable, "-c", SINK], stdout=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{sink.stdout.readline().strip()}/v1/traces"
    args = ["--trace-config", "mode=opentelemetry", "--trace-config", f"opentelemetry,url={url}"]
    down = ["--trace-config", "mode=opentelemetry", "--trace-config", "level=TIMESTAMPS",
            "--trace-config", "rate=1", "--trace-config", f"opentelemetry,url=http://127.0.0.1:{free_port()}/v1/traces"]
    server = Server(repo, 18700, args=args)
    dead = Server(repo, 18710, args=down)
    lines = [
        "# OpenTelemetry tracing benchmark", "",
        f"{os.cpu_count()} CPUs. trtis serve (release), identity FP32 [16], perf_analyzer over gRPC; OTLP/HTTP to a "
        f"sink process (not counted); {ROUNDS} rounds of alternating takes; 'collector down': a second server "
        "exporting to a closed port at rate 1.", "",
        "| round | c | take | infer/s | p50 ms | p99 ms | server CPU µs/inf |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    ratios = {}
    try:
        for n in range(1, ROUNDS + 1):
            for conc in (1, 4):
                got = {}
                for name, body in TAKES.items():
                    settings(server, body)
                    got[name] = perf(server, "identity_fp32", conc, extra=STABILITY, protocol="grpc")
                got["collector down, rate 1"] = perf(dead, "identity_fp32", conc, extra=STABILITY, protocol="grpc")
                for name, r in got.items():
                    if "error" in r:
                        lines.append(f"| {n} | {conc} | {name} | failed: {r['error']} | | | |")
                    else:
                        lines.append(f"| {n} | {conc} | {name} | {r['throughput']:.0f} | {r['p50_ms']:.3f} | "
                                     f"{r['p99_ms']:.3f} | {r['cpu_us']:.1f} |")
                    print(lines[-1], flush=True)
                ref = got["untraced"]
                for name, r in got.items():
                    if name == "untraced" or "error" in r or "error" in ref:
                        continue
                    ratios.setdefault((conc, name), []).append(
                        (r["cpu_us"] / ref["cpu_us"], r["throughput"] / ref["throughput"], r["p50_ms"] / ref["p50_ms"]))
    finally:
        server.stop()
        dead.stop()
        sink.kill()
        shutil.rmtree(repo, ignore_errors=True)
    lines += ["", "Against the untraced take of the same round (median over rounds):", "",
              "| c | take | CPU/inf | infer/s | p50 |", "| --- | --- | --- | --- | --- |"]
    for (conc, name), rs in sorted(ratios.items()):
        med = [statistics.median(x) for x in zip(*rs)]
        lines.append(f"| {conc} | {name} | {med[0]:.2f}x | {med[1]:.2f}x | {med[2]:.2f}x |")
    report = os.path.join(OUT, "tracing-bench.md")
    with open(report, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines[-(len(ratios) + 2):]))
    print(f"wrote {report}")


if __name__ == "__main__":
    main()
