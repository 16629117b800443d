"""Fixtures of the v1 API suite (legacy TRTIS HTTP `/api/...` and gRPC
`nvidia.inferenceserver.GRPCService`): test model repositories built in
temporary directories, real `trtis serve` processes started with the
protocol suite's harness (tests/python/trtis_harness.py: ephemeral ports,
clean SIGINT shutdown checked), and the v1 clients of v1client.py on them.

Servers shared by several modules live here, session-scoped:

  * `server`: the main one (`v1_repo`: simple, simple_identity, identity
    models of every datatype, labelled identity classifiers, a two-version
    model, efficientnet_lite0, simple_sequence, simple_accumulator);
    default model control mode, no client shared memory.
  * `explicit_server`: `--model-control-mode explicit`, nothing loaded at
    start (model load/unload over HTTP and gRPC).
  * `shm_server`: `--allow-client-shm` (system shared memory over HTTP and
    gRPC).

Run: .venv-v1/bin/python -m pytest tests/python_v1 -q
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))  # v1client, v1repo
if str(HERE.parent / "python") not in sys.path:
    sys.path.append(str(HERE.parent / "python"))  # trtis_harness

from trtis_harness import _write_identity, require_grpc, running_server  # noqa: E402

import v1client  # noqa: E402
from v1repo import SERVER_ID, build_v1_repository, copy_example  # noqa: E402


@pytest.fixture(scope="session")
def v1_repo(tmp_path_factory):
    return build_v1_repository(tmp_path_factory.mktemp("trtis_v1") / "models")


@pytest.fixture(scope="session")
def server(v1_repo):
    yield from running_server(v1_repo, ["--id", SERVER_ID], name="v1 main server")


@pytest.fixture(scope="session")
def http(server):
    c = v1client.HttpV1(server.host, server.port)
    yield c
    c.close()


@pytest.fixture(scope="session")
def grpc_channel(server):
    channel = v1client.grpc_channel(require_grpc(server).grpc_url)
    yield channel
    channel.close()


@pytest.fixture(scope="session")
def grpc_v1(grpc_channel):
    """GrpcV1: the generated stub, a deadline on every call, any non-OK
    gRPC status a test failure."""
    return v1client.GrpcV1(v1client.grpc_stub(grpc_channel))


# -- explicit model control ----------------------------------------------------


@pytest.fixture(scope="session")
def explicit_server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("trtis_v1_explicit") / "models"
    repo.mkdir(parents=True)
    copy_example(repo, "simple")
    for name in ("ctl_http", "ctl_grpc"):
        _write_identity(repo, name, "TYPE_FP32", dims="4")
    yield from running_server(
        repo, ["--model-control-mode", "explicit"], name="v1 explicit model-control server"
    )


@pytest.fixture(scope="session")
def explicit_http(explicit_server):
    c = v1client.HttpV1(explicit_server.host, explicit_server.port)
    yield c
    c.close()


@pytest.fixture(scope="session")
def explicit_grpc(explicit_server):
    channel = v1client.grpc_channel(require_grpc(explicit_server).grpc_url)
    yield v1client.GrpcV1(v1client.grpc_stub(channel))
    channel.close()


# -- system shared memory ------------------------------------------------------


@pytest.fixture(scope="session")
def shm_server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("trtis_v1_shm") / "models"
    repo.mkdir(parents=True)
    copy_example(repo, "simple")
    _write_identity(repo, "identity_bytes", "TYPE_STRING")
    yield from running_server(repo, ["--allow-client-shm=true"], name="v1 shared-memory server")


@pytest.fixture(scope="session")
def shm_http(shm_server):
    c = v1client.HttpV1(shm_server.host, shm_server.port)
    yield c
    c.close()


@pytest.fixture(scope="session")
def shm_grpc(shm_server):
    channel = v1client.grpc_channel(require_grpc(shm_server).grpc_url)
    yield v1client.GrpcV1(v1client.grpc_stub(channel))
    channel.close()


@pytest.fixture
def shm_regions():
    """POSIX shared-memory objects for one test, unlinked afterwards."""
    regions = v1client.ShmRegions()
    try:
        yield regions
    finally:
        regions.destroy_all()
