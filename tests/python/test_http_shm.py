"""System shared memory (Triton's `system_shared_memory` extension) over
HTTP/REST, with tritonclient.http and tritonclient.utils.shared_memory: the
register / status / unregister routes, tensors read from and written to
registered regions, and Triton's errors for every bad use. The server is a
separate one started with `--allow-client-shm=true` (`shm_server`); the main
server keeps the default and must refuse registration.

Triton sources (server src/shared_memory_manager.cc SharedMemoryManager, the
HTTP routes in src/http_server.cc HandleSystemSharedMemory, statuses from
src/http_server.cc HttpCodeFromError: INVALID_ARG/ALREADY_EXISTS -> 400,
NOT_FOUND -> 404, INTERNAL -> 500):

  status           [{"name", "key", "offset", "byte_size"}, ...] (numbers)
  key not found    RegisterSystemSharedMemory / OpenSharedMemoryRegion:
                   INTERNAL "Unable to open shared memory region: '<key>'"
  registered twice ALREADY_EXISTS "shared memory region '<r>' already in manager"
  beyond object    CheckSharedMemoryRegionSize (offset + byte_size > object
                   size): INVALID_ARG "failed to register shared memory
                   region '<r>': invalid args"
  reserved key     ValidateSharedMemoryKey: "cannot register shared memory
                   region '<r>' with key '<k>' as the key contains the
                   reserved prefix 'triton_python_backend_shm_region_'"
                   (qa/L0_shared_memory test_register_reserved_names)
  status, unknown  GetStatus: NOT_FOUND "Unable to find system shared memory
                   region: '<r>'"
  unregister,      UnregisterHelper: unknown names are ignored (success),
  unknown          qa test_unregister_before_register
  use, unknown     GetMemoryInfo: NOT_FOUND "Unable to find shared memory
                   region: '<r>'"
  use, bounds      GetMemoryInfo: INVALID_ARG "Invalid offset for shared
                   memory region: '<r>'" (offset >= region size), "Integer
                   overflow detected: byte_size (..) + offset (..) ...",
                   "Invalid offset + byte size for shared memory region:
                   '<r>'" (qa test_infer_offset_out_of_bound,
                   test_infer_byte_size_out_of_bound, test_infer_integer_overflow)
  input size       core src/infer_request.cc: "input byte size mismatch for
                   input '<i>' for model '<m>'. Expected <e>, got <g>"
                   (qa test_too_big_shm)
  output too small InferResponseAlloc: INTERNAL "shared memory size specified
                   with the request for output '<o>' (<n> bytes) should be at
                   least <m> bytes to hold the results"
  body fields      HandleSystemSharedMemory: "Shared memory register request
                   has no 'key' field" / "... no 'byte_size' field";
                   ValidateInputContentType, ValidateOutputParameter
  gate             docs/protocol/extension_shared_memory.md: registration and
                   use need `--allow-client-shm=true` (default false); the
                   message is not asserted (not found in Triton's sources).
"""

from __future__ import annotations

import json
import mmap
import os

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient import utils
from tritonclient.utils import InferenceServerException

from trtis_harness import (
    TrtisServer,
    assert_client_error,
    assert_error,
    missing_shm_key,
    running_server,
)

RNG = np.random.default_rng(20240620)
INFER = "/v2/models/simple/infer"
SENTINEL = -7  # written into output regions before inference
PAGE = mmap.PAGESIZE  # Triton mmaps a region at its offset: keep offsets page-aligned


@pytest.fixture(autouse=True)
def clean_and_ready(shm_server):
    """Every test starts and ends with no region registered; the server must
    still be ready after whatever the test did."""
    r = shm_server.request("POST", "/v2/systemsharedmemory/unregister")
    assert r[0] == 200, f"unregister-all failed: {r}"
    yield
    assert shm_server.is_ready(), f"server not ready\n{shm_server.log_tail()}"
    r = shm_server.request("POST", "/v2/systemsharedmemory/unregister")
    assert r[0] == 200, f"unregister-all failed: {r}"


# -- helpers -----------------------------------------------------------------------


def ints(batch=1):
    a = RNG.integers(-1000, 1000, size=(batch, 16), dtype=np.int32)
    b = RNG.integers(-1000, 1000, size=(batch, 16), dtype=np.int32)
    return a, b


def register(client, regions, name, byte_size, offset=0, object_size=None):
    """Creates an object (of `object_size`, default offset + byte_size) and
    registers `byte_size` bytes of it at `offset` as region `name`."""
    handle, key = regions.create(name, object_size or offset + byte_size)
    client.register_system_shared_memory(name, key, byte_size, offset=offset)
    return handle, key


def fill_sentinel(handle, nbytes, offset=0):
    shm.set_shared_memory_region(
        handle, [np.full(nbytes // 4, SENTINEL, dtype=np.int32)], offset=offset
    )


def read_int32(handle, shape, offset=0):
    # A copy: the array get_contents_as_numpy returns views the mapping.
    return shm.get_contents_as_numpy(handle, np.int32, shape, offset=offset).copy()


def shm_input(name, shape, region, byte_size, offset=0, datatype="INT32"):
    inp = httpclient.InferInput(name, list(shape), datatype)
    inp.set_shared_memory(region, byte_size, offset=offset)
    return inp


def shm_output(name, region, byte_size, offset=0):
    out = httpclient.InferRequestedOutput(name, binary_data=True)
    out.set_shared_memory(region, byte_size, offset=offset)
    return out


def setup_simple(client, regions, batch=1, region_size=None):
    """Registers in0/in1 (holding a, b) and out0/out1 (sentinel-filled)."""
    a, b = ints(batch)
    n = a.nbytes
    size = region_size or n
    h = {}
    for name in ("in0", "in1", "out0", "out1"):
        h[name], _ = register(client, regions, name, size)
    shm.set_shared_memory_region(h["in0"], [a])
    shm.set_shared_memory_region(h["in1"], [b])
    fill_sentinel(h["out0"], size)
    fill_sentinel(h["out1"], size)
    return a, b, h


def simple_shm_request(batch=1, n=None, **overrides):
    """Inputs and outputs all in the regions of setup_simple; `overrides`
    replace one tensor (by name) with another object."""
    n = n or batch * 16 * 4
    inputs = [
        shm_input("INPUT0", [batch, 16], "in0", n),
        shm_input("INPUT1", [batch, 16], "in1", n),
    ]
    outputs = [shm_output("OUTPUT0", "out0", n), shm_output("OUTPUT1", "out1", n)]
    for i, t in enumerate(inputs):
        inputs[i] = overrides.get(t.name(), t)
    for i, t in enumerate(outputs):
        outputs[i] = overrides.get(t.name(), t)
    return inputs, outputs


def infer_error(client, inputs, outputs, model="simple") -> InferenceServerException:
    with pytest.raises(InferenceServerException) as e:
        client.infer(model, inputs, outputs=outputs)
    return e.value


def assert_no_data(out):
    assert "data" not in out, out
    assert "binary_data_size" not in (out.get("parameters") or {}), out


# -- extension, routes, status -----------------------------------------------------


def test_extension_advertised(shm_client):
    assert "system_shared_memory" in shm_client.get_server_metadata()["extensions"]


def test_register_status_unregister_round_trip(shm_client, shm_regions):
    _, key = register(shm_client, shm_regions, "rt0", 64)
    assert shm_client.get_system_shared_memory_status() == [
        {"name": "rt0", "key": key, "offset": 0, "byte_size": 64}
    ]
    assert shm_client.get_system_shared_memory_status("rt0") == [
        {"name": "rt0", "key": key, "offset": 0, "byte_size": 64}
    ]

    shm_client.unregister_system_shared_memory("rt0")
    assert shm_client.get_system_shared_memory_status() == []
    with pytest.raises(InferenceServerException) as e:
        shm_client.get_system_shared_memory_status("rt0")
    assert_client_error(e.value, 404, "Unable to find system shared memory region: 'rt0'")

    # The name is free again.
    shm_client.register_system_shared_memory("rt0", key, 32)
    assert shm_client.get_system_shared_memory_status("rt0")[0]["byte_size"] == 32


def test_status_lists_every_region(shm_client, shm_regions):
    keys = {}
    for name, size in (("st_a", 16), ("st_b", 64), ("st_c", 128)):
        _, keys[name] = register(shm_client, shm_regions, name, size)
    status = shm_client.get_system_shared_memory_status()
    assert sorted(status, key=lambda r: r["name"]) == [
        {"name": "st_a", "key": keys["st_a"], "offset": 0, "byte_size": 16},
        {"name": "st_b", "key": keys["st_b"], "offset": 0, "byte_size": 64},
        {"name": "st_c", "key": keys["st_c"], "offset": 0, "byte_size": 128},
    ]


def test_register_with_offset_status(shm_client, shm_regions):
    _, key = register(shm_client, shm_regions, "off0", 128, offset=PAGE, object_size=2 * PAGE)
    assert shm_client.get_system_shared_memory_status("off0") == [
        {"name": "off0", "key": key, "offset": PAGE, "byte_size": 128}
    ]


def test_raw_routes(shm_server, shm_regions):
    """The five routes as Triton serves them, without tritonclient."""
    _, key = shm_regions.create("raw0", 64)
    r = shm_server.post_json(
        "/v2/systemsharedmemory/region/raw0/register", {"key": key, "offset": 0, "byte_size": 64}
    )
    assert r[0] == 200, r
    # Triton's offset is optional (default 0).
    _, key1 = shm_regions.create("raw1", 32)
    r = shm_server.post_json("/v2/systemsharedmemory/region/raw1/register", {"key": key1, "byte_size": 32})
    assert r[0] == 200, r

    status, headers, body = shm_server.request("GET", "/v2/systemsharedmemory/status")
    assert status == 200
    assert headers.get("content-type", "").startswith("application/json")
    doc = json.loads(body)
    assert sorted(doc, key=lambda x: x["name"]) == [
        {"name": "raw0", "key": key, "offset": 0, "byte_size": 64},
        {"name": "raw1", "key": key1, "offset": 0, "byte_size": 32},
    ]
    status, _, body = shm_server.request("GET", "/v2/systemsharedmemory/region/raw0/status")
    assert status == 200
    assert json.loads(body) == [{"name": "raw0", "key": key, "offset": 0, "byte_size": 64}]

    r = shm_server.request("POST", "/v2/systemsharedmemory/region/raw0/unregister")
    assert r[0] == 200, r
    assert [x["name"] for x in json.loads(shm_server.request("GET", "/v2/systemsharedmemory/status")[2])] == ["raw1"]
    r = shm_server.request("POST", "/v2/systemsharedmemory/unregister")
    assert r[0] == 200, r
    assert json.loads(shm_server.request("GET", "/v2/systemsharedmemory/status")[2]) == []


@pytest.mark.parametrize(
    "method,path",
    [
        ("GET", "/v2/systemsharedmemory/region/x/register"),
        ("GET", "/v2/systemsharedmemory/region/x/unregister"),
        ("GET", "/v2/systemsharedmemory/unregister"),
        ("POST", "/v2/systemsharedmemory/status"),
        ("POST", "/v2/systemsharedmemory/region/x/status"),
    ],
)
def test_wrong_method(shm_server, method, path):
    # HandleSystemSharedMemory: status is GET only, the others POST only.
    status, _, _ = shm_server.request(method, path, b"" if method == "POST" else None)
    assert status == 405


# -- inference ---------------------------------------------------------------------


@pytest.mark.parametrize("batch", [1, 8])
def test_simple_all_tensors_in_shm(shm_client, shm_regions, batch):
    a, b, h = setup_simple(shm_client, shm_regions, batch)
    inputs, outputs = simple_shm_request(batch)
    result = shm_client.infer("simple", inputs, outputs=outputs, request_id="shm-all")

    response = result.get_response()
    assert response["model_name"] == "simple"
    assert response["id"] == "shm-all"
    assert sorted(o["name"] for o in response["outputs"]) == ["OUTPUT0", "OUTPUT1"]
    for out in response["outputs"]:
        assert out["datatype"] == "INT32"
        assert out["shape"] == [batch, 16]
        assert_no_data(out)
    np.testing.assert_array_equal(read_int32(h["out0"], [batch, 16]), a + b)
    np.testing.assert_array_equal(read_int32(h["out1"], [batch, 16]), a - b)
    # The inputs are read, not consumed: the same request again.
    shm_client.infer("simple", inputs, outputs=outputs)
    np.testing.assert_array_equal(read_int32(h["out0"], [batch, 16]), a + b)


def test_inputs_in_shm_outputs_returned(shm_client, shm_regions):
    a, b, _ = setup_simple(shm_client, shm_regions)
    inputs, _ = simple_shm_request()
    outputs = [
        httpclient.InferRequestedOutput("OUTPUT0", binary_data=True),
        httpclient.InferRequestedOutput("OUTPUT1", binary_data=False),
    ]
    result = shm_client.infer("simple", inputs, outputs=outputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    assert result.get_output("OUTPUT0")["parameters"]["binary_data_size"] == 64
    assert len(result.get_output("OUTPUT1")["data"]) == 16


def test_inputs_in_shm_all_outputs_by_default(shm_client, shm_regions):
    a, b, _ = setup_simple(shm_client, shm_regions)
    inputs, _ = simple_shm_request()
    result = shm_client.infer("simple", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_mixed_shm_and_request_tensors(shm_client, shm_regions):
    """INPUT0 from shm, INPUT1 as binary data; OUTPUT0 into shm, OUTPUT1 as
    JSON (qa test_mixed_raw_shm)."""
    a, b, h = setup_simple(shm_client, shm_regions)
    in1 = httpclient.InferInput("INPUT1", [1, 16], "INT32")
    in1.set_data_from_numpy(b, binary_data=True)
    out1 = httpclient.InferRequestedOutput("OUTPUT1", binary_data=False)
    inputs, outputs = simple_shm_request(INPUT1=in1, OUTPUT1=out1)
    result = shm_client.infer("simple", inputs, outputs=outputs)
    assert_no_data(result.get_output("OUTPUT0"))
    np.testing.assert_array_equal(read_int32(h["out0"], [1, 16]), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    # OUTPUT1 was not asked for in shm: its region is untouched.
    np.testing.assert_array_equal(read_int32(h["out1"], [1, 16]), np.full((1, 16), SENTINEL))


def test_tensors_at_offsets_inside_one_region(shm_client, shm_regions):
    """Both inputs in one 256-byte region (at 0 and 96), both outputs in
    another (at 32 and 160); the bytes around them are left alone."""
    a, b = ints()
    hin, _ = register(shm_client, shm_regions, "ins", 256)
    hout, _ = register(shm_client, shm_regions, "outs", 256)
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
    shm_client.infer("simple", inputs, outputs=outputs)
    whole = read_int32(hout, [64])
    np.testing.assert_array_equal(whole[8:24], (a + b).ravel())
    np.testing.assert_array_equal(whole[40:56], (a - b).ravel())
    untouched = np.concatenate([whole[:8], whole[24:40], whole[56:]])
    assert (untouched == SENTINEL).all(), whole


def test_region_registered_at_object_offset(shm_client, shm_regions):
    """A region that starts one page into its object (registration offset),
    with a tensor at an offset inside it: the two offsets add up."""
    page = PAGE
    a, b = ints()
    hin, _ = register(shm_client, shm_regions, "pin", 128, offset=page, object_size=2 * page)
    hout, _ = register(shm_client, shm_regions, "pout", 128, offset=page, object_size=2 * page)
    fill_sentinel(hin, 2 * page)
    fill_sentinel(hout, 2 * page)
    shm.set_shared_memory_region(hin, [a, b], offset=page)
    inputs = [
        shm_input("INPUT0", [1, 16], "pin", 64),
        shm_input("INPUT1", [1, 16], "pin", 64, offset=64),
    ]
    outputs = [shm_output("OUTPUT0", "pout", 64), shm_output("OUTPUT1", "pout", 64, offset=64)]
    shm_client.infer("simple", inputs, outputs=outputs)
    np.testing.assert_array_equal(read_int32(hout, [1, 16], offset=page), a + b)
    np.testing.assert_array_equal(read_int32(hout, [1, 16], offset=page + 64), a - b)
    # Nothing written before the region.
    assert (read_int32(hout, [page // 4]) == SENTINEL).all()


def test_identity_bytes_in_shm(shm_client, shm_regions):
    strings = np.array(
        [[b"hello", b"", "\u00fcn\u00efc\u00f6d\u00e9".encode(), b"\x00\x01\xffbin", b"x" * 300]],
        dtype=np.object_,
    )
    serialized = utils.serialize_byte_tensor(strings)
    size = utils.serialized_byte_size(serialized)
    hin, _ = register(shm_client, shm_regions, "bin", size)
    hout, _ = register(shm_client, shm_regions, "bout", size)
    shm.set_shared_memory_region(hin, [serialized])

    inputs = [shm_input("INPUT0", [1, 5], "bin", size, datatype="BYTES")]
    outputs = [shm_output("OUTPUT0", "bout", size)]
    result = shm_client.infer("identity_bytes", inputs, outputs=outputs)
    out = result.get_output("OUTPUT0")
    assert out["datatype"] == "BYTES"
    assert out["shape"] == [1, 5]
    assert_no_data(out)
    got = shm.get_contents_as_numpy(hout, np.object_, [1, 5])
    assert got.tolist() == strings.tolist()


def test_identity_bytes_input_in_shm_output_returned(shm_client, shm_regions):
    strings = np.array([[b"one", b"two", b"three"]], dtype=np.object_)
    serialized = utils.serialize_byte_tensor(strings)
    size = utils.serialized_byte_size(serialized)
    hin, _ = register(shm_client, shm_regions, "bin", size)
    shm.set_shared_memory_region(hin, [serialized])
    inputs = [shm_input("INPUT0", [1, 3], "bin", size, datatype="BYTES")]
    result = shm_client.infer("identity_bytes", inputs)
    assert result.as_numpy("OUTPUT0").tolist() == strings.tolist()


# -- registration errors -------------------------------------------------------------


@pytest.fixture
def outside_file(tmp_path):
    """A file outside /dev/shm that no client may reach through a region."""
    f = tmp_path / "precious.bin"
    f.write_bytes(b"P" * 4096)
    return f


def test_register_refuses_a_symlink_out_of_dev_shm(shm_client, outside_file):
    key = missing_shm_key("link")
    os.symlink(outside_file, "/dev/shm" + key)
    try:
        with pytest.raises(InferenceServerException) as e:
            shm_client.register_system_shared_memory("link", key, 64)
        assert_client_error(e.value, 400, f"Unable to open shared memory region: '{key}'")
    finally:
        os.unlink("/dev/shm" + key)
    assert shm_client.get_system_shared_memory_status() == []
    assert outside_file.read_bytes() == b"P" * 4096


@pytest.mark.parametrize(
    "key",
    ["/../tmp/x", "/a/b", "a/b", "..", "/..", ".", "/", "", "/dir/../x", "/x\x00y"],
)
def test_register_refuses_keys_that_are_not_one_object(shm_server, key):
    status, _, body = shm_server.post_json(
        "/v2/systemsharedmemory/region/bad/register", {"key": key, "offset": 0, "byte_size": 8}
    )
    assert status == 400, body
    assert "Unable to open shared memory region" in json.loads(body)["error"]


def test_register_refuses_what_is_not_a_regular_object(shm_server):
    key = missing_shm_key("dir")
    os.mkdir("/dev/shm" + key)
    try:
        status, _, body = shm_server.post_json(
            "/v2/systemsharedmemory/region/dir/register", {"key": key, "offset": 0, "byte_size": 0}
        )
        assert status == 400, body
    finally:
        os.rmdir("/dev/shm" + key)


@pytest.mark.parametrize("shrunk", ["in0", "out0"])
def test_a_region_truncated_after_registration_fails_the_request_not_the_server(
    shm_server, shm_client, shm_regions, shrunk
):
    a, b, h = setup_simple(shm_client, shm_regions)
    inputs, outputs = simple_shm_request()
    shm_client.infer("simple", inputs, outputs=outputs)
    key = [s["key"] for s in shm_client.get_system_shared_memory_status() if s["name"] == shrunk][0]
    os.truncate("/dev/shm" + key, 0)  # the client shrinks its object behind the server's back
    e = infer_error(shm_client, inputs, outputs)
    assert_client_error(e, 400, f"shared memory region '{shrunk}' is smaller than when it was registered")
    assert shm_server.alive()
    # The server still serves, from the regions that are whole.
    os.truncate("/dev/shm" + key, 64)
    if shrunk == "in0":
        shm.set_shared_memory_region(h["in0"], [a])
    shm_client.infer("simple", inputs, outputs=outputs)
    np.testing.assert_array_equal(read_int32(h["out0"], [1, 16]), a + b)


def test_register_unknown_key(shm_client):
    key = missing_shm_key()
    with pytest.raises(InferenceServerException) as e:
        shm_client.register_system_shared_memory("nokey", key, 64)
    # Triton answers 500 (INTERNAL); a key that names nothing is the
    # client's mistake: 400, Triton's message (a deliberate difference).
    assert_client_error(e.value, 400, f"Unable to open shared memory region: '{key}'")
    assert shm_client.get_system_shared_memory_status() == []


def test_register_same_name_twice(shm_client, shm_regions):
    _, key = register(shm_client, shm_regions, "dup", 64)
    _, other = shm_regions.create("dup2", 64)
    for k in (key, other):
        with pytest.raises(InferenceServerException) as e:
            shm_client.register_system_shared_memory("dup", k, 64)
        assert_client_error(e.value, 400, "shared memory region 'dup' already in manager")
    # The first registration is unchanged.
    assert shm_client.get_system_shared_memory_status() == [
        {"name": "dup", "key": key, "offset": 0, "byte_size": 64}
    ]


@pytest.mark.parametrize(
    "byte_size,offset",
    [(65, 0), (64, 1), (1, 64), (0, 65), (4096, 0)],
    ids=["size+1", "offset+1", "at-end", "offset-past-end", "much-larger"],
)
def test_register_beyond_object(shm_client, shm_regions, byte_size, offset):
    """offset + byte_size larger than the 64-byte object (qa
    test_register_out_of_bound)."""
    _, key = shm_regions.create("big", 64)
    with pytest.raises(InferenceServerException) as e:
        shm_client.register_system_shared_memory("big", key, byte_size, offset=offset)
    assert_client_error(e.value, 400, "failed to register shared memory region 'big'", "invalid args")
    assert shm_client.get_system_shared_memory_status() == []


def test_register_reserved_key_prefix(shm_client):
    prefix = "triton_python_backend_shm_region_"
    key = f"{prefix}_my_test_shm_key"
    with pytest.raises(InferenceServerException) as e:
        shm_client.register_system_shared_memory("my_test_shm_name", key, 10000)
    assert_client_error(
        e.value,
        400,
        f"cannot register shared memory region 'my_test_shm_name' with key '{key}' as the "
        f"key contains the reserved prefix '{prefix}'",
    )


@pytest.mark.parametrize(
    "body,field",
    [({"offset": 0, "byte_size": 64}, "key"), ({"key": "/whatever", "offset": 0}, "byte_size")],
    ids=["no-key", "no-byte_size"],
)
def test_register_body_missing_field(shm_server, body, field):
    r = shm_server.post_json("/v2/systemsharedmemory/region/nofield/register", body)
    assert_error(r, 400, f"Shared memory register request has no '{field}' field")


def test_status_of_unknown_region(shm_client, shm_server):
    with pytest.raises(InferenceServerException) as e:
        shm_client.get_system_shared_memory_status("nope")
    assert_client_error(e.value, 404, "Unable to find system shared memory region: 'nope'")
    r = shm_server.request("GET", "/v2/systemsharedmemory/region/nope/status")
    assert_error(r, 404, "Unable to find system shared memory region: 'nope'")


def test_unregister_unknown_region_is_success(shm_client, shm_regions):
    """Triton ignores unknown names (qa test_unregister_before_register)."""
    _, key = register(shm_client, shm_regions, "keep", 64)
    shm_client.unregister_system_shared_memory("never_registered")
    assert [r["name"] for r in shm_client.get_system_shared_memory_status()] == ["keep"]
    # Unregistering the same region twice: the second is a no-op too.
    shm_client.unregister_system_shared_memory("keep")
    shm_client.unregister_system_shared_memory("keep")
    assert shm_client.get_system_shared_memory_status() == []


def test_register_refused_without_allow_client_shm(server, shm_regions):
    """The main server runs with the default `--allow-client-shm=false`."""
    _, key = shm_regions.create("gated", 64)
    c = httpclient.InferenceServerClient(server.url, connection_timeout=10.0)
    try:
        with pytest.raises(InferenceServerException) as e:
            c.register_system_shared_memory("gated", key, 64)
    finally:
        c.close()
    assert 400 <= int(e.value.status()) < 500, (e.value.status(), e.value.message())
    assert e.value.message(), "refusal without a message"
    assert server.is_ready()


@pytest.mark.parametrize(
    "flag,allowed",
    [(["--allow-client-shm"], True), (["--allow-client-shm=false"], False)],
    ids=["bare-flag", "false"],
)
def test_allow_client_shm_flag_forms(tiny_repo, shm_regions, flag, allowed):
    _, key = shm_regions.create("flag", 64)
    gen = running_server(tiny_repo, flag, name=f"server {' '.join(flag)}")
    server: TrtisServer = next(gen)
    try:
        r = server.post_json(
            "/v2/systemsharedmemory/region/flag/register", {"key": key, "offset": 0, "byte_size": 64}
        )
        if allowed:
            assert r[0] == 200, r
        else:
            assert 400 <= r[0] < 500, r
        assert server.is_ready()
    finally:
        gen.close()


# -- inference errors ----------------------------------------------------------------


def test_infer_unknown_region(shm_client, shm_regions):
    setup_simple(shm_client, shm_regions)
    inputs, outputs = simple_shm_request(INPUT1=shm_input("INPUT1", [1, 16], "nope", 64))
    e = infer_error(shm_client, inputs, outputs)
    assert_client_error(e, 404, "Unable to find shared memory region: 'nope'")


def test_infer_unknown_output_region(shm_client, shm_regions):
    setup_simple(shm_client, shm_regions)
    inputs, outputs = simple_shm_request(OUTPUT0=shm_output("OUTPUT0", "nope_out", 64))
    e = infer_error(shm_client, inputs, outputs)
    assert_client_error(e, 404, "Unable to find shared memory region: 'nope_out'")


@pytest.mark.parametrize("tensor", ["INPUT0", "OUTPUT1"])
@pytest.mark.parametrize("offset", [64, 1000, 2**64 - 32], ids=["at-end", "past-end", "wraps-negative"])
def test_infer_offset_beyond_region(shm_client, shm_regions, tensor, offset):
    """qa test_infer_offset_out_of_bound (HTTP sends 2**64 - 32)."""
    setup_simple(shm_client, shm_regions)
    region = {"INPUT0": "in0", "OUTPUT1": "out1"}[tensor]
    if tensor.startswith("INPUT"):
        t = shm_input(tensor, [1, 16], region, 64, offset=offset)
    else:
        t = shm_output(tensor, region, 64, offset=offset)
    inputs, outputs = simple_shm_request(**{tensor: t})
    e = infer_error(shm_client, inputs, outputs)
    assert_client_error(e, 400, f"Invalid offset for shared memory region: '{region}'")


@pytest.mark.parametrize("tensor", ["INPUT1", "OUTPUT0"])
def test_infer_offset_plus_size_beyond_region(shm_client, shm_regions, tensor):
    """offset 60 + byte size 64 in a 64-byte region (qa
    test_infer_byte_size_out_of_bound)."""
    setup_simple(shm_client, shm_regions)
    region = {"INPUT1": "in1", "OUTPUT0": "out0"}[tensor]
    if tensor.startswith("INPUT"):
        t = shm_input(tensor, [1, 16], region, 64, offset=60)
    else:
        t = shm_output(tensor, region, 64, offset=60)
    inputs, outputs = simple_shm_request(**{tensor: t})
    e = infer_error(shm_client, inputs, outputs)
    assert_client_error(e, 400, f"Invalid offset + byte size for shared memory region: '{region}'")


def test_infer_byte_size_larger_than_region(shm_client, shm_regions):
    setup_simple(shm_client, shm_regions)
    inputs, outputs = simple_shm_request(INPUT0=shm_input("INPUT0", [1, 16], "in0", 128))
    e = infer_error(shm_client, inputs, outputs)
    assert_client_error(e, 400, "Invalid offset + byte size for shared memory region: 'in0'")


def test_infer_integer_overflow(shm_client, shm_regions):
    """offset 32 + byte size 2**64 - 32 wraps to 0 in 64 bits (qa
    test_infer_integer_overflow)."""
    setup_simple(shm_client, shm_regions)
    inputs, outputs = simple_shm_request(
        OUTPUT0=shm_output("OUTPUT0", "out0", 2**64 - 32, offset=32)
    )
    e = infer_error(shm_client, inputs, outputs)
    assert_client_error(e, 400, "Integer overflow detected: byte_size (")


@pytest.mark.parametrize("given", [128, 32])
def test_input_byte_size_not_matching_tensor(shm_client, shm_regions, given):
    """The shm byte size must be the tensor's size (qa test_too_big_shm)."""
    setup_simple(shm_client, shm_regions)
    register(shm_client, shm_regions, "in_big", 128)
    inputs, outputs = simple_shm_request(INPUT1=shm_input("INPUT1", [1, 16], "in_big", given))
    e = infer_error(shm_client, inputs, outputs)
    assert_client_error(
        e, 400, f"input byte size mismatch for input 'INPUT1' for model 'simple'. Expected 64, got {given}"
    )


def test_output_region_too_small(shm_client, shm_regions):
    setup_simple(shm_client, shm_regions)
    inputs, outputs = simple_shm_request(OUTPUT0=shm_output("OUTPUT0", "out0", 32))
    e = infer_error(shm_client, inputs, outputs)
    # Triton: INTERNAL from the response allocator (500); the client asked
    # for too small a region: 400 (a deliberate difference).
    assert e.status() == "400", (e.status(), e.message())
    assert (
        "shared memory size specified with the request for output 'OUTPUT0' (32 bytes) "
        "should be at least 64 bytes to hold the results"
    ) in e.message()


def shm_params(region, byte_size=None, offset=None):
    p = {"shared_memory_region": region}
    if byte_size is not None:
        p["shared_memory_byte_size"] = byte_size
    if offset is not None:
        p["shared_memory_offset"] = offset
    return p


def raw_inputs():
    return [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "parameters": shm_params("in0", 64)},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "parameters": shm_params("in1", 64)},
    ]


def test_raw_request_all_in_shm(shm_server, shm_client, shm_regions):
    """The wire form: parameters only, no data; the response has the
    outputs' metadata and no data."""
    a, b, h = setup_simple(shm_client, shm_regions)
    body = {
        "inputs": raw_inputs(),
        "outputs": [
            {"name": "OUTPUT0", "parameters": shm_params("out0", 64)},
            {"name": "OUTPUT1", "parameters": shm_params("out1", 64, offset=0)},
        ],
    }
    status, headers, raw = shm_server.post_json(INFER, body)
    assert status == 200, raw
    doc = json.loads(raw)
    outs = {o["name"]: o for o in doc["outputs"]}
    assert set(outs) == {"OUTPUT0", "OUTPUT1"}
    for o in outs.values():
        assert o["datatype"] == "INT32" and o["shape"] == [1, 16]
        assert_no_data(o)
    np.testing.assert_array_equal(read_int32(h["out0"], [1, 16]), a + b)
    np.testing.assert_array_equal(read_int32(h["out1"], [1, 16]), a - b)


def test_raw_missing_byte_size(shm_server, shm_client, shm_regions):
    """`shared_memory_byte_size` is required. Triton's HTTP frontend takes a
    missing one as 0, and the core then rejects the input's size
    ("input byte size mismatch for input 'INPUT0' ... Expected 64, got 0")."""
    setup_simple(shm_client, shm_regions)
    inputs = raw_inputs()
    inputs[0]["parameters"] = shm_params("in0")
    r = shm_server.post_json(INFER, {"inputs": inputs})
    msg = assert_error(r, 400)
    assert "INPUT0" in msg, msg


def test_raw_data_and_shm_on_one_input(shm_server, shm_client, shm_regions):
    setup_simple(shm_client, shm_regions)
    inputs = raw_inputs()
    inputs[0]["data"] = list(range(16))
    r = shm_server.post_json(INFER, {"inputs": inputs})
    assert_error(
        r,
        400,
        "Input must set only one of the following fields: 'data', 'binary_data_size' in "
        "'parameters', 'shared_memory_region' in 'parameters'. But set 'data' 'shared_memory_region'",
    )


@pytest.mark.parametrize(
    "extra,message",
    [
        ({"binary_data": True}, "Output can't set both 'shared_memory_region' and 'binary_data'"),
        ({"classification": 2}, "Output can't set both 'shared_memory_region' and 'classification'"),
    ],
    ids=["binary_data", "classification"],
)
def test_raw_output_shm_with_conflicting_parameter(shm_server, shm_client, shm_regions, extra, message):
    setup_simple(shm_client, shm_regions)
    params = shm_params("out0", 64)
    params.update(extra)
    body = {"inputs": raw_inputs(), "outputs": [{"name": "OUTPUT0", "parameters": params}]}
    assert_error(shm_server.post_json(INFER, body), 400, message)


def test_unregister_all_then_use_fails(shm_client, shm_regions):
    a, b, h = setup_simple(shm_client, shm_regions)
    inputs, outputs = simple_shm_request()
    shm_client.infer("simple", inputs, outputs=outputs)
    assert len(shm_client.get_system_shared_memory_status()) == 4

    shm_client.unregister_system_shared_memory()
    assert shm_client.get_system_shared_memory_status() == []
    e = infer_error(shm_client, inputs, outputs)
    assert_client_error(e, 404, "Unable to find shared memory region: 'in0'")


def test_unregister_one_then_use_fails(shm_client, shm_regions):
    setup_simple(shm_client, shm_regions)
    inputs, outputs = simple_shm_request()
    shm_client.unregister_system_shared_memory("out1")
    assert len(shm_client.get_system_shared_memory_status()) == 3
    e = infer_error(shm_client, inputs, outputs)
    assert_client_error(e, 404, "Unable to find shared memory region: 'out1'")


def test_reregister_after_unregister_all_works_again(shm_client, shm_regions):
    a, b = ints()
    hs = {}
    keys = {}
    for name in ("in0", "in1", "out0", "out1"):
        hs[name], keys[name] = register(shm_client, shm_regions, name, 64)
    shm.set_shared_memory_region(hs["in0"], [a])
    shm.set_shared_memory_region(hs["in1"], [b])
    shm_client.unregister_system_shared_memory()
    for name in ("in0", "in1", "out0", "out1"):
        shm_client.register_system_shared_memory(name, keys[name], 64)
    inputs, outputs = simple_shm_request()
    shm_client.infer("simple", inputs, outputs=outputs)
    np.testing.assert_array_equal(read_int32(hs["out0"], [1, 16]), a + b)
    np.testing.assert_array_equal(read_int32(hs["out1"], [1, 16]), a - b)
