"""v1 HTTP control endpoints (and the default server id, "triton"):

  * model control, `POST /api/modelcontrol/load|unload/<model>`: with
    `--model-control-mode explicit` a load makes the model MODEL_READY in
    the status and inferable, an unload makes inference fail with
    UNAVAILABLE; without explicit mode both are refused (400 UNAVAILABLE);
  * the repository index, `GET /api/repository/index` (text and
    `?format=binary` ModelRepositoryIndex): every model directory, loaded
    or not;
  * 0.12's profiler, `GET /api/profile?cmd=...`: 400 UNSUPPORTED (no GPU
    profiler), 400 INVALID_ARG for an unknown command;
  * system shared memory, `/api/sharedmemorycontrol/register/<name>/<key>/
    <offset>/<byte_size>` (the key keeps its leading `/`), `unregister/
    <name>`, `unregisterall`, `status` (SharedMemoryStatus, text or binary),
    on a server with `--allow-client-shm`: inputs read from and outputs
    written to registered regions (no body bytes for them), bad ranges
    refused with INVALID_ARG; registration refused without the flag.
"""

from __future__ import annotations

import numpy as np
import pytest

from v1client import (
    INVALID_ARG,
    SUCCESS,
    UNAVAILABLE,
    UNSUPPORTED,
    HttpV1,
    assert_http_error,
    assert_http_ok,
    assert_infer_error,
    check_request_status,
    parse_binary,
    parse_text,
    raw,
    request_header,
    serialize_strings,
    server_status_pb2,
)
from v1repo import simple_inputs

RNG = np.random.default_rng(20240702)
ModelReadyState = server_status_pb2.ModelReadyState
SIMPLE_IN = [("INPUT0", [16]), ("INPUT1", [16])]


def infer_ctl(c: HttpV1, model: str, id: int = 1):
    x = np.array([[1.0, -2.5, 3.25, 0.0]], dtype=np.float32)
    r = c.infer(model, request_header(1, [("INPUT0", [4])], ["OUTPUT0"], id=id), raw(x))
    return r, x


def version_states(c: HttpV1, model: str) -> dict:
    r, st = c.status(fmt="binary")
    assert_http_ok(r)
    if model not in st.model_status:
        return {}
    return {v: vs.ready_state for v, vs in st.model_status[model].version_status.items()}


# -- server id ---------------------------------------------------------------------------


def test_default_server_id_is_triton(explicit_http):
    # The explicit-mode server is started without --id.
    r = explicit_http.get("/api/health/live")
    assert_http_ok(r)
    assert r.nv_status.server_id == "triton"
    r, st = explicit_http.status(fmt="binary")
    assert_http_ok(r)
    assert st.id == "triton"


# -- model control ---------------------------------------------------------------------


def test_explicit_load_infer_unload(explicit_http):
    c = explicit_http
    READY = ModelReadyState.Value("MODEL_READY")
    assert READY not in version_states(c, "ctl_http").values(), "loaded before any load request"
    r, _ = infer_ctl(c, "ctl_http", id=2)
    assert_infer_error(r, UNAVAILABLE, id=2)

    r = c.post("/api/modelcontrol/load/ctl_http")
    assert_http_ok(r, "load")
    check_request_status(r.nv_status, "load")
    assert version_states(c, "ctl_http") == {1: READY}
    r, x = infer_ctl(c, "ctl_http", id=3)
    assert_http_ok(r, "infer after load")
    assert r.outputs["OUTPUT0"] == raw(x)
    r, st = c.status("ctl_http")
    assert_http_ok(r)
    assert st.model_status["ctl_http"].version_status[1].ready_state == READY

    r = c.post("/api/modelcontrol/unload/ctl_http")
    assert_http_ok(r, "unload")
    r, _ = infer_ctl(c, "ctl_http", id=4)
    assert_infer_error(r, UNAVAILABLE, id=4)
    assert READY not in version_states(c, "ctl_http").values()

    # And back again.
    assert_http_ok(c.post("/api/modelcontrol/load/ctl_http"), "second load")
    r, x = infer_ctl(c, "ctl_http", id=5)
    assert_http_ok(r, "infer after the second load")
    assert r.outputs["OUTPUT0"] == raw(x)
    assert_http_ok(c.post("/api/modelcontrol/unload/ctl_http"), "second unload")


def test_explicit_load_onnx_model(explicit_http):
    c = explicit_http
    assert_http_ok(c.post("/api/modelcontrol/load/simple"), "load simple")
    a, b = simple_inputs(RNG, 2)
    r = c.infer("simple", request_header(2, SIMPLE_IN, ["OUTPUT0"]), raw(a) + raw(b))
    assert_http_ok(r)
    assert r.outputs["OUTPUT0"] == raw(a + b)


def test_explicit_load_unknown_model_fails(explicit_http):
    r = explicit_http.post("/api/modelcontrol/load/no_such_model")
    assert r.status == 400, r.describe()
    assert r.nv_status is not None and r.nv_status.code != SUCCESS, r.describe()


@pytest.mark.parametrize("action", ["load", "unload"])
def test_model_control_refused_without_explicit_mode(http, action):
    r = http.post(f"/api/modelcontrol/{action}/simple")
    assert_http_error(r, UNAVAILABLE)
    # simple is still served.
    a, b = simple_inputs(RNG, 1)
    assert_http_ok(http.infer("simple", request_header(1, SIMPLE_IN, ["OUTPUT0"]), raw(a) + raw(b)))


# -- repository index ---------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["text", "binary"])
def test_repository_index(http, v1_repo, fmt):
    path = "/api/repository/index" + ("?format=binary" if fmt == "binary" else "")
    r = http.get(path)
    assert_http_ok(r)
    cls = server_status_pb2.ModelRepositoryIndex
    index = parse_binary(cls, r.body, "index") if fmt == "binary" else parse_text(cls, r.body, "index")
    names = [m.name for m in index.models]
    assert sorted(names) == sorted(p.name for p in v1_repo.iterdir() if p.is_dir())
    assert len(names) == len(set(names))


def test_repository_index_lists_unloaded_models(explicit_http):
    r = explicit_http.get("/api/repository/index?format=binary")
    assert_http_ok(r)
    index = parse_binary(server_status_pb2.ModelRepositoryIndex, r.body, "index")
    assert {"simple", "ctl_http", "ctl_grpc"} <= {m.name for m in index.models}


# -- profile -------------------------------------------------------------------------------


@pytest.mark.parametrize("cmd,code", [("start", UNSUPPORTED), ("stop", UNSUPPORTED), ("bogus", INVALID_ARG)])
def test_profile(http, cmd, code):
    r = http.get(f"/api/profile?cmd={cmd}")
    assert_http_error(r, code)


# -- system shared memory ------------------------------------------------------------------

SHM = "/api/sharedmemorycontrol"


def register(c, name, key, offset, byte_size):
    return c.post(f"{SHM}/register/{name}/{key}/{offset}/{byte_size}")


def shm_status(c, binary=False):
    r = c.get(f"{SHM}/status" + ("?format=binary" if binary else ""))
    assert_http_ok(r, "shm status")
    cls = server_status_pb2.SharedMemoryStatus
    return parse_binary(cls, r.body, "shm status") if binary else parse_text(cls, r.body, "shm status")


@pytest.fixture
def clean_shm(shm_http):
    assert_http_ok(shm_http.post(f"{SHM}/unregisterall"), "unregisterall")
    yield shm_http
    assert_http_ok(shm_http.post(f"{SHM}/unregisterall"), "unregisterall")


def test_shm_register_status_unregister(clean_shm, shm_regions):
    c = clean_shm
    region = shm_regions.create("status", 256)
    r = register(c, "reg_a", region.key, 0, 128)
    assert_http_ok(r, "register")
    check_request_status(r.nv_status, "register")
    assert_http_ok(register(c, "reg_b", region.key, 128, 128), "register at an offset")
    for binary in (False, True):
        st = shm_status(c, binary)
        got = {
            x.name: (x.system_shared_memory.shared_memory_key, x.system_shared_memory.offset, x.byte_size)
            for x in st.shared_memory_region
        }
        assert got == {"reg_a": (region.key, 0, 128), "reg_b": (region.key, 128, 128)}, binary
    assert_http_ok(c.post(f"{SHM}/unregister/reg_a"), "unregister")
    assert [x.name for x in shm_status(c).shared_memory_region] == ["reg_b"]
    assert_http_ok(c.post(f"{SHM}/unregisterall"), "unregisterall")
    assert len(shm_status(c).shared_memory_region) == 0


def test_shm_inputs_and_outputs(clean_shm, shm_regions):
    c = clean_shm
    a, b = simple_inputs(RNG, 2)
    inputs = shm_regions.create("in", 256)
    outputs = shm_regions.create("out", 256)
    inputs.write(raw(a) + raw(b))
    outputs.write(b"\xee" * 256)
    assert_http_ok(register(c, "in", inputs.key, 0, 256))
    assert_http_ok(register(c, "out", outputs.key, 0, 256))
    h = request_header(
        2,
        [("INPUT0", [16], None, ("in", 0, 128)), ("INPUT1", [16], None, ("in", 128, 128))],
        [("OUTPUT0", None, ("out", 0, 128)), ("OUTPUT1", None, ("out", 128, 128))],
        id=61,
    )
    r = c.infer("simple", h, b"")
    assert_http_ok(r)
    assert r.header.id == 61
    assert [o.name for o in r.header.output] == ["OUTPUT0", "OUTPUT1"]
    # No body bytes for outputs in shared memory: the body is the trailer.
    assert r.outputs == {}
    assert r.trailer == r.header
    assert outputs.read(128, 0) == raw(a + b)
    assert outputs.read(128, 128) == raw(a - b)


def test_shm_mixed_with_body(clean_shm, shm_regions):
    c = clean_shm
    a, b = simple_inputs(RNG, 1)
    region = shm_regions.create("mixed", 4096 + 128)
    region.write(raw(a), 4096)
    # Registered at an offset into the object: region offsets count from it.
    assert_http_ok(register(c, "mixed", region.key, 4096, 128))
    h = request_header(
        1,
        [("INPUT0", [16], None, ("mixed", 0, 64)), ("INPUT1", [16])],
        ["OUTPUT0", ("OUTPUT1", None, ("mixed", 64, 64))],
        id=62,
    )
    r = c.infer("simple", h, raw(b))
    assert_http_ok(r)
    assert list(r.outputs) == ["OUTPUT0"]
    assert r.outputs["OUTPUT0"] == raw(a + b)
    assert r.response.body[:64] == raw(a + b)
    assert region.read(64, 4096 + 64) == raw(a - b)
    assert r.trailer == r.header


def test_shm_string_input(clean_shm, shm_regions):
    c = clean_shm
    data = serialize_strings([b"in", b"shared", b"memory"])
    region = shm_regions.create("str", len(data))
    region.write(data)
    assert_http_ok(register(c, "str", region.key, 0, len(data)))
    h = request_header(1, [("INPUT0", [3], len(data), ("str", 0, len(data)))], ["OUTPUT0"])
    r = c.infer("identity_bytes", h, b"")
    assert_http_ok(r)
    assert r.strings("OUTPUT0") == [b"in", b"shared", b"memory"]


def test_shm_register_beyond_object_refused(clean_shm, shm_regions):
    c = clean_shm
    region = shm_regions.create("small", 128)
    assert_http_error(register(c, "too_big", region.key, 64, 128), INVALID_ARG)
    assert len(shm_status(c).shared_memory_region) == 0


@pytest.mark.parametrize(
    "where,offset,size",
    [("input", 96, 64), ("input", 0, 256), ("output", 100, 64), ("output", 0, 192)],
)
def test_shm_use_beyond_region_refused(clean_shm, shm_regions, where, offset, size):
    c = clean_shm
    a, b = simple_inputs(RNG, 1)
    region = shm_regions.create("bounds", 128)
    region.write(raw(a) + raw(b))
    assert_http_ok(register(c, "bounds", region.key, 0, 128))
    if where == "input":
        h = request_header(
            1, [("INPUT0", [16], None, ("bounds", offset, size)), ("INPUT1", [16])], ["OUTPUT0"], id=63
        )
        body = raw(b)
    else:
        h = request_header(1, SIMPLE_IN, [("OUTPUT0", None, ("bounds", offset, size))], id=63)
        body = raw(a) + raw(b)
    r = c.infer("simple", h, body)
    assert_infer_error(r, INVALID_ARG, id=63)
    # The server goes on.
    r = c.infer("simple", request_header(1, SIMPLE_IN, ["OUTPUT0"]), raw(a) + raw(b))
    assert_http_ok(r)


def test_shm_unknown_region_refused(clean_shm):
    a, b = simple_inputs(RNG, 1)
    h = request_header(1, [("INPUT0", [16], None, ("nowhere", 0, 64)), ("INPUT1", [16])], ["OUTPUT0"], id=64)
    r = clean_shm.infer("simple", h, raw(b))
    assert r.status == 400 and r.nv_status is not None and r.nv_status.code != SUCCESS, r.describe()


def test_shm_register_refused_without_allow_client_shm(http, shm_regions):
    region = shm_regions.create("refused", 64)
    r = register(http, "refused", region.key, 0, 64)
    assert r.status == 400, r.describe()
    assert r.nv_status is not None and r.nv_status.code != SUCCESS, r.describe()
