"""sigterm: SIGTERM with requests in flight on a batching, compute-bound
model must answer every one of them and exit 0.

The model is benches/drivers/make_mlp.py's (8 dense 1024x1024 FP32 layers;
generated into target/bench/mlp.onnx if missing), served as `mlp_batched`
with `dynamic_batching { }` and max_batch_size 32, the config of
benches/drivers/batching.py. Each request carries [32, 1024] (a full batch), so
--requests requests (default 200; half over HTTP, each on its own
connection, half over gRPC on one channel) keep the instances busy for
seconds. Once all are sent and the server has taken them in (0.1 s), the
server gets SIGTERM; at least half must still be in flight then, or the
case proves nothing (reported as in_flight_at_signal).

Each request is counted as: answered (200 / OK, with an output that matches
ONNX Runtime run in this process), refused cleanly (an HTTP 4xx/5xx with a
{"error": ...} body, or a gRPC status other than UNAVAILABLE from a broken
transport, with a message), or cut (connection reset or closed with no
answer, or a gRPC transport failure). PASS when none is cut, all are
answered or refused cleanly (a proper response for every request; how many
succeeded is reported), and the server exits 0 within
--exit-timeout-secs + 10 s.

    .venv/bin/python tests/reliability/sigterm.py [--quick] [--requests N]
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

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, TrtisServer, log, report  # noqa: E402

ROWS = 32
WIDTH = 1024
CONFIG = ('backend: "onnxruntime"\nmax_batch_size: 32\n'
          'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1024 ] } ]\n'
          'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1024 ] } ]\n'
          'dynamic_batching { }\n')

TRANSPORT_HINTS = ("Socket closed", "Connection reset", "failed to connect", "Broken pipe", "GOAWAY",
                   "Connection refused", "connection", "Stream removed", "RST_STREAM", "EOF")


def mlp_path() -> Path:
    path = ROOT / "target" / "bench" / "mlp.onnx"
    if not path.exists():
        sys.path.insert(0, str(ROOT / "benches" / "drivers"))
        from make_mlp import make

        path.parent.mkdir(parents=True, exist_ok=True)
        make(str(path))
    return path


def http_request_bytes(port: int, x: np.ndarray) -> bytes:
    head = json.dumps({"inputs": [{"name": "INPUT0", "shape": list(x.shape), "datatype": "FP32",
                                   "parameters": {"binary_data_size": x.nbytes}}],
                       "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]}).encode()
    body = head + x.tobytes()
    return (f"POST /v2/models/mlp_batched/infer HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n"
            f"Content-Type: application/octet-stream\r\nInference-Header-Content-Length: {len(head)}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def read_http(sock: socket.socket, timeout: float) -> tuple[int | None, dict, bytes, str | None]:
    """(status, headers, body, transport error)."""
    sock.settimeout(timeout)
    buf = b""
    try:
        while True:
            chunk = sock.recv(1 << 16)
            if not chunk:
                break
            buf += chunk
    except socket.timeout:
        return None, {}, buf, "timed out"
    except OSError as e:
        if not buf:
            return None, {}, b"", f"{type(e).__name__}: {e}"
    end = buf.find(b"\r\n\r\n")
    if not buf.startswith(b"HTTP/") or end < 0:
        return None, {}, buf, "connection closed without an answer" if not buf else f"garbled answer {buf[:80]!r}"
    lines = buf[:end].decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    body = buf[end + 4:]
    if "content-length" in headers and len(body) < int(headers["content-length"]):
        return int(lines[0].split()[1]), headers, body, "answer cut short"
    return int(lines[0].split()[1]), headers, body, None


class Outcome:
    def __init__(self):
        self.lock = threading.Lock()
        self.answered = self.refused = self.cut = self.wrong = 0
        self.samples: list[str] = []
        self.done_at: list[float] = []  # monotonic time each answer arrived

    def add(self, kind: str, detail: str = "", at: float | None = None) -> None:
        with self.lock:
            self.done_at.append(time.monotonic() if at is None else at)
            setattr(self, kind, getattr(self, kind) + 1)
            if kind != "answered" and len(self.samples) < 8:
                self.samples.append(f"{kind}: {detail}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="same 200 requests (the case is short already)")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--exit-timeout-secs", type=int, default=30)
    args = ap.parse_args()
    n_http = args.requests // 2
    n_grpc = args.requests - n_http

    import grpc
    import onnxruntime as ort
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    model = mlp_path()
    tmp = Path(tempfile.mkdtemp(prefix="trtis-sigterm-"))
    repo = tmp / "models"
    (repo / "mlp_batched" / "1").mkdir(parents=True)
    os.symlink(model, repo / "mlp_batched" / "1" / "model.onnx")
    (repo / "mlp_batched" / "config.pbtxt").write_text(CONFIG)

    x = np.random.default_rng(7).standard_normal((ROWS, WIDTH), dtype=np.float32)
    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"INPUT0": x})[0]
    del sess

    def matches(y: np.ndarray) -> bool:
        return y.shape == want.shape and bool(np.allclose(y, want, rtol=1e-3, atol=1e-3))

    server = TrtisServer(repo, ["--exit-timeout-secs", str(args.exit_timeout_secs)], name="sigterm").start()
    figures: dict = {"requests": args.requests, "http": n_http, "grpc": n_grpc, "rows_per_request": ROWS}
    checks: list[tuple[str, bool]] = []
    notes: list[str] = []
    out = Outcome()
    try:
        port, grpc_url = server.port, server.grpc_url
        request = http_request_bytes(port, x)

        # Warm-up: one request each way (the first batch pays session set-up).
        channel = grpc.insecure_channel(grpc_url, options=[("grpc.max_receive_message_length", 1 << 30)])
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        greq = service_pb2.ModelInferRequest(model_name="mlp_batched")
        greq.inputs.add(name="INPUT0", datatype="FP32", shape=[ROWS, WIDTH])
        greq.raw_input_contents.append(x.tobytes())
        stub.ModelInfer(greq, timeout=60)
        with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
            s.sendall(request)
            status, _, _, err = read_http(s, 60)
            assert status == 200 and err is None, (status, err)

        # HTTP: every request on its own connection, sent in full before the
        # signal; each thread then waits for its answer.
        socks = []
        for _ in range(n_http):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            socks.append(s)
        t_send = time.monotonic()
        for s in socks:
            s.sendall(request)
        futures = [stub.ModelInfer.future(greq, timeout=args.exit_timeout_secs + 30) for _ in range(n_grpc)]
        grpc_done: dict[int, float] = {}
        for i, f in enumerate(futures):
            f.add_done_callback(lambda _f, i=i: grpc_done.__setitem__(i, time.monotonic()))
        send_s = time.monotonic() - t_send

        def wait_http(s: socket.socket) -> None:
            status, headers, body, err = read_http(s, args.exit_timeout_secs + 30)
            s.close()
            if status is None:
                out.add("cut", err or "no answer")
            elif status == 200:
                try:
                    jl = int(headers.get("inference-header-content-length", "0"))
                    y = np.frombuffer(body[jl:], dtype=np.float32).reshape(ROWS, WIDTH)
                    out.add("answered" if matches(y) else "wrong", "HTTP 200 with a wrong output")
                except (ValueError, KeyError) as e:
                    out.add("wrong", f"HTTP 200 not decodable: {e}")
            elif err:
                out.add("cut", f"HTTP {status}, {err}")
            else:
                try:
                    msg = json.loads(body)["error"]
                    out.add("refused", f"HTTP {status} {msg!r}")
                except (ValueError, KeyError, TypeError):
                    out.add("wrong", f"HTTP {status} without a JSON error: {body[:100]!r}")

        threads = [threading.Thread(target=wait_http, args=(s,), daemon=True) for s in socks]
        for t in threads:
            t.start()
        # Let the server take every request in before the signal.
        time.sleep(0.1)
        t_sig = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        log(f"sigterm: {n_http} HTTP + {n_grpc} gRPC requests sent in {send_s * 1000:.0f} ms; SIGTERM sent")

        for i, f in enumerate(futures):
            at = None
            try:
                resp = f.result(timeout=args.exit_timeout_secs + 30)
                at = grpc_done.get(i)
                y = np.frombuffer(resp.raw_output_contents[0], dtype=np.float32).reshape(ROWS, WIDTH)
                out.add("answered" if matches(y) else "wrong", "gRPC OK with a wrong output", at)
            except grpc.RpcError as e:
                code, details = e.code(), e.details() or ""
                if code == grpc.StatusCode.UNAVAILABLE and any(h.lower() in details.lower() for h in TRANSPORT_HINTS):
                    out.add("cut", f"gRPC {code.name} {details!r}")
                elif code == grpc.StatusCode.DEADLINE_EXCEEDED:
                    out.add("cut", f"gRPC {code.name} (no answer)")
                elif details:
                    out.add("refused", f"gRPC {code.name} {details!r}")
                else:
                    out.add("wrong", f"gRPC {code.name} without a message")
            except Exception as e:  # grpc.FutureTimeoutError and the like
                out.add("cut", f"{type(e).__name__}: {e}")
        for t in threads:
            t.join(timeout=args.exit_timeout_secs + 40)
        channel.close()
        try:
            code = server.proc.wait(timeout=args.exit_timeout_secs + 10)
        except Exception:
            code = None
            server.kill()
        exit_s = time.monotonic() - t_sig
        server._join_pumps()
        drain_lines = [line for line in server.log_lines() if "shutting down" in line or "in flight" in line]
        in_flight = sum(1 for t in out.done_at if t > t_sig)
        figures.update({
            "in_flight_at_signal": in_flight,
            "answered": out.answered, "refused_cleanly": out.refused, "cut": out.cut, "wrong": out.wrong,
            "send_ms": round(send_s * 1000), "exit_code": code, "exit_seconds": round(exit_s, 1),
        })
        total = out.answered + out.refused + out.cut + out.wrong
        checks = [
            (f"all {args.requests} requests accounted for ({total})", total == args.requests),
            (f"{in_flight} requests still in flight at the signal (at least half needed for the case to mean anything)",
             in_flight >= args.requests // 2),
            (f"{out.answered} answered, {out.refused} refused cleanly, {out.cut} cut, {out.wrong} wrong: "
             "every request got a proper response", out.answered + out.refused == args.requests),
            ("no request cut (reset/closed without an answer)", out.cut == 0),
            (f"exit code 0 (got {code}) within {args.exit_timeout_secs + 10} s (took {exit_s:.1f} s)", code == 0),
        ]
        notes += out.samples + drain_lines[-3:]
    finally:
        if server.alive():
            server.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    passed = all(ok for _, ok in checks)
    return report("sigterm", passed, figures, checks, notes)


if __name__ == "__main__":
    sys.exit(main())
