"""Triton's python_backend examples, served by trtis from
examples/python_backend/ (our own model files, with Triton's model names,
tensor names, datatypes and shapes).

One `trtis serve` on that repository; each test does what the example's
client script in Triton's python_backend does (add_sub/client.py,
decoupled/repeat_client.py, decoupled/square_client.py, bls/sync_client.py,
bls/async_client.py, bls_decoupled/sync_client.py and async_client.py,
auto_complete/client.py, custom_metrics/client.py, pytorch/client.py) and
asserts what that script checks, through tritonclient: HTTP, gRPC streaming
for the decoupled models, a plain GET of /metrics. Plus
`trtis validate-config` on the repository.

Run: TRTIS_BIN=$PWD/target/debug/trtis .venv/bin/python -m pytest tests/python/test_python_examples.py -q
"""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from trtis_harness import (
    REPO_ROOT,
    StreamCollector,
    running_server_with_metrics,
    stop_stream_within,
    stream_client_for,
    trtis_bin,
    wait_for,
)

REPO = (REPO_ROOT / "examples" / "python_backend").resolve()

MODELS = [
    "add_sub",
    "pytorch",
    "repeat_int32",
    "square_int32",
    "bls_sync",
    "bls_async",
    "bls_decoupled_sync",
    "bls_decoupled_async",
    "nobatch_auto_complete",
    "batch_auto_complete",
    "custom_metrics",
]


@pytest.fixture(scope="module")
def server():
    # The workers import the models from the source tree: keep it free of
    # __pycache__ directories.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONDONTWRITEBYTECODE", "1")
        yield from running_server_with_metrics(
            REPO, args=["--python", sys.executable], name="python_backend examples server"
        )


@pytest.fixture(scope="module")
def client(server):
    c = httpclient.InferenceServerClient(server.url, connection_timeout=10.0, network_timeout=30.0)
    yield c
    c.close()


@pytest.fixture
def grpc_client(server):
    """A fresh client per test (tritonclient allows one stream per client)."""
    yield from stream_client_for(server)


def http_inputs(**arrays):
    inputs = []
    for name, array in arrays.items():
        datatype = "BYTES" if array.dtype == np.object_ else {
            np.float32: "FP32", np.int32: "INT32"
        }[array.dtype.type]
        i = httpclient.InferInput(name, list(array.shape), datatype)
        i.set_data_from_numpy(array)
        inputs.append(i)
    return inputs


def requested(*names):
    return [httpclient.InferRequestedOutput(n) for n in names]


def random_pair(shape=(4,)):
    rng = np.random.default_rng()
    return rng.random(shape, dtype=np.float32), rng.random(shape, dtype=np.float32)


def check_add_sub(client, model, shape=(4,)):
    """What add_sub/client.py (and pytorch/client.py, custom_metrics/client.py)
    checks: OUTPUT0 is the sum, OUTPUT1 the difference."""
    a, b = random_pair(shape)
    result = client.infer(
        model, http_inputs(INPUT0=a, INPUT1=b), request_id="1", outputs=requested("OUTPUT0", "OUTPUT1")
    )
    out0, out1 = result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1")
    assert out0.dtype == np.float32 and out1.dtype == np.float32
    assert list(out0.shape) == list(shape) and list(out1.shape) == list(shape)
    assert np.allclose(a + b, out0), (a, b, out0)
    assert np.allclose(a - b, out1), (a, b, out1)


# -- the repository ------------------------------------------------------------


def test_validate_config_passes():
    """`trtis validate-config` finds nothing wrong with the repository (the
    two auto-complete models, with no config.pbtxt, are warnings only)."""
    out = subprocess.run(
        [str(trtis_bin()), "validate-config", str(REPO)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    assert f"OK: {len(MODELS)} models checked, 0 errors" in text, text


def test_every_example_model_is_ready(client):
    index = {m["name"]: m for m in client.get_model_repository_index()}
    assert sorted(index) == sorted(MODELS)
    for name in MODELS:
        assert index[name].get("state") == "READY", index[name]
        assert client.is_model_ready(name), name


# -- add_sub/client.py, pytorch/client.py ---------------------------------------


def test_add_sub(client):
    check_add_sub(client, "add_sub")


def test_pytorch_stand_in(client):
    """The numpy stand-in for Triton's torch model: same I/O, same answers."""
    config = client.get_model_config("pytorch")
    assert [(i["name"], i["data_type"], i["dims"]) for i in config["input"]] == [
        ("INPUT0", "TYPE_FP32", [4]),
        ("INPUT1", "TYPE_FP32", [4]),
    ]
    check_add_sub(client, "pytorch")


# -- decoupled/repeat_client.py --------------------------------------------------


def test_repeat_int32(grpc_client):
    """One request IN=[4,2,0,1], DELAY=[1,2,3,4], WAIT=5 on a gRPC stream:
    4 responses, all for request "0", in order, OUT = IN[i], IDX = i."""
    in_values = [4, 2, 0, 1]
    collector = StreamCollector()
    grpc_client.start_stream(callback=collector)
    inputs = [
        grpcclient.InferInput("IN", [4], "INT32"),
        grpcclient.InferInput("DELAY", [4], "UINT32"),
        grpcclient.InferInput("WAIT", [1], "UINT32"),
    ]
    inputs[0].set_data_from_numpy(np.array(in_values, dtype=np.int32))
    inputs[1].set_data_from_numpy(np.array([1, 2, 3, 4], dtype=np.uint32))
    inputs[2].set_data_from_numpy(np.array([5], dtype=np.uint32))
    outputs = [grpcclient.InferRequestedOutput("OUT"), grpcclient.InferRequestedOutput("IDX")]
    grpc_client.async_stream_infer("repeat_int32", inputs, request_id="0", outputs=outputs)
    items = collector.wait_for(len(in_values))
    # The stream ends only once the request is complete: nothing may follow
    # (the flag-only final response is not sent unless asked for).
    stop_stream_within(grpc_client)
    assert len(collector.items) == len(in_values), collector.items
    for i, (result, error) in enumerate(items):
        assert error is None, error
        assert result.get_response().id == "0"
        out, idx = result.as_numpy("OUT"), result.as_numpy("IDX")
        assert out.dtype == np.int32 and idx.dtype == np.uint32
        assert np.array_equal(out, np.array([in_values[i]], dtype=np.int32)), (i, out)
        assert np.array_equal(idx, np.array([i], dtype=np.uint32)), (i, idx)


def test_repeat_int32_one_instance_serves_the_next_request_while_streaming(grpc_client):
    """The example's point (its README): execute() returns after WAIT, so
    the single instance takes request "b" while "a" is still sending; each
    request's own responses stay in order."""
    collector = StreamCollector()
    grpc_client.start_stream(callback=collector)

    def send(rid, values, delays):
        inputs = [
            grpcclient.InferInput("IN", [len(values)], "INT32"),
            grpcclient.InferInput("DELAY", [len(delays)], "UINT32"),
            grpcclient.InferInput("WAIT", [1], "UINT32"),
        ]
        inputs[0].set_data_from_numpy(np.array(values, dtype=np.int32))
        inputs[1].set_data_from_numpy(np.array(delays, dtype=np.uint32))
        inputs[2].set_data_from_numpy(np.array([0], dtype=np.uint32))
        grpc_client.async_stream_infer("repeat_int32", inputs, request_id=rid)

    send("a", [10, 11, 12], [0, 300, 300])
    send("b", [7], [0])
    collector.wait_for(4)
    stop_stream_within(grpc_client)
    order = []
    for result, error in collector.items:
        assert error is None, error
        order.append((result.get_response().id, int(result.as_numpy("OUT")[0]), int(result.as_numpy("IDX")[0])))
    assert [o for o in order if o[0] == "a"] == [("a", 10, 0), ("a", 11, 1), ("a", 12, 2)], order
    assert [o for o in order if o[0] == "b"] == [("b", 7, 0)], order
    assert order.index(("b", 7, 0)) < order.index(("a", 12, 2)), order


# -- decoupled/square_client.py --------------------------------------------------


def test_square_int32(grpc_client):
    """Requests "0".."3" with IN 4, 2, 0, 1 on one stream: IN responses for
    each, every OUT equal to IN, none at all for 0."""
    in_values = [4, 2, 0, 1]
    collector = StreamCollector()
    grpc_client.start_stream(callback=collector)
    for i, n in enumerate(in_values):
        inp = grpcclient.InferInput("IN", [1], "INT32")
        inp.set_data_from_numpy(np.array([n], dtype=np.int32))
        grpc_client.async_stream_infer(
            "square_int32", [inp], request_id=str(i), outputs=[grpcclient.InferRequestedOutput("OUT")]
        )
    collector.wait_for(sum(in_values))
    stop_stream_within(grpc_client)
    by_id: dict[str, list] = {}
    for result, error in collector.items:
        assert error is None, error
        by_id.setdefault(result.get_response().id, []).append(result.as_numpy("OUT"))
    assert "2" not in by_id, "a response for IN=0"
    for i, n in enumerate(in_values):
        if n == 0:
            continue
        got = by_id.get(str(i), [])
        assert len(got) == n, (i, got)
        for out in got:
            assert np.array_equal(out, np.array([n], dtype=np.int32)), (i, out)


def test_decoupled_models_refuse_http(server, client):
    """As Triton: a decoupled model over HTTP is 501."""
    inp = http_inputs(IN=np.array([1], dtype=np.int32))
    with pytest.raises(InferenceServerException) as exc:
        client.infer("square_int32", inp)
    assert exc.value.status() == "501"
    assert exc.value.message() == "HTTP end point doesn't support models with decoupled transaction policy"


# -- bls/sync_client.py, bls/async_client.py -------------------------------------


def test_bls_sync(client):
    """MODEL_NAME add_sub, then pytorch: sum and difference; then
    undefined_model: an error response with Triton's text (the client script
    prints it)."""
    a, b = random_pair()
    outputs = requested("OUTPUT0", "OUTPUT1")
    # As the client script sends it: an object array of the name as bytes;
    # the model passes the element it gets (bytes) to InferenceRequest.
    for target in ("add_sub", "pytorch"):
        name = np.array([target.encode("utf-8")], dtype=np.object_)
        inputs = http_inputs(INPUT0=a, INPUT1=b, MODEL_NAME=name)
        result = client.infer("bls_sync", inputs, request_id="1", outputs=outputs)
        assert np.allclose(a + b, result.as_numpy("OUTPUT0")), target
        assert np.allclose(a - b, result.as_numpy("OUTPUT1")), target

    name = np.array(["undefined_model".encode("utf-8")], dtype=np.object_)
    inputs = http_inputs(INPUT0=a, INPUT1=b, MODEL_NAME=name)
    with pytest.raises(InferenceServerException) as exc:
        client.infer("bls_sync", inputs, request_id="1", outputs=outputs)
    assert exc.value.status() == "500", exc.value
    message = exc.value.message()
    prefix = (
        "Failed to process the request(s) for model 'bls_sync_0_0', message: "
        "TritonModelException: Model undefined_model - Error when running inference: "
        "Failed for execute the inference request. Model 'undefined_model' is not ready."
        "\n\nAt:\n"
    )
    assert message.startswith(prefix), message
    frame = message[len(prefix):]
    assert re.fullmatch(
        r"  " + re.escape(str(REPO / "bls_sync" / "1" / "model.py")) + r"\(\d+\): execute\n", frame
    ), message


def test_bls_async(client):
    """OUTPUT0 from pytorch, OUTPUT1 from add_sub: the sum and the difference."""
    check_add_sub(client, "bls_async")


def test_bls_calls_count_in_the_called_models_statistics(client):
    """A BLS call is a full inference of the called model (facts §7/§10)."""

    def count(model):
        stats = client.get_inference_statistics(model)["model_stats"][0]
        return stats["inference_stats"]["success"]["count"]

    before = (count("add_sub"), count("pytorch"))
    check_add_sub(client, "bls_async")
    assert (count("add_sub"), count("pytorch")) == (before[0] + 1, before[1] + 1)


# -- bls_decoupled/sync_client.py, async_client.py ----------------------------


@pytest.mark.parametrize("model, factor", [("bls_decoupled_sync", 1), ("bls_decoupled_async", 2)])
def test_bls_decoupled(client, model, factor):
    """IN 4, 2, 0, 1 (one request each): SUM = IN * IN, twice that for the
    async model (two calls to square_int32)."""
    for n in (4, 2, 0, 1):
        data = np.array([n], dtype=np.int32)
        result = client.infer(model, http_inputs(IN=data), request_id="1", outputs=requested("SUM"))
        total = result.as_numpy("SUM")
        assert list(total.shape) == [1]
        assert np.allclose(factor * data * data, total), (model, n, total)


# -- auto_complete/client.py ---------------------------------------------------


@pytest.mark.parametrize("model, max_batch_size", [("nobatch_auto_complete", 0), ("batch_auto_complete", 4)])
def test_auto_complete(client, model, max_batch_size):
    """No config.pbtxt: GET config shows what auto_complete_config() set."""
    config = client.get_model_config(model)
    assert config["name"] == model
    assert config["backend"] == "python"
    assert config["max_batch_size"] == max_batch_size
    want_inputs = [("INPUT0", "TYPE_FP32", [4]), ("INPUT1", "TYPE_FP32", [4])]
    want_outputs = [("OUTPUT0", "TYPE_FP32", [4]), ("OUTPUT1", "TYPE_FP32", [4])]
    assert [(i["name"], i["data_type"], i["dims"]) for i in config["input"]] == want_inputs
    assert [(o["name"], o["data_type"], o["dims"]) for o in config["output"]] == want_outputs
    for entry in config["input"] + config["output"]:
        assert all(type(d) is int for d in entry["dims"]), entry  # numbers, not strings
    if max_batch_size:
        assert "dynamic_batching" in config, config
        assert config["dynamic_batching"].get("preferred_batch_size") == [4], config
        assert config["instance_group"][0]["name"] == model, config
    else:
        assert "dynamic_batching" not in config, config
    # And it runs (the README's "the client then sends an inference request").
    check_add_sub(client, model, shape=(2, 4) if max_batch_size else (4,))


# -- custom_metrics/client.py --------------------------------------------------


def test_custom_metrics(server, client):
    """Sum and difference, then the counter's HELP, TYPE and sample lines on
    /metrics; the running total goes to the server log through Logger."""
    config = client.get_model_config("custom_metrics")
    assert [g["count"] for g in config["instance_group"]] == [3], config
    check_add_sub(client, "custom_metrics")
    text = urllib.request.urlopen(server.metrics_url, timeout=10).read().decode()
    for pattern in (
        "# HELP requests_process_latency_ns Cumulative time spent processing requests",
        "# TYPE requests_process_latency_ns counter",
        'requests_process_latency_ns{model="custom_metrics",version="1"}',
    ):
        assert pattern in text, f"{pattern!r} not in /metrics:\n{text}"
    samples = re.findall(r'^requests_process_latency_ns\{model="custom_metrics",version="1"\} (\S+)$', text, re.M)
    assert len(samples) == 1, samples
    assert float(samples[0]) > 0, samples
    logged = wait_for(
        lambda: [l for l in server.log_lines() if "Cumulative requests processing latency: " in l]
    )
    assert logged, server.log_tail()
    assert "model.py:" in logged[-1], logged[-1]
