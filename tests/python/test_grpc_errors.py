"""Error answers over gRPC: the status code from Triton's mapping and the same
message text as over HTTP. After every error the server must still be ready
(autouse fixture below).

Code mapping (server src/grpc/grpc_utils.cc GrpcStatusUtil::CodeToStatus):
INVALID_ARG -> INVALID_ARGUMENT, NOT_FOUND -> NOT_FOUND, INTERNAL -> INTERNAL,
UNAVAILABLE -> UNAVAILABLE, UNSUPPORTED -> UNIMPLEMENTED, UNKNOWN -> UNKNOWN,
ALREADY_EXISTS -> ALREADY_EXISTS, CANCELLED -> CANCELLED. The status details
are TRITONSERVER_ErrorMessage(err), unprefixed.

Where each message comes from (besides the core ones listed in
test_http_errors.py):
  unknown model           ModelInferHandler::Execute first asks
                          TRITONSERVER_ServerModelTransactionProperties,
                          i.e. core GetModel: NOT_FOUND "Request for unknown
                          model: '<m>' is not found"
  no raw data for input   server src/grpc/infer_handler.cc InferGRPCToInput:
                          "unable to find data for input tensor '<i>' for
                          model '<m>' in request." (INVALID_ARG)
  contents + raw          same function: "contents field must not be
                          specified when using raw_input_contents for '<i>'
                          for model '<m>'" (INVALID_ARG)
  contents of other type  InferGRPCToInputHelper: "unexpected explicit tensor
                          data for input tensor '<i>' for model '<m>' of type
                          '<contents type>', expected datatype '<datatype>'"
  classification param    server src/grpc/grpc_utils.cc
                          ParseClassificationParams: "invalid value type for
                          'classification' parameter, expected int64_param",
                          "invalid value for 'classification' parameter,
                          expected >= 1" (INVALID_ARG)
"""

from __future__ import annotations

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2
from tritonclient.utils import InferenceServerException

from trtis_harness import assert_grpc_error, assert_rpc_error, grpc_channel_for


@pytest.fixture(autouse=True)
def still_ready_after(server, grpc_client):
    yield
    assert grpc_client.is_server_ready(), f"server not ready after an error\n{server.log_tail()}"


def int32_input(name, shape, fill=0, dtype="INT32"):
    np_dtype = {"INT32": np.int32, "INT64": np.int64, "FP32": np.float32}[dtype]
    inp = grpcclient.InferInput(name, list(shape), dtype)
    inp.set_data_from_numpy(np.full(shape, fill, dtype=np_dtype))
    return inp


def good_inputs(batch=1):
    return [int32_input("INPUT0", (batch, 16), 1), int32_input("INPUT1", (batch, 16), 2)]


def infer_error(grpc_client, model, inputs, **kwargs) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as e:
        grpc_client.infer(model, inputs, **kwargs)
    return e.value


# -- model / version ---------------------------------------------------------------


def test_unknown_model(grpc_client):
    e = infer_error(grpc_client, "no_such_model", good_inputs())
    assert_grpc_error(e, "NOT_FOUND", "Request for unknown model: 'no_such_model' is not found")


def test_unknown_version(grpc_client):
    e = infer_error(grpc_client, "simple", good_inputs(), model_version="2")
    assert_grpc_error(e, "NOT_FOUND", "Request for unknown model: 'simple' version 2 is not found")


def test_bad_version_string(grpc_client):
    e = infer_error(grpc_client, "simple", good_inputs(), model_version="latest")
    assert_grpc_error(
        e, "INVALID_ARGUMENT", "failed to get model version from specified version string 'latest'"
    )


def test_empty_model_name(grpc_stub):
    with pytest.raises(grpc.RpcError) as e:
        grpc_stub.ModelInfer(service_pb2.ModelInferRequest(model_name=""), timeout=10)
    assert_rpc_error(e.value, "NOT_FOUND", "Request for unknown model: '' is not found")


# -- inputs -----------------------------------------------------------------------


def test_missing_input(grpc_client):
    e = infer_error(grpc_client, "simple", good_inputs()[:1])
    assert_grpc_error(
        e,
        "INVALID_ARGUMENT",
        "expected 2 inputs but got 1 inputs for model 'simple'. Got input(s) ['INPUT0'], but "
        "missing required input(s) ['INPUT1']. Please provide all required input(s).",
    )


def test_reserved_triton_parameter(grpc_client):
    """qa/L0_parameters: `triton_` keys are Triton's own."""
    e = infer_error(grpc_client, "simple", good_inputs(), parameters={"triton_": True})
    assert_grpc_error(
        e,
        "INVALID_ARGUMENT",
        "parameter keys starting with 'triton_' are reserved for Triton usage. Only the "
        "following keys starting with 'triton_' are allowed: triton_enable_empty_final_response",
    )


def test_unknown_input(grpc_client):
    inp = grpcclient.InferInput("BOGUS", [1, 2], "FP32")
    inp.set_data_from_numpy(np.array([[1.0, 2.0]], dtype=np.float32))
    e = infer_error(grpc_client, "identity_fp32", [inp])
    assert_grpc_error(e, "INVALID_ARGUMENT", "unexpected inference input 'BOGUS' for model 'identity_fp32'")


def test_duplicate_input(grpc_client):
    inputs = good_inputs()
    e = infer_error(grpc_client, "simple", [inputs[0], inputs[0], inputs[1]])
    assert_grpc_error(e, "INVALID_ARGUMENT", "input 'INPUT0' already exists in request")


def test_wrong_datatype(grpc_client):
    inputs = [int32_input("INPUT0", (1, 16), 0, "INT64"), int32_input("INPUT1", (1, 16))]
    e = infer_error(grpc_client, "simple", inputs)
    assert_grpc_error(
        e,
        "INVALID_ARGUMENT",
        "inference input 'INPUT0' data-type is 'INT64', but model 'simple' expects 'INT32'",
    )


def test_shape_not_matching_dims(grpc_client):
    inputs = [int32_input("INPUT0", (1, 8)), int32_input("INPUT1", (1, 16))]
    e = infer_error(grpc_client, "simple", inputs)
    assert_grpc_error(
        e,
        "INVALID_ARGUMENT",
        "unexpected shape for input 'INPUT0' for model 'simple'. Expected [-1,16], got [1,8]",
    )


def test_batch_larger_than_max_batch_size(grpc_client):
    e = infer_error(grpc_client, "simple", good_inputs(batch=9))
    assert_grpc_error(e, "INVALID_ARGUMENT", "inference request batch-size must be <= 8 for 'simple'")


# -- raw_input_contents -----------------------------------------------------------


def test_raw_byte_size_not_matching_shape(grpc_client):
    """17 INT32 values (68 bytes) in raw_input_contents for a [1,16] tensor."""
    inp0 = grpcclient.InferInput("INPUT0", [1, 17], "INT32")
    inp0.set_data_from_numpy(np.arange(17, dtype=np.int32).reshape(1, 17))
    inp0.set_shape([1, 16])
    e = infer_error(grpc_client, "simple", [inp0, int32_input("INPUT1", (1, 16))])
    assert_grpc_error(
        e,
        "INVALID_ARGUMENT",
        "input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 68",
    )


def test_raw_byte_size_short(grpc_client):
    inp0 = grpcclient.InferInput("INPUT0", [1, 15], "INT32")
    inp0.set_data_from_numpy(np.arange(15, dtype=np.int32).reshape(1, 15))
    inp0.set_shape([1, 16])
    e = infer_error(grpc_client, "simple", [inp0, int32_input("INPUT1", (1, 16))])
    assert_grpc_error(
        e,
        "INVALID_ARGUMENT",
        "input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 60",
    )


def raw_simple_request(n_raw: int):
    req = service_pb2.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        req.inputs.add(name=name, datatype="INT32", shape=[1, 16])
    for _ in range(n_raw):
        req.raw_input_contents.append(np.zeros(16, dtype=np.int32).tobytes())
    return req


def test_fewer_raw_contents_than_inputs(grpc_stub):
    with pytest.raises(grpc.RpcError) as e:
        grpc_stub.ModelInfer(raw_simple_request(1), timeout=10)
    assert_rpc_error(
        e.value,
        "INVALID_ARGUMENT",
        "unable to find data for input tensor 'INPUT1' for model 'simple' in request.",
    )


@pytest.mark.parametrize("n_raw", [3, 10])
def test_more_raw_contents_than_inputs(grpc_stub, n_raw):
    with pytest.raises(grpc.RpcError) as e:
        grpc_stub.ModelInfer(raw_simple_request(n_raw), timeout=10)
    assert_rpc_error(
        e.value,
        "INVALID_ARGUMENT",
        f"raw_input_contents has {n_raw} entries but the request's inputs use 2 for model 'simple'",
    )


def test_a_message_over_the_grpc_size_limit_is_refused_before_it_is_read(grpc_stub):
    # The default --grpc-max-input-size is 64 MiB: 80 MiB of raw contents.
    req = raw_simple_request(2)
    req.raw_input_contents[1] = b"\0" * (80 << 20)
    with pytest.raises(grpc.RpcError) as e:
        grpc_stub.ModelInfer(req, timeout=30)
    assert e.value.code() in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.OUT_OF_RANGE), e.value
    assert "too large" in e.value.details() or "larger than max" in e.value.details(), e.value.details()


def test_no_data_at_all(grpc_stub):
    with pytest.raises(grpc.RpcError) as e:
        grpc_stub.ModelInfer(raw_simple_request(0), timeout=10)
    assert_rpc_error(
        e.value,
        "INVALID_ARGUMENT",
        "unable to find data for input tensor 'INPUT0' for model 'simple' in request.",
    )


def test_contents_and_raw_contents_together(grpc_stub):
    req = raw_simple_request(2)
    req.inputs[0].contents.int_contents.extend([0] * 16)
    with pytest.raises(grpc.RpcError) as e:
        grpc_stub.ModelInfer(req, timeout=10)
    assert_rpc_error(
        e.value,
        "INVALID_ARGUMENT",
        "contents field must not be specified when using raw_input_contents for 'INPUT0' "
        "for model 'simple'",
    )


def test_contents_of_another_type(grpc_stub):
    req = service_pb2.ModelInferRequest(model_name="simple")
    t0 = req.inputs.add(name="INPUT0", datatype="INT32", shape=[1, 16])
    t0.contents.fp32_contents.extend([0.5] * 16)
    t1 = req.inputs.add(name="INPUT1", datatype="INT32", shape=[1, 16])
    t1.contents.int_contents.extend([1] * 16)
    with pytest.raises(grpc.RpcError) as e:
        grpc_stub.ModelInfer(req, timeout=10)
    assert_rpc_error(
        e.value,
        "INVALID_ARGUMENT",
        "unexpected explicit tensor data for input tensor 'INPUT0' for model 'simple' of type "
        "'FP32', expected datatype 'INT32'",
    )


def test_typed_contents_count_not_matching_shape(grpc_stub):
    req = service_pb2.ModelInferRequest(model_name="simple")
    t0 = req.inputs.add(name="INPUT0", datatype="INT32", shape=[1, 16])
    t0.contents.int_contents.extend([0] * 15)
    t1 = req.inputs.add(name="INPUT1", datatype="INT32", shape=[1, 16])
    t1.contents.int_contents.extend([1] * 16)
    with pytest.raises(grpc.RpcError) as e:
        grpc_stub.ModelInfer(req, timeout=10)
    assert_rpc_error(
        e.value,
        "INVALID_ARGUMENT",
        "input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 60",
    )


# -- outputs ------------------------------------------------------------------------


def test_unknown_requested_output(grpc_client):
    e = infer_error(
        grpc_client, "simple", good_inputs(), outputs=[grpcclient.InferRequestedOutput("OUTPUT9")]
    )
    assert_grpc_error(e, "INVALID_ARGUMENT", "unexpected inference output 'OUTPUT9' for model 'simple'")


def classification_request(param: service_pb2.InferParameter):
    req = service_pb2.ModelInferRequest(model_name="identity_class")
    req.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 4])
    req.raw_input_contents.append(np.array([1, 2, 3, 4], dtype=np.float32).tobytes())
    out = req.outputs.add(name="OUTPUT0")
    out.parameters["classification"].CopyFrom(param)
    return req


def test_classification_param_wrong_type(grpc_stub):
    req = classification_request(service_pb2.InferParameter(string_param="2"))
    with pytest.raises(grpc.RpcError) as e:
        grpc_stub.ModelInfer(req, timeout=10)
    assert_rpc_error(
        e.value,
        "INVALID_ARGUMENT",
        "invalid value type for 'classification' parameter, expected int64_param",
    )


@pytest.mark.parametrize("count", [0, -1])
def test_classification_param_not_positive(grpc_stub, count):
    req = classification_request(service_pb2.InferParameter(int64_param=count))
    with pytest.raises(grpc.RpcError) as e:
        grpc_stub.ModelInfer(req, timeout=10)
    assert_rpc_error(
        e.value, "INVALID_ARGUMENT", "invalid value for 'classification' parameter, expected >= 1"
    )


# -- the channel survives errors -------------------------------------------------------


def test_errors_then_success_same_channel(grpc_client):
    for _ in range(3):
        infer_error(grpc_client, "no_such_model", good_inputs())
        infer_error(grpc_client, "simple", good_inputs(batch=9))
    result = grpc_client.infer("simple", good_inputs())
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((1, 16), 3, dtype=np.int32))


def test_unknown_rpc_is_unimplemented(server):
    """A method the service does not have: gRPC's own UNIMPLEMENTED."""
    with grpc_channel_for(server) as channel:
        call = channel.unary_unary(
            "/inference.GRPCInferenceService/NoSuchMethod",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        with pytest.raises(grpc.RpcError) as e:
            call(b"", timeout=10)
        assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
