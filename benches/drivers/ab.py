"""Two builds of trtis side by side, in one run: perf_analyzer on the
identity model (FP32 [16]) over HTTP and gRPC at concurrency 1 and 4, and
on the dynamic-batching MLP (benches/drivers/make_mlp.py, `dynamic_batching
{ }`) over HTTP at concurrency 8, against build A then build B,
alternating, AB_TAKES takes each (default 3). Reported per row: the median
throughput and server CPU per inference of each build, and B over A. For
checking that a change to the serving path costs nothing; TRTIS_B=TRTIS_A
is the A/A control that sizes the noise.

  TRTIS_A=/path/to/old/trtis TRTIS_B=/path/to/new/trtis scripts/bench.sh ab

TRTIS_B defaults to this checkout's release build. Results:
target/bench/ab-bench.md.
"""
import os
import shutil
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
from batching import mlp_repository  # noqa: E402

TAKES = int(os.environ.get("AB_TAKES", "3"))
MLP = "mlp_batched"


def main():
    a = os.environ.get("TRTIS_A")
    b = os.environ.get("TRTIS_B", os.path.join(bench.ROOT, "target/release/trtis"))
    if not a:
        sys.exit("set TRTIS_A to the trtis binary to compare against (TRTIS_B: the other; default this build)")
    repo, _ = mlp_repository("trtis-ab-", {MLP: "dynamic_batching { }\n"}, 32)
    bench.write_identity(repo)
    os.makedirs(bench.OUT, exist_ok=True)
    rows = [("identity_fp32", p, c) for p in ("http", "grpc") for c in (1, 4)]
    rows.append((MLP, "http", 8))
    got = {(label, row): [] for label in "AB" for row in rows}
    try:
        for _ in range(TAKES):
            for label, binary in (("A", a), ("B", b)):
                bench.TRTIS = binary
                server = bench.Server(repo, 18300)
                for model, protocol, c in rows:
                    # perf_analyzer gives up when a noisy machine keeps
                    # its windows from settling: try again, twice at most.
                    for _ in range(3):
                        r = bench.perf(server, model, c, protocol=protocol)
                        if "error" not in r:
                            break
                    else:
                        sys.exit(f"perf_analyzer failed on {label} {model} {protocol} c={c}: {r['error']}")
                    got[(label, (model, protocol, c))].append(r)
                server.stop()
    finally:
        shutil.rmtree(repo, ignore_errors=True)
    med = lambda label, row, key: statistics.median(r[key] for r in got[(label, row)])  # noqa: E731
    lines = [
        "# Two builds, same run: identity FP32[16] and the dynamic-batching MLP, perf_analyzer",
        "",
        f"A: {a}  ",
        f"B: {b}  ",
        f"{TAKES} takes each, alternating A and B; medians.",
        "",
        "| model | protocol | c | infer/s A | infer/s B | B/A | CPU µs/inf A | CPU µs/inf B | B/A |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        ta, tb = med("A", row, "throughput"), med("B", row, "throughput")
        ca, cb = med("A", row, "cpu_us"), med("B", row, "cpu_us")
        lines.append(f"| {row[0]} | {row[1]} | {row[2]} | {ta:.0f} | {tb:.0f} | {tb / ta:.3f} | {ca:.1f} | {cb:.1f} | {cb / ca:.3f} |")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(bench.OUT, "ab-bench.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
