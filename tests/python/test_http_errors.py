"""Error answers: HTTP status and a `{"error": "..."}` body carrying the key
part of Triton's own message. After every error the server must still be
ready (autouse fixture below).

Where each message comes from (Triton sources; the statuses come from
server src/http_server.cc HttpCodeFromError: INVALID_ARG -> 400,
NOT_FOUND -> 404, INTERNAL -> 500, UNAVAILABLE -> 503):

  unknown model / version   core src/model_repository_manager/model_repository_manager.cc
                            ModelRepositoryManager::GetModel ("Request for unknown model: "
                            + ...) around src/model_repository_manager/model_lifecycle.cc
                            ModelLifeCycle::GetModel ("'<m>' is not found",
                            "'<m>' version <v> is not found"), NOT_FOUND
  missing input             core src/infer_request.cc InferenceRequest::Normalize
                            ("expected <n> inputs but got <k> inputs for model '<m>'...")
  unknown input             core src/model.cc Model::GetInput
                            ("unexpected inference input '<i>' for model '<m>'")
  duplicate input           core src/infer_request.cc InferenceRequest::AddOriginalInput
                            ("input '<i>' already exists in request")
  wrong datatype            core src/infer_request.cc Normalize ("inference input '<i>'
                            data-type is '<got>', but model '<m>' expects '<want>'")
  shape vs dims             core src/infer_request.cc Normalize ("unexpected shape for
                            input '<i>' for model '<m>'. Expected [..], got [..]. NOTE: ...")
  batch > max_batch_size    core src/infer_request.cc Normalize ("inference request
                            batch-size must be <= <max> for '<m>'")
  binary byte size          core src/infer_request.cc input validation ("input byte size
                            mismatch for input '<i>' for model '<m>'. Expected <e>, got <g>";
                            also asserted by Triton's QA input-validation tests);
                            server src/http_server.cc ParseJsonTritonIO ("unexpected size for
                            input '<i>', expecting <n> additional bytes for model '<m>'",
                            "unexpected additional input data for model '<m>'")
  unknown output            core src/model.cc Model::GetOutput, called from Normalize
                            ("unexpected inference output '<o>' for model '<m>'")
  malformed JSON            common include/triton/common/triton_json.h Parse ("failed to
                            parse the request JSON buffer: <why> at <offset>"); Triton maps
                            it to INTERNAL (500), trtis answers 400
  JSON element count        server src/http_server.cc ReadDataFromJson ("Unable to parse
                            'data': Shape does not match true shape of 'data' field");
                            INTERNAL (500) in Triton, trtis answers 400
  FP16 in JSON              server src/http_server.cc ReadDataFromJson (in test_http_infer)
  body over the size limit  server src/http_server.cc (--http-max-input-size; message
                            checked by Triton's QA test InferSizeLimitTest (server qa/):
                            "... exceeds the maximum allowed value ... Use
                            --http-max-input-size to increase the limit"), 400
  unknown route / method    server src/http_server.cc Handle: 404 "Not Found",
                            405 "Method Not Allowed"
"""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from trtis_harness import assert_client_error, assert_error, binary_body, running_server

INFER = "/v2/models/simple/infer"


def tensor(name, shape, data, datatype="INT32"):
    return {"name": name, "shape": shape, "datatype": datatype, "data": data}


def good_inputs():
    return [tensor("INPUT0", [1, 16], list(range(16))), tensor("INPUT1", [1, 16], [1] * 16)]


@pytest.fixture(autouse=True)
def still_ready_after(server):
    yield
    assert server.is_ready(), f"server not ready after an error\n{server.log_tail()}"


# -- model / version ---------------------------------------------------------------


def test_unknown_model(server):
    r = server.post_json("/v2/models/no_such_model/infer", {"inputs": good_inputs()})
    assert_error(r, 404, "Request for unknown model: 'no_such_model' is not found")


def test_unknown_model_via_client(client):
    inp = httpclient.InferInput("INPUT0", [1, 2], "FP32")
    inp.set_data_from_numpy(np.zeros((1, 2), dtype=np.float32))
    with pytest.raises(InferenceServerException) as e:
        client.infer("no_such_model", [inp])
    assert_client_error(e.value, 404, "Request for unknown model: 'no_such_model' is not found")


def test_unknown_version(server):
    r = server.post_json("/v2/models/simple/versions/2/infer", {"inputs": good_inputs()})
    assert_error(r, 404, "Request for unknown model: 'simple' version 2 is not found")


# -- inputs -----------------------------------------------------------------------


def test_missing_input(server):
    r = server.post_json(INFER, {"inputs": good_inputs()[:1]})
    assert_error(r, 400, "expected 2 inputs but got 1 inputs for model 'simple'")


def test_unknown_input(server):
    doc = {"inputs": [tensor("BOGUS", [1, 2], [1.0, 2.0], "FP32")]}
    r = server.post_json("/v2/models/identity_fp32/infer", doc)
    assert_error(r, 400, "unexpected inference input 'BOGUS' for model 'identity_fp32'")


def test_duplicate_input(server):
    inputs = good_inputs()
    r = server.post_json(INFER, {"inputs": [inputs[0], inputs[0], inputs[1]]})
    assert_error(r, 400, "input 'INPUT0' already exists in request")


def test_wrong_datatype(server):
    inputs = good_inputs()
    inputs[0] = tensor("INPUT0", [1, 16], [0.5] * 16, "FP32")
    r = server.post_json(INFER, {"inputs": inputs})
    assert_error(
        r, 400, "inference input 'INPUT0' data-type is 'FP32', but model 'simple' expects 'INT32'"
    )


def test_wrong_datatype_via_client(client):
    inputs = [
        httpclient.InferInput("INPUT0", [1, 16], "INT64"),
        httpclient.InferInput("INPUT1", [1, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(np.zeros((1, 16), dtype=np.int64))
    inputs[1].set_data_from_numpy(np.zeros((1, 16), dtype=np.int32))
    with pytest.raises(InferenceServerException) as e:
        client.infer("simple", inputs)
    assert_client_error(
        e.value, 400,
        "inference input 'INPUT0' data-type is 'INT64', but model 'simple' expects 'INT32'",
    )


def test_shape_not_matching_dims(server):
    inputs = good_inputs()
    inputs[0] = tensor("INPUT0", [1, 8], list(range(8)))
    r = server.post_json(INFER, {"inputs": inputs})
    assert_error(
        r, 400, "unexpected shape for input 'INPUT0' for model 'simple'. Expected [-1,16], got [1,8]"
    )


def test_batch_larger_than_max_batch_size(server):
    inputs = [tensor(n, [9, 16], [0] * (9 * 16)) for n in ("INPUT0", "INPUT1")]
    r = server.post_json(INFER, {"inputs": inputs})
    assert_error(r, 400, "inference request batch-size must be <= 8 for 'simple'")


# -- binary data -----------------------------------------------------------------


def test_binary_byte_size_not_matching_shape(client):
    """17 INT32 values (68 bytes) sent for a [1,16] tensor (64 bytes)."""
    inputs = [
        httpclient.InferInput("INPUT0", [1, 17], "INT32"),
        httpclient.InferInput("INPUT1", [1, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(np.arange(17, dtype=np.int32).reshape(1, 17))
    inputs[0].set_shape([1, 16])
    inputs[1].set_data_from_numpy(np.ones((1, 16), dtype=np.int32))
    with pytest.raises(InferenceServerException) as e:
        client.infer("simple", inputs)
    assert_client_error(
        e.value, 400,
        "input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 68",
    )


def test_binary_data_size_beyond_body(server):
    a = np.arange(16, dtype=np.int32).tobytes()
    header = {
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32",
             "parameters": {"binary_data_size": 64}},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32",
             "parameters": {"binary_data_size": 64}},
        ]
    }
    body, headers = binary_body(header, a, a[:60])  # 4 bytes short
    r = server.request("POST", INFER, body, headers)
    assert_error(
        r, 400, "unexpected size for input 'INPUT1', expecting 4 additional bytes for model 'simple'"
    )


def test_binary_extra_trailing_bytes(server):
    a = np.arange(16, dtype=np.int32).tobytes()
    header = {
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32",
             "parameters": {"binary_data_size": 64}},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32",
             "parameters": {"binary_data_size": 64}},
        ]
    }
    body, headers = binary_body(header, a, a, b"\x00" * 8)
    r = server.request("POST", INFER, body, headers)
    assert_error(r, 400, "unexpected additional input data for model 'simple'")


# -- outputs ------------------------------------------------------------------------


def test_unknown_requested_output(server):
    r = server.post_json(INFER, {"inputs": good_inputs(), "outputs": [{"name": "BOGUS"}]})
    assert_error(r, 400, "unexpected inference output 'BOGUS' for model 'simple'")


def test_unknown_requested_output_via_client(client):
    inputs = [
        httpclient.InferInput("INPUT0", [1, 16], "INT32"),
        httpclient.InferInput("INPUT1", [1, 16], "INT32"),
    ]
    for i in inputs:
        i.set_data_from_numpy(np.zeros((1, 16), dtype=np.int32))
    with pytest.raises(InferenceServerException) as e:
        client.infer("simple", inputs, outputs=[httpclient.InferRequestedOutput("OUTPUT9")])
    assert_client_error(e.value, 400, "unexpected inference output 'OUTPUT9' for model 'simple'")


# -- malformed bodies -------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [b'{"inputs": [', b"not json at all", b'{"inputs": [}]}'],
    ids=["truncated", "garbage", "bad-array"],
)
def test_malformed_json(server, body):
    # Triton answers 500 here (a JSON parse error is INTERNAL there); a
    # client's bad body is a 400 in trtis. The message is Triton's.
    r = server.request("POST", INFER, body, {"Content-Type": "application/json"})
    assert_error(r, 400, "failed to parse the request JSON buffer")


@pytest.mark.parametrize("count", [15, 17])
def test_json_element_count_not_matching_shape(server, count):
    # Triton: INTERNAL (500); trtis: 400, as for any malformed client body.
    inputs = good_inputs()
    inputs[0] = tensor("INPUT0", [1, 16], list(range(count)))
    r = server.post_json(INFER, {"inputs": inputs})
    assert_error(r, 400, "Unable to parse 'data': Shape does not match true shape of 'data' field")


def test_json_element_count_nested(server):
    inputs = good_inputs()
    inputs[0] = tensor("INPUT0", [1, 16], [list(range(8)), list(range(7))])
    r = server.post_json(INFER, {"inputs": inputs})
    assert_error(r, 400, "Shape does not match true shape of 'data' field")


# -- routing ---------------------------------------------------------------------


def test_unknown_route(server):
    assert_error(server.request("GET", "/v2/no/such/route"), 404, "Not Found")


def test_wrong_method(server):
    assert_error(server.request("GET", INFER), 405, "Method Not Allowed")


# -- request size limit -------------------------------------------------------------

LIMIT = 1024


@pytest.fixture(scope="module")
def limited_server(tiny_repo):
    yield from running_server(
        tiny_repo, ["--http-max-input-size", str(LIMIT)], name="size-limited server"
    )


def test_body_over_size_limit_json(limited_server):
    small = {"inputs": [tensor("INPUT0", [1, 4], [1.5] * 4, "FP32")]}
    status, _, body = limited_server.post_json("/v2/models/identity_fp32/infer", small)
    assert status == 200, body

    n = 400
    big = {"inputs": [tensor("INPUT0", [1, n], [1.5] * n, "FP32")]}
    r = limited_server.post_json("/v2/models/identity_fp32/infer", big)
    assert_error(
        r, 400, "exceeds the maximum allowed value", "Use --http-max-input-size to increase the limit"
    )
    assert limited_server.is_ready()


def test_body_over_size_limit_binary(limited_server):
    data = np.ones(2 * LIMIT // 4, dtype=np.float32)
    header = {
        "inputs": [
            {"name": "INPUT0", "shape": [1, data.size], "datatype": "FP32",
             "parameters": {"binary_data_size": data.nbytes}},
        ]
    }
    body, headers = binary_body(header, data.tobytes())
    assert len(body) > LIMIT
    r = limited_server.request("POST", "/v2/models/identity_fp32/infer", body, headers)
    assert_error(r, 400, "exceeds the maximum allowed value")
    assert limited_server.is_ready()
