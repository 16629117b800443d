"""Triton's `generate` extension against a real `trtis serve`:
`POST /v2/models/{m}/generate` and `.../generate_stream` (Server-Sent
Events), as Triton's docs/protocol/extension_generate.md and
qa/L0_http/generate_endpoint_test.py describe them (facts sheet
triton-2026-facts.md section D).

Models: the example repository's `text_generator` (a decoupled Python
model of our own, NOT a real language model: a word bigram model) and
`simple` (ONNX, one response); the cancellation fixture
`cancel_stream_loop` (decoupled, writes how it ended to a marker file).

Covered: inputs and parameters from the flat JSON; one response as the
body, Triton's error for none or several; SSE events as they come
(`curl -N`), no [DONE]; the same tokens as tritonclient's gRPC stream;
Triton's error shapes before and during a stream; /infer's 501 for a
decoupled model; a client that hangs up mid-stream cancels the request
(the model sees it) and the pending gauge returns to 0.

Run: TRTIS_BIN=$PWD/target/debug/trtis .venv/bin/python -m pytest \
     tests/python/test_generate.py -q
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time

import pytest

from trtis_harness import (
    EXAMPLES,
    REPO_ROOT,
    metric,
    running_server_with_metrics,
    stream_client_for,
    streamed_text,
    wait_for,
)

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "python"


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    repo = (tmp_path_factory.mktemp("generate") / "models").resolve()
    repo.mkdir(parents=True)
    for name in ("text_generator", "simple"):
        shutil.copytree(EXAMPLES / name, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(
        FIXTURES / "cancel_stream_loop", repo / "cancel_stream_loop", ignore=shutil.ignore_patterns("__pycache__")
    )
    return repo


@pytest.fixture(scope="module")
def server(repo):
    yield from running_server_with_metrics(repo, args=["--python", sys.executable], name="generate server")


@pytest.fixture
def grpc(server):
    yield from stream_client_for(server)


def events(body: bytes) -> list[dict]:
    """The SSE events of a body: each `data: <json>` line's object."""
    text = body.decode()
    assert text == "" or text.endswith("\n\n"), text
    out = []
    for block in text.split("\n\n"):
        if not block:
            continue
        assert block.startswith("data: "), block
        assert "\n" not in block, block
        out.append(json.loads(block[len("data: ") :]))
    return out


PROMPT = {"text_input": "The client sends", "max_tokens": 12, "temperature": 0}


def test_generate_one_response_is_the_body(server):
    status, headers, body = server.post_json("/v2/models/text_generator/generate", {**PROMPT, "id": "r1"})
    assert status == 200, body
    assert headers["content-type"] == "application/json"
    doc = json.loads(body)
    # Keys in alphabetical order, model_version a string, one-element
    # outputs as scalars.
    assert list(doc) == sorted(doc)
    assert doc["id"] == "r1" and doc["model_name"] == "text_generator" and doc["model_version"] == "1"
    assert isinstance(doc["text_output"], str) and len(doc["text_output"].split()) >= 10
    assert doc["num_input_tokens"] == 3 and doc["num_output_tokens"] == 12


def test_generate_on_a_model_with_one_response(server):
    a = list(range(16))
    status, _, body = server.post_json(
        "/v2/models/simple/versions/1/generate", {"INPUT0": a, "INPUT1": [1] * 16}
    )
    assert status == 200, body
    doc = json.loads(body)
    assert doc["OUTPUT0"] == [x + 1 for x in a] and doc["OUTPUT1"] == [x - 1 for x in a]
    assert doc["model_version"] == "1" and "id" not in doc
    # generate_stream on it: one event.
    status, headers, body = server.post_json(
        "/v2/models/simple/generate_stream", {"INPUT0": a, "INPUT1": [1] * 16}
    )
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    (event,) = events(body)
    assert event["OUTPUT0"] == doc["OUTPUT0"]


def test_generate_with_several_or_no_responses_is_tritons_error(server):
    expected = (
        "generate expects model to produce exactly 1 response, use generate stream for model "
        "that generates various number of responses"
    )
    for doc in ({**PROMPT, "stream": True}, {**PROMPT, "stream": True, "max_tokens": 0}):
        status, _, body = server.post_json("/v2/models/text_generator/generate", doc)
        # Triton: the status was set by the first response (a success).
        assert status == 200, body
        assert json.loads(body) == {"error": expected}


def test_generate_stream_sends_each_response_as_an_event(server):
    whole = json.loads(server.post_json("/v2/models/text_generator/generate", PROMPT)[2])["text_output"]
    curl = subprocess.run(
        [
            "curl", "-sN", "-D", "-", "-X", "POST",
            f"http://{server.url}/v2/models/text_generator/generate_stream",
            "-d", json.dumps({**PROMPT, "stream": True}),
        ],
        capture_output=True, timeout=60, check=True,
    )  # fmt: skip
    head, _, body = curl.stdout.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    assert b"content-type: text/event-stream; charset=utf-8" in head.lower()
    got = events(body)
    assert b"[DONE]" not in body
    assert len(got) == 12
    assert "".join(e["text_output"] for e in got) == whole
    assert [e["num_output_tokens"] for e in got] == [1] * 12


def test_generate_stream_gives_the_tokens_grpc_streaming_gives(server, grpc):
    status, _, body = server.post_json("/v2/models/text_generator/generate_stream", {**PROMPT, "stream": True})
    assert status == 200
    sse = [e["text_output"] for e in events(body)]
    params = {"max_tokens": 12, "temperature": 0, "stream": True}
    tokens = streamed_text(grpc, "text_generator", PROMPT["text_input"], params, 12)
    assert tokens == sse


def test_errors_before_the_model_runs_are_plain_json(server):
    cases = [
        ("/v2/models/text_generator/generate_stream", b"{not json", 400, "failed to parse the request JSON"),
        ("/v2/models/text_generator/generate_stream", b"[1]", 400, "failed to parse the request JSON"),
        ("/v2/models/nope/generate_stream", b"{}", 404, "nope"),
        ("/v2/models/text_generator/generate_stream", b'{"max_tokens": 1}', 400, "text_input"),
        ("/v2/models/text_generator/generate", b'{"text_input": "a", "stop": ["x"]}', 400,
         "parameter 'stop' has invalid type. It should be either 'int', 'bool', or 'string'."),
        ("/v2/models/text_generator/generate", b'{"id": 3}', 400, "Unable to parse 'id'"),
        ("/v2/models/text_generator/generate", b'{"text_input": {"a": 1}}', 400, "for input 'text_input'"),
        # Triton's words for a value of the wrong JSON type, and for a
        # fault inside the nested `parameters` object.
        ("/v2/models/text_generator/generate", b'{"text_input": 123}', 400,
         "attempt to access JSON non-string as string"),
        ("/v2/models/text_generator/generate", b'{"text_input": {"a": 1}}', 400,
         "attempt to access JSON non-string as string"),
        ("/v2/models/text_generator/generate", b'{"text_input": "a", "parameters": {"nested": {"x": 1}}}', 400,
         "Converting keyword: 'parameters': parameter 'nested' has invalid type."),
        ("/v2/models/text_generator/generate", b'{"text_input": "a", "text_input": "b"}', 400,
         "input 'text_input' already exists in request"),
    ]  # fmt: skip
    for path, body, status, fragment in cases:
        got, headers, data = server.request("POST", path, body, {"Content-Type": "application/json"})
        assert got == status, (path, body, got, data)
        assert headers["content-type"] == "application/json", (path, body)
        assert fragment in json.loads(data)["error"], (path, body, data)


def test_a_models_error_is_an_event_with_its_status(server):
    status, headers, body = server.post_json(
        "/v2/models/text_generator/generate_stream", {"text_input": "a", "bogus": 1}
    )
    assert status == 500
    assert headers["content-type"].startswith("text/event-stream")
    assert events(body) == [{"error": "text_generator does not support the parameter(s): bogus"}]


def test_infer_still_refuses_decoupled_models(server):
    status, _, body = server.post_json(
        "/v2/models/text_generator/infer",
        {"inputs": [{"name": "text_input", "shape": [1], "datatype": "BYTES", "data": ["a"]}]},
    )
    assert status == 501
    assert json.loads(body)["error"] == "HTTP end point doesn't support models with decoupled transaction policy"


def open_stream(server, path: str, doc: dict, events_wanted: int) -> socket.socket:
    """Sends a streaming request on a raw socket and reads until
    `events_wanted` events arrived; returns the still open socket."""
    body = json.dumps(doc).encode()
    sock = socket.create_connection((server.host, server.port), timeout=30)
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n".encode() + body
    )
    seen = b""
    while seen.count(b"data: ") < events_wanted:
        chunk = sock.recv(65536)
        assert chunk, seen
        seen += chunk
    assert seen.startswith(b"HTTP/1.1 200"), seen
    return sock


def test_a_client_hanging_up_cancels_the_request(server, tmp_path):
    marker = tmp_path / "marker"
    sock = open_stream(
        server,
        "/v2/models/cancel_stream_loop/generate_stream",
        {"IN": 0, "marker": str(marker)},
        3,
    )
    sock.close()
    assert wait_for(lambda: marker.exists(), timeout=30)
    outcome, sent = marker.read_text().split()
    assert outcome == "cancelled", marker.read_text()
    assert int(sent) < 200
    assert wait_for(lambda: metric(server, "nv_inference_pending_request_count", model="cancel_stream_loop") == 0, timeout=30)


def test_a_client_hanging_up_stops_the_text_generator(server):
    sock = open_stream(
        server,
        "/v2/models/text_generator/generate_stream",
        {"text_input": "The", "max_tokens": 100000, "stream": True, "token_delay_ms": 20},
        3,
    )
    sock.close()
    assert wait_for(
        lambda: any("text_generator: request cancelled after" in line for line in server.log_lines()),
        timeout=30,
    )
    assert wait_for(lambda: metric(server, "nv_inference_pending_request_count", model="text_generator") == 0, timeout=30)
