"""ModelStreamInfer (bidirectional stream) with tritonclient.grpc's streaming
API (start_stream / async_stream_infer / stop_stream) and with the raw stub.

Triton sources (server src/grpc/stream_infer_handler.cc,
ModelStreamInferHandler::Process):
  * For a non-decoupled model every request gets exactly one
    ModelStreamInferResponse, written in the order the requests were read
    ("put it in the context queue so that its response is sent in the same
    order as the request was received").
  * A request that fails does not end the stream: its response carries
    `error_message` = the plain error text (status.error_message(), no code)
    and an `infer_response` that is cleared except for `id`, "repopulate the
    id so that client knows which request failed"; the next request is read
    as usual.
  * When the client half-closes, the server finishes the call with OK once
    every response has been written.
tritonclient.grpc (_infer_stream.py _process_response) turns a non-empty
`error_message` into InferenceServerException(msg=error_message): the
callback's error has no status code.

Errors raised while core normalizes a request (core src/infer_request.cc,
every `LogRequest() + ...` message) start with "[request id: <id>] "
(core src/infer_request.h LogRequest: "<id_unknown>" when the id is empty);
errors raised before a request exists (unknown model) do not.
"""

from __future__ import annotations


import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2, service_pb2_grpc

from trtis_harness import StreamCollector as Collector
from trtis_harness import (
    cancel_stream,
    grpc_channel_for,
    grpc_client_for,
    stop_stream_within,
    stream_client_for,
)

STREAM_TIMEOUT_S = 15.0


@pytest.fixture
def stream_client(server):
    """A fresh client per test (tritonclient allows one stream per client)."""
    yield from stream_client_for(server)


def simple_request(batch: int, seed: int):
    rng = np.random.default_rng(seed)
    a = rng.integers(-100, 100, size=(batch, 16), dtype=np.int32)
    b = rng.integers(-100, 100, size=(batch, 16), dtype=np.int32)
    inputs = [
        grpcclient.InferInput("INPUT0", [batch, 16], "INT32"),
        grpcclient.InferInput("INPUT1", [batch, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs, {"OUTPUT0": a + b, "OUTPUT1": a - b}


def fp32_request(values):
    data = np.array([values], dtype=np.float32)
    inp = grpcclient.InferInput("INPUT0", list(data.shape), "FP32")
    inp.set_data_from_numpy(data)
    return [inp], {"OUTPUT0": data}


def check_result(result, error, request_id, expected):
    assert error is None, f"{request_id}: {error}"
    response = result.get_response()
    assert response.id == request_id
    for name, want in expected.items():
        np.testing.assert_array_equal(result.as_numpy(name), want, err_msg=f"{request_id} {name}")


# -- tritonclient streaming API ------------------------------------------------------


def test_stream_responses_in_request_order(stream_client):
    """Alternating ONNX (`simple`) and identity requests: responses come back
    in request order with matching ids."""
    collector = Collector()
    stream_client.start_stream(callback=collector)
    expected = []
    for i in range(24):
        rid = f"r{i}"
        if i % 2 == 0:
            inputs, want = simple_request(1 + i % 8, seed=i)
            stream_client.async_stream_infer("simple", inputs, request_id=rid)
            expected.append((rid, "simple", want))
        else:
            inputs, want = fp32_request([float(i), -float(i), 0.5])
            stream_client.async_stream_infer("identity_fp32", inputs, request_id=rid)
            expected.append((rid, "identity_fp32", want))
    items = collector.wait_for(len(expected))
    assert [r.get_response().id if r else None for r, _ in items] == [rid for rid, _, _ in expected]
    for (result, error), (rid, model, want) in zip(items, expected):
        check_result(result, error, rid, want)
        assert result.get_response().model_name == model
        assert result.get_response().model_version == "1"
    stop_stream_within(stream_client)
    assert len(collector.items) == len(expected)


def test_stream_error_then_stream_continues(stream_client):
    collector = Collector()
    stream_client.start_stream(callback=collector)

    good1, want1 = fp32_request([1.0, 2.0])
    stream_client.async_stream_infer("identity_fp32", good1, request_id="ok-1")

    bad_model, _ = fp32_request([1.0])
    stream_client.async_stream_infer("no_such_model", bad_model, request_id="bad-model")

    bad_type = [
        grpcclient.InferInput("INPUT0", [1, 16], "INT64"),
        grpcclient.InferInput("INPUT1", [1, 16], "INT32"),
    ]
    bad_type[0].set_data_from_numpy(np.zeros((1, 16), dtype=np.int64))
    bad_type[1].set_data_from_numpy(np.zeros((1, 16), dtype=np.int32))
    stream_client.async_stream_infer("simple", bad_type, request_id="bad-type")

    good2, want2 = simple_request(2, seed=7)
    stream_client.async_stream_infer("simple", good2, request_id="ok-2")

    items = collector.wait_for(4)
    check_result(*items[0], "ok-1", want1)

    result, error = items[1]
    assert result is None
    assert error is not None
    # Built by tritonclient from `error_message`: the text, no status code.
    assert error.status() is None
    assert error.message() == "Request for unknown model: 'no_such_model' is not found"

    result, error = items[2]
    assert result is None
    assert error.message() == (
        "[request id: bad-type] "
        "inference input 'INPUT0' data-type is 'INT64', but model 'simple' expects 'INT32'"
    )

    check_result(*items[3], "ok-2", want2)

    # Still open: more requests on the same stream.
    good3, want3 = fp32_request([9.0])
    stream_client.async_stream_infer("identity_fp32", good3, request_id="ok-3")
    items = collector.wait_for(5)
    check_result(*items[4], "ok-3", want3)
    stop_stream_within(stream_client)


@pytest.mark.parametrize(
    "model,make_inputs,message",
    [
        (
            "simple",
            lambda: simple_request(9, seed=1)[0],
            "[request id: e] inference request batch-size must be <= 8 for 'simple'",
        ),
        (
            "identity_fp32",
            lambda: [grpcclient.InferInput("BOGUS", [1, 1], "FP32").set_data_from_numpy(
                np.zeros((1, 1), dtype=np.float32))],
            "unexpected inference input 'BOGUS' for model 'identity_fp32'",  # model.cc GetInput: no prefix
        ),
    ],
    ids=["batch-too-large", "unknown-input"],
)
def test_stream_error_messages(stream_client, model, make_inputs, message):
    collector = Collector()
    stream_client.start_stream(callback=collector)
    stream_client.async_stream_infer(model, make_inputs(), request_id="e")
    good, want = fp32_request([3.0])
    stream_client.async_stream_infer("identity_fp32", good, request_id="after")
    items = collector.wait_for(2)
    result, error = items[0]
    assert result is None and error is not None
    assert error.message() == message
    check_result(*items[1], "after", want)
    stop_stream_within(stream_client)


def test_stop_stream_waits_for_pending(stream_client):
    """stop_stream() without cancel half-closes; the server answers every
    request already sent and then ends the call."""
    collector = Collector()
    stream_client.start_stream(callback=collector)
    n = 16
    for i in range(n):
        inputs, _ = simple_request(8, seed=100 + i)
        stream_client.async_stream_infer("simple", inputs, request_id=str(i))
    stop_stream_within(stream_client)
    assert [r.get_response().id for r, e in collector.items] == [str(i) for i in range(n)]
    assert all(e is None for _, e in collector.items)


def test_stream_restart_on_same_client(stream_client):
    for round_ in range(2):
        collector = Collector()
        stream_client.start_stream(callback=collector)
        inputs, want = fp32_request([float(round_)])
        stream_client.async_stream_infer("identity_fp32", inputs, request_id=f"round-{round_}")
        check_result(*collector.wait_for(1)[0], f"round-{round_}", want)
        stop_stream_within(stream_client)


def test_two_streams_do_not_mix(server):
    clients = [grpc_client_for(server), grpc_client_for(server)]
    collectors = [Collector(), Collector()]
    try:
        for c, col in zip(clients, collectors):
            c.start_stream(callback=col)
        for i in range(10):
            for k, c in enumerate(clients):
                inputs, _ = fp32_request([float(k * 100 + i)])
                c.async_stream_infer("identity_fp32", inputs, request_id=f"s{k}-{i}")
        for k, col in enumerate(collectors):
            items = col.wait_for(10)
            assert [r.get_response().id for r, _ in items] == [f"s{k}-{i}" for i in range(10)]
            for i, (r, _) in enumerate(items):
                assert r.as_numpy("OUTPUT0").tolist() == [[float(k * 100 + i)]]
        for c in clients:
            stop_stream_within(c)
    finally:
        for c in clients:
            cancel_stream(c)
            c._stream = None
            c.close()


def test_stream_bytes_round_trip(stream_client):
    items_in = [b"\x00", b"", b"\xff\xfe", b"plain"]
    data = np.array(items_in, dtype=np.object_).reshape(1, 4)
    inp = grpcclient.InferInput("INPUT0", [1, 4], "BYTES")
    inp.set_data_from_numpy(data)
    collector = Collector()
    stream_client.start_stream(callback=collector)
    stream_client.async_stream_infer("identity_bytes", [inp], request_id="b")
    result, error = collector.wait_for(1)[0]
    assert error is None, error
    assert [bytes(x) for x in result.as_numpy("OUTPUT0").flatten()] == items_in
    stop_stream_within(stream_client)


# -- raw stub: the wire format of stream errors ------------------------------------------


def fp32_proto(model: str, request_id: str, values) -> service_pb2.ModelInferRequest:
    data = np.array([values], dtype=np.float32)
    req = service_pb2.ModelInferRequest(model_name=model, id=request_id)
    req.inputs.add(name="INPUT0", datatype="FP32", shape=list(data.shape))
    req.raw_input_contents.append(data.tobytes())
    return req


def test_stream_wire_format(server):
    """Three requests then half-close: three responses in order, the failed
    one with `error_message` and only its `id` in `infer_response`; the
    call itself ends with OK."""
    reqs = [
        fp32_proto("identity_fp32", "g1", [1.0, 2.0]),
        fp32_proto("no_such_model", "bad-1", [1.0]),
        fp32_proto("identity_fp32", "g2", [3.0]),
    ]
    with grpc_channel_for(server) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        call = stub.ModelStreamInfer(iter(reqs), timeout=STREAM_TIMEOUT_S)
        responses = list(call)  # raises grpc.RpcError if not ended with OK
        assert call.code() == grpc.StatusCode.OK

    assert len(responses) == 3
    ok1, bad, ok2 = responses
    assert ok1.error_message == ""
    assert ok1.infer_response.id == "g1"
    assert ok1.infer_response.model_name == "identity_fp32"
    assert ok1.infer_response.model_version == "1"
    assert ok1.infer_response.raw_output_contents[0] == np.array([1.0, 2.0], dtype=np.float32).tobytes()

    assert bad.error_message == "Request for unknown model: 'no_such_model' is not found"
    assert bad.infer_response.id == "bad-1"
    assert bad.infer_response.model_name == ""
    assert len(bad.infer_response.outputs) == 0
    assert len(bad.infer_response.raw_output_contents) == 0

    assert ok2.error_message == ""
    assert ok2.infer_response.id == "g2"


def test_stream_empty_then_half_close(server):
    """A stream with no request at all ends cleanly (OK, no responses)."""
    with grpc_channel_for(server) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        call = stub.ModelStreamInfer(iter([]), timeout=STREAM_TIMEOUT_S)
        assert list(call) == []
        assert call.code() == grpc.StatusCode.OK
