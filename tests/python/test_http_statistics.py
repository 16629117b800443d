"""The statistics extension after a known number of inferences. Uses
`identity_stats`, which no other test touches, so the counts are exact."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from trtis_harness import assert_client_error

N = 5
DURATIONS = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output")


@pytest.fixture(scope="module")
def stats_after_n(client):
    data = np.ones((1, 4), dtype=np.float32)
    for _ in range(N):
        inp = httpclient.InferInput("INPUT0", [1, 4], "FP32")
        inp.set_data_from_numpy(data)
        client.infer("identity_stats", [inp])
    return client.get_inference_statistics("identity_stats")


def only_entry(stats):
    entries = stats["model_stats"]
    assert len(entries) == 1, entries
    return entries[0]


def test_counts(stats_after_n):
    s = only_entry(stats_after_n)
    assert s["name"] == "identity_stats"
    assert s["version"] == "1"
    assert s["inference_count"] == N
    assert s["execution_count"] == N
    assert type(s["last_inference"]) is int and s["last_inference"] > 0


def test_durations(stats_after_n):
    inf = only_entry(stats_after_n)["inference_stats"]
    for key in DURATIONS:
        assert key in inf, f"inference_stats.{key} missing: {inf}"
        assert set(inf[key]) >= {"count", "ns"}, inf[key]
        assert type(inf[key]["count"]) is int and type(inf[key]["ns"]) is int
    assert inf["success"]["count"] == N
    assert inf["success"]["ns"] > 0
    assert inf["fail"]["count"] == 0
    for key in ("queue", "compute_input", "compute_infer", "compute_output"):
        assert inf[key]["count"] == N, (key, inf[key])


def test_stats_for_version(client, stats_after_n):
    s = only_entry(client.get_inference_statistics("identity_stats", "1"))
    assert s["version"] == "1"
    assert s["inference_count"] == N


def test_stats_all_models(client, stats_after_n):
    entries = client.get_inference_statistics()["model_stats"]
    names = {e["name"] for e in entries}
    assert {"identity_stats", "simple", "identity_fp32"} <= names


# core src/tritonserver.cc TRITONSERVER_ServerModelStatistics: INVALID_ARG.
def test_stats_unknown_model(client):
    with pytest.raises(InferenceServerException) as e:
        client.get_inference_statistics("no_such_model")
    assert_client_error(e.value, 400, "requested model 'no_such_model' is not available")


def test_stats_unknown_version(client):
    with pytest.raises(InferenceServerException) as e:
        client.get_inference_statistics("identity_stats", "2")
    assert_client_error(
        e.value, 400, "requested model version is not available for model 'identity_stats'"
    )
