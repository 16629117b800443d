"""Request cancellation through Triton's own gRPC client against a real
`trtis serve` (Python-backend fixtures of tests/fixtures/python, see the
README there).

Triton (server docs/user_guide/request_cancellation.md, core PRs
"Schedulers request cancellation"): a gRPC client cancels a call
(`async_infer(...)` returns a CallContext whose `cancel()` does it) or a
whole stream (`stop_stream(cancel_requests=True)`); the server cancels the
requests still open; a request cancelled while queued is not executed and
counts as a failure with reason CANCELED; a Python model sees
`request.is_cancelled()` / `response_sender.is_cancelled()` become True.
A plain `stop_stream()` half-closes: the requests already sent finish and
their responses arrive. On a stream, a decoupled model's responses are
written as they come, so a request that never ends does not hold up the
responses of the requests after it.

Covered: a stream cancelled under a decoupled request that loops until
cancelled; a never-ending decoupled request and quick requests behind it
on one stream; a half-close letting an open request finish; a unary call
cancelled while its (non-decoupled) request runs, and an HTTP client
hanging up on one (trtis only: Triton 2.51's HTTP frontend does not notice,
server PR#8982); a request cancelled while queued (default scheduler,
dynamic batcher) is never executed and is counted as CANCELED.

Run: TRTIS_BIN=$PWD/target/debug/trtis .venv/bin/python -m pytest \
     tests/python/test_cancellation.py -q
"""

from __future__ import annotations

import json
import shutil
import socket
import sys
import threading
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from trtis_harness import (
    EXAMPLES,
    REPO_ROOT,
    StreamCollector,
    metric,
    running_server_with_metrics,
    stop_stream_within,
    stream_client_for,
    wait_for,
)

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "python"
MODELS = ["cancel_stream_loop", "cancel_slow", "cancel_gate", "cancel_gate_batched"]

# How long to wait for something the server should do at once (generous:
# the machine may be busy; nothing here measures time).
PROMPT_S = 15.0


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    repo = (tmp_path_factory.mktemp("cancellation") / "models").resolve()
    repo.mkdir(parents=True)
    shutil.copytree(EXAMPLES / "add_sub", repo / "add_sub", ignore=shutil.ignore_patterns("__pycache__"))
    for name in MODELS:
        shutil.copytree(FIXTURES / name, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
    return repo


@pytest.fixture(scope="module")
def server(repo):
    yield from running_server_with_metrics(
        repo, args=["--python", sys.executable], name="cancellation server"
    )


@pytest.fixture
def client(server):
    """A fresh client per test (tritonclient allows one stream per client)."""
    yield from stream_client_for(server)


def int_input(n: int, batched: bool = False):
    data = np.array([[n]] if batched else [n], dtype=np.int32)
    i = grpcclient.InferInput("IN", list(data.shape), "INT32")
    i.set_data_from_numpy(data)
    return [i]


def add_sub_inputs():
    a = np.arange(4, dtype=np.float32)
    inputs = [grpcclient.InferInput(name, [4], "FP32") for name in ("INPUT0", "INPUT1")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(a)
    return inputs


def read(path) -> str | None:
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


def ids_of(collector: StreamCollector) -> list:
    with collector._cond:
        return [r.get_response().id if r is not None else None for r, _ in collector.items]


def stats(client, model: str) -> dict:
    return client.get_inference_statistics(model_name=model, as_json=True)["model_stats"][0]


def count(entry: dict, *path) -> int:
    for key in path:
        entry = entry.get(key, {})
    return int(entry.get("count", 0)) if isinstance(entry, dict) else int(entry or 0)


# --------------------------------------------------------------------------
# Streams
# --------------------------------------------------------------------------


def test_stop_stream_with_cancel_reaches_a_decoupled_model(client, tmp_path):
    """stop_stream(cancel_requests=True) under a decoupled request that
    sends until cancelled: its response sender's is_cancelled() turns
    True (the model writes the marker)."""
    marker = tmp_path / "loop.marker"
    collector = StreamCollector()
    client.start_stream(callback=collector)
    client.async_stream_infer(
        "cancel_stream_loop", int_input(0), request_id="endless", parameters={"marker": str(marker)}
    )
    collector.wait_for(3)
    assert read(marker) is None, "the model stopped before the stream was cancelled"
    client.stop_stream(cancel_requests=True)
    assert wait_for(lambda: read(marker), timeout=PROMPT_S), "the model never saw the cancellation"
    outcome, sent = read(marker).split()
    assert outcome == "cancelled", read(marker)
    assert int(sent) >= 3


def test_a_never_ending_decoupled_request_does_not_hold_up_the_next_ones(client, tmp_path):
    """One stream: a decoupled request that runs until cancelled, then a
    decoupled request of two responses and a one-answer request (add_sub):
    theirs arrive while the first still runs."""
    endless = tmp_path / "endless.marker"
    short = tmp_path / "short.marker"
    collector = StreamCollector()
    client.start_stream(callback=collector)
    client.async_stream_infer(
        "cancel_stream_loop", int_input(0), request_id="endless", parameters={"marker": str(endless)}
    )
    assert wait_for(lambda: "endless" in ids_of(collector), timeout=PROMPT_S)
    client.async_stream_infer(
        "cancel_stream_loop", int_input(2), request_id="short", parameters={"marker": str(short)}
    )
    client.async_stream_infer("add_sub", add_sub_inputs(), request_id="quick")

    def others_answered():
        ids = ids_of(collector)
        return ids.count("short") == 2 and ids.count("quick") == 1

    assert wait_for(others_answered, timeout=PROMPT_S), f"responses so far: {ids_of(collector)}"
    assert read(endless) is None, "the first request ended before the others were answered"
    assert wait_for(lambda: read(short) == "done 2", timeout=PROMPT_S), read(short)
    assert read(endless) is None, "the first request ended with the second"
    errors = [e for _, e in collector.items if e is not None]
    assert not errors, [e.message() for e in errors]
    with collector._cond:
        quick = [r for r, _ in collector.items if r is not None and r.get_response().id == "quick"]
    np.testing.assert_array_equal(quick[0].as_numpy("OUTPUT0"), 2 * np.arange(4, dtype=np.float32))
    client.stop_stream(cancel_requests=True)
    assert wait_for(lambda: read(endless), timeout=PROMPT_S)
    assert read(endless).startswith("cancelled"), read(endless)


def test_a_half_close_lets_open_requests_finish(client, tmp_path):
    """stop_stream() without cancelling: the decoupled request sent just
    before finishes and every one of its responses arrives."""
    marker = tmp_path / "finish.marker"
    collector = StreamCollector()
    client.start_stream(callback=collector)
    client.async_stream_infer(
        "cancel_stream_loop", int_input(5), request_id="five", parameters={"marker": str(marker)}
    )
    stop_stream_within(client)
    assert read(marker) == "done 5"
    assert ids_of(collector) == ["five"] * 5
    values = [int(r.as_numpy("OUT")[0]) for r, _ in collector.items]
    assert values == [0, 1, 2, 3, 4]


# --------------------------------------------------------------------------
# Unary calls
# --------------------------------------------------------------------------


def test_a_cancelled_call_reaches_the_running_model(client, tmp_path):
    """async_infer on a slow non-decoupled model, then the CallContext's
    cancel() while execute runs: the model's request.is_cancelled() turns
    True; the client hears CANCELLED."""
    marker = tmp_path / "slow.marker"
    answers = []
    done = threading.Event()

    def callback(result, error):
        answers.append((result, error))
        done.set()

    ctx = client.async_infer(
        "cancel_slow", int_input(7), callback, request_id="slow", parameters={"marker": str(marker)}
    )
    assert wait_for(lambda: read(marker) == "running", timeout=PROMPT_S), "execute never started"
    ctx.cancel()
    assert done.wait(PROMPT_S)
    result, error = answers[0]
    assert result is None and error is not None
    assert error.status() == "StatusCode.CANCELLED", error
    assert wait_for(lambda: read(marker) != "running", timeout=PROMPT_S), (
        "the model never saw the cancellation"
    )
    assert read(marker) == "cancelled"


def test_an_http_client_that_hangs_up_cancels_its_request(server, tmp_path):
    """An HTTP client closes its connection while its request runs: the
    model's request.is_cancelled() turns True."""
    marker = tmp_path / "http.marker"
    body = json.dumps(
        {
            "inputs": [{"name": "IN", "datatype": "INT32", "shape": [1], "data": [3]}],
            "parameters": {"marker": str(marker)},
        }
    ).encode()
    head = (
        "POST /v2/models/cancel_slow/infer HTTP/1.1\r\n"
        f"Host: {server.host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection((server.host, server.port), timeout=PROMPT_S) as sock:
        sock.sendall(head + body)
        assert wait_for(lambda: read(marker) == "running", timeout=PROMPT_S), "execute never started"
    assert wait_for(lambda: read(marker) != "running", timeout=PROMPT_S), (
        "the model never saw the cancellation"
    )
    assert read(marker) == "cancelled"


# --------------------------------------------------------------------------
# Queued requests
# --------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["cancel_gate", "cancel_gate_batched"])
def test_a_request_cancelled_while_queued_is_never_executed(server, client, tmp_path, model):
    """The first request holds the model's one instance; a second one waits
    in the queue (the default scheduler's, or the dynamic batcher's) and is
    cancelled there: it never runs, it counts as a failure with reason
    CANCELED, and the execution count counts only the first."""
    batched = model.endswith("batched")
    log = tmp_path / "log"
    release = tmp_path / "release"
    before = stats(client, model)
    canceled_before = metric(server, "nv_inference_request_failure", model=model, reason="CANCELED") or 0

    first = []
    first_done = threading.Event()

    def on_first(result, error):
        first.append((result, error))
        first_done.set()

    client.async_infer(
        model,
        int_input(1, batched),
        on_first,
        request_id="first",
        parameters={"log": str(log), "release": str(release)},
    )
    assert wait_for(lambda: read(log) == "first\n", timeout=PROMPT_S), "the first request never ran"

    second = []
    ctx = client.async_infer(
        model,
        int_input(2, batched),
        lambda result, error: second.append((result, error)),
        request_id="second",
        parameters={"log": str(log)},
    )
    assert wait_for(
        lambda: metric(server, "nv_inference_pending_request_count", model=model) == 1,
        timeout=PROMPT_S,
    ), "the second request never reached the queue"
    ctx.cancel()
    assert wait_for(
        lambda: count(stats(client, model), "inference_stats", "fail")
        == count(before, "inference_stats", "fail") + 1,
        timeout=PROMPT_S,
    ), "the server did not count the cancelled request"

    release.write_text("go")
    assert first_done.wait(PROMPT_S)
    result, error = first[0]
    assert error is None, error
    assert result.as_numpy("OUT").flatten().tolist() == [1]
    assert wait_for(
        lambda: metric(server, "nv_inference_pending_request_count", model=model) == 0,
        timeout=PROMPT_S,
    )
    after = stats(client, model)
    # Give a wrongly-run second request its chance to show up.
    wait_for(lambda: read(log) != "first\n", timeout=1.0)
    assert read(log) == "first\n", "the cancelled request was executed"
    assert count(after, "execution_count") == count(before, "execution_count") + 1
    assert count(after, "inference_stats", "success") == count(before, "inference_stats", "success") + 1
    assert (
        metric(server, "nv_inference_request_failure", model=model, reason="CANCELED")
        == canceled_before + 1
    )
    assert second and second[0][1].status() == "StatusCode.CANCELLED"


# --------------------------------------------------------------------------
# A batch waiting behind a running one (the Python backend is pipelined: the
# instance hands the worker the next batch while one runs)
# --------------------------------------------------------------------------


def hold_then_queue(client, server, model, log, release, first_params, second_id="second"):
    """Sends a first request that holds the gate, then a second that waits
    behind it (pending in the server's statistics); returns both results
    as lists filled by their callbacks, with events."""
    results = {"first": [], "second": []}
    done = {"first": threading.Event(), "second": threading.Event()}

    def callback(key):
        def on(result, error):
            results[key].append((result, error))
            done[key].set()

        return on

    client.async_infer(
        model, int_input(1), callback("first"), request_id="first",
        parameters={"log": str(log), "release": str(release), **first_params},
    )
    assert wait_for(lambda: read(log) == "first\n", timeout=PROMPT_S), "the first request never ran"
    client.async_infer(
        model, int_input(2), callback("second"), request_id=second_id,
        parameters={"log": str(log)},
    )
    assert wait_for(
        lambda: metric(server, "nv_inference_pending_request_count", model=model) == 1,
        timeout=PROMPT_S,
    ), "the second request never waited"
    return results, done


def test_a_request_waiting_behind_a_running_one_runs_after_it_and_counts_its_wait_as_queue(
    server, client, tmp_path
):
    """Sent to the worker while the first runs, the second still counts as
    queued until the first ends: its wait is queue time, not compute time
    (Triton's attribution), and it runs after the first."""
    model = "cancel_gate"
    log, release = tmp_path / "log", tmp_path / "release"
    before = stats(client, model)
    started = time.monotonic()
    results, done = hold_then_queue(client, server, model, log, release, {})
    held = 2.0
    time.sleep(held)  # the second waits behind the first at least this long
    release.write_text("go")
    assert done["first"].wait(PROMPT_S) and done["second"].wait(PROMPT_S)
    elapsed = time.monotonic() - started
    for key, value in (("first", 1), ("second", 2)):
        result, error = results[key][0]
        assert error is None, error
        assert result.as_numpy("OUT").flatten().tolist() == [value]
    assert read(log) == "first\nsecond\n"
    after = stats(client, model)
    assert count(after, "execution_count") == count(before, "execution_count") + 2
    ns = lambda entry, key: int(entry["inference_stats"][key]["ns"])  # noqa: E731
    queue_s = (ns(after, "queue") - ns(before, "queue")) / 1e9
    compute_s = (ns(after, "compute_infer") - ns(before, "compute_infer")) / 1e9
    assert queue_s >= held * 0.9, f"the second's wait was not counted as queue ({queue_s:.2f} s)"
    # The first computed for at most the whole test, the second for a
    # moment; had the second's wait counted as compute, it would add `held`.
    assert compute_s < elapsed + held / 2, f"the second's wait counted as compute ({compute_s:.2f} s)"


def test_a_worker_that_dies_fails_its_batch_and_the_one_waiting_behind_runs_on_a_new_worker(
    server, client, tmp_path
):
    """The first request ends the worker process while the second waits
    (already handed to that worker): the first fails with the worker's
    exit, the second, which never began, runs on the new worker (as Triton
    runs queued requests on the restarted stub)."""
    model = "cancel_gate"
    log, release = tmp_path / "log", tmp_path / "release"
    results, done = hold_then_queue(client, server, model, log, release, {"exit": "1"})
    release.write_text("go")
    assert done["first"].wait(PROMPT_S) and done["second"].wait(PROMPT_S)
    _, error = results["first"][0]
    assert error is not None and "exited" in error.message(), error
    result, error = results["second"][0]
    assert error is None, error.message()
    assert result.as_numpy("OUT").flatten().tolist() == [2]
    assert read(log) == "first\nsecond\n"
    # And the model serves on.
    result = client.infer(model, int_input(3), parameters={"log": str(log)})
    assert result.as_numpy("OUT").flatten().tolist() == [3]
