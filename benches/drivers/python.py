"""Benchmark of the Python backend: what serving a model.py costs per request.

In one run on this machine it measures:
  - the reference: the example add_sub model.py called in a plain Python loop
    (the same interpreter, our triton_python_backend_utils, a request object
    built once per call as a received request would be), µs per execute();
  - add_sub through `trtis serve` (1 worker process), driven by perf_analyzer
    over gRPC at concurrency 1 and 2: throughput, p50 latency, and the CPU
    per inference of the server plus its worker processes (from /proc);
  - the overhead per request: server + worker CPU per inference minus the
    reference's CPU per call, and p50 latency minus the reference's time;
  - how tensors cross to the worker (a Unix socket, one copy each way, a
    zero-copy numpy view in the worker): a Python identity model against
    trtis's built-in identity backend (no worker), both FP32 [-1], at 16 KB
    and 4 MB per input, gRPC, concurrency 1; the difference per MB is what
    the crossing costs.

Triton's figure to beat (python-backend-facts.md §10 / measuring.md: its
Python backend costs about 120-180 µs per request in the stub on this
machine class); the target is half of that.

Run it with scripts/bench.sh python. Results: target/bench/python-bench.md.
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

UTILS_DIR = os.path.join(ROOT, "src/core/backend/python")
MODEL = os.path.join(ROOT, "examples/model_repository/add_sub")


def reference(seconds=3.0):
    """add_sub's execute() in a plain loop, in a child interpreter (the
    worker's own python) so this driver's imports do not count."""
    code = f"""
import importlib.util, json, sys, time, resource
sys.path.insert(0, {UTILS_DIR!r})
import numpy as np
import triton_python_backend_utils as pb_utils
spec = importlib.util.spec_from_file_location("1.model", {os.path.join(MODEL, "1", "model.py")!r})
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
m = mod.TritonPythonModel()
config = {{"output": [{{"name": "OUTPUT0", "data_type": "TYPE_FP32"}}, {{"name": "OUTPUT1", "data_type": "TYPE_FP32"}}]}}
m.initialize({{"model_config": json.dumps(config)}})
a = np.arange(4, dtype=np.float32); b = np.ones(4, dtype=np.float32)
n = 0; t0 = time.perf_counter(); c0 = time.process_time()
while time.perf_counter() - t0 < {seconds}:
    req = pb_utils.InferenceRequest(model_name="add_sub", inputs=[pb_utils.Tensor("INPUT0", a), pb_utils.Tensor("INPUT1", b)],
                                    requested_output_names=["OUTPUT0", "OUTPUT1"])
    m.execute([req]); n += 1
wall = time.perf_counter() - t0; cpu = time.process_time() - c0
print(json.dumps({{"us": wall / n * 1e6, "cpu_us": cpu / n * 1e6}}))
"""
    python = os.path.join(ROOT, ".venv/bin/python")
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def tree_cpu(pid):
    """CPU seconds of a process and of its live children (the workers)."""
    own = children = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    pids = [pid]
    seen = set()
    while pids:
        p = pids.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            fields = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
            cpu = (int(fields[11]) + int(fields[12])) / tick
            if p == pid:
                own += cpu
            else:
                children += cpu
            for task in os.listdir(f"/proc/{p}/task"):
                kids = open(f"/proc/{p}/task/{task}/children").read().split()
                pids += [int(k) for k in kids]
        except OSError:
            pass
    return own, children


IDENTITY_PY = '''import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]
            )
            for r in requests
        ]
'''
IDENTITY_CONFIG = ('{backend}max_batch_size: 0\n'
                   'input [{{ name: "INPUT0" data_type: TYPE_FP32 dims: [-1] }}]\n'
                   'output [{{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [-1] }}]\n')


def identity_models(repo):
    for name, backend, files in (("identity_py", "python", {"model.py": IDENTITY_PY}),
                                 ("identity_builtin", "identity", {".keep": ""})):
        os.makedirs(os.path.join(repo, name, "1"))
        for file, text in files.items():
            open(os.path.join(repo, name, "1", file), "w").write(text)
        open(os.path.join(repo, name, "config.pbtxt"), "w").write(
            IDENTITY_CONFIG.format(backend=f'backend: "{backend}"\n'))


def perf(server, model, concurrency, extra=()):
    tag = "".join(extra).replace(":", "-")
    csv_path = os.path.join(OUT, f"python-{model}-c{concurrency}{tag}.csv")
    cpu0, n0 = tree_cpu(server.proc.pid), server.inferences(model)
    cmd = [PA, "-m", model, "-u", f"127.0.0.1:{server.grpc_port}", "-i", "grpc",
           "--concurrency-range", str(concurrency), "-p", "3000", "-r", "12", "-s", "15", "-f", csv_path,
           *extra]
    if subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode != 0:
        return {"error": "perf_analyzer failed"}
    cpu1, n1 = tree_cpu(server.proc.pid), server.inferences(model)
    row = next(csv.DictReader(open(csv_path)))
    n = max(n1 - n0, 1)
    return {
        "throughput": float(row["Inferences/Second"]),
        "p50_us": float(row["p50 latency"]),
        "server_us": (cpu1[0] - cpu0[0]) / n * 1e6,
        "worker_us": (cpu1[1] - cpu0[1]) / n * 1e6,
    }


def main():
    os.makedirs(OUT, exist_ok=True)
    repo = tempfile.mkdtemp(prefix="trtis-python-")
    shutil.copytree(MODEL, os.path.join(repo, "add_sub"))
    identity_models(repo)
    ref = reference()
    lines = ["# Python backend benchmark", "",
             f"{os.cpu_count()} CPUs. Reference: add_sub's execute() in a plain Python loop, same interpreter, "
             f"same run: {ref['us']:.1f} µs per call ({ref['cpu_us']:.1f} µs CPU).", "",
             "| client | concurrency | infer/s | p50 µs | server CPU µs/inf | worker CPU µs/inf | worker overhead CPU µs/inf | overhead p50 µs |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    server = Server(repo, 18400)
    for conc in (1, 2):
        r = perf(server, "add_sub", conc)
        if "error" in r:
            lines.append(f"| perf_analyzer | {conc} | {r['error']} | | | | | |")
        else:
            lines.append(f"| perf_analyzer | {conc} | {r['throughput']:.0f} | {r['p50_us']:.0f} | {r['server_us']:.0f} | "
                         f"{r['worker_us']:.0f} | {r['worker_us'] - ref['cpu_us']:.0f} | {r['p50_us'] - ref['us']:.0f} |")
        print(lines[-1], flush=True)
    lines += ["", "Tensors crossing to the worker: FP32 identity, gRPC, concurrency 1.", "",
              "| input | model | infer/s | p50 µs | server CPU µs/inf | worker CPU µs/inf | total CPU µs/inf |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    totals = {}
    for elements, label in ((4096, "16 KB"), (1048576, "4 MB")):
        for model in ("identity_builtin", "identity_py"):
            r = perf(server, model, 1, ["--shape", f"INPUT0:{elements}"])
            if "error" in r:
                lines.append(f"| {label} | {model} | {r['error']} | | | | |")
                continue
            total = r["server_us"] + r["worker_us"]
            totals[(label, model)] = (total, r["p50_us"])
            lines.append(f"| {label} | {model} | {r['throughput']:.0f} | {r['p50_us']:.0f} | {r['server_us']:.0f} | "
                         f"{r['worker_us']:.0f} | {total:.0f} |")
            print(lines[-1], flush=True)
    try:
        small = totals[("16 KB", "identity_py")][0] - totals[("16 KB", "identity_builtin")][0]
        big = totals[("4 MB", "identity_py")][0] - totals[("4 MB", "identity_builtin")][0]
        lines += ["", f"The Python backend's extra CPU per inference: {small:.0f} µs at 16 KB, {big:.0f} µs at 4 MB: "
                  f"about {(big - small) / 4:.0f} µs per MB of input (the same MB goes back as output) beyond "
                  "the fixed cost."]
    except KeyError:
        pass
    server.stop()
    again = reference()
    lines += ["", f"Reference again after the server runs: {again['us']:.1f} µs per call "
              f"({again['cpu_us']:.1f} µs CPU).", "",
              "Server CPU: the trtis process (gRPC, scheduler, frames). Worker CPU: the Python worker "
              "process; its overhead is what it spends per request beyond the model's own execute() "
              "(frames, request and response objects, thread hand-offs) and is the figure to compare "
              "with Triton's stub: about 120-180 µs per request on this machine class "
              "(python-backend-facts.md §10); target: half of that.", ""]
    shutil.rmtree(repo)
    open(os.path.join(OUT, "python-bench.md"), "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
