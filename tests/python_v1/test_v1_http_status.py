"""v1 HTTP health and status: `GET /api/health/live|ready` and
`GET /api/status[/<model>]` (v1-api-facts.md §2, §6).

Checks: health answers (200 with NV-Status SUCCESS; `ready` 400 on a server
that is not ready under strict readiness); the ServerStatus in each body
format (text by default, `?format=json`, `?format=binary` as
application/octet-stream, `Accept: application/json`) parsed strictly with
the 1.11 messages and agreeing with each other; the server fields (`id` =
`--id`, version, SERVER_READY, uptime growing); one model's status and an
unknown model (400 INVALID_ARG); every model of the repository listed,
including one that failed to load (MODEL_UNAVAILABLE with a reason); each
model's v1 ModelConfig (platform mapped from the backend, data types, dims,
label file); and the per-batch-size inference statistics (success, compute,
queue, inference/execution counts, last inference time; a failed request
under key 1).

The module starts its own servers: one with a broken model and relaxed
readiness (`--exit-on-error=false --strict-readiness=false`), and one with
the broken model under Triton's default strict readiness.
"""

from __future__ import annotations

import sys
import time

import numpy as np
import pytest

from trtis_harness import TrtisServer, start_or_fail, stop_and_check, wait_for
from v1client import (
    INVALID_ARG,
    HttpV1,
    assert_http_error,
    assert_http_ok,
    check_request_status,
    model_config_pb2,
    raw,
    request_header,
    server_status_pb2,
)
from v1repo import CLASS_LABELS, _write_identity, copy_example

STATUS_ID = "v1-status-server"
ModelReadyState = server_status_pb2.ModelReadyState
ServerReadyState = server_status_pb2.ServerReadyState
DataType = model_config_pb2.DataType


def build_status_repository(repo):
    repo.mkdir(parents=True)
    for name in ("simple", "simple_identity", "add_sub", "simple_sequence"):
        copy_example(repo, name)
    model = _write_identity(repo, "identity_class", "TYPE_FP32", dims="4", label="labels.txt")
    (model / "labels.txt").write_text("\n".join(CLASS_LABELS) + "\n")
    _write_identity(repo, "stats_model", "TYPE_FP32", dims="4")
    # A model that fails to load: simple's config, no model file.
    broken = repo / "broken"
    (broken / "1").mkdir(parents=True)
    (broken / "config.pbtxt").write_text(
        (repo / "simple" / "config.pbtxt").read_text().replace('name: "simple"', 'name: "broken"')
    )
    return repo


@pytest.fixture(scope="module")
def status_repo(tmp_path_factory):
    return build_status_repository(tmp_path_factory.mktemp("trtis_v1_status") / "models")


class LiveServer(TrtisServer):
    """Waits for liveness instead of readiness at start (a server that
    is never ready under strict readiness)."""

    def is_ready(self, timeout: float = 5.0) -> bool:
        try:
            status, _, _ = self.request("GET", "/v2/health/live", timeout=timeout)
        except OSError:
            return False
        return status == 200


def _run(server):
    try:
        yield start_or_fail(server)
    finally:
        stop_and_check(server)


@pytest.fixture(scope="module")
def status_server(status_repo):
    yield from _run(
        TrtisServer(
            status_repo,
            [
                "--id", STATUS_ID,
                "--python", sys.executable,
                "--exit-on-error=false",
                "--strict-readiness=false",
            ],
            name="v1 status server",
        )
    )


@pytest.fixture(scope="module")
def client(status_server):
    c = HttpV1(status_server.host, status_server.port)
    yield c
    c.close()


@pytest.fixture(scope="module")
def not_ready_server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("trtis_v1_not_ready") / "models"
    build_status_repository(repo)
    yield from _run(
        LiveServer(repo, ["--exit-on-error=false", "--python", sys.executable], name="v1 not-ready server")
    )


# -- health ---------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["live", "ready"])
def test_health(client, which):
    r = client.get(f"/api/health/{which}")
    assert_http_ok(r, which)
    check_request_status(r.nv_status, which)
    assert r.nv_status.server_id == STATUS_ID


def test_health_ready_400_when_a_model_failed_under_strict_readiness(not_ready_server):
    c = HttpV1(not_ready_server.host, not_ready_server.port)
    try:
        live = c.get("/api/health/live")
        assert_http_ok(live, "live")
        ready = c.get("/api/health/ready")
        assert ready.status == 400, f"ready on a not-ready server: {ready.describe()}"
        assert ready.nv_status is not None, f"no NV-Status: {ready.describe()}"
    finally:
        c.close()


# -- formats --------------------------------------------------------------------------


def test_status_default_format_is_text(client):
    r, st = client.status()
    assert_http_ok(r)
    check_request_status(r.nv_status, "status")
    assert st.id == STATUS_ID


def test_status_binary(client):
    r, st = client.status(fmt="binary")
    assert_http_ok(r)
    assert r.headers.get("content-type") == "application/octet-stream"
    assert st.id == STATUS_ID
    assert "simple" in st.model_status


def test_status_json(client):
    r, st = client.status(fmt="json")
    assert_http_ok(r)
    assert st.id == STATUS_ID
    assert "simple" in st.model_status


def test_status_accept_json_without_format(client):
    r, st = client.status(accept="application/json")
    assert_http_ok(r)
    assert st.id == STATUS_ID
    assert "simple" in st.model_status


def test_status_formats_agree(client):
    got = {}
    for fmt, accept in ((None, None), ("binary", None), ("json", None), (None, "application/json")):
        r, st = client.status(fmt=fmt, accept=accept)
        assert_http_ok(r, f"format {fmt} accept {accept}")
        got[(fmt, accept)] = st
    base = got[(None, None)]
    for key, st in got.items():
        assert st.id == base.id, key
        assert st.version == base.version, key
        assert st.ready_state == base.ready_state, key
        assert dict(st.model_status) == dict(base.model_status), key


def test_status_one_model_each_format(client):
    for fmt in (None, "binary", "json"):
        r, st = client.status("simple", fmt=fmt)
        assert_http_ok(r, f"format {fmt}")
        assert list(st.model_status) == ["simple"], fmt
        assert st.id == STATUS_ID


@pytest.mark.parametrize("fmt", [None, "binary", "json"])
def test_status_unknown_model(client, fmt):
    r, st = client.status("no_such_model", fmt=fmt)
    assert_http_error(r, INVALID_ARG)
    check_request_status(r.nv_status, "unknown model")


# -- contents -------------------------------------------------------------------------


def test_server_fields(client):
    r, st = client.status(fmt="binary")
    assert_http_ok(r)
    assert st.id == STATUS_ID
    assert st.version, "empty server version"
    assert st.ready_state == ServerReadyState.Value("SERVER_READY")
    assert st.uptime_ns > 0
    first = st.uptime_ns
    later = wait_for(lambda: client.status(fmt="binary")[1].uptime_ns > first, timeout=5.0)
    assert later, "uptime_ns does not grow"


def test_status_request_ids_increase(client):
    r1, _ = client.status()
    r2, _ = client.status()
    assert r2.nv_status.request_id > r1.nv_status.request_id > 0


def test_every_model_listed(client, status_repo):
    r, st = client.status(fmt="binary")
    assert_http_ok(r)
    want = {p.name for p in status_repo.iterdir() if p.is_dir()}
    assert set(st.model_status) == want


def test_failed_model_is_unavailable_with_reason(client):
    r, st = client.status(fmt="binary")
    assert_http_ok(r)
    ms = st.model_status["broken"]
    assert ms.version_status, "the failed model has no version_status"
    states = {v: vs.ready_state for v, vs in ms.version_status.items()}
    assert ModelReadyState.Value("MODEL_READY") not in states.values(), states
    unavailable = [
        vs for vs in ms.version_status.values()
        if vs.ready_state == ModelReadyState.Value("MODEL_UNAVAILABLE")
    ]
    assert unavailable, f"no MODEL_UNAVAILABLE version: {states}"
    assert all(vs.ready_state_reason.message for vs in unavailable), (
        "MODEL_UNAVAILABLE without ready_state_reason.message"
    )


def test_failed_model_alone(client):
    r, st = client.status("broken")
    assert_http_ok(r)
    assert list(st.model_status) == ["broken"]


def _tensor(t):
    return (t.name, DataType.Name(t.data_type), list(t.dims))


# model -> (platform, max_batch_size, inputs, outputs (with label_filename))
CONFIGS = {
    "simple": (
        "onnxruntime_onnx", 8,
        [("INPUT0", "TYPE_INT32", [16]), ("INPUT1", "TYPE_INT32", [16])],
        [("OUTPUT0", "TYPE_INT32", [16], ""), ("OUTPUT1", "TYPE_INT32", [16], "")],
    ),
    "add_sub": (
        "python", 0,
        [("INPUT0", "TYPE_FP32", [4]), ("INPUT1", "TYPE_FP32", [4])],
        [("OUTPUT0", "TYPE_FP32", [4], ""), ("OUTPUT1", "TYPE_FP32", [4], "")],
    ),
    "simple_identity": (
        "identity", 8,
        [("INPUT0", "TYPE_STRING", [-1])],
        [("OUTPUT0", "TYPE_STRING", [-1], "")],
    ),
    "identity_class": (
        "identity", 8,
        [("INPUT0", "TYPE_FP32", [4])],
        [("OUTPUT0", "TYPE_FP32", [4], "labels.txt")],
    ),
}


@pytest.mark.parametrize("fmt", ["text", "binary", "json"])
@pytest.mark.parametrize("model", list(CONFIGS))
def test_model_config(client, model, fmt):
    r, st = client.status(model, fmt=None if fmt == "text" else fmt)
    assert_http_ok(r)
    config = st.model_status[model].config
    platform, max_batch, inputs, outputs = CONFIGS[model]
    assert config.name == model
    assert config.platform == platform
    assert config.max_batch_size == max_batch
    assert [_tensor(i) for i in config.input] == inputs
    assert [(*_tensor(o), o.label_filename) for o in config.output] == outputs


@pytest.mark.parametrize("model", list(CONFIGS))
def test_loaded_model_version_ready(client, model):
    r, st = client.status(model, fmt="binary")
    assert_http_ok(r)
    vs = st.model_status[model].version_status
    assert list(vs) == [1]
    assert vs[1].ready_state == ModelReadyState.Value("MODEL_READY")


def test_add_sub_serves(client):
    # The Python model behind the "python" platform really answers over v1.
    x = np.array([[1.5, 2.0, -3.0, 4.25]], dtype=np.float32)
    y = np.array([[0.5, -1.0, 2.0, 0.25]], dtype=np.float32)
    h = request_header(1, [("INPUT0", [4]), ("INPUT1", [4])], ["OUTPUT0", "OUTPUT1"])
    r = client.infer("add_sub", h, raw(x) + raw(y))
    assert_http_ok(r)
    assert np.array_equal(r.array("OUTPUT0", "FP32", (1, 4)), x + y)
    assert np.array_equal(r.array("OUTPUT1", "FP32", (1, 4)), x - y)


def test_add_sub_batch_size_two_refused(client):
    # max_batch_size 0: only batch_size 1.
    x = np.zeros((2, 4), dtype=np.float32)
    h = request_header(2, [("INPUT0", [4]), ("INPUT1", [4])], ["OUTPUT0"], id=4)
    r = client.infer("add_sub", h, raw(x) + raw(x))
    assert_http_error(r, INVALID_ARG)


# -- statistics -------------------------------------------------------------------------


def _stats(client, model="stats_model"):
    r, st = client.status(model, fmt="binary")
    assert_http_ok(r)
    return st.model_status[model].version_status[1]


def _stats_when(client, predicate, model="stats_model"):
    """Polls the statistics until `predicate` holds (they may be recorded
    just after the answer leaves); returns the last ones."""
    last = []

    def poll():
        last[:] = [_stats(client, model)]
        return predicate(last[0])

    wait_for(poll, timeout=5.0)
    return last[0]


def test_statistics_by_batch_size(client):
    def infer(batch, dims=4):
        x = np.arange(batch * dims, dtype=np.float32).reshape(batch, dims)
        return client.infer("stats_model", request_header(batch, [("INPUT0", [dims])], ["OUTPUT0"], id=6), raw(x))

    before = _stats(client)
    assert before.model_inference_count == 0 and before.model_execution_count == 0
    assert before.last_inference_timestamp_milliseconds == 0

    start_ms = time.time() * 1000
    for batch in (1, 2, 1, 2, 1):
        assert_http_ok(infer(batch), f"batch {batch}")
    vs = _stats_when(client, lambda s: s.model_inference_count >= 7)
    assert vs.model_inference_count == 7
    assert vs.model_execution_count == 5
    assert vs.ready_state == ModelReadyState.Value("MODEL_READY")
    assert start_ms - 60_000 < vs.last_inference_timestamp_milliseconds < time.time() * 1000 + 60_000, (
        vs.last_inference_timestamp_milliseconds, start_ms
    )
    assert sorted(vs.infer_stats) == [1, 2]
    for batch, n in ((1, 3), (2, 2)):
        s = vs.infer_stats[batch]
        assert s.success.count == n, (batch, s)
        assert s.success.total_time_ns > 0, (batch, s)
        assert s.compute.count == n, (batch, s)
        assert s.queue.count == n, (batch, s)
        assert s.failed.count == 0, (batch, s)


def test_statistics_count_failed_request_under_key_1(client):
    # A request the sequence batcher refuses (no START on a new sequence)
    # fails inside the server's inference path, as a backend error would
    # (a request that fails the header checks never gets that far, in
    # TRTIS 1.11 as here, and is not counted).
    before = _stats(client, "simple_sequence")
    assert 1 not in before.infer_stats or before.infer_stats[1].failed.count == 0
    x = np.array([[5]], dtype=np.int32)
    h = request_header(1, [("INPUT", [1])], ["OUTPUT"], id=12, correlation_id=4242)
    r = client.infer("simple_sequence", h, raw(x))
    assert_http_error(r, INVALID_ARG)
    vs = _stats_when(
        client, lambda s: 1 in s.infer_stats and s.infer_stats[1].failed.count >= 1, "simple_sequence"
    )
    assert 1 in vs.infer_stats, f"no infer_stats[1] after a failed request: {vs}"
    assert vs.infer_stats[1].failed.count == 1
    assert vs.infer_stats[1].success.count == 0
    assert vs.model_inference_count == 0
