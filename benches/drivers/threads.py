"""Thread settings, instance counts and idle memory of a compute-bound ONNX
model at every concurrency (issue 22; the side-by-side with Triton is
scripts/bench.sh compute).

The model (benches/drivers/make_mlp.py): 8 x (MatMul 1024 + Relu) FP32,
input [batch, 1024], with the configuration of the side-by-side table in
shared/reference/measuring.md: dynamic batching with preferred batch sizes
8 and 16 and a 100 µs queue delay, max_batch_size 16, the instances left to
the default (one CPU instance using every core; Triton gives an onnxruntime
model two, which the run also measures). In
one run on this machine it measures:
  - the reference: ONNX Runtime called directly from Python with the same
    thread settings as a trtis instance (intra-op threads, spinning while a
    run is on): latency at batch 1 and throughput at batch 16;
  - trtis serve driven by perf_analyzer over gRPC at concurrency 1, 2, 4, 8,
    16 and 32: throughput, p50 and p99 latency, server CPU per inference, and
    the batch sizes that formed (from the statistics extension);
  - the same with one intra-op thread per instance (`intra_op_thread_count:
    1`, trtis's default before issue 22, the better setting under full load)
    against the default (every core for each instance, as Triton's default
    amounts to), so the trade shows in the same run;
  - the default (threads that spin while a run is on) against threads that
    always sleep (`allow_spinning: "0"`, trtis's default before), at every
    concurrency;
  - the model without dynamic batching at concurrency 1, 4 and 16;
  - the default (one instance) against Triton's default of two
    (`count: 2`), dynamic batching, at every concurrency: two instances of
    a compute-bound model, each with every core's threads and its own copy
    of the weights, contend for the cores and the cache;
  - idle memory: the server's RSS with no model, then after loading the
    model with one instance and with two (explicit model control), so the
    cost of a loaded model and of each instance shows; per instance against
    the model file's size and against what a second session of the same
    model adds to a fresh Python process calling ONNX Runtime directly; and
    the side-by-side table's three-model ORT repository against Triton's
    figure.
Triton 2.51's figures on this machine class (measured side by side on
2026-11-23, another machine of the class) are printed as the reference to
beat; Triton is not a dependency, so this bench cannot run it.

Run it with scripts/bench.sh threads. Results: target/bench/threads-bench.md.
"""
import json
import os
import shutil
import subprocess
import urllib.request
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve import OUT, ROOT, Server, rss_mib, time_session  # noqa: E402
from batching import histogram, mlp_repository, perf  # noqa: E402

CONCURRENCY = (1, 2, 4, 8, 16, 32)
# Triton 2.51, same model and configuration, perf_analyzer gRPC, two takes
# (shared/reference/measuring.md and issue 22): concurrency -> infer/s range.
TRITON = {("mlp_dyn", 1): (1090, 1111), ("mlp_dyn", 4): (2646, 2972), ("mlp_dyn", 16): (4232, 4807),
          ("mlp_nobatch", 4): (1485, 2284)}
# Direct ONNX Runtime on Triton's machine, batch 16, 2 threads (measuring.md):
# what its figures are scaled by.
TRITON_DIRECT = 12000


def direct_ort(model_path, batch, threads, seconds=3.0):
    """ONNX Runtime in-process with a trtis instance's settings: (infer/s,
    µs per run)."""
    import numpy as np
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.add_session_config_entry("session.intra_op.allow_spinning", "1")
    opts.add_session_config_entry("session.force_spinning_stop", "1")
    sess = ort.InferenceSession(model_path, opts, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((batch, 1024), dtype=np.float32)
    n, elapsed, _ = time_session(sess, {"INPUT0": x}, seconds)
    return n * batch / elapsed, elapsed / n * 1e6


def post(url):
    req = urllib.request.Request(url, data=b"{}", method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return r.status


def direct_memory(model_path):
    """RSS (MiB) ONNX Runtime adds in a fresh Python process per session of
    the model, each run once at batch 1: [MiB for session 1, session 2]."""
    code = f"""
import json, numpy as np, onnxruntime as ort
def rss():
    return next(int(l.split()[1]) / 1024 for l in open("/proc/self/status") if l.startswith("VmRSS:"))
x = np.ones((1, 1024), np.float32)
added, keep, before = [], [], rss()
for _ in range(2):
    s = ort.InferenceSession({model_path!r}, providers=["CPUExecutionProvider"])
    s.run(None, {{"INPUT0": x}}); keep.append(s)
    added.append(rss() - before); before = rss()
print(json.dumps(added))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def three_model_memory():
    """Idle RSS (MiB) of a server of three ONNX models, two of them the MLP
    (32 MiB of weights each), one instance each: the side-by-side table's
    ORT repository (Triton 2.51: 151-160 MiB)."""
    one = "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
    repo, _ = mlp_repository("trtis-three-", {"mlp_dyn": "dynamic_batching { }\n" + one, "mlp_nobatch": one}, 16)
    shutil.copytree(os.path.join(ROOT, "examples/model_repository/simple"), os.path.join(repo, "simple"))
    with open(os.path.join(repo, "simple", "config.pbtxt"), "a") as f:
        f.write(one)
    server = Server(repo, 18795)
    try:
        time.sleep(0.5)
        return rss_mib(server.proc.pid)
    finally:
        server.stop()
        shutil.rmtree(repo, ignore_errors=True)


def memory(repo):
    """RSS (MiB) of an idle server: with no model, then with each model of
    `repo` loaded in turn (explicit control): [(what, MiB)]."""
    server = Server(repo, 18790, args=["--model-control-mode", "explicit"])
    try:
        time.sleep(0.5)
        rows = [("no model", rss_mib(server.proc.pid))]
        for model in ("mlp_1instance", "mlp_2instances"):
            post(server.url(f"/v2/repository/models/{model}/load"))
            time.sleep(0.5)
            rows.append((f"+ {model}", rss_mib(server.proc.pid)))
        return rows
    finally:
        server.stop()


def over(results, other, *also):
    """mlp_dyn over `other` at every concurrency both ran: "c=1 1.12 (p99
    0.92, ...)", the throughput ratio, then each (label, key) of `also`."""
    out = []
    for c in CONCURRENCY:
        a, b = results.get(("mlp_dyn", c), {}), results.get((other, c), {})
        if "throughput" in a and "throughput" in b:
            extra = ", ".join(f"{label} {a[key] / b[key]:.2f}" for label, key in also)
            out.append(f"c={c} {a['throughput'] / b['throughput']:.2f}" + (f" ({extra})" if extra else ""))
    return ", ".join(out)


def main():
    batching = "dynamic_batching { preferred_batch_size: [ 8, 16 ] max_queue_delay_microseconds: 100 }\n"
    cores = len(os.sched_getaffinity(0))
    threads = 'parameters {{ key: "intra_op_thread_count" value: {{ string_value: "{}" }} }}\n'
    nospin = 'parameters { key: "allow_spinning" value: { string_value: "0" } }\n'
    models = {"mlp_dyn": batching, "mlp_dyn_1thread": batching + threads.format(1), "mlp_nobatch": "",
              "mlp_dyn_nospin": batching + nospin,
              "mlp_dyn_2instances": batching + "instance_group [ { count: 2 kind: KIND_CPU } ]\n",
              "mlp_1instance": "instance_group [ { count: 1 kind: KIND_CPU } ]\n",
              "mlp_2instances": "instance_group [ { count: 2 kind: KIND_CPU } ]\n"}
    repo, model_path = mlp_repository("trtis-compute-", models, 16)

    lines = ["# Compute-bound model at every concurrency", "",
             f"Model: 8 x (MatMul 1024 + Relu) FP32 (benches/drivers/make_mlp.py); {cores} CPUs; one CPU "
             "instance (the default). Reference: ONNX Runtime called directly from Python, same run, the "
             "instance's intra-op threads, spinning while a run is on (trtis's default).", "",
             "| direct ONNX Runtime | intra-op threads | batch 1: µs per run | batch 16: infer/s |",
             "| --- | --- | --- | --- |"]
    ref = {}
    for threads in sorted({cores, 1}, reverse=True):
        _, latency = direct_ort(model_path, 1, threads)
        rate, _ = direct_ort(model_path, 16, threads)
        ref[threads] = (latency, rate)
        lines.append(f"| in-process | {threads} | {latency:.0f} | {rate:.0f} |")
        print(lines[-1], flush=True)
    mem = memory(repo)
    file_mib = os.path.getsize(model_path) / 2**20
    lines += ["", f"Idle RSS (explicit model control, models loaded one after the other; the first load also maps "
              f"ONNX Runtime's library). The model file is {file_mib:.0f} MiB, nearly all of it weights.", "",
              "| server | RSS MiB | added MiB |", "| --- | --- | --- |"]
    for i, (what, mib) in enumerate(mem):
        lines.append(f"| {what} | {mib:.0f} | {'' if i == 0 else f'{mib - mem[i - 1][1]:.0f}'} |")
    added = [mem[i][1] - mem[i - 1][1] for i in range(1, len(mem))]
    per_instance = added[1] / 2  # mlp_2instances: two sessions, the library already mapped
    direct = direct_memory(model_path)
    lines += ["", f"Per instance (mlp_2instances' sessions): {per_instance:.0f} MiB, {per_instance / file_mib:.2f}x the "
              f"model file. ONNX Runtime called directly (a fresh Python process, default options, same run) adds "
              f"{direct[1]:.0f} MiB for a second session of the model: trtis/direct per session "
              f"{per_instance / direct[1]:.2f}.", ""]
    three = three_model_memory()
    lines += [f"The side-by-side table's ORT repository (the MLP twice and `simple`, one instance each): "
              f"{three:.0f} MiB idle; Triton 2.51 151–160 MiB (other machine, 2026-11-23): "
              f"{three / 160:.2f}–{three / 151:.2f}x.", ""]
    print("\n".join(lines[-len(mem) - 8:]), flush=True)
    lines += ["trtis serve, perf_analyzer over gRPC. `of ref` is throughput over the direct batch-16 rate "
              "with the same threads; `p50 - ref` is p50 latency minus the direct batch-1 run time.", "",
              "| model | intra-op threads | concurrency | infer/s | of ref | p50 ms | p50 - ref ms | p99 ms | "
              "mean batch | batch sizes (share of executions) | server CPU µs/inf | Triton 2.51 infer/s (other machine) |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    server = Server(repo, 18700, args=["--model-control-mode", "explicit", "--load-model", "mlp_dyn",
                                       "--load-model", "mlp_dyn_1thread", "--load-model", "mlp_nobatch",
                                       "--load-model", "mlp_dyn_2instances", "--load-model", "mlp_dyn_nospin"])
    runs = [(model, c) for c in CONCURRENCY for model in ("mlp_dyn", "mlp_dyn_nospin")]
    runs += [(model, c) for model in ("mlp_dyn_1thread", "mlp_dyn_2instances") for c in CONCURRENCY]
    runs += [("mlp_nobatch", c) for c in (1, 4, 16)]
    results = {}
    for model, c in runs:
        threads = 1 if model.endswith("1thread") else cores
        label = f"{threads} (default)" if threads == cores and not model.endswith("1thread") else str(threads)
        if model.endswith("nospin"):
            label = f"{threads}, always sleep"
        r = perf(server, model, c)
        results[(model, c)] = r
        triton = TRITON.get((model, c))
        triton = f"{triton[0]}–{triton[1]}" if triton else ""
        if "error" in r:
            lines.append(f"| {model} | {label} | {c} | {r['error']} | | | | | | | | {triton} |")
        else:
            latency, rate = ref[threads]
            lines.append(f"| {model} | {label} | {c} | {r['throughput']:.0f} | {r['throughput'] / rate:.2f} | "
                         f"{r['p50_ms']:.2f} | {r['p50_ms'] - latency / 1000:.2f} | {r['p99_ms']:.2f} | "
                         f"{r['mean_batch']:.1f} | {histogram(r['sizes'])} | {r['server_cpu_us']:.0f} | {triton} |")
        print(lines[-1], flush=True)
    server.stop()
    shutil.rmtree(repo)
    lines.append("")
    lines.append(f"The default ({cores} intra-op threads per instance) over one thread per instance, "
                 "throughput, same run: " + over(results, "mlp_dyn_1thread") + ".")
    lines.append("The default (threads spin while a run is on) over threads that always sleep (`allow_spinning: "
                 "\"0\"`), alternating in the same run, throughput (p99, server CPU per inference): "
                 + over(results, "mlp_dyn_nospin", ("p99", "p99_ms"), ("CPU/inf", "server_cpu_us")) + ".")
    ratios = []
    for (model, c), (lo, hi) in TRITON.items():
        r = results.get((model, c), {})
        if "throughput" in r:
            share = r["throughput"] / ref[cores][1]
            ratios.append(f"{model} c={c}: trtis {share:.3f}, Triton {lo / TRITON_DIRECT:.3f}–"
                          f"{hi / TRITON_DIRECT:.3f} ({share * TRITON_DIRECT / hi:.2f}–{share * TRITON_DIRECT / lo:.2f}x)")
    lines.append(f"Against Triton, each rate as a share of its own machine's direct batch-16 rate (here "
                 f"{ref[cores][1]:.0f}, Triton's machine {TRITON_DIRECT}): " + "; ".join(ratios) + ".")
    lines.append("The default (one instance) over Triton's default of two (`count: 2`) for an ONNX model on the "
                 "CPU, both with the default threads, throughput (p99) same run: "
                 + over(results, "mlp_dyn_2instances", ("p99", "p99_ms")) + ".")
    lines += [
              "", "Triton 2.51's figures are from another machine of this class (2026-11-23): compare the ratios "
              "to the direct ONNX Runtime reference, not absolute rates, across runs."]
    report = "\n".join(lines)
    print(report)
    open(os.path.join(OUT, "threads-bench.md"), "w").write(report + "\n")


if __name__ == "__main__":
    main()
