"""The OpenVINO backend against the ONNX Runtime backend on the same model,
same run (issue 43): which engine trtis should recommend for CPU serving.

The example classifier twice, as it ships: efficientnet_lite0 (ONNX Runtime,
the ONNX file) and efficientnet_lite0_openvino (OpenVINO, the IR converted
from that file by scripts/make-openvino-models.py); both with one CPU
instance, max batch 8, 1 ms batching delay and no engine parameters (each
engine's own thread defaults). perf_analyzer over gRPC at concurrency 1, 4
and 16 on each, alternating the engine that goes first; throughput, p50,
p99, server CPU per inference and the batch sizes that formed. Each engine
in-process too, through the backend's own load and execute with no server
(examples/engine_direct.rs) at batch 1, 4 and 8: what the server adds.

Run it with scripts/bench.sh openvino. Results: target/bench/openvino-bench.md.
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

DIRECT = os.path.join(ROOT, "target/release/examples/engine_direct")
MODELS = ("efficientnet_lite0", "efficientnet_lite0_openvino")
ENGINE = {"efficientnet_lite0": "ONNX Runtime", "efficientnet_lite0_openvino": "OpenVINO"}


def direct(model_dir, batch, seconds=6.0):
    out = subprocess.run([DIRECT, "--model-dir", model_dir, "--batch", str(batch), "--seconds", str(seconds)],
                         capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    os.makedirs(OUT, exist_ok=True)
    subprocess.run(["cargo", "build", "--release", "--locked", "--example", "engine_direct"], cwd=ROOT, check=True)
    repo = tempfile.mkdtemp(prefix="trtis-openvino-")
    for m in MODELS:
        shutil.copytree(os.path.join(ROOT, "examples/model_repository", m), os.path.join(repo, m))
    lines = ["# OpenVINO vs ONNX Runtime", "",
             f"{os.cpu_count()} CPUs. The example classifier on each engine, one CPU instance, max batch 8, "
             "engines' default threads; same run.", "",
             "| in-process (engine_direct) | batch | infer/s | p50 ms | CPU µs/inf |", "| --- | --- | --- | --- | --- |"]
    ref = {}
    for batch in (1, 4, 8):
        for m in MODELS:
            r = direct(os.path.join(repo, m), batch)
            ref[(m, batch)] = r
            lines.append(f"| {ENGINE[m]} | {batch} | {r['infer_per_s']:.1f} | {r['p50_ms']:.1f} | {r['cpu_us']:.0f} |")
            print(lines[-1], flush=True)
    lines += ["", "| engine | concurrency | infer/s | vs in-process batch 1 | p50 ms | p99 ms | mean batch | batch sizes | server CPU µs/inf |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    server = Server(repo, 18400)
    results = {}
    for i, conc in enumerate((1, 4, 16)):
        order = MODELS if i % 2 == 0 else MODELS[::-1]
        for m in order:
            r = perf(server, m, conc)
            results[(m, conc)] = r
            if "error" in r:
                lines.append(f"| {ENGINE[m]} | {conc} | {r['error']} | | | | | | |")
            else:
                lines.append(f"| {ENGINE[m]} | {conc} | {r['throughput']:.1f} | "
                             f"{r['throughput'] / ref[(m, 1)]['infer_per_s']:.2f} | {r['p50_ms']:.1f} | "
                             f"{r['p99_ms']:.1f} | {r['mean_batch']:.1f} | {histogram(r['sizes'])} | "
                             f"{r['server_cpu_us']:.0f} |")
            print(lines[-1], flush=True)
    server.stop()
    shutil.rmtree(repo)
    lines += ["", "OpenVINO / ONNX Runtime, same run:"]
    for batch in (1, 4, 8):
        a, b = ref[(MODELS[1], batch)], ref[(MODELS[0], batch)]
        lines.append(f"- in-process batch {batch}: {a['infer_per_s'] / b['infer_per_s']:.2f}x throughput, "
                     f"{a['cpu_us'] / b['cpu_us']:.2f}x CPU per inference")
    for conc in (1, 4, 16):
        a, b = results[(MODELS[1], conc)], results[(MODELS[0], conc)]
        if "error" in a or "error" in b:
            lines.append(f"- through trtis, concurrency {conc}: not measured ({a.get('error') or b.get('error')})")
        else:
            lines.append(f"- through trtis, concurrency {conc}: {a['throughput'] / b['throughput']:.2f}x throughput, "
                         f"{a['server_cpu_us'] / b['server_cpu_us']:.2f}x server CPU per inference, "
                         f"p99 {a['p99_ms'] / b['p99_ms']:.2f}x")
    lines.append("")
    open(os.path.join(OUT, "openvino-bench.md"), "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
