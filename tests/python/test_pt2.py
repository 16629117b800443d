"""PyTorch 2 AOTInductor packages (`model.pt2`, platform `torch_aoti`) through
Triton's own clients: the fixtures of tests/fixtures/pt2 and the example
EfficientNet-Lite0 package (scripts/make-pt2-models.py, torch 2.13.0, compiled
for AVX2) served by a real `trtis serve`, over HTTP and gRPC.

Covered: ordinal names (INPUT__0, OUTPUT__1) and Triton's forward-based names
(ARGS[0][1], KWARGS[scale], RESULT[sum]); a dynamic batch dimension (batch 1
too) and the dynamic batcher; ten datatypes; the sequence batcher with
implicit state; warmup; weight sharing; an ensemble of the ONNX preprocessing
and the package classifier (logits within 1e-3 of ONNX's); `trtis infer` on
coffee.jpg; `gen-config`; request shapes the compiled code does not take are
refused, not run; configs and packages that cannot work are refused at load
with a reason, by `serve` and `validate-config` alike (a package for another
torch version, for CUDA, without the model, needing a missing library).

Skipped when the PyTorch backend library is not built, unless
TRTIS_REQUIRE_TORCH=1 (scripts/test.sh sets it).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import zipfile

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from test_pytorch import both, grpc, http, infer, torch_built  # noqa: F401  (fixtures)
from trtis_harness import EXAMPLES, REPO_ROOT, running_server_with_metrics, trtis_bin

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "pt2"
IMAGES = REPO_ROOT.parent / "shared" / "models" / "images"

ADD_SUB = """name: "add_sub"
platform: "torch_aoti"
max_batch_size: 8
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "INPUT__1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT__1" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
dynamic_batching { max_queue_delay_microseconds: 100000 preferred_batch_size: [ 4 ] }
model_warmup [ { name: "zeros" batch_size: 2 inputs [
  { key: "INPUT__0" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } },
  { key: "INPUT__1" value: { data_type: TYPE_FP32 dims: [ 4 ] random_data: true } } ] } ]
"""

# No platform: `backend: "pytorch"` and only model.pt2 in the version folder
# (Triton's core resolves it to torch_aoti), forward-based names, no batching:
# dimension 0 is the package's dynamic batch, any size the package takes.
ADD_SUB_NAMES = """name: "add_sub_names"
backend: "pytorch"
input [ { name: "ARGS[1]" data_type: TYPE_FP32 dims: [ -1, 4 ] }, { name: "ARGS[0]" data_type: TYPE_FP32 dims: [ -1, 4 ] } ]
output [ { name: "RESULT[1]" data_type: TYPE_FP32 dims: [ -1, 4 ] } ]
"""

NESTED = """name: "nested"
platform: "torch_aoti"
input [ { name: "KWARGS[scale]" data_type: TYPE_FP32 dims: [ 3 ] },
        { name: "ARGS[0][1]" data_type: TYPE_FP32 dims: [ 3 ] },
        { name: "ARGS[0][0]" data_type: TYPE_FP32 dims: [ 3 ] } ]
output [ { name: "RESULT[prod]" data_type: TYPE_FP32 dims: [ 3 ] }, { name: "RESULT[sum]" data_type: TYPE_FP32 dims: [ 3 ] } ]
"""

TYPES = ["BOOL", "UINT8", "INT8", "INT16", "INT32", "INT64", "FP16", "BF16", "FP32", "FP64"]

ALL_TYPES = (
    'name: "all_types"\nplatform: "torch_aoti"\nmax_batch_size: 4\ninput [ '
    + ", ".join(f'{{ name: "INPUT__{i}" data_type: TYPE_{t} dims: [ 3 ] }}' for i, t in enumerate(TYPES))
    + " ]\noutput [ "
    + ", ".join(f'{{ name: "OUTPUT__{i}" data_type: TYPE_{t} dims: [ 3 ] }}' for i, t in enumerate(TYPES))
    + " ]\n"
)

ACCUMULATOR = """name: "accumulator"
platform: "torch_aoti"
max_batch_size: 2
input [ { name: "INPUT__0" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  control_input [ { name: "START__1" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ]
  state [ { input_name: "INPUT_STATE__2" output_name: "OUTPUT_STATE__1" data_type: TYPE_INT32 dims: [ 1 ] } ]
}
"""

SHARED = """name: "add_sub_shared"
platform: "torch_aoti"
max_batch_size: 8
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "INPUT__1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
parameters [
  { key: "ENABLE_WEIGHT_SHARING" value: { string_value: "true" } },
  { key: "INFERENCE_MODE" value: { string_value: "false" } },
  { key: "INTRA_OP_THREAD_COUNT" value: { string_value: "2" } }
]
"""

# The package returns FP32; the config says INT32.
WRONG_TYPE = """name: "wrong_type"
platform: "torch_aoti"
max_batch_size: 8
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "INPUT__1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_INT32 dims: [ 4 ] } ]
"""

ENSEMBLE = """name: "efficientnet_pt2_ensemble"
platform: "ensemble"
max_batch_size: 8
input [ { name: "IMAGE" data_type: TYPE_UINT8 dims: [ 224, 224, 3 ] } ]
output [ { name: "CLASSES" data_type: TYPE_FP32 dims: [ 1000 ] } ]
ensemble_scheduling { step [
  { model_name: "preprocess_inception" model_version: -1
    input_map { key: "IMAGE" value: "IMAGE" } output_map { key: "INPUT" value: "pixels" } },
  { model_name: "efficientnet_lite0_pt2" model_version: -1
    input_map { key: "INPUT__0" value: "pixels" } output_map { key: "OUTPUT__0" value: "CLASSES" } }
] }
"""


def add(repo, name, config, fixture, file="model.pt2"):
    (repo / name / "1").mkdir(parents=True)
    shutil.copy(FIXTURES / fixture, repo / name / "1" / file)
    (repo / name / "config.pbtxt").write_text(config)


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    repo = tmp_path_factory.mktemp("pt2") / "models"
    add(repo, "add_sub", ADD_SUB, "add_sub.pt2")
    add(repo, "add_sub_names", ADD_SUB_NAMES, "add_sub.pt2")
    add(repo, "nested", NESTED, "nested.pt2")
    add(repo, "all_types", ALL_TYPES, "all_types.pt2")
    add(repo, "accumulator", ACCUMULATOR, "accumulator.pt2")
    add(repo, "add_sub_shared", SHARED, "add_sub.pt2")
    add(repo, "wrong_type", WRONG_TYPE, "add_sub.pt2")
    for name in ["preprocess_inception", "efficientnet_lite0", "efficientnet_lite0_pt2", "efficientnet_ensemble"]:
        shutil.copytree(EXAMPLES / name, repo / name)
    (repo / "efficientnet_pt2_ensemble" / "1").mkdir(parents=True)
    (repo / "efficientnet_pt2_ensemble" / "config.pbtxt").write_text(ENSEMBLE)
    return repo


@pytest.fixture(scope="module")
def server(repo):
    if not torch_built():
        import os

        if os.environ.get("TRTIS_REQUIRE_TORCH") == "1":
            pytest.fail("the PyTorch backend library was not built (TRTIS_REQUIRE_TORCH=1): cargo build -p trtis-torch")
        pytest.skip("the PyTorch backend library was not built (cargo build -p trtis-torch)")
    yield from running_server_with_metrics(
        repo, args=["--model-control-mode", "explicit", "--load-model", "*"], name="pt2 server"
    )


def test_the_packages_are_ready_as_torch_aoti_models(http):
    # add_sub's warmup (batch 2, zero and random data) ran before it was ready.
    for name in ["add_sub", "add_sub_names", "nested", "all_types", "accumulator", "efficientnet_lite0_pt2"]:
        assert http.is_model_ready(name), name
    assert http.get_model_metadata("add_sub")["platform"] == "torch_aoti"
    config = http.get_model_config("add_sub_names")
    assert (config["platform"], config["backend"], config["default_model_filename"]) == (
        "torch_aoti", "pytorch", "model.pt2")


def test_ordinal_names_and_a_dynamic_batch(both):
    client, mod = both
    for batch in (1, 3, 8):
        a = np.arange(batch * 4, dtype=np.float32).reshape(batch, 4)
        b = np.full((batch, 4), 0.5, dtype=np.float32)
        r = infer(client, mod, "add_sub", {"INPUT__0": (a, "FP32"), "INPUT__1": (b, "FP32")})
        np.testing.assert_array_equal(r.as_numpy("OUTPUT__0"), a + b)
        np.testing.assert_array_equal(r.as_numpy("OUTPUT__1"), a - b)


def test_forward_based_names_nested_and_keyword_inputs_and_a_dict_result(both):
    client, mod = both
    a = np.array([1, 2, 3], dtype=np.float32)
    b = np.array([10, 20, 30], dtype=np.float32)
    s = np.array([2, -1, 0.5], dtype=np.float32)
    r = infer(client, mod, "nested", {"ARGS[0][0]": (a, "FP32"), "ARGS[0][1]": (b, "FP32"), "KWARGS[scale]": (s, "FP32")})
    np.testing.assert_array_equal(r.as_numpy("RESULT[sum]"), (a + b) * s)
    np.testing.assert_array_equal(r.as_numpy("RESULT[prod]"), a * b)
    # Config order ARGS[1], ARGS[0]: only binding by name gets the sign right.
    x = np.ones((5, 4), dtype=np.float32)
    y = np.full((5, 4), 3, dtype=np.float32)
    r = infer(client, mod, "add_sub_names", {"ARGS[0]": (x, "FP32"), "ARGS[1]": (y, "FP32")})
    np.testing.assert_array_equal(r.as_numpy("RESULT[1]"), x - y)


def test_ten_datatypes_of_the_compiled_code(http):
    # BF16 goes as float32 numpy values (tritonclient converts), binary only.
    inputs, expect = [], {}
    for i, t in enumerate(TYPES):
        if t == "BOOL":
            x = np.array([[True, False, True]])
            want = ~x
        elif t == "BF16":
            x = np.array([[1.5, -2.0, 0.25]], dtype=np.float32)
            want = x * 2
        elif t.startswith("FP"):
            x = np.array([[1.5, -2.0, 0.25]], dtype={"FP16": np.float16, "FP32": np.float32, "FP64": np.float64}[t])
            want = x * 2
        else:
            kind = {"UINT8": np.uint8, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "INT64": np.int64}[t]
            x = np.array([[0, 7, np.iinfo(kind).max - 1]], dtype=kind)
            want = x + 1
        inp = httpclient.InferInput(f"INPUT__{i}", [1, 3], t)
        if t == "BF16":
            inp.set_data_from_numpy(x, binary_data=True)
        else:
            inp.set_data_from_numpy(x)
        inputs.append(inp)
        expect[f"OUTPUT__{i}"] = (t, want)
    r = http.infer("all_types", inputs, outputs=[httpclient.InferRequestedOutput(o) for o in expect])
    for name, (t, want) in expect.items():
        got = r.as_numpy(name)
        if t == "BF16":
            np.testing.assert_array_equal(got.astype(np.float32), want)
        else:
            assert got.dtype == want.dtype, (name, got.dtype)
            np.testing.assert_array_equal(got, want)


def test_the_dynamic_batcher_forms_batches(server, http):
    before = http.get_inference_statistics("add_sub")["model_stats"][0]
    errors = []

    def one(k):
        try:
            c = httpclient.InferenceServerClient(server.url, network_timeout=60.0)
            a = np.full((1, 4), k, dtype=np.float32)
            b = np.ones((1, 4), dtype=np.float32)
            r = infer(c, httpclient, "add_sub", {"INPUT__0": (a, "FP32"), "INPUT__1": (b, "FP32")})
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
    after = http.get_inference_statistics("add_sub")["model_stats"][0]
    assert after["inference_count"] - before["inference_count"] == 8
    assert after["execution_count"] - before["execution_count"] < 8, after
    assert max(b["batch_size"] for b in after["batch_stats"]) > 1, after["batch_stats"]


def test_sequences_accumulate_in_implicit_state(both):
    client, mod = both
    base = 7100 if mod is httpclient else 8100

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


def test_weight_sharing_one_package_for_two_instances(server, both):
    client, mod = both
    a = np.array([[0.25, 1, 2, 3]], dtype=np.float32)
    r = infer(client, mod, "add_sub_shared", {"INPUT__0": (a, "FP32"), "INPUT__1": (a, "FP32")})
    np.testing.assert_array_equal(r.as_numpy("OUTPUT__0"), a + a)
    reused = [line for line in server.log_lines() if "Reusing AOTInductor package for instance 'add_sub_shared_0_" in line]
    assert len(reused) == 1, server.log_tail()


def test_ensemble_of_onnx_preprocessing_and_the_package_classifier(both):
    client, mod = both
    rng = np.random.default_rng(23)
    image = rng.integers(0, 256, size=(3, 224, 224, 3), dtype=np.uint8)
    onnx = infer(client, mod, "efficientnet_ensemble", {"IMAGE": (image, "UINT8")}).as_numpy("CLASSES")
    pt2 = infer(client, mod, "efficientnet_pt2_ensemble", {"IMAGE": (image, "UINT8")}).as_numpy("CLASSES")
    assert pt2.shape == (3, 1000)
    assert np.max(np.abs(onnx - pt2)) < 1e-3
    np.testing.assert_array_equal(np.argmax(onnx, axis=1), np.argmax(pt2, axis=1))


def test_trtis_infer_says_espresso(server):
    out = subprocess.run([str(trtis_bin()), "infer", "-m", "efficientnet_lite0_pt2", "-u", server.url,
                          "-s", "INCEPTION", "-c", "3", str(IMAGES / "coffee.jpg")],
                         capture_output=True, text=True, check=False, timeout=60)
    assert out.returncode == 0, out.stderr
    first = [line for line in out.stdout.splitlines() if "=" in line][0]
    assert "967 (espresso)" in first, out.stdout


def test_request_shapes_the_compiled_code_does_not_take_are_refused(both):
    client, mod = both
    # The package's dimension 0 goes up to 64; the config says -1.
    x = np.ones((65, 4), dtype=np.float32)
    with pytest.raises(InferenceServerException) as e:
        infer(client, mod, "add_sub_names", {"ARGS[0]": (x, "FP32"), "ARGS[1]": (x, "FP32")})
    assert "has shape [65, 4], but the AOTInductor model takes [1..64, 4]" in str(e.value), str(e.value)
    # The model lives on.
    r = infer(client, mod, "add_sub_names", {"ARGS[0]": (x[:2], "FP32"), "ARGS[1]": (x[:2], "FP32")})
    np.testing.assert_array_equal(r.as_numpy("RESULT[1]"), np.zeros((2, 4), dtype=np.float32))


def test_an_output_of_another_type_is_tritons_error(both):
    client, mod = both
    a = np.ones((1, 4), dtype=np.float32)
    with pytest.raises(InferenceServerException) as e:
        infer(client, mod, "wrong_type", {"INPUT__0": (a, "FP32"), "INPUT__1": (a, "FP32")})
    assert "configuration expects datatype TYPE_INT32 for output 'OUTPUT__0', model provides TYPE_FP32" in str(e.value)


def test_statistics_count_the_package(http):
    stats = http.get_inference_statistics("nested")["model_stats"][0]
    assert stats["inference_count"] >= 1
    assert stats["inference_stats"]["compute_infer"]["count"] >= 1


def test_gen_config_writes_a_config_that_serves(server, http, repo):
    out = subprocess.run([str(trtis_bin()), "gen-config", "--name", "generated", str(FIXTURES / "add_sub.pt2")],
                         capture_output=True, text=True, check=True)
    assert 'platform: "torch_aoti"' in out.stdout and "max_batch_size: 4" in out.stdout, out.stdout
    assert "ARGS[0], ARGS[1]" in out.stdout
    # The outputs' placeholders (FP32, [-1]) happen to be right for add_sub.
    add(repo, "generated", out.stdout, "add_sub.pt2")
    http.load_model("generated")
    a = np.ones((2, 4), dtype=np.float32)
    r = infer(http, httpclient, "generated", {"INPUT__0": (a, "FP32"), "INPUT__1": (a, "FP32")})
    np.testing.assert_array_equal(r.as_numpy("OUTPUT__1"), a - a)


def rewrite(src, dst, edit):
    """Copies package `src` to `dst`, passing each (name, bytes) through `edit`."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            name, data = edit(info.filename, zin.read(info.filename))
            zout.writestr(name, data)


def with_metadata(**changes):
    def edit(name, data):
        if name.endswith("wrapper_metadata.json"):
            meta = json.loads(data)
            meta.update(changes)
            data = json.dumps(meta).encode()
        return name, data
    return edit


def renamed_model(name, data):
    return name.replace("data/aotinductor/model/", "data/aotinductor/classifier/"), data


def missing_library(name, data):
    # The compiled library's DT_NEEDED libtorch_cpu.so, renamed (same length).
    if name.endswith(".wrapper.so"):
        data = data.replace(b"libtorch_cpu.so\0", b"libtorch_cpX.so\0")
    return name, data


ADD_SUB_BATCH = """platform: "torch_aoti"
max_batch_size: 8
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "INPUT__1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]"""

BAD = {
    # (config, package edit, message, whether validate-config can know it without libtorch)
    "too_many_inputs": ("""platform: "torch_aoti"
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 3 ] }, { name: "INPUT__1" data_type: TYPE_FP32 dims: [ 3 ] },
        { name: "INPUT__2" data_type: TYPE_FP32 dims: [ 3 ] }, { name: "INPUT__3" data_type: TYPE_FP32 dims: [ 3 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 3 ] } ]""", "nested.pt2", None,
        "configuration expects 4 inputs, but model expects 3 inputs.", True),
    "unknown_name": ("""platform: "torch_aoti"
input [ { name: "KWARGS[scale]" data_type: TYPE_FP32 dims: [ 3 ] }, { name: "ARGS[0][1]" data_type: TYPE_FP32 dims: [ 3 ] },
        { name: "ARGS[1]" data_type: TYPE_FP32 dims: [ 3 ] } ]
output [ { name: "RESULT[sum]" data_type: TYPE_FP32 dims: [ 3 ] } ]""", "nested.pt2", None,
        'Input "ARGS[1]" for model instance "unknown_name_0" is not found in model input map.', True),
    "unknown_output": ("""platform: "torch_aoti"
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 3 ] }, { name: "INPUT__1" data_type: TYPE_FP32 dims: [ 3 ] },
        { name: "INPUT__2" data_type: TYPE_FP32 dims: [ 3 ] } ]
output [ { name: "RESULT[diff]" data_type: TYPE_FP32 dims: [ 3 ] } ]""", "nested.pt2", None,
        'Output "RESULT[diff]" for model instance "unknown_output_0" is not found in model output map.', True),
    "wrong_input_type": (ADD_SUB_BATCH.replace("TYPE_FP32", "TYPE_FP16", 1), "add_sub.pt2", None,
                         "is TYPE_FP16 in the configuration, but the package's model takes TYPE_FP32", True),
    "wrong_dims": (ADD_SUB_BATCH.replace("dims: [ 4 ]", "dims: [ 5 ]", 1), "add_sub.pt2", None,
                   "its dimension 1 is 5 in the configuration; the package's model takes ARGS[0] of shape [1..64, 4]", True),
    "batch_too_big": (ADD_SUB_BATCH.replace("max_batch_size: 8", "max_batch_size: 128"), "add_sub.pt2", None,
                      "max_batch_size is 128, but the package's batch dimension goes up to 64", True),
    "fixed_batch": (NESTED.replace('name: "nested"', "").replace("platform", "max_batch_size: 4\nplatform", 1)
                    .replace("dims: [ 3 ]", "dims: [ 1 ] reshape: { shape: [ ] }"), "nested.pt2", None,
                    "max_batch_size is 4, but dimension 0 is fixed to 3 in the package", True),
    "strings": ("""platform: "torch_aoti"
max_batch_size: 8
input [ { name: "INPUT__0" data_type: TYPE_STRING dims: [ 4 ] }, { name: "INPUT__1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]""", "add_sub.pt2", None,
        'Unsupported datatype TYPE_STRING for input "INPUT__0"', True),
    "other_torch": (ADD_SUB_BATCH, "add_sub.pt2", with_metadata(torch_version="2.12.0"),
                    "was compiled by torch 2.12.0, but this PyTorch backend's libtorch is 2.13.0", False),
    "cuda_package": (ADD_SUB_BATCH, "add_sub.pt2", with_metadata(AOTI_DEVICE_KEY="cuda"),
                     "was compiled for CUDA, but the instance is KIND_CPU", True),
    "no_model": (ADD_SUB_BATCH, "add_sub.pt2", renamed_model,
                 "it holds no model 'model' (it holds 'classifier')", True),
    "missing_library": (ADD_SUB_BATCH, "add_sub.pt2", missing_library,
                        "its compiled library needs a shared library that is not installed here", False),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_packages_and_configs_that_cannot_work_are_refused_with_a_reason(http, repo, name):
    config, fixture, edit, message, static = BAD[name]
    add(repo, name, f'name: "{name}"\n' + config, fixture)
    if edit:
        rewrite(FIXTURES / fixture, repo / name / "1" / "model.pt2", edit)
    with pytest.raises(InferenceServerException) as e:
        http.load_model(name)
    assert message in str(e.value), str(e.value)
    assert not http.is_model_ready(name)
    out = subprocess.run([str(trtis_bin()), "validate-config", str(repo / name)],
                         capture_output=True, text=True, check=False)
    if static:
        assert out.returncode != 0, out.stdout
        assert message in out.stdout + out.stderr, out.stdout + out.stderr
    else:
        # Known only once libtorch loads the package: validate-config passes it.
        assert out.returncode == 0, out.stdout + out.stderr


def test_the_committed_packages_match_the_pinned_torch():
    """A .pt2 runs only on the torch major.minor that compiled it: each
    committed package records the torch that made it, which must be the one
    scripts/setup.sh installs for the backend."""
    setup = (REPO_ROOT / "scripts" / "setup.sh").read_text()
    pin = re.search(r"torch==(\d+\.\d+)\.\d+", setup).group(1)
    packages = sorted(FIXTURES.glob("*.pt2")) + [EXAMPLES / "efficientnet_lite0_pt2" / "1" / "model.pt2"]
    assert len(packages) == 5
    for path in packages:
        with zipfile.ZipFile(path) as z:
            meta = [n for n in z.namelist() if n.endswith("wrapper_metadata.json")]
            assert len(meta) == 1, path
            recorded = json.loads(z.read(meta[0]))
        assert recorded["torch_version"].startswith(pin + "."), (path, recorded)
        assert recorded["AOTI_CPU_ISA"] == "AVX2" and recorded["AOTI_DEVICE_KEY"] == "cpu", (path, recorded)


def test_many_packages_load_at_once(tmp_path):
    """libtorch's package loader parses each package's JSON into one shared
    static object, so two packages constructed on two threads at once can
    read each other's half-parsed metadata ("No device information found.",
    seen once on CI). The backend takes package constructions in turn; here
    sixteen models of two instances each load in parallel, twice over."""
    if not torch_built():
        pytest.skip("the PyTorch backend library was not built")
    repo = tmp_path / "models"
    names = [f"add_sub_{i}" for i in range(16)]
    for name in names:
        config = ADD_SUB.replace('name: "add_sub"', f'name: "{name}"') + "instance_group [ { count: 2 kind: KIND_CPU } ]\n"
        add(repo, name, config, "add_sub.pt2")
    a = np.arange(4, dtype=np.float32).reshape(1, 4)
    for _ in range(2):
        for server in running_server_with_metrics(repo, name="parallel pt2 loads"):
            client = httpclient.InferenceServerClient(server.url)
            for name in names:
                assert client.is_model_ready(name), (name, server.log_tail())
            r = infer(client, httpclient, names[-1], {"INPUT__0": (a, "FP32"), "INPUT__1": (a, "FP32")})
            np.testing.assert_array_equal(r.as_numpy("OUTPUT__0"), a + a)
