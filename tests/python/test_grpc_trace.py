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


@pytest.mark.parametrize("model", ["", "identity_fp32"])
def test_the_trace_file_cannot_be_set_over_grpc(grpc_client, tmp_path, model):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    with pytest.raises(InferenceServerException) as e:
        grpc_client.update_trace_settings(
            model_name=model or None,
            settings={"trace_file": str(victim), "trace_level": ["TIMESTAMPS"], "trace_rate": "1"},
        )
    assert "trace file location can not be updated through network protocol" in e.value.message()
    assert e.value.status() == "StatusCode.UNIMPLEMENTED"
    settings = grpc_client.get_trace_settings(model_name=model or None, as_json=True)["settings"]
    assert settings["trace_level"]["value"] == ["OFF"]
    assert settings["trace_file"]["value"] == [""]
    assert victim.read_text() == "precious\n"
