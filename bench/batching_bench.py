"""Benchmark of the dynamic batcher on a compute-bound model.

The model (bench/make_mlp.py): 8 dense layers of 1024x1024 FP32, input
[batch, 1024]. In one run on this machine it measures:
  - the ceiling: ONNX Runtime called directly from Python at batch 1, 16 and
    32 with its default threads, one and two intra-op threads (the best
    setting is the reference);
  - trtis serve with `dynamic_batching`, instances and threads left to the
    defaults (mlp_batched), and with one instance using every core and
    preferred batch sizes 16 and 32 (mlp_one_instance), driven by
    perf_analyzer over gRPC at concurrency 1, 4, 16 and 32: throughput,
    latency, the ratio to the ceiling, and the batch sizes that formed (from
    the statistics extension);
  - the same model without dynamic batching, as the baseline.

Run it with scripts/bench-batching.sh. Results: target/bench/batching-bench.md.
"""
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_bench import OUT, PA, ROOT, Server, cpu_seconds, get  # noqa: E402
from make_mlp import make  # noqa: E402

CONCURRENCY = (1, 4, 16, 32)


def direct_ort(model_path, batch, threads, seconds=4.0):
    import numpy as np
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    sess = ort.InferenceSession(model_path, opts, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((batch, 1024), dtype=np.float32)
    for _ in range(5):
        sess.run(None, {"INPUT0": x})
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        sess.run(None, {"INPUT0": x})
        n += 1
    return n * batch / (time.perf_counter() - t0)


def batch_stats(server, model):
    status, body = get(server.url(f"/v2/models/{model}/stats"))
    stats = json.loads(body)["model_stats"][0]
    return {int(b["batch_size"]): int(b["compute_infer"]["count"]) for b in stats.get("batch_stats", [])}


def perf(server, model, concurrency):
    csv_path = os.path.join(OUT, f"pa-batching-{model}-c{concurrency}.csv")
    before, cpu0 = batch_stats(server, model), cpu_seconds(server.proc.pid)
    cmd = [PA, "-m", model, "-u", f"127.0.0.1:{server.grpc_port}", "-i", "grpc",
           "--concurrency-range", str(concurrency), "-p", "3000", "-r", "12", "-s", "15", "-f", csv_path]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        return {"error": f"exit {os.waitstatus_to_exitcode(status)}"}
    client_cpu = usage.ru_utime + usage.ru_stime
    after, cpu1 = batch_stats(server, model), cpu_seconds(server.proc.pid)
    sizes = {b: after.get(b, 0) - before.get(b, 0) for b in after}
    sizes = {b: n for b, n in sorted(sizes.items()) if n > 0}
    executions = sum(sizes.values())
    inferences = sum(b * n for b, n in sizes.items())
    row = next(csv.DictReader(open(csv_path)))
    return {
        "throughput": float(row["Inferences/Second"]),
        "p50_ms": float(row["p50 latency"]) / 1000,
        "p99_ms": float(row["p99 latency"]) / 1000,
        "mean_batch": sum(b * n for b, n in sizes.items()) / max(executions, 1),
        "sizes": sizes,
        "server_cpu_us": (cpu1 - cpu0) / max(inferences, 1) * 1e6,
        "client_cpu_us": client_cpu / max(inferences, 1) * 1e6,
    }


def histogram(sizes):
    total = sum(sizes.values()) or 1
    top = sorted(sizes.items(), key=lambda kv: -kv[1])[:6]
    return ", ".join(f"{b}: {100 * n / total:.0f}%" for b, n in sorted(top))


def main():
    os.makedirs(OUT, exist_ok=True)
    repo = tempfile.mkdtemp(prefix="trtis-batching-")
    model_path = os.path.join(OUT, "mlp.onnx")
    if not os.path.exists(model_path):
        make(model_path)
    io = ('input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1024 ] } ]\n'
          'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1024 ] } ]\n')
    models = {
        # Everything left to the defaults: two CPU instances, each with one
        # intra-op thread (the cores shared among the instances).
        "mlp_batched": "dynamic_batching { }\n",
        # One instance using every core; batches go as soon as 16 or 32
        # requests are there, else after 2 ms.
        "mlp_one_instance": ('instance_group [ { count: 1 kind: KIND_CPU } ]\n'
                             'dynamic_batching { preferred_batch_size: [ 16, 32 ] '
                             'max_queue_delay_microseconds: 2000 }\n'),
        # The baseline: the same model without dynamic batching.
        "mlp_unbatched": "",
    }
    for name, body in models.items():
        os.makedirs(os.path.join(repo, name, "1"))
        os.symlink(model_path, os.path.join(repo, name, "1", "model.onnx"))
        open(os.path.join(repo, name, "config.pbtxt"), "w").write(
            f'backend: "onnxruntime"\nmax_batch_size: 32\n{io}{body}')

    lines = ["# Dynamic batching benchmark", "",
             f"Model: 8 x dense 1024x1024 FP32 (bench/make_mlp.py); {os.cpu_count()} CPUs. "
             "Ceiling: ONNX Runtime called directly from Python, same model, same run.", ""]
    lines += ["| direct ONNX Runtime | intra-op threads | infer/s |", "| --- | --- | --- |"]
    ceiling = {}
    for batch in (1, 16, 32):
        for threads, label in ((0, "default"), (1, "1"), (2, "2")):
            r = direct_ort(model_path, batch, threads)
            ceiling[batch] = max(ceiling.get(batch, 0), r)
            lines.append(f"| batch {batch} | {label} | {r:.0f} |")
            print(lines[-1], flush=True)
    lines.append("")

    server = Server(repo, 18200)
    lines += ["| model | concurrency | infer/s | of ceiling (batch 16) | p50 ms | p99 ms | mean batch | batch sizes (share of executions) | server CPU µs/inf | perf_analyzer CPU µs/inf |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    results = {}
    for model in models:
        for c in CONCURRENCY:
            r = perf(server, model, c)
            results[(model, c)] = r
            if "error" in r:
                lines.append(f"| {model} | {c} | perf_analyzer: {r['error']} | | | | | | | |")
            else:
                lines.append(f"| {model} | {c} | {r['throughput']:.0f} | {r['throughput'] / ceiling[16]:.2f} | "
                             f"{r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['mean_batch']:.1f} | {histogram(r['sizes'])} | "
                             f"{r['server_cpu_us']:.0f} | {r['client_cpu_us']:.0f} |")
            print(lines[-1], flush=True)
    server.stop()
    shutil.rmtree(repo)
    lines.append("")
    for model in models:
        r16 = results[(model, 16)]
        if "error" not in r16:
            lines.append(f"- {model}: at concurrency 16, {r16['throughput']:.0f} infer/s = "
                         f"{100 * r16['throughput'] / ceiling[16]:.0f}% of the best direct ONNX Runtime rate at "
                         f"batch 16 ({ceiling[16]:.0f}/s), mean batch {r16['mean_batch']:.1f}.")
    report = "\n".join(lines)
    print(report)
    open(os.path.join(OUT, "batching-bench.md"), "w").write(report + "\n")


if __name__ == "__main__":
    main()
