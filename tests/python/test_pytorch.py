"""The PyTorch backend through Triton's own clients: TorchScript fixtures
(tests/fixtures/pytorch, made by make_models.py there with torch 2.13.0)
served by a real `trtis serve`, over HTTP and gRPC, values exact.

Covered: binding by `<name>__<index>`, by forward() argument names and by
config order; tuple and list outputs; a Dict[str, Tensor] input; every
numeric datatype; List[str] inputs and outputs (batched with reshape);
dynamic batching; the sequence batcher with a START control and implicit
state; an ensemble mixing the ONNX preprocessing model and the TorchScript
classifier (logits within 1e-3 of the ONNX classifier's); warmup; weight
sharing and the libtorch parameters; statistics and metrics; a model that
raises fails its own request; configs Triton refuses are refused at load
with Triton's words, by `serve` and `validate-config` alike.

Skipped when the PyTorch backend library (libtrtis_torch.so, `cargo build
-p trtis-torch`) is not beside the binary, unless TRTIS_REQUIRE_TORCH=1
(scripts/test.sh sets it).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from trtis_harness import (
    EXAMPLES,
    REPO_ROOT,
    grpc_client_for,
    running_server_with_metrics,
    trtis_bin,
)

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "pytorch"

ADD_SUB_INDEX = """name: "add_sub_index"
platform: "pytorch_libtorch"
max_batch_size: 8
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "INPUT__1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT__1" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
dynamic_batching { max_queue_delay_microseconds: 100000 preferred_batch_size: [ 4 ] }
model_warmup [ { name: "zeros" batch_size: 2 inputs [
  { key: "INPUT__0" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } },
  { key: "INPUT__1" value: { data_type: TYPE_FP32 dims: [ 4 ] random_data: true } } ] } ]
"""

# Config order INPUT1, INPUT0: only binding by forward()'s names gets the
# difference's sign right; outputs by config order.
ADD_SUB_NAME = """name: "add_sub_name"
backend: "pytorch"
max_batch_size: 8
input [ { name: "INPUT1" data_type: TYPE_INT32 dims: [ 4 ] }, { name: "INPUT0" data_type: TYPE_INT32 dims: [ 4 ] } ]
output [ { name: "SUM" data_type: TYPE_INT32 dims: [ 4 ] }, { name: "DIFF" data_type: TYPE_INT32 dims: [ 4 ] } ]
"""

# Names that are neither forward()'s nor indexed: config order.
ADD_SUB_ORDER = """name: "add_sub_order"
backend: "pytorch"
input [ { name: "first" data_type: TYPE_INT64 dims: [ 3 ] }, { name: "second" data_type: TYPE_INT64 dims: [ 3 ] } ]
output [ { name: "sum" data_type: TYPE_INT64 dims: [ 3 ] }, { name: "difference" data_type: TYPE_INT64 dims: [ 3 ] } ]
"""

SHARED = """name: "add_sub_shared"
platform: "pytorch_libtorch"
default_model_filename: "addsub.pt"
max_batch_size: 8
input [ { name: "INPUT__0" data_type: TYPE_FP64 dims: [ 2 ] }, { name: "INPUT__1" data_type: TYPE_FP64 dims: [ 2 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP64 dims: [ 2 ] }, { name: "OUTPUT__1" data_type: TYPE_FP64 dims: [ 2 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
parameters [
  { key: "ENABLE_WEIGHT_SHARING" value: { string_value: "true" } },
  { key: "INFERENCE_MODE" value: { string_value: "false" } },
  { key: "DISABLE_OPTIMIZED_EXECUTION" value: { string_value: "true" } },
  { key: "ENABLE_JIT_EXECUTOR" value: { string_value: "false" } },
  { key: "ENABLE_JIT_PROFILING" value: { string_value: "false" } },
  { key: "ENABLE_TENSOR_FUSER" value: { string_value: "false" } },
  { key: "DISABLE_CUDNN" value: { string_value: "true" } },
  { key: "ENABLE_CACHE_CLEANING" value: { string_value: "true" } },
  { key: "INTRA_OP_THREAD_COUNT" value: { string_value: "1" } },
  { key: "INTER_OP_THREAD_COUNT" value: { string_value: "1" } }
]
"""

LIST_OUT = """name: "list_out"
backend: "pytorch"
max_batch_size: 4
input [ { name: "x" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT__1" data_type: TYPE_FP32 dims: [ -1 ] }, { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""

DICT_IN = """name: "dict_in"
backend: "pytorch"
input [ { name: "b" data_type: TYPE_FP32 dims: [ 3 ] }, { name: "a" data_type: TYPE_FP32 dims: [ 3 ] } ]
output [ { name: "product" data_type: TYPE_FP32 dims: [ 3 ] } ]
"""

STRINGS = """name: "strings"
backend: "pytorch"
input [ { name: "x" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "upper" data_type: TYPE_STRING dims: [ -1 ] } ]
"""

STRING_LEN = """name: "string_len"
backend: "pytorch"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_STRING dims: [ 1 ] reshape: { shape: [ ] } } ]
output [ { name: "OUTPUT__0" data_type: TYPE_INT64 dims: [ 1 ] reshape: { shape: [ ] } } ]
dynamic_batching { max_queue_delay_microseconds: 100000 preferred_batch_size: [ 3 ] }
"""

ACCUMULATOR = """name: "accumulator"
backend: "pytorch"
max_batch_size: 2
input [ { name: "INPUT__0" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  control_input [ { name: "START__1" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ]
  state [ { input_name: "INPUT_STATE__2" output_name: "OUTPUT_STATE__1" data_type: TYPE_INT32 dims: [ 1 ] } ]
}
"""

FAIL = """name: "fail"
backend: "pytorch"
input [ { name: "x" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""

# The model returns FP32; the config says INT32.
WRONG_TYPE = """name: "wrong_type"
backend: "pytorch"
input [ { name: "x" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "y" data_type: TYPE_INT32 dims: [ -1 ] } ]
"""

NUMERIC = ["BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32", "FP64"]
NP = {
    "BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32, "UINT64": np.uint64,
    "INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "INT64": np.int64,
    "FP16": np.float16, "FP32": np.float32, "FP64": np.float64,
}


def identity_config(dt: str) -> str:
    return f"""name: "identity_{dt.lower()}"
backend: "pytorch"
max_batch_size: 4
input [ {{ name: "INPUT__0" data_type: TYPE_{dt} dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT__0" data_type: TYPE_{dt} dims: [ -1 ] }} ]
"""


def add(repo, name, config, fixture, file="model.pt"):
    (repo / name / "1").mkdir(parents=True)
    shutil.copy(FIXTURES / fixture, repo / name / "1" / file)
    (repo / name / "config.pbtxt").write_text(config)


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    repo = tmp_path_factory.mktemp("pytorch") / "models"
    add(repo, "add_sub_index", ADD_SUB_INDEX, "add_sub.pt")
    add(repo, "add_sub_name", ADD_SUB_NAME, "add_sub.pt")
    add(repo, "add_sub_order", ADD_SUB_ORDER, "add_sub.pt")
    add(repo, "add_sub_shared", SHARED, "add_sub.pt", file="addsub.pt")
    add(repo, "list_out", LIST_OUT, "list_out.pt")
    add(repo, "dict_in", DICT_IN, "dict_in.pt")
    add(repo, "strings", STRINGS, "strings.pt")
    add(repo, "string_len", STRING_LEN, "string_len.pt")
    add(repo, "accumulator", ACCUMULATOR, "accumulator.pt")
    add(repo, "fail", FAIL, "fail.pt")
    add(repo, "wrong_type", WRONG_TYPE, "identity.pt")
    for dt in NUMERIC:
        add(repo, f"identity_{dt.lower()}", identity_config(dt), "identity.pt")
    for name in ["preprocess_inception", "efficientnet_lite0", "efficientnet_lite0_pt",
                 "efficientnet_ensemble", "efficientnet_pt_ensemble"]:
        shutil.copytree(EXAMPLES / name, repo / name)
    return repo


def torch_built() -> bool:
    """Whether the PyTorch backend library was built beside trtis (cargo
    builds it as target/<profile>/libtrtis_torch.so)."""
    if os.environ.get("TRTIS_TORCH_BACKEND"):
        return True
    return (trtis_bin().parent / "libtrtis_torch.so").is_file()


@pytest.fixture(scope="module")
def server(repo):
    if not torch_built():
        if os.environ.get("TRTIS_REQUIRE_TORCH") == "1":
            pytest.fail("the PyTorch backend library was not built (TRTIS_REQUIRE_TORCH=1): cargo build -p trtis-torch")
        pytest.skip("the PyTorch backend library was not built (cargo build -p trtis-torch)")
    yield from running_server_with_metrics(
        repo, args=["--model-control-mode", "explicit", "--load-model", "*"], name="pytorch server"
    )


@pytest.fixture(scope="module")
def http(server):
    c = httpclient.InferenceServerClient(server.url, network_timeout=60.0)
    yield c
    c.close()


@pytest.fixture(scope="module")
def grpc(server):
    c = grpc_client_for(server)
    yield c
    c.close()


def infer(client, mod, model, arrays, outputs=None, **kw):
    inputs = []
    for name, (arr, dt) in arrays.items():
        i = mod.InferInput(name, list(arr.shape), dt)
        i.set_data_from_numpy(arr)
        inputs.append(i)
    outs = [mod.InferRequestedOutput(o) for o in outputs] if outputs else None
    return client.infer(model, inputs, outputs=outs, **kw)


@pytest.fixture(params=["http", "grpc"])
def both(request, http, grpc):
    return (http, httpclient) if request.param == "http" else (grpc, grpcclient)


def test_the_models_are_ready_and_report_their_platform(http):
    for name in ["add_sub_index", "add_sub_name", "accumulator", "efficientnet_lite0_pt", "identity_uint64"]:
        assert http.is_model_ready(name), name
    meta = http.get_model_metadata("add_sub_name")
    assert meta["platform"] == "pytorch_libtorch"
    config = http.get_model_config("add_sub_name")
    assert config["backend"] == "pytorch"
    assert config["default_model_filename"] == "model.pt"


def test_inputs_bind_by_index_by_forward_names_and_by_order(both):
    client, mod = both
    a = np.array([[1, 2, 3, 4], [5, 6, 7, 8]], dtype=np.float32)
    b = np.array([[10, 20, 30, 40], [50, 60, 70, 80]], dtype=np.float32)
    r = infer(client, mod, "add_sub_index", {"INPUT__0": (a, "FP32"), "INPUT__1": (b, "FP32")})
    np.testing.assert_array_equal(r.as_numpy("OUTPUT__0"), a + b)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT__1"), a - b)

    x0 = np.array([[1, 2, 3, 4]], dtype=np.int32)
    x1 = np.array([[100, 200, 300, 400]], dtype=np.int32)
    r = infer(client, mod, "add_sub_name", {"INPUT0": (x0, "INT32"), "INPUT1": (x1, "INT32")})
    np.testing.assert_array_equal(r.as_numpy("SUM"), x0 + x1)
    np.testing.assert_array_equal(r.as_numpy("DIFF"), x0 - x1)

    f = np.array([7, 8, 9], dtype=np.int64)
    s = np.array([1, 1, 2], dtype=np.int64)
    r = infer(client, mod, "add_sub_order", {"first": (f, "INT64"), "second": (s, "INT64")})
    np.testing.assert_array_equal(r.as_numpy("sum"), f + s)
    np.testing.assert_array_equal(r.as_numpy("difference"), f - s)


def test_list_outputs_map_in_order_and_a_dict_input_gets_every_tensor(both):
    client, mod = both
    x = np.array([[1.5, -2.0, 3.0]], dtype=np.float32)
    r = infer(client, mod, "list_out", {"x": (x, "FP32")})
    np.testing.assert_array_equal(r.as_numpy("OUTPUT__0"), x * 2)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT__1"), x + 1)
    a = np.array([1, 2, 3], dtype=np.float32)
    b = np.array([4, 5, 6], dtype=np.float32)
    r = infer(client, mod, "dict_in", {"a": (a, "FP32"), "b": (b, "FP32")})
    np.testing.assert_array_equal(r.as_numpy("product"), a * b)


@pytest.mark.parametrize("dt", NUMERIC)
def test_every_numeric_datatype_round_trips_exactly(both, dt):
    client, mod = both
    kind = NP[dt]
    if dt == "BOOL":
        x = np.array([[True, False, True]])
    elif np.issubdtype(kind, np.integer):
        info = np.iinfo(kind)
        x = np.array([[info.min, 0, 1, info.max]], dtype=kind)
    else:
        info = np.finfo(kind)
        x = np.array([[info.min, -0.5, 0.0, info.max]], dtype=kind)
    r = infer(client, mod, f"identity_{dt.lower()}", {"INPUT__0": (x, dt)})
    out = r.as_numpy("OUTPUT__0")
    assert out.dtype == x.dtype
    np.testing.assert_array_equal(out, x)


def test_strings_are_lists_of_str(both):
    client, mod = both
    x = np.array(["hello", "Triton", "ok"], dtype=np.object_)
    r = infer(client, mod, "strings", {"x": (x, "BYTES")})
    assert [s.decode() for s in r.as_numpy("upper")] == ["HELLO", "TRITON", "OK"]


def test_batched_strings_are_one_list(server):
    # Three requests of one string each, batched by the dynamic batcher into
    # one List[str]; each gets its own length back.
    words = ["a", "four", "eleven char"]
    results = {}

    def one(word):
        c = httpclient.InferenceServerClient(server.url, network_timeout=60.0)
        r = infer(c, httpclient, "string_len", {"x": (np.array([[word]], dtype=np.object_), "BYTES")})
        results[word] = r.as_numpy("OUTPUT__0")
        c.close()

    threads = [threading.Thread(target=one, args=(w,)) for w in words]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for w in words:
        np.testing.assert_array_equal(results[w], np.array([[len(w)]], dtype=np.int64))


def test_dynamic_batching_forms_batches(server, http):
    before = http.get_inference_statistics("add_sub_index")["model_stats"][0]
    errors = []

    def one(k):
        try:
            c = httpclient.InferenceServerClient(server.url, network_timeout=60.0)
            a = np.full((1, 4), k, dtype=np.float32)
            b = np.ones((1, 4), dtype=np.float32)
            r = infer(c, httpclient, "add_sub_index", {"INPUT__0": (a, "FP32"), "INPUT__1": (b, "FP32")})
            np.testing.assert_array_equal(r.as_numpy("OUTPUT__0"), a + b)
            c.close()
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=one, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    after = http.get_inference_statistics("add_sub_index")["model_stats"][0]
    inferences = after["inference_count"] - before["inference_count"]
    executions = after["execution_count"] - before["execution_count"]
    assert inferences == 8
    assert executions < 8, after
    sizes = {b["batch_size"] for b in after["batch_stats"]}
    assert max(sizes) > 1, after["batch_stats"]


def test_sequences_accumulate_in_implicit_state(both):
    client, mod = both
    base = 7000 if mod is httpclient else 8000

    def step(seq, value, start=False, end=False):
        x = np.array([[value]], dtype=np.int32)
        r = infer(client, mod, "accumulator", {"INPUT__0": (x, "INT32")},
                  sequence_id=seq, sequence_start=start, sequence_end=end)
        return int(r.as_numpy("OUTPUT__0")[0][0])

    assert step(base + 1, 5, start=True) == 5
    assert step(base + 2, 100, start=True) == 100
    assert step(base + 1, 6) == 11
    assert step(base + 2, 1) == 101
    assert step(base + 1, -1, end=True) == 10
    assert step(base + 2, 1, end=True) == 102
    # A new sequence on the same id starts from zero.
    assert step(base + 1, 3, start=True, end=True) == 3


def test_ensemble_of_onnx_preprocessing_and_torchscript_classifier(both):
    client, mod = both
    rng = np.random.default_rng(17)
    image = rng.integers(0, 256, size=(2, 224, 224, 3), dtype=np.uint8)
    onnx = infer(client, mod, "efficientnet_ensemble", {"IMAGE": (image, "UINT8")}).as_numpy("CLASSES")
    torch = infer(client, mod, "efficientnet_pt_ensemble", {"IMAGE": (image, "UINT8")}).as_numpy("CLASSES")
    assert torch.shape == (2, 1000)
    assert np.max(np.abs(onnx - torch)) < 1e-3
    np.testing.assert_array_equal(np.argmax(onnx, axis=1), np.argmax(torch, axis=1))


def test_classification_of_the_torchscript_classifier_uses_its_labels(http):
    x = np.zeros((1, 3, 224, 224), dtype=np.float32)
    i = httpclient.InferInput("INPUT__0", [1, 3, 224, 224], "FP32")
    i.set_data_from_numpy(x)
    r = http.infer("efficientnet_lite0_pt", [i], outputs=[httpclient.InferRequestedOutput("OUTPUT__0", class_count=2)])
    top = r.as_numpy("OUTPUT__0")[0]
    assert len(top) == 2
    assert all(len(c.decode().split(":")) == 3 for c in top)


def test_weight_sharing_and_parameters(server, both):
    client, mod = both
    a = np.array([[0.25, 1e300]], dtype=np.float64)
    b = np.array([[0.5, -1e300]], dtype=np.float64)
    r = infer(client, mod, "add_sub_shared", {"INPUT__0": (a, "FP64"), "INPUT__1": (b, "FP64")})
    np.testing.assert_array_equal(r.as_numpy("OUTPUT__0"), a + b)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT__1"), a - b)
    # Two instances, one module: whichever loads second reuses the first's.
    reused = [line for line in server.log_lines() if "Reusing TorchScript model for instance 'add_sub_shared_0_" in line]
    assert len(reused) == 1, server.log_tail()


def test_a_model_that_raises_fails_its_own_request(both):
    client, mod = both
    ok = np.array([1.0, 2.0], dtype=np.float32)
    r = infer(client, mod, "fail", {"x": (ok, "FP32")})
    np.testing.assert_array_equal(r.as_numpy("y"), ok)
    with pytest.raises(InferenceServerException) as e:
        infer(client, mod, "fail", {"x": (np.array([1000.0], dtype=np.float32), "FP32")})
    assert "PyTorch execute failure" in str(e.value)
    assert "fixture failure" in str(e.value)
    # The server and the model live on.
    r = infer(client, mod, "fail", {"x": (ok, "FP32")})
    np.testing.assert_array_equal(r.as_numpy("y"), ok)


def test_an_output_of_another_type_is_tritons_error(both):
    client, mod = both
    with pytest.raises(InferenceServerException) as e:
        infer(client, mod, "wrong_type", {"x": (np.array([1.0], dtype=np.float32), "FP32")})
    assert "configuration expects datatype TYPE_INT32 for output 'y', model provides TYPE_FP32" in str(e.value)


def test_statistics_and_metrics_count_pytorch_models(server, http):
    x0 = np.array([[1, 2, 3, 4]], dtype=np.int32)
    infer(http, httpclient, "add_sub_name", {"INPUT0": (x0, "INT32"), "INPUT1": (x0, "INT32")})
    stats = http.get_inference_statistics("add_sub_name")["model_stats"][0]
    assert stats["inference_count"] >= 1
    assert stats["inference_stats"]["compute_infer"]["count"] >= 1
    assert stats["inference_stats"]["compute_input"]["count"] >= 1
    assert server.metrics_url, "metrics port"
    text = urllib.request.urlopen(server.metrics_url, timeout=10).read().decode()
    assert re.search(r'nv_inference_count\{model="add_sub_name",version="1"\} [1-9]', text), text[:2000]


BAD = {
    # forward() takes 2 tensors.
    "too_many_inputs": ("""backend: "pytorch"
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 1 ] }, { name: "INPUT__1" data_type: TYPE_FP32 dims: [ 1 ] }, { name: "INPUT__2" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 1 ] } ]""", "add_sub.pt",
        "configuration expects 3 inputs, model provides 2"),
    # forward() returns 2 values.
    "output_past_the_end": ("""backend: "pytorch"
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 1 ] }, { name: "INPUT__1" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUTPUT__2" data_type: TYPE_FP32 dims: [ 1 ] } ]""", "add_sub.pt",
        "refers to an output index which doesn't exist. This model has 2 outputs"),
    "bad_parameter": ("""backend: "pytorch"
input [ { name: "x" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 1 ] } ]
parameters [ { key: "INFERENCE_MODE" value: { string_value: "maybe" } } ]""", "identity.pt",
        "failed to convert 'maybe' to boolean"),
    # Triton's pytorch backend takes no string correlation IDs.
    "string_corrid": ("""backend: "pytorch"
max_batch_size: 1
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 1 ] } ]
sequence_batching { control_input [ { name: "CORRID__1" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING } ] } ] }""",
        "identity.pt", "input 'CORRID__1' type 'TYPE_STRING' is not supported by PyTorch."),
    "batched_2d_strings": ("""backend: "pytorch"
max_batch_size: 4
input [ { name: "x" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "y" data_type: TYPE_STRING dims: [ -1 ] } ]""", "strings.pt",
        "Triton only supports 1 dimensional List of String as input for 'x'"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_configs_triton_refuses_are_refused_by_serve_and_validate_config(http, repo, name):
    config, fixture, message = BAD[name]
    # Into the explicit-mode server's repository, then loaded by the API.
    add(repo, name, f'name: "{name}"\n' + config, fixture)
    with pytest.raises(InferenceServerException) as e:
        http.load_model(name)
    assert message in str(e.value), str(e.value)
    out = subprocess.run([str(trtis_bin()), "validate-config", str(repo / name)],
                         capture_output=True, text=True, check=False)
    assert out.returncode != 0
    assert message in out.stdout + out.stderr, out.stdout + out.stderr


def test_a_kind_gpu_instance_runs_on_cuda_or_says_why_not(server, tmp_path):
    # On a machine with a (simulated) GPU, a KIND_GPU TorchScript model is
    # loaded on CUDA; this build's libtorch has no CUDA (the CPU-only
    # install of scripts/setup.sh), so the load fails saying how to get it,
    # rather than running on the CPU. Without an instance group the model
    # gets KIND_CPU: this installation's libtorch cannot run on the GPU.
    from trtis_harness import running_server

    repo = tmp_path / "models"
    for name in ("efficientnet_lite0_pt", "auto_pt"):
        shutil.copytree(EXAMPLES / "efficientnet_lite0_pt", repo / name)
    gpu = repo / "efficientnet_lite0_pt" / "config.pbtxt"
    gpu.write_text(gpu.read_text().replace("kind: KIND_CPU", "kind: KIND_GPU"))
    auto = repo / "auto_pt" / "config.pbtxt"
    auto.write_text(re.sub(r"instance_group \[.*?\]\n", "", auto.read_text(), flags=re.S)
                    .replace('name: "efficientnet_lite0_pt"', 'name: "auto_pt"'))
    for srv in running_server(repo, ["--model-control-mode", "explicit"], name="one-GPU server",
                              env={"TRTIS_GPU_COUNT": "1"}):
        client = httpclient.InferenceServerClient(srv.url)
        with pytest.raises(InferenceServerException) as e:
            client.load_model("efficientnet_lite0_pt")
        message = str(e.value)
        assert "is placed on GPU 0 (KIND_GPU), but the libtorch of this PyTorch backend sees 0 CUDA device(s)" in message, message
        assert "TRTIS_TORCH_CUDA=1" in message and "use KIND_CPU" in message, message
        assert not client.is_model_ready("efficientnet_lite0_pt")
        client.load_model("auto_pt")
        assert client.get_model_config("auto_pt")["instance_group"][0]["kind"] == "KIND_CPU"
