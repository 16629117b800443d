"""The trace extension over HTTP: read and set trace settings (global and per
model) and see sampled requests' timestamps written to the trace file.

The trace file is set when the server starts (`--trace-config
triton,file=...`); like Triton since CVE-2024-0087, the API refuses to change
it, so a client cannot make the server write over a file of its choice."""

import json

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import subprocess

from trtis_harness import build_tiny_repository, running_server, trtis_bin

NOT_SETTABLE = "trace file location can not be updated through network protocol"


def infer_identity(client, n):
    for i in range(n):
        x = np.full((1, 4), i, dtype=np.float32)
        inp = httpclient.InferInput("INPUT0", [1, 4], "FP32")
        inp.set_data_from_numpy(x)
        client.infer("identity_fp32", [inp])


@pytest.fixture(scope="module")
def trace_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("traces")


@pytest.fixture(scope="module")
def trace_server(tmp_path_factory, trace_dir):
    repo = build_tiny_repository(tmp_path_factory.mktemp("trace_repo") / "models")
    args = ["--trace-config", f"triton,file={trace_dir / 'trace.json'}", "--trace-config", "rate=1"]
    yield from running_server(repo, args, name="trace server")


@pytest.fixture(scope="module")
def tclient(trace_server):
    c = httpclient.InferenceServerClient(trace_server.url, network_timeout=30.0)
    yield c
    c.close()


def test_the_trace_file_comes_from_the_flag(tclient, trace_dir):
    settings = tclient.get_trace_settings()
    assert settings["trace_file"] == str(trace_dir / "trace.json")
    assert settings["trace_level"] == ["OFF"]
    assert settings["trace_rate"] == "1"
    assert settings["trace_count"] == "-1"
    assert settings["trace_mode"] == "triton"


@pytest.mark.parametrize("model", [None, "identity_fp32"])
@pytest.mark.parametrize("value", ["victim", None])
def test_the_api_cannot_change_the_trace_file(tclient, trace_server, tmp_path, model, value):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    settings = {"trace_file": str(victim) if value else None, "trace_level": ["TIMESTAMPS"]}
    with pytest.raises(InferenceServerException) as e:
        tclient.update_trace_settings(model_name=model, settings=settings)
    assert NOT_SETTABLE in e.value.message()
    assert e.value.status() == "501"
    # Nothing changed: not the level (the update was refused whole), not the file.
    assert tclient.get_trace_settings(model_name=model)["trace_level"] == ["OFF"]
    infer_identity(tclient, 2)
    assert victim.read_text() == "precious\n"


def test_a_raw_update_naming_the_file_answers_501(trace_server, tmp_path):
    status, _, body = trace_server.post_json("/v2/trace/setting", {"trace_file": str(tmp_path / "x")})
    assert status == 501
    assert json.loads(body) == {"error": NOT_SETTABLE}
    assert not (tmp_path / "x").exists()


def test_sampled_requests_are_appended_as_one_valid_array(tclient, trace_dir):
    trace_file = trace_dir / "trace.json"
    try:
        updated = tclient.update_trace_settings(
            model_name="identity_fp32",
            settings={"trace_level": ["TIMESTAMPS"], "trace_count": "3"},
        )
        assert updated["trace_level"] == ["TIMESTAMPS"]
        assert updated["trace_count"] == "3"
        # The override is the model's only.
        assert tclient.get_trace_settings()["trace_level"] == ["OFF"]
        # The file is a valid JSON array after every traced request.
        for n in (1, 2, 3):
            infer_identity(tclient, 1)
            assert len(json.loads(trace_file.read_text())) == n
        infer_identity(tclient, 2)
        traces = json.loads(trace_file.read_text())
        assert len(traces) == 3, traces
        names = [t["name"] for t in traces[0]["timestamps"]]
        assert names == [
            "REQUEST_START",
            "QUEUE_START",
            "COMPUTE_START",
            "COMPUTE_INPUT_END",
            "COMPUTE_OUTPUT_START",
            "COMPUTE_END",
            "INFER_RESPONSE_COMPLETE",
            "REQUEST_END",
        ]
        ns = [t["ns"] for t in traces[0]["timestamps"]]
        assert ns == sorted(ns) and ns[0] > 0
        assert traces[0]["model_name"] == "identity_fp32"
        assert [t["id"] for t in traces] == sorted({t["id"] for t in traces})
        assert tclient.get_trace_settings(model_name="identity_fp32")["trace_count"] == "0"
    finally:
        tclient.update_trace_settings(
            model_name="identity_fp32",
            settings={"trace_level": None, "trace_rate": None, "trace_count": None},
        )
    assert tclient.get_trace_settings(model_name="identity_fp32")["trace_level"] == ["OFF"]


def test_log_frequency_splits_the_trace_into_indexed_files(tclient, trace_dir):
    try:
        tclient.update_trace_settings(
            model_name="identity_fp32",
            settings={"trace_level": ["TIMESTAMPS"], "log_frequency": "2", "trace_count": "5"},
        )
        infer_identity(tclient, 6)
    finally:
        tclient.update_trace_settings(
            model_name="identity_fp32",
            settings={"trace_level": None, "log_frequency": None, "trace_count": None},
        )
    counts = [len(json.loads((trace_dir / f"trace.json.{k}").read_text())) for k in range(3)]
    assert counts == [2, 2, 1]
    assert not (trace_dir / "trace.json.3").exists()


def test_a_cleared_model_override_follows_the_global_setting(tclient):
    """A model's override cleared with null follows the global setting
    again, also as it changes later (it kept the override before)."""
    before = tclient.get_trace_settings()["trace_rate"]
    try:
        tclient.update_trace_settings(model_name="identity_fp32", settings={"trace_rate": "1000"})
        tclient.update_trace_settings(settings={"trace_rate": "42"})
        assert tclient.get_trace_settings(model_name="identity_fp32")["trace_rate"] == "1000"
        got = tclient.update_trace_settings(model_name="identity_fp32", settings={"trace_rate": None})
        assert got["trace_rate"] == "42"
        tclient.update_trace_settings(settings={"trace_rate": "43"})
        assert tclient.get_trace_settings(model_name="identity_fp32")["trace_rate"] == "43"
        # Overriding another setting leaves the rate following.
        tclient.update_trace_settings(model_name="identity_fp32", settings={"trace_count": "5"})
        tclient.update_trace_settings(settings={"trace_rate": "44"})
        s = tclient.get_trace_settings(model_name="identity_fp32")
        assert (s["trace_rate"], s["trace_count"]) == ("44", "5")
    finally:
        tclient.update_trace_settings(model_name="identity_fp32", settings={"trace_count": None})
        tclient.update_trace_settings(settings={"trace_rate": before})


def test_bad_trace_settings(tclient):
    with pytest.raises(InferenceServerException) as e:
        tclient.update_trace_settings(settings={"trace_level": ["LOUD"]})
    assert "trace_level" in e.value.message()
    with pytest.raises(InferenceServerException) as e:
        tclient.get_trace_settings(model_name="no_such_model")
    assert "Request for unknown model : no_such_model" in e.value.message()


def test_the_log_file_cannot_be_set_either(tclient, tmp_path):
    with pytest.raises(InferenceServerException) as e:
        tclient.update_log_settings({"log_file": str(tmp_path / "log.txt")})
    assert "log file location can not be updated through network protocol" in e.value.message()
    assert not (tmp_path / "log.txt").exists()


def test_a_bad_trace_config_flag_stops_the_server(tmp_path):
    repo = build_tiny_repository(tmp_path / "models")
    for flag, fragment in [
        ("opentelemetry,file=x", "--trace-config opentelemetry,file: unknown setting"),
        ("mode=zipkin", "invalid value for trace mode option: zipkin"),
        ("level=LOUD", "invalid value for trace level option: loud"),
        ("speed=3", "unknown setting 'speed'"),
    ]:
        out = subprocess.run(
            [str(trtis_bin()), "serve", "--model-store", str(repo), "--http-port", "0",
             "--grpc-port", "0", "--metrics-port", "0", "--trace-config", flag],
            stdin=subprocess.DEVNULL, capture_output=True, timeout=30,
        )
        output = (out.stdout + out.stderr).decode()
        assert out.returncode == 2, output
        assert fragment in output, output
