"""Request rescheduling and iterative sequences (Triton's Python backend
README, "Request Rescheduling"; qa/L0_backend_python/request_rescheduling),
with our own models against a real `trtis serve`:

- with `sequence_batching { iterative_sequence: true }` a request without
  a correlation id starts a sequence of its own (START on its first run);
- `request.set_release_flags(TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)` runs
  the request again, neither START nor END, with the same correlation id:
  a decoupled model's gRPC stream goes on across the runs, a default-mode
  model answers on a later run;
- a rescheduled request keeps its sequence's place: with one place, a
  second request waits until the first is released;
- a default-mode model that returns a response for a rescheduled request
  fails the batch with Triton's message; a model without
  `iterative_sequence` that reschedules fails the request with Triton's
  reason (and the server logs it), and the server goes on.

Run: TRTIS_BIN=$PWD/target/debug/trtis .venv/bin/python -m pytest tests/python/test_python_reschedule.py -q
"""

from __future__ import annotations

import queue
import sys
import threading

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from trtis_harness import running_server

# Decoupled: N in, sends N responses (OUT counts down to 0), one per run,
# rescheduling between them. Each response carries the run's flags and
# correlation id, and the model's running count of executions (ORDER).
COUNTDOWN = '''
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

ORDER = [0]


class TritonPythonModel:
    def initialize(self, args):
        self.left = {}

    def execute(self, requests):
        for request in requests:
            ORDER[0] += 1
            cid = request.correlation_id()
            if request.flags() & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START:
                self.left[cid] = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy()[0])
            time.sleep(float(pb_utils.get_input_tensor_by_name(request, "WAIT").as_numpy()[0]))
            self.left[cid] -= 1
            outs = [
                pb_utils.Tensor("OUT", np.array([self.left[cid]], np.int32)),
                pb_utils.Tensor("FLAGS", np.array([request.flags()], np.int32)),
                pb_utils.Tensor("CORRID", np.array([cid], np.uint64)),
                pb_utils.Tensor("ORDER", np.array([ORDER[0]], np.int32)),
            ]
            sender = request.get_response_sender()
            if self.left[cid] <= 0:
                del self.left[cid]
                sender.send(pb_utils.InferenceResponse(outs),
                            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            else:
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                sender.send(pb_utils.InferenceResponse(outs))
        return None
'''

COUNTDOWN_CONFIG = """name: "countdown"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "N" data_type: TYPE_INT32 dims: [ 1 ] },
        { name: "WAIT" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] },
         { name: "FLAGS" data_type: TYPE_INT32 dims: [ 1 ] },
         { name: "CORRID" data_type: TYPE_UINT64 dims: [ 1 ] },
         { name: "ORDER" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching { iterative_sequence: true }
instance_group [ { kind: KIND_CPU count: 1 } ]
"""

# Default mode: reschedules each request's first run (returning None for
# it) and answers on the second; RUNS says how many runs it took.
ADD_LATER = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.runs = {}

    def execute(self, requests):
        out = []
        for request in requests:
            cid = request.correlation_id()
            self.runs[cid] = self.runs.get(cid, 0) + 1
            if self.runs[cid] == 1:
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                out.append(None)
                continue
            a = pb_utils.get_input_tensor_by_name(request, "A").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "B").as_numpy()
            out.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("SUM", a + b),
                pb_utils.Tensor("RUNS", np.array([self.runs.pop(cid)], np.int32)),
            ]))
        return out
'''

ADD_CONFIG = """name: "{name}"
backend: "python"
input [ {{ name: "A" data_type: TYPE_FP32 dims: [ 4 ] }},
        {{ name: "B" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "SUM" data_type: TYPE_FP32 dims: [ 4 ] }},
         {{ name: "RUNS" data_type: TYPE_INT32 dims: [ 1 ] }} ]
{scheduling}
instance_group [ {{ kind: KIND_CPU }} ]
"""

# Reschedules every request and still returns a response for it (Triton's
# wrong_return_type), or, without iterative_sequence, reschedules its first
# request only.
RESCHEDULE_AND_ANSWER = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.first = True

    def execute(self, requests):
        out = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "A").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "B").as_numpy()
            response = pb_utils.InferenceResponse([
                pb_utils.Tensor("SUM", a + b), pb_utils.Tensor("RUNS", np.array([1], np.int32))])
            if self.first or {always}:
                self.first = False
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                out.append({answer})
            else:
                out.append(response)
        return out
'''

ITERATIVE = "sequence_batching { iterative_sequence: true }"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("reschedule") / "models"
    models = {
        "countdown": (COUNTDOWN, COUNTDOWN_CONFIG),
        "add_later": (ADD_LATER, ADD_CONFIG.format(name="add_later", scheduling=ITERATIVE)),
        "wrong_return": (
            RESCHEDULE_AND_ANSWER.format(always="True", answer="response"),
            ADD_CONFIG.format(name="wrong_return", scheduling=ITERATIVE),
        ),
        "not_iterative": (
            RESCHEDULE_AND_ANSWER.format(always="False", answer="None"),
            ADD_CONFIG.format(name="not_iterative", scheduling=""),
        ),
    }
    for name, (model, config) in models.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / "model.py").write_text(model)
        (repo / name / "config.pbtxt").write_text(config)
    yield from running_server(repo, ["--python", sys.executable], name="reschedule server")


def countdown_inputs(n: int, wait: float = 0.0):
    a = grpcclient.InferInput("N", [1], "INT32")
    a.set_data_from_numpy(np.array([n], dtype=np.int32))
    b = grpcclient.InferInput("WAIT", [1], "FP32")
    b.set_data_from_numpy(np.array([wait], dtype=np.float32))
    return [a, b]


def countdown(server, n: int, wait: float = 0.0, started: threading.Event | None = None):
    """The (OUT, FLAGS, CORRID, ORDER) of each response to one request of
    `n` on its own gRPC stream."""
    c = grpcclient.InferenceServerClient(server.grpc_url)
    got: queue.Queue = queue.Queue()
    c.start_stream(callback=lambda result, error: got.put((result, error)))
    c.async_stream_infer("countdown", countdown_inputs(n, wait))
    rows = []
    for _ in range(n):
        result, error = got.get(timeout=30)
        assert error is None, error
        rows.append(tuple(int(result.as_numpy(o)[0]) for o in ("OUT", "FLAGS", "CORRID", "ORDER")))
        if started is not None:
            started.set()
    c.stop_stream()
    c.close()
    assert got.empty(), "no response after the final one"
    return rows


def test_a_decoupled_request_runs_again_on_its_stream_until_released(server):
    rows = countdown(server, 3)
    assert [r[0] for r in rows] == [2, 1, 0]
    # START on the first run only; the rescheduled runs are neither START
    # nor END.
    assert [r[1] for r in rows] == [1, 0, 0]
    ids = {r[2] for r in rows}
    assert len(ids) == 1 and 0 not in ids, rows
    # The next request starts a sequence of its own.
    again = countdown(server, 1)
    assert again[0][:2] == (0, 1) and again[0][2] not in ids


def test_a_rescheduled_request_keeps_its_place(server):
    """One instance, no batching: one place. A second request sent while
    the first is rescheduling waits until the first is released."""
    started = threading.Event()
    first: list = []
    t = threading.Thread(target=lambda: first.extend(countdown(server, 3, 0.3, started)))
    t.start()
    assert started.wait(30)
    second = countdown(server, 1)
    t.join(60)
    assert len(first) == 3
    assert second[0][3] > max(r[3] for r in first), (first, second)


def add_inputs(mod):
    a = mod.InferInput("A", [4], "FP32")
    a.set_data_from_numpy(np.arange(4, dtype=np.float32))
    b = mod.InferInput("B", [4], "FP32")
    b.set_data_from_numpy(np.full(4, 10, dtype=np.float32))
    return [a, b]


@pytest.mark.parametrize("mod", [httpclient, grpcclient], ids=["http", "grpc"])
def test_a_default_mode_request_is_answered_on_a_later_run(server, mod):
    url = server.url if mod is httpclient else server.grpc_url
    c = mod.InferenceServerClient(url)
    r = c.infer("add_later", add_inputs(mod))
    c.close()
    assert r.as_numpy("SUM").tolist() == [10, 11, 12, 13]
    assert r.as_numpy("RUNS").tolist() == [2]


def test_a_response_for_a_rescheduled_request_fails_the_batch(server):
    c = httpclient.InferenceServerClient(server.url)
    with pytest.raises(InferenceServerException) as e:
        c.infer("wrong_return", add_inputs(httpclient))
    c.close()
    assert "Expected a None object in the execute function return list for reschduled request" in str(e.value)


def test_a_reschedule_without_iterative_sequences_is_refused(server):
    c = httpclient.InferenceServerClient(server.url)
    with pytest.raises(InferenceServerException) as e:
        c.infer("not_iterative", add_inputs(httpclient))
    assert e.value.status() == "400", e.value
    assert "while the model is not configured to handle such a flag" in str(e.value)
    # The model and the server go on.
    assert c.infer("not_iterative", add_inputs(httpclient)).as_numpy("SUM").tolist() == [10, 11, 12, 13]
    c.close()
    assert any("Failed to release request" in line for line in server.log_lines())
