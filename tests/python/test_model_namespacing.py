"""`--model-namespacing=true`: two repositories may hold models of the same
name. Each repository is a namespace: a name that one repository has is
served as before; a name that several have is ambiguous to a client (400 /
INVALID_ARGUMENT with Triton's message about ambiguity) and is reached
through the ensembles of its own repository, whose steps prefer their own
repository's model and otherwise take the one model of that name. The
scenarios are those of Triton's L0_model_namespacing (no duplicate names, a
duplicated composing model, a duplicated ensemble, and a composing model
that leaves its repository and comes back), each under polling and under
explicit model control, with models written here: Python models over INT32
vectors of 16, "addsub" (OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 -
INPUT1) and "subadd" (the other way round). The metrics get a `namespace`
label with the repository path.

Run: TRTIS_BIN=$PWD/target/debug/trtis .venv/bin/python -m pytest \
     tests/python/test_model_namespacing.py -q
"""

from __future__ import annotations

import shutil
import sys
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

from trtis_harness import (
    TrtisServer,
    free_port,
    grpc_client_for,
    start_or_fail,
    stop_and_check,
    wait_for,
)

MODEL_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            first, second = (a + b, a - b) if {add_first} else (a - b, a + b)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", first.astype(np.int32)),
                pb_utils.Tensor("OUTPUT1", second.astype(np.int32)),
            ]))
        return responses
"""

TENSORS = """
input [
  {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }},
  {{ name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }}
]
output [
  {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }},
  {{ name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] }}
]
"""

PYTHON_CONFIG = 'name: "{name}"\nbackend: "python"\n' + TENSORS + "instance_group [ {{ kind: KIND_CPU }} ]\n"

ENSEMBLE_CONFIG = 'name: "{name}"\nplatform: "ensemble"\n' + TENSORS + """
ensemble_scheduling {{
  step [
    {{
      model_name: "{step}"
      model_version: -1
      input_map {{ key: "INPUT0" value: "INPUT0" }}
      input_map {{ key: "INPUT1" value: "INPUT1" }}
      output_map {{ key: "OUTPUT0" value: "OUTPUT0" }}
      output_map {{ key: "OUTPUT1" value: "OUTPUT1" }}
    }}
  ]
}}
"""

DATA = np.arange(16, dtype=np.int32)
ADD, SUB = DATA + DATA, DATA - DATA


def python_model(repo, name, add_first):
    d = repo / name
    (d / "1").mkdir(parents=True)
    (d / "config.pbtxt").write_text(PYTHON_CONFIG.format(name=name))
    (d / "1" / "model.py").write_text(MODEL_PY.format(add_first=add_first))


def ensemble(repo, name, step):
    d = repo / name
    (d / "1").mkdir(parents=True)
    (d / "config.pbtxt").write_text(ENSEMBLE_CONFIG.format(name=name, step=step))


def repositories(tmp_path, scenario):
    """Triton's four layouts of addsub_repo and subadd_repo."""
    a, b = tmp_path / "addsub_repo", tmp_path / "subadd_repo"
    a.mkdir()
    b.mkdir()
    if scenario == "no_duplication":
        ensemble(a, "simple_addsub", "composing_addsub")
        python_model(a, "composing_addsub", True)
        ensemble(b, "simple_subadd", "composing_subadd")
        python_model(b, "composing_subadd", False)
    elif scenario in ("duplication", "dynamic_resolution"):
        ensemble(a, "simple_addsub", "composing_model")
        python_model(a, "composing_model", True)
        ensemble(b, "simple_subadd", "composing_model")
        python_model(b, "composing_model", False)
    elif scenario == "ensemble_duplication":
        ensemble(a, "simple_ensemble", "composing_addsub")
        python_model(a, "composing_addsub", True)
        ensemble(b, "simple_ensemble", "composing_subadd")
        python_model(b, "composing_subadd", False)
    return a, b


def infer(client, model, module=httpclient):
    inputs = [module.InferInput("INPUT0", [16], "INT32"), module.InferInput("INPUT1", [16], "INT32")]
    for i in inputs:
        i.set_data_from_numpy(DATA)
    result = client.infer(model, inputs)
    return result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1")


def assert_addsub(client, model):
    out0, out1 = infer(client, model)
    np.testing.assert_array_equal(out0, ADD, err_msg=model)
    np.testing.assert_array_equal(out1, SUB, err_msg=model)


def assert_subadd(client, model):
    out0, out1 = infer(client, model)
    np.testing.assert_array_equal(out0, SUB, err_msg=model)
    np.testing.assert_array_equal(out1, ADD, err_msg=model)


def assert_ambiguous(client, model):
    with pytest.raises(InferenceServerException) as e:
        infer(client, model)
    assert e.value.status() == "400", e.value
    assert "ambiguity" in e.value.message(), e.value.message()
    assert f"There are 2 identifiers of model '{model}'" in e.value.message()


def serve(a, b, mode):
    metrics_port = free_port()
    args = ["--python", sys.executable, "--model-namespacing=true", "--model-store", str(b),
            "--metrics-port", str(metrics_port)]
    if mode == "poll":
        args += ["--model-control-mode=poll", "--repository-poll-secs=1"]
    else:
        args += ["--model-control-mode=explicit"]
    server = start_or_fail(TrtisServer(a, args, name=f"namespacing ({mode})"))
    server.metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
    return server


def polled(client, model, check):
    """Waits until `check(client, model)` passes (the next polls)."""

    def passes():
        try:
            check(client, model)
            return True
        except (AssertionError, InferenceServerException):
            return False

    assert wait_for(passes, timeout=20, interval=0.2), f"{model}: not as expected after polling"


MODES = ["poll", "explicit"]


@pytest.mark.parametrize("mode", MODES)
def test_no_duplication(tmp_path, mode):
    a, b = repositories(tmp_path, "no_duplication")
    server = serve(a, b, mode)
    try:
        client = httpclient.InferenceServerClient(server.url)
        if mode == "explicit":
            for m in ["simple_addsub", "simple_subadd"]:
                client.load_model(m)
        assert client.is_server_ready()
        for m in ["simple_addsub", "composing_addsub"]:
            assert_addsub(client, m)
        for m in ["simple_subadd", "composing_subadd"]:
            assert_subadd(client, m)
    finally:
        stop_and_check(server)


@pytest.mark.parametrize("mode", MODES)
def test_duplication(tmp_path, mode):
    a, b = repositories(tmp_path, "duplication")
    server = serve(a, b, mode)
    try:
        client = httpclient.InferenceServerClient(server.url)
        if mode == "explicit":
            for m in ["simple_addsub", "simple_subadd"]:
                client.load_model(m)
        assert client.is_server_ready()
        # Each ensemble runs the composing model of its own repository.
        assert_addsub(client, "simple_addsub")
        assert_subadd(client, "simple_subadd")
        assert_ambiguous(client, "composing_model")
        # The same over gRPC, and the model is not ready by that name.
        grpc = grpc_client_for(server)
        with pytest.raises(InferenceServerException) as e:
            infer(grpc, "composing_model", grpcclient)
        assert e.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert "ambiguity" in e.value.message()
        assert not client.is_model_ready("composing_model")
        # The index lists both, under the one name.
        index = [m for m in client.get_model_repository_index() if m["name"] == "composing_model"]
        assert [m.get("state") for m in index] == ["READY", "READY"], index
        # Their metrics tell them apart by namespace.
        if mode == "poll":
            families = metric_families(server)
            series = [
                s.labels for s in families["nv_inference_request_success"].samples
                if s.labels["model"] == "composing_model"
            ]
            assert sorted(s["namespace"] for s in series) == sorted([str(a), str(b)]), series
            assert all("namespace" in s.labels for f in families.values() for s in f.samples
                       if "model" in s.labels)
    finally:
        stop_and_check(server)


@pytest.mark.parametrize("mode", MODES)
def test_ensemble_duplication(tmp_path, mode):
    a, b = repositories(tmp_path, "ensemble_duplication")
    server = serve(a, b, mode)
    try:
        client = httpclient.InferenceServerClient(server.url)
        if mode == "explicit":
            # One load brings the ensemble of each repository, and each
            # brings its own composing model.
            client.load_model("simple_ensemble")
        assert client.is_server_ready()
        assert_addsub(client, "composing_addsub")
        assert_subadd(client, "composing_subadd")
        assert_ambiguous(client, "simple_ensemble")
        if mode == "explicit":
            # Unloading the name unloads both; the composing models stay.
            client.unload_model("simple_ensemble")
            with pytest.raises(InferenceServerException):
                infer(client, "simple_ensemble")
            assert_addsub(client, "composing_addsub")
    finally:
        stop_and_check(server)


@pytest.mark.parametrize("mode", MODES)
def test_dynamic_resolution(tmp_path, mode):
    """The composing model leaves addsub_repo: both ensembles take the one
    left (subadd); it comes back: each ensemble takes its own again."""
    a, b = repositories(tmp_path, "dynamic_resolution")
    moved = tmp_path / "composing_model"
    server = serve(a, b, mode)
    try:
        client = httpclient.InferenceServerClient(server.url)
        if mode == "explicit":
            shutil.move(a / "composing_model", moved)
            for m in ["simple_addsub", "simple_subadd"]:
                client.load_model(m)
            for m in ["simple_subadd", "simple_addsub", "composing_model"]:
                assert_subadd(client, m)
            shutil.move(moved, a / "composing_model")
            client.load_model("simple_addsub")
        else:
            assert_addsub(client, "simple_addsub")
            shutil.move(a / "composing_model", moved)
            polled(client, "simple_addsub", assert_subadd)
            for m in ["simple_subadd", "composing_model"]:
                assert_subadd(client, m)
            shutil.move(moved, a / "composing_model")
            polled(client, "simple_addsub", assert_addsub)
        assert_addsub(client, "simple_addsub")
        assert_subadd(client, "simple_subadd")
        assert_ambiguous(client, "composing_model")
    finally:
        stop_and_check(server)


def test_unknown_model_is_invalid_argument(tmp_path):
    """With namespacing an unknown name is INVALID_ARG (400), as Triton's
    lookup of the name answers."""
    a, b = repositories(tmp_path, "no_duplication")
    server = serve(a, b, "explicit")
    try:
        client = httpclient.InferenceServerClient(server.url)
        with pytest.raises(InferenceServerException) as e:
            infer(client, "no_such_model")
        assert e.value.status() == "400"
        assert "Request for unknown model: 'no_such_model' is not found" in e.value.message()
    finally:
        stop_and_check(server)


def metric_families(server):
    text = urllib.request.urlopen(server.metrics_url, timeout=10).read().decode()
    return {f.name: f for f in text_string_to_metric_families(text)}
