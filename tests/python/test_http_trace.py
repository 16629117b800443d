"""The trace extension over HTTP: read and set trace settings (global and per
model) and see sampled requests' timestamps written to the trace file."""

import json
import os

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException


def infer_identity(client, n):
    for i in range(n):
        x = np.full((1, 4), i, dtype=np.float32)
        inp = httpclient.InferInput("INPUT0", [1, 4], "FP32")
        inp.set_data_from_numpy(x)
        client.infer("identity_fp32", [inp])


def test_trace_settings_and_trace_file(client, tmp_path):
    defaults = client.get_trace_settings()
    assert defaults["trace_level"] == ["OFF"]
    assert defaults["trace_rate"] == "1000"
    assert defaults["trace_count"] == "-1"
    trace_file = str(tmp_path / "trace.json")
    try:
        updated = client.update_trace_settings(
            model_name="identity_fp32",
            settings={"trace_file": trace_file, "trace_level": ["TIMESTAMPS"], "trace_rate": "1", "trace_count": "3"},
        )
        assert updated["trace_level"] == ["TIMESTAMPS"]
        assert updated["trace_count"] == "3"
        # The override is the model's only.
        assert client.get_trace_settings()["trace_level"] == ["OFF"]
        infer_identity(client, 5)
        traces = json.load(open(trace_file))
        assert len(traces) == 3, traces
        names = [t["name"] for t in traces[0]["timestamps"]]
        assert names == ["REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_END", "REQUEST_END"]
        ns = [t["ns"] for t in traces[0]["timestamps"]]
        assert ns == sorted(ns) and ns[0] > 0
        assert traces[0]["model_name"] == "identity_fp32"
        assert client.get_trace_settings(model_name="identity_fp32")["trace_count"] == "0"
    finally:
        client.update_trace_settings(
            model_name="identity_fp32",
            settings={"trace_file": None, "trace_level": None, "trace_rate": None, "trace_count": None},
        )
    assert client.get_trace_settings(model_name="identity_fp32")["trace_level"] == ["OFF"]


def test_bad_trace_settings(client):
    with pytest.raises(InferenceServerException) as e:
        client.update_trace_settings(settings={"trace_level": ["LOUD"]})
    assert "trace_level" in e.value.message()
    with pytest.raises(InferenceServerException) as e:
        client.get_trace_settings(model_name="no_such_model")
    assert "Request for unknown model : no_such_model" in e.value.message()
