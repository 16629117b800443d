"""churn: load/unload cycles of one model while another serves a fixed rate.

A server in explicit model-control mode with two copies of the example
`simple` (ONNX): `simple` is loaded at start and served at --rate
requests/s over HTTP from a separate process (4 keep-alive connections);
`simple_churn` is loaded, checked with one inference, unloaded and checked
not ready, --cycles times over HTTP from this process, --gap seconds apart
(0.2 s: 300 cycles overlap a minute of the served load).

PASS when: every request on `simple` answered 200 with the right bytes
(zero failures), every cycle's load, inference and unload succeeded, the
server is alive at the end, and its RSS grew less than --rss-bound-mib
(default 64 MiB) from before the first cycle to after the last (the per-cycle
slope is reported too).

    .venv/bin/python tests/reliability/churn.py [--quick] [--cycles N] [--rate R]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    EXAMPLES, SIMPLE_BODY, KeepAlive, RateLoad, TrtisServer, http_post_bytes, log, report, rss_mib,
    simple_expected, slope_per_min,
)


def served_load(port: int, rate: float, seconds: float, expected: bytes, stop, out) -> None:
    """In a child process: the fixed-rate load on `simple` until `stop`."""
    load = RateLoad(port, http_post_bytes(port, "/v2/models/simple/infer", SIMPLE_BODY), expected,
                    rate, seconds, threads=4).start()
    while not stop.wait(0.2):
        if all(not t.is_alive() for t in load._workers):
            break
    load.stop()
    load.join(timeout=15)
    out.put(load.summary())


def control(client: KeepAlive, port: int, path: str, body: bytes = b"") -> tuple[int, bytes]:
    return client.send(http_post_bytes(port, path, body))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="30 cycles")
    ap.add_argument("--cycles", type=int)
    ap.add_argument("--rate", type=float, default=500.0, help="requests/s on the served model")
    ap.add_argument("--rss-bound-mib", type=float, default=64.0)
    ap.add_argument("--gap", type=float, default=0.2,
                    help="seconds between cycles, so the churn overlaps the served load for a while")
    ap.add_argument("--max-seconds", type=float, default=900.0, help="hard stop of the cycle loop")
    args = ap.parse_args()
    cycles = args.cycles or (30 if args.quick else 300)

    tmp = Path(tempfile.mkdtemp(prefix="trtis-churn-"))
    repo = tmp / "models"
    repo.mkdir()
    shutil.copytree(EXAMPLES / "simple", repo / "simple")
    shutil.copytree(EXAMPLES / "simple", repo / "simple_churn")
    cfg = repo / "simple_churn" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace('name: "simple"', 'name: "simple_churn"'))

    server = TrtisServer(repo, ["--model-control-mode", "explicit", "--load-model", "simple"], name="churn")
    server.start()
    pid = server.proc.pid
    figures: dict = {"cycles_planned": cycles, "rate": args.rate}
    checks: list[tuple[str, bool]] = []
    notes: list[str] = []
    cycle_errors: list[str] = []
    rss_per_cycle: list[tuple[float, float]] = []
    try:
        expected = simple_expected(server.port)
        ctx = mp.get_context("spawn")
        stop = ctx.Event()
        out = ctx.Queue()
        proc = ctx.Process(target=served_load,
                          args=(server.port, args.rate, args.max_seconds + 60, expected, stop, out), daemon=True)
        proc.start()
        time.sleep(3.0)  # the load settles; the server's RSS with traffic on
        rss_before = rss_mib(pid)
        log(f"churn: {cycles} cycles of simple_churn while simple serves {args.rate:.0f}/s; RSS {rss_before:.1f} MiB")
        client = KeepAlive(server.port, timeout=60.0)
        t0 = time.monotonic()
        done = 0
        load_s: list[float] = []
        for i in range(cycles):
            if time.monotonic() - t0 > args.max_seconds:
                notes.append(f"stopped after {args.max_seconds:.0f} s")
                break
            try:
                t = time.monotonic()
                status, body = control(client, server.port, "/v2/repository/models/simple_churn/load")
                load_s.append(time.monotonic() - t)
                if status != 200:
                    raise RuntimeError(f"load: HTTP {status} {body[:200]!r}")
                status, body = client.send(http_post_bytes(server.port, "/v2/models/simple_churn/infer", SIMPLE_BODY))
                if status != 200:
                    raise RuntimeError(f"infer on simple_churn: HTTP {status} {body[:200]!r}")
                doc = json.loads(body)
                outs = {o["name"]: o["data"] for o in doc["outputs"]}
                if outs.get("OUTPUT0") != [j + 1 for j in range(16)]:
                    raise RuntimeError(f"infer on simple_churn: wrong answer {outs}")
                status, body = control(client, server.port, "/v2/repository/models/simple_churn/unload")
                if status != 200:
                    raise RuntimeError(f"unload: HTTP {status} {body[:200]!r}")
                status, body = client.send(
                    f"GET /v2/models/simple_churn/ready HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
                if status == 200:
                    raise RuntimeError("simple_churn still ready after its unload returned")
                done += 1
            except (OSError, RuntimeError, ValueError, KeyError) as e:
                cycle_errors.append(f"cycle {i}: {e}")
                if len(cycle_errors) >= 10:
                    break
            rss_per_cycle.append((float(i), rss_mib(pid)))
            if (i + 1) % 50 == 0:
                log(f"  {i + 1} cycles, RSS {rss_per_cycle[-1][1]:.1f} MiB")
            if not server.alive():
                break
            time.sleep(args.gap)
        churn_s = time.monotonic() - t0
        client.close()
        # The unloaded version's threads stop once its last request is done.
        time.sleep(2.0)
        rss_after = rss_mib(pid)
        stop.set()
        try:
            served = out.get(timeout=30)
        except Exception:
            served = {"sent": 0, "good": 0, "failed": -1, "errors": ["load process gave no summary"]}
        proc.join(timeout=10)
        alive = server.alive()
        # Slope per cycle (samples are per cycle; slope_per_min is per 60 units).
        per_cycle_kib = slope_per_min(rss_per_cycle) / 60 * 1024 if len(rss_per_cycle) > 1 else float("nan")
        figures.update({
            "cycles_done": done,
            "churn_seconds": round(churn_s, 1),
            "mean_load_ms": round(1000 * sum(load_s) / max(len(load_s), 1), 1),
            "served_sent": served["sent"], "served_good": served["good"], "served_failed": served["failed"],
            "served_rps": served.get("achieved_rps"), "served_p99_ms": served.get("p99_latency_ms"),
            "served_max_ms": served.get("max_latency_ms"),
            "rss_before_mib": round(rss_before, 1), "rss_after_mib": round(rss_after, 1),
            "rss_delta_mib": round(rss_after - rss_before, 1),
            "rss_slope_kib_per_cycle": round(per_cycle_kib, 1),
        })
        checks = [
            (f"{done}/{cycles} load/infer/unload cycles succeeded", done == cycles and not cycle_errors),
            (f"served model: {served['failed']} failures of {served['sent']} requests (zero required)",
             served["failed"] == 0 and served["sent"] > 0),
            (f"served model kept >= 90% of {args.rate:.0f}/s (achieved {served.get('achieved_rps')})",
             (served.get("achieved_rps") or 0) >= 0.9 * args.rate),
            (f"RSS growth {rss_after - rss_before:.1f} MiB < {args.rss_bound_mib:.0f} MiB",
             rss_after - rss_before < args.rss_bound_mib),
            ("server alive at the end", alive),
        ]
        notes += cycle_errors[:5] + [f"served: {e}" for e in served.get("errors", [])[:5]]
    finally:
        code = server.stop()
        figures["exit_code"] = code
        shutil.rmtree(tmp, ignore_errors=True)
    passed = all(ok for _, ok in checks)
    return report("churn", passed, figures, checks, notes)


if __name__ == "__main__":
    sys.exit(main())
