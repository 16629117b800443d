"""What Triton's own QA tests (server qa/, v2.51.0) found trtis doing
differently, each held here with our own models and Triton's own clients
against a real `trtis serve`:

- ensembles as Triton's ensemble scheduler runs them: a tensor moving
  between a model without batching and one with gains or loses a batch
  dimension of 1; the ensemble's own input/output `reshape`; labels of the
  step model's output; a step's error prefixed `in ensemble 'E', `; an
  optional input left out (the steps run without it; Triton's identity
  backend answers zeros for an output whose optional input is missing);
- the dynamic batcher batches requests that ask for different outputs;
- Triton's test hooks `TRITONSERVER_DELAY_SCHEDULER` (the batcher holds
  requests until N are queued) and
  `TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC` (non-inference gRPC answers
  delayed).

Run: .venv/bin/python -m pytest tests/python/test_triton_conformance.py -q
"""

from __future__ import annotations

import concurrent.futures
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from trtis_harness import grpc_client_for, running_server

PROTOCOLS = ["http", "grpc"]

# A batching identity model with variable dims (Triton's `nop_TYPE_FP32_-1`).
NOP_BATCH = """backend: "identity"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""

# A non-batching identity model of fixed dims [4].
NOP_NOBATCH = """backend: "identity"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""

# Non-batching ensemble over the batching step: [4] in, [4] out.
ENS_NOBATCH = """platform: "ensemble"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
ensemble_scheduling { step [
  { model_name: "nop_batch" model_version: -1
    input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "t" } },
  { model_name: "nop_batch" model_version: -1
    input_map { key: "INPUT0" value: "t" } output_map { key: "OUTPUT0" value: "OUT" } }
] }
"""

# Batching ensemble over the non-batching step: a batch of 1 is stripped on
# the way in and added back on the way out.
ENS_BATCH = """platform: "ensemble"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [
  { model_name: "nop_nobatch" model_version: -1
    input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "OUT" } }
] }
"""

# An ensemble whose input and output are reshaped: clients see [8], the
# steps [2,4] (Triton's qa_reshape ensembles).
NOP_24 = """backend: "identity"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 2, 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 2, 4 ] } ]
"""
ENS_RESHAPE = """platform: "ensemble"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 8 ] reshape: { shape: [ 2, 4 ] } } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 8 ] reshape: { shape: [ 2, 4 ] } } ]
ensemble_scheduling { step [
  { model_name: "nop_24" model_version: -1
    input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "OUT" } }
] }
"""

# A step model with labels, and an ensemble without a label file.
LABELED = """backend: "identity"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] label_filename: "labels.txt" } ]
"""
ENS_LABELED = """platform: "ensemble"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [
  { model_name: "labeled" model_version: -1
    input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "OUT" } }
] }
"""

# Two optional inputs (Triton's qa identity_2_float32 and its ensemble).
IDENTITY_2 = """backend: "identity"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] optional: true },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] optional: true } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""
ENS_IDENTITY_2 = """platform: "ensemble"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] optional: true },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] optional: true } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [
  { model_name: "identity_2" model_version: -1
    input_map { key: "INPUT0" value: "INPUT0" } input_map { key: "INPUT1" value: "INPUT1" }
    output_map { key: "OUTPUT0" value: "OUTPUT0" } output_map { key: "OUTPUT1" value: "OUTPUT1" } }
] }
"""

# A step that refuses a 5-element input (dims [4]) under a variable ensemble.
ENS_FAILING = """platform: "ensemble"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
ensemble_scheduling { step [
  { model_name: "labeled" model_version: -1
    input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "OUT" } }
] }
"""

# Two outputs, a long queue delay and preferred batch 2: two requests asking
# for different outputs still make one batch of 2, at once.
TWO_OUT = """backend: "identity"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
dynamic_batching { preferred_batch_size: [ 2 ] max_queue_delay_microseconds: 10000000 }
"""

# No queue delay at all: without the hook each request would run alone.
HELD = """backend: "identity"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
parameters { key: "execute_delay_ms" value: { string_value: "200" } }
dynamic_batching { }
"""

# A slow model, to hold shared-memory regions in use.
SLOW = """backend: "identity"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
parameters { key: "execute_delay_ms" value: { string_value: "1500" } }
"""

# A sequence model with four slots on one instance (held by the hook too).
HELD_SEQ = """backend: "identity"
max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
sequence_batching {
  control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] } ] } ]
}
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

# Ragged inputs on the identity backend: each request answered with its own
# tensors (Triton's L0_batcher test_multi_batch_different_shape_allow_ragged).
RAGGED = """backend: "identity"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
dynamic_batching { preferred_batch_size: [ 2 ] max_queue_delay_microseconds: 10000000 }
"""

MODELS = {
    "ragged": RAGGED,
    "slow": SLOW,
    "nop_batch": NOP_BATCH,
    "nop_nobatch": NOP_NOBATCH,
    "ens_nobatch": ENS_NOBATCH,
    "ens_batch": ENS_BATCH,
    "nop_24": NOP_24,
    "ens_reshape": ENS_RESHAPE,
    "labeled": LABELED,
    "ens_labeled": ENS_LABELED,
    "identity_2": IDENTITY_2,
    "ens_identity_2": ENS_IDENTITY_2,
    "ens_failing": ENS_FAILING,
    "two_out": TWO_OUT,
}


def build_repository(repo, models):
    repo.mkdir(parents=True, exist_ok=True)
    for name, config in models.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(config)
    return repo


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = build_repository(tmp_path_factory.mktemp("conformance") / "models", MODELS)
    (repo / "labeled" / "labels.txt").write_text("zero\none\ntwo\nthree\n")
    yield from running_server(repo, ["--allow-client-shm=true"], name="conformance server")


@pytest.fixture(scope="module")
def clients(server):
    cs = {
        "http": httpclient.InferenceServerClient(server.url, network_timeout=30.0),
        "grpc": grpc_client_for(server),
    }
    yield cs
    for c in cs.values():
        c.close()


def module(protocol):
    return httpclient if protocol == "http" else grpcclient


def infer(client, protocol, model, arrays, outputs=None):
    mod = module(protocol)
    inputs = []
    for name, a in arrays.items():
        i = mod.InferInput(name, list(a.shape), "FP32")
        i.set_data_from_numpy(a)
        inputs.append(i)
    requested = None
    if outputs is not None:
        requested = [mod.InferRequestedOutput(n, **kw) for n, kw in outputs.items()]
    return client.infer(model, inputs, outputs=requested)


def output_names(result, protocol):
    if protocol == "http":
        return sorted(o["name"] for o in result.get_response()["outputs"])
    return sorted(o.name for o in result.get_response().outputs)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_non_batching_ensemble_feeds_a_batching_step(clients, protocol):
    x = np.arange(4, dtype=np.float32)
    r = infer(clients[protocol], protocol, "ens_nobatch", {"IN": x})
    np.testing.assert_array_equal(r.as_numpy("OUT"), x)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_batching_ensemble_feeds_a_non_batching_step(clients, protocol):
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    r = infer(clients[protocol], protocol, "ens_batch", {"IN": x})
    np.testing.assert_array_equal(r.as_numpy("OUT"), x)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_ensembles_own_reshape_applies(clients, protocol):
    x = np.arange(16, dtype=np.float32).reshape(2, 8)
    r = infer(clients[protocol], protocol, "ens_reshape", {"IN": x})
    out = r.as_numpy("OUT")
    assert out.shape == (2, 8)
    np.testing.assert_array_equal(out, x)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_classification_through_an_ensemble_has_the_step_models_labels(clients, protocol):
    x = np.array([[0.5, 3.0, 1.0, 2.0]], dtype=np.float32)
    r = infer(clients[protocol], protocol, "ens_labeled", {"IN": x}, {"OUT": {"class_count": 2}})
    got = [v.decode() if isinstance(v, bytes) else v for v in r.as_numpy("OUT").flatten()]
    assert [g.split(":")[1:] for g in got] == [["1", "one"], ["3", "three"]], got


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_step_error_names_the_ensemble(clients, protocol):
    x = np.zeros((1, 5), dtype=np.float32)
    with pytest.raises(InferenceServerException) as e:
        infer(clients[protocol], protocol, "ens_failing", {"IN": x})
    msg = e.value.message()
    assert msg.startswith("in ensemble 'ens_failing', "), msg
    assert "unexpected shape for input 'INPUT0' for model 'labeled'" in msg, msg


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("model", ["identity_2", "ens_identity_2"])
def test_an_optional_input_left_out(clients, protocol, model):
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    r = infer(clients[protocol], protocol, model, {"INPUT1": x})
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), x)
    # Triton's identity backend answers zeros for the missing one.
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), np.zeros((1, 4), np.float32))
    r = infer(clients[protocol], protocol, model, {"INPUT1": x}, {"OUTPUT1": {}})
    assert output_names(r, protocol) == ["OUTPUT1"]


def execution_count(client, model, expect=None):
    """(execution_count, success count) of `model`; with `expect`, polled
    for up to 10 s until it is that (statistics land just after answers)."""
    deadline = time.monotonic() + 10
    while True:
        stats = client.get_inference_statistics(model)["model_stats"][0]
        got = int(stats["execution_count"]), int(stats["inference_stats"]["success"]["count"])
        if expect is None or got == expect or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


def test_requests_asking_for_different_outputs_batch_together(server, clients):
    h = clients["http"]
    x = np.arange(8, dtype=np.float32).reshape(2, 1, 4)
    before = execution_count(h, "two_out")

    def one(i):
        c = httpclient.InferenceServerClient(server.url, network_timeout=30.0)
        try:
            return infer(c, "http", "two_out", {"INPUT0": x[i], "INPUT1": x[1 - i]}, {f"OUTPUT{i}": {}})
        finally:
            c.close()

    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = list(pool.map(one, range(2), timeout=30))
    # One batch of 2 (the preferred size), not two waiting out 10 s each.
    assert time.monotonic() - t0 < 6.0
    np.testing.assert_array_equal(results[0].as_numpy("OUTPUT0"), x[0])
    assert results[0].as_numpy("OUTPUT1") is None
    np.testing.assert_array_equal(results[1].as_numpy("OUTPUT1"), x[0])
    assert results[1].as_numpy("OUTPUT0") is None
    after = execution_count(h, "two_out", (before[0] + 1, before[1] + 2))
    assert (after[0] - before[0], after[1] - before[1]) == (1, 2)


def test_a_ragged_batch_on_the_identity_backend(server, clients):
    h = clients["http"]
    before = execution_count(h, "ragged")

    def one(n):
        c = httpclient.InferenceServerClient(server.url, network_timeout=30.0)
        try:
            return infer(c, "http", "ragged", {"INPUT0": np.arange(n, dtype=np.float32).reshape(1, n)})
        finally:
            c.close()

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = list(pool.map(one, [16, 8], timeout=30))
    for n, r in zip([16, 8], results):
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), np.arange(n, dtype=np.float32).reshape(1, n))
    # One batch of the two, each request counted.
    after = execution_count(h, "ragged", (before[0] + 1, before[1] + 2))
    assert (after[0] - before[0], after[1] - before[1]) == (1, 2)


@pytest.fixture(scope="module")
def held_server(tmp_path_factory):
    repo = build_repository(
        tmp_path_factory.mktemp("held") / "models", {"held": HELD, "held_seq": HELD_SEQ}
    )
    env = {"TRITONSERVER_DELAY_SCHEDULER": "3", "TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC": "2"}
    yield from running_server(repo, name="test-hook server", env=env)


def test_the_delay_scheduler_hook_holds_the_batcher_until_n_are_queued(held_server):
    url = held_server.url
    x = np.ones((1, 4), dtype=np.float32)

    def one(_):
        c = httpclient.InferenceServerClient(url, network_timeout=30.0)
        try:
            return infer(c, "http", "held", {"INPUT0": x})
        finally:
            c.close()

    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        for r in pool.map(one, range(3), timeout=30):
            np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), x)
    c = httpclient.InferenceServerClient(url)
    # Held until the third arrived, the three ran as one batch.
    assert execution_count(c, "held", (1, 3)) == (1, 3)
    # Released for good: one more request runs alone at once.
    one(0)
    assert execution_count(c, "held", (2, 4)) == (2, 4)
    c.close()


def test_the_delay_scheduler_hook_holds_the_sequence_batcher_too(held_server):
    url = held_server.url
    x = np.ones((1, 4), dtype=np.float32)

    def start(seq):
        c = httpclient.InferenceServerClient(url, network_timeout=30.0)
        i = httpclient.InferInput("INPUT0", [1, 4], "FP32")
        i.set_data_from_numpy(x)
        try:
            return c.infer("held_seq", [i], sequence_id=seq, sequence_start=True).as_numpy("OUTPUT0")
        finally:
            c.close()

    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        for out in pool.map(start, [101, 102, 103], timeout=30):
            np.testing.assert_array_equal(out, x)
    c = httpclient.InferenceServerClient(url)
    # The three sequences' first requests waited for each other: one batch.
    assert execution_count(c, "held_seq", (1, 3)) == (1, 3)
    c.close()


def test_the_grpc_response_delay_hook_delays_all_but_inference(held_server):
    g = grpc_client_for(held_server)
    with pytest.raises(InferenceServerException) as e:
        g.is_server_live(client_timeout=0.5)
    assert "Deadline Exceeded" in str(e.value)
    assert g.is_server_live(client_timeout=10.0)
    x = np.ones((1, 4), dtype=np.float32)
    i = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
    i.set_data_from_numpy(x)
    t0 = time.monotonic()
    g.infer("held", [i], client_timeout=10.0)
    # Inference is not delayed (only the model's own 200 ms).
    assert time.monotonic() - t0 < 1.9
    g.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_region_in_use_cannot_be_unregistered(server, clients, protocol, shm_regions):
    import tritonclient.utils.shared_memory as shm

    c = clients[protocol]
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    handle, key = shm_regions.create(f"in_{protocol}", x.nbytes)
    shm.set_shared_memory_region(handle, [x])
    name = f"in_use_{protocol}"
    c.register_system_shared_memory(name, key, x.nbytes)

    def run():
        mod = module(protocol)
        client = (
            httpclient.InferenceServerClient(server.url, network_timeout=30.0)
            if protocol == "http"
            else grpc_client_for(server)
        )
        i = mod.InferInput("INPUT0", [1, 4], "FP32")
        i.set_shared_memory(name, x.nbytes)
        try:
            return client.infer("slow", [i]).as_numpy("OUTPUT0")
        finally:
            client.close()

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        answer = pool.submit(run)
        time.sleep(0.5)
        with pytest.raises(InferenceServerException) as e:
            c.unregister_system_shared_memory(name)
        assert f"Cannot unregister shared memory region '{name}', it is currently in use." in str(e.value)
        with pytest.raises(InferenceServerException) as e:
            c.unregister_system_shared_memory()
        assert "Failed to unregister the following system shared memory regions: " in str(e.value)
        assert f"{name} ," in str(e.value)
        np.testing.assert_array_equal(answer.result(timeout=30), x)
    # Answered: the region is free again.
    c.unregister_system_shared_memory(name)
    status = c.get_system_shared_memory_status()
    names = [r["name"] for r in status] if protocol == "http" else list(status.regions)
    assert name not in names


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_identity_backend_sets_tritons_example_response_parameters(clients, protocol):
    """Triton's identity backend puts param0..param3 on every response
    (L0_backend_identity); over HTTP they are the response's `parameters`,
    over gRPC typed InferParameters."""
    r = infer(clients[protocol], protocol, "nop_batch", {"INPUT0": np.ones((1, 3), np.float32)})
    response = r.get_response()
    if protocol == "http":
        params = response["parameters"]
        got = (params["param0"], params["param1"], params["param2"], params["param3"])
    else:
        p = response.parameters
        got = (p["param0"].string_param, p["param1"].int64_param, p["param2"].bool_param, p["param3"].double_param)
    assert got == ("an example string parameter", 42, False, 123.123)


def test_the_identity_backend_counts_input_bytes_in_a_custom_metric(tmp_path):
    from trtis_harness import metric, running_server_with_metrics

    repo = build_repository(tmp_path / "models", {"counted": NOP_BATCH})
    for server in running_server_with_metrics(repo, name="identity metric"):
        c = httpclient.InferenceServerClient(server.url)
        for _ in range(3):
            infer(c, "http", "counted", {"INPUT0": np.ones((2, 2), np.float32)})
        c.close()
        # 3 requests x 4 FP32 elements.
        assert metric(server, "input_byte_size_counter", model="counted", version="1") == 48


SCALAR_CONFIG = """platform: "onnxruntime_onnx"
max_batch_size: 0
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ DIMS ] } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ DIMS ] } ]
"""


def scalar_model(repo, dims):
    """An ONNX identity over a rank-0 tensor (Triton's onnx_scalar_1dim)."""
    import onnx
    from onnx import TensorProto, helper

    d = repo / "scalar"
    (d / "1").mkdir(parents=True)
    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT"], ["OUTPUT"])],
        "scalar",
        [helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("OUTPUT", TensorProto.FLOAT, [])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(d / "1" / "model.onnx"))
    (d / "config.pbtxt").write_text(SCALAR_CONFIG.replace("DIMS", dims))
    return repo


def test_a_scalar_onnx_tensor_is_served_as_shape_1(tmp_path):
    repo = scalar_model(tmp_path / "models", "1")
    for server in running_server(repo, name="scalar"):
        c = httpclient.InferenceServerClient(server.url)
        i = httpclient.InferInput("INPUT", [1], "FP32")
        i.set_data_from_numpy(np.array([2.5], np.float32))
        np.testing.assert_array_equal(c.infer("scalar", [i]).as_numpy("OUTPUT"), [2.5])
        c.close()


def test_a_scalar_onnx_tensor_with_other_dims_is_refused(tmp_path):
    """Triton refuses to load it (L0_scalar_io); validate-config says so too."""
    import subprocess

    from trtis_harness import trtis_bin

    repo = scalar_model(tmp_path / "models", "2")
    wanted = (
        "unable to load model 'scalar', scalar tensor 'INPUT', should only provide 1 in the model "
        "configuration when the model doesn't support batching. Model configuration provided: [2]."
    )
    check = subprocess.run([str(trtis_bin()), "validate-config", str(repo)], capture_output=True, text=True)
    assert check.returncode == 1, check.stdout + check.stderr
    assert wanted in check.stdout + check.stderr
    from trtis_harness import ServerError, TrtisServer

    server = TrtisServer(repo, name="scalar [2]")
    try:
        with pytest.raises(ServerError) as e:
            server.start()
    finally:
        server.kill()
    assert wanted in str(e.value)
