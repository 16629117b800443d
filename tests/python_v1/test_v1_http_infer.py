"""v1 HTTP inference (`POST /api/infer/<model>[/<version>][?format=binary]`)
as the TRTIS 1.11 client library sends it (v1-api-facts.md §3): the
`NV-InferRequest` header, the inputs back to back in the body, and the
answer's `NV-Status`, `NV-InferResponse`, raw outputs and trailing header.

Checks: bit-exact outputs of `simple` (INT32 add/sub; batch 1 and 3; binary
and text trailer), identity round-trips of every fixed-size datatype and of
TYPE_STRING (4-byte length prefixes, `batch_byte_size`), the response header
fields (model_name, model_version that ran, batch_size, id echoed, raw dims
without the batch dimension and batch_byte_size), the trailer equal to the
header, output selection and order, input order and default dims, model
versions, classification (labelled identity models, `simple`,
efficientnet_lite0; refused for STRING/BOOL/FP16), every request error
(400, NV-Status code, NV-InferResponse holding only the id, empty body, the
server still serving), malformed or missing NV-InferRequest, paths that do
not parse (400), wrong methods (405),
concurrent clients, gzip and deflate bodies (another coding refused), and v1
and v2 giving the same answer for the same
`simple` inputs.
"""

from __future__ import annotations

import gzip
import json
import zlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from v1client import (
    INVALID_ARG,
    NP_DTYPES,
    SUCCESS,
    UNAVAILABLE,
    assert_http_ok,
    assert_infer_error,
    HttpV1,
    check_request_status,
    one_line,
    raw,
    request_header,
    serialize_strings,
)
from v1repo import (
    CLASS_LABELS,
    EXAMPLES,
    IDENTITY_TYPES,
    INT_LABELS,
    SCORES,
    SERVER_ID,
    classes_of,
    distinct_simple_inputs,
    expected_classes,
    fixed_type_data,
    identity_model_name,
    simple_inputs,
)

RNG = np.random.default_rng(20240701)
FIXED_TYPES = [dt for dt, _ in IDENTITY_TYPES if dt != "BYTES"]
SIMPLE_IN = [("INPUT0", [16]), ("INPUT1", [16])]
BOTH_OUT = ["OUTPUT0", "OUTPUT1"]


def infer_simple(http, a, b, outputs=BOTH_OUT, id=0, binary=True, version=None):
    h = request_header(a.shape[0], SIMPLE_IN, outputs, id=id)
    return http.infer("simple", h, raw(a) + raw(b), binary=binary, version=version)


def check_simple_still_works(http):
    """After an error the server must go on serving."""
    a, b = simple_inputs(RNG, 1)
    r = infer_simple(http, a, b, id=999)
    assert_http_ok(r, "the request after an error")
    assert np.array_equal(r.array("OUTPUT0", "INT32", (1, 16)), a + b)


def check_raw_output(out, dims, batch_byte_size):
    assert out.HasField("raw"), f"output {out.name!r} without raw"
    assert list(out.raw.dims) == list(dims), f"{out.name}: raw.dims {list(out.raw.dims)} != {dims}"
    assert out.raw.batch_byte_size == batch_byte_size, (
        f"{out.name}: batch_byte_size {out.raw.batch_byte_size} != {batch_byte_size}"
    )
    assert len(out.batch_classes) == 0


# -- simple ----------------------------------------------------------------------


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "text"])
@pytest.mark.parametrize("batch", [1, 3])
def test_simple_sum_and_difference(http, batch, binary):
    a, b = simple_inputs(RNG, batch)
    r = infer_simple(http, a, b, id=40 + batch, binary=binary)
    assert_http_ok(r)
    check_request_status(r.nv_status, "infer")
    assert r.nv_status.server_id == SERVER_ID
    assert r.response.headers.get("content-type") == "application/octet-stream"

    h = r.header
    assert h.model_name == "simple"
    assert h.model_version == 1
    assert h.batch_size == batch
    assert h.id == 40 + batch
    assert [o.name for o in h.output] == BOTH_OUT
    for o in h.output:
        check_raw_output(o, [16], batch * 16 * 4)

    assert np.array_equal(r.array("OUTPUT0", "INT32", (batch, 16)), a + b)
    assert np.array_equal(r.array("OUTPUT1", "INT32", (batch, 16)), a - b)
    # The body ends with the whole header again, in the asked-for encoding.
    assert r.trailer_raw, "no trailing InferResponseHeader in the body"
    assert r.trailer == h, f"trailer {r.trailer} != NV-InferResponse {r.header_raw!r}"
    assert len(r.response.body) == 2 * batch * 64 + len(r.trailer_raw)


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
def test_compressed_body(http, coding):
    """A body sent with Content-Encoding gzip or deflate is decompressed (as
    the v2 API does); another coding is refused with NV-Status."""
    a, b = simple_inputs(RNG, 2)
    h = request_header(2, SIMPLE_IN, BOTH_OUT, id=77)
    body = raw(a) + raw(b)
    packed = gzip.compress(body) if coding == "gzip" else zlib.compress(body)
    r = http.infer("simple", h, packed, extra_headers={"Content-Encoding": coding})
    assert_http_ok(r, coding)
    assert np.array_equal(r.array("OUTPUT0", "INT32", (2, 16)), a + b)
    assert np.array_equal(r.array("OUTPUT1", "INT32", (2, 16)), a - b)

    r = http.infer("simple", h, body, extra_headers={"Content-Encoding": "br"})
    assert_infer_error(r, INVALID_ARG, "Unsupported Content-Encoding 'br'", id=77)
    # Garbage that claims to be gzip is a request error, not a crash.
    r = http.infer("simple", h, body, extra_headers={"Content-Encoding": "gzip"})
    assert r.status == 400, r.describe()
    check_simple_still_works(http)


def test_request_ids_increase(http):
    a, b = simple_inputs(RNG, 1)
    first = infer_simple(http, a, b)
    second = infer_simple(http, a, b)
    assert_http_ok(first)
    assert_http_ok(second)
    assert second.nv_status.request_id > first.nv_status.request_id > 0


def test_no_id_gives_id_zero(http):
    a, b = simple_inputs(RNG, 1)
    r = infer_simple(http, a, b, id=0)
    assert_http_ok(r)
    assert r.header.id == 0


def test_large_id_echoed(http):
    a, b = simple_inputs(RNG, 1)
    r = infer_simple(http, a, b, id=2**64 - 1)
    assert_http_ok(r)
    assert r.header.id == 2**64 - 1


def test_explicit_version_path(http):
    a, b = simple_inputs(RNG, 2)
    r = infer_simple(http, a, b, version=1, id=3)
    assert_http_ok(r)
    assert r.header.model_version == 1
    assert np.array_equal(r.array("OUTPUT1", "INT32", (2, 16)), a - b)


@pytest.mark.parametrize("version,ran", [(None, 2), (1, 1), (2, 2)])
def test_two_versions(http, version, ran):
    x = np.arange(6, dtype=np.int32).reshape(1, 6) * (ran + 10)
    h = request_header(1, [("INPUT0", [6])], ["OUTPUT0"], id=70 + ran)
    r = http.infer("two_versions", h, raw(x), version=version)
    assert_http_ok(r)
    assert r.header.model_version == ran
    assert r.header.model_name == "two_versions"
    assert np.array_equal(r.array("OUTPUT0", "INT32", (1, 6)), x)


# -- datatypes --------------------------------------------------------------------


@pytest.mark.parametrize("datatype", FIXED_TYPES)
def test_identity_round_trip(http, datatype):
    x = fixed_type_data(RNG, datatype, (2, 5))
    h = request_header(2, [("INPUT0", [5])], ["OUTPUT0"], id=8)
    r = http.infer(identity_model_name(datatype), h, raw(x))
    assert_http_ok(r, datatype)
    o = r.out("OUTPUT0")
    itemsize = np.dtype(NP_DTYPES[datatype]).itemsize
    check_raw_output(o, [5], 2 * 5 * itemsize)
    assert r.outputs["OUTPUT0"] == raw(x), f"{datatype} not returned bit-exactly"
    assert r.trailer == r.header


STRINGS = [
    b"",
    b"hello",
    "\u00fcn\u00efc\u00f6de \u2713".encode("utf-8"),
    b"\x00\xff\x01 binary \x00",
    b"x" * 300,
    b"last",
]


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "text"])
def test_string_identity(http, binary):
    body = serialize_strings(STRINGS)
    h = request_header(2, [("INPUT0", [3], len(body))], ["OUTPUT0"], id=21)
    r = http.infer("simple_identity", h, body, binary=binary)
    assert_http_ok(r)
    o = r.out("OUTPUT0")
    check_raw_output(o, [3], len(body))
    assert r.outputs["OUTPUT0"] == body
    assert r.strings("OUTPUT0") == STRINGS
    assert r.trailer == r.header


def test_string_identity_one_element(http):
    body = serialize_strings([b"only"])
    h = request_header(1, [("INPUT0", [1], len(body))], ["OUTPUT0"])
    r = http.infer("identity_bytes", h, body)
    assert_http_ok(r)
    assert r.strings("OUTPUT0") == [b"only"]


# -- outputs and inputs -------------------------------------------------------------


def test_only_requested_output(http):
    a, b = simple_inputs(RNG, 2)
    r = infer_simple(http, a, b, outputs=["OUTPUT1"], id=9)
    assert_http_ok(r)
    assert [o.name for o in r.header.output] == ["OUTPUT1"]
    assert np.array_equal(r.array("OUTPUT1", "INT32", (2, 16)), a - b)
    assert len(r.response.body) == 2 * 64 + len(r.trailer_raw)
    assert r.trailer == r.header


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "text"])
def test_no_output_requested_none_returned(http, binary):
    a, b = simple_inputs(RNG, 1)
    r = infer_simple(http, a, b, outputs=[], id=10, binary=binary)
    assert_http_ok(r)
    assert len(r.header.output) == 0
    assert r.header.model_name == "simple"
    assert r.header.batch_size == 1
    # The body is only the trailing header.
    assert r.trailer == r.header


def test_output_order_follows_request(http):
    a, b = simple_inputs(RNG, 2)
    r = infer_simple(http, a, b, outputs=["OUTPUT1", "OUTPUT0"])
    assert_http_ok(r)
    assert [o.name for o in r.header.output] == ["OUTPUT1", "OUTPUT0"]
    # The body follows the header's order: OUTPUT1's bytes first.
    assert r.response.body[: 2 * 64] == raw(a - b)
    assert r.response.body[2 * 64 : 4 * 64] == raw(a + b)


def test_body_follows_header_input_order(http):
    a, b = simple_inputs(RNG, 2)
    h = request_header(2, [("INPUT1", [16]), ("INPUT0", [16])], BOTH_OUT)
    r = http.infer("simple", h, raw(b) + raw(a))
    assert_http_ok(r)
    assert np.array_equal(r.array("OUTPUT0", "INT32", (2, 16)), a + b)
    assert np.array_equal(r.array("OUTPUT1", "INT32", (2, 16)), a - b)


def test_input_without_dims_takes_config_dims(http):
    a, b = simple_inputs(RNG, 2)
    h = request_header(2, ["INPUT0", "INPUT1"], BOTH_OUT)
    r = http.infer("simple", h, raw(a) + raw(b))
    assert_http_ok(r)
    assert np.array_equal(r.array("OUTPUT0", "INT32", (2, 16)), a + b)
    check_raw_output(r.out("OUTPUT0"), [16], 2 * 64)


def test_max_batch_size(http):
    a, b = simple_inputs(RNG, 8)
    r = infer_simple(http, a, b)
    assert_http_ok(r)
    assert r.header.batch_size == 8
    assert np.array_equal(r.array("OUTPUT1", "INT32", (8, 16)), a - b)


# -- classification ----------------------------------------------------------------


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "text"])
@pytest.mark.parametrize("count", [1, 2, 4, 10])
def test_classification_labelled_identity(http, count, binary):
    h = request_header(2, [("INPUT0", [4])], [("OUTPUT0", count)], id=31)
    r = http.infer("identity_class", h, raw(SCORES), binary=binary)
    assert_http_ok(r)
    o = r.out("OUTPUT0")
    want = [expected_classes(row, count, CLASS_LABELS) for row in SCORES]
    assert classes_of(o) == want
    # No body bytes for a classification output: the body is the trailer,
    # which holds the classes too.
    assert r.outputs == {}
    assert r.trailer == r.header
    assert classes_of(r.trailer.output[0]) == want


def test_classification_int32_labels(http):
    x = np.array([[3, -7, 12, 0, 5, 11], [-1, -2, -3, -4, -5, -6]], dtype=np.int32)
    h = request_header(2, [("INPUT0", [6])], [("OUTPUT0", 3)])
    r = http.infer("identity_class_i32", h, raw(x))
    assert_http_ok(r)
    assert classes_of(r.out("OUTPUT0")) == [
        [(2, 12.0, "two"), (5, 11.0, "five"), (4, 5.0, "four")],
        [(0, -1.0, "zero"), (1, -2.0, "one"), (2, -3.0, "two")],
    ]
    assert classes_of(r.out("OUTPUT0")) == [expected_classes(row, 3, INT_LABELS) for row in x]


def test_classification_with_raw_output_no_labels(http):
    a, b = distinct_simple_inputs(2)
    r = infer_simple(http, a, b, outputs=[("OUTPUT0", 3), "OUTPUT1"], id=32)
    assert_http_ok(r)
    assert [o.name for o in r.header.output] == ["OUTPUT0", "OUTPUT1"]
    assert classes_of(r.out("OUTPUT0")) == [expected_classes(row, 3) for row in a + b]
    # Only OUTPUT1 takes body bytes.
    assert list(r.outputs) == ["OUTPUT1"]
    assert np.array_equal(r.array("OUTPUT1", "INT32", (2, 16)), a - b)
    assert r.response.body[: 2 * 64] == raw(a - b)
    check_raw_output(r.out("OUTPUT1"), [16], 2 * 64)
    assert r.trailer == r.header


def test_classification_efficientnet_labels(http):
    labels = (EXAMPLES / "efficientnet_lite0" / "labels.txt").read_text().splitlines()
    image = np.random.default_rng(7).uniform(-1.0, 1.0, size=(1, 3, 224, 224)).astype(np.float32)
    h = request_header(1, [("input", [3, 224, 224])], ["output"])
    scores = http.infer("efficientnet_lite0", h, raw(image))
    assert_http_ok(scores)
    check_raw_output(scores.out("output"), [1000], 4000)
    flat = scores.array("output", "FP32")

    h = request_header(1, [("input", [3, 224, 224])], [("output", 5)], id=33)
    r = http.infer("efficientnet_lite0", h, raw(image))
    assert_http_ok(r)
    (entry,) = classes_of(r.out("output"))
    assert len(entry) == 5
    values = [v for _, v, _ in entry]
    assert values == sorted(values, reverse=True)
    for idx, value, label in entry:
        assert value == float(flat[idx]), (idx, value, flat[idx])
        assert label == labels[idx]
    assert {i for i, _, _ in entry} == set(np.argsort(-flat, kind="stable")[:5].tolist())
    assert r.outputs == {}
    assert classes_of(r.trailer.output[0]) == [entry]


@pytest.mark.parametrize("datatype", ["FP16", "BOOL", "BYTES"])
def test_classification_refused_for_type(http, datatype):
    if datatype == "BYTES":
        body = serialize_strings([b"a", b"b"])
        h = request_header(1, [("INPUT0", [2], len(body))], [("OUTPUT0", 1)], id=34)
    else:
        x = fixed_type_data(RNG, datatype, (1, 2))
        body = raw(x)
        h = request_header(1, [("INPUT0", [2])], [("OUTPUT0", 1)], id=34)
    r = http.infer(identity_model_name(datatype), h, body)
    assert_infer_error(r, INVALID_ARG, id=34)
    check_simple_still_works(http)


# -- errors -----------------------------------------------------------------------


def _simple_body(batch=1):
    a, b = simple_inputs(RNG, batch)
    return raw(a) + raw(b)


# name -> (model, version, header, body, code, message fragments)
ERRORS = {
    "unknown_model": (
        "no_such_model", None, request_header(1, SIMPLE_IN, BOTH_OUT, id=101), _simple_body(),
        UNAVAILABLE, (),
    ),
    "unknown_version": (
        "simple", 7, request_header(1, SIMPLE_IN, BOTH_OUT, id=102), _simple_body(),
        UNAVAILABLE, (),
    ),
    "body_too_short": (
        "simple", None, request_header(1, SIMPLE_IN, BOTH_OUT, id=103), _simple_body()[:-4],
        INVALID_ARG, ("unexpected size for input",),
    ),
    "body_too_short_second_input_missing": (
        "simple", None, request_header(1, SIMPLE_IN, BOTH_OUT, id=104), _simple_body()[:64],
        INVALID_ARG, ("unexpected size for input",),
    ),
    "body_too_long": (
        "simple", None, request_header(1, SIMPLE_IN, BOTH_OUT, id=105), _simple_body() + b"\0\0\0\0",
        INVALID_ARG, ("unexpected additional input data",),
    ),
    "unknown_output": (
        "simple", None, request_header(1, SIMPLE_IN, ["OUTPUT0", "OUTPUT9"], id=106), _simple_body(),
        INVALID_ARG, (),
    ),
    "unknown_input": (
        "simple", None, request_header(1, [("INPUT0", [16]), ("INPUT9", [16])], BOTH_OUT, id=107),
        _simple_body(), INVALID_ARG, (),
    ),
    "missing_input": (
        "simple", None, request_header(1, [("INPUT0", [16])], BOTH_OUT, id=108), _simple_body()[:64],
        INVALID_ARG, (),
    ),
    "batch_size_zero": (
        "simple", None, request_header(0, SIMPLE_IN, BOTH_OUT, id=109), b"",
        INVALID_ARG, (),
    ),
    "batch_size_over_max": (
        "simple", None, request_header(9, SIMPLE_IN, BOTH_OUT, id=110), _simple_body(9),
        INVALID_ARG, (),
    ),
    "wrong_dims": (
        "simple", None, request_header(2, [("INPUT0", [8]), ("INPUT1", [8])], BOTH_OUT, id=111),
        _simple_body(1), INVALID_ARG, (),
    ),
    "wrong_rank": (
        "simple", None, request_header(1, [("INPUT0", [4, 4]), ("INPUT1", [4, 4])], BOTH_OUT, id=112),
        _simple_body(1), INVALID_ARG, (),
    ),
    "string_without_batch_byte_size": (
        "simple_identity", None, request_header(1, [("INPUT0", [2])], ["OUTPUT0"], id=113),
        serialize_strings([b"ab", b"c"]), INVALID_ARG, (),
    ),
}


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "text"])
@pytest.mark.parametrize("case", list(ERRORS))
def test_request_error(http, case, binary):
    model, version, header, body, code, fragments = ERRORS[case]
    r = http.infer(model, header, body, version=version, binary=binary)
    assert_infer_error(r, code, *fragments, id=header.id)
    check_request_status(r.nv_status, case)
    check_simple_still_works(http)


@pytest.mark.parametrize(
    "text",
    [
        'batch_size: 1 input { name: "INPUT0" dims: 16',  # unbalanced brace
        "batch_size: one",
        'batch_size: 1 input { name: INPUT0 } }',
    ],
)
def test_malformed_infer_request_header(http, text):
    r = http.infer("simple", None, _simple_body(), raw_header=text)
    assert r.status == 400, f"malformed NV-InferRequest: {r.describe()}"
    if r.nv_status is not None:
        assert r.nv_status.code != SUCCESS, r.describe()
    check_simple_still_works(http)


def test_missing_infer_request_header(http):
    r = http.infer("simple", None, _simple_body(), omit_header=True)
    assert r.status == 400, f"no NV-InferRequest: {r.describe()}"
    if r.nv_status is not None:
        assert r.nv_status.code != SUCCESS, r.describe()
    check_simple_still_works(http)


@pytest.mark.parametrize(
    "path",
    ["/api/infer/simple/latest", "/api/infer/simple/1/extra", "/api/infer/", "/api/bogus"],
)
def test_unparsable_path(http, path):
    # v1-api-facts §1: a path that does not match is a bare 400.
    h = request_header(1, SIMPLE_IN, BOTH_OUT, id=120)
    r = http.post(path, _simple_body(), {"NV-InferRequest": one_line(h), "Content-Type": "application/octet-stream"})
    assert r.status == 400, f"POST {path}: {r.describe()}"
    if r.nv_status is not None:
        assert r.nv_status.code != SUCCESS, r.describe()
    check_simple_still_works(http)


@pytest.mark.parametrize(
    "method,path",
    [
        ("GET", "/api/infer/simple"),
        ("PUT", "/api/infer/simple"),
        ("POST", "/api/status"),
        ("POST", "/api/health/live"),
        ("GET", "/api/modelcontrol/load/simple"),
    ],
)
def test_wrong_method(http, method, path):
    r = http.request(method, path)
    assert r.status == 405, f"{method} {path}: {r.describe()}"


def test_concurrent_connections(http, server):
    """Eight clients, each on its own keep-alive connection, 15 requests
    each, batch sizes 1 to 8: every answer is its own request's."""

    def worker(k):
        rng = np.random.default_rng(1000 + k)
        c = HttpV1(server.host, server.port)
        try:
            for i in range(15):
                batch = 1 + (k + i) % 8
                a, b = simple_inputs(rng, batch)
                r = infer_simple(c, a, b, id=k * 100 + i)
                assert_http_ok(r, f"client {k} request {i}")
                assert r.header.id == k * 100 + i
                assert r.header.batch_size == batch
                assert r.outputs["OUTPUT0"] == raw(a + b)
                assert r.outputs["OUTPUT1"] == raw(a - b)
        finally:
            c.close()
        return k

    with ThreadPoolExecutor(8) as pool:
        assert sorted(pool.map(worker, range(8))) == list(range(8))


# -- v1 and v2 agree ------------------------------------------------------------------


def test_v1_and_v2_give_the_same_outputs(http, server):
    a, b = simple_inputs(RNG, 3)
    r = infer_simple(http, a, b)
    assert_http_ok(r)

    doc = {
        "inputs": [
            {"name": "INPUT0", "shape": [3, 16], "datatype": "INT32", "data": a.reshape(-1).tolist()},
            {"name": "INPUT1", "shape": [3, 16], "datatype": "INT32", "data": b.reshape(-1).tolist()},
        ],
        "outputs": [{"name": "OUTPUT0"}, {"name": "OUTPUT1"}],
    }
    status, _, body = server.post_json("/v2/models/simple/infer", doc)
    assert status == 200, body[:500]
    v2 = {o["name"]: o for o in json.loads(body)["outputs"]}
    for name in BOTH_OUT:
        assert v2[name]["shape"] == [3, 16]
        assert v2[name]["datatype"] == "INT32"
        v1 = r.array(name, "INT32", (3, 16))
        assert np.array_equal(np.array(v2[name]["data"], dtype=np.int32).reshape(3, 16), v1), name
