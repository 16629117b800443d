"""Benchmark of the PyTorch backend against libtorch called directly.

In one run on this machine it measures:
  - the TorchScript classifier (examples' efficientnet_lite0_pt, 1 CPU
    instance, 1 intra-op thread, dynamic batching as configured) through
    `trtis serve`, driven by perf_analyzer over gRPC at concurrency 1 and 2,
    against the same module called directly in-process through tch with the
    same thread count (backends/torch/examples/torch_direct.rs) at batch 1 and 2: the ratio
    at concurrency 2 is the figure (target: at least 0.95);
  - the compute-bound MLP (8 x Linear 1024 + ReLU, traced with tch, FP32)
    with dynamic batching (one instance, preferred batch 16, 2 ms delay) at
    concurrency 16, against raw libtorch at batch 16 with the same threads;
  - the same classifier as a PyTorch 2 AOTInductor package (examples'
    efficientnet_lite0_pt2, torch.export + AOTInductor with freezing) against
    the TorchScript one, both through the server at concurrency 1, 4 and 16
    (perf_analyzer, gRPC), and against the package run in-process through the
    backend's own loader (torch_direct on the .pt2) at batch 1, 4 and 8;
  - server CPU per inference (from /proc) and the batch sizes that formed.

Run it with scripts/bench.sh pytorch. Results: target/bench/pytorch-bench.md.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve import OUT, ROOT, Server  # noqa: E402
from batching import histogram, perf  # noqa: E402

DIRECT = os.path.join(ROOT, "target/release/examples/torch_direct")


def direct(model, shape, batch, threads, seconds=6.0):
    out = subprocess.run([DIRECT, "run", model, "--shape", shape, "--batch", str(batch),
                          "--threads", str(threads), "--seconds", str(seconds)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    os.makedirs(OUT, exist_ok=True)
    subprocess.run(["cargo", "build", "--release", "--locked", "-p", "trtis-torch",
                    "--example", "torch_direct"], cwd=ROOT, check=True)
    mlp = os.path.join(OUT, "mlp.pt")
    if not os.path.exists(mlp):
        subprocess.run([DIRECT, "make-mlp", mlp], check=True)
    repo = tempfile.mkdtemp(prefix="trtis-pytorch-")
    shutil.copytree(os.path.join(ROOT, "examples/model_repository/efficientnet_lite0_pt"),
                    os.path.join(repo, "efficientnet_lite0_pt"))
    classifier = os.path.join(repo, "efficientnet_lite0_pt", "1", "model.pt")
    shutil.copytree(os.path.join(ROOT, "examples/model_repository/efficientnet_lite0_pt2"),
                    os.path.join(repo, "efficientnet_lite0_pt2"))
    package = os.path.join(repo, "efficientnet_lite0_pt2", "1", "model.pt2")
    os.makedirs(os.path.join(repo, "mlp_pt", "1"))
    os.symlink(mlp, os.path.join(repo, "mlp_pt", "1", "model.pt"))
    open(os.path.join(repo, "mlp_pt", "config.pbtxt"), "w").write(
        'backend: "pytorch"\nmax_batch_size: 32\n'
        'input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 1024 ] } ]\n'
        'output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 1024 ] } ]\n'
        'instance_group [ { count: 1 kind: KIND_CPU } ]\n'
        'dynamic_batching { preferred_batch_size: [ 16 ] max_queue_delay_microseconds: 2000 }\n')

    lines = ["# PyTorch backend benchmark", "",
             f"{os.cpu_count()} CPUs. Reference: the same TorchScript module called directly through tch "
             "(backends/torch/examples/torch_direct.rs), same threads, same run.", "",
             "| direct tch | batch | intra-op threads | infer/s | CPU µs/inf |", "| --- | --- | --- | --- | --- |"]
    ref = {}
    for name, model, shape, batches, threads in (
            ("classifier", classifier, "3,224,224", (1, 2, 4, 8), (1,)),
            ("classifier.pt2", package, "3,224,224", (1, 4, 8), (1,)),
            ("mlp", mlp, "1024", (1, 16), (1, 2))):
        for b in batches:
            for t in threads:
                r = direct(model, shape, b, t)
                ref[(name, b, t)] = r
                lines.append(f"| {name} | {b} | {t} | {r['infer_per_s']:.1f} | {r['cpu_us']:.0f} |")
                print(lines[-1], flush=True)
    lines.append("")

    server = Server(repo, 18300)
    lines += ["| model | client | concurrency | infer/s | vs direct batch 1 | vs best direct | p50 ms | p99 ms | mean batch | batch sizes | server CPU µs/inf |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    results = {}
    for model, client, conc, base, best in (
            ("efficientnet_lite0_pt", "perf_analyzer", 1, ("classifier", 1, 1), ("classifier", 1, 1)),
            ("efficientnet_lite0_pt", "perf_analyzer", 2, ("classifier", 1, 1), ("classifier", 2, 1)),
            # The same load from trtis perf, a lighter client on the same
            # two cores.
            ("efficientnet_lite0_pt", "trtis perf", 2, ("classifier", 1, 1), ("classifier", 2, 1)),
            ("mlp_pt", "perf_analyzer", 16, ("mlp", 1, 1), ("mlp", 16, 1)),
            # The AOTInductor package and the TorchScript module, same load
            # (max batch 8: the best direct batch is 8 from concurrency 8 up).
            ("efficientnet_lite0_pt", "perf_analyzer", 4, ("classifier", 1, 1), ("classifier", 4, 1)),
            ("efficientnet_lite0_pt", "perf_analyzer", 16, ("classifier", 1, 1), ("classifier", 8, 1)),
            ("efficientnet_lite0_pt2", "perf_analyzer", 1, ("classifier.pt2", 1, 1), ("classifier.pt2", 1, 1)),
            ("efficientnet_lite0_pt2", "perf_analyzer", 4, ("classifier.pt2", 1, 1), ("classifier.pt2", 4, 1)),
            ("efficientnet_lite0_pt2", "perf_analyzer", 16, ("classifier.pt2", 1, 1), ("classifier.pt2", 8, 1))):
        r = perf(server, model, conc, client)
        results[(model, client, conc)] = r
        if "error" in r:
            lines.append(f"| {model} | {client} | {conc} | {r['error']} | | | | | | | |")
        else:
            b1 = ref[base]["infer_per_s"]
            top = max(ref[best]["infer_per_s"], b1)
            lines.append(f"| {model} | {client} | {conc} | {r['throughput']:.1f} | {r['throughput'] / b1:.2f} | "
                         f"{r['throughput'] / top:.2f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | "
                         f"{r['mean_batch']:.1f} | {histogram(r['sizes'])} | {r['server_cpu_us']:.0f} |")
        print(lines[-1], flush=True)
    server.stop()
    # The machine drifts: the classifier's reference again, after the server
    # runs, so a ratio can be read against either side of them.
    again = direct(classifier, "3,224,224", 1, 1)
    before = ref[("classifier", 1, 1)]["infer_per_s"]
    mean = (before + again["infer_per_s"]) / 2
    lines += ["", f"Direct classifier at batch 1 again after the server runs: {again['infer_per_s']:.1f} infer/s "
              f"(before: {before:.1f}). Concurrency 2 against the mean of the two ({mean:.1f}):"]
    for client in ("perf_analyzer", "trtis perf"):
        r = results[("efficientnet_lite0_pt", client, 2)]
        lines.append(f"- {client}: {r.get('throughput', 0) / mean:.2f}")
    lines += ["", "The AOTInductor package against the TorchScript module, through the server, same run "
              "(throughput ratio pt2 / TorchScript, server CPU per inference ratio):"]
    for conc in (1, 4, 16):
        a = results[("efficientnet_lite0_pt2", "perf_analyzer", conc)]
        b = results[("efficientnet_lite0_pt", "perf_analyzer", conc)]
        if "error" in a or "error" in b:
            lines.append(f"- concurrency {conc}: not measured ({a.get('error') or b.get('error')})")
        else:
            lines.append(f"- concurrency {conc}: {a['throughput'] / b['throughput']:.2f}x throughput, "
                         f"{a['server_cpu_us'] / b['server_cpu_us']:.2f}x server CPU per inference")
    shutil.rmtree(repo)
    lines += ["", "The MLP's server instance uses 1 intra-op thread (the backend's default); "
              f"direct batch 16 with 2 threads: {ref[('mlp', 16, 2)]['infer_per_s']:.0f} infer/s.", ""]
    open(os.path.join(OUT, "pytorch-bench.md"), "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
