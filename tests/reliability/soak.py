"""soak: a fixed request rate on `simple` for minutes, with the server's RSS
sampled every 5 s.

The example `simple` (ONNX, examples/model_repository) served over HTTP at
--rate requests/s (default 1000; 4 keep-alive connections, each on its own
schedule) for --minutes (default 10). Every answer is compared byte for
byte with the expected one. The RSS samples after the warm-up (the first
--warmup seconds, default 60, or a sixth of a short run) are fitted by least
squares: the slope in MiB/min is the leak rate.

PASS when: zero failed requests, the achieved rate is at least 95% of the
target, the slope is below --slope-bound (default 1 MiB/min), and the server
is alive and exits 0 at the end.

    .venv/bin/python tests/reliability/soak.py [--quick] [--minutes N] [--rate R]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    EXAMPLES, SIMPLE_BODY, RateLoad, RssSampler, TrtisServer, http_post_bytes, log, report, rss_mib,
    simple_expected, slope_per_min,
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1 minute")
    ap.add_argument("--minutes", type=float)
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--warmup", type=float, help="seconds left out of the fit")
    ap.add_argument("--slope-bound", type=float, default=1.0, help="MiB/min")
    ap.add_argument("--every", type=float, default=5.0, help="RSS sampling period, seconds")
    args = ap.parse_args()
    minutes = args.minutes if args.minutes is not None else (1.0 if args.quick else 10.0)
    seconds = minutes * 60
    warmup = args.warmup if args.warmup is not None else min(60.0, seconds / 6)

    tmp = Path(tempfile.mkdtemp(prefix="trtis-soak-"))
    repo = tmp / "models"
    repo.mkdir()
    shutil.copytree(EXAMPLES / "simple", repo / "simple")
    server = TrtisServer(repo, [], name="soak").start()
    pid = server.proc.pid
    figures: dict = {"minutes": minutes, "rate": args.rate, "warmup_s": warmup}
    checks: list[tuple[str, bool]] = []
    notes: list[str] = []
    try:
        expected = simple_expected(server.port)
        rss0 = rss_mib(pid)
        log(f"soak: {args.rate:.0f} req/s on simple for {minutes:g} min; RSS {rss0:.1f} MiB")
        sampler = RssSampler(pid, args.every).start()
        load = RateLoad(server.port, http_post_bytes(server.port, "/v2/models/simple/infer", SIMPLE_BODY),
                        expected, args.rate, seconds, threads=4).start()
        next_log = time.monotonic() + 60
        while any(t.is_alive() for t in load._workers):
            time.sleep(1.0)
            if not server.alive():
                load.stop()
                break
            if time.monotonic() >= next_log:
                next_log += 60
                log(f"  RSS {rss_mib(pid):.1f} MiB")
        load.join(timeout=30)
        samples = sampler.stop()
        alive = server.alive()
        fit = [(t, v) for t, v in samples if t >= warmup]
        slope = slope_per_min(fit)
        all_slope = slope_per_min(samples)
        s = load.summary()
        figures.update({
            "sent": s["sent"], "good": s["good"], "failed": s["failed"], "late": s["late"],
            "achieved_rps": s["achieved_rps"], "p99_latency_ms": s["p99_latency_ms"],
            "max_latency_ms": s["max_latency_ms"],
            "rss_start_mib": round(rss0, 1), "rss_end_mib": round(samples[-1][1], 1),
            "rss_max_mib": round(max(v for _, v in samples), 1),
            "rss_samples": len(samples),
            "rss_slope_mib_per_min": round(slope, 3), "rss_slope_all_mib_per_min": round(all_slope, 3),
        })
        figures["rss_series"] = [[round(t), round(v, 1)] for t, v in samples]
        checks = [
            (f"{s['failed']} failed of {s['sent']} requests (zero required)", s["failed"] == 0 and s["sent"] > 0),
            (f"achieved {s['achieved_rps']} req/s >= 95% of {args.rate:.0f}", s["achieved_rps"] >= 0.95 * args.rate),
            (f"RSS slope after warm-up {slope:.3f} MiB/min < {args.slope_bound} MiB/min", slope < args.slope_bound),
            ("server alive at the end", alive),
        ]
        notes += s["errors"][:5]
    finally:
        code = server.stop()
        figures["exit_code"] = code
        shutil.rmtree(tmp, ignore_errors=True)
    checks.append(("server exits 0 on SIGINT", code == 0))
    passed = all(ok for _, ok in checks)
    return report("soak", passed, figures, checks, notes)


if __name__ == "__main__":
    sys.exit(main())
