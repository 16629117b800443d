"""The ONNX Runtime settings Triton users set, through tritonclient:
`optimization { graph { level } }` and the onnxruntime backend's
`parameters` (thread counts, `execution_mode`, `enable_mem_arena`,
`enable_mem_pattern`, `memory.enable_memory_arena_shrinkage`, `session.*`)
load and serve; `execution_mode` and the thread counts are seen in the
threads the session starts; a bad value fails the load with the reason."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from trtis_harness import EXAMPLES, running_server

CONFIG = """name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }}, {{ name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }}, {{ name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
{extra}
"""


def param(key, value):
    return f'parameters [ {{ key: "{key}" value: {{ string_value: "{value}" }} }} ]'


MODELS = {
    "tuned": "optimization { graph { level: 2 } }\n"
    + "\n".join(
        param(k, v)
        for k, v in [
            ("intra_op_thread_count", "1"),
            ("enable_mem_pattern", "0"),
            ("memory.enable_memory_arena_shrinkage", "cpu:0"),
            ("session.use_device_allocator_for_initializers", "1"),
        ]
    ),
    "basic": "optimization { graph { level: -1 } }\n" + param("intra_op_thread_count", "1"),
    "extended": "optimization { graph { level: 1 } }\n" + param("intra_op_thread_count", "1"),
    "sequential": param("intra_op_thread_count", "1") + param("inter_op_thread_count", "4") + param("execution_mode", "0"),
    "parallel": param("intra_op_thread_count", "1") + param("inter_op_thread_count", "4") + param("execution_mode", "1"),
    "no_arena": param("enable_mem_arena", "0") + param("intra_op_thread_count", "1"),
    # Shrinking an arena that was turned off: ONNX Runtime itself refuses
    # each run, which shows both settings reached it.
    "no_arena_shrink": param("enable_mem_arena", "0") + param("memory.enable_memory_arena_shrinkage", "cpu:0"),
    "bad_mode": param("execution_mode", "7"),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("ort_settings") / "models"
    for name, extra in MODELS.items():
        (repo / name / "1").mkdir(parents=True)
        shutil.copy(EXAMPLES / "simple" / "1" / "model.onnx", repo / name / "1" / "model.onnx")
        (repo / name / "config.pbtxt").write_text(CONFIG.format(name=name, extra=extra))
    yield from running_server(repo, ["--model-control-mode", "explicit"], name="ORT settings server")


@pytest.fixture(scope="module")
def client(server):
    c = httpclient.InferenceServerClient(server.url, network_timeout=60.0)
    yield c
    c.close()


def add_sub(client, model):
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    b = np.ones((2, 16), dtype=np.int32)
    inputs = [httpclient.InferInput("INPUT0", [2, 16], "INT32"), httpclient.InferInput("INPUT1", [2, 16], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    result = client.infer(model, inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def threads(server):
    return len(os.listdir(f"/proc/{server.proc.pid}/task"))


@pytest.mark.parametrize("model", ["tuned", "basic", "extended", "no_arena"])
def test_settings_load_and_serve(client, model):
    client.load_model(model)
    add_sub(client, model)
    add_sub(client, model)
    client.unload_model(model)


def test_execution_mode_parallel_starts_the_inter_op_threads(server, client):
    started = {}
    for model in ["sequential", "parallel"]:
        before = threads(server)
        client.load_model(model)
        add_sub(client, model)
        started[model] = threads(server) - before
    # Parallel execution runs an inter-op pool of 4 (3 threads beside the
    # caller); sequential execution ignores inter_op_thread_count.
    assert started["parallel"] - started["sequential"] == 3, started
    for model in ["sequential", "parallel"]:
        client.unload_model(model)


def test_a_bad_value_fails_the_load_with_the_reason(client):
    with pytest.raises(InferenceServerException) as e:
        client.load_model("bad_mode")
    assert "parameter 'execution_mode' of model 'bad_mode' must be 0 (sequential) or 1 (parallel), got '7'" in e.value.message()


def test_arena_shrinkage_without_an_arena_is_onnx_runtimes_error(client):
    client.load_model("no_arena_shrink")
    with pytest.raises(InferenceServerException) as e:
        add_sub(client, "no_arena_shrink")
    assert "arena" in e.value.message()
    client.unload_model("no_arena_shrink")


def test_statistics_split_compute_into_input_infer_and_output(client):
    """compute_input (gathering and handing the inputs to ONNX Runtime) and
    compute_output (taking the outputs back) are measured, not zero."""
    client.load_model("basic")
    for _ in range(5):
        add_sub(client, "basic")
    model = client.get_inference_statistics("basic")["model_stats"][0]
    st = model["inference_stats"]
    for part in ["compute_input", "compute_infer", "compute_output"]:
        assert int(st[part]["count"]) == 5, (part, st)
        assert int(st[part]["ns"]) > 0, (part, st)
    # Per batch size too (each request here is one execution of 2 rows).
    (batch,) = model["batch_stats"]
    assert int(batch["batch_size"]) == 2, batch
    for part in ["compute_input", "compute_infer", "compute_output"]:
        assert int(batch[part]["count"]) == 5 and int(batch[part]["ns"]) > 0, (part, batch)
    client.unload_model("basic")
