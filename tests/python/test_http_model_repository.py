"""The model_repository extension: the index, and load/unload in a server
started with `--model-control-mode explicit --load-model simple`."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from trtis_harness import (
    IDENTITY_TYPES,
    assert_client_error,
    identity_model_name,
    running_server,
    wait_for,
)


def index_by_name(client) -> dict:
    index = client.get_model_repository_index()
    assert isinstance(index, list)
    return {entry["name"]: entry for entry in index}


def test_index_all_ready(client):
    index = index_by_name(client)
    expected = ["simple", "simple_identity", "identity_class", "identity_stats"]
    expected += [identity_model_name(d) for d, _ in IDENTITY_TYPES]
    for name in expected:
        assert name in index, f"{name} missing from index {sorted(index)}"
        assert index[name]["version"] == "1", index[name]
        assert index[name]["state"] == "READY", index[name]


def test_index_raw_with_ready_filter(server):
    status, _, body = server.post_json("/v2/repository/index", {"ready": True})
    assert status == 200, body
    entries = json.loads(body)
    assert {"name": "simple", "version": "1", "state": "READY"}.items() <= next(
        e for e in entries if e["name"] == "simple"
    ).items()
    assert all(e["state"] == "READY" for e in entries)


# -- explicit model control ---------------------------------------------------


@pytest.fixture(scope="module")
def explicit_server(model_repo):
    yield from running_server(
        model_repo,
        ["--model-control-mode", "explicit", "--load-model", "simple"],
        name="explicit-mode server",
    )


@pytest.fixture(scope="module")
def explicit_client(explicit_server):
    c = httpclient.InferenceServerClient(
        explicit_server.url, connection_timeout=10.0, network_timeout=60.0
    )
    yield c
    c.close()


def infer_fp32(client, model="identity_fp32"):
    data = np.array([[1.0, 2.0, 3.0]], dtype=np.float32)
    inp = httpclient.InferInput("INPUT0", [1, 3], "FP32")
    inp.set_data_from_numpy(data)
    result = client.infer(model, [inp])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)


def test_explicit_only_requested_model_loaded(explicit_client):
    assert explicit_client.is_server_ready()
    assert explicit_client.is_model_ready("simple")
    assert not explicit_client.is_model_ready("identity_fp32")
    index = index_by_name(explicit_client)
    assert index["simple"]["state"] == "READY"
    # Present in the repository, never loaded: listed, but not READY.
    assert "identity_fp32" in index
    assert index["identity_fp32"].get("state") != "READY"


def test_explicit_infer_on_unloaded_model_fails(explicit_client):
    with pytest.raises(InferenceServerException) as e:
        infer_fp32(explicit_client, "identity_fp64")
    assert_client_error(e.value, 404, "Request for unknown model: 'identity_fp64'")


def test_explicit_load_missing_model_fails(explicit_client, explicit_server):
    # core model_repository_manager.cc LoadModel: INTERNAL -> HTTP 500 in
    # Triton; a model that is not there is the client's mistake: 404, with
    # Triton's message (a deliberate difference).
    with pytest.raises(InferenceServerException) as e:
        explicit_client.load_model("does_not_exist")
    assert_client_error(
        e.value, 404, "failed to load 'does_not_exist', failed to poll from model repository"
    )
    assert explicit_server.is_ready()
    assert explicit_client.is_model_ready("simple")


@pytest.mark.parametrize("name", ["..", ".", "%2Fetc", "a%2F..%2F..", "x%00y", "..%2Fsimple", "n" * 10000])
def test_explicit_load_of_a_name_outside_the_repository_is_a_400(explicit_server, explicit_client, name):
    status, _, body = explicit_server.request("POST", f"/v2/repository/models/{name}/load", b"{}")
    if name == "n" * 10000:
        # A plain name that is not there (too long for the file system).
        assert status == 404, body
    else:
        assert status in (400, 404), body
        assert status == 400 or name in (".", ".."), body
    assert "failed to poll from model repository" in json.loads(body)["error"]
    assert explicit_server.is_ready()
    assert explicit_client.is_model_ready("simple")


def test_explicit_load_unload_cycle(explicit_client):
    c = explicit_client
    c.load_model("identity_fp32")
    assert c.is_model_ready("identity_fp32")
    assert c.is_model_ready("identity_fp32", "1")
    assert index_by_name(c)["identity_fp32"]["state"] == "READY"
    infer_fp32(c)

    c.unload_model("identity_fp32")
    assert not c.is_model_ready("identity_fp32")
    # core src/server.cc InferenceServer::IsReady: with strict readiness a
    # model that is not ready *because it was unloaded* does not make the
    # server unready.
    assert c.is_server_ready(), "server should stay ready after an unload"

    def unavailable_entry():
        e = index_by_name(c)["identity_fp32"]
        return e if e.get("state") == "UNAVAILABLE" else None

    # Unloading may pass through UNLOADING; poll instead of sleeping.
    entry = wait_for(unavailable_entry, timeout=10.0)
    assert entry, f"index after unload: {index_by_name(c)['identity_fp32']}"
    assert entry["version"] == "1"

    # core model_lifecycle.cc GetModel: no READY version left.
    with pytest.raises(InferenceServerException) as e:
        infer_fp32(c)
    assert_client_error(
        e.value, 404, "Request for unknown model: 'identity_fp32' has no available versions"
    )
    # The other model is untouched.
    assert c.is_model_ready("simple")

    # And it loads again.
    c.load_model("identity_fp32")
    assert c.is_model_ready("identity_fp32")
    infer_fp32(c)
