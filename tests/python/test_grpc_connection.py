"""gRPC connection settings as Triton's flags set them, against a real
`trtis serve`: keepalive pings (`--grpc-keepalive-time`/`-timeout`), the
connection age (`--grpc-max-connection-age` and its grace), a client that pings often
(grpcio's keepalive options, which Triton's defaults answer with GOAWAY
too_many_pings), compressed requests (tritonclient's `compression_algorithm`)
and compressed responses (`--grpc-infer-response-compression-level`,
measured on the wire through a counting proxy).

The keepalive and age checks read HTTP/2 frames off a raw socket: the
connection preface, an empty SETTINGS, then whatever the server sends.

Run: TRTIS_BIN=$PWD/target/debug/trtis .venv/bin/python -m pytest tests/python/test_grpc_connection.py -q
"""

from __future__ import annotations

import socket
import struct
import threading
import time

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from trtis_harness import build_tiny_repository, running_server

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
SETTINGS, PING, GOAWAY = 0x4, 0x6, 0x7
ACK = 0x1


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return build_tiny_repository(tmp_path_factory.mktemp("grpc_conn") / "models")


def server_with(repo, *args):
    return running_server(repo, list(args), name="grpc-conn")


def h2_frames(host: str, port: int, seconds: float):
    """Opens an HTTP/2 connection that acknowledges the server's SETTINGS
    and nothing else (no PING is answered) and yields (type, flags, payload) of each frame the server
    sends, with the time since connecting, until EOF or `seconds`. The
    last item is (None, None, b"", t) when the server closed it."""
    sock = socket.create_connection((host, port))
    sock.sendall(PREFACE + struct.pack(">I", 0)[1:] + bytes([SETTINGS, 0]) + struct.pack(">I", 0))
    start = time.monotonic()
    buf = b""
    try:
        while True:
            left = seconds - (time.monotonic() - start)
            if left <= 0:
                return
            sock.settimeout(left)
            try:
                chunk = sock.recv(65536)
            except socket.timeout:
                return
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                yield (None, None, b"", time.monotonic() - start)
                return
            buf += chunk
            while len(buf) >= 9:
                length = int.from_bytes(buf[:3], "big")
                if len(buf) < 9 + length:
                    break
                kind, flags = buf[3], buf[4]
                if kind == SETTINGS and not flags & ACK:
                    sock.sendall(bytes([0, 0, 0, SETTINGS, ACK]) + struct.pack(">I", 0))
                yield (kind, flags, buf[9 : 9 + length], time.monotonic() - start)
                buf = buf[9 + length :]
    finally:
        sock.close()


def host_port(server):
    host, port = server.grpc_url.rsplit(":", 1)
    return host, int(port)


def test_keepalive_pings_and_an_unanswered_ping_closes_the_connection(repo):
    for server in server_with(
        repo, "--grpc-keepalive-time", "300", "--grpc-keepalive-timeout", "300"
    ):
        frames = list(h2_frames(*host_port(server), seconds=5.0))
    pings = [t for kind, flags, _, t in frames if kind == PING and not flags & ACK]
    assert pings, f"no keepalive ping in 5 s: {frames}"
    closed = [t for kind, _, _, t in frames if kind is None]
    assert closed, f"the connection stayed open without answering the ping: {frames}"
    assert closed[0] < 3.0, frames


def test_no_keepalive_ping_with_keepalive_off(repo):
    for server in server_with(repo, "--grpc-keepalive-time", "0"):
        frames = list(h2_frames(*host_port(server), seconds=1.5))
    assert not [f for f in frames if f[0] in (PING, None)], frames


def test_a_connection_past_its_age_is_closed_and_clients_go_on(repo):
    # tonic starts a graceful shutdown of the connection at its age and
    # closes it when the grace has passed too.
    for server in server_with(
        repo, "--grpc-max-connection-age", "500", "--grpc-max-connection-age-grace", "500"
    ):
        frames = list(h2_frames(*host_port(server), seconds=4.0))
        closed = [t for kind, _, _, t in frames if kind is None]
        assert closed and 0.9 < closed[0] < 3.0, frames
        # A real client across several ages: every call is answered.
        client = grpcclient.InferenceServerClient(server.grpc_url)
        deadline = time.monotonic() + 2.5
        calls = 0
        while time.monotonic() < deadline:
            assert client.is_server_live()
            calls += 1
            time.sleep(0.05)
        client.close()
        assert calls > 10
    for server in server_with(repo):
        frames = list(h2_frames(*host_port(server), seconds=2.0))
        assert not [f for f in frames if f[0] in (GOAWAY, None)], frames


def test_a_client_that_pings_often_is_never_sent_away(repo):
    # Triton's defaults (2 ping strikes, 5 min between pings without data)
    # answer this client with GOAWAY too_many_pings; trtis counts no strikes.
    for server in server_with(repo):
        channel = grpc.insecure_channel(
            server.grpc_url,
            options=[
                ("grpc.keepalive_time_ms", 100),
                ("grpc.keepalive_timeout_ms", 1000),
                ("grpc.keepalive_permit_without_calls", 1),
                ("grpc.http2.max_pings_without_data", 0),
                ("grpc.http2.min_time_between_pings_ms", 100),
            ],
        )
        from tritonclient.grpc import service_pb2, service_pb2_grpc

        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        assert stub.ServerLive(service_pb2.ServerLiveRequest()).live
        time.sleep(1.5)  # about 15 pings with no call in flight
        state = channel._channel.check_connectivity_state(False)
        assert stub.ServerLive(service_pb2.ServerLiveRequest()).live
        channel.close()
        # 2 is READY: the connection was not torn down by the server.
        assert state == 2


def infer_zeros(client, n: int, **kwargs):
    data = np.zeros((1, n), dtype=np.float32)
    inp = grpcclient.InferInput("INPUT0", [1, n], "FP32")
    inp.set_data_from_numpy(data)
    result = client.infer("identity_fp32", [inp], **kwargs)
    out = result.as_numpy("OUTPUT0")
    assert out.shape == (1, n) and not out.any()


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_compressed_requests_are_read(repo, algorithm):
    for server in server_with(repo):
        client = grpcclient.InferenceServerClient(server.grpc_url)
        infer_zeros(client, 1 << 16, compression_algorithm=algorithm)
        client.close()


class CountingProxy:
    """A TCP proxy on 127.0.0.1 that counts the bytes the server sends."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self.from_server = 0
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.url = f"127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            threading.Thread(target=self._pipe, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, True), daemon=True).start()

    def _pipe(self, src, dst, count):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if count:
                    self.from_server += len(data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self.listener.close()


def bytes_received(server, n: int) -> int:
    proxy = CountingProxy(host_port(server))
    client = grpcclient.InferenceServerClient(proxy.url)
    infer_zeros(client, n)
    client.close()
    proxy.close()
    return proxy.from_server


def test_responses_are_compressed_with_the_level_set(repo):
    n = 1 << 18  # a 1 MiB response of zeros
    for server in server_with(repo, "--grpc-infer-response-compression-level", "medium"):
        compressed = bytes_received(server, n)
    for server in server_with(repo):
        plain = bytes_received(server, n)
    assert plain > 4 * n
    assert compressed < n / 10, (compressed, plain)
