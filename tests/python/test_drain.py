"""SIGTERM drains: every request the server has been sent before the signal
is answered before it exits (0), over HTTP and gRPC together; while it
drains it reports not ready, and once the requests in flight are done, new
ones are refused with a clear error (Triton's message, 503 / UNAVAILABLE)."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from trtis_harness import TrtisServer, start_or_fail

SLOW_BATCHER = """
name: "slow_batcher"
backend: "identity"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
dynamic_batching { }
parameters [ { key: "execute_delay_ms" value: { string_value: "%d" } } ]
"""


def make_repo(path, delay_ms):
    model = path / "slow_batcher"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(SLOW_BATCHER % delay_ms)
    return path


def http_request_bytes(i: int) -> bytes:
    body = json.dumps(
        {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [float(i)] * 4}]}
    ).encode()
    head = (
        "POST /v2/models/slow_batcher/infer HTTP/1.1\r\nHost: x\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    return head + body


def read_response(sock: socket.socket) -> bytes:
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except OSError as e:  # a reset is a lost request
            return data + f"<{e.__class__.__name__}>".encode()
        if not chunk:
            return data
        data += chunk


@pytest.mark.parametrize("delay_ms", [20])
def test_sigterm_answers_every_request_in_flight(tmp_path, delay_ms):
    server = start_or_fail(TrtisServer(make_repo(tmp_path / "models", delay_ms), name="drain server"))
    try:
        n_http, n_grpc = 100, 100
        client = grpcclient.InferenceServerClient(server.grpc_url)
        assert client.is_server_ready()  # the channel is connected
        # Freeze the server: the requests below are all received by the
        # kernel (connections in the accept backlog, bytes in socket
        # buffers) but none is read yet when the signal arrives.
        server.proc.send_signal(signal.SIGSTOP)
        # HTTP: one connection per request, each request fully sent.
        socks = []
        for i in range(n_http):
            s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
            s.sendall(http_request_bytes(i))
            socks.append(s)
        # gRPC: asynchronous requests on the connected channel.
        results: list = [None] * n_grpc
        done = threading.Semaphore(0)

        def callback(k):
            def cb(result, error):
                results[k] = (result, error)
                done.release()

            return cb

        for k in range(n_grpc):
            inp = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
            inp.set_data_from_numpy(np.full((1, 4), k, dtype=np.float32))
            client.async_infer("slow_batcher", [inp], callback(k))
        time.sleep(0.2)  # the gRPC requests are on the wire
        assert server.alive()
        server.proc.send_signal(signal.SIGTERM)
        server.proc.send_signal(signal.SIGCONT)

        answers = [read_response(s) for s in socks]
        for s in socks:
            s.close()
        for _ in range(n_grpc):
            assert done.acquire(timeout=30), "a gRPC request got no answer"
        code = server.proc.wait(timeout=30)
        client.close()

        ok_http = sum(a.startswith(b"HTTP/1.1 200") for a in answers)
        ok_grpc = sum(r is not None and r[1] is None for r in results)
        lost = [a[:80] for a in answers if not a.startswith(b"HTTP/1.1 200")]
        errors = [str(r[1])[:120] for r in results if r[1] is not None]
        assert (ok_http, ok_grpc) == (n_http, n_grpc), (lost[:3], errors[:3], server.log_tail())
        for k, (result, _) in enumerate(results):
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((1, 4), k, dtype=np.float32))
        assert code == 0, server.log_tail()
    finally:
        server.proc.send_signal(signal.SIGCONT)
        server.kill()


def test_draining_is_not_ready_and_then_refuses_new_requests(tmp_path):
    server = start_or_fail(TrtisServer(make_repo(tmp_path / "models", 4000), name="slow drain server"))
    try:
        slow = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        slow.sendall(http_request_bytes(7))
        time.sleep(0.3)  # executing now, for 4 s
        keep = httpclient.InferenceServerClient(server.url, network_timeout=30)
        assert keep.is_server_ready()
        server.proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        assert not keep.is_server_ready()
        assert keep.is_server_live()
        time.sleep(1.2)  # past the 1 s grace: new requests are refused
        status, _, body = server.request("POST", "/v2/models/slow_batcher/infer", http_request_bytes(1).split(b"\r\n\r\n", 1)[1])
        assert status == 503, body
        assert json.loads(body)["error"] == (
            "Server is stopping, scheduler for model has stopped accepting new inference requests"
        )
        g = grpcclient.InferenceServerClient(server.grpc_url)
        inp = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
        inp.set_data_from_numpy(np.zeros((1, 4), dtype=np.float32))
        with pytest.raises(Exception) as e:
            g.infer("slow_batcher", [inp])
        assert "UNAVAILABLE" in str(e.value.status()) and "Server is stopping" in e.value.message()
        g.close()
        keep.close()
        # The request in flight is still answered, then the server exits 0.
        answer = read_response(slow)
        assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
        assert server.proc.wait(timeout=30) == 0, server.log_tail()
    finally:
        server.kill()
