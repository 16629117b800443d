"""perf_analyzer against `trtis perf` on the same server, model, protocol,
concurrency and measurement window, in the same run: throughput (their
ratio should be within 5%) and the client's CPU time per request (from the
child's rusage).

Run it with scripts/bench.sh perf. Results: target/bench/perf-compare.md.
"""
import csv
import os
import resource
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve import OUT, PA, ROOT, TRTIS, Server, write_identity  # noqa: E402

WINDOW_MS = "2000"


def run(cmd):
    """Runs a client; returns (exit code, CPU seconds it used)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    return os.waitstatus_to_exitcode(status), usage.ru_utime + usage.ru_stime


def measure(tool, server, model, protocol, c):
    port = server.port if protocol == "http" else server.grpc_port
    csv_path = os.path.join(OUT, f"cmp-{tool}-{model}-{protocol}-c{c}.csv")
    common = ["-m", model, "-u", f"127.0.0.1:{port}", "-i", protocol, "--concurrency-range", str(c),
              "-p", WINDOW_MS, "-s", "10", "-r", "10", "-f", csv_path]
    cmd = [PA, *common] if tool == "perf_analyzer" else [TRTIS, "perf", *common]
    n0 = server.inferences(model)
    code, cpu = run(cmd)
    n = server.inferences(model) - n0
    if code != 0 or not os.path.exists(csv_path):
        return None
    row = next(csv.DictReader(open(csv_path)))
    return {"throughput": float(row["Inferences/Second"]), "p50": float(row["p50 latency"]),
            "cpu_us": cpu / max(n, 1) * 1e6}


def main():
    os.makedirs(OUT, exist_ok=True)
    repo = tempfile.mkdtemp(prefix="trtis-perfcmp-")
    write_identity(repo)
    shutil.copytree(os.path.join(ROOT, "examples/model_repository/simple"), os.path.join(repo, "simple"))
    # Server-bound: 4 instances each sleeping 2 ms per request, so at most
    # 2000 infer/s whatever the client; both tools should measure the same.
    os.makedirs(os.path.join(repo, "identity_sleep/1"))
    open(os.path.join(repo, "identity_sleep/1/.keep"), "w").close()
    open(os.path.join(repo, "identity_sleep/config.pbtxt"), "w").write(
        'backend: "identity"\nmax_batch_size: 8\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
        'instance_group [ { count: 4 kind: KIND_CPU } ]\n'
        'parameters { key: "execute_delay_ms" value: { string_value: "2" } }\n')
    server = Server(repo, 18500)
    lines = ["# perf_analyzer vs trtis perf", "",
             f"Same server (trtis serve, release), same flags: --concurrency-range C -p {WINDOW_MS} -s 10 -r 10. "
             "Client CPU per request = the client's user+system time over the requests the server counted. "
             "Client and server share this machine's CPUs: where the server is CPU-bound, the lighter client "
             "leaves it more CPU, so only the server-bound rows (identity_sleep, and concurrency 1) measure "
             "the same thing with both tools.", "",
             "| protocol | model | concurrency | perf_analyzer infer/s | trtis perf infer/s | ratio | perf_analyzer p50 µs | trtis perf p50 µs | perf_analyzer CPU µs/req | trtis perf CPU µs/req |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for protocol in ("grpc", "http"):
        for model in ("identity_fp32", "simple", "identity_sleep"):
            for c in (1, 4, 16):
                pa = measure("perf_analyzer", server, model, protocol, c)
                tp = measure("trtis", server, model, protocol, c)
                if pa is None or tp is None:
                    lines.append(f"| {protocol} | {model} | {c} | {'failed' if pa is None else ''} | "
                                 f"{'failed' if tp is None else ''} | | | | | |")
                else:
                    lines.append(f"| {protocol} | {model} | {c} | {pa['throughput']:.0f} | {tp['throughput']:.0f} | "
                                 f"{tp['throughput'] / pa['throughput']:.3f} | {pa['p50']:.0f} | {tp['p50']:.0f} | "
                                 f"{pa['cpu_us']:.1f} | {tp['cpu_us']:.1f} |")
                print(lines[-1], flush=True)
    server.stop()
    shutil.rmtree(repo)
    report = "\n".join(lines)
    print(report)
    open(os.path.join(OUT, "perf-compare.md"), "w").write(report + "\n")


if __name__ == "__main__":
    main()
