"""seqflood: thousands of sequences started and never ended must not keep
their slots or memory: the idle timeout reclaims them.

The example `simple_sequence` (examples/model_repository: direct strategy,
START and READY controls, max_batch_size 8, one KIND_CPU group: 2 instances
on this machine, so 16 batch slots). Its config does not set
max_sequence_idle_microseconds, so Triton's default of 1 s applies (the
driver reads the normalized value from the server's /config and reports it).

--ids distinct sequence ids (default 5000), each sending one START request
(sequence_start true, never an END), at --rate per second (default 200)
over gRPC, each with a --deadline (default 5 s). Most of them cannot get a
slot while 16 others hold theirs: they wait in the backlog and are answered
when a slot is freed by the idle timeout, or their client gives up at the
deadline (DEADLINE_EXCEEDED, counted as given up), or the server refuses
them (counted as refused, with the message). Then, after the idle timeout
and a margin (--settle, default 3 s) past the flood's last deadline, a new
sequence must answer within 5 s, and then 16 new START-only sequences at
once (one per slot) must all answer within 5 s, each faster than half the
idle timeout (so none waited for a slot to be reclaimed). The server's RSS is read before and after
(bound --rss-bound-mib, default 64). Sequence slots are not visible in the
statistics or metrics, so the slot check is the behavioural one above.

    .venv/bin/python tests/reliability/seqflood.py [--quick] [--ids N] [--rate R]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import EXAMPLES, TrtisServer, log, report, rss_mib  # noqa: E402


def sequence_metrics(server) -> list[str]:
    """Lines of the server's /metrics about sequences or the backlog (none
    today), from the metrics port in its log."""
    port = None
    for line in server.log_lines():
        m = re.search(r"Started Metrics Service at \S+:(\d+)", line)
        if m:
            port = int(m.group(1))
    if port is None:
        return []
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return []
    return [line for line in text.splitlines()
            if not line.startswith("#") and re.search(r"sequence|backlog|slot", line.split("{")[0], re.I)][:10]


def model_stats(port: int) -> dict:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/models/simple_sequence/stats", timeout=5) as r:
            st = json.loads(r.read())["model_stats"][0]["inference_stats"]
        return {"success": st["success"]["count"], "fail": st["fail"]["count"]}
    except (OSError, KeyError, IndexError, ValueError):
        return {}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="500 ids")
    ap.add_argument("--ids", type=int)
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--deadline", type=float, default=5.0)
    ap.add_argument("--settle", type=float, default=3.0)
    ap.add_argument("--rss-bound-mib", type=float, default=64.0)
    args = ap.parse_args()
    n_ids = args.ids or (500 if args.quick else 5000)

    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    tmp = Path(tempfile.mkdtemp(prefix="trtis-seqflood-"))
    repo = tmp / "models"
    repo.mkdir()
    shutil.copytree(EXAMPLES / "simple_sequence", repo / "simple_sequence")
    server = TrtisServer(repo, [], name="seqflood").start()
    pid = server.proc.pid
    figures: dict = {"ids": n_ids, "rate": args.rate, "deadline_s": args.deadline}
    checks: list[tuple[str, bool]] = []
    notes: list[str] = []
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/v2/models/simple_sequence/config", timeout=5) as r:
            config = json.loads(r.read())
        sb = config.get("sequence_batching", {})
        idle_us = int(sb.get("max_sequence_idle_microseconds", 0) or 0)
        groups = config.get("instance_group", [])
        instances = sum(int(g.get("count", 1)) for g in groups) or 1
        slots = instances * max(1, int(config.get("max_batch_size", 1)))
        figures.update({"max_sequence_idle_us": idle_us, "instances": instances, "slots": slots})
        idle_s = idle_us / 1e6 if idle_us else 1.0

        channel = grpc.insecure_channel(server.grpc_url)
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)

        def request(seq_id: int, start: bool, end: bool, value: int) -> service_pb2.ModelInferRequest:
            req = service_pb2.ModelInferRequest(model_name="simple_sequence")
            req.inputs.add(name="INPUT", datatype="INT32", shape=[1, 1])
            req.raw_input_contents.append(np.array([[value]], dtype=np.int32).tobytes())
            req.parameters["sequence_id"].int64_param = seq_id
            req.parameters["sequence_start"].bool_param = start
            req.parameters["sequence_end"].bool_param = end
            return req

        # Warm-up: one whole sequence.
        stub.ModelInfer(request(10**9, True, True, 1), timeout=10)
        time.sleep(idle_s + 0.5)
        rss0 = rss_mib(pid)
        log(f"seqflood: {n_ids} START-only sequences at {args.rate:.0f}/s over gRPC "
            f"(idle timeout {idle_s:g} s, {slots} slots); RSS {rss0:.1f} MiB")

        lock = threading.Lock()
        counts = {"answered": 0, "gave_up": 0, "refused": 0, "wrong": 0}
        refusals: dict[str, int] = {}
        pending = []

        def done(fut, value):
            try:
                resp = fut.result()
                out = np.frombuffer(resp.raw_output_contents[0], dtype=np.int32).tolist()
                kind = "answered" if out == [value + 1] else "wrong"
            except grpc.RpcError as e:
                if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                    kind = "gave_up"
                else:
                    kind = "refused"
                    key = f"{e.code().name}: {(e.details() or '')[:120]}"
                    with lock:
                        refusals[key] = refusals.get(key, 0) + 1
            except Exception as e:  # cancelled and the like
                kind = "refused"
                with lock:
                    refusals[type(e).__name__] = refusals.get(type(e).__name__, 0) + 1
            with lock:
                counts[kind] += 1

        t0 = time.monotonic()
        for i in range(n_ids):
            target = t0 + i / args.rate
            now = time.monotonic()
            if target > now:
                time.sleep(target - now)
            value = i % 1000
            fut = stub.ModelInfer.future(request(1 + i, True, False, value), timeout=args.deadline)
            fut.add_done_callback(lambda f, v=value: done(f, v))
            pending.append(fut)
        flood_s = time.monotonic() - t0
        # Every future ends by its deadline.
        wait_until = time.monotonic() + args.deadline + 5
        while time.monotonic() < wait_until:
            with lock:
                if sum(counts.values()) >= n_ids:
                    break
            time.sleep(0.1)
        rss_peak = rss_mib(pid)
        log(f"  flood sent in {flood_s:.1f} s: {counts}; RSS {rss_peak:.1f} MiB")
        time.sleep(idle_s + args.settle)

        # A new sequence must answer within 5 s.
        t = time.monotonic()
        new_err = None
        try:
            resp = stub.ModelInfer(request(2 * 10**9, True, False, 41), timeout=5)
            out = np.frombuffer(resp.raw_output_contents[0], dtype=np.int32).tolist()
            if out != [42]:
                new_err = f"wrong answer {out}"
        except grpc.RpcError as e:
            new_err = f"{e.code().name}: {e.details()}"
        new_s = time.monotonic() - t
        # Its END, so it gives its slot back, then one new sequence per slot.
        try:
            stub.ModelInfer(request(2 * 10**9, False, True, 0), timeout=5)
        except grpc.RpcError as e:
            notes.append(f"END of the probe sequence: {e.code().name} {e.details()}")
        futs = [(stub.ModelInfer.future(request(3 * 10**9 + k, True, False, k), timeout=5), time.monotonic())
                for k in range(slots)]
        slot_lat, slot_errors = [], []
        for f, sent_at in futs:
            try:
                f.result()
                slot_lat.append(time.monotonic() - sent_at)
            except grpc.RpcError as e:
                slot_errors.append(f"{e.code().name}: {e.details()}")
        time.sleep(idle_s + 0.5)
        rss1 = rss_mib(pid)
        alive = server.alive()
        channel.close()
        seq_metrics = sequence_metrics(server)
        stats = model_stats(server.port)
        figures.update({
            "flood_seconds": round(flood_s, 1),
            **counts,
            "new_sequence_ms": round(new_s * 1000), "new_sequence_error": new_err or "",
            "slot_probes_ok": len(slot_lat), "slot_probe_max_ms": round(max(slot_lat) * 1000) if slot_lat else None,
            "rss_before_mib": round(rss0, 1), "rss_peak_mib": round(rss_peak, 1), "rss_after_mib": round(rss1, 1),
            "rss_delta_mib": round(rss1 - rss0, 1),
            "stats_success": stats.get("success"), "stats_fail": stats.get("fail"),
            "sequence_metrics": seq_metrics,
        })
        total = sum(counts.values())
        checks = [
            (f"all {n_ids} START requests ended: {counts['answered']} answered, {counts['gave_up']} gave up at "
             f"the {args.deadline:g} s deadline, {counts['refused']} refused, {counts['wrong']} wrong",
             total == n_ids and counts["wrong"] == 0),
            (f"a new sequence answered within 5 s after the idle timeout ({new_s * 1000:.0f} ms"
             f"{', ' + new_err if new_err else ''})", new_err is None and new_s <= 5.0),
            (f"{len(slot_lat)}/{slots} new sequences (one per slot, START only) answered within 5 s",
             len(slot_lat) == slots),
            (f"none of them waited for a slot: slowest {max(slot_lat, default=0) * 1000:.0f} ms "
             f"< half the idle timeout ({idle_s * 500:.0f} ms)",
             len(slot_lat) == slots and max(slot_lat) < idle_s / 2),
            (f"RSS {rss0:.1f} -> {rss1:.1f} MiB (peak {rss_peak:.1f}): growth < {args.rss_bound_mib:.0f} MiB",
             rss1 - rss0 < args.rss_bound_mib),
            ("server alive at the end", alive),
        ]
        notes += [f"refused x{n}: {k}" for k, n in sorted(refusals.items(), key=lambda kv: -kv[1])[:5]]
        notes += slot_errors[:3]
        notes.append("sequence slots/backlog in /metrics: "
                     + ("; ".join(seq_metrics) if seq_metrics else "none exported (checked behaviourally)"))
        if not sb.get("max_sequence_idle_microseconds"):
            notes.append("max_sequence_idle_microseconds not in the served config")
    finally:
        code = server.stop()
        figures["exit_code"] = code
        shutil.rmtree(tmp, ignore_errors=True)
    checks.append(("server exits 0 on SIGINT", code == 0))
    passed = all(ok for _, ok in checks)
    return report("seqflood", passed, figures, checks, notes)


if __name__ == "__main__":
    sys.exit(main())
