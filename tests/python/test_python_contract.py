"""What Triton's own Python-backend tests (qa/L0_backend_python, v2.51.0)
hold a `model.py` to, with our own models against a real `trtis serve`:

- the model's process sees `sys.argv == ['']` (Triton's stub), so a model
  running `unittest.main()` inside `initialize` or `execute` works;
- bad arguments to `pb_utils` raise Triton's exception types: `None` as a
  BLS input or a response output is a TritonModelException, `None` as a
  log level or as a Tensor's array a TypeError;
- a decoupled model's response sent with the final flag is the last one:
  a BLS `exec(decoupled=True)` iterator yields exactly the responses sent
  (an empty one only for a bare final flag), and a gRPC stream with
  `triton_enable_empty_final_response` marks that response final instead
  of adding an empty one;
- an exception an async decoupled `execute` raises after its final flags
  is logged (no client can get it);
- a model process that dies in `initialize` is Triton's "Stub process
  '<instance>' is not healthy.";
- a one-answer model's response sent through the response sender is its
  answer at once (a second send raising in the model takes nothing back);
- a gRPC stream opened with the metadata `triton_grpc_error: true` ends
  with the gRPC status of the first error (Triton's triton_grpc_error
  mode); without it the error is an in-stream message and the stream goes
  on.

Run: TRTIS_BIN=$PWD/target/debug/trtis .venv/bin/python -m pytest tests/python/test_python_contract.py -q
"""

from __future__ import annotations

import json
import queue
import sys

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from trtis_harness import running_server

CONTRACT = '''
import json
import sys
import unittest

import numpy as np
import triton_python_backend_utils as pb_utils


class InModel(unittest.TestCase):
    def test_arithmetic(self):
        self.assertEqual(1 + 1, 2)


def kind_of(call):
    try:
        call()
        return "no error"
    except pb_utils.TritonModelException:
        return "TritonModelException"
    except Exception as e:
        return type(e).__name__


class TritonPythonModel:
    def initialize(self, args):
        # Triton's in-model tests do this: it parses sys.argv.
        self.in_init = unittest.main("model", exit=False, argv=None).result.wasSuccessful()

    def execute(self, requests):
        out = []
        for request in requests:
            info = {
                "argv": sys.argv,
                "unittest_in_initialize": self.in_init,
                "bls_none_input": kind_of(lambda: pb_utils.InferenceRequest(
                    model_name="x", inputs=[None], requested_output_names=["y"])),
                "response_none_output": kind_of(lambda: pb_utils.InferenceResponse(output_tensors=[None])),
                "log_none_level": kind_of(lambda: pb_utils.Logger.log("msg", None)),
                "tensor_none": kind_of(lambda: pb_utils.Tensor("OUTPUT0", None)),
            }
            fail = pb_utils.get_input_tensor_by_name(request, "FAIL")
            if fail is not None and fail.as_numpy().reshape(-1)[0]:
                out.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("asked to fail")))
                continue
            out.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("INFO", np.array([json.dumps(info)], dtype=object))]))
        return out
'''

CONFIG = """name: "contract"
backend: "python"
max_batch_size: 0
input [ { name: "FAIL" data_type: TYPE_BOOL dims: [ 1 ] optional: true } ]
output [ { name: "INFO" data_type: TYPE_STRING dims: [ 1 ] } ]
"""


# Decoupled: N responses, the last one sent with the final flag (no bare
# final flag after it).
FINAL_WITH_LAST = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy().reshape(-1)[0])
            sender = request.get_response_sender()
            for i in range(n):
                out = pb_utils.Tensor("OUT", np.array([i], dtype=np.int32))
                flags = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if i == n - 1 else 0
                sender.send(pb_utils.InferenceResponse([out]), flags=flags)
            if n == 0:
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
'''

FINAL_WITH_LAST_CONFIG = """name: "final_with_last"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "N" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

# BLS into final_with_last: how many responses the iterator yields, and how
# many of them carry no tensor.
BLS_COUNT = '''
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            n = pb_utils.get_input_tensor_by_name(request, "N")
            call = pb_utils.InferenceRequest(
                model_name="final_with_last", inputs=[pb_utils.Tensor("N", n.as_numpy())],
                requested_output_names=["OUT"])
            got = [len(r.output_tensors()) for r in call.exec(decoupled=True)]
            out.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("INFO", np.array([json.dumps(got)], dtype=object))]))
        return out
'''

BLS_COUNT_CONFIG = """name: "bls_count"
backend: "python"
max_batch_size: 0
input [ { name: "N" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "INFO" data_type: TYPE_STRING dims: [ 1 ] } ]
"""


# Decoupled, async: sends the final flag, then raises.
ASYNC_RAISE = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        for request in requests:
            request.get_response_sender().send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        raise ValueError("wait_secs cannot be negative")
'''

ASYNC_RAISE_CONFIG = FINAL_WITH_LAST_CONFIG.replace("final_with_last", "async_raise")

# Not decoupled: answers through the response sender, then sends again
# (which raises, and the exception leaves execute).
SEND_TWICE = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([7], dtype=np.int32))]))
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([8], dtype=np.int32))]))
        return None
'''

SEND_TWICE_CONFIG = FINAL_WITH_LAST_CONFIG.replace("final_with_last", "send_twice").replace(
    "model_transaction_policy { decoupled: true }\n", "")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("contract") / "models"
    for name, model, config in (
        ("contract", CONTRACT, CONFIG),
        ("final_with_last", FINAL_WITH_LAST, FINAL_WITH_LAST_CONFIG),
        ("bls_count", BLS_COUNT, BLS_COUNT_CONFIG),
        ("async_raise", ASYNC_RAISE, ASYNC_RAISE_CONFIG),
        ("send_twice", SEND_TWICE, SEND_TWICE_CONFIG),
    ):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / "model.py").write_text(model)
        (repo / name / "config.pbtxt").write_text(config)
    yield from running_server(repo, ["--python", sys.executable], name="contract server")


def fail_input(mod, fail: bool):
    i = mod.InferInput("FAIL", [1], "BOOL")
    i.set_data_from_numpy(np.array([fail]))
    return [i]


def test_the_model_sees_tritons_argv_and_exception_types(server):
    c = httpclient.InferenceServerClient(server.url)
    info = json.loads(c.infer("contract", fail_input(httpclient, False)).as_numpy("INFO")[0])
    c.close()
    assert info["argv"] == [""]
    assert info["unittest_in_initialize"] is True
    assert info["bls_none_input"] == "TritonModelException"
    assert info["response_none_output"] == "TritonModelException"
    assert info["log_none_level"] == "TypeError"
    assert info["tensor_none"] == "TypeError"


def stream_answers(server, headers, model, requests):
    """Sends each of `requests` (input lists) on one gRPC stream opened with
    `headers`; the (result, error) pairs that came within 20 s each."""
    c = grpcclient.InferenceServerClient(server.grpc_url)
    got: queue.Queue = queue.Queue()
    c.start_stream(callback=lambda result, error: got.put((result, error)), headers=headers)
    for inputs in requests:
        c.async_stream_infer(model, inputs)
    answers = []
    try:
        for _ in requests:
            answers.append(got.get(timeout=20))
    except queue.Empty:
        pass
    c.stop_stream()
    c.close()
    return answers


def fail_answers(server, headers, fails):
    return stream_answers(server, headers, "contract", [fail_input(grpcclient, f) for f in fails])


def test_triton_grpc_error_mode_ends_the_stream_with_the_status(server):
    answers = fail_answers(server, {"triton_grpc_error": "true"}, [False, True, False])
    assert answers[0][1] is None
    error = answers[1][1]
    assert error is not None
    assert error.status() == "StatusCode.INTERNAL", error
    assert "asked to fail" in error.message()
    # The stream ended with it: nothing after.
    assert len(answers) == 2


def test_without_the_mode_an_error_is_in_the_stream(server):
    answers = fail_answers(server, {}, [True, False])
    assert len(answers) == 2
    assert answers[0][1] is not None and "asked to fail" in answers[0][1].message()
    assert answers[1][1] is None


def n_input(mod, n: int):
    i = mod.InferInput("N", [1], "INT32")
    i.set_data_from_numpy(np.array([n], dtype=np.int32))
    return [i]


def test_a_decoupled_bls_call_yields_exactly_the_responses_sent(server):
    c = httpclient.InferenceServerClient(server.url)
    for n, expected in ((3, [1, 1, 1]), (1, [1]), (0, [0])):
        got = json.loads(c.infer("bls_count", n_input(httpclient, n)).as_numpy("INFO")[0])
        # The last response carried the final flag: no empty one after it;
        # a bare final flag (n = 0) is the one empty response.
        assert got == expected, (n, got)
    c.close()


def test_the_response_with_the_final_flag_is_marked_final_on_grpc(server):
    c = grpcclient.InferenceServerClient(server.grpc_url)
    got: queue.Queue = queue.Queue()
    c.start_stream(callback=lambda result, error: got.put((result, error)))
    c.async_stream_infer("final_with_last", n_input(grpcclient, 3), enable_empty_final_response=True)
    flags = []
    for _ in range(3):
        result, error = got.get(timeout=20)
        assert error is None, error
        r = result.get_response()
        flags.append((r.parameters["triton_final_response"].bool_param, len(r.outputs)))
    c.stop_stream()
    c.close()
    assert flags == [(False, 1), (False, 1), (True, 1)]
    assert got.empty(), "no empty final response after the final one"


def test_a_model_whose_process_dies_in_initialize_is_an_unhealthy_stub(tmp_path):
    from trtis_harness import ServerError, TrtisServer

    repo = tmp_path / "models"
    (repo / "init_exit" / "1").mkdir(parents=True)
    (repo / "init_exit" / "1" / "model.py").write_text(
        "import os\n\nclass TritonPythonModel:\n    def initialize(self, args):\n        os._exit(0)\n"
    )
    (repo / "init_exit" / "config.pbtxt").write_text(
        'name: "init_exit"\nbackend: "python"\nmax_batch_size: 0\n'
        'input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        "instance_group [{ kind: KIND_CPU }]\n"
    )
    server = TrtisServer(repo, ["--python", sys.executable], name="init_exit")
    try:
        with pytest.raises(ServerError) as e:
            server.start()
    finally:
        server.kill()
    # Triton's words (qa/L0_backend_python's init_exit case).
    assert "Stub process 'init_exit_0_0' is not healthy." in str(e.value)


def test_an_async_decoupled_execute_that_raises_after_the_final_flag_is_logged(server):
    from trtis_harness import wait_for

    c = grpcclient.InferenceServerClient(server.grpc_url)
    got: queue.Queue = queue.Queue()
    c.start_stream(callback=lambda result, error: got.put((result, error)))
    c.async_stream_infer("async_raise", n_input(grpcclient, 1))
    assert wait_for(
        lambda: any("ValueError: wait_secs cannot be negative" in line for line in server.log_lines()),
        timeout=20,
    ), "\n".join(server.log_lines()[-20:])
    c.stop_stream()
    c.close()


CONTROLLER = '''
import json

import numpy as np
import triton_python_backend_utils as pb_utils

MADE = {
    "name": "made", "backend": "identity", "max_batch_size": 0,
    "input": [{"name": "IN", "data_type": "TYPE_INT32", "dims": [1]}],
    "output": [{"name": "OUT", "data_type": "TYPE_INT32", "dims": [1]}],
}


def attempt(call):
    try:
        return call()
    except pb_utils.TritonModelException as e:
        return "TritonModelException: " + str(e)


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            info = {
                "ready_before": pb_utils.is_model_ready("target"),
                "load": attempt(lambda: pb_utils.load_model("target")),
                "ready_after_load": pb_utils.is_model_ready("target"),
                "load_override": attempt(lambda: pb_utils.load_model(
                    "made", config=json.dumps(MADE), files={"file:1/placeholder": b""})),
                "made_ready": pb_utils.is_model_ready("made", "1"),
                "unload": attempt(lambda: pb_utils.unload_model("target")),
                "ready_after_unload": pb_utils.is_model_ready("target"),
                "missing": attempt(lambda: pb_utils.load_model("no_such_model")),
                "bad_files": attempt(lambda: pb_utils.load_model("made", config="{}", files={"1/x": b""})),
            }
            out.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("INFO", np.array([json.dumps(info)], dtype=object))]))
        return out
'''

TARGET = """name: "target"
backend: "identity"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""


def controller_repo(root):
    repo = root / "models"
    (repo / "controller" / "1").mkdir(parents=True)
    (repo / "controller" / "1" / "model.py").write_text(CONTROLLER)
    (repo / "controller" / "config.pbtxt").write_text(
        CONFIG.replace('"contract"', '"controller"').replace(
            'input [ { name: "FAIL" data_type: TYPE_BOOL dims: [ 1 ] optional: true } ]',
            'input [ { name: "N" data_type: TYPE_INT32 dims: [ 1 ] } ]'))
    (repo / "target" / "1").mkdir(parents=True)
    (repo / "target" / "config.pbtxt").write_text(TARGET)
    return repo


def control_info(server):
    c = httpclient.InferenceServerClient(server.url)
    info = json.loads(c.infer("controller", n_input(httpclient, 1)).as_numpy("INFO")[0])
    c.close()
    return info


def test_a_model_loads_and_unloads_models_in_explicit_mode(tmp_path):
    repo = controller_repo(tmp_path)
    args = ["--python", sys.executable, "--model-control-mode", "explicit", "--load-model", "controller"]
    for server in running_server(repo, args, name="model control"):
        info = control_info(server)
        assert info["ready_before"] is False
        assert info["load"] is None and info["ready_after_load"] is True
        # A model made from a config and files, as a load request's.
        assert info["load_override"] is None and info["made_ready"] is True
        assert info["unload"] is None and info["ready_after_unload"] is False
        assert info["missing"].startswith("TritonModelException: "), info
        assert "file:" in info["bad_files"], info
        c = httpclient.InferenceServerClient(server.url)
        assert c.is_model_ready("made") and not c.is_model_ready("target")
        c.close()


def test_model_control_from_a_model_follows_the_servers_mode(tmp_path):
    repo = controller_repo(tmp_path)
    for server in running_server(repo, ["--python", sys.executable], name="no model control"):
        info = control_info(server)
        # Mode none: every model is loaded at start; loading is refused.
        assert info["ready_before"] is True
        assert "explicit model load / unload is not allowed" in info["load"], info
        assert "explicit model load / unload is not allowed" in info["unload"], info


def test_a_one_answer_models_first_response_is_its_answer(server):
    """A non-decoupled model's response sent through the sender is the
    answer at once: a second send raises in the model, and the exception
    leaving execute takes nothing back (Triton delivers the first)."""
    c = httpclient.InferenceServerClient(server.url)
    assert c.infer("send_twice", n_input(httpclient, 1)).as_numpy("OUT").tolist() == [7]
    c.close()
    answers = stream_answers(server, {}, "send_twice", [n_input(grpcclient, 1)])
    assert answers[0][1] is None and answers[0][0].as_numpy("OUT").tolist() == [7]

