"""Header forwarding (`--http-header-forward-pattern`,
`--grpc-header-forward-pattern`): headers whose names match the regex, in
any case, reach the model as string request parameters, through
tritonclient's `headers=` over HTTP, unary gRPC and gRPC streaming, and
plain HTTP on the generate routes and the OpenAI API. The probe model
(tests/fixtures/python/probe) answers with the parameters it saw; a copy
of it opts into the OpenAI API (its INFO output as the completion text).

Run: TRTIS_BIN=$PWD/target/debug/trtis .venv/bin/python -m pytest tests/python/test_header_forward.py -q
"""

from __future__ import annotations

import json
import queue
import shutil
import sys

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from trtis_harness import REPO_ROOT, running_server

PROBE = REPO_ROOT / "tests" / "fixtures" / "python" / "probe"
HEADERS = {"X-Forward-User": "alice", "x-forward-team": "infra", "x-other": "no"}
# gRPC metadata keys are lower case (grpcio refuses others).
METADATA = {k.lower(): v for k, v in HEADERS.items()}


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    repo = (tmp_path_factory.mktemp("forward") / "models").resolve()
    repo.mkdir(parents=True)
    shutil.copytree(PROBE, repo / "probe", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(PROBE, repo / "probe_openai", ignore=shutil.ignore_patterns("__pycache__"))
    config = repo / "probe_openai" / "config.pbtxt"
    config.write_text(
        config.read_text().replace('name: "probe"', 'name: "probe_openai"')
        + 'parameters { key: "openai_text_input" value: { string_value: "IN" } }\n'
        + 'parameters { key: "openai_text_output" value: { string_value: "INFO" } }\n'
    )
    return repo


@pytest.fixture(scope="module")
def server(repo):
    yield from running_server(
        repo,
        [
            "--python",
            sys.executable,
            "--http-header-forward-pattern",
            "^x-forward-.*",
            "--grpc-header-forward-pattern",
            "X-FORWARD-(USER|TEAM)",
        ],
        name="forward",
    )


def seen_parameters(result) -> dict:
    return json.loads(json.loads(result.as_numpy("INFO")[0])["parameters"])


def probe_inputs(module):
    inp = module.InferInput("IN", [1], "BYTES")
    inp.set_data_from_numpy(np.array([b"x"], dtype=np.object_))
    return [inp]


def test_http_headers_that_match_reach_the_model(server):
    client = httpclient.InferenceServerClient(server.url)
    result = client.infer(
        "probe",
        probe_inputs(httpclient),
        headers=HEADERS,
        parameters={"x-forward-team": "from the request"},
    )
    params = seen_parameters(result)
    client.close()
    assert params["x-forward-user"] == "alice"
    # A parameter the request sets wins over the header.
    assert params["x-forward-team"] == "from the request"
    assert "x-other" not in params


def test_generate_and_openai_routes_forward_too(server):
    for path in ("/v2/models/probe/generate", "/v2/models/probe/generate_stream"):
        status, _, body = server.post_json(
            path, {"IN": "x", "x-forward-team": "from the request"}, headers=HEADERS
        )
        assert status == 200, body
        text = body.decode()
        doc = json.loads(text[len("data: ") :] if text.startswith("data: ") else text)
        params = json.loads(json.loads(doc["INFO"])["parameters"])
        assert params["x-forward-user"] == "alice"
        assert params["x-forward-team"] == "from the request"
        assert "x-other" not in params
    status, _, body = server.post_json(
        "/v1/completions", {"model": "probe_openai", "prompt": "x", "max_tokens": 3}, headers=HEADERS
    )
    assert status == 200, body
    params = json.loads(json.loads(json.loads(body)["choices"][0]["text"])["parameters"])
    assert params["x-forward-user"] == "alice" and params["x-forward-team"] == "infra"
    # The request's own parameters win.
    assert params["max_tokens"] == 3


def test_grpc_metadata_that_matches_reaches_the_model(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    result = client.infer("probe", probe_inputs(grpcclient), headers=METADATA)
    params = seen_parameters(result)
    client.close()
    assert params["x-forward-user"] == "alice"
    assert params["x-forward-team"] == "infra"
    assert "x-other" not in params
    assert not [k for k in params if k.startswith("grpc-") or k in ("user-agent", "te")]


def test_grpc_stream_metadata_reaches_each_request(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    answers: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)), headers=METADATA)
    for _ in range(2):
        client.async_stream_infer("probe", probe_inputs(grpcclient))
    for _ in range(2):
        result, error = answers.get(timeout=30)
        assert error is None, error
        assert seen_parameters(result)["x-forward-user"] == "alice"
    client.stop_stream()
    client.close()


def test_without_the_flag_no_header_is_forwarded(repo):
    for server in running_server(repo, ["--python", sys.executable], name="no-forward"):
        client = httpclient.InferenceServerClient(server.url)
        params = seen_parameters(client.infer("probe", probe_inputs(httpclient), headers=HEADERS))
        client.close()
        assert not [k for k in params if k.startswith("x-")], params


def test_http_header_values_keep_their_trailing_blanks(server):
    """Triton's HTTP server hands a forwarded header's value on as the
    client sent it (Triton's L0_parameters: `'... a backslash\\ '`); so does
    trtis, request after request on one keep-alive connection."""
    value = 'This is a "quoted" string with a backslash\\ '
    client = httpclient.InferenceServerClient(server.url)
    for n in range(3):
        result = client.infer(
            "probe",
            probe_inputs(httpclient),
            headers={"x-forward-user": value + " " * n, "x-forward-team": "infra\t"},
        )
        params = seen_parameters(result)
        assert params["x-forward-user"] == value + " " * n
        assert params["x-forward-team"] == "infra\t"
        # A header the pattern does not forward is not touched.
        assert "x-other" not in params
    client.close()


def test_pipelined_requests_each_get_their_own_blanks(server):
    """Two requests written at once on one socket (the second read while the
    first is answered): each model call sees its own request's bytes."""
    import socket

    def request(value: str) -> bytes:
        body = json.dumps(
            {"inputs": [{"name": "IN", "datatype": "BYTES", "shape": [1], "data": ["x"]}]}
        ).encode()
        head = (
            "POST /v2/models/probe/infer HTTP/1.1\r\nHost: x\r\n"
            f"x-forward-user: {value}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        return head.encode() + body

    host, port = server.url.rsplit(":", 1)
    users = []
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(request("one ") + request("two  "))
        f = s.makefile("rb")
        for _ in range(2):
            status = f.readline()
            assert status.startswith(b"HTTP/1.1 200"), status
            length = 0
            while (line := f.readline()) not in (b"\r\n", b""):
                name, _, v = line.decode().partition(":")
                if name.lower() == "content-length":
                    length = int(v)
            doc = json.loads(f.read(length))
            info = next(o for o in doc["outputs"] if o["name"] == "INFO")
            users.append(json.loads(json.loads(info["data"][0])["parameters"])["x-forward-user"])
    assert users == ["one ", "two  "]
