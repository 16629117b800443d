"""Benchmark of a KIND_GPU instance: the example classifier
(EfficientNet-Lite0, ONNX) on CUDA through trtis serve against ONNX Runtime
called directly on the same GPU, in the same run.

It needs a machine with an NVIDIA GPU, and the GPU build of ONNX Runtime
that scripts/test-gpu.sh sets up (.venv-gpu, ORT_DYLIB_PATH and
LD_LIBRARY_PATH exported); scripts/test-gpu.sh --bench runs it so. Anywhere
else it stops and says why.

In one run it measures:
  - the reference: onnxruntime-gpu in-process (.venv-gpu's python), the
    CUDA execution provider on GPU 0, inputs from host memory as a client's
    arrive: µs per run at batch 1, infer/s at batch 16;
  - trtis serve with the classifier as KIND_GPU (one instance, GPU 0),
    perf_analyzer over gRPC at concurrency 1 with batch 1 and batch 16, then
    concurrency 2 with batch 16: infer/s, p50, and the ratios to the
    reference (throughput over the direct rate; p50 minus the direct run).

Run it with scripts/test-gpu.sh --bench (or scripts/bench.sh gpu with that
environment). Results: target/bench/gpu-bench.md.
"""
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve import OUT, PA, ROOT, Server  # noqa: E402

MODEL = os.path.join(ROOT, "examples/model_repository/efficientnet_lite0")
GPU_PYTHON = os.path.join(ROOT, ".venv-gpu/bin/python")


def direct(batch, seconds=5.0):
    """onnxruntime-gpu on GPU 0: (µs per run, infer/s) at `batch`."""
    code = f"""
import json, time, numpy as np, onnxruntime as ort
s = ort.InferenceSession({os.path.join(MODEL, "1", "model.onnx")!r},
                         providers=[("CUDAExecutionProvider", {{"device_id": 0}})])
assert s.get_providers()[0] == "CUDAExecutionProvider", s.get_providers()
x = np.random.default_rng(0).standard_normal(({batch}, 3, 224, 224), dtype=np.float32)
for _ in range(20):
    s.run(None, {{"input": x}})
n, t0 = 0, time.perf_counter()
while time.perf_counter() - t0 < {seconds}:
    s.run(None, {{"input": x}}); n += 1
dt = time.perf_counter() - t0
print(json.dumps({{"us": dt / n * 1e6, "rate": n * {batch} / dt}}))
"""
    out = subprocess.run([GPU_PYTHON, "-c", code], capture_output=True, text=True, check=True).stdout
    r = json.loads(out)
    return r["us"], r["rate"]


def perf(server, batch, concurrency):
    path = os.path.join(OUT, f"pa-gpu-b{batch}-c{concurrency}.csv")
    subprocess.run([PA, "-m", "efficientnet_lite0", "-u", f"127.0.0.1:{server.grpc_port}", "-i", "grpc",
                    "-b", str(batch), "--concurrency-range", str(concurrency), "-p", "3000", "-r", "10",
                    "-s", "10", "-f", path], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    row = next(csv.DictReader(open(path)))
    return float(row["Inferences/Second"]), float(row["p50 latency"]) / 1000


def main():
    if not os.path.exists("/proc/driver/nvidia/version"):
        sys.exit("bench gpu: this machine has no NVIDIA GPU driver; the GPU benchmark runs on a GPU machine "
                 "(scripts/test-gpu.sh --bench)")
    if not os.path.exists(GPU_PYTHON) or "ORT_DYLIB_PATH" not in os.environ:
        sys.exit("bench gpu: run it through scripts/test-gpu.sh --bench (it sets up .venv-gpu and ORT_DYLIB_PATH)")
    repo = tempfile.mkdtemp(prefix="trtis-gpu-")
    shutil.copytree(MODEL, os.path.join(repo, "efficientnet_lite0"))
    config = os.path.join(repo, "efficientnet_lite0", "config.pbtxt")
    # Batches of 16 (the example config allows 8).
    text = open(config).read().replace("max_batch_size: 8", "max_batch_size: 16")
    start = text.index("instance_group")
    end = text.index("]\n", start) + 2
    open(config, "w").write(text[:start] + "instance_group [ { kind: KIND_GPU count: 1 gpus: [ 0 ] } ]\n"
                            + text[end:])
    lines = ["# A KIND_GPU instance against ONNX Runtime on the same GPU", "",
             "The example classifier (EfficientNet-Lite0, ONNX), GPU 0. Reference: onnxruntime-gpu called "
             "directly (CUDA execution provider, host inputs), same run.", ""]
    ref1, _ = direct(1)
    _, ref16 = direct(16)
    lines += [f"Direct: batch 1 {ref1:.0f} µs per run; batch 16 {ref16:.0f} infer/s.", "",
              "| trtis serve (perf_analyzer, gRPC) | infer/s | of direct batch-16 rate | p50 ms | p50 - direct run ms |",
              "| --- | --- | --- | --- | --- |"]
    server = Server(repo, 18950)
    try:
        for batch, conc in [(1, 1), (16, 1), (16, 2)]:
            rate, p50 = perf(server, batch, conc)
            direct_ms = ref1 / 1000 if batch == 1 else 16 / ref16 * 1000
            lines.append(f"| batch {batch}, concurrency {conc} | {rate:.0f} | {rate / ref16:.2f} | {p50:.2f} | "
                         f"{p50 - direct_ms:.2f} |")
            print(lines[-1], flush=True)
    finally:
        server.stop()
        shutil.rmtree(repo, ignore_errors=True)
    out = os.path.join(OUT, "gpu-bench.md")
    open(out, "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"written to {out}")


if __name__ == "__main__":
    main()
