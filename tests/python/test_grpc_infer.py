"""ModelInfer over gRPC with tritonclient.grpc (which always sends tensors in
`raw_input_contents`), on the ONNX `simple` model and on identity models of
every datatype; async_infer; typed `InferTensorContents` sent with the raw
stub; messages larger than gRPC's 4 MB default.

Triton sources (server src/grpc/infer_handler.cc):
  InferGRPCToInput        one `raw_input_contents` entry per input, in
                          `inputs` order, or typed `contents` per input
                          (int_contents narrowed to INT8/INT16, uint_contents
                          to UINT8/UINT16; bytes_contents serialized with
                          4-byte length prefixes)
  ResponseAllocatorHelper every output is returned in `raw_output_contents`
                          (one entry per output, in `outputs` order), never
                          in typed `contents`
  server src/common.h     MAX_GRPC_MESSAGE_SIZE = INT32_MAX, set on the
                          server builder (grpc_server.cc SetMaxMessageSize)
"""

from __future__ import annotations

import queue
import threading

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2

from trtis_harness import identity_model_name

RNG = np.random.default_rng(20240614)


def simple_inputs(batch: int):
    a = RNG.integers(-1000, 1000, size=(batch, 16), dtype=np.int32)
    b = RNG.integers(-1000, 1000, size=(batch, 16), dtype=np.int32)
    inputs = [
        grpcclient.InferInput("INPUT0", [batch, 16], "INT32"),
        grpcclient.InferInput("INPUT1", [batch, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return a, b, inputs


# -- simple (ONNX Runtime) ----------------------------------------------------


@pytest.mark.parametrize("batch", [1, 8])
def test_simple_sum_and_difference(grpc_client, batch):
    a, b, inputs = simple_inputs(batch)
    outputs = [grpcclient.InferRequestedOutput("OUTPUT0"), grpcclient.InferRequestedOutput("OUTPUT1")]
    result = grpc_client.infer("simple", inputs, outputs=outputs, request_id=f"req-{batch}")

    response = result.get_response()
    assert isinstance(response, service_pb2.ModelInferResponse)
    assert response.model_name == "simple"
    assert response.model_version == "1"
    assert response.id == f"req-{batch}"
    assert [o.name for o in response.outputs] == ["OUTPUT0", "OUTPUT1"]
    # Raw outputs: one entry per output, none in typed contents.
    assert len(response.raw_output_contents) == 2
    for out, raw in zip(response.outputs, response.raw_output_contents):
        assert out.datatype == "INT32"
        assert list(out.shape) == [batch, 16]
        assert len(raw) == batch * 16 * 4
        assert not out.HasField("contents")

    for name, expected in (("OUTPUT0", a + b), ("OUTPUT1", a - b)):
        got = result.as_numpy(name)
        assert got.dtype == np.int32
        assert got.shape == (batch, 16)
        np.testing.assert_array_equal(got, expected)


def test_simple_response_as_json(grpc_client):
    _, _, inputs = simple_inputs(1)
    result = grpc_client.infer("simple", inputs, request_id="json-view")
    doc = result.get_response(as_json=True)
    assert doc["model_name"] == "simple"
    assert doc["model_version"] == "1"
    assert doc["id"] == "json-view"
    assert {o["name"] for o in doc["outputs"]} == {"OUTPUT0", "OUTPUT1"}


def test_simple_all_outputs_when_none_requested(grpc_client):
    a, b, inputs = simple_inputs(2)
    result = grpc_client.infer("simple", inputs)
    response = result.get_response()
    assert sorted(o.name for o in response.outputs) == ["OUTPUT0", "OUTPUT1"]
    assert len(response.raw_output_contents) == 2
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_simple_one_requested_output(grpc_client):
    a, b, inputs = simple_inputs(1)
    result = grpc_client.infer("simple", inputs, outputs=[grpcclient.InferRequestedOutput("OUTPUT1")])
    response = result.get_response()
    assert [o.name for o in response.outputs] == ["OUTPUT1"]
    assert len(response.raw_output_contents) == 1
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    assert result.as_numpy("OUTPUT0") is None


def test_simple_outputs_in_requested_order(grpc_client):
    a, b, inputs = simple_inputs(1)
    outputs = [grpcclient.InferRequestedOutput("OUTPUT1"), grpcclient.InferRequestedOutput("OUTPUT0")]
    result = grpc_client.infer("simple", inputs, outputs=outputs)
    names = [o.name for o in result.get_response().outputs]
    assert sorted(names) == ["OUTPUT0", "OUTPUT1"]
    # Whatever the order, raw_output_contents[i] belongs to outputs[i].
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_simple_explicit_version(grpc_client):
    a, b, inputs = simple_inputs(1)
    result = grpc_client.infer("simple", inputs, model_version="1")
    assert result.get_response().model_version == "1"
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)


def test_empty_request_id(grpc_client):
    _, _, inputs = simple_inputs(1)
    assert grpc_client.infer("simple", inputs).get_response().id == ""


def test_many_sequential_requests_one_channel(grpc_client):
    for i in range(20):
        a, b, inputs = simple_inputs(1 + i % 8)
        result = grpc_client.infer("simple", inputs, request_id=str(i))
        assert result.get_response().id == str(i)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


# -- async_infer ----------------------------------------------------------------


def test_async_infer(grpc_client):
    done: queue.Queue = queue.Queue()
    a, b, inputs = simple_inputs(3)
    grpc_client.async_infer(
        "simple", inputs, lambda result, error: done.put((result, error)), request_id="async-1"
    )
    result, error = done.get(timeout=10)
    assert error is None, error
    assert result.get_response().id == "async-1"
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_async_infer_concurrent(grpc_client):
    n = 16
    results: dict[str, tuple] = {}
    lock = threading.Lock()
    all_done = threading.Event()
    expected = {}

    def callback(result, error, key):
        with lock:
            results[key] = (result, error)
            if len(results) == n:
                all_done.set()

    for i in range(n):
        a, b, inputs = simple_inputs(1 + i % 8)
        key = f"c{i}"
        expected[key] = (a + b, a - b)
        grpc_client.async_infer(
            "simple",
            inputs,
            lambda result, error, key=key: callback(result, error, key),
            request_id=key,
        )
    assert all_done.wait(20), f"only {len(results)} of {n} callbacks"
    for key, (result, error) in results.items():
        assert error is None, (key, error)
        assert result.get_response().id == key
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), expected[key][0])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), expected[key][1])


def test_async_infer_error_reaches_callback(grpc_client):
    done: queue.Queue = queue.Queue()
    inp = grpcclient.InferInput("INPUT0", [1, 2], "FP32")
    inp.set_data_from_numpy(np.zeros((1, 2), dtype=np.float32))
    grpc_client.async_infer("no_such_model", [inp], lambda result, error: done.put((result, error)))
    result, error = done.get(timeout=10)
    assert result is None
    assert error is not None
    assert error.status() == "StatusCode.NOT_FOUND"
    assert "Request for unknown model: 'no_such_model' is not found" in error.message()


# -- identity, every datatype ------------------------------------------------


NUMERIC_TYPES = [
    "BOOL", "UINT8", "UINT16", "UINT32", "UINT64",
    "INT8", "INT16", "INT32", "INT64", "FP16", "FP32", "FP64",
]


def sample(datatype: str) -> np.ndarray:
    """A [2, 5] tensor with each type's edge values (NaN, infinities and -0.0
    for the float types: raw bytes must come back unchanged)."""
    if datatype == "BOOL":
        flat = [True, False, True, True, False, False, True, False, False, True]
        return np.array(flat, dtype=np.bool_).reshape(2, 5)
    if datatype.startswith(("UINT", "INT")):
        dt = np.dtype(datatype.lower())
        info = np.iinfo(dt)
        flat = [info.min, info.max, 0, 1, 7, info.max - 1, info.min + 1, 42, 100, 3]
        return np.array(flat, dtype=dt).reshape(2, 5)
    if datatype == "FP16":
        flat = [0.0, -0.0, 0.5, -2.0, 65504.0, 6.1035e-05, 1.0, -1.5, np.inf, np.nan]
        return np.array(flat, dtype=np.float16).reshape(2, 5)
    dt = np.float32 if datatype == "FP32" else np.float64
    big = 3.4e38 if datatype == "FP32" else 1.7e308
    flat = [0.0, -1.5, 0.1, big, -big, 1e-30, 123456.789, -0.0, np.inf, np.nan]
    return np.array(flat, dtype=dt).reshape(2, 5)


def identity_roundtrip(grpc_client, datatype, data):
    model = identity_model_name(datatype)
    inp = grpcclient.InferInput("INPUT0", list(data.shape), datatype)
    inp.set_data_from_numpy(data)
    result = grpc_client.infer(model, [inp], outputs=[grpcclient.InferRequestedOutput("OUTPUT0")])
    response = result.get_response()
    assert response.model_name == model
    assert len(response.outputs) == 1
    out = response.outputs[0]
    assert out.name == "OUTPUT0"
    assert out.datatype == datatype
    assert list(out.shape) == list(data.shape)
    return result


@pytest.mark.parametrize("datatype", NUMERIC_TYPES)
def test_identity_every_datatype(grpc_client, datatype):
    data = sample(datatype)
    result = identity_roundtrip(grpc_client, datatype, data)
    raw = result.get_response().raw_output_contents
    assert len(raw) == 1
    # Byte-exact: NaN, -0.0 and infinities round-trip too.
    assert raw[0] == data.tobytes()
    got = result.as_numpy("OUTPUT0")
    assert got.dtype == data.dtype
    assert got.tobytes() == data.tobytes()


def test_identity_batch_of_eight(grpc_client):
    data = np.arange(8 * 3, dtype=np.float32).reshape(8, 3)
    got = identity_roundtrip(grpc_client, "FP32", data).as_numpy("OUTPUT0")
    np.testing.assert_array_equal(got, data)


def test_message_larger_than_4mb(grpc_client):
    """gRPC's default receive limit is 4 MiB; Triton lifts it to INT32_MAX
    (tritonclient does the same on its side), so a 6 MiB tensor works both
    ways."""
    n = 6 * 1024 * 1024 // 4
    data = np.arange(n, dtype=np.float32).reshape(1, n)
    result = identity_roundtrip(grpc_client, "FP32", data)
    assert len(result.get_response().raw_output_contents[0]) == data.nbytes
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)


# -- BYTES ----------------------------------------------------------------------

TRICKY_BYTES = [b"\x00", b"a\x00b\x00", b"\xff\xfe\xfd", b"", b"plain", b"\xc3\x28", b"x" * 300]


def serialized_bytes(items) -> bytes:
    return b"".join(len(b).to_bytes(4, "little") + b for b in items)


@pytest.mark.parametrize("model", ["identity_bytes", "simple_identity"])
def test_bytes_exact(grpc_client, model):
    """NUL bytes and invalid UTF-8 survive unchanged: raw BYTES are 4-byte
    little-endian length prefixes + bytes, both ways."""
    data = np.array(TRICKY_BYTES, dtype=np.object_).reshape(1, len(TRICKY_BYTES))
    inp = grpcclient.InferInput("INPUT0", list(data.shape), "BYTES")
    inp.set_data_from_numpy(data)
    result = grpc_client.infer(model, [inp], outputs=[grpcclient.InferRequestedOutput("OUTPUT0")])
    response = result.get_response()
    out = response.outputs[0]
    assert out.datatype == "BYTES"
    assert list(out.shape) == [1, len(TRICKY_BYTES)]
    assert response.raw_output_contents[0] == serialized_bytes(TRICKY_BYTES)
    got = result.as_numpy("OUTPUT0")
    assert [bytes(x) for x in got.flatten()] == TRICKY_BYTES


def test_bytes_batch(grpc_client):
    rows = [[b"r0a", b"\x00r0b"], [b"r1a", b"\xffr1b"], [b"", b"r2b"]]
    data = np.array(rows, dtype=np.object_)
    inp = grpcclient.InferInput("INPUT0", [3, 2], "BYTES")
    inp.set_data_from_numpy(data)
    result = grpc_client.infer("simple_identity", [inp])
    got = result.as_numpy("OUTPUT0")
    assert got.shape == (3, 2)
    assert [[bytes(x) for x in row] for row in got] == rows


def test_bytes_utf8_strings(grpc_client):
    strings = ["hello", "", "h\u00e9llo w\u00f6rld", "\u65e5\u672c", "quote\"back\\slash"]
    data = np.array([s.encode("utf-8") for s in strings], dtype=np.object_).reshape(1, 5)
    inp = grpcclient.InferInput("INPUT0", [1, 5], "BYTES")
    inp.set_data_from_numpy(data)
    got = grpc_client.infer("identity_bytes", [inp]).as_numpy("OUTPUT0")
    assert [bytes(x).decode("utf-8") for x in got.flatten()] == strings


# -- typed InferTensorContents (raw stub) -------------------------------------------

# (datatype, contents field, values, numpy dtype of the raw output)
TYPED_CASES = [
    ("BOOL", "bool_contents", [True, False, True, False], np.bool_),
    ("INT8", "int_contents", [-128, 127, 0, -1], np.int8),
    ("INT16", "int_contents", [-32768, 32767, 0, -1], np.int16),
    ("INT32", "int_contents", [-(2**31), 2**31 - 1, 0, -1], np.int32),
    ("INT64", "int64_contents", [-(2**63), 2**63 - 1, 0, -1], np.int64),
    ("UINT8", "uint_contents", [0, 255, 1, 128], np.uint8),
    ("UINT16", "uint_contents", [0, 65535, 1, 32768], np.uint16),
    ("UINT32", "uint_contents", [0, 2**32 - 1, 1, 2**31], np.uint32),
    ("UINT64", "uint64_contents", [0, 2**64 - 1, 1, 2**63], np.uint64),
    ("FP32", "fp32_contents", [0.5, -1.25, 3.0e38, -0.0], np.float32),
    ("FP64", "fp64_contents", [0.1, -1.5e308, 2.0, -0.0], np.float64),
]


def typed_request(model: str, datatype: str, field: str, values, shape=(1, 4)):
    req = service_pb2.ModelInferRequest(model_name=model, id="typed")
    tensor = req.inputs.add(name="INPUT0", datatype=datatype, shape=list(shape))
    getattr(tensor.contents, field).extend(values)
    return req


@pytest.mark.parametrize("datatype,field,values,dtype", TYPED_CASES, ids=[c[0] for c in TYPED_CASES])
def test_typed_contents(grpc_stub, datatype, field, values, dtype):
    """Typed contents are accepted (INT8/INT16 narrowed from int_contents,
    UINT8/UINT16 from uint_contents) and the output still comes back raw."""
    req = typed_request(identity_model_name(datatype), datatype, field, values)
    resp = grpc_stub.ModelInfer(req, timeout=10)
    assert resp.id == "typed"
    assert len(resp.outputs) == 1 and len(resp.raw_output_contents) == 1
    out = resp.outputs[0]
    assert out.datatype == datatype
    assert list(out.shape) == [1, 4]
    assert not out.HasField("contents")
    want = np.array(values, dtype=dtype).tobytes()
    assert resp.raw_output_contents[0] == want


def test_typed_bytes_contents(grpc_stub):
    req = typed_request("identity_bytes", "BYTES", "bytes_contents", TRICKY_BYTES, shape=(1, len(TRICKY_BYTES)))
    resp = grpc_stub.ModelInfer(req, timeout=10)
    assert resp.outputs[0].datatype == "BYTES"
    assert resp.raw_output_contents[0] == serialized_bytes(TRICKY_BYTES)


def test_typed_contents_on_simple(grpc_stub):
    req = service_pb2.ModelInferRequest(model_name="simple")
    a = list(range(16))
    b = [5] * 16
    for name, values in (("INPUT0", a), ("INPUT1", b)):
        t = req.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        t.contents.int_contents.extend(values)
    req.outputs.add(name="OUTPUT0")
    resp = grpc_stub.ModelInfer(req, timeout=10)
    assert [o.name for o in resp.outputs] == ["OUTPUT0"]
    got = np.frombuffer(resp.raw_output_contents[0], dtype=np.int32)
    assert got.tolist() == [x + 5 for x in a]


def test_raw_stub_parameters_ignored(grpc_stub):
    """Request and output parameters Triton does not reserve are passed to
    the model and otherwise ignored (infer_handler.cc
    SetInferenceRequestMetadata): the identity model answers normally."""
    data = np.arange(4, dtype=np.float32).reshape(1, 4)
    req = service_pb2.ModelInferRequest(model_name="identity_fp32", id="params")
    req.parameters["my_flag"].bool_param = True
    req.parameters["my_count"].int64_param = 3
    req.parameters["my_text"].string_param = "x"
    req.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 4])
    req.raw_input_contents.append(data.tobytes())
    resp = grpc_stub.ModelInfer(req, timeout=10)
    assert resp.id == "params"
    assert resp.raw_output_contents[0] == data.tobytes()
