"""half-open: thousands of idle, half-open connections must not starve a
normal request.

Opens --http N connections to the HTTP port, each sending part of a request
header and never the rest, and --grpc N connections to the gRPC port, each
sending the HTTP/2 preface and an empty SETTINGS frame and then nothing.
While they are open (held --hold seconds), normal requests on fresh
connections (HTTP infer on `simple`, gRPC ModelInfer on a new channel,
--probes of each, spread over the hold) must each answer correctly within
1 s. Then every idle connection is closed, and the server's open file
descriptors must come back to within 32 of where they started within 10 s.
Then --rounds (3) more rounds of as many connections are opened and closed
at once: the last round must not grow the RSS by 16 MiB (memory the
allocator kept is reused and the RSS levels off; memory leaked per
connection would grow it by the same amount every round).
The file-descriptor limit of this process (and so of the server, its child)
is raised to fit.

Reported: connections opened, how many the server had already closed by
the end of the hold (an idle/header timeout closing them is fine), probe
latencies, fds and RSS before/during/after.

    .venv/bin/python tests/reliability/halfopen.py [--quick] [--http N] [--grpc N] [--hold S]
"""

from __future__ import annotations

import argparse
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    EXAMPLES, SIMPLE_BODY, KeepAlive, TrtisServer, fd_count, http_post_bytes, log, raise_nofile, report,
    rss_mib, simple_expected,
)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
PARTIAL_HTTP = b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty"


def open_idle(port: int, n: int, first_bytes: bytes, deadline: float) -> tuple[list[socket.socket], int]:
    socks, failed = [], 0
    for _ in range(n):
        if time.monotonic() > deadline:
            break
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(first_bytes)
            s.setblocking(False)
            socks.append(s)
        except OSError:
            failed += 1
    return socks, failed


def still_open(socks: list[socket.socket]) -> int:
    """How many the server has not closed: each socket is non-blocking;
    whatever the server sent (e.g. its SETTINGS) is drained; EOF or a reset
    means closed. (No select(): the descriptors go past FD_SETSIZE.)"""
    n = 0
    for s in socks:
        try:
            while True:
                if not s.recv(65536):
                    break  # EOF: closed by the server
        except (BlockingIOError, InterruptedError):
            n += 1  # nothing more to read: still open
        except OSError:
            pass  # reset: closed
    return n


def grpc_probe(url: str) -> tuple[float, str | None]:
    import grpc
    import numpy as np
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    req = service_pb2.ModelInferRequest(model_name="simple")
    for name, data in (("INPUT0", np.arange(16, dtype=np.int32)), ("INPUT1", np.ones(16, dtype=np.int32))):
        req.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        req.raw_input_contents.append(data.tobytes())
    t = time.monotonic()
    try:
        with grpc.insecure_channel(url) as ch:
            resp = service_pb2_grpc.GRPCInferenceServiceStub(ch).ModelInfer(req, timeout=5)
        out = np.frombuffer(resp.raw_output_contents[0], dtype=np.int32).tolist()
        err = None if out == list(range(1, 17)) else f"wrong answer {out}"
    except grpc.RpcError as e:
        err = f"{e.code().name}: {e.details()}"
    return time.monotonic() - t, err


def http_probe(port: int, expected: bytes) -> tuple[float, str | None]:
    c = KeepAlive(port, timeout=5)
    t = time.monotonic()
    try:
        status, body = c.send(http_post_bytes(port, "/v2/models/simple/infer", SIMPLE_BODY, keep_alive=False))
        err = None if status == 200 and body == expected else f"HTTP {status} {body[:100]!r}"
    except OSError as e:
        err = f"{type(e).__name__}: {e}"
    finally:
        c.close()
    return time.monotonic() - t, err


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="200 + 200 connections, 10 s hold")
    ap.add_argument("--http", type=int)
    ap.add_argument("--grpc", type=int)
    ap.add_argument("--hold", type=float)
    ap.add_argument("--probes", type=int, default=10)
    ap.add_argument("--bound-s", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=3, help="further open/close rounds for the leak check")
    args = ap.parse_args()
    n_http = args.http if args.http is not None else (200 if args.quick else 2000)
    n_grpc = args.grpc if args.grpc is not None else (200 if args.quick else 2000)
    hold = args.hold if args.hold is not None else (10.0 if args.quick else 40.0)
    nofile = raise_nofile(2 * (n_http + n_grpc) + 1024)

    tmp = Path(tempfile.mkdtemp(prefix="trtis-halfopen-"))
    repo = tmp / "models"
    repo.mkdir()
    shutil.copytree(EXAMPLES / "simple", repo / "simple")
    server = TrtisServer(repo, [], name="halfopen").start()
    pid = server.proc.pid
    figures: dict = {"nofile_limit": nofile}
    checks: list[tuple[str, bool]] = []
    notes: list[str] = []
    socks: list[socket.socket] = []
    try:
        expected = simple_expected(server.port)
        grpc_probe(server.grpc_url)  # warm the gRPC path once
        fd0, rss0 = fd_count(pid), rss_mib(pid)
        log(f"half-open: opening {n_http} HTTP + {n_grpc} gRPC idle connections (server fds {fd0})")
        t_open = time.monotonic()
        http_socks, http_failed = open_idle(server.port, n_http, PARTIAL_HTTP, t_open + 60)
        grpc_socks, grpc_failed = open_idle(server.grpc_port, n_grpc, PREFACE + SETTINGS, t_open + 120)
        socks = http_socks + grpc_socks
        open_s = time.monotonic() - t_open
        time.sleep(0.5)
        fd1, rss1 = fd_count(pid), rss_mib(pid)
        log(f"  opened {len(http_socks)} + {len(grpc_socks)} in {open_s:.1f} s; server fds {fd1}, RSS {rss1:.1f} MiB")
        latencies: list[float] = []
        errors: list[str] = []
        t_hold = time.monotonic()
        for i in range(args.probes):
            for lat, err in (http_probe(server.port, expected), grpc_probe(server.grpc_url)):
                latencies.append(lat)
                if err:
                    errors.append(err)
            target = t_hold + hold * (i + 1) / args.probes
            time.sleep(max(0.0, target - time.monotonic()))
        open_http, open_grpc = still_open(http_socks), still_open(grpc_socks)
        alive_during = server.alive()
        log(f"  after {hold:.0f} s: {open_http} HTTP and {open_grpc} gRPC idle connections still open; "
            f"worst probe {max(latencies) * 1000:.0f} ms")
        for s in socks:
            s.close()
        socks = []
        t_close = time.monotonic()
        fd2 = fd_count(pid)
        while time.monotonic() - t_close < 10 and fd2 > fd0 + 32:
            time.sleep(0.2)
            fd2 = fd_count(pid)
        fd_settle = time.monotonic() - t_close
        after_lat, after_err = http_probe(server.port, expected)
        rss2 = rss_mib(pid)
        # More rounds, each opened and closed at once: memory the allocator
        # kept is reused (the RSS levels off), memory leaked per connection
        # is not (it grows by the same amount every round).
        rounds = [rss2]
        again = []
        for _ in range(args.rounds):
            again = open_idle(server.port, n_http, PARTIAL_HTTP, time.monotonic() + 60)[0] + \
                open_idle(server.grpc_port, n_grpc, PREFACE + SETTINGS, time.monotonic() + 120)[0]
            time.sleep(0.5)
            for s in again:
                s.close()
            t_close = time.monotonic()
            while time.monotonic() - t_close < 10 and fd_count(pid) > fd0 + 32:
                time.sleep(0.2)
            time.sleep(0.5)
            rounds.append(rss_mib(pid))
        last_growth = rounds[-1] - rounds[-2] if len(rounds) > 1 else 0.0
        log(f"  RSS {rss0:.1f} MiB before, {rss1:.1f} with them open, {rss2:.1f} after closing, "
            f"then after each further round: {', '.join(f'{r:.1f}' for r in rounds[1:])}")
        figures.update({
            "http_opened": len(http_socks), "http_connect_failed": http_failed,
            "grpc_opened": len(grpc_socks), "grpc_connect_failed": grpc_failed,
            "open_seconds": round(open_s, 1), "hold_seconds": hold,
            "http_still_open_after_hold": open_http, "grpc_still_open_after_hold": open_grpc,
            "probes": len(latencies), "probe_errors": len(errors),
            "probe_max_ms": round(max(latencies) * 1000, 1),
            "probe_mean_ms": round(1000 * sum(latencies) / len(latencies), 1),
            "server_fds_before": fd0, "server_fds_during": fd1, "server_fds_after": fd2,
            "fd_settle_seconds": round(fd_settle, 1),
            "rss_before_mib": round(rss0, 1), "rss_during_mib": round(rss1, 1), "rss_after_mib": round(rss2, 1),
            "rounds": 1 + args.rounds, "rss_after_each_round_mib": ", ".join(f"{r:.1f}" for r in rounds),
            "rss_last_round_growth_mib": round(last_growth, 1),
        })
        checks = [
            (f"all {n_http} + {n_grpc} idle connections opened",
             len(http_socks) == n_http and len(grpc_socks) == n_grpc),
            (f"{len(latencies)} normal requests answered correctly while they were open ({len(errors)} errors)",
             not errors),
            (f"every normal request within {args.bound_s:.1f} s (worst {max(latencies) * 1000:.0f} ms)",
             max(latencies) <= args.bound_s),
            (f"server fds back to {fd2} (from {fd0}, {fd1} during) within 10 s of closing", fd2 <= fd0 + 32),
            ("a normal request answers after closing them", after_err is None and after_lat <= args.bound_s),
            (f"RSS levels off over {1 + args.rounds} rounds: the last grew it by {last_growth:.1f} MiB "
             f"(< 16 MiB: no leak per connection)", last_growth < 16),
            ("server alive throughout", alive_during and server.alive()),
        ]
        notes += errors[:5]
        if after_err:
            notes.append(f"after closing: {after_err}")
    finally:
        for s in socks:
            s.close()
        code = server.stop()
        figures["exit_code"] = code
        shutil.rmtree(tmp, ignore_errors=True)
    passed = all(ok for _, ok in checks) and figures.get("exit_code") == 0
    checks.append(("server exits 0 on SIGINT", figures.get("exit_code") == 0))
    return report("halfopen", passed, figures, checks, notes)


if __name__ == "__main__":
    sys.exit(main())
