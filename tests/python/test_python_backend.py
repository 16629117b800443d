"""The Python backend (`backend: "python"`, `model.py` with `class
TritonPythonModel`) through Triton's own clients against a real `trtis
serve`, held to what Triton 2.51 does (docs: /work/shared/reference/
python-backend-facts.md §2, §3, §4, §6, §10).

Models: the examples add_sub and square_int32, and the fixtures of
tests/fixtures/python (written for trtis, see the README there), copied into
a temporary repository. One server (explicit model control, every model
loaded) serves the working models; a second one (`--exit-on-error=false`)
holds a model whose `initialize` raises and a Python model with
`sequence_batching` and implicit state, which trtis refuses (Python models
under the sequence batcher: test_python_sequence.py).

Covered: add_sub over HTTP and gRPC; `initialize(args)` and the worker
processes; the received request (id, parameters, requested outputs, BYTES,
optional inputs); dynamic batching (a list of requests, statistics of the
formed batch); Triton's error texts for a raising or misbehaving `execute`,
per-request `TritonError` codes, a worker that exits, a client that times
out; a failing `initialize`; decoupled models over gRPC streaming (and
refused over HTTP and unary gRPC); BLS (sync, async, decoupled, errors,
statistics); `pb_utils.Logger`; `finalize` at unload; `validate-config` and
`serve` agree on a refused config.

Run: TRTIS_BIN=$PWD/target/debug/trtis .venv/bin/python -m pytest \
     tests/python/test_python_backend.py -q
"""

from __future__ import annotations

import concurrent.futures
import json
import re
import shutil
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from trtis_harness import (
    EXAMPLES,
    REPO_ROOT,
    StreamCollector,
    assert_error,
    cancel_stream,
    grpc_client_for,
    running_server,
    stop_stream_within,
    trtis_bin,
    wait_for,
)

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "python"

# Served by the main server (with the examples add_sub and square_int32).
MAIN_FIXTURES = [
    "probe",
    "faulty",
    "sleeper",
    "batcher",
    "bls_add_sub",
    "bls_async",
    "bls_decoupled",
    "decoupled_bad",
    "logger",
    "finalizer",
    "reshape_py",
]
# Served (or rather not) by the second server.
BROKEN_FIXTURES = ["init_error", "init_error_batched", "seq_python"]

INIT_ARG_KEYS = {
    "model_config",
    "model_instance_kind",
    "model_instance_name",
    "model_instance_device_id",
    "model_repository",
    "model_version",
    "model_name",
}

FAILED = "Failed to process the request(s) for model '{}', message: "

# A Triton log line (the harness prefixes "[out] " / "[err] ").
LOG_LINE = re.compile(
    r"(?P<level>[IWEV])\d{4} \d\d:\d\d:\d\d\.\d{6} +(?P<pid>\d+) "
    r"(?P<file>[^ :\]]+):(?P<line>\d+)\] (?P<message>.*)$"
)


def copy_model(source, repo) -> None:
    shutil.copytree(source, repo / source.name, ignore=shutil.ignore_patterns("__pycache__"))


def line_of(path, marker: str) -> int:
    """The 1-based number of the only line of `path` containing `marker`."""
    hits = [i for i, text in enumerate(path.read_text().splitlines(), 1) if marker in text]
    assert len(hits) == 1, f"{marker!r} is on lines {hits} of {path}"
    return hits[0]


# --------------------------------------------------------------------------
# Servers and clients
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    # Resolved: error texts and initialize's args carry absolute paths.
    repo = (tmp_path_factory.mktemp("python_backend") / "models").resolve()
    repo.mkdir(parents=True)
    for name in ("add_sub", "square_int32"):
        copy_model(EXAMPLES / name, repo)
    for name in MAIN_FIXTURES:
        copy_model(FIXTURES / name, repo)
    return repo


@pytest.fixture(scope="module")
def broken_repo(tmp_path_factory):
    repo = (tmp_path_factory.mktemp("python_backend_broken") / "models").resolve()
    repo.mkdir(parents=True)
    copy_model(EXAMPLES / "add_sub", repo)
    for name in BROKEN_FIXTURES:
        copy_model(FIXTURES / name, repo)
    return repo


@pytest.fixture(scope="module")
def server(repo):
    yield from running_server(
        repo,
        args=["--python", sys.executable, "--model-control-mode", "explicit", "--load-model", "*"],
        name="python backend server",
    )


@pytest.fixture(scope="module")
def broken_server(broken_repo):
    # Not strict readiness: the server is ready although two models failed.
    yield from running_server(
        broken_repo,
        args=["--python", sys.executable, "--exit-on-error=false", "--strict-readiness=false"],
        name="python backend server with broken models",
    )


@pytest.fixture(scope="module")
def http(server):
    c = httpclient.InferenceServerClient(server.url, network_timeout=60.0)
    yield c
    c.close()


@pytest.fixture(scope="module")
def grpc(server):
    c = grpc_client_for(server)
    yield c
    c.close()


@pytest.fixture(params=["http", "grpc"])
def both(request, http, grpc):
    return (http, httpclient) if request.param == "http" else (grpc, grpcclient)


def make_input(mod, name: str, array: np.ndarray, datatype: str):
    i = mod.InferInput(name, list(array.shape), datatype)
    i.set_data_from_numpy(array)
    return i


def infer(client, mod, model, arrays, outputs=None, **kw):
    """`arrays`: name -> (numpy array, datatype)."""
    inputs = [make_input(mod, name, arr, dt) for name, (arr, dt) in arrays.items()]
    outs = [mod.InferRequestedOutput(o) for o in outputs] if outputs else None
    return client.infer(model, inputs, outputs=outs, **kw)


def infer_error(client, mod, model, arrays, http_status: int, grpc_code: str, **kw) -> str:
    """Runs an inference that must fail; checks the HTTP status or gRPC code
    and returns the error message."""
    with pytest.raises(InferenceServerException) as e:
        infer(client, mod, model, arrays, **kw)
    exc = e.value
    if mod is httpclient:
        assert exc.status() == str(http_status), (
            f"expected HTTP {http_status}, got {exc.status()}: {exc.message()!r}"
        )
    else:
        assert exc.status() == f"StatusCode.{grpc_code}", (
            f"expected gRPC {grpc_code}, got {exc.status()}: {exc.message()!r}"
        )
    return exc.message()


def output_names(result, mod) -> list[str]:
    if mod is httpclient:
        return [o["name"] for o in result.get_response()["outputs"]]
    return [o.name for o in result.get_response().outputs]


def mode(value: str):
    return {"MODE": (np.array([value], dtype=np.object_), "BYTES")}


def add_sub_arrays():
    a = np.array([1.5, 2.25, -3.0, 1e7], dtype=np.float32)
    b = np.array([0.5, 0.125, 4.0, 1.0], dtype=np.float32)
    return a, b


def stats_of(http, model: str) -> dict:
    return http.get_inference_statistics(model)["model_stats"][0]


def index_entry(server, name: str) -> dict:
    status, _, body = server.post_json("/v2/repository/index", {})
    assert status == 200, body
    entries = [e for e in json.loads(body) if e.get("name") == name]
    assert len(entries) == 1, f"{name} in the repository index: {entries}"
    return entries[0]


# --------------------------------------------------------------------------
# 1. add_sub
# --------------------------------------------------------------------------


def test_add_sub_values_are_exact(both):
    client, mod = both
    a, b = add_sub_arrays()
    r = infer(client, mod, "add_sub", {"INPUT0": (a, "FP32"), "INPUT1": (b, "FP32")})
    sum_, diff = r.as_numpy("OUTPUT0"), r.as_numpy("OUTPUT1")
    assert sum_.dtype == np.float32 and diff.dtype == np.float32
    np.testing.assert_array_equal(sum_, a + b)
    np.testing.assert_array_equal(diff, a - b)


def test_add_sub_metadata_and_config_say_python(both):
    client, mod = both
    if mod is httpclient:
        meta = client.get_model_metadata("add_sub")
        config = client.get_model_config("add_sub")
    else:
        meta = client.get_model_metadata("add_sub", as_json=True)
        config = client.get_model_config("add_sub", as_json=True)["config"]
    # Triton's metadata names the backend when the config has no platform.
    assert meta["platform"] == "python", meta
    assert meta["versions"] == ["1"], meta
    assert [(t["name"], t["datatype"], [int(d) for d in t["shape"]]) for t in meta["inputs"]] == [
        ("INPUT0", "FP32", [4]),
        ("INPUT1", "FP32", [4]),
    ]
    assert [t["name"] for t in meta["outputs"]] == ["OUTPUT0", "OUTPUT1"]
    assert config["backend"] == "python", config
    assert config.get("platform", "") == "", config
    assert config["default_model_filename"] == "model.py", config
    group = config["instance_group"][0]
    assert group["kind"] == "KIND_CPU" and int(group["count"]) == 1, group


# --------------------------------------------------------------------------
# 2. initialize(args) and the worker processes
# --------------------------------------------------------------------------


def probe_infos(server, rounds: int = 4, per_round: int = 4) -> dict:
    """INFO of concurrent probe requests that each make the model sleep
    0.3 s, until both instances answered: {instance name: INFO}."""
    seen: dict = {}
    errors: list = []

    def one():
        c = httpclient.InferenceServerClient(server.url, network_timeout=60.0)
        try:
            r = infer(
                c,
                httpclient,
                "probe",
                {"IN": (np.array(["x"], dtype=np.object_), "BYTES")},
                parameters={"sleep_ms": 300},
            )
            info = json.loads(r.as_numpy("INFO")[0])
            seen[info["args"]["model_instance_name"]] = info
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
        finally:
            c.close()

    for _ in range(rounds):
        threads = [threading.Thread(target=one) for _ in range(per_round)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        if len(seen) >= 2:
            break
    return seen


def test_initialize_gets_triton_args_in_one_process_per_instance(server, repo):
    infos = probe_infos(server)
    assert set(infos) == {"probe_0_0", "probe_0_1"}, (
        f"{rounds_note()}: instances that answered: {sorted(infos)}"
    )
    status, _, body = server.request("GET", "/v2/models/probe/config")
    assert status == 200, body
    served_config = json.loads(body)
    for name, info in infos.items():
        args = info["args"]
        assert info["args_type"] == "dict"
        assert set(args) == INIT_ARG_KEYS, sorted(args)
        assert set(info["arg_types"].values()) == {"str"}, info["arg_types"]
        assert args["model_instance_name"] == name
        assert args["model_instance_kind"] == "CPU"
        assert args["model_instance_device_id"] == "0"
        assert args["model_repository"] == str(repo / "probe")
        assert args["model_version"] == "1"
        assert args["model_name"] == "probe"
        config = json.loads(args["model_config"])
        assert config == served_config
        assert config["parameters"]["probe_param"]["string_value"] == "pv"
        assert config["instance_group"][0]["name"] == "probe_0"
        assert config["instance_group"][0]["count"] == 2
        # The process: the version dir, a sibling module, the module name.
        assert info["model_dir"] == str(repo / "probe" / "1")
        assert info["helper"] == "hello from probe_helper"
        assert info["helper_file"] == str(repo / "probe" / "1" / "probe_helper.py")
        assert info["module"] == "1.model"
        assert info["sys_path_tail"][:2] == [str(repo / "probe" / "1"), str(repo / "probe")]
        assert info["ppid"] == server.proc.pid, "the worker is not the server's child"
    pids = {info["pid"] for info in infos.values()}
    assert len(pids) == 2, f"both instances run in one process: {pids}"
    assert server.proc.pid not in pids


def rounds_note() -> str:
    return "4 rounds of 4 concurrent requests (each 0.3 s in execute) to a 2-instance model"


# --------------------------------------------------------------------------
# 3. The received request
# --------------------------------------------------------------------------

CUSTOM_PARAMETERS = {"p_str": "v", "p_int": 3, "p_bool": True}


def test_the_request_as_the_model_sees_it(both):
    client, mod = both
    words = np.array(["info", "é"], dtype=np.object_)
    # priority and timeout are Triton's own parameters: they configure the
    # request and do not reach the model's parameters().
    r = infer(
        client,
        mod,
        "probe",
        {"IN": (words, "BYTES")},
        request_id="req-7",
        parameters=CUSTOM_PARAMETERS,
        priority=1,
        timeout=10_000_000,
    )
    info = json.loads(r.as_numpy("INFO")[0])
    assert info["request_id"] == "req-7"
    assert info["correlation_id"] == 0
    assert info["flags"] == 0
    assert info["parameters_type"] == "str"
    assert json.loads(info["parameters"]) == CUSTOM_PARAMETERS, info["parameters"]
    if mod is httpclient:
        # Triton passes the JSON object on as compact JSON, in order.
        assert info["parameters"] == '{"p_str":"v","p_int":3,"p_bool":true}'
    # No outputs named: the model is asked for all of them, as a set.
    assert info["requested_type"] == "set"
    assert info["requested"] == ["CALLS", "ECHO", "INFO"]
    assert sorted(output_names(r, mod)) == ["CALLS", "ECHO", "INFO"]
    # BYTES arrive as an object array of bytes.
    assert info["input_names"] == ["IN"]
    assert info["in_dtype"] == "object"
    assert info["in_item_types"] == ["bytes", "bytes"]
    assert info["in_hex"] == [b"info".hex(), "é".encode("utf-8").hex()]
    assert info["in_shape"] == [2] and info["in_shape_method"] == [2]
    assert info["in_is_cpu"] is True
    # The omitted optional input.
    assert info["opt_is_none"] is True
    assert info["batch"] == 1
    assert r.as_numpy("ECHO").tolist() == [b"info", "é".encode("utf-8")]


def test_a_request_without_parameters_gives_an_empty_json_object(both):
    client, mod = both
    r = infer(client, mod, "probe", {"IN": (np.array([b"a"], dtype=np.object_), "BYTES")})
    info = json.loads(r.as_numpy("INFO")[0])
    assert info["parameters"] == "{}"
    assert info["request_id"] == ""


def test_only_the_requested_outputs_are_asked_for_and_sent(both):
    client, mod = both
    r = infer(
        client,
        mod,
        "probe",
        {
            "IN": (np.array([b"one"], dtype=np.object_), "BYTES"),
            "OPT": (np.array([5, 6], dtype=np.int32), "INT32"),
        },
        outputs=["INFO"],
    )
    info = json.loads(r.as_numpy("INFO")[0])
    assert info["requested_type"] == "set"
    assert info["requested"] == ["INFO"]
    assert info["input_names"] == ["IN", "OPT"]
    assert info["opt_is_none"] is False and info["opt"] == [5, 6]
    # The model returned ECHO and CALLS too: left out.
    assert output_names(r, mod) == ["INFO"]


def test_reserved_http_parameters_do_not_reach_the_model(server):
    body = {
        "id": "raw-1",
        "parameters": {"p_str": "v", "priority": 1, "timeout": 10000000},
        "inputs": [{"name": "IN", "datatype": "BYTES", "shape": [1], "data": ["raw"]}],
    }
    status, _, data = server.post_json("/v2/models/probe/infer", body)
    assert status == 200, data
    doc = json.loads(data)
    assert doc["id"] == "raw-1"
    info_out = [o for o in doc["outputs"] if o["name"] == "INFO"]
    info = json.loads(info_out[0]["data"][0])
    assert json.loads(info["parameters"]) == {"p_str": "v"}, info["parameters"]


# --------------------------------------------------------------------------
# 4. Dynamic batching
# --------------------------------------------------------------------------


def settled_stats(http, model: str, before: dict, executions: int) -> dict:
    """The model's statistics once `executions` more executions are counted
    (the counters of a request are recorded around the time its response
    leaves, so a snapshot taken right after may not have all of them yet)."""
    def current():
        stats = stats_of(http, model)
        done = stats["execution_count"] - before["execution_count"] >= executions
        return stats if done else None

    return wait_for(current, timeout=5.0) or stats_of(http, model)


def test_dynamic_batching_hands_execute_a_list_of_requests(server, http):
    before = stats_of(http, "batcher")
    barrier = threading.Barrier(4)
    results: dict = {}
    errors: list = []

    def one(k):
        # tritonclient.http clients are gevent-based: one per thread, and
        # connected before the requests race.
        c = httpclient.InferenceServerClient(server.url, network_timeout=60.0)
        x = np.array([[k, k + 0.5], [-k, 0.25]], dtype=np.float32)
        try:
            assert c.is_server_live()
            barrier.wait(timeout=30)
            r = infer(c, httpclient, "batcher", {"X": (x, "FP32")})
            results[k] = (x, r.as_numpy("Y"), r.as_numpy("N"))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
        finally:
            c.close()

    threads = [threading.Thread(target=one, args=(k,)) for k in range(1, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert sorted(results) == [1, 2, 3, 4]
    for k, (x, y, n) in results.items():
        np.testing.assert_array_equal(y, x * 2)
        # Each request kept its own [2, 2] input and got its own answer,
        # from one execute call holding all four requests.
        assert n.tolist() == [[4], [4]], f"request {k}: execute got {n.tolist()} requests"
    after = settled_stats(http, "batcher", before, 1)
    assert after["execution_count"] - before["execution_count"] == 1, after
    assert after["inference_count"] - before["inference_count"] == 8, after
    assert (
        after["inference_stats"]["success"]["count"] - before["inference_stats"]["success"]["count"]
        == 4
    ), after["inference_stats"]

    def batch_count(stats, size):
        return sum(
            b["compute_infer"]["count"] for b in stats.get("batch_stats", []) if b["batch_size"] == size
        )

    assert batch_count(after, 8) - batch_count(before, 8) == 1, after.get("batch_stats")


# --------------------------------------------------------------------------
# 5. Errors
# --------------------------------------------------------------------------


def faulty_file(repo):
    return repo / "faulty" / "1" / "model.py"


def test_execute_raising_fails_with_triton_text_and_traceback(both, repo):
    client, mod = both
    path = faulty_file(repo)
    msg = infer_error(client, mod, "faulty", mode("raise"), 500, "INTERNAL")
    line = line_of(path, "marker: execute raise")
    pattern = (
        re.escape(FAILED.format("faulty_0_0") + "ValueError: boom from faulty\n\nAt:\n  ")
        + re.escape(str(path))
        + r"\((\d+)\): execute\n"
    )
    m = re.fullmatch(pattern, msg)
    assert m, f"message {msg!r} does not match {pattern!r}"
    assert int(m.group(1)) == line, msg


def test_the_traceback_lists_every_frame_innermost_first(both, repo):
    client, mod = both
    path = faulty_file(repo)
    msg = infer_error(client, mod, "faulty", mode("nested"), 500, "INTERNAL")
    assert msg == (
        FAILED.format("faulty_0_0")
        + "KeyError: 'deep'\n\nAt:\n"
        + f"  {path}({line_of(path, 'marker: nested raise')}): nested_failure\n"
        + f"  {path}({line_of(path, 'marker: nested call')}): execute\n"
    )


def test_triton_model_exception_is_reported_by_its_type_name(both, repo):
    client, mod = both
    path = faulty_file(repo)
    msg = infer_error(client, mod, "faulty", mode("exception"), 500, "INTERNAL")
    assert msg == (
        FAILED.format("faulty_0_0")
        + "TritonModelException: tme\n\nAt:\n"
        + f"  {path}({line_of(path, 'marker: tme raise')}): execute\n"
    )


@pytest.mark.parametrize(
    "how, text",
    [
        (
            "short",
            "Number of InferenceResponse objects do not match the number of InferenceRequest "
            "objects. InferenceRequest(s) size is:1, and InferenceResponse(s) size is:0\n",
        ),
        ("tuple", "Expected a list in the execute return, found type '<class 'tuple'>'."),
        (
            "bad_entry",
            "Expected an 'InferenceResponse' object in the execute function return list, "
            "found type '<class 'str'>'.",
        ),
    ],
)
def test_a_wrong_execute_return_fails_with_triton_text(both, how, text):
    client, mod = both
    msg = infer_error(client, mod, "faulty", mode(how), 500, "INTERNAL")
    assert msg == FAILED.format("faulty_0_0") + text


@pytest.mark.parametrize(
    "how, status, code, text",
    [
        ("not_found", 404, "NOT_FOUND", "nf"),
        ("internal", 500, "INTERNAL", "x"),
        ("invalid", 400, "INVALID_ARGUMENT", "bad argument"),
        ("unavailable", 503, "UNAVAILABLE", "later"),
    ],
)
def test_a_triton_error_response_keeps_its_code_and_message(both, how, status, code, text):
    client, mod = both
    msg = infer_error(client, mod, "faulty", mode(how), status, code)
    assert msg == text


def test_statistics_count_error_answers_as_successes_and_raising_executes_as_failures(http):
    # Measured on Triton 2.51 (faulty, one request at a time): a response
    # carrying a TritonError counts as a success (inference and execution
    # counted); an execute that raises counts a failure, and its execution,
    # but no inference.
    def counts():
        s = stats_of(http, "faulty")
        i = s["inference_stats"]
        return (i["success"]["count"], i["fail"]["count"], s["execution_count"], s["inference_count"])

    def settled(since, executions):
        # The execution is counted as the instance finishes, which may be
        # just after the client has its answer.
        wait_for(lambda: counts()[2] - since[2] >= executions, timeout=10)
        return counts()

    def quiet():
        # Earlier tests' executions of faulty may still be being counted.
        last = counts()
        while True:
            time.sleep(0.3)
            now = counts()
            if now == last:
                return now
            last = now

    before = quiet()
    infer_error(http, httpclient, "faulty", mode("not_found"), 404, "NOT_FOUND")
    after_answer = settled(before, 1)
    assert [a - b for a, b in zip(after_answer, before)] == [1, 0, 1, 1], (before, after_answer)
    infer_error(http, httpclient, "faulty", mode("raise"), 500, "INTERNAL")
    after_raise = settled(after_answer, 1)
    assert [a - b for a, b in zip(after_raise, after_answer)] == [0, 1, 1, 0], (after_answer, after_raise)


def test_a_none_return_without_the_sender_is_an_error_not_a_hang(server, grpc):
    # Triton never answers such a request; trtis answers INTERNAL at once.
    body = {"inputs": [{"name": "MODE", "datatype": "BYTES", "shape": [1], "data": ["none"]}]}
    try:
        response = server.request(
            "POST",
            "/v2/models/faulty/infer",
            json.dumps(body),
            {"Content-Type": "application/json"},
            timeout=20.0,
        )
    except socket.timeout:
        pytest.fail("no answer within 20 s to a request the model returned None for")
    msg = assert_error(response, 500, "faulty_0_0")
    assert "response sender" in msg, msg
    with pytest.raises(InferenceServerException) as e:
        infer(grpc, grpcclient, "faulty", mode("none"), client_timeout=20.0)
    assert e.value.status() == "StatusCode.INTERNAL", (e.value.status(), e.value.message())


def test_a_worker_that_exits_fails_its_request_and_is_restarted(server, http):
    first = infer(http, httpclient, "faulty", mode("ok")).as_numpy("OUT")[0]
    msg = infer_error(http, httpclient, "faulty", mode("exit"), 500, "INTERNAL")
    assert "exited" in msg and "faulty_0_0" in msg, msg
    assert server.alive()
    assert http.is_server_live()
    second = infer(http, httpclient, "faulty", mode("ok")).as_numpy("OUT")[0]
    assert second != first, "the same worker process answered after it exited"
    assert http.is_model_ready("faulty")


def test_a_worker_that_forks_then_exits_still_fails_its_request(server, http):
    """The worker dies but a process it forked keeps its end of the socket
    open: the server watches the process too, so the request fails (no hang),
    the forked process is killed with the worker's process group, and the
    next request gets a new worker."""
    first = infer(http, httpclient, "faulty", mode("ok")).as_numpy("OUT")[0]
    msg = infer_error(http, httpclient, "faulty", mode("fork_exit"), 500, "INTERNAL")
    assert "exited" in msg and "faulty_0_0" in msg, msg
    second = infer(http, httpclient, "faulty", mode("ok")).as_numpy("OUT")[0]
    assert second != first, "the same worker process answered after it exited"


def test_a_client_timeout_leaves_the_server_serving(server, http, grpc):
    x = {"IN": (np.array([1], dtype=np.int32), "INT32")}
    with pytest.raises(InferenceServerException) as e:
        infer(grpc, grpcclient, "sleeper", x, client_timeout=1.0)
    assert e.value.status() == "StatusCode.DEADLINE_EXCEEDED", (
        f"{e.value.status()}: {e.value.message()!r} (Triton: the client's own DEADLINE_EXCEEDED; "
        "see test_expired_grpc_deadlines_are_deadline_exceeded)"
    )
    assert server.is_ready()
    assert http.is_server_live() and http.is_server_ready()
    a, b = add_sub_arrays()
    for client, mod in ((http, httpclient), (grpc, grpcclient)):
        r = infer(client, mod, "add_sub", {"INPUT0": (a, "FP32"), "INPUT1": (b, "FP32")})
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
    assert http.is_model_ready("sleeper")


def test_expired_grpc_deadlines_are_deadline_exceeded(server, grpc):
    """24 concurrent requests, each making probe sleep 0.25 s, with a 0.15 s
    deadline: every client sees DEADLINE_EXCEEDED, as with Triton (gRPC
    core). A server that answers an expired `grpc-timeout` itself with
    another status (tonic's CANCELLED "Timeout expired") races the client's
    own deadline and loses some of these."""
    seen: list = []
    lock = threading.Lock()

    def one():
        try:
            infer(
                grpc,
                grpcclient,
                "probe",
                {"IN": (np.array([b"late"], dtype=np.object_), "BYTES")},
                parameters={"sleep_ms": 250},
                client_timeout=0.15,
            )
            got = ("answered", "")
        except InferenceServerException as e:
            got = (e.status(), e.message())
        with lock:
            seen.append(got)

    threads = [threading.Thread(target=one) for _ in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wrong = [got for got in seen if got[0] != "StatusCode.DEADLINE_EXCEEDED"]
    assert not wrong, f"{len(wrong)} of {len(seen)} not DEADLINE_EXCEEDED: {sorted(set(wrong))}"
    assert server.is_ready()


# --------------------------------------------------------------------------
# 6. initialize raises
# --------------------------------------------------------------------------


def test_initialize_raising_fails_the_load_with_the_python_error(broken_server, broken_repo):
    c = httpclient.InferenceServerClient(broken_server.url, network_timeout=60.0)
    try:
        assert not c.is_model_ready("init_error")
        entry = index_entry(broken_server, "init_error")
        assert entry["state"] == "UNAVAILABLE", entry
        path = broken_repo / "init_error" / "1" / "model.py"
        line = line_of(path, "marker: init error")
        expected = (
            "NameError: name 'lorem_ipsum_undefined' is not defined\n\nAt:\n"
            f"  {path}({line}): initialize\n"
        )
        assert expected in entry.get("reason", ""), entry
        response = broken_server.post_json(
            "/v2/models/init_error/infer",
            {"inputs": [{"name": "IN", "datatype": "INT32", "shape": [1], "data": [1]}]},
        )
        assert_error(response, 404, "init_error")
        # The other models serve.
        a, b = add_sub_arrays()
        r = infer(c, httpclient, "add_sub", {"INPUT0": (a, "FP32"), "INPUT1": (b, "FP32")})
        np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)
    finally:
        c.close()


def test_one_instance_failing_fails_a_batched_model_and_the_server_serves(
    broken_server, broken_repo
):
    """Behind the dynamic batcher the instances take their batches from it;
    the first instance is already waiting for one when the second one's
    initialize raises: the load fails with that error (it does not hang
    on the waiting instance) and the server serves the other models."""
    entry = index_entry(broken_server, "init_error_batched")
    assert entry["state"] == "UNAVAILABLE", entry
    assert "RuntimeError: the second instance does not start" in entry.get("reason", ""), entry
    c = httpclient.InferenceServerClient(broken_server.url, network_timeout=60.0)
    try:
        assert not c.is_model_ready("init_error_batched")
        a, b = add_sub_arrays()
        r = infer(c, httpclient, "add_sub", {"INPUT0": (a, "FP32"), "INPUT1": (b, "FP32")})
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
    finally:
        c.close()


# --------------------------------------------------------------------------
# 7. Decoupled models
# --------------------------------------------------------------------------


def square_input(n: int):
    return [make_input(grpcclient, "IN", np.array([n], dtype=np.int32), "INT32")]


def test_decoupled_square_streams_n_responses_and_no_empty_ones(server):
    client = grpc_client_for(server)
    collector = StreamCollector()
    square_stream(client, collector, 7)
    counts: dict = {}
    for result, _ in collector.items:
        response = result.get_response()
        assert len(response.outputs) == 1, f"a response without OUT: {response}"
        counts[response.id] = counts.get(response.id, 0) + 1
        n = int(response.id[1:])
        assert result.as_numpy("OUT").tolist() == [n], response
    assert counts == {"r4": 4, "r2": 2, "r1": 1}, counts
    assert len(collector.items) == 7


def square_stream(client, collector, expected, **kw):
    """Streams IN = 4, 2, 0, 1 to square_int32 (request ids r4, r2, r0, r1),
    waits for `expected` answers, closes the stream and checks none was an
    error."""
    try:
        client.start_stream(callback=collector)
        for n in (4, 2, 0, 1):
            client.async_stream_infer("square_int32", square_input(n), request_id=f"r{n}", **kw)
        collector.wait_for(expected)
        # Half-close: the server ends the stream once every request is done,
        # so every response it sent has arrived.
        stop_stream_within(client)
    finally:
        cancel_stream(client)
        client.close()
    errors = [err for _, err in collector.items if err is not None]
    assert not errors, [e.message() for e in errors]


def test_decoupled_square_with_empty_final_responses(server):
    client = grpc_client_for(server)
    collector = StreamCollector()
    square_stream(client, collector, 11, enable_empty_final_response=True)
    per_id: dict = {}
    for result, _ in collector.items:
        response = result.get_response()
        final = response.parameters["triton_final_response"].bool_param
        per_id.setdefault(response.id, []).append((final, len(response.outputs)))
    for n in (4, 2, 0, 1):
        got = per_id.get(f"r{n}")
        # n responses with OUT, not final, then one empty final response.
        assert got == [(False, 1)] * n + [(True, 0)], (n, got)
    assert len(collector.items) == 11


def test_decoupled_models_refuse_http_and_unary_grpc(server, grpc):
    response = server.post_json(
        "/v2/models/square_int32/infer",
        {"inputs": [{"name": "IN", "datatype": "INT32", "shape": [1], "data": [2]}]},
    )
    msg = assert_error(response, 501)
    assert msg == "HTTP end point doesn't support models with decoupled transaction policy"
    with pytest.raises(InferenceServerException) as e:
        grpc.infer("square_int32", square_input(2))
    assert e.value.status() == "StatusCode.UNIMPLEMENTED", e.value.message()
    assert e.value.message() == (
        "ModelInfer RPC doesn't support models with decoupled transaction policy"
    )


def test_a_decoupled_execute_returning_a_list_is_a_stream_error(server):
    client = grpc_client_for(server)
    collector = StreamCollector()
    try:
        client.start_stream(callback=collector)
        client.async_stream_infer("decoupled_bad", square_input(3), request_id="bad")
        collector.wait_for(1)
        stop_stream_within(client)
    finally:
        cancel_stream(client)
        client.close()
    assert len(collector.items) == 1, collector.items
    result, error = collector.items[0]
    assert result is None and error is not None, collector.items
    assert error.message() == (
        FAILED.format("decoupled_bad_0_0")
        + "Python model 'decoupled_bad_0_0' is using the decoupled mode and the execute "
        "function must return None."
    )


# --------------------------------------------------------------------------
# 8. BLS
# --------------------------------------------------------------------------


def test_bls_exec_runs_add_sub(both):
    client, mod = both
    a, b = add_sub_arrays()
    r = infer(client, mod, "bls_add_sub", {"INPUT0": (a, "FP32"), "INPUT1": (b, "FP32")})
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)


def test_bls_async_exec_under_asyncio_gather(both):
    client, mod = both
    a, b = add_sub_arrays()
    r = infer(client, mod, "bls_async", {"INPUT0": (a, "FP32"), "INPUT1": (b, "FP32")})
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), b - a)


def test_bls_to_a_missing_model_comes_back_as_an_error_response(both, repo):
    client, mod = both
    a, b = add_sub_arrays()
    msg = infer_error(
        client,
        mod,
        "bls_add_sub",
        {
            "INPUT0": (a, "FP32"),
            "INPUT1": (b, "FP32"),
            "MODEL_NAME": (np.array([b"undefined_model"], dtype=np.object_), "BYTES"),
        },
        500,
        "INTERNAL",
    )
    assert "Model undefined_model - Error when running inference: " in msg, msg
    path = repo / "bls_add_sub" / "1" / "model.py"
    assert msg == (
        FAILED.format("bls_add_sub_0_0")
        + "TritonModelException: Model undefined_model - Error when running inference: "
        "Failed for execute the inference request. Model 'undefined_model' is not ready.\n\nAt:\n"
        + f"  {path}({line_of(path, 'marker: bls raise')}): execute\n"
    )


@pytest.mark.parametrize("n", [4, 0, 3])
def test_bls_into_a_decoupled_model_iterates_its_responses(http, n):
    r = infer(http, httpclient, "bls_decoupled", {"IN": (np.array([n], dtype=np.int32), "INT32")})
    assert r.as_numpy("SUM").tolist() == [n * n]
    assert r.as_numpy("COUNT").tolist() == [n]


def test_bls_calls_count_in_the_called_models_statistics(http):
    before = stats_of(http, "add_sub")
    a, b = add_sub_arrays()
    arrays = {"INPUT0": (a, "FP32"), "INPUT1": (b, "FP32")}
    infer(http, httpclient, "bls_add_sub", arrays)  # one BLS call
    infer(http, httpclient, "bls_async", arrays)  # two BLS calls
    after = settled_stats(http, "add_sub", before, 3)
    success = after["inference_stats"]["success"]["count"] - before["inference_stats"]["success"]["count"]
    assert success == 3, after["inference_stats"]
    assert after["inference_count"] - before["inference_count"] == 3, after
    assert after["execution_count"] - before["execution_count"] == 3, after


# --------------------------------------------------------------------------
# 9. Logger
# --------------------------------------------------------------------------


def find_log(server, message: str):
    """The parsed log line whose message is `message` (quoted or not)."""
    for text in server.log_lines():
        m = LOG_LINE.search(text)
        if m and m.group("message").strip('"') == message:
            return m
    return None


def test_logger_lines_reach_the_server_log_at_the_callers_line(server, http, repo):
    infer(http, httpclient, "logger", {"IN": (np.array([1], dtype=np.int32), "INT32")})
    last = "logger model: log() at INFO"
    assert wait_for(lambda: find_log(server, last)), f"no {last!r} line\n{server.log_tail()}"
    path = repo / "logger" / "1" / "model.py"
    for level, message, marker in [
        ("I", "logger model: info line", "log_info("),
        ("W", "logger model: warning line", "log_warn("),
        ("E", "logger model: error line", "log_error("),
        ("I", last, "Logger.log("),
    ]:
        m = find_log(server, message)
        assert m, f"no {message!r} line\n{server.log_tail()}"
        assert m.group("level") == level, m.group(0)
        assert m.group("file") == "model.py", m.group(0)
        assert int(m.group("line")) == line_of(path, marker), m.group(0)
        assert int(m.group("pid")) == server.proc.pid, m.group(0)
    # Verbose only with --log-verbose.
    assert not any("logger model: verbose line" in text for text in server.log_lines())


# --------------------------------------------------------------------------
# 10. finalize at unload
# --------------------------------------------------------------------------


def test_finalize_runs_when_the_model_is_unloaded(server, http, repo):
    x = {"IN": (np.array([5], dtype=np.int32), "INT32")}
    assert infer(http, httpclient, "finalizer", x).as_numpy("OUT").tolist() == [5]
    message = "finalizer: finalize ran in finalizer_0_0"
    assert not find_log(server, message)
    http.unload_model("finalizer")
    m = wait_for(lambda: find_log(server, message))
    assert m, f"no {message!r} line after unloading\n{server.log_tail()}"
    path = repo / "finalizer" / "1" / "model.py"
    assert int(m.group("line")) == line_of(path, "log_info("), m.group(0)
    assert wait_for(lambda: not http.is_model_ready("finalizer"))
    # Loaded again: a new worker serves.
    http.load_model("finalizer")
    assert infer(http, httpclient, "finalizer", x).as_numpy("OUT").tolist() == [5]


# --------------------------------------------------------------------------
# 11. validate-config and serve agree
# --------------------------------------------------------------------------


def validate(*paths) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(trtis_bin()), "validate-config", *map(str, paths)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_implicit_state_python_model_is_refused_by_validate_config_and_serve(
    broken_server, broken_repo
):
    out = validate(broken_repo / "seq_python")
    text = out.stdout + out.stderr
    assert out.returncode != 0, text
    m = re.search(r"error: sequence_batching\.state: (.+)", text)
    assert m, text
    entry = index_entry(broken_server, "seq_python")
    assert entry["state"] == "UNAVAILABLE", entry
    # serve gives the reason validate-config gave.
    assert m.group(1).strip() in entry.get("reason", ""), (entry, text)
    status, _, _ = broken_server.request("GET", "/v2/models/seq_python/ready")
    assert status != 200


def test_validate_config_accepts_the_python_models_serve_loaded(server, repo, http):
    for name in ["add_sub", "square_int32", *MAIN_FIXTURES]:
        if name != "finalizer":  # reloaded by its own test
            assert http.is_model_ready(name), name
    out = validate(repo)
    assert out.returncode == 0, out.stdout + out.stderr


# --------------------------------------------------------------------------
# reshape
# --------------------------------------------------------------------------


def test_reshape_gives_the_model_its_shapes_and_clients_theirs(both):
    client, mod = both
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    s = np.array([[1], [2]], dtype=np.int32)
    result = infer(client, mod, "reshape_py", {"X": (x, "FP32"), "S": (s, "INT32")})
    assert result.as_numpy("Y").shape == (2, 4)
    np.testing.assert_array_equal(result.as_numpy("Y"), 2 * x)
    # The model saw X as [batch, 2, 2] and S as [batch] (rank 1).
    np.testing.assert_array_equal(result.as_numpy("SEEN"), [[2, 2, 2, 1]] * 2)


def test_reshape_applies_to_each_request_of_a_dynamic_batch(server, grpc):
    # One gRPC client from three threads (tritonclient.grpc is thread-safe).
    def one(k):
        x = np.full((1, 4), k, dtype=np.float32)
        s = np.array([[k]], dtype=np.int32)
        result = infer(grpc, grpcclient, "reshape_py", {"X": (x, "FP32"), "S": (s, "INT32")})
        return result.as_numpy("Y"), result.as_numpy("SEEN")

    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        results = list(pool.map(one, range(3)))
    for k, (y, seen) in enumerate(results):
        np.testing.assert_array_equal(y, np.full((1, 4), 2 * k, dtype=np.float32))
        np.testing.assert_array_equal(seen, [[1, 2, 2, 1]])


def test_a_kind_gpu_instance_is_told_its_gpu(tmp_path):
    # On a machine with GPUs (simulated: TRTIS_GPU_COUNT=2), a Python model
    # without an instance group gets KIND_GPU, one instance per GPU (as in
    # Triton), and each initialize() is told its kind and device; the model
    # does its own GPU work. Tensors still cross in host memory.
    repo = (tmp_path / "models").resolve()
    repo.mkdir()
    copy_model(FIXTURES / "probe", repo)
    config = repo / "probe" / "config.pbtxt"
    config.write_text(config.read_text().replace("instance_group [ { count: 2 kind: KIND_CPU } ]\n", ""))
    for server in running_server(
        repo, args=["--python", sys.executable], name="two-GPU server", env={"TRTIS_GPU_COUNT": "2"}
    ):
        status, _, body = server.request("GET", "/v2/models/probe/config")
        assert status == 200, body
        group = json.loads(body)["instance_group"][0]
        assert (group["kind"], group["gpus"], group["count"]) == ("KIND_GPU", [0, 1], 1), group
        seen = {}
        for _ in range(8):
            threads, infos = [], []

            def one():
                c = httpclient.InferenceServerClient(server.url, network_timeout=60.0)
                try:
                    r = infer(c, httpclient, "probe", {"IN": (np.array(["x"], dtype=np.object_), "BYTES")},
                              parameters={"sleep_ms": 200})
                    infos.append(json.loads(r.as_numpy("INFO")[0]))
                finally:
                    c.close()

            threads = [threading.Thread(target=one) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            for info in infos:
                a = info["args"]
                seen[a["model_instance_device_id"]] = (a["model_instance_name"], a["model_instance_kind"], info["pid"])
            if len(seen) == 2:
                break
        assert sorted(seen) == ["0", "1"], seen
        assert {(name, kind) for name, kind, _ in seen.values()} == {("probe_0", "GPU")}, seen
        assert len({pid for _, _, pid in seen.values()}) == 2, seen
