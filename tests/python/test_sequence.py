"""The sequence batcher (`sequence_batching`) through Triton's own clients,
over HTTP and gRPC (unary and streaming): the flows of Triton's example
clients (simple_http_sequence_sync_infer_client.py,
simple_grpc_sequence_stream_infer_client.py), many interleaved sequences
(more than the model has batch slots, so some wait in the backlog), a START
on a live sequence, the sequence batcher's request errors, a stateful
composing model under an ensemble, and the statistics.

The repository holds Triton's three example stateful models (copied from
examples/model_repository, ONNX Runtime backend) and one ensemble:

  * `simple_sequence`: direct strategy, max_batch_size 8, controls START and
    READY. OUTPUT = READY ? INPUT + START : 0.
  * `simple_dyna_sequence`: oldest strategy, 2 instances, controls START,
    END, READY and CORRID (UINT64).
    OUTPUT = INPUT + START + (END ? CORRID : 0).
  * `simple_accumulator`: direct, implicit state (INPUT_STATE/OUTPUT_STATE),
    control START. OUTPUT = running sum of INPUT, restarted on START.
  * `acc_ensemble`: one step on `simple_accumulator` (INPUT -> INPUT,
    OUTPUT -> OUTPUT); the ensemble request's sequence id and flags must
    reach the composing model.

Requests carry the sequence extension: tritonclient's `sequence_id`,
`sequence_start`, `sequence_end` (HTTP `parameters`, gRPC
`parameters["sequence_id"|"sequence_start"|"sequence_end"]`). INPUT is
INT32 [1, 1] (batch 1, as the sequence batcher requires).

Triton's messages (core src/sequence_batch_scheduler.cc, Enqueue and the
CORRID check of the request): no id -> "must specify a non-zero or non-empty
correlation ID"; a first request without START -> "must specify the START
flag on the first request of the sequence"; a batch of 2 -> "must specify
batch-size 1 due to requirements of sequence batcher"; a string id for a
UINT64 CORRID control -> "[request id: <id_unknown>] sequence batching
control 'CORRID' data-type is 'BYTES', but model ... expects 'UINT64'".
All INVALID_ARGUMENT (HTTP 400). On a gRPC stream an error is the response's
`error_message` (tritonclient's callback gets an exception without a status
code) and the stream goes on.

Every test ends the sequences it starts, with ids of its own, so tests do not
depend on each other (or on the idle timeouts).

Run: .venv/bin/python -m pytest tests/python/test_sequence.py -q
"""

from __future__ import annotations

import shutil
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from trtis_harness import StreamCollector as Collector
from trtis_harness import (
    EXAMPLES,
    assert_client_error,
    assert_grpc_error,
    cancel_stream,
    grpc_client_for,
    running_server,
)

PROTOCOLS = ["http", "grpc"]
# "grpc_stream": every request of the flow sent on one ModelStreamInfer
# stream (start_stream / async_stream_infer), responses matched by id.
MODES = ["http", "grpc", "grpc_stream"]
STREAM_TIMEOUT_S = 30.0
CLIENT_TIMEOUT_S = 30.0

SEQUENCE_MODELS = ["simple_sequence", "simple_dyna_sequence", "simple_accumulator"]

# The values of Triton's example sequence clients.
EXAMPLE_VALUES = [11, 7, 5, 3, 2, 0, 1]

ACC_ENSEMBLE = """name: "acc_ensemble"
platform: "ensemble"
max_batch_size: 8
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
ensemble_scheduling {
  step [
    { model_name: "simple_accumulator" model_version: -1
      input_map { key: "INPUT" value: "INPUT" }
      output_map { key: "OUTPUT" value: "OUTPUT" } }
  ]
}
"""


def no_id_error(model: str) -> str:
    return (
        f"inference request to model '{model}' must specify a non-zero or non-empty "
        "correlation ID"
    )


def no_start_error(seqid, model: str) -> str:
    return (
        f"inference request for sequence {seqid} to model '{model}' must specify the "
        "START flag on the first request of the sequence"
    )


def batch_error(model: str) -> str:
    return (
        f"inference request to model '{model}' must specify batch-size 1 due to "
        "requirements of sequence batcher"
    )


CORRID_TYPE_ERROR = (
    "[request id: <id_unknown>] sequence batching control 'CORRID' data-type is "
    "'BYTES', but model 'simple_dyna_sequence' expects 'UINT64'"
)


# --------------------------------------------------------------------------
# Repository, server, clients
# --------------------------------------------------------------------------


def build_sequence_repository(repo):
    repo.mkdir(parents=True, exist_ok=True)
    for name in SEQUENCE_MODELS:
        (repo / name / "1").mkdir(parents=True)
        shutil.copy(EXAMPLES / name / "config.pbtxt", repo / name / "config.pbtxt")
        shutil.copy(EXAMPLES / name / "1" / "model.onnx", repo / name / "1" / "model.onnx")
    make_growing_state(repo / "growing_state")
    ens = repo / "acc_ensemble"
    (ens / "1").mkdir(parents=True)
    (ens / "1" / ".keep").write_text("")
    (ens / "config.pbtxt").write_text(ACC_ENSEMBLE)
    return repo


GROWING_STATE = """name: "growing_state"
backend: "onnxruntime"
max_batch_size: 8
sequence_batching {
  control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ]
  state [ { input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [ -1 ] } ]
}
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [
  { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [ -1 ] }
]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""


def make_growing_state(model_dir):
    """A model whose implicit state grows by one element per request:
    OUTPUT_STATE = concat(INPUT_STATE, INPUT) along dim 1, OUTPUT = its sum.
    The first state is [0] (variable dims start at 1, zeros), so after k
    requests the state is [0, x1, ..., xk]. Sequences at different lengths
    have different state shapes, so they cannot share a batch."""
    import onnx
    from onnx import TensorProto, helper

    (model_dir / "1").mkdir(parents=True)
    t = lambda name, dims: helper.make_tensor_value_info(name, TensorProto.INT32, dims)  # noqa: E731
    nodes = [
        helper.make_node("Concat", ["INPUT_STATE", "INPUT"], ["OUTPUT_STATE"], axis=1),
        helper.make_node("ReduceSum", ["OUTPUT_STATE", "axes"], ["OUTPUT"], keepdims=1),
    ]
    graph = helper.make_graph(
        nodes, "growing_state",
        [t("INPUT", ["b", 1]), t("START", ["b", 1]), t("INPUT_STATE", ["b", "n"])],
        [t("OUTPUT", ["b", 1]), t("OUTPUT_STATE", ["b", "m"])],
        [helper.make_tensor("axes", TensorProto.INT64, [1], [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(model_dir / "1" / "model.onnx"))
    (model_dir / "config.pbtxt").write_text(GROWING_STATE)


@pytest.fixture(scope="module")
def seq_repo(tmp_path_factory):
    return build_sequence_repository(tmp_path_factory.mktemp("trtis_seq") / "models")


@pytest.fixture(scope="module")
def seq_server(seq_repo):
    yield from running_server(seq_repo, name="sequence server")


def http_client_for(server):
    return httpclient.InferenceServerClient(
        server.url, connection_timeout=10.0, network_timeout=CLIENT_TIMEOUT_S
    )


@pytest.fixture(scope="module")
def clients(seq_server):
    cs = {"http": http_client_for(seq_server), "grpc": grpc_client_for(seq_server)}
    yield cs
    for c in cs.values():
        c.close()


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------


def _module(protocol: str):
    return httpclient if protocol == "http" else grpcclient


def seq_input(protocol: str, value: int, batch: int = 1):
    data = np.full((batch, 1), value, dtype=np.int32)
    inp = _module(protocol).InferInput("INPUT", list(data.shape), "INT32")
    inp.set_data_from_numpy(data)
    return [inp]


def infer_seq(client, protocol: str, model: str, value: int, seqid=0, start=False, end=False, **kw):
    """One sequence request (unary); returns OUTPUT as an int (asserting the
    output's dtype and shape)."""
    if protocol == "grpc":
        kw.setdefault("client_timeout", CLIENT_TIMEOUT_S)
    result = client.infer(
        model,
        seq_input(protocol, value, kw.pop("batch", 1)),
        sequence_id=seqid,
        sequence_start=start,
        sequence_end=end,
        **kw,
    )
    return output_value(result)


def output_value(result) -> int:
    out = result.as_numpy("OUTPUT")
    assert out is not None, "no OUTPUT in the response"
    assert out.dtype == np.int32, f"OUTPUT dtype {out.dtype}"
    assert list(out.shape) == [1, 1], f"OUTPUT shape {list(out.shape)}"
    return int(out[0, 0])


def expect_error(protocol: str, exc, message: str) -> None:
    """`exc` is INVALID_ARGUMENT (HTTP 400) with exactly `message`."""
    if protocol == "http":
        msg = assert_client_error(exc, 400)
    else:
        msg = assert_grpc_error(exc, "INVALID_ARGUMENT")
    assert msg == message, f"error message {msg!r}, expected {message!r}"


def infer_error(client, protocol: str, model: str, value: int, **kw) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as e:
        infer_seq(client, protocol, model, value, **kw)
    return e.value


class Stream:
    """A fresh gRPC client with one started stream; `close()` half-closes
    (failing if the server does not end the call) and never hangs."""

    def __init__(self, server):
        self.client = grpc_client_for(server)
        self.collector = Collector()
        self.client.start_stream(callback=self.collector)

    def send(self, model: str, value: int, request_id: str, seqid=0, start=False, end=False, batch=1):
        self.client.async_stream_infer(
            model,
            seq_input("grpc", value, batch),
            request_id=request_id,
            sequence_id=seqid,
            sequence_start=start,
            sequence_end=end,
        )

    def close(self, check: bool = True) -> None:
        t = threading.Thread(target=self.client.stop_stream, daemon=True)
        t.start()
        t.join(STREAM_TIMEOUT_S)
        hung = t.is_alive()
        if hung:
            cancel_stream(self.client)
        self.client._stream = None
        self.client.close()
        if hung and check:
            pytest.fail(f"stop_stream() did not return within {STREAM_TIMEOUT_S} s")


@pytest.fixture
def open_stream(seq_server):
    """Opens Streams for one test and closes them all afterwards."""
    streams: list[Stream] = []

    def opener() -> Stream:
        s = Stream(seq_server)
        streams.append(s)
        return s

    yield opener
    for s in streams:
        s.close(check=False)


def run_interleaved(mode: str, clients, open_stream, model: str, sequences: dict) -> dict:
    """Sends each sequence's values (first with START, last with END),
    interleaved request by request across the sequences, as Triton's example
    clients do: {seqid: [OUTPUT of each request]}."""
    length = max(len(v) for v in sequences.values())
    if mode in PROTOCOLS:
        client = clients[mode]
        outputs = {seqid: [] for seqid in sequences}
        for i in range(length):
            for seqid, values in sequences.items():
                if i < len(values):
                    outputs[seqid].append(
                        infer_seq(
                            client, mode, model, values[i], seqid=seqid,
                            start=i == 0, end=i == len(values) - 1,
                        )
                    )
        return outputs
    stream = open_stream()
    total = 0
    for i in range(length):
        for seqid, values in sequences.items():
            if i < len(values):
                stream.send(
                    model, values[i], f"{seqid}_{i}", seqid=seqid,
                    start=i == 0, end=i == len(values) - 1,
                )
                total += 1
    results, errors = stream.collector.by_id(total)
    assert not errors, [e.message() for e in errors]
    stream.close()
    return {
        seqid: [output_value(results[f"{seqid}_{i}"]) for i in range(len(values))]
        for seqid, values in sequences.items()
    }


def example_expected(values: list[int], corrid: int = 0) -> list[int]:
    """simple_sequence / simple_dyna_sequence: INPUT + START, plus CORRID on
    the END request when `corrid` (simple_dyna_sequence)."""
    want = [v + (1 if i == 0 else 0) for i, v in enumerate(values)]
    want[-1] += corrid
    return want


def running_sums(values: list[int]) -> list[int]:
    return [int(x) for x in np.cumsum(values)]


def model_stats(client, model: str) -> dict:
    entries = [e for e in client.get_inference_statistics(model)["model_stats"] if e["name"] == model]
    assert len(entries) == 1, entries
    return entries[0]


# --------------------------------------------------------------------------
# Triton's example clients
# --------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_example_flow_simple_sequence(clients, open_stream, mode):
    """simple_{http,grpc}_sequence_*_infer_client.py: sequence 1000 sends
    [0] + values, 1001 [100] + negated values, interleaved."""
    seqs = {
        1000: [0] + EXAMPLE_VALUES,
        1001: [100] + [-v for v in EXAMPLE_VALUES],
    }
    got = run_interleaved(mode, clients, open_stream, "simple_sequence", seqs)
    assert got[1000] == [1] + EXAMPLE_VALUES
    assert got[1001] == [101] + [-v for v in EXAMPLE_VALUES]


@pytest.mark.parametrize("mode", MODES)
def test_example_flow_simple_dyna_sequence(clients, open_stream, mode):
    """The same flow with `-d` (simple_dyna_sequence): the END request's
    result adds the correlation id."""
    seqs = {
        1000: [0] + EXAMPLE_VALUES,
        1001: [100] + [-v for v in EXAMPLE_VALUES],
    }
    got = run_interleaved(mode, clients, open_stream, "simple_dyna_sequence", seqs)
    assert got[1000] == [1] + EXAMPLE_VALUES[:-1] + [1 + 1000]
    assert got[1001] == [101] + [-v for v in EXAMPLE_VALUES[:-1]] + [-1 + 1001]


@pytest.mark.parametrize("mode", MODES)
def test_example_flow_string_sequence_id(clients, open_stream, mode):
    """A string correlation id (the example clients' `uuid4()` sequence):
    [20] + negated values, next to a numeric sequence."""
    sid = str(uuid.uuid4())
    seqs = {
        1002: [0] + EXAMPLE_VALUES,
        sid: [20] + [-v for v in EXAMPLE_VALUES],
    }
    got = run_interleaved(mode, clients, open_stream, "simple_sequence", seqs)
    assert got[sid] == [21] + [-v for v in EXAMPLE_VALUES]
    assert got[1002] == [1] + EXAMPLE_VALUES


def test_string_sequence_id_accumulator(clients):
    """String ids on the stateful model: two ids that differ only in text
    keep separate state."""
    a, b = f"acc-{uuid.uuid4()}", f"acc-{uuid.uuid4()}"
    seqs = {a: [1, 2, 3, 4], b: [10, 20, 30, 40]}
    got = run_interleaved("http", clients, None, "simple_accumulator", seqs)
    assert got == {a: [1, 3, 6, 10], b: [10, 30, 60, 100]}


# --------------------------------------------------------------------------
# Many interleaved sequences (more than the 8 batch slots)
# --------------------------------------------------------------------------

N_SEQUENCES = 24
N_REQUESTS = 10


def random_sequences(base_id: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {
        base_id + i: [int(v) for v in rng.integers(-1000, 1000, size=N_REQUESTS)]
        for i in range(N_SEQUENCES)
    }


def run_threaded(server, protocol: str, model: str, sequences: dict, workers: int = 12) -> dict:
    """Each sequence on a worker thread of its own client, each request sent
    when the previous one's answer arrived; `workers` (> 8) sequences run at
    once, so some wait for a batch slot. {seqid: [OUTPUT...]}."""

    def one(seqid):
        client = http_client_for(server) if protocol == "http" else grpc_client_for(server)
        try:
            values = sequences[seqid]
            return [
                infer_seq(
                    client, protocol, model, v, seqid=seqid,
                    start=i == 0, end=i == len(values) - 1,
                )
                for i, v in enumerate(values)
            ]
        finally:
            client.close()

    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {seqid: pool.submit(one, seqid) for seqid in sequences}
        return {seqid: f.result(timeout=60) for seqid, f in futures.items()}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_many_sequences_threads_accumulator(seq_server, protocol):
    seqs = random_sequences(10_000 if protocol == "http" else 11_000, seed=1)
    got = run_threaded(seq_server, protocol, "simple_accumulator", seqs)
    for seqid, values in seqs.items():
        assert got[seqid] == running_sums(values), f"sequence {seqid}"


# trtis reads at most 64 requests of a stream ahead of the oldest one not yet
# answered (src/server/frontend/grpc/stream.rs, `.buffered(STREAM_IN_FLIGHT)`); Triton
# reads every request as it arrives (ModelStreamInferHandler issues the next
# read as soon as one completes). With a backlog sequence's START as the
# oldest unanswered request, the ENDs that would free a batch slot are never
# read: the stream stalls until max_sequence_idle_microseconds (5 s for
# simple_accumulator), the idle sequences are ended, and their later requests
# (already sent) are refused with the START-flag error.
def test_many_sequences_one_stream_accumulator(clients, open_stream):
    """All 240 requests sent at once on one stream, interleaved across the 24
    sequences: each sequence's requests keep their order, the backlog
    sequences get slots as the first ones end (the server must keep reading
    the stream past a request that waits for a slot: it once stopped 64
    requests past it, and the stream stalled until the idle timeout)."""
    seqs = random_sequences(12_000, seed=2)
    got = run_interleaved("grpc_stream", clients, open_stream, "simple_accumulator", seqs)
    for seqid, values in seqs.items():
        assert got[seqid] == running_sums(values), f"sequence {seqid}"


@pytest.mark.parametrize("model", ["simple_accumulator", "simple_sequence"])
def test_backlog_sequences_one_stream(clients, open_stream, model):
    """12 sequences (4 more than the 8 slots) x 5 requests sent at once on one
    stream: 60 requests, so the whole flow is within the 64 requests trtis
    reads ahead on a stream (see test_many_sequences_one_stream_accumulator).
    The 4 backlog sequences run once the first ones end."""
    rng = np.random.default_rng(6)
    base = 13_000 if model == "simple_accumulator" else 14_000
    seqs = {base + i: [int(v) for v in rng.integers(-1000, 1000, size=5)] for i in range(12)}
    got = run_interleaved("grpc_stream", clients, open_stream, model, seqs)
    for seqid, values in seqs.items():
        want = running_sums(values) if model == "simple_accumulator" else example_expected(values)
        assert got[seqid] == want, f"sequence {seqid}"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_many_sequences_threads_dyna(seq_server, protocol):
    seqs = random_sequences(20_000 if protocol == "http" else 21_000, seed=3)
    got = run_threaded(seq_server, protocol, "simple_dyna_sequence", seqs)
    for seqid, values in seqs.items():
        assert got[seqid] == example_expected(values, corrid=seqid), f"sequence {seqid}"


def test_many_sequences_one_stream_dyna(clients, open_stream):
    seqs = random_sequences(22_000, seed=4)
    got = run_interleaved("grpc_stream", clients, open_stream, "simple_dyna_sequence", seqs)
    for seqid, values in seqs.items():
        assert got[seqid] == example_expected(values, corrid=seqid), f"sequence {seqid}"


# --------------------------------------------------------------------------
# START on a live sequence, id reuse after END
# --------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_start_on_active_sequence_restarts_sum(clients, protocol):
    client = clients[protocol]
    seqid = 300 if protocol == "http" else 301

    def acc(value, **kw):
        return infer_seq(client, protocol, "simple_accumulator", value, seqid=seqid, **kw)

    assert acc(3, start=True) == 3
    assert acc(4) == 7
    # START again without an END: the old sequence ends early, a new sum.
    assert acc(10, start=True) == 10
    assert acc(5) == 15
    assert acc(1, end=True) == 16
    # The id is free again: a new sequence on it starts from zero.
    assert acc(2, start=True) == 2
    assert acc(2, end=True) == 4


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_start_and_end_in_one_request(clients, protocol):
    client = clients[protocol]
    seqid = 310 if protocol == "http" else 311
    assert infer_seq(client, protocol, "simple_accumulator", 9, seqid=seqid, start=True, end=True) == 9
    assert infer_seq(client, protocol, "simple_dyna_sequence", 9, seqid=seqid, start=True, end=True) == (
        9 + 1 + seqid
    )
    # Ended: a request without START is refused.
    e = infer_error(client, protocol, "simple_accumulator", 1, seqid=seqid)
    expect_error(protocol, e, no_start_error(seqid, "simple_accumulator"))


# --------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("model", SEQUENCE_MODELS)
def test_error_no_sequence_id(clients, protocol, model):
    e = infer_error(clients[protocol], protocol, model, 1)
    expect_error(protocol, e, no_id_error(model))


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("model", SEQUENCE_MODELS)
def test_error_unknown_sequence_without_start(clients, protocol, model):
    e = infer_error(clients[protocol], protocol, model, 1, seqid=77)
    expect_error(protocol, e, no_start_error(77, model))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_error_unknown_string_sequence_without_start(clients, protocol):
    sid = f"nostart-{uuid.uuid4()}"
    e = infer_error(clients[protocol], protocol, "simple_sequence", 1, seqid=sid, end=True)
    expect_error(protocol, e, no_start_error(sid, "simple_sequence"))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_error_after_end_other_sequence_unaffected(clients, protocol):
    client = clients[protocol]
    ended, live = (400, 401) if protocol == "http" else (410, 411)

    def acc(seqid, value, **kw):
        return infer_seq(client, protocol, "simple_accumulator", value, seqid=seqid, **kw)

    assert acc(live, 5, start=True) == 5
    assert acc(ended, 1, start=True) == 1
    assert acc(ended, 2, end=True) == 3
    assert acc(live, 6) == 11
    for _ in range(2):
        e = infer_error(client, protocol, "simple_accumulator", 4, seqid=ended)
        expect_error(protocol, e, no_start_error(ended, "simple_accumulator"))
    # The refused requests touched neither sequence.
    assert acc(live, 7) == 18
    assert acc(live, 1, end=True) == 19
    assert acc(ended, 100, start=True, end=True) == 100


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("model", SEQUENCE_MODELS)
def test_error_batch_size_two(clients, protocol, model):
    e = infer_error(clients[protocol], protocol, model, 1, seqid=500, start=True, batch=2)
    expect_error(protocol, e, batch_error(model))
    # Refused before the sequence began: 500 is not active.
    e = infer_error(clients[protocol], protocol, model, 1, seqid=500)
    expect_error(protocol, e, no_start_error(500, model))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_error_batch_size_two_mid_sequence(clients, protocol):
    """A refused request in the middle of a sequence leaves its state as it
    was."""
    client = clients[protocol]
    seqid = 510 if protocol == "http" else 511
    assert infer_seq(client, protocol, "simple_accumulator", 4, seqid=seqid, start=True) == 4
    e = infer_error(client, protocol, "simple_accumulator", 1, seqid=seqid, batch=2)
    expect_error(protocol, e, batch_error("simple_accumulator"))
    assert infer_seq(client, protocol, "simple_accumulator", 5, seqid=seqid, end=True) == 9


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_error_string_id_for_uint64_corrid(clients, protocol):
    sid = str(uuid.uuid4())
    e = infer_error(clients[protocol], protocol, "simple_dyna_sequence", 1, seqid=sid, start=True)
    expect_error(protocol, e, CORRID_TYPE_ERROR)


def test_grpc_stream_errors_then_stream_continues(open_stream):
    """Each refused request gets its error on the stream (no status code,
    tritonclient builds the exception from `error_message`); the sequence
    that was running goes on, on the same stream."""
    stream = open_stream()
    seqid = 600
    stream.send("simple_accumulator", 3, "ok_0", seqid=seqid, start=True)
    stream.send("simple_accumulator", 1, "no_id")
    stream.send("simple_accumulator", 1, "no_start", seqid=77)
    stream.send("simple_accumulator", 1, "batch2", seqid=seqid, batch=2)
    stream.send("simple_dyna_sequence", 1, "corrid", seqid="text-id", start=True)
    stream.send("simple_accumulator", 4, "ok_1", seqid=seqid)
    stream.send("simple_accumulator", 5, "ok_2", seqid=seqid, end=True)
    stream.send("simple_accumulator", 6, "after_end", seqid=seqid)
    results, errors = stream.collector.by_id(8)

    assert sorted(results) == ["ok_0", "ok_1", "ok_2"], sorted(results)
    assert [output_value(results[f"ok_{i}"]) for i in range(3)] == [3, 7, 12]
    for error in errors:
        assert error.status() is None, (error.status(), error.message())
    want = [
        no_id_error("simple_accumulator"),
        no_start_error(77, "simple_accumulator"),
        batch_error("simple_accumulator"),
        CORRID_TYPE_ERROR.replace("<id_unknown>", "corrid"),
        no_start_error(seqid, "simple_accumulator"),
    ]
    assert sorted(e.message() for e in errors) == sorted(want)

    # The stream is still usable.
    stream.send("simple_accumulator", 8, "again_0", seqid=seqid, start=True)
    stream.send("simple_accumulator", 9, "again_1", seqid=seqid, end=True)
    results, errors = stream.collector.by_id(10)
    assert len(errors) == 5
    assert output_value(results["again_0"]) == 8
    assert output_value(results["again_1"]) == 17
    stream.close()


# --------------------------------------------------------------------------
# Ensemble over a stateful model
# --------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_ensemble_passes_sequence_to_composing_model(clients, open_stream, mode):
    base = {"http": 700, "grpc": 710, "grpc_stream": 720}[mode]
    seqs = {
        base: [5, 7, 7, -3, 100],
        base + 1: [1, 1, 1, 1, 1, 1],
        f"ens-{uuid.uuid4()}": [-2, 4, -8],
    }
    got = run_interleaved(mode, clients, open_stream, "acc_ensemble", seqs)
    for seqid, values in seqs.items():
        assert got[seqid] == running_sums(values), f"sequence {seqid}"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_ensemble_restart_and_errors(clients, protocol):
    client = clients[protocol]
    seqid = 730 if protocol == "http" else 731

    def ens(value, **kw):
        return infer_seq(client, protocol, "acc_ensemble", value, seqid=seqid, **kw)

    assert ens(2, start=True) == 2
    assert ens(3) == 5
    assert ens(10, start=True) == 10
    assert ens(1, end=True) == 11
    # The composing model's errors come back through the ensemble, with
    # Triton's "in ensemble 'E', " before them.
    prefix = "in ensemble 'acc_ensemble', "
    e = infer_error(client, protocol, "acc_ensemble", 1, seqid=seqid)
    expect_error(protocol, e, prefix + no_start_error(seqid, "simple_accumulator"))
    e = infer_error(client, protocol, "acc_ensemble", 1)
    expect_error(protocol, e, prefix + no_id_error("simple_accumulator"))


def test_ensemble_and_direct_requests_share_sequence_state(clients):
    """The ensemble's step is a request of `simple_accumulator` with the same
    correlation id: a sequence begun directly goes on through the ensemble."""
    client = clients["http"]
    seqid = 740
    assert infer_seq(client, "http", "simple_accumulator", 6, seqid=seqid, start=True) == 6
    assert infer_seq(client, "http", "acc_ensemble", 4, seqid=seqid) == 10
    assert infer_seq(client, "http", "simple_accumulator", 1, seqid=seqid, end=True) == 11


# --------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_statistics_count_sequence_requests(clients, protocol):
    """inference_count, execution_count and success.count grow by the number
    of sequence requests (one at a time, so one execution each); refused
    requests are not inferences."""
    client = clients[protocol]
    seqid = 800 if protocol == "http" else 801
    values = [1, 2, 3, 4, 5, 6, 7]
    before = model_stats(clients["http"], "simple_accumulator")
    outputs = [
        infer_seq(
            client, protocol, "simple_accumulator", v, seqid=seqid,
            start=i == 0, end=i == len(values) - 1,
        )
        for i, v in enumerate(values)
    ]
    assert outputs == running_sums(values)
    infer_error(client, protocol, "simple_accumulator", 1, seqid=seqid)
    after = model_stats(clients["http"], "simple_accumulator")
    n = len(values)
    deltas = {
        "inference_count": int(after["inference_count"]) - int(before["inference_count"]),
        "execution_count": int(after["execution_count"]) - int(before["execution_count"]),
        "success": int(after["inference_stats"]["success"]["count"])
        - int(before["inference_stats"]["success"]["count"]),
    }
    assert deltas == {"inference_count": n, "execution_count": n, "success": n}, (before, after)


# --------------------------------------------------------------------------
# Implicit state that changes shape
# --------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_growing_state_sequences_at_different_lengths(seq_server, protocol):
    """Eight sequences started one request apart (so at any moment their
    states have different lengths) from eight threads: each response's
    OUTPUT_STATE is that sequence's whole history and OUTPUT its sum; a
    START on a live id restarts from [0]."""
    base = 31_000 if protocol == "http" else 32_000
    errors = []

    def one(k):
        client = http_client_for(seq_server) if protocol == "http" else grpc_client_for(seq_server)
        seqid = base + k
        history = [0]
        try:
            time.sleep(0.01 * k)  # staggered starts: the states differ in length
            for i in range(6 + k):
                value = 10 * k + i + 1
                history.append(value)
                result = client.infer(
                    "growing_state", seq_input(protocol, value), sequence_id=seqid,
                    sequence_start=(i == 0), sequence_end=(i == 5 + k),
                    outputs=[_module(protocol).InferRequestedOutput(n) for n in ("OUTPUT", "OUTPUT_STATE")],
                )
                state = result.as_numpy("OUTPUT_STATE")
                assert state.tolist() == [history], f"sequence {seqid} step {i}: {state.tolist()}"
                assert int(result.as_numpy("OUTPUT")[0, 0]) == sum(history)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"{seqid}: {e}")
        finally:
            client.close()

    threads = [threading.Thread(target=one, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors

    client = http_client_for(seq_server) if protocol == "http" else grpc_client_for(seq_server)
    try:
        seqid = base + 100
        for start, value, want in [(True, 5, [0, 5]), (False, 6, [0, 5, 6]), (True, 7, [0, 7])]:
            result = client.infer("growing_state", seq_input(protocol, value), sequence_id=seqid,
                                  sequence_start=start)
            assert result.as_numpy("OUTPUT_STATE").tolist() == [want]
        client.infer("growing_state", seq_input(protocol, 0), sequence_id=seqid, sequence_end=True)
    finally:
        client.close()


# --------------------------------------------------------------------------
# Backlog timeout
# --------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_backlogged_sequence_times_out(clients, protocol):
    """simple_accumulator has 8 slots: with 8 sequences running, a 9th
    START waits in the backlog, and its `timeout` (100 ms) refuses it with
    Triton's message (UNAVAILABLE); the running sequences are unaffected."""
    client = clients[protocol]
    base = 41_000 if protocol == "http" else 42_000
    for k in range(8):
        assert infer_seq(client, protocol, "simple_accumulator", k, seqid=base + k, start=True) == k
    kw = {"timeout": 100_000}
    with pytest.raises(InferenceServerException) as e:
        infer_seq(client, protocol, "simple_accumulator", 1, seqid=base + 8, start=True, **kw)
    if protocol == "http":
        msg = assert_client_error(e.value, 503)
    else:
        msg = assert_grpc_error(e.value, "UNAVAILABLE")
    assert msg == "timeout of the corresponding sequence has been expired"
    for k in range(8):
        assert infer_seq(client, protocol, "simple_accumulator", 1, seqid=base + k, end=True) == k + 1
