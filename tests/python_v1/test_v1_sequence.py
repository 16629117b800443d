"""Sequences over the v1 API: `correlation_id` and `flags`
(FLAG_SEQUENCE_START = 1, FLAG_SEQUENCE_END = 2) in the InferRequestHeader,
over HTTP, gRPC `Infer` and gRPC `StreamInfer`, on the example stateful
models (main server):

  * `simple_sequence`: OUTPUT = READY ? INPUT + START : 0 (the flow of
    Triton's example sequence clients: [0] + values -> [1] + values);
  * `simple_accumulator`: OUTPUT = running sum of INPUT, restarted on START.

Results must equal what the v2 suite (tests/python/test_sequence.py)
expects. Also: a request of an unknown sequence without START is refused
(INVALID_ARG) and other sequences go on. Each test uses correlation ids of
its own.
"""

from __future__ import annotations

import numpy as np
import pytest

from v1client import (
    FLAG_SEQUENCE_END,
    FLAG_SEQUENCE_START,
    INVALID_ARG,
    SUCCESS,
    assert_grpc_error,
    assert_grpc_ok,
    assert_http_error,
    assert_http_ok,
    infer_request,
    raw,
    request_header,
)
from v1repo import EXAMPLE_VALUES

MODES = ["http", "grpc", "grpc_stream"]


def header(value_id, seqid, start, end):
    flags = (FLAG_SEQUENCE_START if start else 0) | (FLAG_SEQUENCE_END if end else 0)
    return request_header(
        1, [("INPUT", [1])], ["OUTPUT"], id=value_id, correlation_id=seqid, flags=flags
    )


def one(v) -> bytes:
    return raw(np.array([[v]], dtype=np.int32))


def output_value(data: bytes) -> int:
    arr = np.frombuffer(data, dtype="<i4")
    assert arr.size == 1, f"OUTPUT of {arr.size} elements"
    return int(arr[0])


def run_interleaved(mode, http, grpc_v1, model, sequences: dict) -> dict:
    """Sends each sequence's values (START on the first, END on the last),
    interleaved request by request: {seqid: [OUTPUT of each request]}."""
    steps = []
    length = max(len(v) for v in sequences.values())
    for i in range(length):
        for seqid, values in sequences.items():
            if i < len(values):
                steps.append((seqid, values[i], i == 0, i == len(values) - 1))
    outputs = {seqid: [] for seqid in sequences}
    if mode == "http":
        for n, (seqid, v, start, end) in enumerate(steps, 1):
            r = http.infer(model, header(n, seqid, start, end), one(v))
            assert_http_ok(r, f"sequence {seqid} value {v}")
            assert r.header.id == n
            outputs[seqid].append(output_value(r.outputs["OUTPUT"]))
    elif mode == "grpc":
        for n, (seqid, v, start, end) in enumerate(steps, 1):
            resp = grpc_v1.infer(model, header(n, seqid, start, end), [one(v)])
            assert_grpc_ok(resp.request_status, f"sequence {seqid} value {v}")
            assert resp.meta_data.id == n
            outputs[seqid].append(output_value(resp.raw_output[0]))
    else:
        reqs = [
            infer_request(model, header(n, seqid, start, end), [one(v)])
            for n, (seqid, v, start, end) in enumerate(steps, 1)
        ]
        answers = grpc_v1.stream(reqs)
        assert [a.meta_data.id for a in answers] == list(range(1, len(steps) + 1))
        for a, (seqid, _, _, _) in zip(answers, steps):
            assert_grpc_ok(a.request_status, f"stream answer {a.meta_data.id}")
            outputs[seqid].append(output_value(a.raw_output[0]))
    return outputs


SEQ_BASE = {"http": 10_000, "grpc": 20_000, "grpc_stream": 30_000}


@pytest.mark.parametrize("mode", MODES)
def test_example_flow_simple_sequence(http, grpc_v1, mode):
    s1, s2 = SEQ_BASE[mode] + 1, SEQ_BASE[mode] + 2
    got = run_interleaved(
        mode, http, grpc_v1, "simple_sequence",
        {s1: [0] + EXAMPLE_VALUES, s2: [100] + [-v for v in EXAMPLE_VALUES]},
    )
    assert got[s1] == [1] + EXAMPLE_VALUES
    assert got[s2] == [101] + [-v for v in EXAMPLE_VALUES]


@pytest.mark.parametrize("mode", MODES)
def test_accumulator_running_sums(http, grpc_v1, mode):
    s1, s2, s3 = (SEQ_BASE[mode] + k for k in (11, 12, 13))
    seqs = {s1: [3, 4, 5, -2], s2: [10, 20], s3: [7, 0, 0, 1, 1]}
    got = run_interleaved(mode, http, grpc_v1, "simple_accumulator", seqs)
    for seqid, values in seqs.items():
        assert got[seqid] == [int(x) for x in np.cumsum(values)], seqid


@pytest.mark.parametrize("mode", MODES)
def test_start_and_end_in_one_request(http, grpc_v1, mode):
    seqid = SEQ_BASE[mode] + 21
    got = run_interleaved(mode, http, grpc_v1, "simple_accumulator", {seqid: [42]})
    assert got[seqid] == [42]


def test_http_unknown_sequence_without_start(http):
    r = http.infer("simple_sequence", header(5, 10_031, False, False), one(1))
    assert_http_error(r, INVALID_ARG)
    assert r.header.id == 5


def test_http_no_correlation_id_refused(http):
    r = http.infer("simple_sequence", header(6, 0, True, True), one(1))
    assert_http_error(r, INVALID_ARG)


def test_grpc_unknown_sequence_without_start(grpc_v1):
    resp = grpc_v1.infer("simple_sequence", header(7, 20_031, False, False), [one(1)])
    assert_grpc_error(resp.request_status, INVALID_ARG)
    assert resp.meta_data.id == 7
    assert len(resp.raw_output) == 0


def test_stream_error_mid_sequence_other_sequence_unaffected(grpc_v1):
    good, bad = 30_041, 30_042
    reqs = [
        infer_request("simple_accumulator", header(1, good, True, False), [one(5)]),
        infer_request("simple_accumulator", header(2, bad, False, False), [one(9)]),  # no START
        infer_request("simple_accumulator", header(3, good, False, True), [one(6)]),
    ]
    answers = grpc_v1.stream(reqs)
    assert [a.meta_data.id for a in answers] == [1, 2, 3]
    assert [a.request_status.code for a in answers] == [SUCCESS, INVALID_ARG, SUCCESS]
    assert output_value(answers[0].raw_output[0]) == 5
    assert len(answers[1].raw_output) == 0
    assert output_value(answers[2].raw_output[0]) == 11
