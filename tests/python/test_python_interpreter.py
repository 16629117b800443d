"""A Python model whose interpreter cannot run the Python backend (it has no
numpy), as a new user meets it: `python3` on PATH without numpy.

The model's load error, in the log, in the repository index (HTTP and
gRPC, state UNAVAILABLE with the reason) and in the load API's answer,
says what is missing (numpy) and how to point trtis at an interpreter that
has it (--python). The interpreter is a venv made in the test's tmp dir
without pip, so it has no numpy whatever the machine has.

Run: TRTIS_BIN=$PWD/target/debug/trtis .venv/bin/python -m pytest tests/python/test_python_interpreter.py -q
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from trtis_harness import grpc_client_for, running_server

MODEL = "py_identity"

CONFIG = f"""
name: "{MODEL}"
backend: "python"
max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
"""

MODEL_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]
            )
            for r in requests
        ]
"""


@pytest.fixture(scope="module")
def no_numpy_python(tmp_path_factory) -> Path:
    """A Python interpreter that cannot import numpy."""
    venv = tmp_path_factory.mktemp("nonumpy") / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    python = venv / "bin" / "python3"
    found = subprocess.run([str(python), "-c", "import numpy"], capture_output=True)
    assert found.returncode != 0, "the venv made without pip has numpy"
    return python


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("interp") / "models"
    (repo / MODEL / "1").mkdir(parents=True)
    (repo / MODEL / "config.pbtxt").write_text(CONFIG)
    (repo / MODEL / "1" / "model.py").write_text(MODEL_PY)
    return repo


def serve(repo, python, *args):
    """A server that stays up with the model failed (not ready)."""
    return running_server(
        repo,
        ["--python", str(python), "--exit-on-error=false", "--strict-readiness=false", *args],
        name="no-numpy server",
    )


def assert_says_what_to_do(reason: str, python: Path) -> None:
    assert "numpy" in reason, reason
    assert "No module named 'numpy'" in reason, reason
    assert str(python) in reason, reason
    assert "--python" in reason, reason
    assert "TRTIS_PYTHON" in reason, reason


def http_index_entry(server) -> dict:
    status, _, body = server.post_json("/v2/repository/index", {})
    assert status == 200, body
    entries = [e for e in json.loads(body) if e["name"] == MODEL]
    assert len(entries) == 1, entries
    return entries[0]


def grpc_index_entry(server) -> dict:
    client = grpc_client_for(server)
    try:
        index = client.get_model_repository_index(as_json=True)
    finally:
        client.close()
    entries = [e for e in index.get("models", []) if e["name"] == MODEL]
    assert len(entries) == 1, index
    return entries[0]


# Auto-complete on (the default: the config is completed by a worker
# first) and off (the failure comes at the version's load).
MODES = [
    pytest.param([], id="default"),
    pytest.param(["--disable-auto-complete-config"], id="no-auto-complete"),
]


@pytest.mark.parametrize("extra", MODES)
def test_index_says_unavailable_and_why(repo, no_numpy_python, extra):
    for server in serve(repo, no_numpy_python, *extra):
        entry = http_index_entry(server)
        assert entry["state"] == "UNAVAILABLE", entry
        assert_says_what_to_do(entry["reason"], no_numpy_python)
        entry = grpc_index_entry(server)
        assert entry["state"] == "UNAVAILABLE", entry
        assert_says_what_to_do(entry["reason"], no_numpy_python)
        # The log says the same.
        log = "\n".join(server.log_lines())
        assert "has no numpy" in log and "--python PATH" in log, server.log_tail()


def test_explicit_load_says_why(repo, no_numpy_python):
    for server in serve(
        repo, no_numpy_python, "--model-control-mode=explicit", f"--load-model={MODEL}"
    ):
        entry = http_index_entry(server)
        assert entry["state"] == "UNAVAILABLE", entry
        assert_says_what_to_do(entry["reason"], no_numpy_python)
        # Loading again through the API fails with the same words.
        status, _, body = server.post_json(f"/v2/repository/models/{MODEL}/load", {})
        assert status >= 400, body
        error = json.loads(body)["error"]
        assert_says_what_to_do(error, no_numpy_python)
        entry = http_index_entry(server)
        assert entry["state"] == "UNAVAILABLE", entry
        assert_says_what_to_do(entry["reason"], no_numpy_python)
        entry = grpc_index_entry(server)
        assert entry["state"] == "UNAVAILABLE", entry
        assert_says_what_to_do(entry["reason"], no_numpy_python)


def test_explicit_load_of_a_model_never_loaded_says_why(repo, no_numpy_python):
    for server in serve(repo, no_numpy_python, "--model-control-mode=explicit"):
        # Never loaded: listed by name only, as Triton lists it.
        assert http_index_entry(server) == {"name": MODEL}
        status, _, body = server.post_json(f"/v2/repository/models/{MODEL}/load", {})
        assert status >= 400, body
        assert_says_what_to_do(json.loads(body)["error"], no_numpy_python)
        entry = http_index_entry(server)
        assert entry["state"] == "UNAVAILABLE", entry
        assert_says_what_to_do(entry["reason"], no_numpy_python)
