"""Health, server metadata, model metadata and model configuration over
gRPC (`inference.GRPCInferenceService`), as tritonclient.grpc sees them.

Triton sources (server src/grpc/grpc_server.cc, CommonHandler):
  ServerLive/ServerReady    TRITONSERVER_ServerIsLive/IsReady -> `live`/`ready`
  ModelReady                core src/server.cc InferenceServer::ModelIsReady:
                            an unknown model or version is *not an error*,
                            just `ready: false` (status OK)
  ModelMetadata/ModelConfig same core calls and messages as HTTP; NOT_FOUND
                            for an unknown model/version
  version strings           server src/common.cc GetModelVersionFromString:
                            INVALID_ARG "failed to get model version from
                            specified version string '<v>' ..."
  grpc.health.v1.Health     RegisterHealthCheck: SERVING when the server is
                            ready
"""

from __future__ import annotations

import grpc
import pytest
from tritonclient.grpc import model_config_pb2, service_pb2
from tritonclient.utils import InferenceServerException

from trtis_harness import (
    CLASS_LABELS,
    IDENTITY_TYPES,
    assert_grpc_error,
    identity_model_name,
    require_grpc,
)

# -- health -----------------------------------------------------------------


def test_health_live_and_ready(grpc_client):
    assert grpc_client.is_server_live() is True
    assert grpc_client.is_server_ready() is True


def test_health_raw_stub(grpc_stub):
    assert grpc_stub.ServerLive(service_pb2.ServerLiveRequest()).live is True
    assert grpc_stub.ServerReady(service_pb2.ServerReadyRequest()).ready is True


def test_model_ready(grpc_client):
    assert grpc_client.is_model_ready("simple") is True
    assert grpc_client.is_model_ready("simple", "1") is True
    assert grpc_client.is_model_ready("identity_fp32") is True
    assert grpc_client.is_model_ready("identity_bytes", "1") is True


def test_model_ready_missing_is_false_not_an_error(grpc_stub):
    """Unlike HTTP (400), gRPC ModelReady answers OK with ready=false for a
    version or a model that does not exist (core InferenceServer::ModelIsReady
    returns Success; the RPC copies `ready`)."""
    for name, version in (("simple", "2"), ("no_such_model", ""), ("no_such_model", "1")):
        resp = grpc_stub.ModelReady(service_pb2.ModelReadyRequest(name=name, version=version))
        assert resp.ready is False, (name, version)


def test_model_ready_missing_via_client(grpc_client):
    # tritonclient would raise if the status were not OK.
    assert grpc_client.is_model_ready("simple", "2") is False
    assert grpc_client.is_model_ready("no_such_model") is False


def test_model_ready_bad_version_string(grpc_client):
    with pytest.raises(InferenceServerException) as e:
        grpc_client.is_model_ready("simple", "abc")
    assert_grpc_error(
        e.value,
        "INVALID_ARGUMENT",
        "failed to get model version from specified version string 'abc'",
        "version should be an integral value > 0",
    )


def test_grpc_health_service(server):
    """grpc.health.v1.Health/Check (Triton registers it next to its own
    service): SERVING while the server is ready. Encoded by hand so no
    grpcio-health-checking is needed: the request is empty, the response is
    field 1 (status) varint 1 = SERVING."""
    with grpc.insecure_channel(require_grpc(server).grpc_url) as channel:
        check = channel.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        assert check(b"", timeout=10) == b"\x08\x01"


# -- server metadata ----------------------------------------------------------


def test_server_metadata(grpc_client):
    md = grpc_client.get_server_metadata()
    assert isinstance(md, service_pb2.ServerMetadataResponse)
    assert md.name
    assert md.version
    for ext in (
        "binary_tensor_data",
        "classification",
        "model_repository",
        "model_configuration",
        "statistics",
        "sequence",
    ):
        assert ext in md.extensions, f"extension {ext!r} missing from {list(md.extensions)}"


def test_server_metadata_same_as_http(grpc_client, client):
    g = grpc_client.get_server_metadata(as_json=True)
    h = client.get_server_metadata()
    assert g["name"] == h["name"]
    assert g["version"] == h["version"]
    assert g["extensions"] == h["extensions"]


# -- model metadata -------------------------------------------------------------


def io_list(tensors):
    return [(t.name, t.datatype, list(t.shape)) for t in tensors]


def test_model_metadata_simple(grpc_client):
    md = grpc_client.get_model_metadata("simple")
    assert isinstance(md, service_pb2.ModelMetadataResponse)
    assert md.name == "simple"
    assert list(md.versions) == ["1"]
    assert md.platform == "onnxruntime_onnx"
    assert io_list(md.inputs) == [
        ("INPUT0", "INT32", [-1, 16]),
        ("INPUT1", "INT32", [-1, 16]),
    ]
    assert io_list(md.outputs) == [
        ("OUTPUT0", "INT32", [-1, 16]),
        ("OUTPUT1", "INT32", [-1, 16]),
    ]


def test_model_metadata_with_version(grpc_client):
    md = grpc_client.get_model_metadata("simple", "1")
    assert md.name == "simple"
    assert list(md.versions) == ["1"]


def test_model_metadata_as_json(grpc_client):
    """tritonclient converts with MessageToJson: int64 shape values arrive as
    strings ("-1"), exactly as against Triton."""
    md = grpc_client.get_model_metadata("simple", as_json=True)
    assert md["name"] == "simple"
    assert md["inputs"][0] == {"name": "INPUT0", "datatype": "INT32", "shape": ["-1", "16"]}


@pytest.mark.parametrize("datatype", [d for d, _ in IDENTITY_TYPES])
def test_model_metadata_identity(grpc_client, datatype):
    name = identity_model_name(datatype)
    md = grpc_client.get_model_metadata(name)
    assert md.name == name
    assert list(md.versions) == ["1"]
    assert md.platform == "identity"
    assert io_list(md.inputs) == [("INPUT0", datatype, [-1, -1])]
    assert io_list(md.outputs) == [("OUTPUT0", datatype, [-1, -1])]


def test_model_metadata_unknown_model(grpc_client):
    with pytest.raises(InferenceServerException) as e:
        grpc_client.get_model_metadata("no_such_model")
    assert_grpc_error(e.value, "NOT_FOUND", "Request for unknown model: 'no_such_model' is not found")


def test_model_metadata_unknown_version(grpc_client):
    with pytest.raises(InferenceServerException) as e:
        grpc_client.get_model_metadata("simple", "2")
    assert_grpc_error(e.value, "NOT_FOUND", "Request for unknown model: 'simple' version 2 is not found")


def test_model_metadata_bad_version_string(grpc_client):
    with pytest.raises(InferenceServerException) as e:
        grpc_client.get_model_metadata("simple", "one")
    assert_grpc_error(
        e.value, "INVALID_ARGUMENT", "failed to get model version from specified version string 'one'"
    )


# -- model configuration -------------------------------------------------------


def test_model_config_simple(grpc_client):
    resp = grpc_client.get_model_config("simple")
    assert isinstance(resp, service_pb2.ModelConfigResponse)
    cfg = resp.config
    assert cfg.name == "simple"
    assert cfg.platform == "onnxruntime_onnx"
    assert cfg.max_batch_size == 8
    assert [i.name for i in cfg.input] == ["INPUT0", "INPUT1"]
    assert [o.name for o in cfg.output] == ["OUTPUT0", "OUTPUT1"]
    for io in list(cfg.input) + list(cfg.output):
        assert io.data_type == model_config_pb2.TYPE_INT32
        assert list(io.dims) == [16]


def test_model_config_with_version(grpc_client):
    assert grpc_client.get_model_config("simple", "1").config.name == "simple"


def test_model_config_identity_fp32(grpc_client):
    cfg = grpc_client.get_model_config("identity_fp32").config
    assert cfg.name == "identity_fp32"
    assert cfg.backend == "identity"
    assert cfg.max_batch_size == 8
    assert cfg.input[0].name == "INPUT0"
    assert cfg.input[0].data_type == model_config_pb2.TYPE_FP32
    assert list(cfg.input[0].dims) == [-1]
    assert cfg.output[0].name == "OUTPUT0"
    assert cfg.output[0].data_type == model_config_pb2.TYPE_FP32


@pytest.mark.parametrize("datatype,config_type", IDENTITY_TYPES)
def test_model_config_datatype_enum(grpc_client, datatype, config_type):
    cfg = grpc_client.get_model_config(identity_model_name(datatype)).config
    want = model_config_pb2.DataType.Value(config_type)
    assert cfg.input[0].data_type == want
    assert cfg.output[0].data_type == want


def test_model_config_label_filename(grpc_client):
    cfg = grpc_client.get_model_config("identity_class").config
    assert cfg.output[0].label_filename == "labels.txt"
    assert list(cfg.output[0].dims) == [len(CLASS_LABELS)]


def test_model_config_as_json(grpc_client):
    """tritonclient's MessageToJson (preserving field names): int32 values are
    numbers, int64 dims are strings, enums their names."""
    doc = grpc_client.get_model_config("simple", as_json=True)
    cfg = doc["config"]
    assert cfg["name"] == "simple"
    assert cfg["max_batch_size"] == 8
    assert cfg["input"][0]["data_type"] == "TYPE_INT32"
    assert cfg["input"][0]["dims"] == ["16"]


def test_model_config_same_as_http(grpc_client, client):
    """The gRPC config carries what the HTTP config says (names, types,
    dims, batching) for every model."""
    for name in ["simple", "simple_identity", "identity_class"] + [
        identity_model_name(d) for d, _ in IDENTITY_TYPES
    ]:
        g = grpc_client.get_model_config(name).config
        h = client.get_model_config(name)
        assert g.name == h["name"]
        assert g.max_batch_size == h["max_batch_size"]
        for gl, hl in ((g.input, h["input"]), (g.output, h["output"])):
            assert [t.name for t in gl] == [t["name"] for t in hl]
            assert [model_config_pb2.DataType.Name(t.data_type) for t in gl] == [
                t["data_type"] for t in hl
            ]
            assert [list(t.dims) for t in gl] == [t["dims"] for t in hl]


def test_model_config_unknown_model(grpc_client):
    with pytest.raises(InferenceServerException) as e:
        grpc_client.get_model_config("no_such_model")
    assert_grpc_error(e.value, "NOT_FOUND", "Request for unknown model: 'no_such_model' is not found")


def test_model_config_unknown_version(grpc_client):
    with pytest.raises(InferenceServerException) as e:
        grpc_client.get_model_config("simple", "3")
    assert_grpc_error(e.value, "NOT_FOUND", "Request for unknown model: 'simple' version 3 is not found")
