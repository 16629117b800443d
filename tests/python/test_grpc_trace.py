"""The TraceSetting RPC: read and set trace settings over gRPC."""

import pytest
from tritonclient.utils import InferenceServerException


def test_trace_settings_over_grpc(grpc_client):
    settings = grpc_client.get_trace_settings(as_json=True)["settings"]
    assert settings["trace_level"]["value"] == ["OFF"]
    try:
        updated = grpc_client.update_trace_settings(settings={"trace_rate": "7"}, as_json=True)["settings"]
        assert updated["trace_rate"]["value"] == ["7"]
    finally:
        grpc_client.update_trace_settings(settings={"trace_rate": "1000"})
    with pytest.raises(InferenceServerException) as e:
        grpc_client.update_trace_settings(settings={"trace_rate": ["1", "2"]})
    assert "expect only 1 value for 'trace_rate'" in e.value.message()
