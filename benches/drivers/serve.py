"""Benchmark of `trtis serve` with Triton's own load generator.

Measures, in one run on this machine:
  - perf_analyzer (from the tritonclient==2.51.0 wheel) over HTTP and gRPC
    against the identity backend (FP32 [16]) and the `simple` ONNX model, at
    concurrency 1, 4 and 16: throughput, p50/p99 latency, and the server's CPU
    time per inference (utime+stime from /proc over the run / inferences
    served);
  - the real image classifier (efficientnet_lite0, batch 1, one instance, one
    intra-op thread) through trtis against calling ONNX Runtime directly from
    Python with the same batch size and threads;
  - start-to-ready time and idle RSS with the example repository loaded;
  - the loopback floor: the same perf_analyzer commands against a bare
    server that only echoes the request's tensor bytes back
    (examples/echo_floor.rs: axum and tonic, no repository, scheduler or
    instance thread), for the identity model at concurrency 1 (server CPU
    per inference: trtis's over the floor's) and the 16 MB tensors
    (throughput: trtis's over the floor's); and over HTTP at concurrency 1,
    the same floor on a blocking thread per connection (`--blocking`: two
    system calls and a sleep per request, the kernel's own floor);
  - Triton 2.51 beside trtis on the identity model (tritonserver from the
    nvidia-pytriton wheel set up by scripts/setup-triton.sh, with trtis's
    minimal identity backend for it, benches/triton_identity.c), HTTP and
    gRPC at concurrency 1 and 4, alternating, two takes each: server CPU
    per inference and throughput, trtis over Triton. TRTIS_BENCH_NO_TRITON=1
    skips it.

Run it with scripts/bench.sh serve (which sets up perf_analyzer).
"""
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import (  # noqa: E402,F401 (the drivers import these from here)
    ROOT,
    TRTIS,
    FLOOR,
    PA,
    OUT,
    CLK,
    stat_cpu_seconds,
    cpu_seconds,
    rss_mib,
    get,
    write_identity,
    Server,
    Floor,
    perf,
    time_session,
    raw_ort,
    span,
)


def triton_identity(server, repo, blocking_floor):
    """Triton 2.51 (tritonserver from the nvidia-pytriton wheel, with trtis's
    minimal identity backend for it, benches/triton_identity.c) on the same
    identity model, alternating with trtis, two takes each: lines of the
    report."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from triton import Triton, TritonUnavailable, triton_settings  # noqa: E402
    try:
        triton = Triton(triton_settings(), repo, 18130, ("identity_fp32",), os.path.join(OUT, "serve-triton.log"))
    except TritonUnavailable as e:
        return [f"Triton reference: not available ({e})"]
    lines = ["Against Triton 2.51 in the same run (tritonserver from the nvidia-pytriton==0.7.0 wheel; its identity "
             "backend is trtis's minimal one, benches/triton_identity.c, which does less than Triton's own), "
             "identity FP32 [16], server CPU µs per inference, two takes each, alternating:", "",
             "| protocol | concurrency | trtis | Triton | trtis/Triton | throughput trtis/Triton | p99 trtis/Triton |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    http_c1 = None
    try:
        for protocol, c in (("http", 1), ("grpc", 1), ("http", 4), ("grpc", 4)):
            ours, theirs = [], []
            for _ in range(2):
                ours.append(perf(server, "identity_fp32", c, protocol=protocol))
                theirs.append(perf(triton, "identity_fp32", c, protocol=protocol))
            bad = [r["error"] for r in ours + theirs if "error" in r]
            if bad:
                lines.append(f"| {protocol} | {c} | perf_analyzer: {bad[0]} | | | | |")
            else:
                (a, b), (x, y) = span(ours, "cpu_us"), span(theirs, "cpu_us")
                (ra, rb), (rx, ry) = span(ours, "throughput"), span(theirs, "throughput")
                (pa, pb), (px, py) = span(ours, "p99_ms"), span(theirs, "p99_ms")
                lines.append(f"| {protocol} | {c} | {a:.1f}–{b:.1f} | {x:.1f}–{y:.1f} | {a / y:.2f}–{b / x:.2f} | "
                             f"{ra / ry:.2f}–{rb / rx:.2f} | {pa / py:.2f}–{pb / px:.2f} |")
                if (protocol, c) == ("http", 1):
                    http_c1 = (x, y)
            print(lines[-1], flush=True)
    finally:
        triton.stop()
    if http_c1 and "cpu_us" in blocking_floor:
        (x, y), floor = http_c1, blocking_floor["cpu_us"]
        lines += ["", f"The HTTP c=1 target (half Triton's CPU per inference) is {x / 2:.1f}–{y / 2:.1f} µs here; "
                  f"the blocking floor, a server that only reads and writes, costs {floor:.1f} µs "
                  f"({floor / y:.2f}–{floor / x:.2f}x Triton)."]
    return lines


def main():
    os.makedirs(OUT, exist_ok=True)
    lines = []
    repo = tempfile.mkdtemp(prefix="trtis-bench-")
    write_identity(repo)
    write_identity(repo, "identity_var", "-1")
    shutil.copytree(os.path.join(ROOT, "examples/model_repository/simple"), os.path.join(repo, "simple"))
    classifier = os.path.join(repo, "efficientnet_lite0")
    shutil.copytree(os.path.join(ROOT, "examples/model_repository/efficientnet_lite0"), classifier)
    # Batch 1 against batch 1: no dynamic batching for this comparison.
    config_path = os.path.join(classifier, "config.pbtxt")
    text = open(config_path).read()
    open(config_path, "w").write(text[:text.index("dynamic_batching")])

    server = Server(repo, 18100)
    lines.append("| protocol | model | concurrency | infer/s | p50 ms | p99 ms | server CPU µs / inference |")
    lines.append("| --- | --- | --- | --- | --- | --- | --- |")
    for protocol in ("http", "grpc"):
        for model in ("identity_fp32", "simple"):
            for c in (1, 4, 16):
                r = perf(server, model, c, protocol=protocol)
                if "error" in r:
                    lines.append(f"| {protocol} | {model} | {c} | perf_analyzer: {r['error']} | | | |")
                else:
                    lines.append(f"| {protocol} | {model} | {c} | {r['throughput']:.0f} | {r['p50_ms']:.3f} | "
                                 f"{r['p99_ms']:.3f} | {r['cpu_us']:.1f} |")
                print(lines[-1], flush=True)
    # A 16 MB input (4 Mi FP32 elements) through the wire and through
    # system shared memory, over gRPC and HTTP.
    lines.append("")
    lines.append("| protocol | 16 MB FP32 identity | infer/s | p50 ms | server CPU µs / inference |")
    lines.append("| --- | --- | --- | --- | --- |")
    big = ["--shape", "INPUT0:4194304"]
    wire = {}
    for protocol in ("grpc", "http"):
        for shm in ("none", "system"):
            r = perf(server, "identity_var", 1, [*big, "--shared-memory", shm,
                                                 "--output-shared-memory-size", str(16 << 20)], protocol=protocol)
            label = "shared memory" if shm == "system" else "wire"
            if shm == "none":
                wire[protocol] = r
            if "error" in r:
                lines.append(f"| {protocol} | {label} | perf_analyzer: {r['error']} | | |")
            else:
                lines.append(f"| {protocol} | {label} | {r['throughput']:.1f} | {r['p50_ms']:.2f} | {r['cpu_us']:.0f} |")
            print(lines[-1], flush=True)

    # The loopback floor, each right after trtis on the same command.
    lines.append("")
    lines.append("Against the loopback floor (examples/echo_floor: a bare axum/tonic server echoing the "
                 "tensor bytes, same perf_analyzer command, same run):")
    lines.append("")
    lines.append("| protocol | case | trtis | floor | trtis/floor |")
    lines.append("| --- | --- | --- | --- | --- |")
    small = {p: perf(server, "identity_fp32", 1, protocol=p) for p in ("http", "grpc")}
    cases = (("identity_fp32", [], small, "identity FP32 [16], c=1, server CPU µs/inf", "cpu_us"),
             ("identity_var", big, wire, "16 MB FP32 identity, c=1, infer/s", "throughput"))
    for model, extra, ours, case, key in cases:
        floor = Floor(server, model, 18110)
        for protocol in ("http", "grpc"):
            t, f = ours[protocol], perf(floor, model, 1, extra, protocol=protocol)
            if "error" in t or "error" in f:
                lines.append(f"| {protocol} | {case} | {t.get('error', '')} | {f.get('error', '')} | |")
            else:
                lines.append(f"| {protocol} | {case} | {t[key]:.1f} | {f[key]:.1f} | {t[key] / f[key]:.2f} |")
            print(lines[-1], flush=True)
        floor.stop()
    floor = Floor(server, "identity_fp32", 18120, blocking=True)
    f = perf(floor, "identity_fp32", 1, protocol="http")
    floor.stop()
    t = small["http"]
    if "error" in t or "error" in f:
        lines.append(f"| http | blocking floor, identity c=1, server CPU µs/inf | {t.get('error', '')} | "
                     f"{f.get('error', '')} | |")
    else:
        lines.append(f"| http | blocking floor (a thread per connection, no event loop), identity c=1, server CPU "
                     f"µs/inf | {t['cpu_us']:.1f} | {f['cpu_us']:.1f} | {t['cpu_us'] / f['cpu_us']:.2f} |")
    print(lines[-1], flush=True)
    blocking_floor = f

    lines += ["", *triton_identity(server, repo, blocking_floor)]

    # One instance: concurrency 1 shows the latency, concurrency 2 keeps the
    # instance busy (the next request crosses the network while one computes),
    # which is the throughput to set against ONNX Runtime called directly.
    c1 = perf(server, "efficientnet_lite0", 1, ["-b", "1"])
    c2 = perf(server, "efficientnet_lite0", 2, ["-b", "1"])
    server.stop()
    direct = raw_ort(os.path.join(classifier, "1/model.onnx"))
    lines.append("")
    if "error" in c1 or "error" in c2:
        lines.append(f"efficientnet_lite0 through trtis: perf_analyzer {c1.get('error') or c2.get('error')}")
    else:
        lines.append(f"efficientnet_lite0, batch 1, 1 instance, every core's intra-op threads (the default, "
                     f"{len(os.sched_getaffinity(0))}): ONNX Runtime called directly with the same "
                     f"{direct:.1f} infer/s ({1000 / direct:.2f} ms); trtis over HTTP c=1 {c1['throughput']:.1f} infer/s "
                     f"(p50 {c1['p50_ms']:.2f} ms), c=2 {c2['throughput']:.1f} infer/s: "
                     f"throughput ratio {c2['throughput'] / direct:.3f}")

    example = Server(os.path.join(ROOT, "examples/model_repository"), 18101)
    time.sleep(1.0)
    examples = os.path.join(ROOT, "examples/model_repository")
    count = sum(os.path.isdir(os.path.join(examples, d)) for d in os.listdir(examples))
    lines.append(f"example repository ({count} models: ONNX, PyTorch, Python, ensembles): start to ready "
                 f"{example.ready_s:.3f} s, "
                 f"idle RSS {rss_mib(example.proc.pid):.0f} MiB")
    example.stop()
    shutil.rmtree(repo)
    report = "\n".join(lines)
    print(report)
    open(os.path.join(OUT, "serve-bench.md"), "w").write(report + "\n")


if __name__ == "__main__":
    main()
