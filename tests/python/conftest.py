"""Fixtures for the HTTP/REST and gRPC compatibility suites: a test model
repository built in a temporary directory, a real `trtis serve` process
(HTTP and gRPC listeners on ephemeral ports), and Triton's own Python
clients (`tritonclient.http`, `tritonclient.grpc`) pointed at it.

Run: .venv/bin/python -m pytest tests/python -q
"""

from __future__ import annotations

import pytest
import tritonclient.http as httpclient

from trtis_harness import (
    build_full_repository,
    build_tiny_repository,
    grpc_channel_for,
    grpc_client_for,
    running_server,
)


@pytest.fixture(scope="session")
def model_repo(tmp_path_factory):
    return build_full_repository(tmp_path_factory.mktemp("trtis") / "models")


@pytest.fixture(scope="session")
def tiny_repo(tmp_path_factory):
    return build_tiny_repository(tmp_path_factory.mktemp("trtis_tiny") / "models")


@pytest.fixture(scope="session")
def server(model_repo):
    """The main server: every model of the test repository loaded."""
    yield from running_server(model_repo, name="main server")


@pytest.fixture(scope="session")
def client(server):
    c = httpclient.InferenceServerClient(
        server.url, connection_timeout=10.0, network_timeout=30.0
    )
    yield c
    c.close()


@pytest.fixture(scope="session")
def grpc_client(server):
    """tritonclient.grpc on the main server's gRPC port."""
    c = grpc_client_for(server)
    yield c
    c.close()


@pytest.fixture(scope="session")
def grpc_stub(server):
    """The generated stub itself (tritonclient.grpc.service_pb2_grpc), for
    requests tritonclient cannot build (typed `contents`, missing raw data,
    `repository_name`, ...). Raises grpc.RpcError."""
    from tritonclient.grpc import service_pb2_grpc

    channel = grpc_channel_for(server)
    yield service_pb2_grpc.GRPCInferenceServiceStub(channel)
    channel.close()
