"""Ensemble models (platform "ensemble", `ensemble_scheduling`) through
Triton's own clients, over HTTP and gRPC: metadata and config of the
ensemble, inference through a DAG with a fan-out, gRPC streaming, the error
of a failing step, per-model statistics, and a composing model unloaded and
loaded again (explicit model control).

The repository (the same as tests/ensemble.rs) has three identity models,
which copy input i to output i, and the ensemble `ens`:

    IN --a--> t1 --b--> OUT_B
    t1, IN --pair--> OUT_C0, OUT_C1

`a` is INT32 [-1], `b` INT32 [4] (so a 5-element input passes `ens` and `a`
but is refused by `b`), `pair` two inputs / two outputs [-1].

Run: .venv/bin/python -m pytest tests/python/test_ensemble.py -q
"""

from __future__ import annotations


import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from trtis_harness import StreamCollector as Collector
from trtis_harness import (
    assert_client_error,
    assert_grpc_error,
    grpc_client_for,
    running_server,
    stop_stream_within,
    stream_client_for,
)

PROTOCOLS = ["http", "grpc"]
OUTPUTS = ["OUT_B", "OUT_C0", "OUT_C1"]
COMPOSING = ["a", "b", "pair"]
STREAM_TIMEOUT_S = 15.0

# The error of step `b` for a [1,5] input (Triton core infer_request.cc, the
# shape check of the composing model's request), prefixed with the ensemble
# as Triton's ensemble scheduler prefixes a step's error.
STEP_B_SHAPE_ERROR = (
    "in ensemble 'ens', [request id: <id_unknown>] unexpected shape for input 'INPUT0' for model 'b'. "
    "Expected [-1,4], got [1,5]."
)


# --------------------------------------------------------------------------
# Model repository
# --------------------------------------------------------------------------


def _single(dims: str) -> str:
    return f"""backend: "identity"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ {dims} ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ {dims} ] }} ]
dynamic_batching {{ }}
"""


PAIR = """backend: "identity"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] },
        { name: "INPUT1" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] },
         { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ -1 ] } ]
"""

ENS = """platform: "ensemble"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUT_B" data_type: TYPE_INT32 dims: [ -1 ] },
         { name: "OUT_C0" data_type: TYPE_INT32 dims: [ -1 ] },
         { name: "OUT_C1" data_type: TYPE_INT32 dims: [ -1 ] } ]
ensemble_scheduling {
  step [
    { model_name: "a" model_version: -1
      input_map { key: "INPUT0" value: "IN" }
      output_map { key: "OUTPUT0" value: "t1" } },
    { model_name: "b" model_version: -1
      input_map { key: "INPUT0" value: "t1" }
      output_map { key: "OUTPUT0" value: "OUT_B" } },
    { model_name: "pair" model_version: 1
      input_map { key: "INPUT0" value: "t1" }
      input_map { key: "INPUT1" value: "IN" }
      output_map { key: "OUTPUT0" value: "OUT_C0" }
      output_map { key: "OUTPUT1" value: "OUT_C1" } }
  ]
}
"""

# The steps as the config must report them: (model_name, model_version,
# input_map, output_map).
EXPECTED_STEPS = [
    ("a", -1, {"INPUT0": "IN"}, {"OUTPUT0": "t1"}),
    ("b", -1, {"INPUT0": "t1"}, {"OUTPUT0": "OUT_B"}),
    ("pair", 1, {"INPUT0": "t1", "INPUT1": "IN"}, {"OUTPUT0": "OUT_C0", "OUTPUT1": "OUT_C1"}),
]


def build_ensemble_repository(repo):
    repo.mkdir(parents=True, exist_ok=True)
    for name, config in (("a", _single("-1")), ("b", _single("4")), ("pair", PAIR), ("ens", ENS)):
        model = repo / name
        (model / "1").mkdir(parents=True)
        (model / "1" / ".keep").write_text("")
        (model / "config.pbtxt").write_text(config)
    return repo


@pytest.fixture(scope="module")
def ens_repo(tmp_path_factory):
    return build_ensemble_repository(tmp_path_factory.mktemp("trtis_ens") / "models")


@pytest.fixture(scope="module")
def ens_server(ens_repo):
    yield from running_server(ens_repo, name="ensemble server")


@pytest.fixture(scope="module")
def explicit_server(ens_repo):
    """The same repository, explicit model control, all four loaded at start."""
    args = ["--model-control-mode", "explicit"]
    for name in COMPOSING + ["ens"]:
        args += ["--load-model", name]
    yield from running_server(ens_repo, args, name="ensemble explicit server")


def _clients(server):
    h = httpclient.InferenceServerClient(server.url, connection_timeout=10.0, network_timeout=30.0)
    g = grpc_client_for(server)
    return {"http": h, "grpc": g}


@pytest.fixture(scope="module")
def clients(ens_server):
    cs = _clients(ens_server)
    yield cs
    for c in cs.values():
        c.close()


@pytest.fixture(scope="module")
def explicit_clients(explicit_server):
    cs = _clients(explicit_server)
    yield cs
    for c in cs.values():
        c.close()


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------


def _module(protocol: str):
    return httpclient if protocol == "http" else grpcclient


def ens_inputs(protocol: str, values):
    data = np.array([values], dtype=np.int32)
    inp = _module(protocol).InferInput("IN", list(data.shape), "INT32")
    inp.set_data_from_numpy(data)
    return [inp]


def infer_ens(client, protocol: str, values, outputs=None, **kw):
    requested = None
    if outputs is not None:
        requested = [_module(protocol).InferRequestedOutput(n) for n in outputs]
    if protocol == "grpc":
        kw.setdefault("client_timeout", 30.0)
    return client.infer("ens", ens_inputs(protocol, values), outputs=requested, **kw)


def output_names(result, protocol: str) -> list[str]:
    if protocol == "http":
        return [o["name"] for o in result.get_response()["outputs"]]
    return [o.name for o in result.get_response().outputs]


def check_all_outputs(result, protocol: str, values) -> None:
    want = np.array([values], dtype=np.int32)
    assert sorted(output_names(result, protocol)) == sorted(OUTPUTS)
    for name in OUTPUTS:
        got = result.as_numpy(name)
        assert got is not None, f"no {name} in the response"
        assert got.dtype == np.int32, f"{name}: dtype {got.dtype}"
        assert list(got.shape) == [1, len(values)], f"{name}: shape {list(got.shape)}"
        np.testing.assert_array_equal(got, want, err_msg=name)


def success_count(client, protocol: str, model: str) -> int:
    """inference_stats.success.count of version 1 of `model`."""
    if protocol == "http":
        entries = [e for e in client.get_inference_statistics(model)["model_stats"] if e["name"] == model]
        assert len(entries) == 1, entries
        return int(entries[0]["inference_stats"]["success"]["count"])
    resp = client.get_inference_statistics(model)
    entries = [e for e in resp.model_stats if e.name == model]
    assert len(entries) == 1, resp
    return int(entries[0].inference_stats.success.count)


def fail_count(client, protocol: str, model: str) -> int:
    if protocol == "http":
        entries = [e for e in client.get_inference_statistics(model)["model_stats"] if e["name"] == model]
        assert len(entries) == 1, entries
        return int(entries[0]["inference_stats"]["fail"]["count"])
    resp = client.get_inference_statistics(model)
    entries = [e for e in resp.model_stats if e.name == model]
    assert len(entries) == 1, resp
    return int(entries[0].inference_stats.fail.count)


def expect_step_error(protocol: str, exc) -> str:
    if protocol == "http":
        msg = assert_client_error(exc, 400)
    else:
        msg = assert_grpc_error(exc, "INVALID_ARGUMENT")
    assert msg.startswith(STEP_B_SHAPE_ERROR), f"error message {msg!r}"
    return msg


# --------------------------------------------------------------------------
# Metadata and config
# --------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_ensemble_metadata(clients, protocol):
    md = clients[protocol].get_model_metadata("ens", as_json=True) if protocol == "grpc" else (
        clients[protocol].get_model_metadata("ens")
    )
    assert md["name"] == "ens"
    assert md["platform"] == "ensemble"
    assert md.get("versions") == ["1"]
    inputs = [(t["name"], t["datatype"], [int(d) for d in t["shape"]]) for t in md["inputs"]]
    assert inputs == [("IN", "INT32", [-1, -1])]
    outputs = [(t["name"], t["datatype"], [int(d) for d in t["shape"]]) for t in md["outputs"]]
    assert outputs == [(n, "INT32", [-1, -1]) for n in OUTPUTS]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_ensemble_config_has_steps(clients, protocol):
    if protocol == "http":
        cfg = clients["http"].get_model_config("ens")
    else:
        cfg = clients["grpc"].get_model_config("ens", as_json=True)["config"]
    assert cfg["name"] == "ens"
    assert cfg["platform"] == "ensemble"
    assert int(cfg.get("max_batch_size", 0)) == 8
    steps = cfg["ensemble_scheduling"]["step"]
    got = [
        (s["model_name"], int(s["model_version"]), dict(s["input_map"]), dict(s["output_map"]))
        for s in steps
    ]
    assert got == EXPECTED_STEPS


# --------------------------------------------------------------------------
# Inference
# --------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_ensemble_infer_all_outputs(clients, protocol):
    for i in range(3):
        values = [i, 10 + i, 20 + i, 30 + i]
        result = infer_ens(clients[protocol], protocol, values)
        check_all_outputs(result, protocol, values)
        resp = result.get_response()
        name = resp["model_name"] if protocol == "http" else resp.model_name
        assert name == "ens"


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("only", OUTPUTS)
def test_ensemble_infer_one_requested_output(clients, protocol, only):
    values = [7, -8, 9, -10]
    result = infer_ens(clients[protocol], protocol, values, outputs=[only])
    assert output_names(result, protocol) == [only]
    np.testing.assert_array_equal(result.as_numpy(only), np.array([values], dtype=np.int32))
    for other in OUTPUTS:
        if other != only:
            assert result.as_numpy(other) is None, f"{other} returned though only {only} was asked"


# --------------------------------------------------------------------------
# gRPC streaming
# --------------------------------------------------------------------------


@pytest.fixture
def stream_client(ens_server):
    """A fresh client per test (tritonclient allows one stream per client)."""
    yield from stream_client_for(ens_server)


def test_grpc_stream_ensemble_in_order(stream_client):
    collector = Collector()
    stream_client.start_stream(callback=collector)
    sent = []
    for i in range(8):
        rid = f"s{i}"
        values = [i, i * 3, -i, 100 + i]
        stream_client.async_stream_infer("ens", ens_inputs("grpc", values), request_id=rid)
        sent.append((rid, values))
    items = collector.wait_for(len(sent))
    for (result, error), (rid, values) in zip(items, sent):
        assert error is None, f"{rid}: {error}"
        assert result.get_response().id == rid, (
            f"responses out of order: {[r.get_response().id if r else None for r, _ in items]}"
        )
        assert result.get_response().model_name == "ens"
        check_all_outputs(result, "grpc", values)
    stop_stream_within(stream_client)
    assert len(collector.items) == len(sent)


def test_grpc_stream_step_error_then_stream_continues(stream_client):
    """A failing step fails only its request: its stream response carries the
    step's error (no status code, tritonclient builds it from
    `error_message`; the request id is the client's), the next ones succeed."""
    collector = Collector()
    stream_client.start_stream(callback=collector)
    stream_client.async_stream_infer("ens", ens_inputs("grpc", [1, 2, 3, 4]), request_id="ok-1")
    stream_client.async_stream_infer("ens", ens_inputs("grpc", [1, 2, 3, 4, 5]), request_id="bad")
    stream_client.async_stream_infer("ens", ens_inputs("grpc", [5, 6, 7, 8]), request_id="ok-2")
    items = collector.wait_for(3)

    result, error = items[0]
    assert error is None, error
    check_all_outputs(result, "grpc", [1, 2, 3, 4])

    result, error = items[1]
    assert result is None
    assert error is not None
    assert error.status() is None
    assert "unexpected shape for input 'INPUT0' for model 'b'. Expected [-1,4], got [1,5]." in (
        error.message()
    ), error.message()

    result, error = items[2]
    assert error is None, error
    check_all_outputs(result, "grpc", [5, 6, 7, 8])
    stop_stream_within(stream_client)


# --------------------------------------------------------------------------
# A failing step
# --------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_step_error_fails_request_then_next_succeeds(clients, protocol):
    client = clients[protocol]
    with pytest.raises(InferenceServerException) as e:
        infer_ens(client, protocol, [1, 2, 3, 4, 5])
    expect_step_error(protocol, e.value)
    # The server and the ensemble go on.
    check_all_outputs(infer_ens(client, protocol, [4, 3, 2, 1]), protocol, [4, 3, 2, 1])


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_step_error_counted_as_ensemble_failure(clients, protocol):
    client = clients[protocol]
    before = fail_count(client, protocol, "ens")
    with pytest.raises(InferenceServerException):
        infer_ens(client, protocol, [1, 2, 3, 4, 5])
    assert fail_count(client, protocol, "ens") == before + 1


# --------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_statistics_count_ensemble_and_composing_models(clients, protocol):
    client = clients[protocol]
    n = 5
    models = ["ens"] + COMPOSING
    before = {m: success_count(client, protocol, m) for m in models}
    for i in range(n):
        infer_ens(client, protocol, [i, i + 1, i + 2, i + 3])
    after = {m: success_count(client, protocol, m) for m in models}
    deltas = {m: after[m] - before[m] for m in models}
    assert deltas == {m: n for m in models}, f"success.count deltas {deltas} (before {before})"


# --------------------------------------------------------------------------
# Explicit model control: a composing model unloaded and loaded again
# --------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_unload_composing_model_then_load_again(explicit_clients, protocol):
    client = explicit_clients[protocol]
    values = [11, 12, 13, 14]
    check_all_outputs(infer_ens(client, protocol, values), protocol, values)
    try:
        client.unload_model("b")
        with pytest.raises(InferenceServerException) as e:
            infer_ens(client, protocol, values)
        assert "'b'" in e.value.message(), (
            f"the error should name the composing model 'b': {e.value.message()!r}"
        )
    finally:
        client.load_model("b")
    check_all_outputs(infer_ens(client, protocol, values), protocol, values)
