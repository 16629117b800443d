"""The model_repository extension over gRPC: RepositoryIndex on the main
server, RepositoryModelLoad/Unload in a server started with
`--model-control-mode explicit --load-model simple`.

Triton sources (server src/grpc/grpc_server.cc, CommonHandler):
  RepositoryIndex      TRITONSERVER_ServerModelIndex; `ready: true` lists only
                       READY models; a non-empty `repository_name` answers
                       UNSUPPORTED -> UNIMPLEMENTED "'repository_name'
                       specification is not supported" (also Load/Unload)
  RepositoryModelLoad  parameters other than "config" / "file:..." are
                       INVALID_ARG "unrecognized load parameter '<k>'.";
                       core LoadModel of a model not in the repository:
                       INTERNAL "failed to load '<m>', failed to poll from
                       model repository"
"""

from __future__ import annotations

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from trtis_harness import (
    IDENTITY_TYPES,
    assert_grpc_error,
    assert_rpc_error,
    grpc_channel_for,
    grpc_client_for,
    identity_model_name,
    running_server,
    wait_for,
)


def index_by_name(grpc_client) -> dict:
    index = grpc_client.get_model_repository_index()
    assert isinstance(index, service_pb2.RepositoryIndexResponse)
    return {m.name: m for m in index.models}


def test_index_all_ready(grpc_client):
    index = index_by_name(grpc_client)
    expected = ["simple", "simple_identity", "identity_class", "identity_stats", "identity_stats_grpc"]
    expected += [identity_model_name(d) for d, _ in IDENTITY_TYPES]
    for name in expected:
        assert name in index, f"{name} missing from index {sorted(index)}"
        assert index[name].version == "1", index[name]
        assert index[name].state == "READY", index[name]


def test_index_as_json(grpc_client):
    doc = grpc_client.get_model_repository_index(as_json=True)
    simple = next(m for m in doc["models"] if m["name"] == "simple")
    assert simple["version"] == "1"
    assert simple["state"] == "READY"


def test_index_ready_filter(grpc_stub):
    resp = grpc_stub.RepositoryIndex(service_pb2.RepositoryIndexRequest(ready=True), timeout=10)
    names = {m.name for m in resp.models}
    assert "simple" in names
    assert all(m.state == "READY" for m in resp.models)


def test_index_same_as_http(grpc_client, client):
    g = {(m.name, m.version, m.state) for m in grpc_client.get_model_repository_index().models}
    h = {(e["name"], e.get("version", ""), e.get("state", "")) for e in client.get_model_repository_index()}
    assert g == h


@pytest.mark.parametrize("rpc", ["RepositoryIndex", "RepositoryModelLoad", "RepositoryModelUnload"])
def test_repository_name_unsupported(grpc_stub, rpc):
    request = {
        "RepositoryIndex": service_pb2.RepositoryIndexRequest(repository_name="models"),
        "RepositoryModelLoad": service_pb2.RepositoryModelLoadRequest(
            repository_name="models", model_name="simple"
        ),
        "RepositoryModelUnload": service_pb2.RepositoryModelUnloadRequest(
            repository_name="models", model_name="simple"
        ),
    }[rpc]
    with pytest.raises(grpc.RpcError) as e:
        getattr(grpc_stub, rpc)(request, timeout=10)
    assert_rpc_error(e.value, "UNIMPLEMENTED", "'repository_name' specification is not supported")


# -- explicit model control ---------------------------------------------------


@pytest.fixture(scope="module")
def explicit_server(model_repo):
    yield from running_server(
        model_repo,
        ["--model-control-mode", "explicit", "--load-model", "simple"],
        name="gRPC explicit-mode server",
    )


@pytest.fixture(scope="module")
def explicit_client(explicit_server):
    c = grpc_client_for(explicit_server)
    yield c
    c.close()


@pytest.fixture(scope="module")
def explicit_stub(explicit_server):
    channel = grpc_channel_for(explicit_server)
    yield service_pb2_grpc.GRPCInferenceServiceStub(channel)
    channel.close()


def infer_fp32(grpc_client, model="identity_fp32"):
    data = np.array([[1.0, 2.0, 3.0]], dtype=np.float32)
    inp = grpcclient.InferInput("INPUT0", [1, 3], "FP32")
    inp.set_data_from_numpy(data)
    result = grpc_client.infer(model, [inp])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)


def test_explicit_only_requested_model_loaded(explicit_client):
    assert explicit_client.is_server_ready()
    assert explicit_client.is_model_ready("simple")
    assert not explicit_client.is_model_ready("identity_fp32")
    index = index_by_name(explicit_client)
    assert index["simple"].state == "READY"
    # Present in the repository, never loaded: listed, but not READY.
    assert "identity_fp32" in index
    assert index["identity_fp32"].state != "READY"


def test_explicit_ready_filter_lists_only_loaded(explicit_stub):
    resp = explicit_stub.RepositoryIndex(service_pb2.RepositoryIndexRequest(ready=True), timeout=10)
    names = {m.name for m in resp.models}
    assert "simple" in names
    assert "identity_fp64" not in names


def test_explicit_infer_on_unloaded_model_fails(explicit_client):
    with pytest.raises(InferenceServerException) as e:
        infer_fp32(explicit_client, "identity_fp64")
    assert_grpc_error(e.value, "NOT_FOUND", "Request for unknown model: 'identity_fp64'")


def test_explicit_load_missing_model_fails(explicit_client, explicit_server):
    # core model_repository_manager.cc LoadModel: INTERNAL in Triton;
    # NOT_FOUND here (a deliberate difference).
    with pytest.raises(InferenceServerException) as e:
        explicit_client.load_model("does_not_exist")
    assert_grpc_error(
        e.value, "NOT_FOUND", "failed to load 'does_not_exist', failed to poll from model repository"
    )
    assert explicit_client.is_server_ready()
    assert explicit_client.is_model_ready("simple")


@pytest.mark.parametrize("name", ["..", "/etc", "a/../..", "x\x00y", "../simple"])
def test_explicit_load_of_a_name_outside_the_repository(explicit_client, name):
    with pytest.raises(InferenceServerException) as e:
        explicit_client.load_model(name)
    assert_grpc_error(e.value, "INVALID_ARGUMENT", "failed to poll from model repository")
    assert explicit_client.is_server_ready()
    assert explicit_client.is_model_ready("simple")


def test_explicit_load_unrecognized_parameter(explicit_stub, explicit_client):
    req = service_pb2.RepositoryModelLoadRequest(model_name="identity_int8")
    req.parameters["bogus"].bool_param = True
    with pytest.raises(grpc.RpcError) as e:
        explicit_stub.RepositoryModelLoad(req, timeout=30)
    assert_rpc_error(e.value, "INVALID_ARGUMENT", "unrecognized load parameter 'bogus'.")
    assert not explicit_client.is_model_ready("identity_int8")


def test_explicit_load_unload_cycle(explicit_client, explicit_server):
    c = explicit_client
    c.load_model("identity_fp32")
    assert c.is_model_ready("identity_fp32")
    assert c.is_model_ready("identity_fp32", "1")
    assert index_by_name(c)["identity_fp32"].state == "READY"
    infer_fp32(c)
    # Loaded over gRPC, visible over HTTP: one engine.
    if explicit_server.port is not None:
        status, _, _ = explicit_server.request("GET", "/v2/models/identity_fp32/ready")
        assert status == 200

    c.unload_model("identity_fp32")
    assert not c.is_model_ready("identity_fp32")
    assert c.is_server_ready(), "server should stay ready after an unload"

    def unavailable_entry():
        e = index_by_name(c)["identity_fp32"]
        return e if e.state == "UNAVAILABLE" else None

    entry = wait_for(unavailable_entry, timeout=10.0)
    assert entry, f"index after unload: {index_by_name(c)['identity_fp32']}"
    assert entry.version == "1"

    with pytest.raises(InferenceServerException) as e:
        infer_fp32(c)
    assert_grpc_error(
        e.value, "NOT_FOUND", "Request for unknown model: 'identity_fp32' has no available versions"
    )
    assert c.is_model_ready("simple")

    c.load_model("identity_fp32")
    assert c.is_model_ready("identity_fp32")
    infer_fp32(c)


def test_explicit_load_raw_stub_returns_empty_response(explicit_stub, explicit_client):
    resp = explicit_stub.RepositoryModelLoad(
        service_pb2.RepositoryModelLoadRequest(model_name="identity_uint8"), timeout=30
    )
    assert resp == service_pb2.RepositoryModelLoadResponse()
    assert explicit_client.is_model_ready("identity_uint8")
    resp = explicit_stub.RepositoryModelUnload(
        service_pb2.RepositoryModelUnloadRequest(model_name="identity_uint8"), timeout=30
    )
    assert resp == service_pb2.RepositoryModelUnloadResponse()
    assert not explicit_client.is_model_ready("identity_uint8")
