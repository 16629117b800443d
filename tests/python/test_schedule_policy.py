"""The schedule_policy extension: request priorities and queue policies of
the dynamic batcher (`priority_levels`, `default_queue_policy`,
`priority_queue_policy`: max_queue_size, timeouts with REJECT / DELAY,
allow_timeout_override), the `priority` / `timeout` request parameters of
both protocols, `preserve_ordering`, and how rejected requests show in the
statistics and metrics.

Every model is an `identity` model with one instance (two for the ordering
models) whose execution sleeps INPUT0 milliseconds (`delay_input`), so one
"busy" request holds the instance while the test queues others behind it.
The tests only compare orders of completion ("A finished before B") with
margins of hundreds of milliseconds, never speeds; a precondition check
reports a machine too slow to set up the scene (the busy request finished
before the queued ones were even sent) instead of a wrong result.

Run: .venv/bin/python -m pytest tests/python/test_schedule_policy.py -q
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from trtis_harness import (
    assert_client_error,
    assert_error,
    assert_grpc_error,
    assert_rpc_error,
    grpc_channel_for,
    grpc_client_for,
    running_server,
    wait_for,
)

# The busy request's execution time: every request of a scene is sent well
# within it (SETTLE + a few GAPs, about 1.3 s at most).
BUSY_MS = 2000
# After sending the busy request, before queueing others behind it.
SETTLE_S = 0.5
# Between two queued requests (keeps their send order).
GAP_S = 0.15
# Execution time of each queued request: completions of queued requests are
# at least this far apart, so the client sees them in the server's order.
STEP_MS = 200

PROTOCOLS = ["http", "grpc"]

QUEUE_FULL = "Exceeds maximum queue size"
TIMEOUT_EXPIRED = "Request timeout expired"


# --------------------------------------------------------------------------
# Model repository
# --------------------------------------------------------------------------


def _config(name: str, dynamic_batching: str, instances: int = 1) -> str:
    return f"""name: "{name}"
backend: "identity"
max_batch_size: 1
input [ {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] }} ]
instance_group [ {{ count: {instances} kind: KIND_CPU }} ]
dynamic_batching {{
{dynamic_batching}
}}
parameters {{ key: "delay_input" value: {{ string_value: "INPUT0" }} }}
"""


MODELS = {
    # Two levels, default 2 (no timeout, unbounded), level 1 holds at most 2.
    "prio": """  priority_levels: 2
  default_priority_level: 2
  default_queue_policy { timeout_action: REJECT default_timeout_microseconds: 0 allow_timeout_override: true max_queue_size: 0 }
  priority_queue_policy { key: 1 value { max_queue_size: 2 } }""",
    # Three levels, default 2: tells "default level" from "lowest level".
    "prio3": """  priority_levels: 3
  default_priority_level: 2""",
    # Requests wait at most 200 ms, a request's own timeout may only shorten it.
    "reject_short": """  default_queue_policy { timeout_action: REJECT default_timeout_microseconds: 200000 allow_timeout_override: true }""",
    # A 10 s default a request's timeout may shorten.
    "reject_override": """  default_queue_policy { timeout_action: REJECT default_timeout_microseconds: 10000000 allow_timeout_override: true }""",
    # A 10 s default requests may not change.
    "reject_no_override": """  default_queue_policy { timeout_action: REJECT default_timeout_microseconds: 10000000 allow_timeout_override: false }""",
    # Timed-out requests are delayed, not rejected.
    "delay_short": """  default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 100000 }""",
    "delay_override": """  default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 10000000 allow_timeout_override: true }""",
    # For the exact counts of the metrics test (nothing else uses it).
    "metered": """  priority_levels: 2
  default_priority_level: 2
  default_queue_policy { timeout_action: REJECT default_timeout_microseconds: 200000 }
  priority_queue_policy { key: 1 value { max_queue_size: 1 } }""",
}

# Two instances: a later, shorter request can finish first.
ORDERING_MODELS = {
    "ordered": "  preserve_ordering: true",
    "unordered": "  preserve_ordering: false",
}


@pytest.fixture(scope="module")
def sched_repo(tmp_path_factory):
    repo = tmp_path_factory.mktemp("trtis_sched") / "models"
    for name, body in list(MODELS.items()) + list(ORDERING_MODELS.items()):
        model = repo / name
        (model / "1").mkdir(parents=True)
        (model / "1" / ".keep").write_text("")
        instances = 2 if name in ORDERING_MODELS else 1
        (model / "config.pbtxt").write_text(_config(name, body, instances))
    return repo


@pytest.fixture(scope="module")
def sched_server(sched_repo):
    yield from running_server(sched_repo, name="schedule-policy server")


@pytest.fixture(scope="module")
def http_client(sched_server):
    c = httpclient.InferenceServerClient(
        sched_server.url, connection_timeout=10.0, network_timeout=60.0
    )
    yield c
    c.close()


@pytest.fixture(scope="module")
def grpc_client(sched_server):
    c = grpc_client_for(sched_server)
    yield c
    c.close()


@pytest.fixture(scope="module")
def stub(sched_server):
    channel = grpc_channel_for(sched_server)
    yield service_pb2_grpc.GRPCInferenceServiceStub(channel)
    channel.close()


# --------------------------------------------------------------------------
# Requests
# --------------------------------------------------------------------------


def _http_inputs(value: int):
    inp = httpclient.InferInput("INPUT0", [1, 1], "INT32")
    inp.set_data_from_numpy(np.array([[value]], dtype=np.int32))
    return [inp]


def _grpc_inputs(value: int):
    inp = grpcclient.InferInput("INPUT0", [1, 1], "INT32")
    inp.set_data_from_numpy(np.array([[value]], dtype=np.int32))
    return [inp]


class _Sender:
    """A fresh client of one protocol (safe to use from its own thread)."""

    def __init__(self, server, protocol: str):
        self.protocol = protocol
        if protocol == "http":
            self.client = httpclient.InferenceServerClient(
                server.url, connection_timeout=10.0, network_timeout=60.0
            )
        else:
            self.client = grpcclient.InferenceServerClient(server.grpc_url)

    def connect(self) -> None:
        """Opens the connection now, so the inference goes out at once."""
        assert self.client.is_server_live()

    def infer(self, model: str, value: int, **kw) -> int:
        if self.protocol == "http":
            result = self.client.infer(model, _http_inputs(value), **kw)
        else:
            result = self.client.infer(model, _grpc_inputs(value), client_timeout=60.0, **kw)
        return int(result.as_numpy("OUTPUT0").reshape(-1)[0])

    def close(self) -> None:
        self.client.close()


def infer_once(server, protocol: str, model: str, value: int, **kw) -> int:
    """One inference on a fresh client (safe from any thread): OUTPUT0."""
    sender = _Sender(server, protocol)
    try:
        return sender.infer(model, value, **kw)
    finally:
        sender.close()


def raw_http_infer(server, model: str, value: int, parameters: dict) -> int:
    """A JSON request with the given request `parameters` (tritonclient never
    sends priority 0): OUTPUT0, or AssertionError on an error status."""
    doc = {
        "inputs": [{"name": "INPUT0", "shape": [1, 1], "datatype": "INT32", "data": [value]}],
        "parameters": parameters,
    }
    status, _, body = server.request(
        "POST",
        f"/v2/models/{model}/infer",
        json.dumps(doc),
        {"Content-Type": "application/json"},
        timeout=60.0,
    )
    assert status == 200, (status, body[:300])
    out = json.loads(body)["outputs"][0]
    return int(out["data"][0])


class Flight:
    """Requests sent from their own threads in a controlled order; records
    when (and in which order) each one completed."""

    def __init__(self, server, protocol: str):
        self.server = server
        self.protocol = protocol
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.order: list[str] = []
        self.sent: dict[str, float] = {}
        self.done: dict[str, float] = {}
        self.results: dict[str, object] = {}  # OUTPUT0 or the exception

    def send(self, label: str, model: str, value: int, pause: float = GAP_S, raw_params=None, **kw):
        """Starts the request in a thread (its client connected first, so
        requests leave in the order of these calls), then sleeps `pause`."""
        armed = threading.Event()

        def run():
            sender = None
            try:
                if raw_params is not None:
                    armed.set()
                    result = raw_http_infer(self.server, model, value, raw_params)
                else:
                    sender = _Sender(self.server, self.protocol)
                    sender.connect()
                    armed.set()
                    result = sender.infer(model, value, **kw)
            except Exception as e:  # recorded, asserted by the test
                result = e
            finally:
                armed.set()
                if sender is not None:
                    sender.close()
            with self._lock:
                self.done[label] = time.monotonic()
                self.order.append(label)
                self.results[label] = result

        t = threading.Thread(target=run, name=f"flight-{label}", daemon=True)
        self._threads.append(t)
        t.start()
        assert armed.wait(30.0), f"request {label}: no connection within 30 s"
        self.sent[label] = time.monotonic()
        time.sleep(pause)

    def wait(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        alive = [t.name for t in self._threads if t.is_alive()]
        assert not alive, f"requests still running after {timeout} s: {alive}"

    def timeline(self) -> str:
        """Sent / done times (s) after the first request, for messages."""
        t0 = min(self.sent.values())
        return ", ".join(
            f"{k}: sent {self.sent[k] - t0:.3f} done {self.done.get(k, float('nan')) - t0:.3f}"
            for k in sorted(self.sent, key=self.sent.get)
        )

    def assert_order(self, expected: list[str]) -> None:
        assert self.order == expected, (
            f"completion order {self.order}, expected {expected} ({self.timeline()})"
        )

    def is_done(self, label: str) -> bool:
        with self._lock:
            return label in self.done

    def ok(self, label: str, value: int) -> None:
        result = self.results[label]
        assert not isinstance(result, Exception), f"request {label} failed: {result!r}"
        assert result == value, f"request {label}: OUTPUT0 {result}, expected {value}"

    def error(self, label: str) -> InferenceServerException:
        result = self.results[label]
        assert isinstance(result, InferenceServerException), (
            f"request {label} should have failed, got {result!r}"
        )
        return result

    def require_busy_outlived(self, busy: str, last: str) -> None:
        """The scene's premise: `busy` was still running when `last` was sent."""
        assert self.done[busy] > self.sent[last], (
            f"machine too slow for this test: the {BUSY_MS} ms busy request finished "
            f"before request {last!r} was sent"
        )


def expect_error(protocol: str, exc, message: str, exact: bool = False) -> None:
    """HTTP 503 / gRPC UNAVAILABLE with `message` (in it, or all of it)."""
    if protocol == "http":
        msg = assert_client_error(exc, 503, message)
    else:
        msg = assert_grpc_error(exc, "UNAVAILABLE", message)
    if exact:
        assert msg == message, f"expected exactly {message!r}, got {msg!r}"


def model_stats(client, model: str) -> dict:
    entries = client.get_inference_statistics(model)["model_stats"]
    assert len(entries) == 1, entries
    return entries[0]


# --------------------------------------------------------------------------
# Extension and parameters
# --------------------------------------------------------------------------


def test_http_server_metadata_lists_schedule_policy(http_client):
    assert "schedule_policy" in http_client.get_server_metadata()["extensions"]


def test_grpc_server_metadata_lists_schedule_policy(grpc_client):
    assert "schedule_policy" in list(grpc_client.get_server_metadata().extensions)


def test_http_infer_with_priority_and_timeout(http_client):
    r = http_client.infer("prio", _http_inputs(7), priority=1, timeout=5_000_000)
    assert r.as_numpy("OUTPUT0").tolist() == [[7]]
    r = http_client.infer("prio", _http_inputs(8), priority=2, timeout=1)
    assert r.as_numpy("OUTPUT0").tolist() == [[8]]


def test_grpc_infer_with_priority_and_timeout(grpc_client):
    r = grpc_client.infer("prio", _grpc_inputs(7), priority=1, timeout=5_000_000)
    assert r.as_numpy("OUTPUT0").tolist() == [[7]]
    r = grpc_client.infer("prio", _grpc_inputs(8), priority=2, timeout=1)
    assert r.as_numpy("OUTPUT0").tolist() == [[8]]


def test_http_priority_zero_and_out_of_range_accepted(sched_server):
    # tritonclient leaves priority 0 out, so these go raw.
    assert raw_http_infer(sched_server, "prio", 3, {"priority": 0}) == 3
    assert raw_http_infer(sched_server, "prio", 4, {"priority": 9}) == 4
    assert raw_http_infer(sched_server, "prio3", 5, {"priority": 0}) == 5


def _raw_grpc_request(model: str, value: int) -> service_pb2.ModelInferRequest:
    req = service_pb2.ModelInferRequest(model_name=model)
    tensor = req.inputs.add()
    tensor.name = "INPUT0"
    tensor.datatype = "INT32"
    tensor.shape.extend([1, 1])
    req.raw_input_contents.append(np.array([value], dtype=np.int32).tobytes())
    return req


def test_grpc_priority_zero_and_out_of_range_accepted(stub):
    for value, set_param in (
        (3, lambda p: setattr(p, "uint64_param", 0)),
        (4, lambda p: setattr(p, "uint64_param", 9)),
        (5, lambda p: setattr(p, "int64_param", 0)),
        (6, lambda p: setattr(p, "int64_param", 9)),
    ):
        req = _raw_grpc_request("prio", value)
        set_param(req.parameters["priority"])
        resp = stub.ModelInfer(req, timeout=30)
        got = np.frombuffer(resp.raw_output_contents[0], dtype=np.int32).tolist()
        assert got == [value]


# Triton's HTTP frontend: MemberAsUInt("priority"/"timeout") failures,
# RETURN_MSG_IF_ERR(..., "Unable to parse 'priority'").
@pytest.mark.parametrize(
    "param,value",
    [("priority", -1), ("priority", "1"), ("timeout", "abc"), ("timeout", -5)],
)
def test_http_invalid_parameter_value(sched_server, param, value):
    doc = {
        "inputs": [{"name": "INPUT0", "shape": [1, 1], "datatype": "INT32", "data": [1]}],
        "parameters": {param: value},
    }
    msg = assert_error(
        sched_server.post_json("/v2/models/prio/infer", doc),
        400,
        f"Unable to parse '{param}': attempt to access JSON non-unsigned-integer "
        "as unsigned-integer",
    )
    assert msg == (
        f"Unable to parse '{param}': attempt to access JSON non-unsigned-integer "
        "as unsigned-integer"
    )


def test_http_invalid_priority_with_urllib(sched_server):
    """The same through a plain urllib POST (a client other than the
    harness's)."""
    body = (
        b'{"inputs":[{"name":"INPUT0","shape":[1,1],"datatype":"INT32","data":[1]}],'
        b'"parameters":{"priority":-1}}'
    )
    req = urllib.request.Request(
        f"http://{sched_server.url}/v2/models/prio/infer",
        data=body,
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=30)
    assert e.value.code == 400
    assert json.loads(e.value.read()) == {
        "error": "Unable to parse 'priority': attempt to access JSON "
        "non-unsigned-integer as unsigned-integer"
    }


# Triton's gRPC frontend (infer_handler.cc SetInferenceRequestMetadata).
@pytest.mark.parametrize(
    "param,setter,message",
    [
        (
            "priority",
            lambda p: setattr(p, "string_param", "1"),
            "invalid value type for 'priority' parameter, expected int64_param or uint64_param.",
        ),
        (
            "priority",
            lambda p: setattr(p, "bool_param", True),
            "invalid value type for 'priority' parameter, expected int64_param or uint64_param.",
        ),
        (
            "priority",
            lambda p: setattr(p, "int64_param", -1),
            "invalid value for 'priority', expected value >= 0.",
        ),
        (
            "timeout",
            lambda p: setattr(p, "string_param", "abc"),
            "invalid value type for 'timeout' parameter, expected int64_param.",
        ),
        (
            "timeout",
            lambda p: setattr(p, "uint64_param", 5),
            "invalid value type for 'timeout' parameter, expected int64_param.",
        ),
    ],
    ids=["priority-string", "priority-bool", "priority-negative", "timeout-string", "timeout-uint64"],
)
def test_grpc_invalid_parameter_value(stub, param, setter, message):
    import grpc

    req = _raw_grpc_request("prio", 1)
    setter(req.parameters[param])
    with pytest.raises(grpc.RpcError) as e:
        stub.ModelInfer(req, timeout=30)
    msg = assert_rpc_error(e.value, "INVALID_ARGUMENT", message)
    assert msg == message


# --------------------------------------------------------------------------
# Priorities
# --------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_priority_request_overtakes_queued_default_requests(sched_server, protocol):
    f = Flight(sched_server, protocol)
    # The busy request is priority 1 as well, so it runs first even if it had
    # not left the queue yet when the others arrive.
    f.send("busy", "prio", BUSY_MS, pause=SETTLE_S, priority=1)
    f.send("d1", "prio", STEP_MS)
    f.send("d2", "prio", STEP_MS)
    f.send("d3", "prio", STEP_MS + 1)
    f.send("p1", "prio", STEP_MS + 2, priority=1)
    f.wait()
    f.require_busy_outlived("busy", "p1")
    f.ok("busy", BUSY_MS)
    f.ok("d1", STEP_MS)
    f.ok("d2", STEP_MS)
    f.ok("d3", STEP_MS + 1)
    f.ok("p1", STEP_MS + 2)
    f.assert_order(["busy", "p1", "d1", "d2", "d3"])


def test_http_priority_zero_and_too_large_mean_default_level(sched_server):
    """prio3: levels 1..3, default 2. Priority 0 and 9 queue at level 2 (in
    arrival order with the other level-2 requests), not at level 3."""
    f = Flight(sched_server, "http")
    f.send("busy", "prio3", BUSY_MS, pause=SETTLE_S, priority=1)
    f.send("l3", "prio3", STEP_MS, priority=3)
    f.send("x0", "prio3", STEP_MS + 1, raw_params={"priority": 0})
    f.send("x9", "prio3", STEP_MS + 2, priority=9)
    f.send("d", "prio3", STEP_MS + 3)
    f.send("p1", "prio3", STEP_MS + 4, priority=1)
    f.wait()
    f.require_busy_outlived("busy", "p1")
    for label, value in [("l3", 0), ("x0", 1), ("x9", 2), ("d", 3), ("p1", 4)]:
        f.ok(label, STEP_MS + value)
    f.assert_order(["busy", "p1", "x0", "x9", "d", "l3"])


# --------------------------------------------------------------------------
# Queue size
# --------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_queue_full_rejects_at_once(sched_server, protocol):
    """prio level 1 holds 2 requests: with the instance busy and two
    priority-1 requests waiting, the next priority-1 request fails at once;
    the default level still accepts."""
    f = Flight(sched_server, protocol)
    f.send("busy", "prio", BUSY_MS, pause=SETTLE_S)
    f.send("q1", "prio", STEP_MS, priority=1)
    f.send("q2", "prio", STEP_MS + 1, priority=1)

    with pytest.raises(InferenceServerException) as e:
        infer_once(sched_server, protocol, "prio", 3, priority=1)
    rejected_before_busy_done = not f.is_done("busy")
    expect_error(protocol, e.value, f"[request id: <id_unknown>] {QUEUE_FULL}", exact=True)

    with pytest.raises(InferenceServerException) as e:
        infer_once(sched_server, protocol, "prio", 4, priority=1, request_id="abc")
    expect_error(protocol, e.value, f"[request id: abc] {QUEUE_FULL}", exact=True)

    # Another level is not full.
    f.send("d", "prio", STEP_MS + 2, pause=0)
    f.wait()
    f.require_busy_outlived("busy", "d")
    assert rejected_before_busy_done, "the queue-full error should come at once, not after the busy request"
    f.ok("busy", BUSY_MS)
    f.ok("q1", STEP_MS)
    f.ok("q2", STEP_MS + 1)
    f.ok("d", STEP_MS + 2)
    f.assert_order(["busy", "q1", "q2", "d"])


# --------------------------------------------------------------------------
# Timeouts
# --------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_queue_timeout_reject(sched_server, http_client, protocol):
    """reject_short: 200 ms in the queue at most, REJECT. A request behind a
    2 s request fails with exactly "Request timeout expired", and the
    model's statistics count one failure more."""
    before = model_stats(http_client, "reject_short")
    f = Flight(sched_server, protocol)
    f.send("busy", "reject_short", BUSY_MS, pause=SETTLE_S)
    f.send("late", "reject_short", 1, pause=0)
    f.wait()
    f.require_busy_outlived("busy", "late")
    f.ok("busy", BUSY_MS)
    expect_error(protocol, f.error("late"), TIMEOUT_EXPIRED, exact=True)

    def settled():
        s = model_stats(http_client, "reject_short")
        inf = s["inference_stats"]
        return s if inf["fail"]["count"] > before["inference_stats"]["fail"]["count"] else None

    after = wait_for(settled, timeout=5.0) or model_stats(http_client, "reject_short")
    b, a = before["inference_stats"], after["inference_stats"]
    assert a["fail"]["count"] == b["fail"]["count"] + 1, (b["fail"], a["fail"])
    assert a["success"]["count"] == b["success"]["count"] + 1, (b["success"], a["success"])
    assert after["inference_count"] == before["inference_count"] + 1


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_request_timeout_longer_than_default_does_not_extend_it(sched_server, protocol):
    """allow_timeout_override only shortens: a 60 s request timeout on a
    model with a 200 ms default still expires after 200 ms."""
    f = Flight(sched_server, protocol)
    f.send("busy", "reject_short", BUSY_MS, pause=SETTLE_S)
    f.send("late", "reject_short", 1, pause=0, timeout=60_000_000)
    f.wait()
    f.require_busy_outlived("busy", "late")
    f.ok("busy", BUSY_MS)
    expect_error(protocol, f.error("late"), TIMEOUT_EXPIRED, exact=True)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_request_timeout_override_shortens_default(sched_server, protocol):
    """reject_override: 10 s default. A 50 ms request timeout expires behind
    the busy request; a 20 s one (larger than the default) does not shorten
    anything: that request succeeds."""
    f = Flight(sched_server, protocol)
    f.send("busy", "reject_override", BUSY_MS, pause=SETTLE_S)
    f.send("short", "reject_override", 1, timeout=50_000)
    f.send("long", "reject_override", 2, pause=0, timeout=20_000_000)
    f.wait()
    f.require_busy_outlived("busy", "long")
    f.ok("busy", BUSY_MS)
    expect_error(protocol, f.error("short"), TIMEOUT_EXPIRED, exact=True)
    f.ok("long", 2)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_request_timeout_ignored_without_override(sched_server, protocol):
    """reject_no_override: allow_timeout_override false, the request's
    50 ms is ignored (the 10 s default applies): it succeeds."""
    f = Flight(sched_server, protocol)
    f.send("busy", "reject_no_override", BUSY_MS, pause=SETTLE_S)
    f.send("short", "reject_no_override", STEP_MS, pause=0, timeout=50_000)
    f.wait()
    f.require_busy_outlived("busy", "short")
    f.ok("busy", BUSY_MS)
    f.ok("short", STEP_MS)
    f.assert_order(["busy", "short"])


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_request_timeout_ignored_when_default_is_zero(sched_server, protocol):
    """prio: default_timeout_microseconds 0 (no timeout) with
    allow_timeout_override true: the request's timeout is ignored (Triton:
    an override only replaces a smaller non-zero default)."""
    f = Flight(sched_server, protocol)
    f.send("busy", "prio", BUSY_MS, pause=SETTLE_S)
    f.send("short", "prio", 1, pause=0, timeout=50_000)
    f.wait()
    f.require_busy_outlived("busy", "short")
    f.ok("busy", BUSY_MS)
    f.ok("short", 1)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_queue_timeout_delay_keeps_request(sched_server, protocol):
    """delay_short: 100 ms, DELAY. The request waits 2 s, times out, and
    still completes successfully."""
    f = Flight(sched_server, protocol)
    f.send("busy", "delay_short", BUSY_MS, pause=SETTLE_S)
    f.send("late", "delay_short", STEP_MS, pause=0)
    f.wait()
    f.require_busy_outlived("busy", "late")
    f.ok("busy", BUSY_MS)
    f.ok("late", STEP_MS)
    f.assert_order(["busy", "late"])


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_delayed_request_runs_after_the_others(sched_server, protocol):
    """delay_override: DELAY, 10 s default. `x` (50 ms timeout) times out
    behind the busy request and is delayed; `y`, queued after it but not
    timed out, runs first; `x` still succeeds."""
    f = Flight(sched_server, protocol)
    f.send("busy", "delay_override", BUSY_MS, pause=SETTLE_S)
    f.send("x", "delay_override", STEP_MS, timeout=50_000)
    f.send("y", "delay_override", STEP_MS + 1, pause=0)
    f.wait()
    f.require_busy_outlived("busy", "y")
    f.ok("busy", BUSY_MS)
    f.ok("x", STEP_MS)
    f.ok("y", STEP_MS + 1)
    f.assert_order(["busy", "y", "x"])


# --------------------------------------------------------------------------
# preserve_ordering
# --------------------------------------------------------------------------

ORDER_A_MS = 1000
# Completion times within this of each other count as "the same moment".
ORDER_SLACK_S = 0.3


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_preserve_ordering_holds_later_response(sched_server, protocol):
    """ordered: two instances, preserve_ordering. B (0 ms), sent 150 ms after
    A (1000 ms), runs at once on the other instance but its response is
    held until A's is sent."""
    f = Flight(sched_server, protocol)
    f.send("A", "ordered", ORDER_A_MS)
    f.send("B", "ordered", 0, pause=0)
    f.wait()
    f.ok("A", ORDER_A_MS)
    f.ok("B", 0)
    assert f.done["B"] >= f.done["A"] - ORDER_SLACK_S, (
        f"B answered {f.done['A'] - f.done['B']:.3f} s before A"
    )


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_without_preserve_ordering_later_response_comes_first(sched_server, protocol):
    f = Flight(sched_server, protocol)
    f.send("A", "unordered", ORDER_A_MS)
    f.send("B", "unordered", 0, pause=0)
    f.wait()
    f.ok("A", ORDER_A_MS)
    f.ok("B", 0)
    f.assert_order(["B", "A"])
    assert f.done["B"] < f.done["A"] - ORDER_SLACK_S, (
        f"B answered only {f.done['A'] - f.done['B']:.3f} s before A"
    )


# --------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------

METRICS_RE = re.compile(r"Started Metrics Service at (\S+):(\d+)")
SAMPLE_RE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$")
LABEL_RE = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def metrics_port(server) -> int | None:
    for line in server.log_lines():
        m = METRICS_RE.search(line)
        if m:
            return int(m.group(2))
    return None


def scrape(port: int) -> list[tuple[str, dict, float]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode("utf-8")
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE_RE.match(line)
        assert m, f"not a Prometheus sample line: {line!r}"
        labels = dict(LABEL_RE.findall(m.group(2) or ""))
        samples.append((m.group(1), labels, float(m.group(3))))
    return samples


def metric(samples, name: str, **labels) -> float:
    """The value of the one sample with this name and these labels (0 when
    there is none yet)."""
    found = [v for n, l, v in samples if n == name and l == labels]
    assert len(found) <= 1, (name, labels, found)
    return found[0] if found else 0.0


def test_metrics_count_rejected_and_successful_requests(sched_server, http_client):
    """metered: a timed-out request and a queue-full one are 2 REJECTED
    failures; the busy request and the queued priority-1 one are the 2
    successes of the duration histogram."""
    port = metrics_port(sched_server)
    if port is None:
        pytest.skip("no 'Started Metrics Service at' line in the server's log")

    def snapshot():
        s = scrape(port)
        return (
            metric(s, "nv_inference_request_failure", model="metered", reason="REJECTED", version="1"),
            metric(s, "trtis_inference_request_duration_us_count", model="metered", version="1"),
            metric(s, "trtis_inference_request_duration_us_bucket", model="metered", version="1", le="+Inf"),
            metric(s, "nv_inference_request_success", model="metered", version="1"),
        )

    rejected0, count0, inf0, success0 = snapshot()
    f = Flight(sched_server, "http")
    f.send("busy", "metered", BUSY_MS, pause=SETTLE_S)
    f.send("timed_out", "metered", 1)  # default level, 200 ms, REJECT
    f.send("q1", "metered", 2, priority=1)  # level 1 holds one
    with pytest.raises(InferenceServerException) as e:
        infer_once(sched_server, "http", "metered", 3, priority=1)
    assert_client_error(e.value, 503, QUEUE_FULL)
    f.wait()
    f.require_busy_outlived("busy", "q1")
    f.ok("busy", BUSY_MS)
    f.ok("q1", 2)
    assert_client_error(f.error("timed_out"), 503, TIMEOUT_EXPIRED)

    expected = (rejected0 + 2, count0 + 2, inf0 + 2, success0 + 2)
    def settled():
        got = snapshot()
        return got if got == expected else None

    got = wait_for(settled, timeout=5.0) or snapshot()
    assert got[0] == rejected0 + 2, f"REJECTED failures {rejected0} -> {got[0]}"
    assert got[1] == count0 + 2, f"duration histogram count {count0} -> {got[1]}"
    assert got[2] == inf0 + 2, f"+Inf bucket {inf0} -> {got[2]}"
    assert got[3] == success0 + 2, f"successes {success0} -> {got[3]}"
