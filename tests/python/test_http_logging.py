"""The logging extension over HTTP: read and set the log settings at run time
(tritonclient.http get_log_settings / update_log_settings)."""

import pytest
from tritonclient.utils import InferenceServerException


def test_read_and_set_log_settings(client):
    settings = client.get_log_settings()
    assert settings["log_verbose_level"] == 0
    assert settings["log_info"] is True
    assert settings["log_format"] == "default"
    try:
        updated = client.update_log_settings({"log_verbose_level": 2, "log_info": False})
        assert updated["log_verbose_level"] == 2
        assert updated["log_info"] is False
        assert client.get_log_settings()["log_verbose_level"] == 2
    finally:
        client.update_log_settings({"log_verbose_level": 0, "log_info": True})
    assert "logging" in client.get_server_metadata()["extensions"]


def test_bad_log_settings_are_refused(client):
    with pytest.raises(InferenceServerException) as e:
        client.update_log_settings({"log_format": "fancy"})
    assert "invalid argument for log_format, got: fancy" in e.value.message()
    with pytest.raises(InferenceServerException):
        client.update_log_settings({"log_verbose_level": "loud"})
    assert client.get_log_settings()["log_format"] == "default"
