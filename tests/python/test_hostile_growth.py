"""Hostile and careless use of the newer surfaces must not grow the server
without bound (issue 56), against a real `trtis serve` with the example
text generator and embedder:

- a stream whose client stops reading pushes back on the model: the
  server's memory stops growing (before: +25 MiB every 10 s, kept);
- non-streaming `generate` over a decoupled model that never stops is
  answered with Triton's "exactly one response" error at the second
  response, and the request is cancelled (before: every response kept
  until the model ended);
- `/v1` refuses a body declared over `--http-max-input-size` before
  reading it;
- `/v1/embeddings` takes OpenAI's 2,048 inputs in one call (in requests of
  the model's batch size), refuses more, and refuses a text over its
  bound; `top_p: 0` is a client error, not the model's 500;
- SIGTERM with `--exit-timeout-secs` exits within that bound even with a
  request in flight that never ends (before: the Python worker's own 30 s
  came after it).

Every byte goes to 127.0.0.1; every wait is bounded.
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import sys
import time

import pytest

from trtis_harness import EXAMPLES, TrtisServer, rss_mib, running_server

LIMIT = 1 << 20  # the server's --http-max-input-size


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    repo = (tmp_path_factory.mktemp("growth") / "models").resolve()
    repo.mkdir(parents=True)
    for name in ("text_generator", "text_embedding"):
        shutil.copytree(EXAMPLES / name, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
    return repo


@pytest.fixture(scope="module")
def server(repo):
    yield from running_server(
        repo,
        ["--python", sys.executable, "--http-max-input-size", str(LIMIT)],
        name="growth server",
    )


def raw_post(server, path: str, doc, rcvbuf: int | None = None) -> socket.socket:
    """Sends a JSON POST on a fresh socket (its receive buffer `rcvbuf`
    bytes when given) and returns the socket, nothing read."""
    body = json.dumps(doc).encode()
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(30)
    s.connect((server.host, server.port))
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    s.sendall(head + body)
    return s


def read_response(s: socket.socket) -> tuple[int, bytes]:
    """Status and body of one Content-Length response."""
    f = s.makefile("rb")
    status = int(f.readline().split()[1])
    length = 0
    while (line := f.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        if name.lower() == "content-length":
            length = int(value)
    return status, f.read(length)


@pytest.mark.parametrize(
    "path,doc",
    [
        ("/v1/completions", {"model": "text_generator", "prompt": "The", "max_tokens": 1000000000, "stream": True}),
        ("/v2/models/text_generator/generate_stream", {"text_input": "The", "max_tokens": 1000000000, "stream": True}),
    ],
)
def test_a_stream_nobody_reads_stops_growing(server, path, doc):
    s = raw_post(server, path, doc, rcvbuf=4096)
    try:
        # The buffers between the model and the socket fill, then the model
        # waits: the server's memory levels off.
        time.sleep(4)
        start = rss_mib(server.proc.pid)
        time.sleep(8)
        grown = rss_mib(server.proc.pid) - start
        assert grown < 12, f"RSS grew {grown:.1f} MiB in 8 s with the client not reading"
    finally:
        s.close()
    # The request ends with its client, and the server serves on.
    status, body = read_response(
        raw_post(server, "/v2/models/text_generator/generate", {"text_input": "The", "max_tokens": 3})
    )
    assert status == 200, body


def test_a_runaway_generate_is_answered_at_its_second_response(server):
    s = raw_post(
        server, "/v2/models/text_generator/generate", {"text_input": "The", "max_tokens": 1000000000, "stream": True}
    )
    try:
        status, body = read_response(s)
    finally:
        s.close()
    assert "generate expects model to produce exactly 1 response" in body.decode(), body


def test_v1_refuses_a_body_declared_too_large_before_reading_it(server):
    s = socket.create_connection((server.host, server.port), timeout=10)
    try:
        s.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {LIMIT + 1}\r\n\r\n".encode()
        )
        # No body is sent: the answer comes from the declared length alone.
        status, body = read_response(s)
    finally:
        s.close()
    assert status == 413, body
    assert json.loads(body)["error"]["code"] == "content_too_large"


def post(server, path, doc):
    return server.post_json(path, doc)


def test_embeddings_take_openais_2048_inputs_in_one_call(server):
    texts = [f"text number {i}" for i in range(2048)]
    status, _, body = post(server, "/v1/embeddings", {"model": "text_embedding", "input": texts})
    assert status == 200, body[:300]
    data = json.loads(body)["data"]
    assert [d["index"] for d in data] == list(range(2048))
    assert all(len(d["embedding"]) == 64 for d in data)
    # The same text alone gets the same vector as inside the big call.
    status, _, one = post(server, "/v1/embeddings", {"model": "text_embedding", "input": texts[77]})
    assert json.loads(one)["data"][0]["embedding"] == data[77]["embedding"]
    status, _, body = post(server, "/v1/embeddings", {"model": "text_embedding", "input": texts + ["one more"]})
    assert status == 400, body
    assert "at most 2048" in json.loads(body)["error"]["message"]


def test_an_embeddings_text_over_the_bound_is_refused(server):
    status, _, body = post(server, "/v1/embeddings", {"model": "text_embedding", "input": ["x" * (300 * 1024)]})
    assert status == 400, body[:300]
    assert json.loads(body)["error"]["param"] == "input"


def test_top_p_zero_is_the_clients_mistake(server):
    status, _, body = post(server, "/v1/completions", {"model": "text_generator", "prompt": "The", "top_p": 0})
    assert status == 400, body
    assert json.loads(body)["error"]["param"] == "top_p"


def test_sigterm_ends_within_the_exit_timeout_with_a_request_that_never_ends(repo):
    exit_timeout = 3
    server = TrtisServer(
        repo,
        ["--python", sys.executable, "--exit-timeout-secs", str(exit_timeout)],
        name="sigterm server",
    )
    server.start()
    try:
        # A token every minute: the request is in flight for the whole test.
        s = raw_post(
            server,
            "/v2/models/text_generator/generate_stream",
            {"text_input": "The", "max_tokens": 5, "token_delay_ms": 60000},
        )
        time.sleep(1)
        t0 = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        server.proc.wait(timeout=60)
        took = time.monotonic() - t0
        s.close()
    finally:
        server.kill()
    # The drain's exit timeout, a second to close connections, at least a
    # second to unload, and slack for a loaded machine.
    assert took < exit_timeout + 6, f"exited {took:.1f} s after SIGTERM"


def test_repeated_hostile_grpc_bursts_leave_rss_flat(tmp_path):
    """Item 11: after a burst of hostile gRPC traffic (oversized and
    malformed messages, 100k-parameter maps) the server keeps what the first
    burst took (allocator arenas, buffers) but later bursts add nothing."""
    import test_hostile as th
    from trtis_harness import build_shm_repository

    h = th.Hostile(build_shm_repository(tmp_path / "models"))
    try:
        after = []
        for _ in range(3):
            th.grpc_burst(h)
            time.sleep(1)
            after.append(rss_mib(h.server.proc.pid))
        assert h.server.alive()
        assert after[-1] - after[0] < 16, f"RSS after each burst: {after}"
    finally:
        h.close()
