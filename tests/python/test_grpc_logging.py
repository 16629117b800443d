"""The LogSettings RPC: read and set the log settings at run time
(tritonclient.grpc get_log_settings / update_log_settings)."""

import pytest
from tritonclient.utils import InferenceServerException


def test_read_and_set_log_settings(grpc_client):
    settings = grpc_client.get_log_settings(as_json=True)["settings"]
    assert settings["log_verbose_level"]["uint32_param"] == 0
    assert settings["log_info"]["bool_param"] is True
    try:
        updated = grpc_client.update_log_settings({"log_verbose_level": 3}, as_json=True)["settings"]
        assert updated["log_verbose_level"]["uint32_param"] == 3
    finally:
        grpc_client.update_log_settings({"log_verbose_level": 0})
    assert grpc_client.get_log_settings(as_json=True)["settings"]["log_verbose_level"]["uint32_param"] == 0


def test_bad_log_format_is_invalid_argument(grpc_client):
    with pytest.raises(InferenceServerException) as e:
        grpc_client.update_log_settings({"log_format": "fancy"})
    assert "INVALID_ARGUMENT" in e.value.status()
    assert "invalid argument for log_format, got: fancy" in e.value.message()
