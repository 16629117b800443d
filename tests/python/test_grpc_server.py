"""The gRPC listener itself: Triton's start line, `--allow-grpc=false`, a
gRPC-only server (`--allow-http=false`), and SIGINT with gRPC clients (an
idle channel, an open stream) still connected.

Triton prints "Started GRPCInferenceService at <addr>:<port>" (server
src/grpc/grpc_server.cc Server::Start) next to "Started HTTPService at ..."
(src/http_server.cc), gRPC first; `--allow-grpc=false` / `--allow-http=false`
turn one listener off (src/command_line_parser.cc).
"""

from __future__ import annotations

import socket
import threading
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from trtis_harness import (
    GRPC_STARTED_RE,
    STARTED_RE,
    ServerError,
    TrtisServer,
    grpc_client_for,
    grpc_supported,
    running_server,
)


@pytest.fixture(autouse=True)
def needs_grpc_binary():
    if not grpc_supported():
        pytest.fail("`trtis serve --help` has no --grpc-port: no gRPC frontend yet", pytrace=False)


def fp32_roundtrip(c, values=(1.0, 2.0)):
    data = np.array([values], dtype=np.float32)
    inp = grpcclient.InferInput("INPUT0", list(data.shape), "FP32")
    inp.set_data_from_numpy(data)
    np.testing.assert_array_equal(c.infer("identity_fp32", [inp]).as_numpy("OUTPUT0"), data)


def test_start_lines_name_the_bound_addresses(server):
    lines = server.log_lines()
    grpc_lines = [l for l in lines if GRPC_STARTED_RE.search(l)]
    http_lines = [l for l in lines if STARTED_RE.search(l)]
    assert len(grpc_lines) == 1, grpc_lines
    assert len(http_lines) == 1, http_lines
    m = GRPC_STARTED_RE.search(grpc_lines[0])
    assert m.group(1) == "127.0.0.1"
    assert int(m.group(2)) == server.grpc_port != 0
    assert server.grpc_port != server.port


# A SIGINT that lands right after the start lines is the subject of
# test_sigint_right_after_start; the other tests give the server this long
# before stopping it so that they test only their own subject.
SETTLE_S = 0.3


def test_allow_grpc_false(tiny_repo):
    gen = running_server(tiny_repo, ["--allow-grpc=false"], name="no-gRPC server")
    server = next(gen)
    try:
        assert server.grpc_port is None
        assert not any(GRPC_STARTED_RE.search(l) for l in server.log_lines()), server.log_tail()
        status, _, _ = server.request("GET", "/v2/health/ready")
        assert status == 200
        time.sleep(SETTLE_S)
    finally:
        gen.close()


def test_grpc_only_server(tiny_repo):
    gen = running_server(tiny_repo, ["--allow-http=false"], name="gRPC-only server")
    server = next(gen)
    try:
        assert server.port is None
        assert not any(STARTED_RE.search(l) for l in server.log_lines()), server.log_tail()
        c = grpc_client_for(server)
        try:
            assert c.is_server_ready()
            assert c.is_model_ready("identity_fp32")
            fp32_roundtrip(c)
        finally:
            c.close()
        time.sleep(SETTLE_S)
    finally:
        gen.close()


@pytest.mark.parametrize("args", [[], ["--allow-grpc=false"]], ids=["http+grpc", "http-only"])
def test_sigint_right_after_start(tiny_repo, args):
    """SIGINT as soon as the server is ready (start lines printed, ready
    answered) must still be a graceful exit 0, never death by the default
    SIGINT action (exit -2): the handler has to be in place before the
    listeners are announced. Repeated because it is a race."""
    codes = []
    for i in range(25):
        server = TrtisServer(tiny_repo, args, name=f"quick-stop server {i}")
        try:
            server.start()
        except ServerError as e:
            pytest.fail(str(e), pytrace=False)
        try:
            codes.append(server.stop(timeout=10.0))
        finally:
            server.kill()
    assert codes == [0] * len(codes), f"exit codes {codes} (-2: killed by SIGINT's default action)"


def test_sigint_with_idle_channel_and_open_stream(tiny_repo):
    """An idle keep-alive channel and an open (idle) stream must not keep the
    server from exiting 0: within --exit-timeout-secs (Triton: how long to
    wait for requests in flight) plus slack; the gRPC port stops answering."""
    exit_timeout = 3
    server = TrtisServer(
        tiny_repo, ["--exit-timeout-secs", str(exit_timeout)], name="gRPC shutdown server"
    )
    try:
        server.start()
    except ServerError as e:
        pytest.fail(str(e), pytrace=False)
    idle = grpc_client_for(server)
    streaming = grpc_client_for(server)
    stream_events: list = []
    got_one = threading.Event()
    try:
        fp32_roundtrip(idle)
        streaming.start_stream(
            callback=lambda result, error: (stream_events.append((result, error)), got_one.set())
        )
        data = np.array([[4.0]], dtype=np.float32)
        inp = grpcclient.InferInput("INPUT0", [1, 1], "FP32")
        inp.set_data_from_numpy(data)
        streaming.async_stream_infer("identity_fp32", [inp], request_id="before-sigint")
        assert got_one.wait(10), "no stream response"
        assert stream_events[0][1] is None, stream_events[0][1]
        grpc_port = server.grpc_port
        time.sleep(SETTLE_S)

        t0 = time.monotonic()
        code = server.stop(timeout=exit_timeout + 7.0)
        took = time.monotonic() - t0
        assert code == 0, (
            f"SIGINT should exit 0 within {exit_timeout + 7} s, got "
            f"{'a hang (killed)' if code is None else code}\n{server.log_tail()}"
        )
        assert took < exit_timeout + 7.0
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", grpc_port), timeout=2.0).close()
    finally:
        server.kill()
        s = streaming._stream
        if s is not None and s._response_iterator is not None:
            s._response_iterator.cancel()
        streaming._stream = None
        streaming.close()
        idle.close()
