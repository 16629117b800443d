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
    ShmRegions,
    build_full_repository,
    build_shm_repository,
    build_tiny_repository,
    grpc_channel_for,
    grpc_client_for,
    require_client_shm,
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


# -- system shared memory ------------------------------------------------------
# A separate server started with Triton's `--allow-client-shm=true`, so the
# main server keeps the default (client shared memory refused).


@pytest.fixture(scope="session")
def shm_repo(tmp_path_factory):
    return build_shm_repository(tmp_path_factory.mktemp("trtis_shm") / "models")


@pytest.fixture(scope="session")
def shm_server(shm_repo):
    """`simple`, `identity_bytes`, `identity_fp32`; client shared memory on."""
    require_client_shm()
    yield from running_server(shm_repo, ["--allow-client-shm=true"], name="shm server")


@pytest.fixture(scope="session")
def shm_client(shm_server):
    c = httpclient.InferenceServerClient(
        shm_server.url, connection_timeout=10.0, network_timeout=30.0
    )
    yield c
    c.close()


@pytest.fixture(scope="session")
def shm_grpc_client(shm_server):
    c = grpc_client_for(shm_server)
    yield c
    c.close()


@pytest.fixture(scope="session")
def shm_grpc_stub(shm_server):
    from tritonclient.grpc import service_pb2_grpc

    channel = grpc_channel_for(shm_server)
    yield service_pb2_grpc.GRPCInferenceServiceStub(channel)
    channel.close()


@pytest.fixture
def shm_regions():
    """Creates shared-memory objects for one test (ShmRegions.create) and
    unlinks all of them afterwards, pass or fail."""
    regions = ShmRegions()
    try:
        yield regions
    finally:
        regions.destroy_all()


# -- GPU tests -------------------------------------------------------------------
# Marked `gpu`: skipped unless scripts/test-gpu.sh runs them on a machine
# with a GPU (TRTIS_GPU_TESTS=1).


def pytest_collection_modifyitems(config, items):
    import os

    if os.environ.get("TRTIS_GPU_TESTS") == "1":
        return
    skip = pytest.mark.skip(reason="needs a GPU: scripts/test-gpu.sh runs it on a GPU machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
