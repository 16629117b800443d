"""`reshape` through tritonclient: clients see the configured dims, the
model sees `reshape.shape`, with the default scheduler, the dynamic batcher
(batches of reshaped requests), warmup, the sequence batcher and an
ensemble; the ONNX model's real shape ([batch, 16]) differs from the
configured one ([batch, 4, 4] in, [batch, 2, 8] out)."""

from __future__ import annotations

import json
import shutil
import threading

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from trtis_harness import EXAMPLES, grpc_client_for, running_server

SIMPLE = """name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 4, 4 ] reshape: {{ shape: [ 16 ] }} }},
  {{ name: "INPUT1" data_type: TYPE_INT32 dims: [ 4, 4 ] reshape: {{ shape: [ 16 ] }} }}
]
output [
  {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 2, 8 ] reshape: {{ shape: [ 16 ] }} }},
  {{ name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 2, 8 ] reshape: {{ shape: [ 16 ] }} }}
]
{extra}
"""

WARMUP = """model_warmup [ { name: "zeros" batch_size: 2 inputs [
  { key: "INPUT0" value: { data_type: TYPE_INT32 dims: [ 4, 4 ] zero_data: true } },
  { key: "INPUT1" value: { data_type: TYPE_INT32 dims: [ 4, 4 ] zero_data: true } } ] } ]"""

SCALAR = """name: "scalar"
backend: "identity"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] reshape: { shape: [ ] } } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] reshape: { shape: [ ] } } ]
dynamic_batching { max_queue_delay_microseconds: 200000 preferred_batch_size: [ 4 ] }
parameters [ { key: "record_inputs" value: { string_value: "RECORD" } } ]
"""

SEQUENCE = """name: "seq"
backend: "identity"
max_batch_size: 2
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 2, 2 ] reshape: { shape: [ 4 ] } } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 2, 2 ] reshape: { shape: [ 4 ] } } ]
sequence_batching { max_sequence_idle_microseconds: 5000000 }
parameters [ { key: "record_inputs" value: { string_value: "RECORD" } } ]
"""

ENSEMBLE = """name: "pipeline"
platform: "ensemble"
max_batch_size: 8
input [ { name: "A" data_type: TYPE_INT32 dims: [ 4, 4 ] }, { name: "B" data_type: TYPE_INT32 dims: [ 4, 4 ] } ]
output [ { name: "SUM" data_type: TYPE_INT32 dims: [ 2, 8 ] } ]
ensemble_scheduling { step [ { model_name: "simple_reshaped" model_version: -1
  input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
  output_map { key: "OUTPUT0" value: "SUM" } } ] }
"""


def model(repo, name, config, onnx=False):
    (repo / name / "1").mkdir(parents=True)
    if onnx:
        shutil.copy(EXAMPLES / "simple" / "1" / "model.onnx", repo / name / "1" / "model.onnx")
    (repo / name / "config.pbtxt").write_text(config)


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    repo = tmp_path_factory.mktemp("reshape") / "models"
    record = repo.parent / "records"
    record.mkdir()
    model(repo, "simple_reshaped", SIMPLE.format(name="simple_reshaped", extra=WARMUP), onnx=True)
    model(repo, "simple_batched", SIMPLE.format(name="simple_batched", extra="dynamic_batching { max_queue_delay_microseconds: 100000 }"), onnx=True)
    model(repo, "scalar", SCALAR.replace("RECORD", str(record / "scalar.jsonl")))
    model(repo, "seq", SEQUENCE.replace("RECORD", str(record / "seq.jsonl")))
    model(repo, "pipeline", ENSEMBLE)
    return repo


@pytest.fixture(scope="module")
def server(repo):
    yield from running_server(repo, name="reshape server")


@pytest.fixture(scope="module")
def http(server):
    c = httpclient.InferenceServerClient(server.url, network_timeout=60.0, concurrency=8)
    yield c
    c.close()


def records(repo, name):
    lines = (repo.parent / "records" / f"{name}.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def add_sub(client, name, rows, seed=0):
    a = (np.arange(16 * rows, dtype=np.int32) + seed).reshape(rows, 4, 4)
    b = np.full((rows, 4, 4), 3, dtype=np.int32)
    inputs = [httpclient.InferInput("INPUT0", [rows, 4, 4], "INT32"), httpclient.InferInput("INPUT1", [rows, 4, 4], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    result = client.infer(name, inputs)
    out0, out1 = result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1")
    assert out0.shape == (rows, 2, 8)
    np.testing.assert_array_equal(out0, (a + b).reshape(rows, 2, 8))
    np.testing.assert_array_equal(out1, (a - b).reshape(rows, 2, 8))


def test_metadata_shows_the_configured_dims(http):
    meta = http.get_model_metadata("simple_reshaped")
    assert meta["inputs"][0]["shape"] == [-1, 4, 4]
    assert meta["outputs"][0]["shape"] == [-1, 2, 8]


def test_an_onnx_model_with_another_real_shape_after_its_warmup(http):
    add_sub(http, "simple_reshaped", 1)
    add_sub(http, "simple_reshaped", 5)


def own_client(server):
    """A client per thread: tritonclient.http's connection pool is not
    shared across threads."""
    return httpclient.InferenceServerClient(server.url, network_timeout=60.0)


def test_the_dynamic_batcher_batches_reshaped_requests(http, server):
    errors = []

    def one(seed):
        try:
            add_sub(own_client(server), "simple_batched", 1 + seed % 2, seed)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    stats = http.get_inference_statistics("simple_batched")["model_stats"][0]
    assert stats["execution_count"] < len(threads), f"6 requests, some batched together: {stats}"


def test_the_scalar_reshape_gives_a_batching_model_its_batch_dimension(server, repo):
    errors = []

    def one(v):
        try:
            inp = httpclient.InferInput("IN", [1, 1], "FP32")
            inp.set_data_from_numpy(np.array([[v]], dtype=np.float32))
            out = own_client(server).infer("scalar", [inp]).as_numpy("OUT")
            assert out.shape == (1, 1) and out[0, 0] == v
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=one, args=(float(i),)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    seen = records(repo, "scalar")
    assert seen and all(len(r["IN"]["shape"]) == 1 for r in seen), seen
    assert sum(r["IN"]["shape"][0] for r in seen) == 4


def test_the_sequence_batcher_reshapes_each_batch(server, repo):
    client = grpc_client_for(server)
    data = np.arange(4, dtype=np.float32).reshape(1, 2, 2)
    inp = grpcclient.InferInput("IN", [1, 2, 2], "FP32")
    inp.set_data_from_numpy(data)
    for i, (start, end) in enumerate([(True, False), (False, True)]):
        out = client.infer("seq", [inp], sequence_id=7, sequence_start=start, sequence_end=end).as_numpy("OUT")
        assert out.shape == (1, 2, 2), i
        np.testing.assert_array_equal(out, data)
    client.close()
    assert all(r["IN"]["shape"][1:] == [4] for r in records(repo, "seq"))


def test_an_ensemble_over_a_reshaped_model(http):
    a = np.arange(16, dtype=np.int32).reshape(1, 4, 4)
    inputs = [httpclient.InferInput("A", [1, 4, 4], "INT32"), httpclient.InferInput("B", [1, 4, 4], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(a)
    out = http.infer("pipeline", inputs).as_numpy("SUM")
    np.testing.assert_array_equal(out, (a + a).reshape(1, 2, 8))
