"""Benchmark of the TensorFlow backend against the TensorFlow C API called directly.

In one run on this machine it measures:
  - the SavedModel classifier (examples/tensorflow_repository's
    efficientnet_lite0_savedmodel, its config as it is: 1 CPU instance,
    max batch 8, dynamic batching with no queue delay, TensorFlow's own
    thread counts) through `trtis serve`, driven by perf_analyzer over gRPC
    at concurrency 1, 4 and 16: throughput, p50/p99 latency, the batch sizes
    that formed (from the statistics extension) and the server's CPU per
    inference (from /proc; also split into TensorFlow's threads plus the
    instance thread, and the rest of the server), perf_analyzer's CPU, and
    where a request's time goes by the server's statistics (queue, input,
    the TensorFlow run, output);
  - against the same SavedModel run in-process through trtis's C API binding
    with the same session ConfigProto (examples/tf_direct.rs), at batch 1
    (latency) and batch 8 (throughput), before the server runs and batch 1
    again after it;
  - the same model with a 1 ms batcher queue delay (the ONNX twin's
    setting), at concurrency 1 only: what the delay costs a lone request
    (not a target row);
  - concurrency 1 again in 8 interleaved pairs (direct batch 1, then the
    server; every other pair the server first), whose median ratio is the
    concurrency-1 figure least moved by the machine's drift;
  - concurrency 1 again with `trtis perf` as the client (same options),
    which takes less CPU than perf_analyzer on the cores the server shares
    (not a target row);
  - concurrency 1 again with perf_analyzer's input in system shared memory
    (`--shared-memory system`: the 600 KB tensor is written once and each
    request names the region, so neither side copies it through the
    socket): how much of the concurrency-1 gap is the transport (not a
    target row).
  - the same-run anchor for the concurrency-1 target (not a target row):
    the classifier's ONNX twin (examples/model_repository/efficientnet_lite0
    with the same batcher: no queue delay) through Triton 2.51 with its own
    ONNX Runtime backend (scripts/setup-triton-ort.sh) and through trtis,
    both driven by perf_analyzer at concurrency 1 inside each interleaved
    pair, against ONNX Runtime in-process at batch 1 with its default
    settings (Triton's backend leaves them): how much of its framework's
    in-process rate Triton's own server keeps at concurrency 1 on these
    cores with this client, and its cost per request (1/rate - 1/direct
    rate), set against TensorFlow's run. Skipped, with the reason, when
    Triton or its backend cannot be set up here (or TRTIS_BENCH_NO_TRITON=1).

Targets: concurrency 1 at least 0.9x the direct batch-1 rate; concurrency 16
at least 0.7x the direct batch-8 rate. perf_analyzer runs on the same cores
as the server.

Run it with scripts/bench.sh tensorflow. Results: target/bench/tensorflow-bench.md.
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve import OUT, ROOT, Server, get, time_session  # noqa: E402
from batching import histogram, perf, thread_cpu  # noqa: E402
from triton import Triton, TritonUnavailable, run_setup, triton_settings  # noqa: E402

DIRECT = os.path.join(ROOT, "target/release/examples/tf_direct")
MODEL = "efficientnet_lite0_savedmodel"
EXAMPLE = os.path.join(ROOT, "examples/tensorflow_repository", MODEL)
DELAY = "efficientnet_lite0_delay_1ms"
CONCURRENCY = (1, 4, 16)
TARGETS = {1: (1, 0.9), 16: (8, 0.7)}  # concurrency: (direct batch, least ratio)
PAIRS = 8  # interleaved (direct batch 1, trtis c=1) pairs
# The anchor: the ONNX twin with the TensorFlow example's batcher.
TWIN_EXAMPLE = os.path.join(ROOT, "examples/model_repository/efficientnet_lite0")
TWIN = "efficientnet_lite0_anchor"
# The 1 ms queue delay of the twin's example config, and none.
DELAY_1MS = "dynamic_batching {\n  max_queue_delay_microseconds: 1000\n}"
NO_DELAY = "dynamic_batching {\n}"
# The anchor's medians: (label, served, direct) indexes into its rows.
ANCHOR_SIDES = (("Triton", 1, 0), ("trtis", 2, 0), ("tf", 4, 3))


def direct(batch, seconds=6.0):
    out = subprocess.run([DIRECT, "--model", os.path.join(EXAMPLE, "1/model.savedmodel"),
                          "--batch", str(batch), "--seconds", str(seconds)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def ort_direct():
    """ONNX Runtime in-process on the twin, default session options (as
    Triton's backend leaves them), one fixed batch-1 input: a function
    timing it for 4 s, in runs per second. Made once; its threads sleep
    between the timings."""
    import numpy as np
    import onnxruntime as ort
    sess = ort.InferenceSession(os.path.join(TWIN_EXAMPLE, "1/model.onnx"), providers=["CPUExecutionProvider"])
    feeds = {"input": np.random.default_rng(0).uniform(-1, 1, (1, 3, 224, 224)).astype(np.float32)}

    def timed():
        n, elapsed, _ = time_session(sess, feeds, 4.0)
        return n / elapsed
    return timed


def variant(repo, source, name, old_name, batcher, new_batcher):
    """A copy of the model folder `source` in `repo` as `name`, its config's
    `batcher` block replaced with `new_batcher`."""
    shutil.copytree(source, os.path.join(repo, name))
    config = os.path.join(repo, name, "config.pbtxt")
    text = open(config).read()
    assert batcher in text
    open(config, "w").write(text.replace(f'name: "{old_name}"', f'name: "{name}"').replace(batcher, new_batcher))


def anchor_triton(repo):
    """Triton 2.51 with its own ONNX Runtime backend serving the twin, or
    (None, why not)."""
    try:
        settings = triton_settings()
        run_setup("scripts/setup-triton-ort.sh", timeout=1800)
        return Triton(settings, repo, 18810, [TWIN], os.path.join(OUT, "tensorflow-anchor-triton.log")), None
    except TritonUnavailable as e:
        return None, str(e)


def compute_cpu(threads):
    """CPU seconds of TensorFlow's threads (`tf_*`) and the models' instance
    threads (`trtis:<model>:<n>`, cut to 15 bytes: the same for both
    models; the idle one adds nothing), which call TF_SessionRun."""
    prefix = f"trtis:{MODEL}:"[:15]
    assert prefix == f"trtis:{DELAY}:"[:15]
    return sum(v for k, v in threads.items() if k.startswith("tf_") or k.startswith(prefix))


def server_stats(server, model):
    """The model's statistics: ({inference_stats key: (count, ns)},
    {batch size: (executions, compute_infer ns)})."""
    status, body = get(server.url(f"/v2/models/{model}/stats"))
    stats = json.loads(body)["model_stats"][0]
    totals = {k: (v["count"], v["ns"]) for k, v in stats["inference_stats"].items()}
    batches = {int(b["batch_size"]): (b["compute_infer"]["count"], b["compute_infer"]["ns"])
               for b in stats.get("batch_stats", [])}
    return totals, batches


def stats_delta(before, after):
    """Per request (ms): queue, compute input, compute infer, compute
    output, success (the server's whole time); and per execution (ms) of
    each batch size: the TensorFlow run (compute infer)."""
    (t0, b0), (t1, b1) = before, after
    per_request = {}
    for k in ("queue", "compute_input", "compute_infer", "compute_output", "success"):
        n = t1[k][0] - t0.get(k, (0, 0))[0]
        per_request[k] = (t1[k][1] - t0.get(k, (0, 0))[1]) / max(n, 1) / 1e6
    per_batch = {}
    for size, (n, ns) in b1.items():
        n0, ns0 = b0.get(size, (0, 0))
        if n > n0:
            per_batch[size] = (n - n0, (ns - ns0) / (n - n0) / 1e6)
    return per_request, per_batch


def anchor_lines(anchors, why_not):
    """The anchor's section: per pair, and the medians of each server's
    share of its framework's in-process rate and of its cost per request
    (ms: 1/rate - 1/direct rate)."""
    lines = ["", "Same-run anchor (not a target row): the ONNX twin through Triton 2.51's own ONNX Runtime "
             "backend and through trtis, perf_analyzer at concurrency 1, against ONNX Runtime in-process at "
             "batch 1 (default settings), inside the same pairs; cost = 1/rate - 1/direct rate, ms per request:", ""]
    if not anchors:
        return lines + [f"Not measured: {why_not or 'every anchor run failed (see the perf_analyzer logs)'}."]
    cost = lambda served, direct: 1e3 / served - 1e3 / direct  # noqa: E731
    lines += ["| ORT direct infer/s | Triton c=1 | share | cost | trtis (ORT) c=1 | share | cost | "
              "TF direct infer/s | trtis (TF) c=1 | share | cost |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for o, theirs, ours, d, tf in anchors:
        lines.append(f"| {o:.1f} | {theirs:.1f} | {theirs / o:.2f} | {cost(theirs, o):.2f} | {ours:.1f} | "
                     f"{ours / o:.2f} | {cost(ours, o):.2f} | {d:.1f} | {tf:.1f} | {tf / d:.2f} | {cost(tf, d):.2f} |")
    share = {k: statistics.median(a[i] / a[j] for a in anchors) for k, i, j in ANCHOR_SIDES}
    costs = {k: statistics.median(cost(a[i], a[j]) for a in anchors) for k, i, j in ANCHOR_SIDES}
    run = statistics.median(1e3 / a[3] for a in anchors)
    lines += ["", f"Medians of {len(anchors)} pairs: Triton keeps {share['Triton']:.3f} of ONNX Runtime's "
              f"in-process rate at {costs['Triton']:.2f} ms a request; trtis {share['trtis']:.3f} at "
              f"{costs['trtis']:.2f} ms on the same model, {share['tf']:.3f} at {costs['tf']:.2f} ms on TensorFlow. "
              f"Triton's cost a request on TensorFlow's direct run ({run:.2f} ms) would keep "
              f"{run / (run + costs['Triton']):.3f} of it (a projection: Triton has no TensorFlow backend here)."]
    return lines


def main():
    os.makedirs(OUT, exist_ok=True)
    subprocess.run(["cargo", "build", "--release", "--locked", "--example", "tf_direct"], cwd=ROOT, check=True)
    repo = tempfile.mkdtemp(prefix="trtis-tensorflow-")
    shutil.copytree(EXAMPLE, os.path.join(repo, MODEL))
    # The same model with a 1 ms queue delay, for one more concurrency-1
    # row: what the delay costs a lone request.
    variant(repo, EXAMPLE, DELAY, MODEL, NO_DELAY, DELAY_1MS)
    # The anchor's ONNX twin, with the TensorFlow example's batcher (no delay).
    variant(repo, TWIN_EXAMPLE, TWIN, "efficientnet_lite0", DELAY_1MS, NO_DELAY)

    lines = ["# TensorFlow backend benchmark", "",
             f"{os.cpu_count()} CPUs. Model: {MODEL} (EfficientNet-Lite0, FP32 [3,224,224] in), its example "
             "config: 1 CPU instance, max batch 8, dynamic batching (no queue delay), TensorFlow's default "
             "threads. Reference: the same SavedModel run in-process through trtis's C API binding with the "
             "same session ConfigProto (examples/tf_direct.rs), same run.", "",
             "| direct C API | batch | infer/s | mean ms (one run) | p50 ms | p99 ms | CPU µs/inf |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    ref = {}
    for b in (1, 8):
        r = ref[b] = direct(b)
        lines.append(f"| before | {b} | {r['infer_per_s']:.1f} | {r['mean_ms']:.2f} | {r['p50_ms']:.2f} | "
                     f"{r['p99_ms']:.2f} | {r['cpu_us']:.0f} |")
        print(lines[-1], flush=True)

    server = Server(repo, 18400)
    triton, no_anchor = anchor_triton(repo)
    ort_rate = ort_direct() if triton else None
    rows = []
    # (model, concurrency, client, its extra flags, the row's label)
    runs = [(MODEL, c, "perf_analyzer", {}, c) for c in CONCURRENCY]
    runs += [(DELAY, 1, "perf_analyzer", {}, "1, 1 ms queue delay"),
             (MODEL, 1, "trtis perf", {}, "1, trtis perf as the client"),
             (MODEL, 1, "perf_analyzer", {"extra": ("--shared-memory", "system"), "tag": "-shm"},
              "1, perf_analyzer, input in system shared memory")]
    for model, c, client, flags, label in runs:
        pid = server.proc.pid
        t0, s0 = thread_cpu(pid), server_stats(server, model)
        r = perf(server, model, c, client=client, **flags)
        if "error" not in r:
            r["per_request"], r["per_batch"] = stats_delta(s0, server_stats(server, model))
            inferences = sum(b * n for b, n in r["sizes"].items())
            r["compute_cpu_us"] = (compute_cpu(thread_cpu(pid)) - compute_cpu(t0)) / max(inferences, 1) * 1e6
        rows.append((label, r))
    # Concurrency 1 again, in interleaved pairs (the direct run, then the
    # server, while the server idles during the direct run), so that each
    # ratio compares runs seconds apart on this noisy machine.
    # Each pair measures the server with both clients: perf_analyzer, and
    # trtis perf, which takes less CPU on the cores TensorFlow runs on.
    # Every other pair runs the server first and the direct run last (ABBA
    # order), so that a steady drift of the machine favours neither side.
    # With the anchor on, each pair also takes ONNX Runtime in-process and
    # the twin through Triton and through trtis, in the same ABBA order.
    pairs, anchors = [], []
    for i in range(PAIRS):
        server_first = i % 2 == 1
        if not server_first:
            d = direct(1, seconds=4.0)["infer_per_s"]
            o = ort_rate() if triton else None
        r = perf(server, MODEL, 1)
        light = perf(server, MODEL, 1, client="trtis perf")
        if triton:
            theirs, ours = perf(triton, TWIN, 1, tag="-triton"), perf(server, TWIN, 1)
        if server_first:
            o = ort_rate() if triton else None
            d = direct(1, seconds=4.0)["infer_per_s"]
        if "error" not in r and "error" not in light:
            pairs.append((d, r["throughput"], light["throughput"]))
        if triton and all("error" not in x for x in (theirs, ours, r)):
            anchors.append((o, theirs["throughput"], ours["throughput"], d, r["throughput"]))
    server.stop()
    if triton:
        triton.stop()
    shutil.rmtree(repo)
    again = direct(1)
    lines.append(f"| after the server | 1 | {again['infer_per_s']:.1f} | {again['mean_ms']:.2f} | "
                 f"{again['p50_ms']:.2f} | {again['p99_ms']:.2f} | {again['cpu_us']:.0f} |")
    print(lines[-1], flush=True)

    lines += ["", "trtis serve, perf_analyzer over gRPC, batch 1 per request:", "",
              "| concurrency | infer/s | vs direct batch 1 | vs direct batch 8 | p50 ms | p99 ms | mean batch | "
              "batch sizes | server CPU µs/inf | TF + instance thread | rest of the server | perf_analyzer CPU µs/inf |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    verdicts = []
    for c, r in rows:
        if "error" in r:
            lines.append(f"| {c} | perf_analyzer: {r['error']} | | | | | | | | | | |")
            if c in TARGETS:
                verdicts.append(f"- c={c}: not measured (perf_analyzer {r['error']})")
            continue
        b1, b8 = r["throughput"] / ref[1]["infer_per_s"], r["throughput"] / ref[8]["infer_per_s"]
        lines.append(f"| {c} | {r['throughput']:.1f} | {b1:.2f} | {b8:.2f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | "
                     f"{r['mean_batch']:.1f} | {histogram(r['sizes'])} | {r['server_cpu_us']:.0f} | "
                     f"{r['compute_cpu_us']:.0f} | {r['server_cpu_us'] - r['compute_cpu_us']:.0f} | "
                     f"{r['client_cpu_us']:.0f} |")
        if c in TARGETS:
            batch, least = TARGETS[c]
            ratio = r["throughput"] / ref[batch]["infer_per_s"]
            mean = (ref[1]["infer_per_s"] + again["infer_per_s"]) / 2
            extra = (f"; against the mean of direct batch 1 before and after ({mean:.1f} infer/s): "
                     f"{r['throughput'] / mean:.2f}") if batch == 1 else ""
            verdicts.append(f"- c={c} vs direct batch {batch}: {ratio:.2f} (target at least {least}): "
                            f"{'met' if ratio >= least else f'missed by {least - ratio:.2f}'}{extra}")
        print(lines[-1], flush=True)
    if pairs:
        lines += ["", "Concurrency 1 in interleaved pairs (direct batch 1 for 4 s, then trtis c=1 with "
                  "perf_analyzer, then with trtis perf as the client; every other pair the direct run last), "
                  "in order:", "",
                  "| direct infer/s | trtis infer/s, perf_analyzer | ratio | trtis infer/s, trtis perf | ratio |",
                  "| --- | --- | --- | --- | --- |"]
        lines += [f"| {d:.1f} | {t:.1f} | {t / d:.2f} | {u:.1f} | {u / d:.2f} |" for d, t, u in pairs]
        for name, index in (("perf_analyzer", 1), ("trtis perf", 2)):
            median = statistics.median(p[index] / p[0] for p in pairs)
            verdicts.append(f"- c=1 vs direct batch 1, median of {len(pairs)} interleaved pairs, {name} as the "
                            f"client: {median:.3f} (target at least {TARGETS[1][1]}): "
                            f"{'met' if median >= TARGETS[1][1] else f'missed by {TARGETS[1][1] - median:.3f}'}")
    lines += anchor_lines(anchors, no_anchor)
    lines += ["", "Where a request's time goes, from the server's statistics (ms per request; the TensorFlow "
              "run per execution of the batch sizes that formed, against the direct run's mean at batch 1 and 8: "
              f"{ref[1]['mean_ms']:.2f} and {ref[8]['mean_ms']:.2f} ms):", "",
              "| concurrency | client p50 | server (success) | queue | compute input | compute infer | "
              "compute output | TF run per execution by batch size |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for c, r in rows:
        if "error" in r:
            continue
        q = r["per_request"]
        runs = ", ".join(f"{b}: {ms:.2f} ({n}x)" for b, (n, ms) in sorted(r["per_batch"].items()))
        lines.append(f"| {c} | {r['p50_ms']:.2f} | {q['success']:.2f} | {q['queue']:.2f} | {q['compute_input']:.3f} | "
                     f"{q['compute_infer']:.2f} | {q['compute_output']:.3f} | {runs} |")
    lines += ["", "Targets:", *verdicts, "",
              "Server CPU µs/inf is the whole process's CPU over the run per inference served; "
              "`TF + instance thread` is that of TensorFlow's threads (`tf_*`) and the instance's thread "
              "(which converts the batch and calls TF_SessionRun), the rest the frontend, the batcher and "
              "the runtime. Direct CPU µs/inf is the whole process's. perf_analyzer shares the CPUs.", ""]
    open(os.path.join(OUT, "tensorflow-bench.md"), "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
