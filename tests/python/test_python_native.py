"""The Python backend's worker with and without its native core
(`lib_trtis_native.so`, backends/python-native) through a real `trtis
serve` and Triton's own client: the server passes the library beside its
executable to each worker (`--native PATH`), TRTIS_PYTHON_NATIVE names
another or (`0`) none, and a worker that cannot load it says why in the
server log and serves in pure Python. The worker's behaviour in both modes
is tested frame by frame in test_python_worker.py; here the point is that
the server's choice reaches the worker and add_sub answers the same.

Run: TRTIS_BIN=$PWD/target/debug/trtis .venv/bin/python -m pytest \
     tests/python/test_python_native.py -q
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from trtis_harness import EXAMPLES, running_server, trtis_bin, wait_for

NATIVE_BESIDE = trtis_bin().parent / "lib_trtis_native.so"
PYTHON = ["--python", sys.executable]


def workers_of(server) -> list[int]:
    kids = []
    for task in os.listdir(f"/proc/{server.proc.pid}/task"):
        kids += [int(k) for k in Path(f"/proc/{server.proc.pid}/task/{task}/children").read_text().split()]
    return kids


def maps_native(pid: int) -> bool:
    return "lib_trtis_native.so" in Path(f"/proc/{pid}/maps").read_text()


def add_sub(server) -> None:
    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.port}")
    a = np.array([1, 2, 3, 4], np.float32)
    b = np.array([0.5, 0.25, 2, 8], np.float32)
    inputs = [httpclient.InferInput("INPUT0", [4], "FP32"), httpclient.InferInput("INPUT1", [4], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b, binary_data=False)
    result = client.infer("add_sub", inputs)
    assert result.as_numpy("OUTPUT0").tolist() == (a + b).tolist()
    assert result.as_numpy("OUTPUT1").tolist() == (a - b).tolist()


@pytest.fixture
def repo(tmp_path):
    shutil.copytree(EXAMPLES / "add_sub", tmp_path / "repo" / "add_sub",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path / "repo"


def test_the_worker_runs_with_the_native_core_beside_the_server(repo):
    if not NATIVE_BESIDE.is_file():
        if os.environ.get("TRTIS_REQUIRE_PYTHON") == "1":
            pytest.fail(f"{NATIVE_BESIDE} is missing (cargo build --workspace)")
        pytest.skip(f"{NATIVE_BESIDE} is not built (cargo build --workspace)")
    for server in running_server(repo, PYTHON, env={"TRTIS_PYTHON_NATIVE": None}):
        add_sub(server)
        (worker,) = workers_of(server)
        assert maps_native(worker)


def test_trtis_python_native_0_runs_the_worker_in_pure_python(repo):
    for server in running_server(repo, PYTHON, env={"TRTIS_PYTHON_NATIVE": "0"}):
        add_sub(server)
        (worker,) = workers_of(server)
        assert not maps_native(worker)


def test_a_native_core_that_does_not_load_is_reported_and_pure_python_serves(repo, tmp_path):
    bogus = tmp_path / "lib_trtis_native.so"
    bogus.write_bytes(b"\x7fELF but not really")
    for server in running_server(repo, PYTHON, env={"TRTIS_PYTHON_NATIVE": str(bogus)}):
        add_sub(server)
        (worker,) = workers_of(server)
        assert not maps_native(worker)
        wait_for(lambda: any(f"native core {bogus} did not load" in line for line in server.log_lines()))
        # Each worker says so (the instance's, and the short-lived one that
        # asked the model for auto_complete_config).
        for line in [line for line in server.log_lines() if "did not load" in line]:
            assert "the worker runs in pure Python" in line, line
