"""System shared memory over gRPC, with tritonclient.grpc and
tritonclient.utils.shared_memory: SystemSharedMemoryStatus / Register /
Unregister (an empty name = all regions), ModelInfer with tensors in
registered regions, and Triton's errors. Same separate `--allow-client-shm=true`
server as test_http_shm.py; the main server must refuse registration.

Messages are the shared manager's (see test_http_shm.py for the list); the
codes come from server src/grpc/grpc_utils.cc GrpcStatusUtil::CodeToStatus:
INTERNAL (key not found), ALREADY_EXISTS (name registered), INVALID_ARGUMENT
(bounds, byte sizes, reserved key, parameters), NOT_FOUND (unknown region).

gRPC-only behaviour (server src/grpc/infer_handler.cc):
  ParseSharedMemoryParams  "'shared_memory_byte_size' must be specified along
                           with 'shared_memory_region' parameter for tensor
                           '<t>'"; "'shared_memory_offset' can not be specified
                           without 'shared_memory_region' parameter for tensor
                           '<t>'"; "invalid value type for
                           'shared_memory_region' parameter for tensor '<t>',
                           expected string_param." (all INVALID_ARG)
  InferGRPCToInput         "unexpected 'content' provided when using shared
                           memory for input tensor '<i>' for model '<m>'"
  InferAllocatorPayload    "output can't set both 'shared_memory_region' and
                           'classification'"
  ResponseAllocatorHelper  every output gets a `raw_output_contents` entry,
                           empty for an output written into shared memory, so
                           the entries stay aligned with `outputs`
"""

from __future__ import annotations

import mmap

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.utils.shared_memory as shm
from tritonclient import utils
from tritonclient.grpc import service_pb2
from tritonclient.utils import InferenceServerException

from trtis_harness import assert_grpc_error, assert_rpc_error, grpc_client_for, missing_shm_key

RNG = np.random.default_rng(20240621)
SENTINEL = -7
PAGE = mmap.PAGESIZE


@pytest.fixture(autouse=True)
def clean_and_ready(shm_server, shm_grpc_client):
    shm_grpc_client.unregister_system_shared_memory()
    yield
    assert shm_grpc_client.is_server_ready(), f"server not ready\n{shm_server.log_tail()}"
    shm_grpc_client.unregister_system_shared_memory()


# -- helpers -----------------------------------------------------------------------


def ints(batch=1):
    a = RNG.integers(-1000, 1000, size=(batch, 16), dtype=np.int32)
    b = RNG.integers(-1000, 1000, size=(batch, 16), dtype=np.int32)
    return a, b


def register(client, regions, name, byte_size, offset=0, object_size=None):
    handle, key = regions.create(name, object_size or offset + byte_size)
    client.register_system_shared_memory(name, key, byte_size, offset=offset)
    return handle, key


def fill_sentinel(handle, nbytes, offset=0):
    shm.set_shared_memory_region(
        handle, [np.full(nbytes // 4, SENTINEL, dtype=np.int32)], offset=offset
    )


def read_int32(handle, shape, offset=0):
    return shm.get_contents_as_numpy(handle, np.int32, shape, offset=offset).copy()


def shm_input(name, shape, region, byte_size, offset=0, datatype="INT32"):
    inp = grpcclient.InferInput(name, list(shape), datatype)
    inp.set_shared_memory(region, byte_size, offset=offset)
    return inp


def shm_output(name, region, byte_size, offset=0):
    out = grpcclient.InferRequestedOutput(name)
    out.set_shared_memory(region, byte_size, offset=offset)
    return out


def setup_simple(client, regions, batch=1):
    a, b = ints(batch)
    n = a.nbytes
    h = {}
    for name in ("in0", "in1", "out0", "out1"):
        h[name], _ = register(client, regions, name, n)
    shm.set_shared_memory_region(h["in0"], [a])
    shm.set_shared_memory_region(h["in1"], [b])
    fill_sentinel(h["out0"], n)
    fill_sentinel(h["out1"], n)
    return a, b, h


def simple_shm_request(batch=1, **overrides):
    n = batch * 16 * 4
    inputs = [
        shm_input("INPUT0", [batch, 16], "in0", n),
        shm_input("INPUT1", [batch, 16], "in1", n),
    ]
    outputs = [shm_output("OUTPUT0", "out0", n), shm_output("OUTPUT1", "out1", n)]
    inputs = [overrides.get(t.name(), t) for t in inputs]
    outputs = [overrides.get(t.name(), t) for t in outputs]
    return inputs, outputs


def infer_error(client, inputs, outputs, model="simple") -> InferenceServerException:
    with pytest.raises(InferenceServerException) as e:
        client.infer(model, inputs, outputs=outputs)
    return e.value


def status_dict(response):
    """SystemSharedMemoryStatusResponse -> {name: (name, key, offset, byte_size)}."""
    assert isinstance(response, service_pb2.SystemSharedMemoryStatusResponse)
    return {k: (v.name, v.key, v.offset, v.byte_size) for k, v in response.regions.items()}


def assert_shm_outputs_have_no_data(response, shm_names):
    names = [o.name for o in response.outputs]
    if response.raw_output_contents:
        # Triton: one entry per output, empty for those in shared memory.
        assert len(response.raw_output_contents) == len(names), response
    for i, out in enumerate(response.outputs):
        if out.name in shm_names:
            assert not out.HasField("contents"), out
            if i < len(response.raw_output_contents):
                assert len(response.raw_output_contents[i]) == 0, (out.name, response)


# -- extension, status -------------------------------------------------------------


def test_extension_advertised(shm_grpc_client):
    assert "system_shared_memory" in shm_grpc_client.get_server_metadata().extensions


def test_register_status_unregister_round_trip(shm_grpc_client, shm_regions):
    _, key = register(shm_grpc_client, shm_regions, "rt0", 64)
    assert status_dict(shm_grpc_client.get_system_shared_memory_status()) == {
        "rt0": ("rt0", key, 0, 64)
    }
    assert status_dict(shm_grpc_client.get_system_shared_memory_status("rt0")) == {
        "rt0": ("rt0", key, 0, 64)
    }

    shm_grpc_client.unregister_system_shared_memory("rt0")
    assert status_dict(shm_grpc_client.get_system_shared_memory_status()) == {}
    with pytest.raises(InferenceServerException) as e:
        shm_grpc_client.get_system_shared_memory_status("rt0")
    assert_grpc_error(e.value, "NOT_FOUND", "Unable to find system shared memory region: 'rt0'")

    shm_grpc_client.register_system_shared_memory("rt0", key, 32)
    assert status_dict(shm_grpc_client.get_system_shared_memory_status("rt0"))["rt0"][3] == 32


def test_status_lists_every_region(shm_grpc_client, shm_regions):
    keys = {}
    for name, size in (("st_a", 16), ("st_b", 64), ("st_c", 128)):
        _, keys[name] = register(shm_grpc_client, shm_regions, name, size)
    assert status_dict(shm_grpc_client.get_system_shared_memory_status()) == {
        "st_a": ("st_a", keys["st_a"], 0, 16),
        "st_b": ("st_b", keys["st_b"], 0, 64),
        "st_c": ("st_c", keys["st_c"], 0, 128),
    }


def test_register_with_offset_status(shm_grpc_client, shm_regions):
    _, key = register(shm_grpc_client, shm_regions, "off0", 128, offset=PAGE, object_size=2 * PAGE)
    assert status_dict(shm_grpc_client.get_system_shared_memory_status("off0")) == {
        "off0": ("off0", key, PAGE, 128)
    }


def test_http_and_grpc_share_the_regions(shm_grpc_client, shm_client, shm_regions):
    """One manager behind both frontends: registered over gRPC, listed and
    unregistered over HTTP."""
    _, key = register(shm_grpc_client, shm_regions, "both", 64)
    assert shm_client.get_system_shared_memory_status() == [
        {"name": "both", "key": key, "offset": 0, "byte_size": 64}
    ]
    shm_client.unregister_system_shared_memory("both")
    assert status_dict(shm_grpc_client.get_system_shared_memory_status()) == {}


def test_raw_rpcs(shm_grpc_stub, shm_regions):
    _, key = shm_regions.create("raw0", 64)
    shm_grpc_stub.SystemSharedMemoryRegister(
        service_pb2.SystemSharedMemoryRegisterRequest(name="raw0", key=key, offset=0, byte_size=64)
    )
    resp = shm_grpc_stub.SystemSharedMemoryStatus(service_pb2.SystemSharedMemoryStatusRequest())
    assert status_dict(resp) == {"raw0": ("raw0", key, 0, 64)}
    resp = shm_grpc_stub.SystemSharedMemoryStatus(service_pb2.SystemSharedMemoryStatusRequest(name="raw0"))
    assert status_dict(resp) == {"raw0": ("raw0", key, 0, 64)}
    shm_grpc_stub.SystemSharedMemoryUnregister(service_pb2.SystemSharedMemoryUnregisterRequest(name="raw0"))
    resp = shm_grpc_stub.SystemSharedMemoryStatus(service_pb2.SystemSharedMemoryStatusRequest())
    assert status_dict(resp) == {}


def test_unregister_with_empty_name_is_all(shm_grpc_stub, shm_grpc_client, shm_regions):
    for name in ("ua", "ub", "uc"):
        register(shm_grpc_client, shm_regions, name, 64)
    shm_grpc_stub.SystemSharedMemoryUnregister(service_pb2.SystemSharedMemoryUnregisterRequest(name=""))
    assert status_dict(shm_grpc_client.get_system_shared_memory_status()) == {}


# -- inference ---------------------------------------------------------------------


@pytest.mark.parametrize("batch", [1, 8])
def test_simple_all_tensors_in_shm(shm_grpc_client, shm_regions, batch):
    a, b, h = setup_simple(shm_grpc_client, shm_regions, batch)
    inputs, outputs = simple_shm_request(batch)
    result = shm_grpc_client.infer("simple", inputs, outputs=outputs, request_id="shm-all")

    response = result.get_response()
    assert response.model_name == "simple"
    assert response.id == "shm-all"
    assert sorted(o.name for o in response.outputs) == ["OUTPUT0", "OUTPUT1"]
    for out in response.outputs:
        assert out.datatype == "INT32"
        assert list(out.shape) == [batch, 16]
    assert_shm_outputs_have_no_data(response, {"OUTPUT0", "OUTPUT1"})
    np.testing.assert_array_equal(read_int32(h["out0"], [batch, 16]), a + b)
    np.testing.assert_array_equal(read_int32(h["out1"], [batch, 16]), a - b)
    shm_grpc_client.infer("simple", inputs, outputs=outputs)
    np.testing.assert_array_equal(read_int32(h["out1"], [batch, 16]), a - b)


def test_inputs_in_shm_outputs_returned(shm_grpc_client, shm_regions):
    a, b, _ = setup_simple(shm_grpc_client, shm_regions)
    inputs, _ = simple_shm_request()
    outputs = [grpcclient.InferRequestedOutput("OUTPUT0"), grpcclient.InferRequestedOutput("OUTPUT1")]
    result = shm_grpc_client.infer("simple", inputs, outputs=outputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    assert [len(r) for r in result.get_response().raw_output_contents] == [64, 64]


def test_inputs_in_shm_all_outputs_by_default(shm_grpc_client, shm_regions):
    a, b, _ = setup_simple(shm_grpc_client, shm_regions)
    inputs, _ = simple_shm_request()
    result = shm_grpc_client.infer("simple", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


@pytest.mark.parametrize("shm_out", ["OUTPUT0", "OUTPUT1"])
def test_mixed_shm_and_request_tensors(shm_grpc_client, shm_regions, shm_out):
    """INPUT0 from shm, INPUT1 raw; one output into shm, the other raw. The
    raw output must still be found at its index (qa test_mixed_raw_shm)."""
    a, b, h = setup_simple(shm_grpc_client, shm_regions)
    in1 = grpcclient.InferInput("INPUT1", [1, 16], "INT32")
    in1.set_data_from_numpy(b)
    other = "OUTPUT1" if shm_out == "OUTPUT0" else "OUTPUT0"
    inputs, outputs = simple_shm_request(INPUT1=in1, **{other: grpcclient.InferRequestedOutput(other)})
    result = shm_grpc_client.infer("simple", inputs, outputs=outputs)
    expected = {"OUTPUT0": a + b, "OUTPUT1": a - b}
    region = {"OUTPUT0": "out0", "OUTPUT1": "out1"}
    np.testing.assert_array_equal(read_int32(h[region[shm_out]], [1, 16]), expected[shm_out])
    np.testing.assert_array_equal(result.as_numpy(other), expected[other])
    np.testing.assert_array_equal(
        read_int32(h[region[other]], [1, 16]), np.full((1, 16), SENTINEL)
    )
    assert_shm_outputs_have_no_data(result.get_response(), {shm_out})


def test_tensors_at_offsets_inside_one_region(shm_grpc_client, shm_regions):
    a, b = ints()
    hin, _ = register(shm_grpc_client, shm_regions, "ins", 256)
    hout, _ = register(shm_grpc_client, shm_regions, "outs", 256)
    fill_sentinel(hin, 256)
    fill_sentinel(hout, 256)
    shm.set_shared_memory_region(hin, [a], offset=0)
    shm.set_shared_memory_region(hin, [b], offset=96)
    inputs = [
        shm_input("INPUT0", [1, 16], "ins", 64, offset=0),
        shm_input("INPUT1", [1, 16], "ins", 64, offset=96),
    ]
    outputs = [
        shm_output("OUTPUT0", "outs", 64, offset=32),
        shm_output("OUTPUT1", "outs", 64, offset=160),
    ]
    shm_grpc_client.infer("simple", inputs, outputs=outputs)
    whole = read_int32(hout, [64])
    np.testing.assert_array_equal(whole[8:24], (a + b).ravel())
    np.testing.assert_array_equal(whole[40:56], (a - b).ravel())
    untouched = np.concatenate([whole[:8], whole[24:40], whole[56:]])
    assert (untouched == SENTINEL).all(), whole


def test_region_registered_at_object_offset(shm_grpc_client, shm_regions):
    a, b = ints()
    hin, _ = register(shm_grpc_client, shm_regions, "pin", 128, offset=PAGE, object_size=2 * PAGE)
    hout, _ = register(shm_grpc_client, shm_regions, "pout", 128, offset=PAGE, object_size=2 * PAGE)
    fill_sentinel(hin, 2 * PAGE)
    fill_sentinel(hout, 2 * PAGE)
    shm.set_shared_memory_region(hin, [a, b], offset=PAGE)
    inputs = [
        shm_input("INPUT0", [1, 16], "pin", 64),
        shm_input("INPUT1", [1, 16], "pin", 64, offset=64),
    ]
    outputs = [shm_output("OUTPUT0", "pout", 64), shm_output("OUTPUT1", "pout", 64, offset=64)]
    shm_grpc_client.infer("simple", inputs, outputs=outputs)
    np.testing.assert_array_equal(read_int32(hout, [1, 16], offset=PAGE), a + b)
    np.testing.assert_array_equal(read_int32(hout, [1, 16], offset=PAGE + 64), a - b)
    assert (read_int32(hout, [PAGE // 4]) == SENTINEL).all()


def test_identity_bytes_in_shm(shm_grpc_client, shm_regions):
    strings = np.array(
        [[b"hello", b"", "\u00fcn\u00efc\u00f6d\u00e9".encode(), b"\x00\x01\xffbin", b"x" * 300]],
        dtype=np.object_,
    )
    serialized = utils.serialize_byte_tensor(strings)
    size = utils.serialized_byte_size(serialized)
    hin, _ = register(shm_grpc_client, shm_regions, "bin", size)
    hout, _ = register(shm_grpc_client, shm_regions, "bout", size)
    shm.set_shared_memory_region(hin, [serialized])

    inputs = [shm_input("INPUT0", [1, 5], "bin", size, datatype="BYTES")]
    outputs = [shm_output("OUTPUT0", "bout", size)]
    result = shm_grpc_client.infer("identity_bytes", inputs, outputs=outputs)
    response = result.get_response()
    assert response.outputs[0].datatype == "BYTES"
    assert list(response.outputs[0].shape) == [1, 5]
    assert_shm_outputs_have_no_data(response, {"OUTPUT0"})
    got = shm.get_contents_as_numpy(hout, np.object_, [1, 5])
    assert got.tolist() == strings.tolist()


def test_identity_bytes_input_in_shm_output_returned(shm_grpc_client, shm_regions):
    strings = np.array([[b"one", b"two", b"three"]], dtype=np.object_)
    serialized = utils.serialize_byte_tensor(strings)
    size = utils.serialized_byte_size(serialized)
    hin, _ = register(shm_grpc_client, shm_regions, "bin", size)
    shm.set_shared_memory_region(hin, [serialized])
    inputs = [shm_input("INPUT0", [1, 3], "bin", size, datatype="BYTES")]
    result = shm_grpc_client.infer("identity_bytes", inputs)
    assert result.as_numpy("OUTPUT0").tolist() == strings.tolist()


def test_stream_infer_with_shm(shm_grpc_client, shm_regions):
    """ModelStreamInfer reads and writes regions like ModelInfer."""
    import queue

    a, b, h = setup_simple(shm_grpc_client, shm_regions)
    inputs, outputs = simple_shm_request()
    results = queue.Queue()
    shm_grpc_client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        shm_grpc_client.async_stream_infer("simple", inputs, outputs=outputs, request_id="s1")
        result, error = results.get(timeout=30)
    finally:
        shm_grpc_client.stop_stream()
    assert error is None, error
    assert result.get_response().id == "s1"
    np.testing.assert_array_equal(read_int32(h["out0"], [1, 16]), a + b)
    np.testing.assert_array_equal(read_int32(h["out1"], [1, 16]), a - b)


# -- registration errors -------------------------------------------------------------


def test_register_unknown_key(shm_grpc_client):
    key = missing_shm_key()
    with pytest.raises(InferenceServerException) as e:
        shm_grpc_client.register_system_shared_memory("nokey", key, 64)
    # Triton: INTERNAL; a client's mistake here (a deliberate difference).
    assert_grpc_error(e.value, "INVALID_ARGUMENT", f"Unable to open shared memory region: '{key}'")
    assert status_dict(shm_grpc_client.get_system_shared_memory_status()) == {}


def test_register_same_name_twice(shm_grpc_client, shm_regions):
    _, key = register(shm_grpc_client, shm_regions, "dup", 64)
    _, other = shm_regions.create("dup2", 64)
    for k in (key, other):
        with pytest.raises(InferenceServerException) as e:
            shm_grpc_client.register_system_shared_memory("dup", k, 64)
        assert_grpc_error(e.value, "ALREADY_EXISTS", "shared memory region 'dup' already in manager")
    assert status_dict(shm_grpc_client.get_system_shared_memory_status()) == {
        "dup": ("dup", key, 0, 64)
    }


@pytest.mark.parametrize(
    "byte_size,offset",
    [(65, 0), (64, 1), (1, 64), (0, 65), (4096, 0)],
    ids=["size+1", "offset+1", "at-end", "offset-past-end", "much-larger"],
)
def test_register_beyond_object(shm_grpc_client, shm_regions, byte_size, offset):
    _, key = shm_regions.create("big", 64)
    with pytest.raises(InferenceServerException) as e:
        shm_grpc_client.register_system_shared_memory("big", key, byte_size, offset=offset)
    assert_grpc_error(
        e.value, "INVALID_ARGUMENT", "failed to register shared memory region 'big'", "invalid args"
    )
    assert status_dict(shm_grpc_client.get_system_shared_memory_status()) == {}


def test_register_reserved_key_prefix(shm_grpc_client):
    prefix = "triton_python_backend_shm_region_"
    key = f"{prefix}_my_test_shm_key"
    with pytest.raises(InferenceServerException) as e:
        shm_grpc_client.register_system_shared_memory("my_test_shm_name", key, 10000)
    assert_grpc_error(
        e.value,
        "INVALID_ARGUMENT",
        f"cannot register shared memory region 'my_test_shm_name' with key '{key}' as the "
        f"key contains the reserved prefix '{prefix}'",
    )


def test_status_of_unknown_region(shm_grpc_client):
    with pytest.raises(InferenceServerException) as e:
        shm_grpc_client.get_system_shared_memory_status("nope")
    assert_grpc_error(e.value, "NOT_FOUND", "Unable to find system shared memory region: 'nope'")


def test_unregister_unknown_region_is_success(shm_grpc_client, shm_regions):
    register(shm_grpc_client, shm_regions, "keep", 64)
    shm_grpc_client.unregister_system_shared_memory("never_registered")
    assert list(status_dict(shm_grpc_client.get_system_shared_memory_status())) == ["keep"]
    shm_grpc_client.unregister_system_shared_memory("keep")
    shm_grpc_client.unregister_system_shared_memory("keep")
    assert status_dict(shm_grpc_client.get_system_shared_memory_status()) == {}


def test_register_refused_without_allow_client_shm(server, shm_regions):
    """The main server runs with the default `--allow-client-shm=false`."""
    _, key = shm_regions.create("gated", 64)
    c = grpc_client_for(server)
    try:
        with pytest.raises(InferenceServerException) as e:
            c.register_system_shared_memory("gated", key, 64)
        assert e.value.status() not in (None, "StatusCode.OK"), e.value
        assert e.value.message(), "refusal without a message"
        assert c.is_server_ready()
    finally:
        c.close()


# -- inference errors ----------------------------------------------------------------


def test_infer_unknown_region(shm_grpc_client, shm_regions):
    setup_simple(shm_grpc_client, shm_regions)
    inputs, outputs = simple_shm_request(INPUT1=shm_input("INPUT1", [1, 16], "nope", 64))
    e = infer_error(shm_grpc_client, inputs, outputs)
    assert_grpc_error(e, "NOT_FOUND", "Unable to find shared memory region: 'nope'")


def test_infer_unknown_output_region(shm_grpc_client, shm_regions):
    setup_simple(shm_grpc_client, shm_regions)
    inputs, outputs = simple_shm_request(OUTPUT0=shm_output("OUTPUT0", "nope_out", 64))
    e = infer_error(shm_grpc_client, inputs, outputs)
    assert_grpc_error(e, "NOT_FOUND", "Unable to find shared memory region: 'nope_out'")


@pytest.mark.parametrize("tensor", ["INPUT0", "OUTPUT1"])
@pytest.mark.parametrize("offset", [64, 1000], ids=["at-end", "past-end"])
def test_infer_offset_beyond_region(shm_grpc_client, shm_regions, tensor, offset):
    """qa test_infer_offset_out_of_bound (gRPC uses 64: int64_param)."""
    setup_simple(shm_grpc_client, shm_regions)
    region = {"INPUT0": "in0", "OUTPUT1": "out1"}[tensor]
    if tensor.startswith("INPUT"):
        t = shm_input(tensor, [1, 16], region, 64, offset=offset)
    else:
        t = shm_output(tensor, region, 64, offset=offset)
    inputs, outputs = simple_shm_request(**{tensor: t})
    e = infer_error(shm_grpc_client, inputs, outputs)
    assert_grpc_error(e, "INVALID_ARGUMENT", f"Invalid offset for shared memory region: '{region}'")


@pytest.mark.parametrize("tensor", ["INPUT1", "OUTPUT0"])
def test_infer_offset_plus_size_beyond_region(shm_grpc_client, shm_regions, tensor):
    setup_simple(shm_grpc_client, shm_regions)
    region = {"INPUT1": "in1", "OUTPUT0": "out0"}[tensor]
    if tensor.startswith("INPUT"):
        t = shm_input(tensor, [1, 16], region, 64, offset=60)
    else:
        t = shm_output(tensor, region, 64, offset=60)
    inputs, outputs = simple_shm_request(**{tensor: t})
    e = infer_error(shm_grpc_client, inputs, outputs)
    assert_grpc_error(
        e, "INVALID_ARGUMENT", f"Invalid offset + byte size for shared memory region: '{region}'"
    )


def test_infer_byte_size_larger_than_region(shm_grpc_client, shm_regions):
    setup_simple(shm_grpc_client, shm_regions)
    inputs, outputs = simple_shm_request(INPUT0=shm_input("INPUT0", [1, 16], "in0", 128))
    e = infer_error(shm_grpc_client, inputs, outputs)
    assert_grpc_error(e, "INVALID_ARGUMENT", "Invalid offset + byte size for shared memory region: 'in0'")


@pytest.mark.parametrize("given", [128, 32])
def test_input_byte_size_not_matching_tensor(shm_grpc_client, shm_regions, given):
    setup_simple(shm_grpc_client, shm_regions)
    register(shm_grpc_client, shm_regions, "in_big", 128)
    inputs, outputs = simple_shm_request(INPUT1=shm_input("INPUT1", [1, 16], "in_big", given))
    e = infer_error(shm_grpc_client, inputs, outputs)
    assert_grpc_error(
        e,
        "INVALID_ARGUMENT",
        f"input byte size mismatch for input 'INPUT1' for model 'simple'. Expected 64, got {given}",
    )


def test_output_region_too_small(shm_grpc_client, shm_regions):
    setup_simple(shm_grpc_client, shm_regions)
    inputs, outputs = simple_shm_request(OUTPUT0=shm_output("OUTPUT0", "out0", 32))
    e = infer_error(shm_grpc_client, inputs, outputs)
    # Triton: INTERNAL from the response allocator; the client's mistake
    # here (a deliberate difference).
    assert e.status() == "StatusCode.INVALID_ARGUMENT", (e.status(), e.message())
    assert (
        "shared memory size specified with the request for output 'OUTPUT0' (32 bytes) "
        "should be at least 64 bytes to hold the results"
    ) in e.message()


def raw_request(model="simple"):
    """ModelInferRequest for `simple` with both inputs in in0/in1 (64 bytes)."""
    req = service_pb2.ModelInferRequest(model_name=model)
    for name, region in (("INPUT0", "in0"), ("INPUT1", "in1")):
        t = req.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        t.parameters["shared_memory_region"].string_param = region
        t.parameters["shared_memory_byte_size"].int64_param = 64
    return req


def test_raw_missing_byte_size(shm_grpc_stub, shm_grpc_client, shm_regions):
    setup_simple(shm_grpc_client, shm_regions)
    req = raw_request()
    del req.inputs[0].parameters["shared_memory_byte_size"]
    with pytest.raises(grpc.RpcError) as e:
        shm_grpc_stub.ModelInfer(req)
    assert_rpc_error(
        e.value,
        "INVALID_ARGUMENT",
        "'shared_memory_byte_size' must be specified along with 'shared_memory_region' "
        "parameter for tensor 'INPUT0'",
    )


@pytest.mark.parametrize("param", ["shared_memory_offset", "shared_memory_byte_size"])
def test_raw_shm_parameter_without_region(shm_grpc_stub, shm_grpc_client, shm_regions, param):
    setup_simple(shm_grpc_client, shm_regions)
    req = raw_request()
    req.outputs.add(name="OUTPUT0").parameters[param].int64_param = 0 if "offset" in param else 64
    with pytest.raises(grpc.RpcError) as e:
        shm_grpc_stub.ModelInfer(req)
    assert_rpc_error(
        e.value,
        "INVALID_ARGUMENT",
        f"'{param}' can not be specified without 'shared_memory_region' parameter for tensor 'OUTPUT0'",
    )


def test_raw_region_parameter_wrong_type(shm_grpc_stub, shm_grpc_client, shm_regions):
    setup_simple(shm_grpc_client, shm_regions)
    req = raw_request()
    req.inputs[1].parameters["shared_memory_region"].int64_param = 1
    with pytest.raises(grpc.RpcError) as e:
        shm_grpc_stub.ModelInfer(req)
    assert_rpc_error(
        e.value,
        "INVALID_ARGUMENT",
        "invalid value type for 'shared_memory_region' parameter for tensor 'INPUT1', expected string_param.",
    )


def test_raw_contents_and_shm_on_one_input(shm_grpc_stub, shm_grpc_client, shm_regions):
    setup_simple(shm_grpc_client, shm_regions)
    req = raw_request()
    req.inputs[0].contents.int_contents.extend(range(16))
    with pytest.raises(grpc.RpcError) as e:
        shm_grpc_stub.ModelInfer(req)
    assert_rpc_error(
        e.value,
        "INVALID_ARGUMENT",
        "unexpected 'content' provided when using shared memory for input tensor 'INPUT0' for model 'simple'",
    )


def test_raw_output_shm_with_classification(shm_grpc_stub, shm_grpc_client, shm_regions):
    setup_simple(shm_grpc_client, shm_regions)
    req = raw_request()
    out = req.outputs.add(name="OUTPUT0")
    out.parameters["shared_memory_region"].string_param = "out0"
    out.parameters["shared_memory_byte_size"].int64_param = 64
    out.parameters["classification"].int64_param = 2
    with pytest.raises(grpc.RpcError) as e:
        shm_grpc_stub.ModelInfer(req)
    assert_rpc_error(
        e.value, "INVALID_ARGUMENT", "output can't set both 'shared_memory_region' and 'classification'"
    )


def test_raw_request_all_in_shm(shm_grpc_stub, shm_grpc_client, shm_regions):
    a, b, h = setup_simple(shm_grpc_client, shm_regions)
    req = raw_request()
    for name, region in (("OUTPUT0", "out0"), ("OUTPUT1", "out1")):
        out = req.outputs.add(name=name)
        out.parameters["shared_memory_region"].string_param = region
        out.parameters["shared_memory_byte_size"].int64_param = 64
        out.parameters["shared_memory_offset"].int64_param = 0
    resp = shm_grpc_stub.ModelInfer(req)
    assert sorted(o.name for o in resp.outputs) == ["OUTPUT0", "OUTPUT1"]
    assert_shm_outputs_have_no_data(resp, {"OUTPUT0", "OUTPUT1"})
    np.testing.assert_array_equal(read_int32(h["out0"], [1, 16]), a + b)
    np.testing.assert_array_equal(read_int32(h["out1"], [1, 16]), a - b)


def test_unregister_all_then_use_fails(shm_grpc_client, shm_regions):
    setup_simple(shm_grpc_client, shm_regions)
    inputs, outputs = simple_shm_request()
    shm_grpc_client.infer("simple", inputs, outputs=outputs)
    assert len(status_dict(shm_grpc_client.get_system_shared_memory_status())) == 4

    shm_grpc_client.unregister_system_shared_memory()
    assert status_dict(shm_grpc_client.get_system_shared_memory_status()) == {}
    e = infer_error(shm_grpc_client, inputs, outputs)
    assert_grpc_error(e, "NOT_FOUND", "Unable to find shared memory region: 'in0'")


def test_unregister_one_then_use_fails(shm_grpc_client, shm_regions):
    setup_simple(shm_grpc_client, shm_regions)
    inputs, outputs = simple_shm_request()
    shm_grpc_client.unregister_system_shared_memory("out1")
    e = infer_error(shm_grpc_client, inputs, outputs)
    assert_grpc_error(e, "NOT_FOUND", "Unable to find shared memory region: 'out1'")
