"""Benchmark of the dynamic batcher on a compute-bound model.

The model (benches/drivers/make_mlp.py): 8 dense layers of 1024x1024 FP32,
input [batch, 1024]. In one run on this machine it measures:
  - the ceiling: ONNX Runtime called directly from Python at batch 1, 16 and
    32 with its default threads, one and two intra-op threads (the best
    setting is the reference);
  - trtis serve with `dynamic_batching`, instances and threads left to the
    defaults (mlp_batched), and with one instance using every core and
    preferred batch sizes 16 and 32 (mlp_one_instance), driven by
    perf_analyzer over gRPC at concurrency 1, 4, 16 and 32: throughput,
    latency, the ratio to the ceiling, and the batch sizes that formed (from
    the statistics extension);
  - the same model without dynamic batching, as the baseline;
  - mlp_one_instance at concurrency 16 driven by `trtis perf` (a lighter
    client on the same cores);
  - the CPU budget of the 70%-of-ceiling target: CPU per inference of
    ONNX Runtime in-process, of perf_analyzer and of the server (its
    instance threads apart from the rest).

Run it with scripts/bench.sh batching. Results: target/bench/batching-bench.md.
"""
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve import OUT, PA, ROOT, TRTIS, Server, cpu_seconds, get, stat_cpu_seconds, time_session  # noqa: E402
from make_mlp import make  # noqa: E402

CONCURRENCY = (1, 4, 16, 32)


def direct_ort(model_path, batch, threads, seconds=4.0):
    import numpy as np
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    sess = ort.InferenceSession(model_path, opts, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((batch, 1024), dtype=np.float32)
    n, elapsed, cpu = time_session(sess, {"INPUT0": x}, seconds)
    # (infer/s, process CPU µs per inference)
    return n * batch / elapsed, cpu / (n * batch) * 1e6


def thread_cpu(pid):
    """CPU seconds of a process's threads, summed by thread name."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            name = open(f"/proc/{pid}/task/{tid}/comm").read().strip()
            cpu = stat_cpu_seconds(f"/proc/{pid}/task/{tid}/stat")
        except OSError:
            continue
        out[name] = out.get(name, 0.0) + cpu
    return out


def instance_cpu(threads, model):
    """CPU seconds of a model's instance threads (`trtis:<model>:<n>`, cut
    to 15 bytes; ONNX Runtime's intra-op threads inherit the name)."""
    prefix = f"trtis:{model}:"[:15]
    return sum(v for k, v in threads.items() if k.startswith(prefix))


def batch_stats(server, model):
    status, body = get(server.url(f"/v2/models/{model}/stats"))
    stats = json.loads(body)["model_stats"][0]
    return {int(b["batch_size"]): int(b["compute_infer"]["count"]) for b in stats.get("batch_stats", [])}


def perf(server, model, concurrency, client="perf_analyzer", extra=(), tag=""):
    """`extra`: more client flags; `tag`: told apart in the file names."""
    csv_path = os.path.join(OUT, f"{client}-batching-{model}{tag}-c{concurrency}.csv")
    before, cpu0 = batch_stats(server, model), cpu_seconds(server.proc.pid)
    threads0 = thread_cpu(server.proc.pid)
    tool = [PA] if client == "perf_analyzer" else [TRTIS, "perf"]
    cmd = [*tool, "-m", model, "-u", f"127.0.0.1:{server.grpc_port}", "-i", "grpc",
           "--concurrency-range", str(concurrency), "-p", "3000", "-r", "12", "-s", "15", "-f", csv_path, *extra]
    log_path = csv_path[:-len(".csv")] + ".log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        # perf_analyzer's reason: most often that no 3 windows in a row
        # agreed within 15% (this machine's drift), not a failed request.
        text = open(log_path).read()
        why = "unstable" if "Failed to obtain stable measurement" in text else "failed"
        return {"error": f"{why} (exit {os.waitstatus_to_exitcode(status)}, {os.path.relpath(log_path, ROOT)})"}
    client_cpu = usage.ru_utime + usage.ru_stime
    after, cpu1 = batch_stats(server, model), cpu_seconds(server.proc.pid)
    threads1 = thread_cpu(server.proc.pid)
    ort_cpu = instance_cpu(threads1, model) - instance_cpu(threads0, model)
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
        "instance_cpu_us": ort_cpu / max(inferences, 1) * 1e6,
        "client_cpu_us": client_cpu / max(inferences, 1) * 1e6,
    }


def histogram(sizes):
    total = sum(sizes.values()) or 1
    top = sorted(sizes.items(), key=lambda kv: -kv[1])[:6]
    return ", ".join(f"{b}: {100 * n / total:.0f}%" for b, n in sorted(top))


def mlp_repository(prefix, models, max_batch_size):
    """A temporary repository of the MLP (made once into target/bench) under
    each name of `models`, its config the common part plus `models[name]`:
    (repository, model file)."""
    os.makedirs(OUT, exist_ok=True)
    repo = tempfile.mkdtemp(prefix=prefix)
    model_path = os.path.join(OUT, "mlp.onnx")
    if not os.path.exists(model_path):
        make(model_path)
    io = ('input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1024 ] } ]\n'
          'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1024 ] } ]\n')
    for name, body in models.items():
        os.makedirs(os.path.join(repo, name, "1"))
        os.symlink(model_path, os.path.join(repo, name, "1", "model.onnx"))
        open(os.path.join(repo, name, "config.pbtxt"), "w").write(
            f'backend: "onnxruntime"\nmax_batch_size: {max_batch_size}\n{io}{body}')
    return repo, model_path


def main():
    models = {
        # Everything left to the defaults: one CPU instance with
        # every core's intra-op threads.
        "mlp_batched": "dynamic_batching { }\n",
        # One instance using every core; batches go as soon as 16 or 32
        # requests are there, else after 2 ms.
        "mlp_one_instance": ('instance_group [ { count: 1 kind: KIND_CPU } ]\n'
                             'dynamic_batching { preferred_batch_size: [ 16, 32 ] '
                             'max_queue_delay_microseconds: 2000 }\n'),
        # The baseline: the same model without dynamic batching.
        "mlp_unbatched": "",
    }
    repo, model_path = mlp_repository("trtis-batching-", models, 32)

    lines = ["# Dynamic batching benchmark", "",
             f"Model: 8 x dense 1024x1024 FP32 (benches/drivers/make_mlp.py); {os.cpu_count()} CPUs. "
             "Ceiling: ONNX Runtime called directly from Python, same model, same run.", ""]
    lines += ["| direct ONNX Runtime | intra-op threads | infer/s | CPU µs/inf |", "| --- | --- | --- | --- |"]
    ceiling, ort_cpu = {}, {}
    for batch in (1, 16, 32):
        for threads, label in ((0, "default"), (1, "1"), (2, "2")):
            r, cpu = direct_ort(model_path, batch, threads)
            ceiling[batch] = max(ceiling.get(batch, 0), r)
            ort_cpu[batch] = min(ort_cpu.get(batch, cpu), cpu)
            lines.append(f"| batch {batch} | {label} | {r:.0f} | {cpu:.0f} |")
            print(lines[-1], flush=True)
    lines.append("")

    server = Server(repo, 18200)
    lines += ["| model | client | concurrency | infer/s | of ceiling (batch 16) | p50 ms | p99 ms | mean batch | batch sizes (share of executions) | server CPU µs/inf | of which instance threads | client CPU µs/inf |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    runs = [(model, "perf_analyzer", c) for model in models for c in CONCURRENCY]
    # The same load from trtis perf, whose client costs less CPU on the
    # shared cores: what the server does when the client takes less.
    runs.append(("mlp_one_instance", "trtis perf", 16))
    results = {}
    for model, client, c in runs:
        r = perf(server, model, c, client)
        results[(model, client, c)] = r
        if "error" in r:
            lines.append(f"| {model} | {client} | {c} | {r['error']} | | | | | | | | |")
        else:
            lines.append(f"| {model} | {client} | {c} | {r['throughput']:.0f} | {r['throughput'] / ceiling[16]:.2f} | "
                         f"{r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['mean_batch']:.1f} | {histogram(r['sizes'])} | "
                         f"{r['server_cpu_us']:.0f} | {r['instance_cpu_us']:.0f} | {r['client_cpu_us']:.0f} |")
        print(lines[-1], flush=True)
    server.stop()
    shutil.rmtree(repo)
    lines.append("")
    for (model, client, c), r in results.items():
        if c == 16 and "error" not in r:
            lines.append(f"- {model} ({client}): at concurrency 16, {r['throughput']:.0f} infer/s = "
                         f"{100 * r['throughput'] / ceiling[16]:.0f}% of the best direct ONNX Runtime rate at "
                         f"batch 16 ({ceiling[16]:.0f}/s), mean batch {r['mean_batch']:.1f}.")
    # The CPU budget of the 70% target: the client shares the cores, so
    # every inference costs its ONNX Runtime work (at best the in-process
    # figure at batch 16, which concurrency 16 cannot exceed), the client's
    # work and the server's own work, and the cores give no more than
    # cores x 1 s per second.
    best = results.get(("mlp_one_instance", "perf_analyzer", 16), {})
    if "error" not in best and best:
        cores = os.cpu_count()
        budget = cores * 1e6 / (0.7 * ceiling[16])
        own = best["server_cpu_us"] - best["instance_cpu_us"]
        lines += ["", "CPU budget at concurrency 16 (mlp_one_instance, perf_analyzer, this run):",
                  f"- 70% of the ceiling is {0.7 * ceiling[16]:.0f} infer/s: {cores} cores give "
                  f"{budget:.0f} µs of CPU per inference for everything on the machine.",
                  f"- ONNX Runtime in-process needs at least {ort_cpu[16]:.0f} µs per inference at batch 16 "
                  f"(its cheapest thread setting); perf_analyzer took {best['client_cpu_us']:.0f} µs; "
                  f"together {ort_cpu[16] + best['client_cpu_us']:.0f} µs, leaving "
                  f"{budget - ort_cpu[16] - best['client_cpu_us']:.0f} µs for the server's own work "
                  f"(measured: {own:.0f} µs beyond its instance threads; the instance threads took "
                  f"{best['instance_cpu_us']:.0f} µs).",
                  f"- Highest rate those two alone allow: {cores * 1e6 / (ort_cpu[16] + best['client_cpu_us']):.0f} infer/s "
                  f"= {100 * cores * 1e6 / (ort_cpu[16] + best['client_cpu_us']) / ceiling[16]:.0f}% of the ceiling, "
                  "with a server that costs nothing and cores never idle."]
    report = "\n".join(lines)
    print(report)
    open(os.path.join(OUT, "batching-bench.md"), "w").write(report + "\n")


if __name__ == "__main__":
    main()
