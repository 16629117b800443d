"""Benchmark of the custom backend: what serving a custom.h library costs
per request.

In one run on this machine: the example addsub library
(examples/custom_backends/addsub.c, built by scripts/build-custom-backends.sh)
through `trtis serve`, against the built-in identity backend on the same
shapes (two INT32 [16] inputs, two INT32 [16] outputs, max_batch_size 8, no
dynamic batching, one instance), both driven by perf_analyzer over gRPC at
concurrency 1 and 4 with batch 1: throughput, p50, and the server's CPU per
inference (from /proc; the library runs in the server's process). The
difference per inference is what the custom call path adds (payloads, the
callbacks, the output buffers) plus addsub's own arithmetic, which is a few
dozen adds.

Run it with scripts/bench.sh custom. Results: target/bench/custom-bench.md.
"""
import os
import shutil
import subprocess
import tempfile

from serve import OUT, ROOT, Server, perf

IO = """max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
"""


def main():
    os.makedirs(OUT, exist_ok=True)
    libs = subprocess.run([os.path.join(ROOT, "scripts/build-custom-backends.sh")],
                          capture_output=True, text=True, check=True, cwd=ROOT).stdout.strip().splitlines()[-1]
    repo = tempfile.mkdtemp(prefix="trtis-custom-")
    for name, head in (("addsub", 'platform: "custom"\n'), ("identity2", 'backend: "identity"\n')):
        os.makedirs(os.path.join(repo, name, "1"))
        with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
            f.write(f'name: "{name}"\n{head}{IO}')
    shutil.copy(os.path.join(ROOT, libs, "libaddsub.so"), os.path.join(repo, "addsub", "1", "libcustom.so"))
    server = Server(repo, 18500)
    lines = ["# Custom backend benchmark", "",
             f"{os.cpu_count()} CPUs. perf_analyzer over gRPC, batch 1, two INT32 [16] inputs and outputs, "
             "one instance, no dynamic batching; server CPU from /proc (the library runs in the server).", "",
             "| concurrency | model | infer/s | p50 ms | p99 ms | server CPU µs/inf |",
             "| --- | --- | --- | --- | --- | --- |"]
    ratios = []
    try:
        for conc in (1, 4):
            got = {}
            for model in ("identity2", "addsub"):
                r = perf(server, model, conc, protocol="grpc")
                got[model] = r
                if "error" in r:
                    lines.append(f"| {conc} | {model} | {r['error']} | | | |")
                    continue
                lines.append(f"| {conc} | {model} | {r['throughput']:.0f} | {r['p50_ms']:.3f} | "
                             f"{r['p99_ms']:.3f} | {r['cpu_us']:.1f} |")
                print(lines[-1], flush=True)
            if all("error" not in r for r in got.values()):
                a, i = got["addsub"], got["identity2"]
                ratios.append(f"c={conc}: addsub/identity server CPU {a['cpu_us'] / i['cpu_us']:.2f} "
                              f"({a['cpu_us'] - i['cpu_us']:+.1f} µs per inference), "
                              f"throughput {a['throughput'] / i['throughput']:.2f}, p50 {a['p50_ms'] / i['p50_ms']:.2f}")
    finally:
        server.stop()
        shutil.rmtree(repo, ignore_errors=True)
    lines += ["", "addsub (custom library) against identity (built in), same run:", ""]
    lines += [f"- {r}" for r in ratios]
    text = "\n".join(lines) + "\n"
    with open(os.path.join(OUT, "custom-bench.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
