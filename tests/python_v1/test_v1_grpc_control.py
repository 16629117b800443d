"""v1 gRPC control RPCs:

  * `ModelControl` LOAD / UNLOAD on the `--model-control-mode explicit`
    server: a load makes the model MODEL_READY and inferable, an unload
    makes `Infer` fail with UNAVAILABLE; on the main server (default mode)
    both are refused with UNAVAILABLE;
  * `SharedMemoryControl` register / status / unregister / unregister_all on
    the `--allow-client-shm` server, `Infer` with inputs read from and
    outputs written to registered regions (raw_input empty for them), bad
    ranges refused with INVALID_ARG, registration refused on the main
    server (no `--allow-client-shm`).

Every RPC must complete with gRPC status OK (GrpcV1 fails the test
otherwise); results are in `request_status`.
"""

from __future__ import annotations

import numpy as np
import pytest

from v1client import (
    INVALID_ARG,
    SUCCESS,
    UNAVAILABLE,
    api_pb2,
    assert_grpc_error,
    assert_grpc_ok,
    check_request_status,
    raw,
    request_header,
    server_status_pb2,
)
from v1repo import simple_inputs

RNG = np.random.default_rng(20240704)
READY = server_status_pb2.ModelReadyState.Value("MODEL_READY")
SIMPLE_IN = [("INPUT0", [16]), ("INPUT1", [16])]


def infer_ctl(g, id):
    x = np.array([[4.0, 3.0, -2.0, 1.5]], dtype=np.float32)
    return g.infer("ctl_grpc", request_header(1, [("INPUT0", [4])], ["OUTPUT0"], id=id), [raw(x)]), x


def states(g, model):
    resp = g.status()
    assert_grpc_ok(resp.request_status)
    ms = resp.server_status.model_status
    return {v: s.ready_state for v, s in ms[model].version_status.items()} if model in ms else {}


# -- model control ------------------------------------------------------------------------


def test_explicit_load_infer_unload(explicit_grpc):
    g = explicit_grpc
    assert READY not in states(g, "ctl_grpc").values()
    resp, _ = infer_ctl(g, 1)
    assert_grpc_error(resp.request_status, UNAVAILABLE)

    resp = g.model_control("ctl_grpc", load=True)
    assert_grpc_ok(resp.request_status, "LOAD")
    check_request_status(resp.request_status, "LOAD")
    assert states(g, "ctl_grpc") == {1: READY}
    resp, x = infer_ctl(g, 2)
    assert_grpc_ok(resp.request_status, "infer after LOAD")
    assert resp.raw_output[0] == raw(x)

    resp = g.model_control("ctl_grpc", load=False)
    assert_grpc_ok(resp.request_status, "UNLOAD")
    resp, _ = infer_ctl(g, 3)
    assert_grpc_error(resp.request_status, UNAVAILABLE)
    assert resp.meta_data == api_pb2.InferResponseHeader(id=3)
    assert READY not in states(g, "ctl_grpc").values()


def test_explicit_load_unknown_model(explicit_grpc):
    resp = explicit_grpc.model_control("no_such_model", load=True)
    assert resp.request_status.code != SUCCESS


@pytest.mark.parametrize("load", [True, False], ids=["LOAD", "UNLOAD"])
def test_model_control_refused_without_explicit_mode(grpc_v1, load):
    resp = grpc_v1.model_control("simple", load=load)
    assert_grpc_error(resp.request_status, UNAVAILABLE)
    a, b = simple_inputs(RNG, 1)
    resp = grpc_v1.infer("simple", request_header(1, SIMPLE_IN, ["OUTPUT0"]), [raw(a), raw(b)])
    assert_grpc_ok(resp.request_status, "simple after a refused model control")


# -- shared memory ------------------------------------------------------------------------


@pytest.fixture
def g(shm_grpc):
    assert_grpc_ok(shm_grpc.shm_unregister_all().request_status, "unregister_all")
    yield shm_grpc
    assert_grpc_ok(shm_grpc.shm_unregister_all().request_status, "unregister_all")


def regions(g) -> dict:
    resp = g.shm_status()
    assert_grpc_ok(resp.request_status, "shm status")
    return {
        r.name: (r.system_shared_memory.shared_memory_key, r.system_shared_memory.offset, r.byte_size)
        for r in resp.shared_memory_status.shared_memory_region
    }


def test_shm_register_status_unregister(g, shm_regions):
    obj = shm_regions.create("grpc_status", 512)
    resp = g.shm_register("r1", obj.key, 0, 256)
    assert_grpc_ok(resp.request_status, "register")
    check_request_status(resp.request_status, "register")
    assert_grpc_ok(g.shm_register("r2", obj.key, 256, 256).request_status, "register at an offset")
    assert regions(g) == {"r1": (obj.key, 0, 256), "r2": (obj.key, 256, 256)}
    assert_grpc_ok(g.shm_unregister("r1").request_status, "unregister")
    assert regions(g) == {"r2": (obj.key, 256, 256)}
    assert_grpc_ok(g.shm_unregister_all().request_status, "unregister_all")
    assert regions(g) == {}


def test_shm_infer(g, shm_regions):
    a, b = simple_inputs(RNG, 3)
    obj_in = shm_regions.create("grpc_in", 384)
    obj_out = shm_regions.create("grpc_out", 384)
    obj_in.write(raw(a) + raw(b))
    obj_out.write(b"\x55" * 384)
    assert_grpc_ok(g.shm_register("in", obj_in.key, 0, 384).request_status)
    assert_grpc_ok(g.shm_register("out", obj_out.key, 0, 384).request_status)
    h = request_header(
        3,
        [("INPUT0", [16], None, ("in", 0, 192)), ("INPUT1", [16], None, ("in", 192, 192))],
        [("OUTPUT0", None, ("out", 0, 192)), ("OUTPUT1", None, ("out", 192, 192))],
        id=88,
    )
    resp = g.infer("simple", h, [])
    assert_grpc_ok(resp.request_status)
    assert resp.meta_data.id == 88
    assert [o.name for o in resp.meta_data.output] == ["OUTPUT0", "OUTPUT1"]
    assert all(len(x) == 0 for x in resp.raw_output), "raw bytes for outputs in shared memory"
    assert obj_out.read(192, 0) == raw(a + b)
    assert obj_out.read(192, 192) == raw(a - b)


def test_shm_input_with_raw_input(g, shm_regions):
    # INPUT0 from a region, INPUT1 as raw_input: raw_input holds only the
    # inputs not in shared memory, in header order.
    a, b = simple_inputs(RNG, 1)
    obj = shm_regions.create("grpc_mixed", 64)
    obj.write(raw(a))
    assert_grpc_ok(g.shm_register("mixed", obj.key, 0, 64).request_status)
    h = request_header(1, [("INPUT0", [16], None, ("mixed", 0, 64)), ("INPUT1", [16])], ["OUTPUT1"])
    resp = g.infer("simple", h, [raw(b)])
    assert_grpc_ok(resp.request_status)
    assert resp.raw_output[0] == raw(a - b)


def test_shm_register_beyond_object_refused(g, shm_regions):
    obj = shm_regions.create("grpc_small", 64)
    resp = g.shm_register("big", obj.key, 32, 64)
    assert_grpc_error(resp.request_status, INVALID_ARG)
    assert regions(g) == {}


def test_shm_use_beyond_region_refused(g, shm_regions):
    a, b = simple_inputs(RNG, 1)
    obj = shm_regions.create("grpc_bounds", 128)
    obj.write(raw(a) + raw(b))
    assert_grpc_ok(g.shm_register("bounds", obj.key, 0, 128).request_status)
    h = request_header(1, [("INPUT0", [16], None, ("bounds", 96, 64)), ("INPUT1", [16])], ["OUTPUT0"], id=89)
    resp = g.infer("simple", h, [raw(b)])
    assert_grpc_error(resp.request_status, INVALID_ARG)
    assert resp.meta_data == api_pb2.InferResponseHeader(id=89)
    assert len(resp.raw_output) == 0


def test_shm_register_refused_without_allow_client_shm(grpc_v1, shm_regions):
    obj = shm_regions.create("grpc_refused", 64)
    resp = grpc_v1.shm_register("refused", obj.key, 0, 64)
    assert resp.request_status.code != SUCCESS
