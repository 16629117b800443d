"""Issue 56's repros, re-run against a `trtis serve` of the example
repository, with the figure each one's bound is about (RSS, open files,
seconds). Prints a Markdown table; `hostile_rss.py` does the gRPC bursts.

Run: TRTIS_BIN=target/release/trtis .venv/bin/python benches/growth/run.py [--stream-secs 60]

Every byte goes to 127.0.0.1. The server runs in explicit mode with the
text generator, the embedder and the OpenVINO classifier.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "python"))

import tritonclient.http as httpclient  # noqa: E402

from trtis_harness import EXAMPLES, TrtisServer, rss_mib  # noqa: E402

MODELS = ("text_generator", "text_embedding", "efficientnet_lite0_openvino")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def post(server, path, doc, rcvbuf=None) -> socket.socket:
    body = json.dumps(doc).encode()
    s = socket.socket()
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(120)
    s.connect((server.host, server.port))
    s.sendall(
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    return s


def start(repo, *args) -> TrtisServer:
    server = TrtisServer(
        repo,
        ["--python", sys.executable, "--model-control-mode", "explicit", "--load-model", "*", *args],
        name="growth bench",
    )
    return server.start(timeout=120)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--stream-secs", type=float, default=60)
    ap.add_argument("--cycles", type=int, default=40)
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "models"
        repo.mkdir()
        for m in MODELS:
            shutil.copytree(EXAMPLES / m, repo / m, ignore=shutil.ignore_patterns("__pycache__"))
        server = start(repo)
        pid = server.proc.pid
        http = httpclient.InferenceServerClient(server.url, network_timeout=300)
        try:
            # 1. OpenVINO load/unload cycles.
            name = "efficientnet_lite0_openvino"
            http.unload_model(name)
            time.sleep(1)
            r0, f0 = rss_mib(pid), open_fds(pid)
            for _ in range(a.cycles):
                http.load_model(name)
                http.unload_model(name)
                while http.is_model_ready(name):
                    time.sleep(0.02)
            time.sleep(1)
            rows.append((f"OpenVINO {a.cycles} load/unload cycles", f"RSS {r0:.0f} -> {rss_mib(pid):.0f} MiB, "
                         f"open files {f0} -> {open_fds(pid)}"))

            # 2. A stream nobody reads.
            base = rss_mib(pid)
            s = post(server, "/v1/completions",
                     {"model": "text_generator", "prompt": "The", "max_tokens": 10**9, "stream": True}, rcvbuf=4096)
            steps = []
            t0 = time.monotonic()
            while time.monotonic() - t0 < a.stream_secs:
                time.sleep(min(10, a.stream_secs))
                steps.append(rss_mib(pid) - base)
            s.close()
            time.sleep(5)
            rows.append((f"/v1 stream not read for {a.stream_secs:.0f} s",
                         "RSS " + ", ".join(f"{d:+.1f}" for d in steps) + f" MiB; {rss_mib(pid) - base:+.1f} after close"))

            # 3. Runaway non-streaming generate.
            base = rss_mib(pid)
            t0 = time.monotonic()
            s = post(server, "/v2/models/text_generator/generate",
                     {"text_input": "The", "max_tokens": 10**9, "stream": True})
            s.settimeout(30)
            try:
                data = s.recv(65536)
                status = data.split(b"\r\n", 1)[0].decode() + f" in {time.monotonic() - t0:.2f} s"
            except TimeoutError:
                status = "no answer in 30 s"
            grown = rss_mib(pid) - base
            s.close()
            rows.append(("runaway generate", f"{status}, RSS {grown:+.1f} MiB"))

            # 4. Eight /v1 bodies declared over the 64 MiB limit, sent.
            base = rss_mib(pid)
            peak = [base]
            done = threading.Event()

            def sample():
                while not done.is_set():
                    peak[0] = max(peak[0], rss_mib(pid))
                    time.sleep(0.02)

            def oversized(out, i):
                n = 73400338
                try:
                    c = socket.create_connection((server.host, server.port), timeout=60)
                    c.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                              f"Content-Length: {n}\r\n\r\n".encode())
                    chunk = b"x" * (1 << 20)
                    sent = 0
                    try:
                        while sent < n:
                            sent += c.send(chunk[: n - sent])
                    except OSError:
                        pass
                    out[i] = c.recv(100).split(b"\r\n", 1)[0].decode()
                    c.close()
                except OSError as e:
                    out[i] = str(e)

            th = threading.Thread(target=sample)
            th.start()
            out = [None] * 8
            ts = [threading.Thread(target=oversized, args=(out, i)) for i in range(8)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            done.set()
            th.join()
            rows.append(("8 x /v1 body of 73400338 bytes", f"{sorted(set(out))}; peak RSS {peak[0] - base:+.1f} MiB"))

            # 5. 2,048 embeddings inputs.
            t0 = time.monotonic()
            st, _, body = server.post_json("/v1/embeddings", {"model": "text_embedding",
                                                              "input": [f"text {i}" for i in range(2048)]})
            n = len(json.loads(body).get("data", [])) if st == 200 else 0
            rows.append(("/v1/embeddings, 2,048 inputs", f"{st}, {n} embeddings in {time.monotonic() - t0:.2f} s"))
        finally:
            http.close()
            server.kill()

        # 6. SIGTERM with --exit-timeout-secs 5 and a request that never ends.
        server = start(repo, "--exit-timeout-secs", "5")
        s = post(server, "/v2/models/text_generator/generate_stream",
                 {"text_input": "The", "max_tokens": 5, "token_delay_ms": 600000})
        time.sleep(1)
        t0 = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        server.proc.wait(timeout=120)
        rows.append(("SIGTERM, --exit-timeout-secs 5, request in flight", f"exited in {time.monotonic() - t0:.1f} s"))
        s.close()
        server.kill()
    print("| repro | figure |")
    print("| --- | --- |")
    for r in rows:
        print(f"| {r[0]} | {r[1]} |")


if __name__ == "__main__":
    main()
