"""Custom backends (platform "custom": a shared library implementing
TRTIS's custom.h C API) through Triton's own clients against a real
`trtis serve`.

The libraries are built from the C sources in examples/custom_backends by
scripts/build-custom-backends.sh (the system C compiler) when this module
starts; the Rust one (examples/custom_backends/rust) is the workspace's
`libtrtis_custom_addsub.so` beside the trtis binary. The model configs are
examples/custom_backends/models.

- addsub (the seed's example) over HTTP and gRPC: INT32 with dynamic
  batching (the library's trace shows the batches it was handed), FP32 of
  any length without batching, the TRTIS 1.x API form (CustomInitializeData,
  CustomExecuteV2) behind `custom_api_version`, and the Rust library;
- a stateful library under the sequence batcher (START/READY controls);
- faults: a payload error fails only its request, an oversized or unknown
  output buffer request gets a clear error, a failed CustomExecute fails
  the batch, the server lives on;
- a library without CustomExecute: validate-config and the load both name
  the symbol; gen-config says it does not apply.

Run: TRTIS_BIN=$PWD/target/debug/trtis .venv/bin/python -m pytest \
     tests/python/test_custom_backend.py -q
"""

from __future__ import annotations

import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from trtis_harness import REPO_ROOT, grpc_client_for, running_server, trtis_bin

MODELS = REPO_ROOT / "examples" / "custom_backends" / "models"
# model -> the library its version directory gets (as libcustom.so unless
# the config names its file).
LIBRARIES = {
    "addsub_int32": "libaddsub.so",
    "addsub_fp32": "libaddsub.so",
    "addsub_1x": "libaddsub_1x.so",
    "sequence": "libsequence.so",
    "faulty": "libfaulty.so",
}
RUST_LIBRARY = "libtrtis_custom_addsub.so"


@pytest.fixture(scope="module")
def libraries(tmp_path_factory):
    out = tmp_path_factory.mktemp("custom_libs")
    subprocess.run(
        [str(REPO_ROOT / "scripts" / "build-custom-backends.sh"), str(out)],
        check=True,
        capture_output=True,
    )
    rust = trtis_bin().parent / RUST_LIBRARY
    assert rust.is_file(), f"{rust} is missing: cargo build --workspace builds it"
    shutil.copy(rust, out / RUST_LIBRARY)
    return out


def add_model(repo, libraries, name, library, config_name=None, file="libcustom.so"):
    shutil.copytree(MODELS / (config_name or name), repo / name)
    (repo / name / "1").mkdir()
    shutil.copy(libraries / library, repo / name / "1" / file)
    if config_name:
        config = repo / name / "config.pbtxt"
        config.write_text(config.read_text().replace(f'name: "{config_name}"', f'name: "{name}"'))


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory):
    return tmp_path_factory.mktemp("custom_trace") / "addsub.trace"


@pytest.fixture(scope="module")
def server(tmp_path_factory, libraries, trace_file):
    repo = tmp_path_factory.mktemp("custom") / "models"
    repo.mkdir()
    for name, library in LIBRARIES.items():
        add_model(repo, libraries, name, library)
    add_model(repo, libraries, "addsub_rust", RUST_LIBRARY, file=RUST_LIBRARY)
    old = os.environ.get("ADDSUB_TRACE")
    os.environ["ADDSUB_TRACE"] = str(trace_file)  # the server's environment
    try:
        yield from running_server(repo, name="custom backend server")
    finally:
        if old is None:
            os.environ.pop("ADDSUB_TRACE", None)
        else:
            os.environ["ADDSUB_TRACE"] = old


@pytest.fixture(scope="module")
def http(server):
    c = httpclient.InferenceServerClient(server.url, concurrency=8, network_timeout=30.0)
    yield c
    c.close()


@pytest.fixture(scope="module")
def grpc(server):
    c = grpc_client_for(server)
    yield c
    c.close()


def addsub_inputs(module, a, b, datatype):
    inputs = [module.InferInput("INPUT0", list(a.shape), datatype), module.InferInput("INPUT1", list(b.shape), datatype)]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize(
    "model,datatype",
    [("addsub_int32", "INT32"), ("addsub_1x", "INT32"), ("addsub_rust", "FP32")],
)
def test_addsub_values_are_exact(http, grpc, protocol, model, datatype):
    client, module = (http, httpclient) if protocol == "http" else (grpc, grpcclient)
    dtype = np.int32 if datatype == "INT32" else np.float32
    rng = np.random.default_rng(7)
    for batch in (1, 3, 8):
        if dtype is np.int32:
            a = rng.integers(-(2**31), 2**31 - 1, size=(batch, 16), dtype=np.int32)
            b = rng.integers(-(2**31), 2**31 - 1, size=(batch, 16), dtype=np.int32)
            want_sum, want_diff = (a.astype(np.int64) + b).astype(np.int32), (a.astype(np.int64) - b).astype(np.int32)
        else:
            a = rng.standard_normal((batch, 16), dtype=np.float32)
            b = rng.standard_normal((batch, 16), dtype=np.float32)
            want_sum, want_diff = a + b, a - b
        result = client.infer(model, addsub_inputs(module, a, b, datatype))
        assert result.as_numpy("OUTPUT0").dtype == dtype
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), want_sum)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), want_diff)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_addsub_without_batching_takes_any_length_and_skips_unrequested_outputs(http, grpc, protocol):
    client, module = (http, httpclient) if protocol == "http" else (grpc, grpcclient)
    for length in (1, 5, 1000):
        a = np.linspace(-3, 3, length, dtype=np.float32)
        b = np.full(length, 0.25, dtype=np.float32)
        result = client.infer(
            "addsub_fp32",
            addsub_inputs(module, a, b, "FP32"),
            outputs=[module.InferRequestedOutput("OUTPUT1")],
        )
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
        assert result.as_numpy("OUTPUT0") is None


def test_the_1x_form_gets_its_initialize_data(server, http, trace_file):
    # addsub_1x traces CustomInitializeData's instance name and repository.
    lines = trace_file.read_text().splitlines()
    assert f"init addsub_1x_0 {server.repo}" in lines, lines


def test_dynamic_batching_hands_the_library_batches(http, trace_file):
    """Requests of batch sizes 1..8 sent together: the library is called
    with several payloads at once, each of a request's own batch size."""
    stats_before = http.get_inference_statistics("addsub_int32")["model_stats"][0]
    before = len(trace_file.read_text().splitlines()) if trace_file.exists() else 0
    sizes = [1, 2, 3, 4, 5, 6, 7, 8] * 3
    sent = []
    for batch in sizes:  # all in flight at once (the client's 8 connections)
        a = np.full((batch, 16), batch, dtype=np.int32)
        b = np.arange(16, dtype=np.int32) * np.ones((batch, 1), dtype=np.int32)
        sent.append((a, b, http.async_infer("addsub_int32", addsub_inputs(httpclient, a, b, "INT32"))))
    for a, b, pending in sent:
        result = pending.get_result()
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    lines = trace_file.read_text().splitlines()[before:]
    executes = [dict(field.split("=") for field in line.split()) for line in lines if line.startswith("payloads=")]
    assert sum(int(e["batch"]) for e in executes) == sum(sizes), executes
    assert all(int(e["batch"]) <= 8 for e in executes), executes
    assert any(int(e["payloads"]) > 1 for e in executes), executes
    stats = http.get_inference_statistics("addsub_int32")["model_stats"][0]
    inferences = stats["inference_count"] - stats_before["inference_count"]
    executions = stats["execution_count"] - stats_before["execution_count"]
    assert inferences == sum(sizes)
    assert executions == len(executes) < len(sizes)


def sequence_step(client, sequence_id, value, start=False, end=False):
    inputs = [grpcclient.InferInput("INPUT", [1, 1], "INT32")]
    inputs[0].set_data_from_numpy(np.array([[value]], dtype=np.int32))
    result = client.infer(
        "sequence", inputs, sequence_id=sequence_id, sequence_start=start, sequence_end=end
    )
    return int(result.as_numpy("OUTPUT")[0][0])


def test_a_stateful_library_under_the_sequence_batcher(grpc):
    """Two sequences interleaved, then more at once than one at a time: each
    gets its own running sum (the library keeps it per batch slot)."""
    a, b = [11, 7, 5, 3, 2, 0, 1], [-11, -7, -5, -3, -2, 0, -1]
    sums = {1001: 0, 1002: 0}
    for i, (x, y) in enumerate(zip(a, b)):
        last = i == len(a) - 1
        sums[1001] += x
        assert sequence_step(grpc, 1001, x, start=i == 0, end=last) == sums[1001]
        sums[1002] += y
        assert sequence_step(grpc, 1002, y, start=i == 0, end=last) == sums[1002]

    def run(sequence_id):
        total = 0
        for i in range(6):
            total += sequence_id + i
            got = sequence_step(grpc, sequence_id, sequence_id + i, start=i == 0, end=i == 5)
            assert got == total, (sequence_id, i, got, total)

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(run, [2001, 2002, 2003, 2004]))


def faulty(client, value):
    inputs = [httpclient.InferInput("INPUT0", [1, 1], "INT32")]
    inputs[0].set_data_from_numpy(np.array([[value]], dtype=np.int32))
    return int(client.infer("faulty", inputs).as_numpy("OUTPUT0")[0][0])


def test_a_payload_error_fails_only_its_request(http):
    before = http.get_inference_statistics("faulty")["model_stats"][0]["execution_count"]
    values = [5, -1, 6, -2, 7, 8, -3, 9] * 2
    pending = []
    for value in values:  # in flight together: batched by the dynamic batcher
        inputs = [httpclient.InferInput("INPUT0", [1, 1], "INT32")]
        inputs[0].set_data_from_numpy(np.array([[value]], dtype=np.int32))
        pending.append(http.async_infer("faulty", inputs))
    results = []
    for p in pending:
        try:
            results.append(int(p.get_result().as_numpy("OUTPUT0")[0][0]))
        except InferenceServerException as e:
            results.append(e)
    for value, result in zip(values, results):
        if value < 0:
            assert isinstance(result, InferenceServerException), (value, result)
            assert "faulty: negative input" in result.message()
        else:
            assert result == value
    executions = http.get_inference_statistics("faulty")["model_stats"][0]["execution_count"] - before
    assert executions < len(values), "the requests were not batched together"


@pytest.mark.parametrize(
    "value,fragments",
    [
        (1000, ["faulty: the server refused the output buffer", "asked for 8 bytes for output 'OUTPUT0' of shape [1, 1], which holds 4 bytes of INT32"]),
        (2000, ["output 'NOT_AN_OUTPUT', which the model's config does not declare"]),
        (3000, ["faulty: the whole batch fails"]),
    ],
)
def test_library_faults_get_clear_errors_and_the_server_lives(http, grpc, value, fragments):
    with pytest.raises(InferenceServerException) as info:
        faulty(http, value)
    for fragment in fragments:
        assert fragment in info.value.message(), info.value.message()
    assert http.is_server_live() and http.is_model_ready("faulty")
    assert faulty(http, 42) == 42
    inputs = [grpcclient.InferInput("INPUT0", [1, 1], "INT32")]
    inputs[0].set_data_from_numpy(np.array([[value]], dtype=np.int32))
    with pytest.raises(InferenceServerException) as info:
        grpc.infer("faulty", inputs)
    assert info.value.status() == "StatusCode.INTERNAL"
    assert fragments[0] in info.value.message()


def test_a_library_missing_a_symbol_is_refused_by_name(tmp_path, libraries):
    repo = tmp_path / "models"
    repo.mkdir()
    add_model(repo, libraries, "incomplete", "libincomplete.so", config_name="faulty")
    add_model(repo, libraries, "faulty", "libfaulty.so")
    wanted = "unable to find 'CustomExecute' entrypoint in custom library"
    check = subprocess.run([str(trtis_bin()), "validate-config", str(repo)], capture_output=True, text=True)
    assert check.returncode == 1
    assert f"incomplete/config.pbtxt:1:1: error: default_model_filename: {wanted}: 1/libcustom.so" in check.stdout + check.stderr
    for server in running_server(repo, ["--model-control-mode", "explicit", "--load-model", "faulty"], name="incomplete"):
        client = httpclient.InferenceServerClient(server.url)
        with pytest.raises(InferenceServerException) as info:
            client.load_model("incomplete")
        assert wanted in info.value.message()
        assert client.is_model_ready("faulty") and not client.is_model_ready("incomplete")
        client.close()


def test_an_unknown_api_form_is_refused(tmp_path, libraries):
    repo = tmp_path / "models"
    repo.mkdir()
    add_model(repo, libraries, "addsub_1x", "libaddsub_1x.so")
    config = repo / "addsub_1x" / "config.pbtxt"
    config.write_text(config.read_text().replace('string_value: "1"', 'string_value: "2"'))
    check = subprocess.run([str(trtis_bin()), "validate-config", str(repo)], capture_output=True, text=True)
    assert check.returncode == 1
    assert "parameter 'custom_api_version' is '2'" in check.stdout + check.stderr


def test_a_1x_library_is_refused_in_the_seeds_form(tmp_path, libraries):
    """Calling a 1.x CustomInitialize with the seed's arguments would crash
    the server: a library exporting 1.x-only symbols needs the parameter."""
    repo = tmp_path / "models"
    repo.mkdir()
    add_model(repo, libraries, "addsub_1x", "libaddsub_1x.so")
    config = repo / "addsub_1x" / "config.pbtxt"
    config.write_text("\n".join(l for l in config.read_text().splitlines() if "custom_api_version" not in l))
    check = subprocess.run([str(trtis_bin()), "validate-config", str(repo)], capture_output=True, text=True)
    assert check.returncode == 1
    assert "exports CustomVersion, so it was built for TRTIS 1.x" in check.stdout + check.stderr
    assert "custom_api_version" in check.stdout + check.stderr


def test_gen_config_says_it_does_not_apply(libraries):
    done = subprocess.run(
        [str(trtis_bin()), "gen-config", str(libraries / "libaddsub.so")], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert "gen-config does not apply to custom backend libraries" in done.stderr
