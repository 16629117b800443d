"""The statistics extension over gRPC (ModelStatistics) after a known number
of gRPC inferences. Uses `identity_stats_grpc`, which no other test touches,
so the counts are exact. tritonclient returns the ModelStatisticsResponse
proto (uint64 fields: with as_json=True they would be strings)."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2
from tritonclient.utils import InferenceServerException

from trtis_harness import assert_grpc_error

MODEL = "identity_stats_grpc"
N = 5
DURATIONS = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output")


@pytest.fixture(scope="module")
def stats_after_n(grpc_client):
    data = np.ones((1, 4), dtype=np.float32)
    for _ in range(N):
        inp = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
        inp.set_data_from_numpy(data)
        grpc_client.infer(MODEL, [inp])
    return grpc_client.get_inference_statistics(MODEL)


def only_entry(stats):
    assert isinstance(stats, service_pb2.ModelStatisticsResponse)
    assert len(stats.model_stats) == 1, stats
    return stats.model_stats[0]


def test_counts(stats_after_n):
    s = only_entry(stats_after_n)
    assert s.name == MODEL
    assert s.version == "1"
    assert s.inference_count == N
    assert s.execution_count == N
    assert s.last_inference > 0


def test_durations(stats_after_n):
    inf = only_entry(stats_after_n).inference_stats
    for key in DURATIONS:
        assert inf.HasField(key), f"inference_stats.{key} missing: {inf}"
    assert inf.success.count == N
    assert inf.success.ns > 0
    assert inf.fail.count == 0
    for key in ("queue", "compute_input", "compute_infer", "compute_output"):
        assert getattr(inf, key).count == N, (key, getattr(inf, key))


def test_stats_for_version(grpc_client, stats_after_n):
    s = only_entry(grpc_client.get_inference_statistics(MODEL, "1"))
    assert s.version == "1"
    assert s.inference_count == N


def test_stats_all_models(grpc_client, stats_after_n):
    names = {e.name for e in grpc_client.get_inference_statistics().model_stats}
    assert {MODEL, "simple", "identity_fp32"} <= names


def test_stats_as_json(grpc_client, stats_after_n):
    doc = grpc_client.get_inference_statistics(MODEL, as_json=True)
    entry = doc["model_stats"][0]
    assert entry["name"] == MODEL
    # MessageToJson writes uint64 as strings.
    assert entry["inference_count"] == str(N)
    assert entry["inference_stats"]["success"]["count"] == str(N)


def test_same_counts_over_http(client, stats_after_n):
    """One engine behind both frontends: HTTP sees the gRPC inferences."""
    s = client.get_inference_statistics(MODEL)["model_stats"][0]
    assert s["inference_count"] == N
    assert s["execution_count"] == N
    assert s["inference_stats"]["success"]["count"] == N


# core src/tritonserver.cc TRITONSERVER_ServerModelStatistics: INVALID_ARG.
def test_stats_unknown_model(grpc_client):
    with pytest.raises(InferenceServerException) as e:
        grpc_client.get_inference_statistics("no_such_model")
    assert_grpc_error(e.value, "INVALID_ARGUMENT", "requested model 'no_such_model' is not available")


def test_stats_unknown_version(grpc_client):
    with pytest.raises(InferenceServerException) as e:
        grpc_client.get_inference_statistics(MODEL, "2")
    assert_grpc_error(
        e.value, "INVALID_ARGUMENT", f"requested model version is not available for model '{MODEL}'"
    )
