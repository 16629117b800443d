"""v1 gRPC service `nvidia.inferenceserver.GRPCService` on the main server,
through the stub generated in the tensorrtserver 1.11.0 wheel (v1-api-facts
.md §4). Every RPC must complete with gRPC status OK; failures travel in
`request_status` only.

Checks: `Health` (live, ready, unknown mode -> UNKNOWN); `Status` (all
models, one, unknown -> INVALID_ARG; statistics per batch size); `Infer`
(bit-exact `simple`, every fixed-size datatype, TYPE_STRING; meta_data
fields; raw_output aligned with meta_data.output, empty for a
classification output; output selection and order; versions, -1 = latest;
every request error with meta_data holding only the id and no raw_output);
`StreamInfer` (several models and a failing request on one call: one answer
per request, in order, ids echoed, the call ending OK after the half-close);
`Repository(index)`; 0.12's `Profile` (UNSUPPORTED); gRPC and HTTP giving
the same answer.
"""

from __future__ import annotations

import numpy as np
import pytest

from trtis_harness import wait_for
from v1client import (
    INVALID_ARG,
    NP_DTYPES,
    SUCCESS,
    UNAVAILABLE,
    UNKNOWN,
    UNSUPPORTED,
    api_pb2,
    assert_grpc_error,
    assert_grpc_ok,
    assert_http_ok,
    check_request_status,
    deserialize_strings,
    infer_request,
    profile_request,
    profile_rpc,
    raw,
    request_header,
    serialize_strings,
    server_status_pb2,
)
from v1repo import (
    CLASS_LABELS,
    IDENTITY_TYPES,
    SCORES,
    SERVER_ID,
    classes_of,
    distinct_simple_inputs,
    expected_classes,
    fixed_type_data,
    identity_model_name,
    simple_inputs,
)

RNG = np.random.default_rng(20240703)
FIXED_TYPES = [dt for dt, _ in IDENTITY_TYPES if dt != "BYTES"]
SIMPLE_IN = [("INPUT0", [16]), ("INPUT1", [16])]
BOTH_OUT = ["OUTPUT0", "OUTPUT1"]


def infer_simple(grpc_v1, a, b, outputs=BOTH_OUT, id=0, version=-1):
    h = request_header(a.shape[0], SIMPLE_IN, outputs, id=id)
    return grpc_v1.infer("simple", h, [raw(a), raw(b)], version=version)


def as_int32(data: bytes, shape) -> np.ndarray:
    return np.frombuffer(data, dtype="<i4").reshape(shape)


def check_failed(resp, code, *fragments, id):
    msg = assert_grpc_error(resp.request_status, code, *fragments)
    assert resp.meta_data == api_pb2.InferResponseHeader(id=id), (
        f"meta_data of a failure should hold only id {id}: {resp.meta_data}"
    )
    assert len(resp.raw_output) == 0
    return msg


# -- health, status ---------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["live", "ready"])
def test_health(grpc_v1, mode):
    resp = grpc_v1.health(mode)
    assert_grpc_ok(resp.request_status, mode)
    check_request_status(resp.request_status, mode)
    assert resp.request_status.server_id == SERVER_ID
    assert resp.health is True


def test_health_unknown_mode(grpc_v1):
    resp = grpc_v1.health("bogus")
    assert_grpc_error(resp.request_status, UNKNOWN)
    assert resp.health is False


def test_status_all(grpc_v1, v1_repo):
    resp = grpc_v1.status()
    assert_grpc_ok(resp.request_status)
    check_request_status(resp.request_status, "status")
    st = resp.server_status
    assert st.id == SERVER_ID
    assert st.version
    assert st.ready_state == server_status_pb2.ServerReadyState.Value("SERVER_READY")
    assert st.uptime_ns > 0
    assert set(st.model_status) == {p.name for p in v1_repo.iterdir() if p.is_dir()}
    simple = st.model_status["simple"]
    assert simple.config.platform == "onnxruntime_onnx"
    assert simple.version_status[1].ready_state == server_status_pb2.ModelReadyState.Value("MODEL_READY")


def test_status_one_model(grpc_v1):
    resp = grpc_v1.status("identity_class")
    assert_grpc_ok(resp.request_status)
    assert list(resp.server_status.model_status) == ["identity_class"]
    config = resp.server_status.model_status["identity_class"].config
    assert config.platform == "identity"
    assert config.output[0].label_filename == "labels.txt"


def test_status_unknown_model(grpc_v1):
    resp = grpc_v1.status("no_such_model")
    assert_grpc_error(resp.request_status, INVALID_ARG)


def test_status_and_http_status_agree(grpc_v1, http):
    g = grpc_v1.status("simple").server_status
    r, h = http.status("simple", fmt="binary")
    assert_http_ok(r)
    assert g.model_status["simple"].config == h.model_status["simple"].config
    assert g.id == h.id and g.version == h.version


def test_status_statistics_by_batch_size(grpc_v1):
    def stats():
        resp = grpc_v1.status("stats_grpc")
        assert_grpc_ok(resp.request_status)
        return resp.server_status.model_status["stats_grpc"].version_status[1]

    for batch in (2, 1, 2, 2):
        x = np.ones((batch, 4), dtype=np.float32) * batch
        resp = grpc_v1.infer("stats_grpc", request_header(batch, [("INPUT0", [4])], ["OUTPUT0"]), [raw(x)])
        assert_grpc_ok(resp.request_status)
    wait_for(lambda: stats().model_inference_count >= 7, timeout=5.0)
    vs = stats()
    assert vs.model_inference_count == 7
    assert vs.model_execution_count == 4
    assert vs.last_inference_timestamp_milliseconds > 0
    assert sorted(vs.infer_stats) == [1, 2]
    assert vs.infer_stats[1].success.count == 1
    assert vs.infer_stats[2].success.count == 3
    assert vs.infer_stats[2].compute.count == 3
    assert vs.infer_stats[2].queue.count == 3


# -- infer -----------------------------------------------------------------------------------


@pytest.mark.parametrize("batch", [1, 3])
def test_simple_sum_and_difference(grpc_v1, batch):
    a, b = simple_inputs(RNG, batch)
    resp = infer_simple(grpc_v1, a, b, id=50 + batch)
    assert_grpc_ok(resp.request_status)
    check_request_status(resp.request_status, "infer")
    m = resp.meta_data
    assert m.model_name == "simple"
    assert m.model_version == 1
    assert m.batch_size == batch
    assert m.id == 50 + batch
    assert [o.name for o in m.output] == BOTH_OUT
    for o in m.output:
        assert list(o.raw.dims) == [16]
        assert o.raw.batch_byte_size == batch * 64
    assert len(resp.raw_output) == 2
    assert np.array_equal(as_int32(resp.raw_output[0], (batch, 16)), a + b)
    assert np.array_equal(as_int32(resp.raw_output[1], (batch, 16)), a - b)


def test_explicit_version(grpc_v1):
    a, b = simple_inputs(RNG, 1)
    resp = infer_simple(grpc_v1, a, b, version=1)
    assert_grpc_ok(resp.request_status)
    assert resp.meta_data.model_version == 1


@pytest.mark.parametrize("version,ran", [(-1, 2), (1, 1), (2, 2)])
def test_two_versions(grpc_v1, version, ran):
    x = np.arange(3, dtype=np.int32).reshape(1, 3) + ran
    resp = grpc_v1.infer("two_versions", request_header(1, [("INPUT0", [3])], ["OUTPUT0"]), [raw(x)], version=version)
    assert_grpc_ok(resp.request_status)
    assert resp.meta_data.model_version == ran
    assert resp.raw_output[0] == raw(x)


@pytest.mark.parametrize("datatype", FIXED_TYPES)
def test_identity_round_trip(grpc_v1, datatype):
    x = fixed_type_data(RNG, datatype, (3, 4))
    resp = grpc_v1.infer(identity_model_name(datatype), request_header(3, [("INPUT0", [4])], ["OUTPUT0"]), [raw(x)])
    assert_grpc_ok(resp.request_status, datatype)
    o = resp.meta_data.output[0]
    assert list(o.raw.dims) == [4]
    assert o.raw.batch_byte_size == 12 * np.dtype(NP_DTYPES[datatype]).itemsize
    assert resp.raw_output[0] == raw(x)


def test_string_identity(grpc_v1):
    items = [b"", b"grpc", "\u00e9t\u00e9".encode(), b"\x00\x01\x02", b"y" * 1000, b"z"]
    data = serialize_strings(items)
    h = request_header(3, [("INPUT0", [2], len(data))], ["OUTPUT0"], id=22)
    resp = grpc_v1.infer("simple_identity", h, [data])
    assert_grpc_ok(resp.request_status)
    o = resp.meta_data.output[0]
    assert list(o.raw.dims) == [2]
    assert o.raw.batch_byte_size == len(data)
    assert resp.raw_output[0] == data
    assert deserialize_strings(resp.raw_output[0]) == items


def test_only_requested_output_and_order(grpc_v1):
    a, b = simple_inputs(RNG, 2)
    resp = infer_simple(grpc_v1, a, b, outputs=["OUTPUT1"])
    assert_grpc_ok(resp.request_status)
    assert [o.name for o in resp.meta_data.output] == ["OUTPUT1"]
    assert len(resp.raw_output) == 1
    assert resp.raw_output[0] == raw(a - b)

    resp = infer_simple(grpc_v1, a, b, outputs=["OUTPUT1", "OUTPUT0"])
    assert_grpc_ok(resp.request_status)
    assert [o.name for o in resp.meta_data.output] == ["OUTPUT1", "OUTPUT0"]
    assert resp.raw_output[0] == raw(a - b)
    assert resp.raw_output[1] == raw(a + b)


def test_no_output_requested(grpc_v1):
    a, b = simple_inputs(RNG, 1)
    resp = infer_simple(grpc_v1, a, b, outputs=[], id=3)
    assert_grpc_ok(resp.request_status)
    assert len(resp.meta_data.output) == 0
    assert len(resp.raw_output) == 0
    assert resp.meta_data.model_name == "simple"
    assert resp.meta_data.id == 3


def test_raw_input_follows_header_order(grpc_v1):
    a, b = simple_inputs(RNG, 1)
    h = request_header(1, [("INPUT1", [16]), ("INPUT0", [16])], BOTH_OUT)
    resp = grpc_v1.infer("simple", h, [raw(b), raw(a)])
    assert_grpc_ok(resp.request_status)
    assert resp.raw_output[0] == raw(a + b)
    assert resp.raw_output[1] == raw(a - b)


def test_input_without_dims(grpc_v1):
    a, b = simple_inputs(RNG, 2)
    resp = grpc_v1.infer("simple", request_header(2, ["INPUT0", "INPUT1"], ["OUTPUT0"]), [raw(a), raw(b)])
    assert_grpc_ok(resp.request_status)
    assert resp.raw_output[0] == raw(a + b)


@pytest.mark.parametrize("count", [1, 3, 4, 9])
def test_classification(grpc_v1, count):
    h = request_header(2, [("INPUT0", [4])], [("OUTPUT0", count)], id=35)
    resp = grpc_v1.infer("identity_class", h, [raw(SCORES)])
    assert_grpc_ok(resp.request_status)
    o = resp.meta_data.output[0]
    assert classes_of(o) == [expected_classes(row, count, CLASS_LABELS) for row in SCORES]
    # raw_output keeps its position, empty for the classification output.
    assert list(resp.raw_output) == [b""]


def test_classification_and_raw(grpc_v1):
    a, b = distinct_simple_inputs(3)
    resp = infer_simple(grpc_v1, a, b, outputs=["OUTPUT1", ("OUTPUT0", 2)])
    assert_grpc_ok(resp.request_status)
    assert [o.name for o in resp.meta_data.output] == ["OUTPUT1", "OUTPUT0"]
    assert len(resp.raw_output) == 2
    assert resp.raw_output[0] == raw(a - b)
    assert resp.raw_output[1] == b""
    assert classes_of(resp.meta_data.output[1]) == [expected_classes(row, 2) for row in a + b]


@pytest.mark.parametrize("datatype", ["FP16", "BOOL", "BYTES"])
def test_classification_refused_for_type(grpc_v1, datatype):
    if datatype == "BYTES":
        data = serialize_strings([b"a"])
        h = request_header(1, [("INPUT0", [1], len(data))], [("OUTPUT0", 1)], id=36)
    else:
        data = raw(fixed_type_data(RNG, datatype, (1, 2)))
        h = request_header(1, [("INPUT0", [2])], [("OUTPUT0", 1)], id=36)
    resp = grpc_v1.infer(identity_model_name(datatype), h, [data])
    check_failed(resp, INVALID_ARG, id=36)


def _ok_inputs(batch=1):
    a, b = simple_inputs(RNG, batch)
    return [raw(a), raw(b)]


# name -> (model, version, header, raw_input, code)
ERRORS = {
    "unknown_model": ("no_such_model", -1, request_header(1, SIMPLE_IN, BOTH_OUT, id=201), _ok_inputs(), UNAVAILABLE),
    "unknown_version": ("simple", 7, request_header(1, SIMPLE_IN, BOTH_OUT, id=202), _ok_inputs(), UNAVAILABLE),
    "raw_input_too_short": (
        "simple", -1, request_header(1, SIMPLE_IN, BOTH_OUT, id=203), [_ok_inputs()[0], b"\0" * 60], INVALID_ARG,
    ),
    "raw_input_too_long": (
        "simple", -1, request_header(1, SIMPLE_IN, BOTH_OUT, id=204), [_ok_inputs()[0], b"\0" * 68], INVALID_ARG,
    ),
    "raw_input_missing": ("simple", -1, request_header(1, SIMPLE_IN, BOTH_OUT, id=205), _ok_inputs()[:1], INVALID_ARG),
    "raw_input_extra": (
        "simple", -1, request_header(1, SIMPLE_IN, BOTH_OUT, id=206), _ok_inputs() + [b"\0" * 64], INVALID_ARG,
    ),
    "unknown_output": (
        "simple", -1, request_header(1, SIMPLE_IN, ["OUTPUT7"], id=207), _ok_inputs(), INVALID_ARG,
    ),
    "unknown_input": (
        "simple", -1, request_header(1, [("INPUT0", [16]), ("INPUT5", [16])], BOTH_OUT, id=208), _ok_inputs(),
        INVALID_ARG,
    ),
    "missing_input": (
        "simple", -1, request_header(1, [("INPUT0", [16])], BOTH_OUT, id=209), _ok_inputs()[:1], INVALID_ARG,
    ),
    "batch_size_zero": ("simple", -1, request_header(0, SIMPLE_IN, BOTH_OUT, id=210), [b"", b""], INVALID_ARG),
    "batch_size_over_max": (
        "simple", -1, request_header(9, SIMPLE_IN, BOTH_OUT, id=211), _ok_inputs(9), INVALID_ARG,
    ),
    "wrong_dims": (
        "simple", -1, request_header(1, [("INPUT0", [8]), ("INPUT1", [8])], BOTH_OUT, id=212),
        [b"\0" * 32, b"\0" * 32], INVALID_ARG,
    ),
    "string_without_batch_byte_size": (
        "simple_identity", -1, request_header(1, [("INPUT0", [1])], ["OUTPUT0"], id=213),
        [serialize_strings([b"abc"])], INVALID_ARG,
    ),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_request_error(grpc_v1, case):
    model, version, header, inputs, code = ERRORS[case]
    resp = grpc_v1.infer(model, header, inputs, version=version)
    check_failed(resp, code, id=header.id)
    # The server goes on.
    a, b = simple_inputs(RNG, 1)
    resp = infer_simple(grpc_v1, a, b)
    assert_grpc_ok(resp.request_status, "the request after an error")
    assert resp.raw_output[0] == raw(a + b)


# -- streaming ------------------------------------------------------------------------------


def test_stream_infer_mixed_models_and_an_error(grpc_v1):
    a, b = simple_inputs(RNG, 2)
    f = np.array([[0.5, -1.5, 2.0]], dtype=np.float32)
    strings = serialize_strings([b"stream", b"ok"])
    reqs = [
        infer_request("simple", request_header(2, SIMPLE_IN, BOTH_OUT, id=1), [raw(a), raw(b)]),
        infer_request("no_such_model", request_header(1, SIMPLE_IN, BOTH_OUT, id=2), _ok_inputs()),
        infer_request("identity_fp32", request_header(1, [("INPUT0", [3])], ["OUTPUT0"], id=3), [raw(f)]),
        infer_request("simple", request_header(1, SIMPLE_IN, BOTH_OUT, id=4), [raw(a[:1]), b"\0" * 8]),
        infer_request(
            "simple_identity", request_header(1, [("INPUT0", [2], len(strings))], ["OUTPUT0"], id=5), [strings]
        ),
        infer_request("identity_class", request_header(2, [("INPUT0", [4])], [("OUTPUT0", 2)], id=6), [raw(SCORES)]),
    ]
    answers = grpc_v1.stream(reqs)
    assert [x.meta_data.id for x in answers] == [1, 2, 3, 4, 5, 6]
    assert [x.request_status.code for x in answers] == [SUCCESS, UNAVAILABLE, SUCCESS, INVALID_ARG, SUCCESS, SUCCESS]
    assert answers[0].meta_data.model_name == "simple"
    assert answers[0].raw_output[0] == raw(a + b)
    assert answers[0].raw_output[1] == raw(a - b)
    check_failed(answers[1], UNAVAILABLE, id=2)
    assert answers[2].meta_data.model_name == "identity_fp32"
    assert answers[2].raw_output[0] == raw(f)
    check_failed(answers[3], INVALID_ARG, id=4)
    assert deserialize_strings(answers[4].raw_output[0]) == [b"stream", b"ok"]
    assert classes_of(answers[5].meta_data.output[0]) == [expected_classes(r, 2, CLASS_LABELS) for r in SCORES]
    assert list(answers[5].raw_output) == [b""]


def test_stream_many_requests_in_order(grpc_v1):
    reqs, want = [], []
    for i in range(1, 41):
        x = np.full((1, 5), i, dtype=np.int32)
        reqs.append(infer_request("identity_int32", request_header(1, [("INPUT0", [5])], ["OUTPUT0"], id=i), [raw(x)]))
        want.append(raw(x))
    answers = grpc_v1.stream(reqs)
    assert [x.meta_data.id for x in answers] == list(range(1, 41))
    assert all(x.request_status.code == SUCCESS for x in answers)
    assert [x.raw_output[0] for x in answers] == want


def test_stream_empty(grpc_v1):
    assert grpc_v1.stream([]) == []


# -- repository, profile ------------------------------------------------------------------------


def test_repository_index(grpc_v1, v1_repo):
    resp = grpc_v1.repository_index()
    assert_grpc_ok(resp.request_status)
    names = [m.name for m in resp.index.models]
    assert sorted(names) == sorted(p.name for p in v1_repo.iterdir() if p.is_dir())


@pytest.mark.parametrize("cmd,code", [("start", UNSUPPORTED), ("stop", UNSUPPORTED), ("bogus", INVALID_ARG)])
def test_profile(grpc_channel, cmd, code):
    import grpc

    try:
        resp = profile_rpc(grpc_channel)(profile_request(cmd), timeout=30)
    except grpc.RpcError as e:
        pytest.fail(f"Profile ended with gRPC status {e.code().name}: {e.details()!r}")
    assert_grpc_error(resp.request_status, code)


# -- gRPC and HTTP agree --------------------------------------------------------------------------


def test_grpc_and_http_agree(grpc_v1, http):
    a, b = simple_inputs(RNG, 4)
    g = infer_simple(grpc_v1, a, b, id=77)
    h = http.infer("simple", request_header(4, SIMPLE_IN, BOTH_OUT, id=77), raw(a) + raw(b))
    assert_grpc_ok(g.request_status)
    assert_http_ok(h)
    assert g.meta_data == h.header
    assert [g.raw_output[0], g.raw_output[1]] == [h.outputs["OUTPUT0"], h.outputs["OUTPUT1"]]
