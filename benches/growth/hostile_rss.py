"""RSS of `trtis serve` across repeated bursts of hostile traffic (issue 56,
item 11): the gRPC cases of tests/python/test_hostile.py (oversized and
malformed messages, 100k-parameter maps, ...), sent BURSTS times; RSS after
each burst, once the server is idle.

Run: TRTIS_BIN=target/release/trtis .venv/bin/python benches/growth/hostile_rss.py [BURSTS]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "python"))

import test_hostile as th  # noqa: E402
from trtis_harness import build_shm_repository, rss_mib  # noqa: E402


def main() -> None:
    bursts = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    with tempfile.TemporaryDirectory() as tmp:
        h = th.Hostile(build_shm_repository(Path(tmp) / "models"))
        try:
            pid = h.server.proc.pid
            time.sleep(1)
            rows = [("start", rss_mib(pid))]
            for b in range(bursts):
                th.grpc_burst(h)
                time.sleep(2)
                rows.append((f"grpc burst {b + 1}", rss_mib(pid)))
            print("| after | RSS MiB | vs. first burst |")
            print("| --- | --- | --- |")
            first = rows[1][1]
            for name, rss in rows:
                print(f"| {name} | {rss:.1f} | {rss - first:+.1f} |")
        finally:
            h.close()


if __name__ == "__main__":
    main()
