"""What Triton's own Python-backend tests (qa/L0_backend_python, v2.51.0)
hold a `model.py` to, with our own models against a real `trtis serve`:

- the model's process sees `sys.argv == ['']` (Triton's stub), so a model
  running `unittest.main()` inside `initialize` or `execute` works;
- bad arguments to `pb_utils` raise Triton's exception types: `None` as a
  BLS input or a response output is a TritonModelException, `None` as a
  log level or as a Tensor's array a TypeError;
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


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("contract") / "models"
    (repo / "contract" / "1").mkdir(parents=True)
    (repo / "contract" / "1" / "model.py").write_text(CONTRACT)
    (repo / "contract" / "config.pbtxt").write_text(CONFIG)
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


def stream_answers(server, headers, fails):
    c = grpcclient.InferenceServerClient(server.grpc_url)
    got: queue.Queue = queue.Queue()
    c.start_stream(callback=lambda result, error: got.put((result, error)), headers=headers)
    for f in fails:
        c.async_stream_infer("contract", fail_input(grpcclient, f))
    answers = []
    try:
        for _ in fails:
            answers.append(got.get(timeout=20))
    except queue.Empty:
        pass
    c.stop_stream()
    c.close()
    return answers


def test_triton_grpc_error_mode_ends_the_stream_with_the_status(server):
    answers = stream_answers(server, {"triton_grpc_error": "true"}, [False, True, False])
    assert answers[0][1] is None
    error = answers[1][1]
    assert error is not None
    assert error.status() == "StatusCode.INTERNAL", error
    assert "asked to fail" in error.message()
    # The stream ended with it: nothing after.
    assert len(answers) == 2


def test_without_the_mode_an_error_is_in_the_stream(server):
    answers = stream_answers(server, {}, [True, False])
    assert len(answers) == 2
    assert answers[0][1] is not None and "asked to fail" in answers[0][1].message()
    assert answers[1][1] is None
