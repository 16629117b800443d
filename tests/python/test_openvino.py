"""The OpenVINO backend through Triton's own clients: IR models
(tests/fixtures/openvino and the example EfficientNet-Lite0 IR, made by
scripts/make-openvino-models.py with openvino 2026.4.1) and the project's ONNX
classifier read by OpenVINO, served by a real `trtis serve` over HTTP and gRPC.

Covered: IR, ONNX and TensorFlow (SavedModel, frozen GraphDef) models; a
dynamic batch dimension and the dynamic batcher (batches of any size, no
padding); the sequence batcher with implicit state; auto-complete by Triton's
OpenVINO rules (batching only with batch layouts); Triton's parameters (a bad
value refused with Triton's words by `serve` and `validate-config`); the
classifier says espresso with logits within 1e-3 of ONNX Runtime's;
warmup; statistics; a bad IR, a missing .bin and wrong tensor names refused with the
reason, by `serve` and `validate-config` alike (it reads an IR's XML itself
and has OpenVINO read other formats); `gen-config model.xml`.

Skipped when the OpenVINO libraries are not set up (scripts/setup.sh unpacks
them into .tools/openvino), unless TRTIS_REQUIRE_OPENVINO=1 (scripts/test.sh
sets it).
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
import subprocess
import threading

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from trtis_harness import EXAMPLES, REPO_ROOT, grpc_client_for, running_server_with_metrics, trtis_bin

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "openvino"
ONNX = REPO_ROOT / "examples" / "model_repository" / "efficientnet_lite0" / "1" / "model.onnx"

ADD_SUB = """name: "add_sub"
backend: "openvino"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
dynamic_batching { max_queue_delay_microseconds: 100000 preferred_batch_size: [ 4 ] }
parameters [ { key: "NUM_STREAMS" value: { string_value: "1" } },
             { key: "INFERENCE_NUM_THREADS" value: { string_value: "1" } },
             { key: "PERFORMANCE_HINT" value: { string_value: "LATENCY" } } ]
"""

# No batching, a static IR: the shape is the model's.
ADD_SUB_FIXED = """name: "add_sub_fixed"
backend: "openvino"
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 2, 4 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ 2, 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 2, 4 ] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 2, 4 ] } ]
"""

# OpenVINO's own default precision is bf16 on a CPU with native bf16
# (AVX512_BF16, AMX), as it is in Triton: the models compared with ONNX
# Runtime within 1e-3 ask for f32 (trtis's INFERENCE_PRECISION_HINT).
F32 = 'parameters [ { key: "INFERENCE_PRECISION_HINT" value: { string_value: "f32" } } ]\n'

# The ONNX classifier, read by OpenVINO (Triton's way: backend openvino and
# default_model_filename).
ONNX_CONFIG = """name: "efficientnet_onnx_openvino"
backend: "openvino"
default_model_filename: "model.onnx"
max_batch_size: 4
input [ { name: "input" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] } ]
output [ { name: "output" data_type: TYPE_FP32 dims: [ 1000 ] } ]
""" + F32


# Triton's ONNX Runtime model with the OpenVINO CPU accelerator: run by the
# OpenVINO backend (the PyPI ONNX Runtime has no OpenVINO provider).
ONNX_ACCELERATED = """name: "efficientnet_ort_openvino"
platform: "onnxruntime_onnx"
max_batch_size: 4
input [ { name: "input" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] } ]
output [ { name: "output" data_type: TYPE_FP32 dims: [ 1000 ] } ]
optimization { execution_accelerators { cpu_execution_accelerator [ { name: "openvino" } ] } }
"""

# The FP32 IR served as FP64 and INT32: converted both ways, as Triton's
# OpenVINO backend converts the config's type to the model's.
ADD_SUB_CONVERTED = """name: "add_sub_converted"
backend: "openvino"
max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_FP64 dims: [ 4 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP64 dims: [ 4 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 4 ] } ]
"""


# Triton's static batch: compiled at max_batch_size, smaller batches padded
# (the warmup's batch of 3 too, before the model is ready).
ADD_SUB_PADDED = """name: "add_sub_padded"
backend: "openvino"
max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
parameters [ { key: "ENABLE_BATCH_PADDING" value: { string_value: "YES" } } ]
model_warmup [ { name: "padded" batch_size: 3 inputs [
  { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } },
  { key: "INPUT1" value: { data_type: TYPE_FP32 dims: [ 4 ] random_data: true } } ] } ]
"""


# The sequence batcher on an IR: a running sum kept in implicit state,
# reset by the START control.
ACCUMULATOR = """name: "accumulator"
backend: "openvino"
max_batch_size: 4
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] } ] } ]
  state [ { input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_FP32 dims: [ 1 ] } ]
}
"""

# Auto-complete: the ONNX classifier read by OpenVINO, inputs and outputs
# left to the model.
ONNX_COMPLETED = """name: "auto_onnx"
backend: "openvino"
default_model_filename: "model.onnx"
"""


TF_FIXTURES = REPO_ROOT / "tests" / "fixtures" / "tensorflow"


def tf_through_openvino(name, fixture, file):
    """The TensorFlow backend's add_sub config, read by OpenVINO instead:
    Triton's way (backend openvino, default_model_filename)."""
    config = (TF_FIXTURES / fixture / "config.pbtxt").read_text()
    config = "\n".join(line for line in config.splitlines() if not line.startswith(("platform:", "name:")))
    return f'name: "{name}"\nbackend: "openvino"\ndefault_model_filename: "{file}"\n' + config


def openvino_set_up() -> bool:
    if os.environ.get("TRTIS_OPENVINO_LIB"):
        return True
    return any(p.name.startswith("libopenvino_c.so.") for p in (REPO_ROOT / ".tools" / "openvino").glob("*"))


def add(repo, name, config, files):
    (repo / name / "1").mkdir(parents=True)
    for src, dst in files:
        shutil.copy(src, repo / name / "1" / dst)
    if config is not None:
        (repo / name / "config.pbtxt").write_text(config)


def ir(name):
    return [(FIXTURES / name / "model.xml", "model.xml"), (FIXTURES / name / "model.bin", "model.bin")]


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    repo = tmp_path_factory.mktemp("openvino") / "models"
    add(repo, "add_sub", ADD_SUB, ir("add_sub"))
    add(repo, "add_sub_fixed", ADD_SUB_FIXED, ir("add_sub_fixed"))
    add(repo, "efficientnet_onnx_openvino", ONNX_CONFIG, [(ONNX, "model.onnx")])
    add(repo, "efficientnet_ort_openvino", ONNX_ACCELERATED, [(ONNX, "model.onnx")])
    add(repo, "add_sub_converted", ADD_SUB_CONVERTED, ir("add_sub"))
    add(repo, "add_sub_padded", ADD_SUB_PADDED, ir("add_sub"))
    add(repo, "accumulator", ACCUMULATOR, ir("accumulator"))
    # No config.pbtxt: auto-complete, with and without batch layouts.
    add(repo, "auto_layout", None, ir("add_sub_layout"))
    add(repo, "auto_plain", None, ir("add_sub"))
    add(repo, "auto_onnx", ONNX_COMPLETED, [(ONNX, "model.onnx")])
    # TensorFlow models read by OpenVINO: a SavedModel directory and a frozen GraphDef.
    shutil.copytree(TF_FIXTURES / "tf_savedmodel_add_sub" / "1" / "model.savedmodel",
                    repo / "tf_savedmodel_openvino" / "1" / "model.savedmodel")
    (repo / "tf_savedmodel_openvino" / "config.pbtxt").write_text(
        tf_through_openvino("tf_savedmodel_openvino", "tf_savedmodel_add_sub", "model.savedmodel"))
    # OpenVINO names a frozen graph's tensors as TensorFlow does ("INPUT0:0").
    graphdef = tf_through_openvino("tf_graphdef_openvino", "tf_graphdef_add_sub", "model.graphdef")
    for tensor in ["INPUT0", "INPUT1", "OUTPUT0", "OUTPUT1"]:
        graphdef = graphdef.replace(f'"{tensor}"', f'"{tensor}:0"')
    add(repo, "tf_graphdef_openvino", graphdef,
        [(TF_FIXTURES / "tf_graphdef_add_sub" / "1" / "model.graphdef", "model.graphdef")])
    for name in ["efficientnet_lite0", "efficientnet_lite0_openvino"]:
        shutil.copytree(EXAMPLES / name, repo / name)
    example = repo / "efficientnet_lite0_openvino" / "config.pbtxt"
    example.write_text(example.read_text() + "\n" + F32)
    return repo


@pytest.fixture(scope="module")
def server(repo):
    if not openvino_set_up():
        if os.environ.get("TRTIS_REQUIRE_OPENVINO") == "1":
            pytest.fail("OpenVINO is not set up (TRTIS_REQUIRE_OPENVINO=1): scripts/setup.sh unpacks it")
        pytest.skip("OpenVINO is not set up (scripts/setup.sh unpacks it into .tools/openvino)")
    yield from running_server_with_metrics(
        repo, args=["--model-control-mode", "explicit", "--load-model", "*"], name="openvino server"
    )


@pytest.fixture(scope="module")
def http(server):
    c = httpclient.InferenceServerClient(server.url, network_timeout=120.0)
    yield c
    c.close()


@pytest.fixture(scope="module")
def grpc(server):
    c = grpc_client_for(server)
    yield c
    c.close()


@pytest.fixture(params=["http", "grpc"])
def both(request, http, grpc):
    return (http, httpclient) if request.param == "http" else (grpc, grpcclient)


def infer(client, mod, model, arrays, **kw):
    inputs = []
    for name, arr in arrays.items():
        i = mod.InferInput(name, list(arr.shape), "FP32")
        i.set_data_from_numpy(arr)
        inputs.append(i)
    return client.infer(model, inputs, **kw)


def test_ir_models_with_a_dynamic_batch_and_a_static_shape(both):
    client, mod = both
    for batch in (1, 3, 8):
        a = np.arange(batch * 4, dtype=np.float32).reshape(batch, 4)
        b = np.full((batch, 4), 0.5, dtype=np.float32)
        r = infer(client, mod, "add_sub", {"INPUT0": a, "INPUT1": b})
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)
    a = np.ones((2, 4), dtype=np.float32)
    r = infer(client, mod, "add_sub_fixed", {"INPUT0": a, "INPUT1": a * 3})
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - a * 3)


def test_batch_padding_pads_to_the_static_batch_and_cuts_the_outputs_back(both):
    client, mod = both
    for batch in (1, 3, 4):
        a = np.arange(batch * 4, dtype=np.float32).reshape(batch, 4)
        r = infer(client, mod, "add_sub_padded", {"INPUT0": a, "INPUT1": a * 2})
        assert r.as_numpy("OUTPUT0").shape == (batch, 4)
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a * 3)
        np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), -a)


def test_the_dynamic_batcher_forms_batches_of_any_size(server, http):
    before = http.get_inference_statistics("add_sub")["model_stats"][0]
    errors = []

    def one(k):
        try:
            c = httpclient.InferenceServerClient(server.url, network_timeout=60.0)
            a = np.full((1, 4), k, dtype=np.float32)
            r = infer(c, httpclient, "add_sub", {"INPUT0": a, "INPUT1": a})
            np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + a)
            c.close()
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=one, args=(k,)) for k in range(7)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    after = http.get_inference_statistics("add_sub")["model_stats"][0]
    assert after["inference_count"] - before["inference_count"] == 7
    assert after["execution_count"] - before["execution_count"] < 7, after
    assert after["inference_stats"]["compute_infer"]["count"] >= 1


def test_the_ir_and_the_onnx_classifier_agree_with_onnx_runtime(both):
    client, mod = both
    rng = np.random.default_rng(5)
    x = rng.uniform(-1, 1, size=(3, 3, 224, 224)).astype(np.float32)
    ort = infer(client, mod, "efficientnet_lite0", {"input": x}).as_numpy("output")
    for model in ("efficientnet_lite0_openvino", "efficientnet_onnx_openvino", "efficientnet_ort_openvino"):
        ov = infer(client, mod, model, {"input": x}).as_numpy("output")
        assert ov.shape == (3, 1000)
        assert np.max(np.abs(ov - ort)) < 1e-3, model
        np.testing.assert_array_equal(np.argmax(ov, axis=1), np.argmax(ort, axis=1))


def test_the_openvino_accelerator_of_an_onnx_model_runs_on_openvino_and_says_so(server, http):
    config = http.get_model_config("efficientnet_ort_openvino")
    assert config["platform"] == "onnxruntime_onnx"
    said = [line for line in server.log_lines() if "cpu_execution_accelerator 'openvino'" in line]
    assert said and "runs on trtis's OpenVINO backend" in said[0], server.log_tail()


def test_config_datatypes_are_converted_to_and_from_the_models(both):
    client, mod = both
    a = np.array([[1.5, -2.0, 0.25, 1e3]], dtype=np.float64)
    b = np.array([[1, 2, -3, 4]], dtype=np.int32)
    inputs = [mod.InferInput("INPUT0", [1, 4], "FP64"), mod.InferInput("INPUT1", [1, 4], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    r = client.infer("add_sub_converted", inputs)
    assert r.as_numpy("OUTPUT0").dtype == np.float64
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
    # FP32 differences truncated toward zero into INT32.
    assert r.as_numpy("OUTPUT1").dtype == np.int32
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), np.trunc(a - b).astype(np.int32))


def test_trtis_infer_says_espresso(server):
    image = REPO_ROOT / "examples" / "images" / "coffee.jpg"
    out = subprocess.run([str(trtis_bin()), "infer", "-m", "efficientnet_lite0_openvino", "-u", server.url,
                          "-s", "INCEPTION", "-c", "1", str(image)],
                         capture_output=True, text=True, check=False, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "967 (espresso)" in out.stdout, out.stdout


def write_bad(repo, name, config, files):
    add(repo, name, f'name: "{name}"\n' + config, files)


# add_sub's config without its name and its dynamic batcher.
ADD_SUB_BODY = "\n".join(line for line in ADD_SUB.splitlines()[1:] if not line.startswith("dynamic_batching"))


def test_bad_models_and_configs_are_refused_with_the_reason(http, repo, tmp_path):
    bad_xml = tmp_path / "bad.xml"
    bad_xml.write_text("<net name='x'><layers><layer id='0' type='NoSuchOp'/></layers></net>")
    cases = {
        "missing_bin": (ADD_SUB_BODY, [(FIXTURES / "add_sub" / "model.xml", "model.xml")],
                        "has no weights file model.bin beside it", True),
        "bad_ir": (ADD_SUB_BODY, [(bad_xml, "model.xml"), (FIXTURES / "add_sub" / "model.bin", "model.bin")],
                   "openvino error in reading model", True),
        "wrong_name": (ADD_SUB_BODY.replace('"INPUT1"', '"INPUT9"'), ir("add_sub"),
                       "unexpected inference input 'INPUT9', allowed inputs are: INPUT0, INPUT1", True),
        "wrong_output": (ADD_SUB_BODY.replace('"OUTPUT1"', '"SUM"'), ir("add_sub"),
                         "unexpected inference output 'SUM'", True),
        "wrong_dims": (ADD_SUB_BODY.replace("dims: [ 4 ]", "dims: [ 5 ]", 1), ir("add_sub"),
                       "the model expects 2 dimensions (shape [-1,4])", True),
        "too_many_inputs": (ADD_SUB_FIXED.split("\n", 1)[1].replace(
            'input [ ', 'input [ { name: "EXTRA" data_type: TYPE_FP32 dims: [ 1 ] }, '), ir("add_sub_fixed"),
            "configuration expects 3 inputs, model provides 2", True),
        "bad_precision": (ADD_SUB_BODY + "\n" + F32.replace('"f32"', '"f64"'), ir("add_sub"),
                          "expected the parameter 'INFERENCE_PRECISION_HINT' to be f32/bf16/f16, got f64", True),
        "bad_hint": (ADD_SUB_BODY.replace('"LATENCY"', '"FAST"'), ir("add_sub"),
                     "expected the parameter 'PERFORMANCE_HINT' to be LATENCY/THROUGHPUT/CUMULATIVE_THROUGHPUT, got fast", True),
        "accelerator_parameter": (ONNX_ACCELERATED.split("\n", 1)[1].replace(
            '{ name: "openvino" }', '{ name: "openvino" parameters { key: "device_type" value: "GPU_FP16" } }'),
            [(ONNX, "model.onnx")], "'device_type: GPU_FP16' is not applied (device_type CPU or CPU_FP32 only)", True),
        "gpu_device": (ADD_SUB_BODY.replace('{ key: "NUM_STREAMS"', '{ key: "TARGET_DEVICE" value: { string_value: "GPU" } }, { key: "NUM_STREAMS"'),
                       ir("add_sub"), "runs on the CPU only", True),
        # ONNX models read by OpenVINO: validate-config has OpenVINO read
        # them too, so it refuses what the load refuses.
        "onnx_wrong_name": (ONNX_CONFIG.split("\n", 1)[1].replace('"input"', '"pixels"'), [(ONNX, "model.onnx")],
                            "unexpected inference input 'pixels', allowed inputs are: input", True),
        "accelerated_wrong_dims": (ONNX_ACCELERATED.split("\n", 1)[1].replace("dims: [ 3, 224, 224 ]", "dims: [ 224, 224, 3 ]"),
                                   [(ONNX, "model.onnx")], "the model expects 4 dimensions (shape [-1,3,224,224])", True),
    }
    for name, (config, files, message, static) in cases.items():
        write_bad(repo, name, config, files)
        with pytest.raises(InferenceServerException) as e:
            http.load_model(name)
        assert message in str(e.value), (name, str(e.value))
        out = subprocess.run([str(trtis_bin()), "validate-config", str(repo / name)],
                             capture_output=True, text=True, check=False)
        # validate-config reads an IR's XML itself: it refuses what serve refuses.
        assert static
        assert out.returncode != 0 and message in out.stdout + out.stderr, (name, out.stdout + out.stderr)


def gen_config(name, fixture):
    return subprocess.run([str(trtis_bin()), "gen-config", "--name", name, str(FIXTURES / fixture / "model.xml")],
                          capture_output=True, text=True, check=True).stdout


def test_gen_config_writes_an_ir_config_that_serves(http, repo):
    # Triton's OpenVINO rule: batching only when every port's layout has N.
    out = gen_config("generated", "add_sub")
    assert 'backend: "openvino"' in out and "max_batch_size" not in out and "no batching" in out, out
    add(repo, "generated", out, ir("add_sub"))
    http.load_model("generated")
    a = np.ones((3, 4), dtype=np.float32)
    r = infer(http, httpclient, "generated", {"INPUT0": a, "INPUT1": a})
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + a)
    out = gen_config("generated_batching", "add_sub_layout")
    assert "max_batch_size: 4" in out and "dynamic_batching" in out, out
    add(repo, "generated_batching", out, ir("add_sub_layout"))
    http.load_model("generated_batching")
    r = infer(http, httpclient, "generated_batching", {"INPUT0": a, "INPUT1": a})
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - a)


def test_auto_complete_follows_tritons_openvino_rules(server, http):
    """No config.pbtxt (or one without inputs and outputs): completed from
    the model's ports. Batching only when every input and output has a
    layout with N (the add_sub_layout IR). Each dimension is the model's
    (Triton writes all -1 for a shape not fully static, which its own load
    then refuses without batching: a deliberate difference)."""
    layout = http.get_model_config("auto_layout")
    assert layout["max_batch_size"] == 4 and "dynamic_batching" in layout, layout
    assert [(i["name"], i["dims"]) for i in layout["input"]] == [("INPUT0", [4]), ("INPUT1", [4])], layout
    assert [o["name"] for o in layout["output"]] == ["OUTPUT0", "OUTPUT1"], layout
    assert any("autofilled max_batch_size to 4 for model 'auto_layout'" in line for line in server.log_lines())
    plain = http.get_model_config("auto_plain")
    assert plain.get("max_batch_size", 0) == 0 and "dynamic_batching" not in plain, plain
    assert plain["input"][0]["dims"] == [-1, 4] and plain["input"][0]["data_type"] == "TYPE_FP32", plain
    onnx = http.get_model_config("auto_onnx")
    assert [(i["name"], i["dims"]) for i in onnx["input"]] == [("input", [-1, 3, 224, 224])], onnx
    assert [o["name"] for o in onnx["output"]] == ["output"], onnx
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    for name in ["auto_layout", "auto_plain"]:
        r = infer(http, httpclient, name, {"INPUT0": a, "INPUT1": a})
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + a)
    x = np.zeros((1, 3, 224, 224), dtype=np.float32)
    assert infer(http, httpclient, "auto_onnx", {"input": x}).as_numpy("output").shape == (1, 1000)
    # validate-config says the config is left to auto-complete.
    out = subprocess.run([str(trtis_bin()), "validate-config", str(server.repo / "auto_layout")],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 0 and "from 'model.xml' (auto-complete)" in out.stdout + out.stderr, out


def test_tensorflow_models_run_on_openvino(both):
    """The TensorFlow fixtures (SavedModel and frozen GraphDef, batching
    up to 8) served by OpenVINO, which reads TensorFlow's formats itself."""
    client, mod = both
    rng = np.random.default_rng(3)
    for name, suffix in [("tf_savedmodel_openvino", ""), ("tf_graphdef_openvino", ":0")]:
        for batch in [1, 5]:
            a = rng.standard_normal((batch, 16)).astype(np.float32)
            b = rng.standard_normal((batch, 16)).astype(np.float32)
            r = infer(client, mod, name, {"INPUT0" + suffix: a, "INPUT1" + suffix: b})
            np.testing.assert_allclose(r.as_numpy("OUTPUT0" + suffix), a + b, rtol=1e-6)
            np.testing.assert_allclose(r.as_numpy("OUTPUT1" + suffix), a - b, rtol=1e-6)


def test_sequences_accumulate_in_implicit_state(both):
    client, mod = both
    base = 7000 if mod is grpcclient else 7100

    def step(seq, value, start=False, end=False):
        r = infer(client, mod, "accumulator", {"INPUT": np.array([[value]], dtype=np.float32)},
                  sequence_id=base + seq, sequence_start=start, sequence_end=end)
        return float(r.as_numpy("OUTPUT")[0, 0])

    assert step(1, 1.0, start=True) == 1.0
    assert step(2, 10.0, start=True) == 10.0
    assert step(1, 2.0) == 3.0
    assert step(2, 20.0, end=True) == 30.0
    assert step(1, 3.0, end=True) == 6.0
    # A new sequence on the same id starts from zero again.
    assert step(1, 5.0, start=True, end=True) == 5.0


def open_files(pid, suffix):
    """The server's open file descriptors whose target ends in `suffix`."""
    fds = Path(f"/proc/{pid}/fd")
    out = []
    for fd in fds.iterdir():
        try:
            if os.readlink(fd).endswith(suffix):
                out.append(fd.name)
        except OSError:
            pass  # closed meanwhile
    return out


def test_unloading_an_ir_model_lets_its_weights_go(server, http, repo):
    """Every load of an IR model used to keep the model (its graph, the
    mmap and an open fd of model.bin) after the unload: 40 cycles grew RSS
    287 -> 840 MiB. The ports openvino 0.11 hands out are freed now, so
    after load/unload cycles no model.bin stays open."""
    name = "efficientnet_lite0_openvino"
    weights = str(repo / name / "1" / "model.bin")
    for _ in range(6):
        http.load_model(name)
        assert http.is_model_ready(name)
        http.unload_model(name)
        deadline = time.monotonic() + 30
        while http.is_model_ready(name) and time.monotonic() < deadline:
            time.sleep(0.05)
    # Unloaded: nothing of it is open or mapped any more.
    assert open_files(server.proc.pid, weights) == []
    maps = Path(f"/proc/{server.proc.pid}/maps").read_text()
    assert weights not in maps
    http.load_model(name)
    assert len(open_files(server.proc.pid, weights)) <= 1
