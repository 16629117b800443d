"""A reload that changes only a model's instance groups keeps the instances
it still needs, as Triton's instance update does (Triton's
L0_model_update/instance_update_test.py): only the difference is created
(`initialize` once per new instance) or removed (`finalize` once per
instance that goes), the rest keep serving; a change to the model's files
or to any other part of the config re-creates them all. Counted by a
Python model that appends a line to a file at each `initialize` and
`finalize`, under the default scheduler and the dynamic batcher, through
tritonclient's model-control API (explicit mode).

Run: .venv/bin/python -m pytest tests/python/test_instance_update.py -q
"""

from __future__ import annotations

import sys
import threading
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from trtis_harness import grpc_client_for, running_server

MODEL_PY = '''
import os
import time
import numpy as np
import triton_python_backend_utils as pb_utils

LOG = os.environ.get("COUNT_LOG") or os.path.join(os.path.dirname(__file__), "..", "..", "counts.log")


def note(what):
    with open(LOG, "a") as f:
        f.write(what + "\\n")


class TritonPythonModel:
    def initialize(self, args):
        note("initialize")

    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            if x.size and x.flat[0] < 0:
                time.sleep(3)  # a slow request
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x)]))
        return out

    def finalize(self):
        note("finalize")
'''


def config(groups: str, batching: bool) -> str:
    head = 'backend: "python"\n'
    if batching:
        head += "max_batch_size: 8\ndynamic_batching { }\n"
        dims = "[ 4 ]"
    else:
        head += "max_batch_size: 0\n"
        dims = "[ -1 ]"
    return (
        head
        + f'input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: {dims} }} ]\n'
        + f'output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: {dims} }} ]\n'
        + f"instance_group [ {groups} ]\n"
    )


def cpu(count: int, name: str = "") -> str:
    named = f'name: "{name}" ' if name else ""
    return f"{{ {named}count: {count} kind: KIND_CPU }}"


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("instance_update")
    repo = root / "models"
    (repo / "counted" / "1").mkdir(parents=True)
    (repo / "counted" / "1" / "model.py").write_text(MODEL_PY)
    (repo / "counted" / "config.pbtxt").write_text(config(cpu(1), False))
    return repo


@pytest.fixture(scope="module")
def server(repo):
    args = ["--python", sys.executable, "--model-control-mode", "explicit"]
    yield from running_server(repo, args, name="instance-update server")


@pytest.fixture()
def client(server, repo):
    c = grpc_client_for(server)
    yield c
    try:
        c.unload_model("counted")
    finally:
        c.close()


def counts(repo) -> tuple[int, int]:
    log = repo / "counts.log"
    lines = log.read_text().split() if log.exists() else []
    return lines.count("initialize"), lines.count("finalize")


def wait_counts(repo, want: tuple[int, int]) -> tuple[int, int]:
    """Finalize runs as the old instances drain: polled up to 20 s."""
    deadline = time.monotonic() + 20
    while counts(repo) != want and time.monotonic() < deadline:
        time.sleep(0.05)
    return counts(repo)


def infer(client, batching: bool) -> None:
    shape = [1, 4] if batching else [4]
    x = np.arange(4, dtype=np.float32).reshape(shape)
    i = grpcclient.InferInput("INPUT0", shape, "FP32")
    i.set_data_from_numpy(x)
    np.testing.assert_array_equal(client.infer("counted", [i]).as_numpy("OUTPUT0"), x)


def reload(client, repo, groups: str, batching: bool) -> None:
    (repo / "counted" / "config.pbtxt").write_text(config(groups, batching))
    client.load_model("counted")
    infer(client, batching)


@pytest.mark.parametrize("batching", [False, True], ids=["default", "dynamic"])
def test_only_the_difference_is_created_or_removed(server, client, repo, batching):
    (repo / "counts.log").unlink(missing_ok=True)
    reload(client, repo, cpu(3), batching)
    assert counts(repo) == (3, 0)
    # Requests keep coming while the instances change (Triton's test does
    # the same); every one is answered.
    stop = threading.Event()
    errors: list[Exception] = []

    def keep_inferring():
        c = grpc_client_for(server)
        try:
            while not stop.is_set():
                infer(c, batching)
        except Exception as e:  # reported below
            errors.append(e)
        finally:
            c.close()

    background = threading.Thread(target=keep_inferring)
    background.start()
    try:
        # One more: one initialize, nothing finalized.
        reload(client, repo, cpu(4), batching)
        assert counts(repo) == (4, 0)
        # Two fewer: no initialize, two finalized by the time the load
        # returns, as in Triton.
        reload(client, repo, cpu(2), batching)
        assert counts(repo) == (4, 2)
    finally:
        stop.set()
        background.join(30)
    assert not errors, errors
    # Nothing changed: nothing created or removed.
    reload(client, repo, cpu(2), batching)
    assert wait_counts(repo, (4, 2)) == (4, 2)
    # Renamed groups keep their instances (Triton's instance signature is
    # where an instance runs, not its name).
    reload(client, repo, f"{cpu(1, 'a')}, {cpu(1, 'b')}", batching)
    assert wait_counts(repo, (4, 2)) == (4, 2)
    client.unload_model("counted")
    assert wait_counts(repo, (4, 4)) == (4, 4)


def test_another_change_recreates_every_instance(client, repo):
    (repo / "counts.log").unlink(missing_ok=True)
    reload(client, repo, cpu(2), False)
    assert counts(repo) == (2, 0)
    # A change to the model's file: every instance made again.
    model_py = repo / "counted" / "1" / "model.py"
    model_py.write_text(MODEL_PY + "\n# changed\n")
    reload(client, repo, cpu(2), False)
    assert wait_counts(repo, (4, 2)) == (4, 2)
    # A change elsewhere in the config (batching): the same.
    reload(client, repo, cpu(2), True)
    assert wait_counts(repo, (6, 4)) == (6, 4)


def test_adding_instances_does_not_wait_for_requests_in_flight(server, client, repo):
    """Triton's test_update_while_inferencing: a slow request on the old
    instance does not hold up an update that only adds one."""
    (repo / "counts.log").unlink(missing_ok=True)
    reload(client, repo, cpu(1), False)
    slow = grpc_client_for(server)
    x = -np.ones(4, dtype=np.float32)
    i = grpcclient.InferInput("INPUT0", [4], "FP32")
    i.set_data_from_numpy(x)
    done = threading.Event()

    def slow_request():
        slow.infer("counted", [i])
        done.set()

    t = threading.Thread(target=slow_request)
    t.start()
    time.sleep(0.5)  # the request is running
    (repo / "counted" / "config.pbtxt").write_text(config(cpu(2), False))
    client.load_model("counted")
    # The load came back while the slow request still ran.
    assert not done.is_set()
    assert counts(repo) == (2, 0)
    t.join(30)
    assert done.is_set()
    slow.close()
    infer(client, False)
