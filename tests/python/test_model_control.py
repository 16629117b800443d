"""Model control with overrides (the model_repository extension), through
tritonclient over HTTP and gRPC, in the steps of Triton's own
simple_http_model_control.py / simple_grpc_model_control.py examples (a
repository of 7 models for HTTP, 8 for gRPC; the checks they make), then
what those examples leave out: `file:` contents, the `Invalid file path`
refusal, and `unload_dependents` on an ensemble."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from trtis_harness import EXAMPLES, _write_identity, grpc_client_for, running_server, trtis_bin

ENSEMBLE = """name: "pipe"
platform: "ensemble"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
ensemble_scheduling {
  step [
    { model_name: "step_a" model_version: -1
      input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "MID" } },
    { model_name: "step_b" model_version: -1
      input_map { key: "INPUT0" value: "MID" } output_map { key: "OUTPUT0" value: "OUT" } }
  ]
}
"""


def build(repo, count):
    """`simple`, the `pipe` ensemble over `step_a` and `step_b`, and
    identity models up to `count` models."""
    repo.mkdir(parents=True)
    shutil.copytree(EXAMPLES / "simple", repo / "simple")
    _write_identity(repo, "step_a", "TYPE_FP32")
    _write_identity(repo, "step_b", "TYPE_FP32")
    (repo / "pipe" / "1").mkdir(parents=True)
    (repo / "pipe" / "config.pbtxt").write_text(ENSEMBLE)
    for i in range(count - 4):
        _write_identity(repo, f"extra_{i}", "TYPE_FP32")
    return repo


@pytest.fixture(scope="module")
def http_server(tmp_path_factory):
    repo = build(tmp_path_factory.mktemp("control_http") / "models", 7)
    yield from running_server(repo, ["--model-control-mode", "explicit"], name="model-control server")


@pytest.fixture(scope="module")
def grpc_server(tmp_path_factory):
    repo = build(tmp_path_factory.mktemp("control_grpc") / "models", 8)
    yield from running_server(repo, ["--model-control-mode", "explicit"], name="model-control gRPC server")


@pytest.fixture(scope="module")
def http(http_server):
    c = httpclient.InferenceServerClient(http_server.url, network_timeout=60.0)
    yield c
    c.close()


@pytest.fixture(scope="module")
def grpc(grpc_server):
    c = grpc_client_for(grpc_server)
    yield c
    c.close()


MALFORMED = '"parameters": {"config": {{"max_batch_size": "16"}}}'


def add_sub(client, module, model, rows):
    a = np.arange(16 * rows, dtype=np.int32).reshape(rows, 16)
    b = np.ones((rows, 16), dtype=np.int32)
    inputs = [module.InferInput("INPUT0", [rows, 16], "INT32"), module.InferInput("INPUT1", [rows, 16], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    result = client.infer(model, inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_http_example_steps(http):
    assert len(http.get_model_repository_index()) == 7
    http.load_model("simple")
    assert http.is_model_ready("simple")
    with pytest.raises(InferenceServerException) as e:
        http.load_model("simple", config=MALFORMED)
    assert "failed to load" in e.value.message()
    assert http.is_model_ready("simple"), "a failed override leaves the model as it was"
    http.load_model("simple", config='{"max_batch_size":"16"}')
    assert http.get_model_config("simple")["max_batch_size"] == 16
    add_sub(http, httpclient, "simple", 12)  # more rows than the file's 8 allow
    http.unload_model("simple")
    assert not http.is_model_ready("simple")
    with pytest.raises(InferenceServerException) as e:
        http.load_model("wrong_model_name")
    assert "failed to load" in e.value.message()


def test_grpc_example_steps(grpc):
    assert len(grpc.get_model_repository_index().models) == 8
    grpc.load_model("simple")
    assert grpc.is_model_ready("simple")
    with pytest.raises(InferenceServerException) as e:
        grpc.load_model("simple", config=MALFORMED)
    assert "failed to load" in e.value.message()
    grpc.load_model("simple", config='{"max_batch_size":"16"}')
    assert grpc.get_model_config("simple").config.max_batch_size == 16
    grpc.unload_model("simple")
    assert not grpc.is_model_ready("simple")
    with pytest.raises(InferenceServerException) as e:
        grpc.load_model("simple", config="{}", files={"file:" + "A" * 256: b"a"})
    assert "Invalid file path" in e.value.message()
    assert grpc.is_server_live()
    with pytest.raises(InferenceServerException) as e:
        grpc.load_model("wrong_model_name")
    assert "failed to load" in e.value.message()


def load_with_files(protocol, client, server, name, config, files):
    """tritonclient.grpc sends `files`; tritonclient.http 2.51 cannot
    (it puts base64 *bytes* into json.dumps and fails before sending), so
    over HTTP the same request goes out as Triton documents it: each file
    base64-encoded as a JSON string."""
    if protocol == "grpc":
        client.load_model(name, config=config, files=files)
        return
    parameters = {k: base64.b64encode(v).decode() for k, v in files.items()}
    if config is not None:
        parameters["config"] = config
    status, _, body = server.post_json(f"/v2/repository/models/{name}/load", {"parameters": parameters})
    if status != 200:
        raise InferenceServerException(json.loads(body)["error"])


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_files_load_a_model_the_repository_does_not_have(protocol, http, grpc, http_server, grpc_server):
    client, module, server = (http, httpclient, http_server) if protocol == "http" else (grpc, grpcclient, grpc_server)
    name = f"uploaded_{protocol}"
    onnx = (EXAMPLES / "simple" / "1" / "model.onnx").read_bytes()
    config = json.dumps({"backend": "onnxruntime", "max_batch_size": 4})
    load_with_files(protocol, client, server, name, config, {"file:1/model.onnx": onnx})
    assert client.is_model_ready(name)
    add_sub(client, module, name, 3)
    client.unload_model(name)
    assert not client.is_model_ready(name)
    # Files need a config; paths stay inside the model directory.
    for files, config in [({"file:1/model.onnx": onnx}, None), ({"file:../escape": b"x"}, "{}")]:
        with pytest.raises(InferenceServerException) as e:
            load_with_files(protocol, client, server, name, config, files)
        assert "failed to load" in e.value.message()
    assert not client.is_model_ready(name)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_loading_an_ensemble_loads_its_composing_models_and_unload_dependents_unloads_them(protocol, http, grpc):
    client = http if protocol == "http" else grpc
    client.load_model("pipe")
    for m in ["pipe", "step_a", "step_b"]:
        assert client.is_model_ready(m), m
    client.unload_model("pipe")  # unload_dependents=False: only the ensemble
    assert not client.is_model_ready("pipe")
    assert client.is_model_ready("step_a") and client.is_model_ready("step_b")
    client.load_model("pipe")
    client.unload_model("pipe", unload_dependents=True)
    for m in ["pipe", "step_a", "step_b"]:
        assert not client.is_model_ready(m), m


def test_a_kind_gpu_instance_is_refused_not_run_on_the_cpu(tmp_path):
    # A machine with a GPU (simulated: TRTIS_GPU_COUNT=1): the KIND_GPU group
    # would be placed on GPU 0, and since no backend of this build runs on a
    # GPU the load fails saying so, rather than running the instances on the
    # CPU; validate-config warns the same (a config may be meant for
    # another build, as for a machine without a GPU).
    repo = tmp_path / "models"
    repo.mkdir()
    model = _write_identity(repo, "gpu_identity", "TYPE_FP32")
    config = model / "config.pbtxt"
    config.write_text(config.read_text() + "instance_group [ { kind: KIND_GPU count: 2 } ]\n")
    for server in running_server(
        repo, ["--model-control-mode", "explicit"], name="one-GPU server", env={"TRTIS_GPU_COUNT": "1"}
    ):
        client = httpclient.InferenceServerClient(server.url)
        with pytest.raises(InferenceServerException) as e:
            client.load_model("gpu_identity")
        message = str(e.value)
        assert (
            "instance group gpu_identity_0 of model gpu_identity has kind KIND_GPU, "
            "but no backend of this trtis build runs on a GPU; use KIND_CPU" in message
        ), message
        assert not client.is_model_ready("gpu_identity")
    checked = subprocess.run(
        [str(trtis_bin()), "validate-config", str(repo)],
        env={**os.environ, "TRTIS_GPU_COUNT": "1"}, capture_output=True, text=True, timeout=60,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "warning: instance_group[0].kind: instance group gpu_identity_0 of model gpu_identity has kind KIND_GPU, but no backend" in checked.stdout + checked.stderr
