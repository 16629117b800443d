"""Python models under the sequence batcher, through Triton's own clients
against a real `trtis serve` (python-backend-facts.md §3: a received
request's `correlation_id()` and `flags()`, SEQUENCE_START = 1,
SEQUENCE_END = 2).

As in Triton, each request of a batch reaches `execute` as its own request
of the list, with its correlation id, its flags and the configured control
inputs (START, END, READY, CORRID) as extra inputs of shape [1, 1]; a
`direct` batch with an empty slot below a ready one carries Triton's null
request there (READY 0, correlation id 0, flags 0).

The model is tests/fixtures/python/seq_accumulator (direct, CORRID UINT64):
a running sum per correlation id that the model keeps itself; INFO reports
what `execute` saw. A copy with the `oldest` strategy and a TYPE_STRING
CORRID (`seq_accumulator_oldest`) runs the same flows with string ids, and
a decoupled copy (`seq_accumulator_decoupled`, gRPC streaming) answers
through its response senders.
Implicit state on a Python model stays refused (test_python_backend.py
holds `validate-config` and `serve` to the same reason).

Every test uses sequence ids of its own and ends its sequences.

Run: TRTIS_BIN=$PWD/target/debug/trtis .venv/bin/python -m pytest \
     tests/python/test_python_sequence.py -q
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from trtis_harness import (
    REPO_ROOT,
    StreamCollector,
    cancel_stream,
    grpc_client_for,
    running_server,
    stop_stream_within,
    trtis_bin,
)

FIXTURE = REPO_ROOT / "tests" / "fixtures" / "python" / "seq_accumulator"
DIRECT = "seq_accumulator"
OLDEST = "seq_accumulator_oldest"
DECOUPLED = "seq_accumulator_decoupled"
MODES = ["http", "grpc", "grpc_stream"]
CLIENT_TIMEOUT_S = 30.0
CONTROL_NAMES = ["CORRID", "END", "INPUT", "READY", "START"]

# The values of Triton's example sequence clients, and a second sequence.
VALUES_A = [11, 7, 5, 3, 2, 0, 1]
VALUES_B = [-11, -7, -5, -3, -2, 0, -1]


def oldest_config(text: str) -> str:
    """The fixture's config as `seq_accumulator_oldest`: the oldest
    strategy and a string CORRID."""
    text = text.replace(f'name: "{DIRECT}"', f'name: "{OLDEST}"')
    text = text.replace("direct { }", "oldest { max_candidate_sequences: 4 max_queue_delay_microseconds: 2000 }")
    text = text.replace("data_type: TYPE_UINT64", "data_type: TYPE_STRING")
    assert OLDEST in text and "oldest {" in text and "TYPE_STRING" in text
    return text


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    repo = (tmp_path_factory.mktemp("python_sequence") / "models").resolve()
    repo.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(FIXTURE, repo / DIRECT, ignore=ignore)
    shutil.copytree(FIXTURE, repo / OLDEST, ignore=ignore)
    config = repo / OLDEST / "config.pbtxt"
    config.write_text(oldest_config(config.read_text()))
    shutil.copytree(FIXTURE, repo / DECOUPLED, ignore=ignore)
    config = repo / DECOUPLED / "config.pbtxt"
    text = config.read_text().replace(f'name: "{DIRECT}"', f'name: "{DECOUPLED}"')
    config.write_text(text + "model_transaction_policy { decoupled: true }\n")
    return repo


@pytest.fixture(scope="module")
def server(repo):
    yield from running_server(repo, args=["--python", sys.executable], name="python sequence server")


@pytest.fixture(scope="module")
def clients(server):
    cs = {
        "http": httpclient.InferenceServerClient(
            server.url, connection_timeout=10.0, network_timeout=CLIENT_TIMEOUT_S
        ),
        "grpc": grpc_client_for(server),
    }
    yield cs
    for c in cs.values():
        c.close()


def module_of(mode: str):
    return httpclient if mode == "http" else grpcclient


def seq_input(mod, value: int):
    data = np.array([[value]], dtype=np.int32)
    inp = mod.InferInput("INPUT", [1, 1], "INT32")
    inp.set_data_from_numpy(data)
    return [inp]


def answer(result) -> tuple[int, dict]:
    """OUTPUT as an int (checking dtype and shape) and INFO decoded."""
    out = result.as_numpy("OUTPUT")
    assert out is not None and out.dtype == np.int32 and list(out.shape) == [1, 1], out
    info = result.as_numpy("INFO")
    assert info is not None and list(info.shape) == [1, 1], info
    return int(out[0, 0]), json.loads(info[0, 0])


class Sender:
    """Sends sequence requests in one mode: HTTP, unary gRPC, or every
    request on one gRPC stream (answers matched by request id)."""

    def __init__(self, clients, mode: str, server=None):
        self.mode = mode
        self.mod = module_of(mode)
        self.n = 0
        if mode == "grpc_stream":
            self.client = grpc_client_for(server)
            self.collector = StreamCollector()
            self.client.start_stream(callback=self.collector)
        else:
            self.client = clients[mode]

    def send(self, model: str, value: int, seqid, start=False, end=False) -> tuple[int, dict]:
        kw = {"sequence_id": seqid, "sequence_start": start, "sequence_end": end}
        if self.mode == "grpc_stream":
            rid = f"r{self.n}"
            self.n += 1
            self.client.async_stream_infer(model, seq_input(self.mod, value), request_id=rid, **kw)
            results, errors = self.collector.by_id(self.n)
            assert not errors, errors
            return answer(results[rid])
        if self.mode == "grpc":
            kw["client_timeout"] = CLIENT_TIMEOUT_S
        return answer(self.client.infer(model, seq_input(self.mod, value), **kw))

    def close(self):
        if self.mode == "grpc_stream":
            stop_stream_within(self.client)
            cancel_stream(self.client)
            self.client.close()


@pytest.fixture
def sender(request, clients, server):
    made = []

    def make(mode):
        s = Sender(clients, mode, server)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def ids(model: str, base: int, n: int = 2):
    """Sequence ids for a test: numbers for the UINT64 CORRID, strings for
    the TYPE_STRING one."""
    if model == OLDEST:
        return [f"seq-{base + i}" for i in range(n)]
    return [base + i for i in range(n)]


def expected_flags(i: int, n: int) -> int:
    return (1 if i == 0 else 0) | (2 if i == n - 1 else 0)


# --------------------------------------------------------------------------
# Two interleaved sequences
# --------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("model", [DIRECT, OLDEST])
def test_two_interleaved_sequences_keep_their_own_sums(sender, mode, model):
    s = sender(mode)
    base = {"http": 1000, "grpc": 2000, "grpc_stream": 3000}[mode]
    a, b = ids(model, base)
    sums = {a: 0, b: 0}
    n = len(VALUES_A)
    for i, (va, vb) in enumerate(zip(VALUES_A, VALUES_B)):
        for seqid, value in ((a, va), (b, vb)):
            start, end = i == 0, i == n - 1
            out, info = s.send(model, value, seqid, start=start, end=end)
            sums[seqid] += value
            assert out == sums[seqid], (seqid, i, info)
            # What execute saw for this request.
            assert info["correlation_id"] == seqid, info
            assert info["flags"] == expected_flags(i, n), info
            assert info["inputs"] == CONTROL_NAMES, info
            controls = info["controls"]
            assert controls["START"] == {"value": int(start), "shape": [1, 1]}, info
            assert controls["END"] == {"value": int(end), "shape": [1, 1]}, info
            assert controls["READY"] == {"value": 1, "shape": [1, 1]}, info
            assert controls["CORRID"] == {"value": seqid, "shape": [1, 1]}, info
    assert sums == {a: sum(VALUES_A), b: sum(VALUES_B)}


@pytest.mark.parametrize("model", [DIRECT, OLDEST])
def test_a_sequence_of_one_request_has_both_flags(sender, model):
    s = sender("http")
    (seqid,) = ids(model, 4000, 1)
    out, info = s.send(model, 42, seqid, start=True, end=True)
    assert out == 42
    assert info["flags"] == 3, info
    assert info["controls"]["START"]["value"] == 1 and info["controls"]["END"]["value"] == 1


@pytest.mark.parametrize("model", [DIRECT, OLDEST])
def test_a_sequence_restarts_after_its_end(sender, model):
    s = sender("grpc")
    (seqid,) = ids(model, 4100, 1)
    assert s.send(model, 5, seqid, start=True)[0] == 5
    assert s.send(model, 6, seqid, end=True)[0] == 11
    # The same id again: a new sequence, a new sum (the model dropped the
    # old one at END; START resets it anyway).
    assert s.send(model, 7, seqid, start=True)[0] == 7
    assert s.send(model, 1, seqid, end=True)[0] == 8


def test_a_decoupled_model_answers_each_sequence_request_on_the_stream(sender):
    s = sender("grpc_stream")
    a, b = 3500, 3501
    n = len(VALUES_A)
    sums = {a: 0, b: 0}
    for i, (va, vb) in enumerate(zip(VALUES_A, VALUES_B)):
        for seqid, value in ((a, va), (b, vb)):
            out, info = s.send(DECOUPLED, value, seqid, start=i == 0, end=i == n - 1)
            sums[seqid] += value
            assert out == sums[seqid], (seqid, i, info)
            assert info["flags"] == expected_flags(i, n), info
    assert sums == {a: sum(VALUES_A), b: sum(VALUES_B)}


# --------------------------------------------------------------------------
# The direct strategy's null request
# --------------------------------------------------------------------------


def test_direct_batch_carries_a_null_request_for_an_empty_slot(sender):
    """Sequence a takes slot 0, b slot 1; a request of b alone forms a
    batch of both slots: slot 0 is Triton's null request (READY 0), which
    the model answers into nothing and which touches no sum."""
    s = sender("http")
    a, b = 5000, 5001
    out, info = s.send(DIRECT, 1, a, start=True)
    assert (out, info["batch"]) == (1, [[a, 1, 1]]), info
    out, info = s.send(DIRECT, 10, b, start=True)
    assert (out, info["batch"]) == (10, [[0, 0, 0], [b, 1, 1]]), info
    out, info = s.send(DIRECT, 20, b)
    assert out == 30
    assert info["batch"] == [[0, 0, 0], [b, 0, 1]], info
    out, info = s.send(DIRECT, 2, a, end=True)
    assert out == 3
    assert info["batch"] == [[a, 2, 1]], info
    assert s.send(DIRECT, 3, b, end=True)[0] == 33


# --------------------------------------------------------------------------
# Many sequences at once
# --------------------------------------------------------------------------


@pytest.mark.parametrize("model", [DIRECT, OLDEST])
def test_many_concurrent_sequences_more_than_the_slots(server, model):
    """Twelve sequences at once on 4 slots (some wait in the backlog), each
    from its own thread: every sum is its own, whatever batches formed."""
    length = 6
    seqids = ids(model, 6000, 12)
    biggest = []
    lock = threading.Lock()

    def run(k, seqid):
        # A client of its own per sequence: a backlogged sequence's request
        # waits for a place, and must not hold a connection another
        # sequence needs to reach its END.
        if k % 2:
            client, mod = grpc_client_for(server), grpcclient
        else:
            client = httpclient.InferenceServerClient(server.url, network_timeout=CLIENT_TIMEOUT_S)
            mod = httpclient
        try:
            total = 0
            for i in range(length):
                value = k * 100 + i
                result = client.infer(
                    model,
                    seq_input(mod, value),
                    sequence_id=seqid,
                    sequence_start=i == 0,
                    sequence_end=i == length - 1,
                )
                out, info = answer(result)
                total += value
                assert out == total, (seqid, i, info)
                assert info["correlation_id"] == seqid
                with lock:
                    biggest.append(len(info["batch"]))
            return total
        finally:
            client.close()

    with ThreadPoolExecutor(max_workers=len(seqids)) as pool:
        totals = list(pool.map(run, range(len(seqids)), seqids))
    assert totals == [sum(k * 100 + i for i in range(length)) for k in range(len(seqids))]
    assert max(biggest) <= 4, "a batch is at most max_batch_size requests"


# --------------------------------------------------------------------------
# validate-config
# --------------------------------------------------------------------------


def test_validate_config_accepts_the_python_sequence_models(repo, server, clients):
    out = subprocess.run(
        [str(trtis_bin()), "validate-config", str(repo)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    for model in (DIRECT, OLDEST, DECOUPLED):
        assert clients["http"].is_model_ready(model), model
