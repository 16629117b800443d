"""trtis against Triton 2.51 with its own ONNX Runtime backend, same
repository, same run (issue 39).

scripts/setup-triton-ort.sh builds Triton's real `onnxruntime` backend
from Triton's sources (r24.10 = 2.51) for the tritonserver of the
nvidia-pytriton wheel, linked to the same ONNX Runtime library trtis uses.
Both servers serve one repository, loaded once and idle while the other is
measured:
  - mlp_dyn: the compute MLP (8 x MatMul 1024 + Relu, benches/drivers/
    make_mlp.py) with the side-by-side table's configuration (dynamic
    batching, preferred 8 and 16, 100 µs delay, max batch 16, instances
    left to each server's default: trtis one, Triton two);
  - efficientnet_lite0: the example classifier with its config as it is
    (one CPU instance, max batch 8, 1 ms delay).
perf_analyzer 2.51 over gRPC at concurrency 1, 2, 4, 8, 16 and 32, in
TAKES takes whose server order alternates (Triton first, then trtis first,
...): throughput, p50 and p99, server CPU per inference (from /proc) and
the batch sizes that formed (the statistics extension, on both servers).
Every take is a ratio in the table; the targets (issue 39) count each take:
throughput at least 1.0x Triton at every concurrency, mean batch at least
Triton's at 16 and 32, server CPU per inference at most 1.0x, p99 at most
Triton's.

TRTIS_BENCH_COMPUTE_MODELS (comma separated) and TRTIS_BENCH_COMPUTE_C
(concurrencies) narrow the run; TRTIS_BENCH_COMPUTE_TAKES sets the takes
(default 3). TRTIS_BENCH_COMPUTE_AA=1 is the control: the "Triton" side is
a second trtis serving the same repository, so the ratios show how far
this machine's drift alone moves a take (results:
target/bench/compute-aa-bench.md).

Run it with scripts/bench.sh compute. Results: target/bench/compute-bench.md.
"""
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve import OUT, ROOT, Server, cpu_seconds  # noqa: E402
from batching import histogram, mlp_repository, perf  # noqa: E402
from triton import Triton, TritonUnavailable, run_setup, triton_settings  # noqa: E402

CONCURRENCY = tuple(int(c) for c in os.environ.get("TRTIS_BENCH_COMPUTE_C", "1,2,4,8,16,32").split(","))
TAKES = int(os.environ.get("TRTIS_BENCH_COMPUTE_TAKES", "3"))
AA = os.environ.get("TRTIS_BENCH_COMPUTE_AA") == "1"
MLP = "mlp_dyn"
CLASSIFIER = "efficientnet_lite0"
MODELS = tuple(os.environ.get("TRTIS_BENCH_COMPUTE_MODELS", f"{MLP},{CLASSIFIER}").split(","))
BATCHING = "dynamic_batching { preferred_batch_size: [ 8, 16 ] max_queue_delay_microseconds: 100 }\n"


def repository():
    repo, _ = mlp_repository("trtis-compute-", {MLP: BATCHING}, 16)
    shutil.copytree(os.path.join(ROOT, "examples/model_repository", CLASSIFIER), os.path.join(repo, CLASSIFIER))
    return repo


def ratio(a, b):
    return a / b if b else float("nan")


def main():
    try:
        settings = None if AA else triton_settings()
        if not AA:
            run_setup("scripts/setup-triton-ort.sh", timeout=1800)
    except TritonUnavailable as e:
        sys.exit(f"compute: Triton is not available here: {e}")
    repo = repository()
    trtis = Server(repo, 18800, args=["--model-control-mode", "explicit",
                                      *(f"--load-model={m}" for m in MODELS)])
    if AA:
        # The control: a second trtis in Triton's place.
        triton = Server(repo, 18810, args=["--model-control-mode", "explicit",
                                           *(f"--load-model={m}" for m in MODELS)])
    else:
        triton = Triton(settings, repo, 18810, MODELS, os.path.join(OUT, "compute-triton.log"))
    servers = {"trtis": trtis, "Triton": triton}
    # results[(model, c)] = [{"trtis": run, "Triton": run} per take]
    results = {}
    idle_cpu = {"trtis": 0.0, "Triton": 0.0}  # CPU seconds each took while the other was measured
    try:
        for model in MODELS:
            for c in CONCURRENCY:
                takes = results[(model, c)] = []
                for take in range(TAKES):
                    order = ("Triton", "trtis") if take % 2 == 0 else ("trtis", "Triton")
                    runs = {}
                    for name in order:
                        other = "Triton" if name == "trtis" else "trtis"
                        idle0 = cpu_seconds(servers[other].proc.pid)
                        runs[name] = perf(servers[name], model, c)
                        idle_cpu[other] += cpu_seconds(servers[other].proc.pid) - idle0
                    takes.append(runs)
                    a, b = runs["trtis"], runs["Triton"]
                    if "error" in a or "error" in b:
                        print(f"{model} c={c} take {take + 1}: trtis {a.get('error', 'ok')}, "
                              f"Triton {b.get('error', 'ok')}", flush=True)
                    else:
                        print(f"{model} c={c} take {take + 1} ({order[0]} first): trtis {a['throughput']:.0f}, "
                              f"Triton {b['throughput']:.0f} infer/s ({ratio(a['throughput'], b['throughput']):.2f}x),"
                              f" mean batch {a['mean_batch']:.2f} / {b['mean_batch']:.2f}, CPU/inf "
                              f"{ratio(a['server_cpu_us'], b['server_cpu_us']):.2f}x, p99 "
                              f"{ratio(a['p99_ms'], b['p99_ms']):.2f}x", flush=True)
    finally:
        trtis.stop()
        triton.stop()
        shutil.rmtree(repo)

    lines = ["# trtis against Triton 2.51's ONNX Runtime backend" if not AA else
             "# Control (A/A): trtis against a second trtis, in the Triton column", "",
             f"{os.cpu_count()} CPUs; one repository served by both (each idle while the other runs); "
             f"perf_analyzer 2.51 over gRPC; {TAKES} takes, the server order alternating (take 1 Triton first). "
             "Ratios are trtis over Triton within a take. Models: `mlp_dyn` (compute MLP, preferred 8/16, "
             "100 µs delay, max batch 16, each server's default instances: trtis 1, Triton 2) and "
             "`efficientnet_lite0` (the example config: 1 instance, max batch 8, 1 ms delay).", ""]
    verdicts = []
    for model in MODELS:
        lines += [f"## {model}", "",
                  "| concurrency | infer/s trtis / Triton (per take) | throughput ratio | p50 ms trtis / Triton "
                  "| p99 ratio | mean batch trtis / Triton | server CPU/inf ratio | batch sizes trtis | "
                  "batch sizes Triton |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for c in CONCURRENCY:
            takes = [t for t in results.get((model, c), []) if "error" not in t["trtis"] and "error" not in t["Triton"]]
            if not takes:
                lines.append(f"| {c} | not measured | | | | | | | |")
                verdicts.append(f"- {model} c={c}: not measured")
                continue
            a = [t["trtis"] for t in takes]
            b = [t["Triton"] for t in takes]
            thr = [ratio(x["throughput"], y["throughput"]) for x, y in zip(a, b)]
            p99 = [ratio(x["p99_ms"], y["p99_ms"]) for x, y in zip(a, b)]
            cpu = [ratio(x["server_cpu_us"], y["server_cpu_us"]) for x, y in zip(a, b)]
            fmt = lambda xs, f="{:.2f}": ", ".join(f.format(x) for x in xs)  # noqa: E731
            lines.append(
                f"| {c} | {fmt([x['throughput'] for x in a], '{:.0f}')} / {fmt([y['throughput'] for y in b], '{:.0f}')} "
                f"| {fmt(thr)} | {fmt([x['p50_ms'] for x in a])} / {fmt([y['p50_ms'] for y in b])} | {fmt(p99)} | "
                f"{fmt([x['mean_batch'] for x in a], '{:.1f}')} / {fmt([y['mean_batch'] for y in b], '{:.1f}')} | "
                f"{fmt(cpu)} | {histogram(a[-1]['sizes'])} | {histogram(b[-1]['sizes'])} |")
            missed = []
            if min(thr) < 1.0:
                missed.append(f"throughput {min(thr):.2f}x")
            if c >= 16 and any(x["mean_batch"] < y["mean_batch"] for x, y in zip(a, b)):
                missed.append("mean batch below Triton's")
            if max(cpu) > 1.0:
                missed.append(f"CPU/inf {max(cpu):.2f}x")
            if max(p99) > 1.0:
                missed.append(f"p99 {max(p99):.2f}x")
            left = len(results.get((model, c), [])) - len(takes)
            verdicts.append(f"- {model} c={c}: " + ("met in every take" if not missed else
                                                     "missed in a take: " + ", ".join(missed))
                            + (f" ({left} of {TAKES} takes not measured: perf_analyzer's reason in the log)"
                               if left else ""))
        lines.append("")
    lines += [f"CPU the idle server took while the other was measured, in all: trtis {idle_cpu['trtis']:.2f} s, "
              f"Triton {idle_cpu['Triton']:.2f} s.", "", "## Targets (each take counted)", ""] + verdicts
    report = "\n".join(lines)
    print(report)
    open(os.path.join(OUT, "compute-aa-bench.md" if AA else "compute-bench.md"), "w").write(report + "\n")


if __name__ == "__main__":
    main()
