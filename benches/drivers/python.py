"""Benchmark of the Python backend: what serving a model.py costs per request.

In one run on this machine it measures:
  - the reference: the example add_sub model.py called in a plain Python loop
    (the same interpreter, our triton_python_backend_utils, a request object
    built once per call as a received request would be), µs per execute();
  - add_sub through `trtis serve` (1 worker process), driven by perf_analyzer
    over gRPC at concurrency 1 and 2: throughput, p50 latency, and the CPU
    per inference of the server plus its worker processes (from /proc); the
    worker with its native core (lib_trtis_native.so, the default) and in
    pure Python (TRTIS_PYTHON_NATIVE=0);
  - the overhead per request: server + worker CPU per inference minus the
    reference's CPU per call, and p50 latency minus the reference's time;
  - a model.py that computes for BUSY_US per request (a busy loop), at
    concurrency 1, 2 and 4, on trtis and on Triton: throughput, p50, and
    the worker's busy share (throughput x BUSY_US; 1 is a worker that never
    waits for its next request). trtis hands the worker its next batch
    while one runs (core::instance::run_pipelined);
  - how tensors cross to the worker (a Unix socket, one copy each way, a
    zero-copy numpy view in the worker): a Python identity model against
    trtis's built-in identity backend (no worker), both FP32 [-1], at 16 KB
    and 4 MB per input, gRPC, concurrency 1; the difference per MB is what
    the crossing costs;
  - the Triton reference, same run: Triton 2.51 (tritonserver and its Python
    backend from the nvidia-pytriton==0.7.0 wheel, CPU only, set up by
    scripts/setup-triton.sh, which this driver calls) serving the same
    add_sub model.py, unchanged, from the same repository, under the same
    perf_analyzer command (gRPC, concurrency 1 and 2): throughput, p50, the
    tritonserver process's CPU per inference and its
    triton_python_backend_stub processes' CPU per inference (its children,
    read from /proc as for trtis's workers). Both run one instance. The stub
    embeds the project's own libpython (the interpreter of trtis's worker and
    of the plain loop) and the same numpy version as .venv. Then the ratios
    trtis/Triton: worker vs stub CPU per inference, and total (server +
    worker) CPU per inference. If Triton cannot be set up or started, the
    bench still runs and says why ("Triton reference: not available (...)");
    TRTIS_BENCH_NO_TRITON=1 skips it.

The target: half of the CPU Triton's stub spends per request beyond the
model's own execute().

Run it with scripts/bench.sh python. Results: target/bench/python-bench.md
(Triton's server log: target/bench/python-triton.log).
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
from triton import Triton, TritonUnavailable, triton_settings  # noqa: E402

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


BUSY_US = 300
BUSY_PY = '''import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for r in requests:
            end = time.perf_counter() + {seconds}
            while time.perf_counter() < end:
                pass
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]))
        return responses
'''.format(seconds=BUSY_US / 1e6)
BUSY_CONFIG = ('backend: "python"\nmax_batch_size: 0\n'
               'input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [4] }]\n'
               'output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [4] }]\n'
               'instance_group [{ kind: KIND_CPU count: 1 }]\n')
BUSY_CONCURRENCY = (1, 2, 4)


def busy_model(repo):
    os.makedirs(os.path.join(repo, "busy", "1"))
    open(os.path.join(repo, "busy", "1", "model.py"), "w").write(BUSY_PY)
    open(os.path.join(repo, "busy", "config.pbtxt"), "w").write(BUSY_CONFIG)


def identity_models(repo):
    for name, backend, files in (("identity_py", "python", {"model.py": IDENTITY_PY}),
                                 ("identity_builtin", "identity", {".keep": ""})):
        os.makedirs(os.path.join(repo, name, "1"))
        for file, text in files.items():
            open(os.path.join(repo, name, "1", file), "w").write(text)
        open(os.path.join(repo, name, "config.pbtxt"), "w").write(
            IDENTITY_CONFIG.format(backend=f'backend: "{backend}"\n'))


def perf(server, model, concurrency, extra=(), prefix="python"):
    tag = "".join(extra).replace(":", "-")
    csv_path = os.path.join(OUT, f"{prefix}-{model}-c{concurrency}{tag}.csv")
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


TRITON_LOG = os.path.join(OUT, "python-triton.log")


def triton_rows(repo):
    """add_sub under Triton with the same perf_analyzer command as for trtis:
    {concurrency: perf() result}, or TritonUnavailable."""
    settings = triton_settings()
    triton = Triton(settings, repo, 18410, ("add_sub", "busy"), TRITON_LOG)
    try:
        stubs = triton.children()
        # Only stubs may be children: their CPU is the "worker" column.
        # ("triton_python_backend_stub" shows as its first 15 characters.)
        if not stubs or any(not name.startswith("triton_python") for name in stubs.values()):
            raise TritonUnavailable(f"unexpected children of tritonserver: {sorted(stubs.values())}")
        libpython = "?"
        for line in open(f"/proc/{min(stubs)}/maps"):
            if "libpython" in line:
                libpython = line.split()[-1]
                break
        print(f"Triton ready in {triton.ready_s:.1f} s, {len(stubs)} stub process(es) embedding {libpython}",
              flush=True)
        rows = {conc: perf(triton, "add_sub", conc, prefix="python-triton") for conc in (1, 2)}
        busy = {conc: perf(triton, "busy", conc, prefix="python-triton") for conc in BUSY_CONCURRENCY}
        return rows, busy, {"ready_s": triton.ready_s, "stubs": len(stubs), "libpython": libpython}
    finally:
        triton.stop()


def main():
    os.makedirs(OUT, exist_ok=True)
    repo = tempfile.mkdtemp(prefix="trtis-python-")
    shutil.copytree(MODEL, os.path.join(repo, "add_sub"), ignore=shutil.ignore_patterns("__pycache__"))
    identity_models(repo)
    busy_model(repo)
    ref = reference()
    lines = ["# Python backend benchmark", "",
             f"{os.cpu_count()} CPUs. Reference: add_sub's execute() in a plain Python loop, same interpreter, "
             f"same run: {ref['us']:.1f} µs per call ({ref['cpu_us']:.1f} µs CPU).", "",
             "add_sub (FP32 [4] + [4]) driven by perf_analyzer over gRPC. Worker/stub: trtis's Python worker "
             "process, Triton's triton_python_backend_stub process; overhead = its CPU minus the reference's.", "",
             "| server | concurrency | infer/s | p50 µs | server CPU µs/inf | worker/stub CPU µs/inf | "
             "worker/stub overhead CPU µs/inf | overhead p50 µs |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]

    def row(label, conc, r):
        if "error" in r:
            text = f"| {label} | {conc} | {r['error']} | | | | | |"
        else:
            text = (f"| {label} | {conc} | {r['throughput']:.0f} | {r['p50_us']:.0f} | {r['server_us']:.0f} | "
                    f"{r['worker_us']:.0f} | {r['worker_us'] - ref['cpu_us']:.0f} | {r['p50_us'] - ref['us']:.0f} |")
        print(text, flush=True)
        return text

    # The worker in pure Python first (same run, same model), then with its
    # native core, which the rest of the bench uses.
    pure = Server(repo, 18400, env={"TRTIS_PYTHON_NATIVE": "0"})
    for conc in (1, 2):
        lines.append(row("trtis serve, pure-Python worker", conc, perf(pure, "add_sub", conc, prefix="python-pure")))
    pure.stop()
    server = Server(repo, 18400)
    ours = {}
    for conc in (1, 2):
        ours[conc] = perf(server, "add_sub", conc)
        lines.append(row("trtis serve", conc, ours[conc]))
    table_end = len(lines)
    busy_ours = {conc: perf(server, "busy", conc) for conc in BUSY_CONCURRENCY}
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

    # Triton on the same repository (add_sub only), after trtis has stopped:
    # its rows join the add_sub table, the ratios follow it.
    busy_theirs = {}
    try:
        theirs, busy_theirs, info = triton_rows(repo)
        triton_lines = [row("Triton 2.51", conc, theirs[conc]) for conc in (1, 2)]
        ratios = []
        for conc in (1, 2):
            a, b = ours[conc], theirs[conc]
            if "error" in a or "error" in b:
                ratios.append(f"c={conc}: not measured")
                continue
            label = "the target: 0.5" if conc == 1 else "see below"
            ratios.append(
                f"c={conc}: worker vs stub overhead ({label}) "
                f"{(a['worker_us'] - ref['cpu_us']) / max(b['worker_us'] - ref['cpu_us'], 1e-9):.2f}, "
                f"worker vs stub CPU {a['worker_us'] / max(b['worker_us'], 1e-9):.2f}, total (server + worker) CPU "
                f"{(a['server_us'] + a['worker_us']) / max(b['server_us'] + b['worker_us'], 1e-9):.2f}, "
                f"throughput {a['throughput'] / b['throughput']:.2f}")
        triton_lines += ["", "trtis/Triton (CPU per inference: below 1, trtis spends less; throughput: above 1, "
                         "trtis serves more): " + "; ".join(ratios) + ".", "",
                         "The target (issue 18: half Triton's per-request overhead) is read one request at a "
                         "time, at concurrency 1. At 2 both processes also pay for the load around them: "
                         "their CPU per request moves with how often they sleep between requests and with "
                         "the two CPUs being busy, in opposite directions here (the worker's rises, the "
                         "stub's falls, its server being the slower one).", "",
                         f"Triton 2.51: tritonserver and its Python backend from the nvidia-pytriton==0.7.0 wheel "
                         f"(scripts/setup-triton.sh), CPU only, the same add_sub model.py from the same repository "
                         f"(only add_sub loaded), {info['stubs']} stub process(es), ready in {info['ready_s']:.1f} s; "
                         f"the stub embeds {info['libpython']}. Measured after trtis stopped, with the same "
                         f"perf_analyzer command; server CPU is the tritonserver process, stub CPU its "
                         f"triton_python_backend_stub children (from /proc)."]
    except TritonUnavailable as e:
        triton_lines = ["", f"Triton reference: not available ({e})."]
        print(triton_lines[-1], flush=True)
    lines[table_end:table_end] = triton_lines

    lines += ["", f"A model.py that computes {BUSY_US} µs per request (a busy loop), one instance, gRPC. Busy share: "
              f"throughput x {BUSY_US} µs, the share of the time the worker/stub runs the model (1: it never "
              "waits for its next request). trtis hands the worker its next request while one runs.", "",
              "| concurrency | trtis infer/s | trtis p50 µs | trtis busy share | Triton infer/s | Triton p50 µs | "
              "Triton busy share | throughput trtis/Triton |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for conc in BUSY_CONCURRENCY:
        a, b = busy_ours[conc], busy_theirs.get(conc, {"error": "not measured"})
        cells = []
        for r in (a, b):
            if "error" in r:
                cells += [r["error"], "", ""]
            else:
                cells += [f"{r['throughput']:.0f}", f"{r['p50_us']:.0f}", f"{r['throughput'] * BUSY_US / 1e6:.2f}"]
        ratio = ("" if "error" in a or "error" in b else f"{a['throughput'] / b['throughput']:.2f}")
        lines.append(f"| {conc} | " + " | ".join(cells) + f" | {ratio} |")
        print(lines[-1], flush=True)

    again = reference()
    lines += ["", f"Reference again after the servers ran: {again['us']:.1f} µs per call "
              f"({again['cpu_us']:.1f} µs CPU).", "",
              "Server CPU: the server process (trtis: gRPC, scheduler, frames; Triton: gRPC, its core and "
              "the Python backend's shared-memory messaging). Worker/stub CPU: the process running model.py; "
              "its overhead is what it spends per request beyond the model's own execute() (messages, request "
              "and response objects, thread hand-offs). Target: trtis's worker overhead at half of Triton's "
              "stub overhead, measured in the same run above.", ""]
    shutil.rmtree(repo)
    open(os.path.join(OUT, "python-bench.md"), "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))

if __name__ == "__main__":
    main()
