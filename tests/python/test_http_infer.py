"""Inference over HTTP/REST with Triton's Python client: JSON tensors and the
binary tensor data extension, on the ONNX `simple` model and on identity
models of every datatype."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from trtis_harness import assert_client_error, identity_model_name

RNG = np.random.default_rng(20240613)


def simple_inputs(batch: int, binary: bool):
    a = RNG.integers(-1000, 1000, size=(batch, 16), dtype=np.int32)
    b = RNG.integers(-1000, 1000, size=(batch, 16), dtype=np.int32)
    inputs = [
        httpclient.InferInput("INPUT0", [batch, 16], "INT32"),
        httpclient.InferInput("INPUT1", [batch, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(a, binary_data=binary)
    inputs[1].set_data_from_numpy(b, binary_data=binary)
    return a, b, inputs


# -- simple (ONNX Runtime) ----------------------------------------------------


@pytest.mark.parametrize("batch", [1, 8])
@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_simple_sum_and_difference(client, batch, binary):
    a, b, inputs = simple_inputs(batch, binary)
    outputs = [
        httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary),
        httpclient.InferRequestedOutput("OUTPUT1", binary_data=binary),
    ]
    result = client.infer("simple", inputs, outputs=outputs, request_id=f"req-{batch}")

    response = result.get_response()
    assert response["model_name"] == "simple"
    assert response["model_version"] == "1"
    assert response["id"] == f"req-{batch}"

    for name, expected in (("OUTPUT0", a + b), ("OUTPUT1", a - b)):
        out = result.get_output(name)
        assert out["datatype"] == "INT32"
        assert out["shape"] == [batch, 16]
        params = out.get("parameters") or {}
        if binary:
            assert params.get("binary_data_size") == batch * 16 * 4
            assert "data" not in out
        else:
            assert "binary_data_size" not in params
            assert len(out["data"]) == batch * 16
            assert all(type(v) is int for v in out["data"]), out["data"][:5]
        got = result.as_numpy(name)
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, expected)


def test_simple_mixed_json_and_binary(client):
    """One input as JSON, one binary; one output JSON, one binary."""
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), 3, dtype=np.int32)
    inputs = [
        httpclient.InferInput("INPUT0", [1, 16], "INT32"),
        httpclient.InferInput("INPUT1", [1, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(a, binary_data=False)
    inputs[1].set_data_from_numpy(b, binary_data=True)
    outputs = [
        httpclient.InferRequestedOutput("OUTPUT0", binary_data=True),
        httpclient.InferRequestedOutput("OUTPUT1", binary_data=False),
    ]
    result = client.infer("simple", inputs, outputs=outputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    assert "data" in result.get_output("OUTPUT1")


def test_simple_all_outputs_when_none_requested(client):
    """No `outputs` in the request: every output comes back (the client then
    sets `binary_data_output`, so binary)."""
    a, b, inputs = simple_inputs(2, binary=True)
    result = client.infer("simple", inputs)
    names = sorted(o["name"] for o in result.get_response()["outputs"])
    assert names == ["OUTPUT0", "OUTPUT1"]
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    assert "binary_data_size" in result.get_output("OUTPUT0")["parameters"]


def test_simple_one_requested_output(client):
    a, b, inputs = simple_inputs(1, binary=True)
    result = client.infer(
        "simple", inputs, outputs=[httpclient.InferRequestedOutput("OUTPUT1")]
    )
    assert [o["name"] for o in result.get_response()["outputs"]] == ["OUTPUT1"]
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_simple_explicit_version(client):
    a, b, inputs = simple_inputs(1, binary=True)
    result = client.infer("simple", inputs, model_version="1")
    assert result.get_response()["model_version"] == "1"
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)


# -- identity, every datatype ------------------------------------------------


def sample(datatype: str, json_safe: bool) -> np.ndarray:
    """A [2, 5] tensor with each type's edge values."""
    if datatype == "BOOL":
        flat = [True, False, True, True, False, False, True, False, False, True]
        return np.array(flat, dtype=np.bool_).reshape(2, 5)
    if datatype in ("UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64"):
        dt = np.dtype(datatype.lower())
        info = np.iinfo(dt)
        flat = [info.min, info.max, 0, 1, 7, info.max - 1, info.min + 1, 42, 100, 3]
        return np.array(flat, dtype=dt).reshape(2, 5)
    if datatype == "FP16":
        flat = [0.0, -0.0, 0.5, -2.0, 65504.0, 6.1035e-05, 1.0, -1.5, 0.25, 3.0]
        if not json_safe:
            flat[8], flat[9] = np.inf, np.nan
        return np.array(flat, dtype=np.float16).reshape(2, 5)
    if datatype in ("FP32", "FP64"):
        dt = np.float32 if datatype == "FP32" else np.float64
        big = 3.4e38 if datatype == "FP32" else 1.7e308
        flat = [0.0, -1.5, 0.1, big, -big, 1e-30, 123456.789, -0.0, 2.5, 1.0 / 3.0]
        if not json_safe:
            flat[8], flat[9] = np.inf, np.nan
        return np.array(flat, dtype=dt).reshape(2, 5)
    raise AssertionError(datatype)


NUMERIC_TYPES = [
    "BOOL", "UINT8", "UINT16", "UINT32", "UINT64",
    "INT8", "INT16", "INT32", "INT64", "FP16", "FP32", "FP64",
]


def identity_roundtrip(client, datatype, data, binary_in, binary_out):
    model = identity_model_name(datatype)
    inp = httpclient.InferInput("INPUT0", list(data.shape), datatype)
    inp.set_data_from_numpy(data, binary_data=binary_in)
    result = client.infer(
        model,
        [inp],
        outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary_out)],
    )
    out = result.get_output("OUTPUT0")
    assert out["datatype"] == datatype
    assert out["shape"] == list(data.shape)
    return result.as_numpy("OUTPUT0")


@pytest.mark.parametrize("datatype", NUMERIC_TYPES)
def test_identity_binary(client, datatype):
    data = sample(datatype, json_safe=False)
    got = identity_roundtrip(client, datatype, data, True, True)
    assert got.dtype == data.dtype
    # Byte-exact, so NaN, -0.0 and infinities round-trip too.
    assert got.tobytes() == data.tobytes()


def assert_json_numbers(values, datatype):
    """JSON output data are JSON booleans/numbers, never strings."""
    if datatype == "BOOL":
        want = (bool,)
    elif datatype.startswith(("INT", "UINT")):
        want = (int,)
    else:
        want = (int, float)
    bad = [v for v in values if type(v) not in want]
    assert not bad, f"{datatype} JSON data should be {want}, got {bad[:5]}"


@pytest.mark.parametrize("datatype", [t for t in NUMERIC_TYPES if t != "FP16"])
def test_identity_json(client, datatype):
    data = sample(datatype, json_safe=True)
    model = identity_model_name(datatype)
    inp = httpclient.InferInput("INPUT0", list(data.shape), datatype)
    inp.set_data_from_numpy(data, binary_data=False)
    result = client.infer(
        model, [inp], outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=False)]
    )
    out = result.get_output("OUTPUT0")
    assert out["datatype"] == datatype
    assert out["shape"] == list(data.shape)
    assert len(out["data"]) == data.size
    assert_json_numbers(out["data"], datatype)
    got = result.as_numpy("OUTPUT0")
    assert got.dtype == data.dtype
    np.testing.assert_array_equal(got, data)


@pytest.mark.parametrize("datatype", [t for t in NUMERIC_TYPES if t != "FP16"])
def test_identity_json_in_binary_out(client, datatype):
    data = sample(datatype, json_safe=True)
    got = identity_roundtrip(client, datatype, data, False, True)
    assert got.tobytes() == data.tobytes()


def test_identity_fp16_json_rejected(client):
    """server http_server.cc ReadDataFromJson: FP16 is binary-only in JSON."""
    data = sample("FP16", json_safe=True)
    inp = httpclient.InferInput("INPUT0", list(data.shape), "FP16")
    inp.set_data_from_numpy(data, binary_data=False)
    with pytest.raises(InferenceServerException) as e:
        client.infer(
            "identity_fp16",
            [inp],
            outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)],
        )
    assert_client_error(
        e.value,
        400,
        "receiving FP16 data via JSON is not supported. Please use the binary data "
        "format for input INPUT0",
    )
    assert client.is_server_ready()


def test_identity_batch_of_eight(client):
    data = np.arange(8 * 3, dtype=np.float32).reshape(8, 3)
    got = identity_roundtrip(client, "FP32", data, True, True)
    np.testing.assert_array_equal(got, data)


# -- BYTES ----------------------------------------------------------------------

TRICKY_BYTES = [b"\x00", b"a\x00b\x00", b"\xff\xfe\xfd", b"", b"plain", b"\xc3\x28", b"x" * 300]


@pytest.mark.parametrize("model", ["identity_bytes", "simple_identity"])
def test_bytes_binary_exact(client, model):
    """NUL bytes and invalid UTF-8 survive the binary format unchanged."""
    data = np.array(TRICKY_BYTES, dtype=np.object_).reshape(1, len(TRICKY_BYTES))
    inp = httpclient.InferInput("INPUT0", list(data.shape), "BYTES")
    inp.set_data_from_numpy(data, binary_data=True)
    result = client.infer(
        model, [inp], outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)]
    )
    out = result.get_output("OUTPUT0")
    assert out["datatype"] == "BYTES"
    assert out["shape"] == [1, len(TRICKY_BYTES)]
    # 4-byte length prefix per element.
    assert out["parameters"]["binary_data_size"] == sum(4 + len(b) for b in TRICKY_BYTES)
    got = result.as_numpy("OUTPUT0")
    assert [bytes(x) for x in got.flatten()] == TRICKY_BYTES


def test_bytes_json(client):
    strings = ["hello", "", "h\u00e9llo w\u00f6rld", "\u65e5\u672c", "quote\"back\\slash"]
    data = np.array([s.encode("utf-8") for s in strings], dtype=np.object_).reshape(1, 5)
    inp = httpclient.InferInput("INPUT0", [1, 5], "BYTES")
    inp.set_data_from_numpy(data, binary_data=False)
    result = client.infer(
        "identity_bytes",
        [inp],
        outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=False)],
    )
    out = result.get_output("OUTPUT0")
    assert out["datatype"] == "BYTES"
    assert out["shape"] == [1, 5]
    assert out["data"] == strings


def test_bytes_batch(client):
    rows = [[b"r0a", b"\x00r0b"], [b"r1a", b"\xffr1b"], [b"", b"r2b"]]
    data = np.array(rows, dtype=np.object_)
    inp = httpclient.InferInput("INPUT0", [3, 2], "BYTES")
    inp.set_data_from_numpy(data, binary_data=True)
    result = client.infer("simple_identity", [inp])
    got = result.as_numpy("OUTPUT0")
    assert got.shape == (3, 2)
    assert [[bytes(x) for x in row] for row in got] == rows


def test_bytes_not_utf8_as_json_is_refused(client):
    """Bytes that are not UTF-8 can not be JSON strings: asked for as JSON,
    the request fails (qa/L0_string_io's `binary_false_clients`) instead of
    returning other bytes."""
    data = np.array([b"\xff\xfe"], dtype=np.object_).reshape(1, 1)
    inp = httpclient.InferInput("INPUT0", [1, 1], "BYTES")
    inp.set_data_from_numpy(data, binary_data=True)
    with pytest.raises(InferenceServerException) as e:
        client.infer(
            "identity_bytes",
            [inp],
            outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=False)],
        )
    assert_client_error(e.value, 400, "output 'OUTPUT0'", "not valid UTF-8")


def test_listed_output_without_binary_data_is_json(server):
    """As Triton: `binary_data_output` is for the outputs not listed; a listed
    output without its own `binary_data` comes back as JSON."""
    doc = {
        "parameters": {"binary_data_output": True},
        "inputs": [
            {"name": n, "datatype": "INT32", "shape": [1, 16], "data": list(range(16))}
            for n in ("INPUT0", "INPUT1")
        ],
        "outputs": [
            {"name": "OUTPUT0", "parameters": {"binary_data": False}},
            {"name": "OUTPUT1"},
        ],
    }
    status, headers, body = server.request("POST", "/v2/models/simple/infer", json.dumps(doc))
    assert status == 200, body
    assert "inference-header-content-length" not in headers
    outs = {o["name"]: o for o in json.loads(body)["outputs"]}
    assert outs["OUTPUT0"]["data"] == [2 * i for i in range(16)]
    assert outs["OUTPUT1"]["data"] == [0] * 16


def test_reserved_triton_parameter_is_refused(client):
    """qa/L0_parameters: request parameters starting with `triton_` are
    Triton's."""
    _, _, inputs = simple_inputs(1, binary=True)
    with pytest.raises(InferenceServerException) as e:
        client.infer("simple", inputs, parameters={"triton_": True, "key2": "value2"})
    assert_client_error(
        e.value, 400, "parameter keys starting with 'triton_' are reserved for Triton usage"
    )


# -- raw JSON request, no client library ------------------------------------------


def test_raw_json_request(server):
    doc = {
        "id": "raw-1",
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))},
            # Nested data is accepted too (KServe: row-major, nested or flat).
            {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [[1] * 16]},
        ],
        "outputs": [{"name": "OUTPUT0"}],
    }
    status, _, body = server.post_json("/v2/models/simple/infer", doc)
    assert status == 200, body
    resp = json.loads(body)
    assert resp["model_name"] == "simple"
    assert resp["id"] == "raw-1"
    assert len(resp["outputs"]) == 1
    out = resp["outputs"][0]
    assert out["name"] == "OUTPUT0"
    assert out["datatype"] == "INT32"
    assert out["shape"] == [1, 16]
    assert out["data"] == [i + 1 for i in range(16)]


def test_raw_binary_request_and_large_binary_tensors(server):
    # Inference-Header-Content-Length 0: the body is the only input's data.
    # Then binary tensors of 1 MB and 6 MB, and `simple`'s two binary inputs:
    # the body is read in its two parts, the first binary input keeping the
    # buffer it was read into, the next ones copied out of it.
    name = identity_model_name("FP32")
    data = np.arange(16, dtype=np.float32)
    status, headers, body = server.request(
        "POST", f"/v2/models/{name}/infer", data.tobytes(),
        {"Inference-Header-Content-Length": "0", "Content-Type": "application/octet-stream"},
    )
    assert status == 200, body
    length = int(headers["inference-header-content-length"])
    doc = json.loads(body[:length])
    assert doc["outputs"][0]["shape"] == [1, 16]
    assert np.array_equal(np.frombuffer(body[length:], np.float32), data)

    status, _, body = server.request(
        "POST", "/v2/models/simple/infer", b"\1" * 64,
        {"Inference-Header-Content-Length": "0"},
    )
    assert status == 400, body
    assert (
        b"Raw request must only have 1 input (found 1) to be deduced but got 2 inputs "
        b"in 'simple' model configuration" in body
    ), body

    for count in (1 << 18, 6 << 18):
        a = np.random.default_rng(count).standard_normal(count, dtype=np.float32)
        header = json.dumps({
            "inputs": [{"name": "INPUT0", "shape": [1, count], "datatype": "FP32",
                        "parameters": {"binary_data_size": a.nbytes}}],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
        }).encode()
        status, headers, body = server.request(
            "POST", f"/v2/models/{name}/infer", header + a.tobytes(),
            {"Inference-Header-Content-Length": str(len(header))},
        )
        assert status == 200, body[:300]
        length = int(headers["inference-header-content-length"])
        assert np.array_equal(np.frombuffer(body[length:], np.float32), a)

    a, b = np.arange(16, dtype=np.int32), np.full(16, 5, dtype=np.int32)
    header = json.dumps({
        "inputs": [{"name": n, "shape": [1, 16], "datatype": "INT32",
                    "parameters": {"binary_data_size": 64}} for n in ("INPUT0", "INPUT1")],
        "outputs": [{"name": "OUTPUT1", "parameters": {"binary_data": True}}],
    }).encode()
    status, headers, body = server.request(
        "POST", "/v2/models/simple/infer", header + a.tobytes() + b.tobytes(),
        {"Inference-Header-Content-Length": str(len(header))},
    )
    assert status == 200, body[:300]
    length = int(headers["inference-header-content-length"])
    assert np.array_equal(np.frombuffer(body[length:], np.int32), a - b)
