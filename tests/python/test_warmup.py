"""Model warmup (`model_warmup` in config.pbtxt): the samples run on every
instance before the model version becomes READY, a failing sample fails the
load with Triton's reason, and warmup requests are not inference
statistics. A server in explicit model-control mode loads each model with
`load_model`, so every test sees its model's load from the start.

Run: .venv/bin/python -m pytest tests/python/test_warmup.py -q
"""

from __future__ import annotations

import struct
import threading
import time

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from trtis_harness import grpc_client_for, running_server, wait_for

FILE_VALUES = [11, -22, 33, -44]

SLOW_DELAY_MS = 400
SLOW_COUNT = 3


def _write_model(repo, name: str, config: str, files: dict[str, bytes] | None = None) -> None:
    model = repo / name
    (model / "1").mkdir(parents=True)
    (model / "1" / ".keep").write_text("")
    (model / "config.pbtxt").write_text(config)
    for fname, data in (files or {}).items():
        (model / "warmup").mkdir(exist_ok=True)
        (model / "warmup" / fname).write_bytes(data)


def _int32_model(name: str, warmup: str, extra: str = "") -> str:
    return f"""name: "{name}"
backend: "identity"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 4 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
{extra}
model_warmup [
{warmup}
]
"""


WARM_OK = """name: "warm_ok"
backend: "identity"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_INT32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT2" data_type: TYPE_INT32 dims: [ 4 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 4 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "OUTPUT2" data_type: TYPE_INT32 dims: [ 4 ] }
]
instance_group [ { count: 2 kind: KIND_CPU } ]
model_warmup [
  {
    name: "mixed"
    batch_size: 2
    count: 2
    inputs { key: "INPUT0" value: { data_type: TYPE_INT32 dims: [ 4 ] zero_data: true } }
    inputs { key: "INPUT1" value: { data_type: TYPE_FP32 dims: [ 4 ] random_data: true } }
    inputs { key: "INPUT2" value: { data_type: TYPE_INT32 dims: [ 4 ] input_data_file: "int32x4.bin" } }
  },
  {
    name: "all_zero"
    batch_size: 1
    inputs { key: "INPUT0" value: { data_type: TYPE_INT32 dims: [ 4 ] zero_data: true } }
    inputs { key: "INPUT1" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } }
    inputs { key: "INPUT2" value: { data_type: TYPE_INT32 dims: [ 4 ] zero_data: true } }
  },
  {
    # batch_size 0: skipped, so its wrong data type never fails the load.
    name: "skipped"
    batch_size: 0
    inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } }
  }
]
"""


def _one_input_sample(name: str, spec: str, data_type: str = "TYPE_INT32", count: int = 0) -> str:
    count_line = f"\n    count: {count}" if count else ""
    return f"""  {{
    name: "{name}"
    batch_size: 1{count_line}
    inputs {{ key: "INPUT0" value: {{ data_type: {data_type} dims: [ 4 ] {spec} }} }}
  }}"""


@pytest.fixture(scope="module")
def warmup_repo(tmp_path_factory):
    repo = tmp_path_factory.mktemp("trtis_warmup") / "models"
    repo.mkdir(parents=True)
    _write_model(repo, "warm_ok", WARM_OK, {"int32x4.bin": struct.pack("<4i", *FILE_VALUES)})
    _write_model(
        repo,
        "warm_slow",
        _int32_model(
            "warm_slow",
            _one_input_sample("slow", "zero_data: true", count=SLOW_COUNT),
            extra=f'parameters {{ key: "execute_delay_ms" value: {{ string_value: "{SLOW_DELAY_MS}" }} }}',
        ),
    )
    _write_model(
        repo,
        "warm_bad_dtype",
        _int32_model("warm_bad_dtype", _one_input_sample("bad_dtype", "zero_data: true", "TYPE_FP32")),
    )
    _write_model(
        repo,
        "warm_missing_file",
        _int32_model(
            "warm_missing_file",
            _one_input_sample("missing", 'input_data_file: "nope.bin"'),
        ),
    )
    _write_model(
        repo,
        "warm_short_file",
        _int32_model(
            "warm_short_file",
            _one_input_sample("short", 'input_data_file: "short.bin"'),
        ),
        {"short.bin": struct.pack("<i", 7)},
    )
    return repo


@pytest.fixture(scope="module")
def warmup_server(warmup_repo):
    yield from running_server(
        warmup_repo,
        ["--model-control-mode", "explicit", "--log-verbose", "1"],
        name="warmup server",
    )


@pytest.fixture(scope="module")
def client(warmup_server):
    c = httpclient.InferenceServerClient(
        warmup_server.url, connection_timeout=10.0, network_timeout=60.0
    )
    yield c
    c.close()


def index_entry(client, name: str) -> dict:
    entries = [e for e in client.get_model_repository_index() if e["name"] == name]
    assert len(entries) == 1, entries
    return entries[0]


def only_stats(client, name: str) -> dict:
    entries = client.get_inference_statistics(name)["model_stats"]
    assert len(entries) == 1, entries
    return entries[0]


# --------------------------------------------------------------------------


def test_nothing_loaded_at_start(client):
    for name in ("warm_ok", "warm_slow", "warm_bad_dtype", "warm_missing_file", "warm_short_file"):
        assert not client.is_model_ready(name), name


def test_warmup_with_zero_random_and_file_data(client, warmup_server):
    client.load_model("warm_ok")
    assert client.is_model_ready("warm_ok")
    entry = index_entry(client, "warm_ok")
    assert entry["state"] == "READY", entry

    # Warmup requests are not inference statistics.
    s = only_stats(client, "warm_ok")
    assert s["inference_count"] == 0, s
    assert s["execution_count"] == 0, s
    assert s["inference_stats"]["success"]["count"] == 0, s
    assert s["inference_stats"]["fail"]["count"] == 0, s

    inputs = []
    data = {
        "INPUT0": np.array([[1, 2, 3, 4]], dtype=np.int32),
        "INPUT1": np.array([[0.5, -1.5, 2.25, 8.0]], dtype=np.float32),
        "INPUT2": np.array([[5, 6, 7, 8]], dtype=np.int32),
    }
    for name, arr in data.items():
        inp = httpclient.InferInput(name, list(arr.shape), "INT32" if arr.dtype == np.int32 else "FP32")
        inp.set_data_from_numpy(arr)
        inputs.append(inp)
    result = client.infer("warm_ok", inputs)
    for i, arr in enumerate(data.values()):
        np.testing.assert_array_equal(result.as_numpy(f"OUTPUT{i}"), arr)

    s = only_stats(client, "warm_ok")
    assert s["inference_count"] == 1, s
    assert s["execution_count"] == 1, s

    # Verbose log: both instances ran "mixed" twice and "all_zero" once;
    # "skipped" (batch_size 0) never ran.
    lines = warmup_server.log_lines()
    mixed = [l for l in lines if "is running warmup sample 'mixed'" in l]
    all_zero = [l for l in lines if "is running warmup sample 'all_zero'" in l]
    skipped = [l for l in lines if "is running warmup sample 'skipped'" in l]
    assert len(mixed) == 2 * 2, mixed
    assert len(all_zero) == 2 * 1, all_zero
    assert skipped == []


def test_not_ready_until_warmup_completes(client, warmup_server):
    """warm_slow: one execution takes 400 ms, the sample runs 3 times, so the
    load takes at least 1.2 s, and the model is not ready meanwhile."""
    outcome: dict = {}

    def load():
        c = httpclient.InferenceServerClient(
            warmup_server.url, connection_timeout=10.0, network_timeout=60.0
        )
        try:
            c.load_model("warm_slow")
            outcome["ok"] = True
        except Exception as e:  # reported below
            outcome["error"] = e
        finally:
            outcome["done"] = time.monotonic()
            c.close()

    started = time.monotonic()
    t = threading.Thread(target=load, daemon=True)
    t.start()

    # Wait for the first warmup execution to begin (verbose log line), then
    # the model must not be ready while load_model has not returned.
    began = wait_for(
        lambda: any("is running warmup sample 'slow'" in l for l in warmup_server.log_lines()),
        timeout=20.0,
        interval=0.02,
    )
    observed = []
    while t.is_alive():
        ready = client.is_model_ready("warm_slow")
        still_loading = t.is_alive()
        observed.append((ready, still_loading))
        time.sleep(0.05)
    t.join(30)
    assert outcome.get("ok"), f"load_model failed: {outcome.get('error')!r}"
    assert began, "no 'is running warmup sample 'slow'' verbose log line"
    not_ready_while_loading = [o for o in observed if o == (False, True)]
    assert not_ready_while_loading, f"never saw the model not ready during its load: {observed}"
    # READY may show just before load_model's response reaches the client,
    # but once ready the model stays ready: never not-ready after ready.
    readiness = [r for r, _ in observed]
    assert readiness == sorted(readiness), f"readiness went back to False: {observed}"

    assert client.is_model_ready("warm_slow")
    assert index_entry(client, "warm_slow")["state"] == "READY"
    # The sample ran 3 times (iterations 1, 2, 3), so the load took at least
    # 3 x 400 ms.
    iterations = [
        l for l in warmup_server.log_lines() if "is running warmup sample 'slow' for iteration" in l
    ]
    assert [l.rsplit(" ", 1)[-1] for l in iterations] == ["1", "2", "3"], iterations
    assert outcome["done"] - started >= SLOW_COUNT * SLOW_DELAY_MS / 1000.0
    s = only_stats(client, "warm_slow")
    assert s["inference_count"] == 0 and s["execution_count"] == 0, s


def _load_fails(client, name: str, *fragments: str) -> tuple[str, str]:
    with pytest.raises(InferenceServerException) as e:
        client.load_model(name)
    msg = e.value.message()
    for fragment in fragments:
        assert fragment in msg, f"expected {fragment!r} in load error {msg!r}"
    assert not client.is_model_ready(name)
    entry = index_entry(client, name)
    assert entry["state"] == "UNAVAILABLE", entry
    reason = entry.get("reason", "")
    for fragment in fragments:
        assert fragment in reason, f"expected {fragment!r} in index reason {reason!r}"
    return msg, reason


def test_sample_with_wrong_data_type_fails_load(client):
    _load_fails(
        client,
        "warm_bad_dtype",
        "failed to run warmup sample 'bad_dtype'",
        "inference input 'INPUT0' data-type is 'FP32', but model 'warm_bad_dtype' expects 'INT32'",
    )


def test_grpc_load_with_failing_warmup(client, warmup_server):
    """The same failure through tritonclient.grpc's load_model."""
    g = grpc_client_for(warmup_server)
    try:
        with pytest.raises(InferenceServerException) as e:
            g.load_model("warm_bad_dtype")
        msg = e.value.message()
        assert "failed to run warmup sample 'bad_dtype'" in msg, msg
        assert "data-type is 'FP32', but model 'warm_bad_dtype' expects 'INT32'" in msg, msg
        assert not g.is_model_ready("warm_bad_dtype")
    finally:
        g.close()


# Triton reads the file while generating the warmup data, at instance load
# (ReadTextFile: "failed to open text file for read <path>: <strerror>").
def test_missing_data_file_fails_load(client):
    _load_fails(
        client,
        "warm_missing_file",
        "failed to open text file for read",
        "warmup/nope.bin: No such file or directory",
    )


def test_missing_data_file_fails_load_and_names_the_file(client):
    """What holds either way: the load fails, the model is not ready, and
    the error names the missing file."""
    with pytest.raises(InferenceServerException) as e:
        client.load_model("warm_missing_file")
    assert "nope.bin" in e.value.message(), e.value.message()
    assert not client.is_model_ready("warm_missing_file")
    entry = index_entry(client, "warm_missing_file")
    assert entry["state"] == "UNAVAILABLE", entry
    assert "nope.bin" in entry.get("reason", ""), entry


def test_short_data_file_fails_load(client):
    _load_fails(
        client,
        "warm_short_file",
        "warmup setting expects 16 bytes, but the data provided from short.binonly has 4 bytes",
    )


def test_failed_loads_leave_other_models_alone(client):
    # (Not is_server_ready: with Triton's default --strict-readiness a model
    # whose load failed makes the server not ready.)
    if not client.is_model_ready("warm_ok"):
        client.load_model("warm_ok")
    r = client.infer(
        "warm_ok",
        [
            _inp("INPUT0", np.zeros((1, 4), np.int32)),
            _inp("INPUT1", np.zeros((1, 4), np.float32)),
            _inp("INPUT2", np.zeros((1, 4), np.int32)),
        ],
    )
    assert r.as_numpy("OUTPUT0").tolist() == [[0, 0, 0, 0]]
    for name in ("warm_bad_dtype", "warm_missing_file", "warm_short_file"):
        assert not client.is_model_ready(name), name


def _inp(name: str, arr: np.ndarray):
    inp = httpclient.InferInput(name, list(arr.shape), "INT32" if arr.dtype == np.int32 else "FP32")
    inp.set_data_from_numpy(arr)
    return inp
