"""tracecost: the cost of a traced request stays flat however many traces
the file already holds.

One server on `simple` (examples/model_repository) started with
`--trace-config triton,file=...` and tracing at rate 1 (every request
traced). --requests (default 3000, 600 with --quick) requests are sent one
after another on one keep-alive connection; then, in the same run, as many
with tracing turned OFF through the API (the reference). Reported: the mean
latency of the first and the last tenth of the traced requests, their ratio
(flat: about 1; a file rewritten whole on every trace grows linearly: the
previous build went from 0.6 ms to 13.8 ms over 3000), the traced mean
against the untraced one, and the trace file's validity and count.

PASS when: the last tenth's mean is within --bound (default 1.5x) of the
first tenth's, the trace file is one valid JSON array with every request,
and no request failed.

    .venv/bin/python tests/reliability/tracecost.py [--quick] [--requests N]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    EXAMPLES, SIMPLE_BODY, KeepAlive, TrtisServer, http_post_bytes, log, report, simple_expected,
)


def timed(conn: KeepAlive, request: bytes, expected: bytes, n: int) -> tuple[list[float], int]:
    times, failed = [], 0
    for _ in range(n):
        t = time.perf_counter()
        try:
            status, body = conn.send(request)
            ok = status == 200 and body == expected
        except OSError:
            ok = False
        times.append(time.perf_counter() - t)
        failed += not ok
    return times, failed


def mean_ms(xs: list[float]) -> float:
    return 1000 * sum(xs) / max(1, len(xs))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="600 requests")
    ap.add_argument("--requests", type=int)
    ap.add_argument("--bound", type=float, default=1.5, help="last/first tenth latency ratio")
    args = ap.parse_args()
    n = args.requests or (600 if args.quick else 3000)

    tmp = Path(tempfile.mkdtemp(prefix="trtis-trace-"))
    repo = tmp / "models"
    repo.mkdir()
    shutil.copytree(EXAMPLES / "simple", repo / "simple")
    trace_file = tmp / "trace.json"
    server = TrtisServer(
        repo,
        ["--trace-config", f"triton,file={trace_file}", "--trace-config", "level=TIMESTAMPS",
         "--trace-config", "rate=1"],
        name="tracecost",
    ).start()
    figures: dict = {"requests": n}
    checks: list[tuple[str, bool]] = []
    try:
        expected = simple_expected(server.port)  # traced too: 1 trace
        request = http_post_bytes(server.port, "/v2/models/simple/infer", SIMPLE_BODY)
        conn = KeepAlive(server.port)
        log(f"tracecost: {n} traced requests on simple")
        traced, failed_traced = timed(conn, request, expected, n)
        status, _ = conn.send(http_post_bytes(server.port, "/v2/trace/setting",
                                              json.dumps({"trace_level": ["OFF"]}).encode()))
        assert status == 200, status
        log(f"tracecost: {n} untraced requests (reference)")
        plain, failed_plain = timed(conn, request, expected, n)
        conn.close()
        tenth = max(1, n // 10)
        first, last = mean_ms(traced[:tenth]), mean_ms(traced[-tenth:])
        try:
            traces = json.loads(trace_file.read_text())
            count = len(traces)
        except (OSError, ValueError):
            count = -1
        figures.update({
            "first_tenth_ms": round(first, 3), "last_tenth_ms": round(last, 3),
            "last_over_first": round(last / first, 2),
            "traced_ms": round(mean_ms(traced), 3), "untraced_ms": round(mean_ms(plain), 3),
            "traced_over_untraced": round(mean_ms(traced) / mean_ms(plain), 2),
            "traces_in_file": count, "failed": failed_traced + failed_plain,
        })
        checks = [
            (f"last tenth within {args.bound}x of the first ({last:.3f} vs {first:.3f} ms)",
             last <= args.bound * first),
            (f"the trace file is one valid JSON array of {n + 1} traces (has {count})", count == n + 1),
            ("no request failed", failed_traced + failed_plain == 0),
        ]
    finally:
        code = server.stop()
    checks.append(("the server exits 0", code == 0))
    shutil.rmtree(tmp, ignore_errors=True)
    return report("tracecost", all(ok for _, ok in checks), figures, checks)


if __name__ == "__main__":
    sys.exit(main())
