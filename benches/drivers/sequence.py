"""Benchmark of the sequence batcher with perf_analyzer (`--sequence-length
20`, gRPC), in one run against `trtis serve`:

  - simple_sequence (direct strategy, START/READY controls, 2 instances x 8
    slots), simple_dyna_sequence (oldest strategy, CORRID, 2 instances) and
    simple_accumulator (implicit state; 1 instance x 8 slots as in the
    examples, and a copy with 2 instances so 16 sequences need no backlog);
  - the reference: the very same ONNX graph as simple_sequence served as a
    stateless model with dynamic batching (START and READY sent by the
    client as ordinary inputs), same instances, same concurrency: what the
    sequence routing, slots and control tensors cost;
  - trtis perf on simple_sequence with the same settings, next to
    perf_analyzer.

Run it with scripts/bench.sh sequence. Results: target/bench/sequence-bench.md.
"""
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve import OUT, PA, ROOT, TRTIS, Server, cpu_seconds, get  # noqa: E402

EXAMPLES = os.path.join(ROOT, "examples", "model_repository")
CONCURRENCY = (4, 16)


def stats(server, model):
    status, body = get(server.url(f"/v2/models/{model}/stats"))
    s = json.loads(body)["model_stats"][0]
    return s["inference_count"], s["execution_count"]


def perf_analyzer(server, model, concurrency, sequences=True):
    csv_path = os.path.join(OUT, f"pa-sequence-{model}-c{concurrency}.csv")
    cmd = [PA, "-m", model, "-u", f"127.0.0.1:{server.grpc_port}", "-i", "grpc",
           "--concurrency-range", str(concurrency), "-p", "3000", "-r", "10", "-s", "15", "-f", csv_path]
    if sequences:
        cmd += ["--sequence-length", "20"]
    return measure(server, model, cmd, csv_path)


def trtis_perf(server, model, concurrency):
    csv_path = os.path.join(OUT, f"trtis-sequence-{model}-c{concurrency}.csv")
    cmd = [TRTIS, "perf", "-m", model, "-u", f"127.0.0.1:{server.grpc_port}", "-i", "grpc",
           "--concurrency-range", str(concurrency), "-p", "3000", "-r", "10", "-s", "15", "-f", csv_path,
           "--sequence-length", "20"]
    return measure(server, model, cmd, csv_path)


def measure(server, model, cmd, csv_path):
    n0, e0 = stats(server, model)
    cpu0 = cpu_seconds(server.proc.pid)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, err = proc.communicate(timeout=300)
    if proc.returncode != 0:
        return {"error": f"exit {proc.returncode}: {err.decode(errors='replace').strip()[-200:]}"}
    cpu1 = cpu_seconds(server.proc.pid)
    n1, e1 = stats(server, model)
    row = next(csv.DictReader(open(csv_path)))
    inferences = max(n1 - n0, 1)
    return {
        "throughput": float(row["Inferences/Second"]),
        "p50_ms": float(row["p50 latency"]) / 1000,
        "p99_ms": float(row["p99 latency"]) / 1000,
        "mean_batch": inferences / max(e1 - e0, 1),
        "server_cpu_us": (cpu1 - cpu0) / inferences * 1e6,
    }


def main():
    os.makedirs(OUT, exist_ok=True)
    repo = tempfile.mkdtemp(prefix="trtis-sequence-")
    for name in ("simple_sequence", "simple_dyna_sequence", "simple_accumulator"):
        shutil.copytree(os.path.join(EXAMPLES, name), os.path.join(repo, name))
    # simple_accumulator with two instances (16 slots).
    acc2 = os.path.join(repo, "accumulator_2x")
    shutil.copytree(os.path.join(EXAMPLES, "simple_accumulator"), acc2)
    config = open(os.path.join(acc2, "config.pbtxt")).read()
    config = config.replace('name: "simple_accumulator"', 'name: "accumulator_2x"')
    config = config.replace("instance_group [ { count: 1 kind: KIND_CPU } ]",
                            "instance_group [ { count: 2 kind: KIND_CPU } ]")
    open(os.path.join(acc2, "config.pbtxt"), "w").write(config)
    # The reference: simple_sequence's graph as a stateless batched model.
    ref = os.path.join(repo, "stateless_reference")
    os.makedirs(os.path.join(ref, "1"))
    shutil.copy(os.path.join(EXAMPLES, "simple_sequence", "1", "model.onnx"), os.path.join(ref, "1"))
    ints = ", ".join(f'{{ name: "{n}" data_type: TYPE_INT32 dims: [ 1 ] }}' for n in ("INPUT", "START", "READY"))
    open(os.path.join(ref, "config.pbtxt"), "w").write(
        'backend: "onnxruntime"\nmax_batch_size: 8\n'
        f"input [ {ints} ]\n"
        'output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        "instance_group [ { kind: KIND_CPU } ]\ndynamic_batching { }\n")

    server = Server(repo, 18300)
    lines = ["# Sequence batcher benchmark", "",
             f"{os.cpu_count()} CPUs; perf_analyzer (tritonclient 2.51.0) over gRPC, `--sequence-length 20` "
             "(16 to 24 requests per sequence, one outstanding per sequence, as many sequences as the "
             "concurrency). Reference: the same graph as simple_sequence served stateless with dynamic "
             "batching, same instances, same run.", "",
             "| model | concurrency | client | infer/s | vs reference | p50 ms | p99 ms | mean batch | server CPU µs/inf |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    ref_rate = {}
    for c in CONCURRENCY:
        r = perf_analyzer(server, "stateless_reference", c, sequences=False)
        ref_rate[c] = r.get("throughput")
        lines.append(row("stateless_reference", c, "perf_analyzer", r, ref_rate[c]))
        print(lines[-1], flush=True)
    for model in ("simple_sequence", "simple_dyna_sequence", "simple_accumulator", "accumulator_2x"):
        for c in CONCURRENCY:
            lines.append(row(model, c, "perf_analyzer", perf_analyzer(server, model, c), ref_rate[c]))
            print(lines[-1], flush=True)
    for c in CONCURRENCY:
        lines.append(row("simple_sequence", c, "trtis perf", trtis_perf(server, "simple_sequence", c), ref_rate[c]))
        print(lines[-1], flush=True)
    server.stop()
    shutil.rmtree(repo)
    report = "\n".join(lines)
    print(report)
    open(os.path.join(OUT, "sequence-bench.md"), "w").write(report + "\n")


def row(model, c, client, r, ref):
    if "error" in r:
        return f"| {model} | {c} | {client} | {r['error']} | | | | | |"
    ratio = f"{r['throughput'] / ref:.2f}" if ref else ""
    return (f"| {model} | {c} | {client} | {r['throughput']:.0f} | {ratio} | {r['p50_ms']:.2f} | "
            f"{r['p99_ms']:.2f} | {r['mean_batch']:.1f} | {r['server_cpu_us']:.0f} |")


if __name__ == "__main__":
    main()
