"""Parallel model loading (`--model-load-thread-count`): time from process
start to READY for a repository of several real models, loaded four at a
time (Triton's default) against one at a time, in the same run.

The repository: the example repository's ONNX classifier
(efficientnet_lite0) three times under three names, its TorchScript copy
(efficientnet_lite0_pt) when the PyTorch backend is built, and the Python
models add_sub and square_int32 twice each (a worker process to start for
each). `trtis serve` starts five times with each setting, alternating;
reported: the median start-to-ready in ms of each and their ratio.

Run it with scripts/bench.sh load. Results: target/bench/load-bench.md.
"""
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve import OUT, ROOT, TRTIS, get  # noqa: E402

EXAMPLES = os.path.join(ROOT, "examples", "model_repository")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def copy_as(repo, model, name):
    dest = os.path.join(repo, name)
    shutil.copytree(os.path.join(EXAMPLES, model), dest, ignore=shutil.ignore_patterns("__pycache__"))
    config = os.path.join(dest, "config.pbtxt")
    if os.path.exists(config):
        with open(config) as f:
            text = f.read()
        with open(config, "w") as f:
            f.write(re.sub(r'^name: ".*"', f'name: "{name}"', text, count=1, flags=re.M))


def build_repo():
    repo = tempfile.mkdtemp(prefix="trtis-load-bench-")
    models = []
    for i in range(3):
        copy_as(repo, "efficientnet_lite0", f"classifier_{i}")
        models.append(f"classifier_{i}")
    torch_lib = os.path.join(ROOT, "target", "release", "libtrtis_torch.so")
    if os.path.exists(torch_lib):
        copy_as(repo, "efficientnet_lite0_pt", "classifier_pt")
        models.append("classifier_pt")
    for model in ("add_sub", "square_int32"):
        for i in range(2):
            copy_as(repo, model, f"{model}_{i}")
            models.append(f"{model}_{i}")
    return repo, models


def start(repo, threads):
    port = free_port()
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [TRTIS, "serve", "--model-store", repo, "--http-address", "127.0.0.1", "--http-port", str(port),
         "--grpc-port", "0", "--metrics-port", "0", "--model-load-thread-count", str(threads)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while get(f"http://127.0.0.1:{port}/v2/health/ready")[0] != 200:
        if proc.poll() is not None:
            sys.exit(f"trtis serve exited with {proc.returncode}")
        time.sleep(0.002)
    ready_ms = (time.perf_counter() - t0) * 1000
    proc.terminate()
    proc.wait(timeout=60)
    return ready_ms


def main():
    repo, models = build_repo()
    times = {1: [], 4: []}
    try:
        for _ in range(5):
            for threads in (4, 1):
                times[threads].append(start(repo, threads))
    finally:
        shutil.rmtree(repo, ignore_errors=True)
    one, four = statistics.median(times[1]), statistics.median(times[4])
    lines = [
        "# Parallel model loading: start to READY",
        "",
        f"Repository: {len(models)} models ({', '.join(models)}); {os.cpu_count()} CPUs.",
        "Five starts of each, alternating; medians.",
        "",
        "| --model-load-thread-count | start to READY, ms (median) | all runs, ms |",
        "| --- | --- | --- |",
        f"| 1 | {one:.0f} | {', '.join(f'{t:.0f}' for t in times[1])} |",
        f"| 4 | {four:.0f} | {', '.join(f'{t:.0f}' for t in times[4])} |",
        "",
        f"4 threads / 1 thread: {four / one:.2f}x the time ({one / four:.2f}x faster).",
    ]
    text = "\n".join(lines) + "\n"
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "load-bench.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
