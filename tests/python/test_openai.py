"""The OpenAI-compatible API against a real `trtis serve`, through the
official `openai` Python client (PyPI): `/v1/models`, `/v1/completions` and
`/v1/chat/completions` streamed and not, `/v1/embeddings`, on the HTTP port
and on a port of its own (`--openai-port`).

Models: the example repository's `text_generator` (a decoupled Python
model of our own, NOT a real language model: a word bigram model; opted in
by its `openai_*` config parameters, with a chat template) and
`text_embedding` (feature hashing, not a learned model); `simple` (not
opted in).

Covered: the same text streamed and not, and the same tokens as
tritonclient's gRPC stream; usage from the model's token counts;
max_tokens, stop, temperature, seed and echo reaching the model; the chat
template; bad input in OpenAI's error shape (malformed JSON, unknown
model, a model that did not opt in, n > 1, unknown fields, a template that
refuses the messages); a client that disconnects mid-stream cancels the
request and the pending gauge returns to 0; a wrong opt-in (`openai_*`
parameters) found alike by validate-config and serve.

Run: TRTIS_BIN=$PWD/target/debug/trtis .venv/bin/python -m pytest \
     tests/python/test_openai.py -q
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import socket
import subprocess
import sys

import numpy as np
import openai
import pytest

from trtis_harness import (
    EXAMPLES,
    free_port,
    metric,
    running_server_with_metrics,
    stream_client_for,
    streamed_text,
    trtis_bin,
    wait_for,
)


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    repo = (tmp_path_factory.mktemp("openai") / "models").resolve()
    repo.mkdir(parents=True)
    for name in ("text_generator", "text_embedding", "simple"):
        shutil.copytree(EXAMPLES / name, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
    return repo


@pytest.fixture(scope="module")
def server(repo):
    yield from running_server_with_metrics(repo, args=["--python", sys.executable], name="openai server")


@pytest.fixture(scope="module")
def client(server):
    with openai.OpenAI(base_url=f"http://{server.url}/v1", api_key="unused", max_retries=0, timeout=60) as c:
        yield c


@pytest.fixture
def grpc(server):
    yield from stream_client_for(server)


PROMPT = "The client sends"


def test_models_lists_the_models_that_opted_in(client):
    ids = sorted(m.id for m in client.models.list())
    assert ids == ["text_embedding", "text_generator"]
    m = client.models.retrieve("text_generator")
    assert m.id == "text_generator" and m.object == "model" and m.owned_by == "trtis"
    with pytest.raises(openai.NotFoundError) as e:
        client.models.retrieve("simple")
    assert e.value.body["code"] == "model_not_found"


def test_completion_streamed_and_not_is_the_same_text(client):
    whole = client.completions.create(model="text_generator", prompt=PROMPT, max_tokens=10, temperature=0)
    assert whole.object == "text_completion" and whole.id.startswith("cmpl-")
    (choice,) = whole.choices
    assert len(choice.text.split()) >= 9
    assert choice.finish_reason == "length"
    assert (whole.usage.prompt_tokens, whole.usage.completion_tokens, whole.usage.total_tokens) == (3, 10, 13)
    chunks = list(
        client.completions.create(
            model="text_generator",
            prompt=PROMPT,
            max_tokens=10,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == choice.text
    assert len([c for c in chunks if c.choices and c.choices[0].text]) == 10  # a chunk per token
    assert chunks[-2].choices[0].finish_reason == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 10


def test_sampling_parameters_reach_the_model(client):
    def text(**kw):
        return client.completions.create(model="text_generator", prompt=PROMPT, **kw).choices[0].text

    assert len(text(max_tokens=3, temperature=0).split()) == 3
    # Same seed, same text; the sampler differs from greedy decoding.
    a = text(max_tokens=20, temperature=1.5, seed=7)
    assert a == text(max_tokens=20, temperature=1.5, seed=7)
    assert {text(max_tokens=20, temperature=1.5, seed=s) for s in range(5)} != {a}
    # stop: the text ends before the stop string, finish_reason "stop".
    greedy = text(max_tokens=12, temperature=0)
    word = greedy.split()[4]
    r = client.completions.create(model="text_generator", prompt=PROMPT, max_tokens=12, temperature=0, stop=[word])
    assert r.choices[0].text == greedy[: greedy.index(word)]
    assert r.choices[0].finish_reason == "stop"
    # echo: the prompt starts the text.
    assert text(max_tokens=3, temperature=0, echo=True).startswith(PROMPT)


def test_chat_streamed_and_not(client):
    messages = [
        {"role": "system", "content": "You are brief."},
        {"role": "user", "content": "How does the server answer a request?"},
    ]
    r = client.chat.completions.create(model="text_generator", messages=messages, max_tokens=8, temperature=0)
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    msg = r.choices[0].message
    assert msg.role == "assistant" and len(msg.content.split()) >= 7
    # The template's prompt reached the model (its words are counted).
    assert r.usage.prompt_tokens > 20
    chunks = list(
        client.chat.completions.create(
            model="text_generator", messages=messages, max_tokens=8, temperature=0, stream=True
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == msg.content
    assert chunks[-1].choices[0].finish_reason == "length"
    # Text parts are text too; max_completion_tokens wins over max_tokens.
    parts = [{"role": "user", "content": [{"type": "text", "text": "How does the server answer a request?"}]}]
    r2 = client.chat.completions.create(model="text_generator", messages=parts, max_completion_tokens=2)
    assert r2.usage.completion_tokens == 2


def test_streamed_tokens_match_grpc_streaming(client, grpc):
    chunks = client.completions.create(
        model="text_generator", prompt=PROMPT, max_tokens=12, temperature=0, stream=True
    )
    sse = [c.choices[0].text for c in chunks if c.choices and c.choices[0].text]
    params = {"max_tokens": 12, "temperature": 0, "stream": True}
    tokens = streamed_text(grpc, "text_generator", PROMPT, params, 12)
    assert tokens == sse


def test_embeddings(client):
    r = client.embeddings.create(model="text_embedding", input=["the server answers", "the server answered", "zebra"])
    assert [d.index for d in r.data] == [0, 1, 2]
    v = [np.array(d.embedding) for d in r.data]
    assert all(len(x) == 64 and abs(np.linalg.norm(x) - 1) < 1e-5 for x in v)
    assert v[0] @ v[1] > v[0] @ v[2]
    assert r.usage.prompt_tokens == 7
    # base64 (the client's default asks for it and decodes it itself).
    raw = client.embeddings.with_raw_response.create(
        model="text_embedding", input="the server answers", encoding_format="base64"
    )
    b64 = json.loads(raw.text)["data"][0]["embedding"]
    assert np.allclose(np.frombuffer(base64.b64decode(b64), dtype=np.float32), v[0])
    with pytest.raises(openai.BadRequestError, match="64 dimensions"):
        client.embeddings.create(model="text_embedding", input="a", dimensions=32)
    with pytest.raises(openai.BadRequestError, match="token arrays are not supported"):
        client.embeddings.create(model="text_embedding", input=[[1, 2, 3]])


def test_bad_requests_get_openais_error_shape(server, client):
    def bad(status, fragment, **kw):
        err = {400: openai.BadRequestError, 404: openai.NotFoundError}[status]
        with pytest.raises(err) as e:
            kw.setdefault("model", "text_generator")
            kw.setdefault("prompt", PROMPT)
            client.completions.create(**kw)
        assert fragment in e.value.body["message"], e.value.body
        assert e.value.body["type"] == "invalid_request_error"

    bad(404, "The model 'nope' does not exist", model="nope")
    bad(400, "is not served through the OpenAI API", model="simple")
    bad(400, "only n = 1 is supported", n=2)
    bad(400, "Unrecognized request argument supplied: foo", extra_body={"foo": 1})
    bad(400, "batches of prompts are not supported", prompt=["a", "b"])
    bad(400, "suffix is not supported", suffix="x")
    bad(400, "makes embeddings only", model="text_embedding")
    with pytest.raises(openai.BadRequestError, match="not system, user and assistant|takes system, user"):
        client.chat.completions.create(model="text_generator", messages=[{"role": "tool", "content": "x", "tool_call_id": "1"}])
    with pytest.raises(openai.BadRequestError, match="tools and function calls are not supported"):
        client.chat.completions.create(
            model="text_generator",
            messages=[{"role": "user", "content": "x"}],
            tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}],
        )
    # Malformed JSON, over raw HTTP.
    status, _, body = server.request("POST", "/v1/completions", b"{nope", {"Content-Type": "application/json"})
    assert status == 400
    assert "could not parse the JSON body" in json.loads(body)["error"]["message"]


def test_a_client_disconnecting_mid_stream_cancels_the_request(server):
    before = sum("text_generator: request cancelled after" in line for line in server.log_lines())
    # A raw connection, closed after a few chunks; the model would make
    # 100000 words.
    body = json.dumps({"model": "text_generator", "prompt": "The", "max_tokens": 100000, "stream": True}).encode()
    sock = socket.create_connection((server.host, server.port), timeout=30)
    sock.sendall(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    seen = b""
    while seen.count(b"data: ") < 3:
        chunk = sock.recv(65536)
        assert chunk, seen
        seen += chunk
    assert seen.startswith(b"HTTP/1.1 200"), seen
    sock.close()
    assert wait_for(
        lambda: sum("text_generator: request cancelled after" in line for line in server.log_lines()) > before,
        timeout=30,
    )
    assert wait_for(lambda: metric(server, "nv_inference_pending_request_count", model="text_generator") == 0, timeout=30)


def test_the_api_on_a_port_of_its_own(repo):
    port = free_port()
    for server in running_server_with_metrics(
        repo, args=["--python", sys.executable, "--openai-port", str(port)], name="openai port server"
    ):
        with openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0) as c:
            r = c.completions.create(model="text_generator", prompt=PROMPT, max_tokens=2, temperature=0)
            assert r.usage.completion_tokens == 2
        # Not on the HTTP port then.
        status, _, _ = server.request("GET", "/v1/models")
        assert status == 404


def test_validate_config_and_serve_agree_on_a_bad_opt_in(tmp_path):
    repo = tmp_path / "models"
    repo.mkdir()
    cases = {
        "no_such_output": ("openai_text_output", "nope", "openai_text_output names 'nope', which is not an output of the model"),
        "no_template": ("openai_chat_template", "missing.jinja", "cannot read chat template 'missing.jinja'"),
        "bad_key": ("openai_chat_templte", "x", "unknown OpenAI API parameter 'openai_chat_templte'"),
    }  # fmt: skip
    for name, (key, value, _) in cases.items():
        shutil.copytree(EXAMPLES / "text_generator", repo / name, ignore=shutil.ignore_patterns("__pycache__"))
        config = (repo / name / "config.pbtxt").read_text().replace('name: "text_generator"', f'name: "{name}"')
        config = re.sub(rf'parameters {{ key: "{key[:20]}[^"]*".*\n', "", config)
        config += f'parameters {{ key: "{key}" value {{ string_value: "{value}" }} }}\n'
        (repo / name / "config.pbtxt").write_text(config)
    out = subprocess.run([str(trtis_bin()), "validate-config", str(repo)], capture_output=True, text=True)
    assert out.returncode == 1, out.stdout + out.stderr
    for name, (_, _, message) in cases.items():
        assert any(name in line and message in line for line in out.stdout.splitlines()), (name, out.stdout)
    for server in running_server_with_metrics(
        repo, args=["--python", sys.executable, "--exit-on-error=false", "--strict-readiness=false"], name="bad opt-in server"
    ):
        status, _, body = server.post_json("/v2/repository/index", {})
        assert status == 200
        index = {m["name"]: m for m in json.loads(body)}
        for name, (_, _, message) in cases.items():
            assert index[name]["state"] == "UNAVAILABLE", index[name]
            assert message in index[name]["reason"], index[name]
