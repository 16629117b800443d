"""The logging extension over HTTP: read and set the log settings at run time
(tritonclient.http get_log_settings / update_log_settings), and each setting
taking effect on the server's real output.

Triton's line formats (triton/common LogMessage), times in UTC:

  default  I1123 20:14:05.123456 <pid> serve.rs:279] Started HTTPService at ...
  ISO8601  2024-11-23T20:14:05Z I <pid> serve.rs:279] Started HTTPService at ...

Lines go to stderr, or appended to `--log-file`. The settings are global to
a server, so the tests that change them run on servers of their own (in
explicit model-control mode, so a model load is the action whose lines are
looked at): `warm_*` identity models with a warmup sample print verbose lines
while they load ("model 'warm_x' instance ... is running warmup sample"),
`simple_sequence` prints a W line when a START arrives for a live sequence,
a poll-mode server prints an E line for a model that fails to load, and
every server prints the I line "shutting down: ..." on SIGINT.

The helpers here are shared with test_grpc_logging.py.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from trtis_harness import (
    EXAMPLES,
    STARTUP_TIMEOUT_S,
    build_tiny_repository,
    running_server,
    trtis_bin,
    wait_for,
)

# --------------------------------------------------------------------------
# Line shapes
# --------------------------------------------------------------------------

DEFAULT_LINE = re.compile(
    r"^(?P<level>[IWEV])(?P<month>\d\d)(?P<day>\d\d) \d\d:\d\d:\d\d\.\d{6} "
    r"(?P<pid>\d+) (?P<file>[^ :\]]+):(?P<line>\d+)\] (?P<message>.*)$"
)
ISO8601_LINE = re.compile(
    r"^\d{4}-(?P<month>\d\d)-(?P<day>\d\d)T\d\d:\d\d:\d\dZ (?P<level>[IWEV]) "
    r"(?P<pid>\d+) (?P<file>[^ :\]]+):(?P<line>\d+)\] (?P<message>.*)$"
)


def parse_line(text: str):
    """(format, match) of a log line, or (None, None)."""
    m = DEFAULT_LINE.match(text)
    if m:
        return "default", m
    m = ISO8601_LINE.match(text)
    if m:
        return "ISO8601", m
    return None, None


def stderr_lines(server, since: int = 0) -> list[str]:
    """The server's stderr lines from index `since` of its captured output."""
    return [
        line[len("[err] ") :]
        for line in server.log_lines()[since:]
        if line.startswith("[err] ")
    ]


def mark(server) -> int:
    """An index into the server's captured output: lines after it are new.
    Waits for the start's last line ("ready in ...") first, so no line of
    the start comes after it."""
    assert wait_for(
        lambda: any("ready in " in line for line in stderr_lines(server))
    ), f"no 'ready in' line\n{server.log_tail()}"
    return len(server.log_lines())


def logged(server, since: int, level: str, needle: str) -> list[str]:
    """Stderr lines since `since` of this level whose message contains
    `needle`, in either format."""
    found = []
    for text in stderr_lines(server, since):
        _, m = parse_line(text)
        if m and m["level"] == level and needle in m["message"]:
            found.append(text)
    return found


def wait_logged(server, since: int, level: str, needle: str, timeout: float = 10.0) -> list[str]:
    found = wait_for(lambda: logged(server, since, level, needle), timeout=timeout)
    assert found, (
        f"no {level} line containing {needle!r} within {timeout} s\n{server.log_tail()}"
    )
    return found


# --------------------------------------------------------------------------
# Repository
# --------------------------------------------------------------------------

WARM_MODELS = ["warm_a", "warm_b", "warm_c", "warm_d", "warm_e", "warm_f", "warm_g"]


def warm_config(name: str) -> str:
    return f"""name: "{name}"
backend: "identity"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 4 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
model_warmup [
  {{
    name: "zeros"
    batch_size: 1
    inputs {{ key: "INPUT0" value: {{ data_type: TYPE_INT32 dims: [ 4 ] zero_data: true }} }}
  }}
]
"""


def build_logging_repository(repo: Path) -> Path:
    """`warm_*` (identity, one warmup sample each), `identity_fp32` and
    Triton's `simple_sequence` example (ONNX)."""
    build_tiny_repository(repo)
    for name in WARM_MODELS:
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / ".keep").write_text("")
        (repo / name / "config.pbtxt").write_text(warm_config(name))
    seq = repo / "simple_sequence"
    (seq / "1").mkdir(parents=True)
    shutil.copy(EXAMPLES / "simple_sequence" / "config.pbtxt", seq / "config.pbtxt")
    shutil.copy(EXAMPLES / "simple_sequence" / "1" / "model.onnx", seq / "1" / "model.onnx")
    return repo


BROKEN_CONFIG = 'name: "{name}"\nbackend: "identity"\nmax_batch_size: -3\n'


def add_broken_model(repo: Path, name: str) -> None:
    """A model whose config fails validation, so loading it fails."""
    model = repo / name
    (model / "1").mkdir(parents=True)
    (model / "1" / ".keep").write_text("")
    (model / "config.pbtxt").write_text(BROKEN_CONFIG.format(name=name))


EXPLICIT = ["--model-control-mode", "explicit"]
SHUTDOWN_LINE = "shutting down"


@pytest.fixture(scope="module")
def logging_repo(tmp_path_factory):
    return build_logging_repository(tmp_path_factory.mktemp("trtis_logging") / "models")


@pytest.fixture(scope="module")
def log_server(logging_repo):
    """A server of this module's own (its log settings are changed)."""
    yield from running_server(logging_repo, EXPLICIT, name="logging server")


@pytest.fixture(scope="module")
def log_client(log_server):
    c = httpclient.InferenceServerClient(log_server.url, network_timeout=30.0)
    yield c
    c.close()


@pytest.fixture
def restore_defaults(log_client):
    yield
    log_client.update_log_settings(
        {
            "log_info": True,
            "log_warning": True,
            "log_error": True,
            "log_verbose_level": 0,
            "log_format": "default",
        }
    )


def sequence_start(client, sequence_id: int) -> None:
    """A START request on simple_sequence (over HTTP)."""
    inp = httpclient.InferInput("INPUT", [1, 1], "INT32")
    inp.set_data_from_numpy(np.array([[1]], dtype=np.int32))
    client.infer("simple_sequence", [inp], sequence_id=sequence_id, sequence_start=True)


# --------------------------------------------------------------------------
# Reading and setting
# --------------------------------------------------------------------------


def test_read_and_set_log_settings(client):
    settings = client.get_log_settings()
    assert settings["log_verbose_level"] == 0
    assert settings["log_info"] is True
    assert settings["log_format"] == "default"
    assert settings["log_file"] == ""
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


def test_log_file_cannot_be_set_over_the_network(client, tmp_path):
    target = tmp_path / "stolen.log"
    with pytest.raises(InferenceServerException) as e:
        client.update_log_settings({"log_file": str(target), "log_info": False})
    assert "log file location can not be updated through network protocol" in e.value.message()
    settings = client.get_log_settings()
    assert settings["log_file"] == ""
    assert settings["log_info"] is True, "a refused update must change nothing"
    assert not target.exists()


# --------------------------------------------------------------------------
# The settings on the real output
# --------------------------------------------------------------------------


def test_lines_are_tritons_default_format_on_stderr(log_server):
    lines = log_server.log_lines()
    assert not [line for line in lines if line.startswith("[out] ")], "log lines go to stderr"
    started = [line for line in stderr_lines(log_server) if "Started HTTPService at" in line]
    assert len(started) == 1, log_server.log_tail()
    fmt, m = parse_line(started[0])
    assert fmt == "default", started[0]
    assert m["level"] == "I"
    assert int(m["pid"]) == log_server.proc.pid
    assert m["file"] == "serve.rs" and int(m["line"]) > 0
    assert m["message"].startswith("Started HTTPService at 127.0.0.1:")
    for text in stderr_lines(log_server):
        assert parse_line(text)[0] == "default", f"not a Triton log line: {text!r}"


def test_verbose_level_1_shows_verbose_lines(log_server, log_client, restore_defaults):
    start = mark(log_server)
    log_client.load_model("warm_a")  # verbose level 0: no V lines
    log_client.update_log_settings({"log_verbose_level": 1})
    log_client.load_model("warm_b")
    shown = wait_logged(log_server, start, "V", "'warm_b'")
    assert "warmup" in shown[0]
    assert not logged(log_server, start, "V", "'warm_a'"), log_server.log_tail()
    # Back to 0: a later load is quiet again.
    log_client.update_log_settings({"log_verbose_level": 0})
    log_client.load_model("warm_c")
    log_client.update_log_settings({"log_verbose_level": 1})
    log_client.unload_model("warm_a")
    log_client.load_model("warm_a")
    wait_logged(log_server, start, "V", "'warm_a'")
    assert not logged(log_server, start, "V", "'warm_c'"), log_server.log_tail()


def test_iso8601_changes_the_line_shape(log_server, log_client, restore_defaults):
    start = mark(log_server)
    updated = log_client.update_log_settings({"log_format": "ISO8601", "log_verbose_level": 1})
    assert updated["log_format"] == "ISO8601"
    assert log_client.get_log_settings()["log_format"] == "ISO8601"
    log_client.load_model("warm_d")
    iso = wait_logged(log_server, start, "V", "'warm_d'")
    for text in iso:
        fmt, m = parse_line(text)
        assert fmt == "ISO8601", text
        assert int(m["pid"]) == log_server.proc.pid
    # And back.
    since = mark(log_server)
    log_client.update_log_settings({"log_format": "default"})
    log_client.load_model("warm_e")
    for text in wait_logged(log_server, since, "V", "'warm_e'"):
        assert parse_line(text)[0] == "default", text


def test_log_warning_off_hides_warning_lines(log_server, log_client, restore_defaults):
    start = mark(log_server)
    log_client.load_model("simple_sequence")
    sequence_start(log_client, 7101)
    sequence_start(log_client, 7101)  # a START on a live sequence: W
    conflict = wait_logged(log_server, start, "W", "sequence 7101")
    assert "conflict" in conflict[0]
    log_client.update_log_settings({"log_warning": False})
    sequence_start(log_client, 7102)
    sequence_start(log_client, 7102)
    log_client.update_log_settings({"log_warning": True})
    sequence_start(log_client, 7103)
    sequence_start(log_client, 7103)
    wait_logged(log_server, start, "W", "sequence 7103")  # lines are in order
    assert not logged(log_server, start, "W", "sequence 7102"), log_server.log_tail()


def test_log_info_off_hides_info_lines(logging_repo):
    """log_info false: no I line from then on (a model load, the shutdown),
    while other levels still print."""
    gen = running_server(logging_repo, EXPLICIT, name="info-off server")
    server = next(gen)
    try:
        c = httpclient.InferenceServerClient(server.url, network_timeout=30.0)
        start = mark(server)
        c.update_log_settings({"log_info": False, "log_verbose_level": 1})
        c.load_model("warm_f")
        c.unload_model("warm_f")
        wait_logged(server, start, "V", "'warm_f'")
        c.close()
    finally:
        next(gen, None)  # SIGINT; the server must exit 0
    after = stderr_lines(server, start)
    infos = [t for t in after if (parse_line(t)[1] or {"level": ""})["level"] == "I"]
    assert not infos, f"I lines with log_info false: {infos}"
    assert not any(SHUTDOWN_LINE in t for t in after)


def test_shutdown_prints_an_info_line(logging_repo):
    """The counterpart of the test above: with log_info on, the same server
    prints I lines after a load (the shutdown one at least)."""
    gen = running_server(logging_repo, EXPLICIT, name="info-on server")
    server = next(gen)
    start = mark(server)
    try:
        c = httpclient.InferenceServerClient(server.url, network_timeout=30.0)
        c.load_model("warm_g")
        c.close()
    finally:
        next(gen, None)
    shutdown = logged(server, start, "I", SHUTDOWN_LINE)
    assert shutdown, server.log_tail()
    assert parse_line(shutdown[0])[1]["file"] == "serve.rs"


def test_log_error_off_hides_error_lines(tmp_path):
    """A poll-mode server logs an E line for a model that fails to load."""
    repo = build_tiny_repository(tmp_path / "models")
    gen = running_server(
        repo, ["--model-control-mode", "poll", "--repository-poll-secs", "1"], name="poll server"
    )
    server = next(gen)
    try:
        c = httpclient.InferenceServerClient(server.url, network_timeout=30.0)
        start = mark(server)
        add_broken_model(repo, "broken_one")
        wait_logged(server, start, "E", "broken_one")
        c.update_log_settings({"log_error": False})

        def polled(name):
            return any(
                m["name"] == name and m.get("state") == "UNAVAILABLE"
                for m in c.get_model_repository_index()
            )

        add_broken_model(repo, "broken_two")
        assert wait_for(lambda: polled("broken_two"), timeout=15), server.log_tail()
        time.sleep(2.5)  # more polls (a failed model may be retried)
        assert not logged(server, start, "E", "broken_two"), server.log_tail()
        c.update_log_settings({"log_error": True})
        add_broken_model(repo, "broken_three")
        wait_logged(server, start, "E", "broken_three", timeout=15)
        c.close()
    finally:
        next(gen, None)


# --------------------------------------------------------------------------
# --log-file, --log-format at start
# --------------------------------------------------------------------------

STARTED_HTTP = re.compile(r"Started HTTPService at (\S+):(\d+)")


def serve(repo: Path, args: list[str], env: dict | None = None) -> subprocess.Popen:
    cmd = [
        str(trtis_bin()),
        "serve",
        "--model-store",
        str(repo),
        "--http-address",
        "127.0.0.1",
        "--http-port",
        "0",
        "--grpc-address",
        "127.0.0.1",
        "--grpc-port",
        "0",
        "--metrics-port",
        "0",
        *args,
    ]
    return subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )


def stop(proc: subprocess.Popen) -> tuple[int | None, str]:
    """SIGINT, wait; (exit code or None if killed, stderr)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=15)
        return proc.returncode, err.decode("utf-8", errors="replace")
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        return None, err.decode("utf-8", errors="replace")


def test_log_file_receives_the_lines_in_iso8601(tmp_path):
    repo = build_tiny_repository(tmp_path / "models")
    (repo / "warm_a" / "1").mkdir(parents=True)
    (repo / "warm_a" / "config.pbtxt").write_text(warm_config("warm_a"))
    log_file = tmp_path / "logs" / "trtis.log"
    log_file.parent.mkdir()
    log_file.write_text("a line from before\n")
    proc = serve(repo, [*EXPLICIT, "--log-file", str(log_file), "--log-format", "ISO8601"])
    try:
        port = wait_for(
            lambda: (m := STARTED_HTTP.search(log_file.read_text())) and m.group(2),
            timeout=STARTUP_TIMEOUT_S,
        )
        assert port, f"no 'Started HTTPService' line in {log_file}: {log_file.read_text()!r}"
        c = httpclient.InferenceServerClient(f"127.0.0.1:{port}", network_timeout=30.0)
        assert wait_for(lambda: c.is_server_ready(), timeout=STARTUP_TIMEOUT_S)
        settings = c.get_log_settings()
        assert settings["log_file"] == str(log_file)
        assert settings["log_format"] == "ISO8601"
        c.update_log_settings({"log_verbose_level": 1})
        c.load_model("warm_a")
        c.close()
    finally:
        code, err = stop(proc)
    assert code == 0, err
    lines = log_file.read_text().splitlines()
    assert lines[0] == "a line from before", "the log file is appended to"
    for text in lines[1:]:
        fmt, m = parse_line(text)
        assert fmt == "ISO8601", f"not an ISO8601 line: {text!r}"
        assert int(m["pid"]) == proc.pid
    levels = {parse_line(t)[1]["level"] for t in lines[1:]}
    assert levels == {"I", "V"}, lines
    assert any("Started HTTPService at 127.0.0.1:" in t for t in lines)
    assert any("'warm_a'" in t for t in lines), "verbose lines of the load"
    assert any(SHUTDOWN_LINE in t for t in lines)
    assert not [t for t in err.splitlines() if parse_line(t)[0]], (
        f"log lines went to stderr too: {err!r}"
    )


def test_iso8601_at_start_on_stderr(tmp_path):
    repo = build_tiny_repository(tmp_path / "models")
    proc = serve(repo, [], env={"TRTIS_LOG_FORMAT": "ISO8601", "TRTIS_LOG_VERBOSE": "1"})
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        seen = []
        while time.monotonic() < deadline:
            raw = proc.stderr.readline()
            if not raw:
                break
            seen.append(raw.decode("utf-8", errors="replace").rstrip("\n"))
            if "Started HTTPService at" in seen[-1]:
                break
    finally:
        code, err = stop(proc)
    assert code == 0, err
    lines = seen + err.splitlines()
    assert any("Started HTTPService at" in t for t in seen), lines
    for text in lines:
        assert parse_line(text)[0] == "ISO8601", f"not an ISO8601 line: {text!r}"
    # --log-verbose 1 prints the models' states at start.
    assert any(
        parse_line(t)[1]["level"] == "I" and "identity_fp32" in t for t in lines
    ), lines


def test_unopenable_log_file_stops_the_server(tmp_path):
    repo = build_tiny_repository(tmp_path / "models")
    missing = tmp_path / "no_such_dir" / "trtis.log"
    proc = serve(repo, [], env={"TRTIS_LOG_FILE": str(missing)})
    try:
        proc.wait(timeout=STARTUP_TIMEOUT_S)
    finally:
        code, err = stop(proc)
    assert code == 2, err
    errors = [t for t in err.splitlines() if (parse_line(t)[1] or {"level": ""})["level"] == "E"]
    assert errors and "failed to open log file" in errors[0] and str(missing) in errors[0], err
    assert not missing.exists()
