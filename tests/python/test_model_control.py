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
    # would be placed on GPU 0, and since the identity backend runs on the
    # CPU only the load fails saying so, rather than running the instances
    # on the CPU; validate-config warns the same (a config may be meant for
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
            "but the 'identity' backend of this trtis build runs on the CPU only; use KIND_CPU" in message
        ), message
        assert not client.is_model_ready("gpu_identity")
    checked = subprocess.run(
        [str(trtis_bin()), "validate-config", str(repo)],
        env={**os.environ, "TRTIS_GPU_COUNT": "1"}, capture_output=True, text=True, timeout=60,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert (
        "warning: instance_group[0].kind: instance group gpu_identity_0 of model gpu_identity has kind KIND_GPU, "
        "but the 'identity' backend" in checked.stdout + checked.stderr
    )


def test_an_onnx_kind_gpu_instance_needs_onnx_runtimes_cuda_provider(tmp_path):
    # The ONNX Runtime backend runs KIND_GPU instances through the CUDA
    # execution provider. With a (simulated) GPU but the CPU build of ONNX
    # Runtime (the 'onnxruntime' wheel), the load fails saying which package
    # to install: never a silent fall back to the CPU. A bad accelerator is
    # refused by validate-config and serve alike.
    repo = tmp_path / "models"
    shutil.copytree(EXAMPLES / "simple", repo / "simple")
    config = repo / "simple" / "config.pbtxt"
    base = config.read_text()
    config.write_text(
        base + "instance_group [ { kind: KIND_GPU count: 1 gpus: [ 1 ] } ]\n"
        'optimization { execution_accelerators { gpu_execution_accelerator [ { name: "tensorrt" '
        'parameters { key: "precision_mode" value: "FP16" } } ] } }\n'
    )
    env = {"TRTIS_GPU_COUNT": "2"}
    for server in running_server(repo, ["--model-control-mode", "explicit"], name="two-GPU server", env=env):
        client = httpclient.InferenceServerClient(server.url)
        with pytest.raises(InferenceServerException) as e:
            client.load_model("simple")
        message = str(e.value)
        assert "placed on GPU 1 (KIND_GPU)" in message and "has no CUDA execution provider" in message, message
        assert "pip install onnxruntime-gpu==" in message, message
        assert not client.is_model_ready("simple")
        # The server's GPUs, as trtis status shows them.
        devices = json.loads(subprocess.run(
            [str(trtis_bin()), "status", "-u", server.url, "--json"], capture_output=True, text=True, timeout=60,
        ).stdout)["devices"]
        assert [(g["id"], g["used"]) for g in devices["gpus"]] == [(0, True), (1, True)], devices
    # --gpus keeps GPU 1 out: the config's id is then refused as Triton
    # refuses an id it does not see.
    for server in running_server(repo, ["--model-control-mode", "explicit", "--gpus", "0"], name="GPU 0 only", env=env):
        client = httpclient.InferenceServerClient(server.url)
        with pytest.raises(InferenceServerException) as e:
            client.load_model("simple")
        assert "specifies invalid or unsupported gpu id 1" in str(e.value) and str(e.value).rstrip().endswith("are: 0"), str(e.value)
    # An accelerator Triton's onnxruntime backend does not know.
    config.write_text(
        base + "instance_group [ { kind: KIND_GPU count: 1 } ]\n"
        'optimization { execution_accelerators { gpu_execution_accelerator [ { name: "gpu_io" } ] } }\n'
    )
    checked = subprocess.run(
        [str(trtis_bin()), "validate-config", str(repo)],
        env={**os.environ, **env}, capture_output=True, text=True, timeout=60,
    )
    assert checked.returncode != 0 and "unknown Execution Accelerator 'gpu_io'" in checked.stdout, checked.stdout
    for server in running_server(repo, ["--model-control-mode", "explicit"], name="two-GPU server", env=env):
        client = httpclient.InferenceServerClient(server.url)
        with pytest.raises(InferenceServerException) as e:
            client.load_model("simple")
        assert "unknown Execution Accelerator 'gpu_io'" in str(e.value), str(e.value)


def test_without_a_cuda_driver_the_server_says_so_and_refuses_a_gpu_id(tmp_path):
    # No libcuda here (CI): discovery finds no GPU and says why; status
    # shows it; --gpus naming a GPU fails the start with the reason.
    repo = tmp_path / "models"
    repo.mkdir()
    _write_identity(repo, "idn", "TYPE_FP32")
    for server in running_server(repo, name="no-GPU server"):
        status = json.loads(subprocess.run(
            [str(trtis_bin()), "status", "-u", server.url, "--json"], capture_output=True, text=True, timeout=60,
        ).stdout)
        devices = status["devices"]
        if devices["gpus"]:
            pytest.skip("this machine has a GPU")
        assert "no CUDA driver: libcuda.so.1 not found" in devices["no_gpu_reason"], devices
    started = subprocess.run(
        [str(trtis_bin()), "serve", "--model-store", str(repo), "--gpus", "0", "--http-port", "0"],
        capture_output=True, text=True, timeout=60,
    )
    assert started.returncode == 2, started.stderr
    assert "--gpus: there is no GPU 0; this machine has no GPU: no CUDA driver" in started.stderr, started.stderr
