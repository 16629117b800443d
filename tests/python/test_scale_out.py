"""Scale-out, simulated on one machine: three `trtis serve` replicas behind a
real load balancer, HAProxy (Debian's package and its two libraries,
unpacked by scripts/setup.sh into .tools/haproxy: no install, no root),
with HTTP and gRPC (h2) backends and active health checks on each replica's
`/v2/health/ready`. `trtis perf` drives both protocols through it while the
replicas are restarted one at a time (SIGTERM, drain, exit 0, start again
on the same ports), and the test asserts zero failed requests.

This is what a Kubernetes rolling update relies on: a replica that gets
SIGTERM reports not ready at once and keeps serving for its accept grace
(1 s), the balancer's readiness check (every 100 ms here) stops sending it
new requests within that time, and the requests it holds finish. HAProxy
was chosen over nginx because open-source nginx has no active health checks:
its only way to drop a replica is a reload, and a reload itself loses
requests (its old workers close kept-alive client connections with a request
on the way, measured here before switching); HTTP requests a balancer sends
during the refusal are retried on another replica too (`retry-on`).
"""


from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from trtis_harness import EXAMPLES, REPO_ROOT, TrtisServer, free_port, start_or_fail, trtis_bin, wait_for

HAPROXY_ROOT = REPO_ROOT / ".tools" / "haproxy"
HAPROXY = HAPROXY_ROOT / "usr" / "sbin" / "haproxy"
REPLICAS = 3
PERF_SECONDS = 24



class Replica(TrtisServer):
    """A replica on fixed ports, so that it comes back where nginx expects it."""

    def __init__(self, repo: Path, http_port: int, grpc_port: int, index: int):
        super().__init__(repo, ["--exit-timeout-secs", "10"], name=f"replica-{index}")
        self.http_port, self.fixed_grpc_port = http_port, grpc_port

    def command(self) -> list[str]:
        cmd = super().command()
        cmd[cmd.index("--http-port") + 1] = str(self.http_port)
        cmd[cmd.index("--grpc-port") + 1] = str(self.fixed_grpc_port)
        return cmd


def _config(replicas: list[Replica], http: int, grpc: int) -> str:
    def servers(port_attr: str, extra: str) -> str:
        return "\n".join(
            f"  server r{i} 127.0.0.1:{getattr(r, port_attr)} check port {r.http_port}{extra}"
            for i, r in enumerate(replicas)
        )

    return f"""
global
  maxconn 2000
defaults
  mode http
  timeout connect 2s
  timeout client 60s
  timeout server 60s
  retries 3
  option redispatch 1
  option http-buffer-request
  retry-on all-retryable-errors
  default-server inter 100ms fall 1 rise 2
frontend http_in
  bind 127.0.0.1:{http}
  default_backend trtis_http
frontend grpc_in
  bind 127.0.0.1:{grpc} proto h2
  default_backend trtis_grpc
backend trtis_http
  balance roundrobin
  option httpchk GET /v2/health/ready
  http-check expect status 200
{servers("http_port", "")}
backend trtis_grpc
  balance roundrobin
  option httpchk GET /v2/health/ready
  http-check expect status 200
{servers("fixed_grpc_port", " proto h2")}
"""


def test_rolling_restart_behind_haproxy_loses_no_request(tmp_path):
    if not HAPROXY.exists():
        pytest.fail(f"HAProxy is not at {HAPROXY} (scripts/setup.sh unpacks Debian's package there)")
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLES / "simple", repo / "simple")
    replicas = [Replica(repo, free_port(), free_port(), i) for i in range(REPLICAS)]
    for r in replicas:
        start_or_fail(r)
    conf = tmp_path / "haproxy.cfg"
    http, grpc = free_port(), free_port()
    conf.write_text(_config(replicas, http, grpc))
    env = {**os.environ, "LD_LIBRARY_PATH": str(HAPROXY_ROOT / "usr" / "lib" / "x86_64-linux-gnu")}
    lb = subprocess.Popen([str(HAPROXY), "-db", "-f", str(conf)], env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    perfs = []
    try:
        assert wait_for(lambda: _port_open(http) and _port_open(grpc), timeout=10), lb.poll()
        time.sleep(0.5)  # the first health checks pass
        for proto, port in (("http", http), ("grpc", grpc)):
            perfs.append(subprocess.Popen(
                [str(trtis_bin()), "perf", "-m", "simple", "-i", proto, "-u", f"127.0.0.1:{port}",
                 "-t", "2", "-p", str(PERF_SECONDS * 1000), "-r", "1", "--json"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            ))
        time.sleep(3)
        exits = []
        for replica in replicas:
            replica.proc.send_signal(signal.SIGTERM)
            exits.append(replica.proc.wait(timeout=30))
            replica._join_pumps()
            start_or_fail(replica)
            time.sleep(1.5)  # back in the balancer (rise 2 x 100 ms) and serving
        results = {}
        for proto, p in zip(("http", "grpc"), perfs):
            out, err = p.communicate(timeout=PERF_SECONDS + 60)
            assert p.returncode == 0, f"{proto}: {err}"
            results[proto] = json.loads(out)["steps"][0]
        assert exits == [0] * REPLICAS, f"a replica did not drain and exit 0: {exits}"
        for proto, step in results.items():
            assert step["failed_count"] == 0, f"{proto}: {step['failed_count']} failed: {step['first_error']}"
            assert step["request_count"] > 100, f"{proto}: {step}"
        print("requests through the restarts:", {p: s["request_count"] for p, s in results.items()})
    finally:
        for p in perfs:
            if p.poll() is None:
                p.kill()
        lb.terminate()
        lb.wait(timeout=10)
        for r in replicas:
            if r.alive():
                r.stop()


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0
