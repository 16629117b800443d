"""Model loading flags of `tritonserver`, against a real `trtis serve`:
`--model-load-thread-count` (models load at once: their `initialize`
calls overlap in time, and with 1 they do not), `--model-load-retry-count`
(a model whose first load fails is READY after a retry), and
`--model-config-name` (a model's `configs/<name>.pbtxt` instead of its
config.pbtxt; `validate-config --model-config-name` reads the same file).

The Python models here write when their `initialize` started and ended
into a file named by their config's parameters.

Run: TRTIS_BIN=$PWD/target/debug/trtis .venv/bin/python -m pytest tests/python/test_model_loading.py -q
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request

import pytest

from trtis_harness import running_server, trtis_bin

MODEL_PY = '''
import json, os, time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        params = json.loads(args["model_config"])["parameters"]
        record = params["record"]["string_value"]
        fail_once = params.get("fail_once", {}).get("string_value")
        start = time.time()
        if fail_once and not os.path.exists(fail_once):
            open(fail_once, "w").close()
            raise RuntimeError("the first load fails")
        time.sleep(float(params["sleep_s"]["string_value"]))
        with open(record, "a") as f:
            f.write(json.dumps([args["model_name"], start, time.time()]) + "\\n")

    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x)]))
        return out
'''


def write_model(repo, name, record, sleep_s=0.0, fail_once=None, max_batch_size=0):
    model = repo / name
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.py").write_text(MODEL_PY)
    params = {"record": str(record), "sleep_s": str(sleep_s)}
    if fail_once:
        params["fail_once"] = str(fail_once)
    lines = "\n".join(
        f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}' for k, v in params.items()
    )
    (model / "config.pbtxt").write_text(
        f'''name: "{name}"
backend: "python"
max_batch_size: {max_batch_size}
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 2 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] }} ]
{lines}
'''
    )
    return model


def loads(record):
    return [json.loads(line) for line in record.read_text().splitlines()]


def overlapping(spans) -> bool:
    spans = sorted((start, end) for _, start, end in spans)
    return any(b_start < a_end for (_, a_end), (b_start, _) in zip(spans, spans[1:]))


@pytest.mark.parametrize("threads", [1, 3])
def test_models_load_as_many_at_once_as_the_thread_count(tmp_path, threads):
    repo = tmp_path / "models"
    record = tmp_path / "loads.jsonl"
    for i in range(3):
        write_model(repo, f"slow_{i}", record, sleep_s=0.6)
    for _ in running_server(
        repo, ["--python", sys.executable, "--model-load-thread-count", str(threads)], name="loads"
    ):
        spans = loads(record)
    assert sorted(name for name, _, _ in spans) == ["slow_0", "slow_1", "slow_2"]
    assert overlapping(spans) == (threads > 1), spans


def test_a_failed_load_is_retried(tmp_path):
    repo = tmp_path / "models"
    record = tmp_path / "loads.jsonl"
    write_model(repo, "flaky", record, fail_once=tmp_path / "failed-once")
    for server in running_server(
        repo, ["--python", sys.executable, "--model-load-retry-count", "2"], name="retry"
    ):
        with urllib.request.urlopen(f"http://{server.url}/v2/models/flaky/ready") as r:
            assert r.status == 200
        output = "\n".join(server.log_lines())
    assert [name for name, _, _ in loads(record)] == ["flaky"]
    assert "the first load fails" in output and "retrying (1 of 2)" in output, output


def test_without_retries_the_failed_load_stays_failed(tmp_path):
    repo = tmp_path / "models"
    record = tmp_path / "loads.jsonl"
    write_model(repo, "flaky", record, fail_once=tmp_path / "failed-once")
    proc = subprocess.run(
        [str(trtis_bin()), "serve", "--model-store", str(repo), "--python", sys.executable,
         "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 1
    assert "the first load fails" in proc.stderr


def test_model_config_name_picks_the_custom_config(tmp_path):
    repo = tmp_path / "models"
    record = tmp_path / "loads.jsonl"
    custom = write_model(repo, "custom", record, max_batch_size=0)
    plain = write_model(repo, "plain", record, max_batch_size=0)
    (custom / "configs").mkdir()
    text = (custom / "config.pbtxt").read_text().replace("max_batch_size: 0", "max_batch_size: 4")
    (custom / "configs" / "production.pbtxt").write_text(text)
    for server in running_server(
        repo, ["--python", sys.executable, "--model-config-name", "production"], name="config-name"
    ):
        def config(name):
            with urllib.request.urlopen(f"http://{server.url}/v2/models/{name}/config") as r:
                return json.load(r)

        assert config("custom")["max_batch_size"] == 4
        assert config("plain")["max_batch_size"] == 0
    assert plain.exists()

    # validate-config reads the same file: a mistake in it is found there.
    (custom / "configs" / "production.pbtxt").write_text(text.replace("TYPE_FP32", "TYPE_NOPE", 1))
    check = lambda *extra: subprocess.run(  # noqa: E731
        [str(trtis_bin()), "validate-config", str(repo), *extra], capture_output=True, text=True
    )
    assert check().returncode == 0
    found = check("--model-config-name", "production")
    assert found.returncode == 1
    assert "production.pbtxt" in found.stdout
