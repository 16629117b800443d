"""The LogSettings RPC: read and set the log settings at run time
(tritonclient.grpc get_log_settings / update_log_settings), and the settings
set over gRPC taking effect on the server's real output (the line shapes,
models and helpers are test_http_logging.py's)."""

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from test_http_logging import (
    EXPLICIT,
    SHUTDOWN_LINE,
    build_logging_repository,
    logged,
    mark,
    parse_line,
    stderr_lines,
    wait_logged,
)
from trtis_harness import grpc_client_for, running_server


def test_read_and_set_log_settings(grpc_client):
    settings = grpc_client.get_log_settings(as_json=True)["settings"]
    assert settings["log_verbose_level"]["uint32_param"] == 0
    assert settings["log_info"]["bool_param"] is True
    assert settings["log_format"]["string_param"] == "default"
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


def test_log_file_cannot_be_set_over_grpc(grpc_client, tmp_path):
    target = tmp_path / "stolen.log"
    with pytest.raises(InferenceServerException) as e:
        grpc_client.update_log_settings({"log_file": str(target)})
    assert "log file location can not be updated through network protocol" in e.value.message()
    settings = grpc_client.get_log_settings(as_json=True)["settings"]
    assert settings["log_file"]["string_param"] == ""
    assert not target.exists()


@pytest.fixture(scope="module")
def grpc_logging_repo(tmp_path_factory):
    return build_logging_repository(tmp_path_factory.mktemp("trtis_grpc_logging") / "models")


def sequence_start(client, sequence_id: int) -> None:
    inp = grpcclient.InferInput("INPUT", [1, 1], "INT32")
    inp.set_data_from_numpy(np.array([[1]], dtype=np.int32))
    client.infer("simple_sequence", [inp], sequence_id=sequence_id, sequence_start=True)


def test_settings_set_over_grpc_take_effect(grpc_logging_repo):
    gen = running_server(grpc_logging_repo, EXPLICIT, name="grpc logging server")
    server = next(gen)
    try:
        c = grpc_client_for(server)
        start = mark(server)

        # Verbose level 1 and ISO8601: a load's verbose lines, in ISO8601.
        c.update_log_settings({"log_verbose_level": 1, "log_format": "ISO8601"})
        c.load_model("warm_a")
        for text in wait_logged(server, start, "V", "'warm_a'"):
            assert parse_line(text)[0] == "ISO8601", text

        # Back to default and verbose 0: the next load prints nothing.
        since = mark(server)
        c.update_log_settings({"log_verbose_level": 0, "log_format": "default"})
        c.load_model("warm_b")

        # Warnings off: a START on a live sequence prints no W line.
        c.load_model("simple_sequence")
        c.update_log_settings({"log_warning": False})
        sequence_start(c, 8201)
        sequence_start(c, 8201)
        c.update_log_settings({"log_warning": True})
        sequence_start(c, 8202)
        sequence_start(c, 8202)
        conflict = wait_logged(server, since, "W", "sequence 8202")
        assert parse_line(conflict[0])[0] == "default", conflict[0]
        assert not logged(server, since, "W", "sequence 8201"), server.log_tail()
        assert not logged(server, since, "V", "'warm_b'"), server.log_tail()

        # Info off: nothing at I from here on, the shutdown line included.
        info_off = mark(server)
        c.update_log_settings({"log_info": False})
        c.close()
    finally:
        next(gen, None)  # SIGINT; the server must exit 0
    after = stderr_lines(server, info_off)
    infos = [t for t in after if (parse_line(t)[1] or {"level": ""})["level"] == "I"]
    assert not infos, f"I lines with log_info false: {infos}"
    assert not any(SHUTDOWN_LINE in t for t in after)
