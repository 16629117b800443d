"""Health, server metadata, model metadata and model configuration, as
Triton's Python client sees them (KServe v2 core + model_configuration)."""

from __future__ import annotations

import json

import pytest
from tritonclient.utils import InferenceServerException

from trtis_harness import CLASS_LABELS, IDENTITY_TYPES, assert_client_error, identity_model_name


# -- health -----------------------------------------------------------------


def test_health_live_and_ready_raw(server):
    for path in ("/v2/health/live", "/v2/health/ready"):
        status, _, _ = server.request("GET", path)
        assert status == 200, path


def test_health_via_client(client):
    assert client.is_server_live() is True
    assert client.is_server_ready() is True


def test_model_ready(client):
    assert client.is_model_ready("simple") is True
    assert client.is_model_ready("simple", "1") is True
    assert client.is_model_ready("identity_fp32") is True
    # A version that does not exist, and a model that does not exist.
    assert client.is_model_ready("simple", "2") is False
    assert client.is_model_ready("no_such_model") is False


def test_model_ready_raw_status(server):
    status, _, _ = server.request("GET", "/v2/models/simple/versions/1/ready")
    assert status == 200
    # Triton (http_server.cc HandleModelReady) answers 400 "Model version not
    # ready" for a model/version that is not ready; KServe only says non-200.
    status, _, _ = server.request("GET", "/v2/models/simple/versions/2/ready")
    assert status == 400
    status, _, _ = server.request("GET", "/v2/models/no_such_model/ready")
    assert status == 400


# -- server metadata ----------------------------------------------------------


def test_server_metadata(client):
    md = client.get_server_metadata()
    assert isinstance(md["name"], str) and md["name"]
    assert isinstance(md["version"], str) and md["version"]
    extensions = md["extensions"]
    assert isinstance(extensions, list)
    for ext in (
        "binary_tensor_data",
        "classification",
        "model_repository",
        "model_configuration",
        "statistics",
        "sequence",
    ):
        assert ext in extensions, f"extension {ext!r} missing from {extensions}"


def test_server_metadata_raw(server):
    status, headers, body = server.request("GET", "/v2")
    assert status == 200
    doc = json.loads(body)
    assert set(doc) >= {"name", "version", "extensions"}


# -- model metadata -------------------------------------------------------------


def test_model_metadata_simple(client):
    md = client.get_model_metadata("simple")
    assert md["name"] == "simple"
    assert md["versions"] == ["1"]
    assert md["platform"] == "onnxruntime_onnx"
    assert [(t["name"], t["datatype"], t["shape"]) for t in md["inputs"]] == [
        ("INPUT0", "INT32", [-1, 16]),
        ("INPUT1", "INT32", [-1, 16]),
    ]
    assert [(t["name"], t["datatype"], t["shape"]) for t in md["outputs"]] == [
        ("OUTPUT0", "INT32", [-1, 16]),
        ("OUTPUT1", "INT32", [-1, 16]),
    ]


def test_model_metadata_with_version(client):
    md = client.get_model_metadata("simple", "1")
    assert md["name"] == "simple"
    assert md["versions"] == ["1"]


@pytest.mark.parametrize("datatype", [d for d, _ in IDENTITY_TYPES])
def test_model_metadata_identity(client, datatype):
    name = identity_model_name(datatype)
    md = client.get_model_metadata(name)
    assert md["name"] == name
    assert md["versions"] == ["1"]
    # core tritonserver.cc: platform falls back to the backend name.
    assert md["platform"] == "identity"
    assert md["inputs"] == [{"name": "INPUT0", "datatype": datatype, "shape": [-1, -1]}]
    assert md["outputs"] == [{"name": "OUTPUT0", "datatype": datatype, "shape": [-1, -1]}]


def test_model_metadata_unknown_model(client):
    with pytest.raises(InferenceServerException) as e:
        client.get_model_metadata("no_such_model")
    assert_client_error(e.value, 404, "Request for unknown model: 'no_such_model' is not found")


def test_model_metadata_unknown_version(client):
    with pytest.raises(InferenceServerException) as e:
        client.get_model_metadata("simple", "2")
    assert_client_error(e.value, 404, "Request for unknown model: 'simple' version 2 is not found")


# -- model configuration -------------------------------------------------------


def test_model_config_simple(client):
    cfg = client.get_model_config("simple")
    assert cfg["name"] == "simple"
    assert cfg["platform"] == "onnxruntime_onnx"
    assert cfg["max_batch_size"] == 8
    assert [i["name"] for i in cfg["input"]] == ["INPUT0", "INPUT1"]
    assert [o["name"] for o in cfg["output"]] == ["OUTPUT0", "OUTPUT1"]
    for io in cfg["input"] + cfg["output"]:
        assert io["data_type"] == "TYPE_INT32"
        # Triton rewrites protobuf's int64-as-string JSON into numbers.
        assert io["dims"] == [16]
        assert all(type(d) is int for d in io["dims"]), io["dims"]


def test_model_config_identity_fp32(client):
    cfg = client.get_model_config("identity_fp32")
    assert cfg["name"] == "identity_fp32"
    assert cfg["backend"] == "identity"
    assert cfg["max_batch_size"] == 8
    assert cfg["input"][0]["name"] == "INPUT0"
    assert cfg["input"][0]["data_type"] == "TYPE_FP32"
    assert cfg["input"][0]["dims"] == [-1]
    assert type(cfg["input"][0]["dims"][0]) is int
    assert cfg["output"][0]["name"] == "OUTPUT0"
    assert cfg["output"][0]["data_type"] == "TYPE_FP32"


def test_model_config_string_type(client):
    cfg = client.get_model_config("identity_bytes")
    assert cfg["input"][0]["data_type"] == "TYPE_STRING"


def test_model_config_label_filename(client):
    cfg = client.get_model_config("identity_class")
    assert cfg["output"][0]["label_filename"] == "labels.txt"
    assert cfg["output"][0]["dims"] == [len(CLASS_LABELS)]


def test_model_config_raw_numbers(server):
    """The config body itself carries dims and max_batch_size as JSON numbers."""
    status, _, body = server.request("GET", "/v2/models/simple/versions/1/config")
    assert status == 200
    doc = json.loads(body)
    assert type(doc["max_batch_size"]) is int
    assert doc["input"][0]["dims"] == [16]


def test_model_config_unknown_model(client):
    with pytest.raises(InferenceServerException) as e:
        client.get_model_config("no_such_model")
    assert_client_error(e.value, 404, "Request for unknown model: 'no_such_model' is not found")
