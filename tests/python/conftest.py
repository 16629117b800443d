"""Fixtures for the HTTP/REST compatibility suite: a test model repository
built in a temporary directory, a real `trtis serve` process, and Triton's
own Python client (`tritonclient.http`) pointed at it.

Run: .venv/bin/python -m pytest tests/python -q
"""

from __future__ import annotations

import pytest
import tritonclient.http as httpclient

from trtis_harness import build_full_repository, build_tiny_repository, running_server


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
