"""The TensorFlow backend (`platform: "tensorflow_graphdef"` /
`"tensorflow_savedmodel"`, the TensorFlow C API of the tensorflow-cpu
wheel's library, which scripts/setup.sh unpacks into .tools/tensorflow).

Models: the fixtures of tests/fixtures/tensorflow (made by
scripts/make-tf-models.py, see the README there): add/sub as a GraphDef and
as a SavedModel with a variable, batched and not; an identity SavedModel of
every datatype; a GraphDef over strings; a SavedModel served through a
signature other than `serving_default`. And the project's EfficientNet-Lite0
classifier as a SavedModel and a frozen GraphDef (examples/
tensorflow_repository), against its ONNX twin.

Checks: tritonclient HTTP and gRPC results (bit-exact where the model is
exact, logits within 1e-3 of ONNX Runtime's for the classifier), dynamic
batching, statistics, `trtis infer` on an image, an ensemble of the ONNX
preprocessing and the TensorFlow classifier, auto-complete of a SavedModel
without config.pbtxt, and the failures: a missing library, a corrupt
GraphDef, a missing signature, a tensor name not in the model, a wrong
datatype, each failing its own model with Triton's wording while the
server serves on.

Run: TRTIS_BIN=$PWD/target/debug/trtis .venv/bin/python -m pytest \
     tests/python/test_tensorflow.py -q
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from trtis_harness import (
    EXAMPLES,
    REPO_ROOT,
    TrtisServer,
    grpc_client_for,
    start_or_fail,
    stop_and_check,
    trtis_bin,
)

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "tensorflow"
TF_EXAMPLES = REPO_ROOT / "examples" / "tensorflow_repository"
MODELS = REPO_ROOT.parent / "shared" / "models"
RNG = np.random.default_rng(37)


def fixture_repo(tmp_path, names, extra=()):
    repo = tmp_path / "repo"
    repo.mkdir(exist_ok=True)
    for n in names:
        shutil.copytree(FIXTURES / n, repo / n)
    for src, name in extra:
        shutil.copytree(src, repo / name)
    return repo


@pytest.fixture(scope="module")
def tf_server(tmp_path_factory):
    repo = fixture_repo(
        tmp_path_factory.mktemp("tf"),
        [
            "tf_graphdef_add_sub",
            "tf_savedmodel_add_sub",
            "tf_graphdef_add_sub_nobatch",
            "tf_savedmodel_add_sub_nobatch",
            "tf_savedmodel_identity_all",
            "tf_graphdef_string",
            "tf_savedmodel_signature",
        ],
    )
    server = start_or_fail(TrtisServer(repo, name="tensorflow server"))
    yield server
    stop_and_check(server)


def add_sub(client, module, model, batch):
    shape = [batch, 16] if batch else [16]
    a = RNG.standard_normal(shape).astype(np.float32)
    b = RNG.standard_normal(shape).astype(np.float32)
    inputs = [module.InferInput("INPUT0", shape, "FP32"), module.InferInput("INPUT1", shape, "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    r = client.infer(model, inputs)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)


@pytest.mark.parametrize("model,batch", [
    ("tf_graphdef_add_sub", 1), ("tf_graphdef_add_sub", 5), ("tf_savedmodel_add_sub", 3),
    ("tf_graphdef_add_sub_nobatch", 0), ("tf_savedmodel_add_sub_nobatch", 0),
])
def test_add_sub_http_and_grpc(tf_server, model, batch):
    add_sub(httpclient.InferenceServerClient(tf_server.url), httpclient, model, batch)
    add_sub(grpc_client_for(tf_server), grpcclient, model, batch)


def test_metadata_and_platform(tf_server):
    client = httpclient.InferenceServerClient(tf_server.url)
    meta = client.get_model_metadata("tf_savedmodel_add_sub")
    assert meta["platform"] == "tensorflow_savedmodel"
    assert [i["shape"] for i in meta["inputs"]] == [[-1, 16], [-1, 16]]
    assert client.get_model_metadata("tf_graphdef_add_sub")["platform"] == "tensorflow_graphdef"
    config = client.get_model_config("tf_graphdef_add_sub")
    assert config["backend"] == "tensorflow"


IDENTITY_TYPES = [
    ("BOOL", np.bool_), ("UINT8", np.uint8), ("UINT16", np.uint16), ("UINT32", np.uint32),
    ("UINT64", np.uint64), ("INT8", np.int8), ("INT16", np.int16), ("INT32", np.int32),
    ("INT64", np.int64), ("FP16", np.float16), ("FP32", np.float32), ("FP64", np.float64),
    ("STRING", np.object_),
]


def identity_inputs(module, batch):
    inputs, data = [], {}
    for name, dtype in IDENTITY_TYPES:
        if dtype is np.object_:
            values = np.array(
                [[f"s{i}{j}".encode() * (j + 1) for j in range(4)] for i in range(batch)], dtype=np.object_
            )
            values[0, 0] = b"x" * 40  # longer than a TF_TString keeps inline
            values[0, 1] = b""
        elif dtype is np.bool_:
            values = RNG.integers(0, 2, (batch, 4)).astype(np.bool_)
        elif np.issubdtype(dtype, np.integer):
            info = np.iinfo(dtype)
            values = RNG.integers(info.min, info.max, (batch, 4), dtype=dtype, endpoint=True)
        else:
            values = RNG.standard_normal((batch, 4)).astype(dtype)
        t = module.InferInput(f"INPUT_{name}", [batch, 4], np_to_triton_dtype(values.dtype) if dtype is not np.object_ else "BYTES")
        t.set_data_from_numpy(values)
        inputs.append(t)
        data[name] = values
    return inputs, data


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_identity_of_every_datatype(tf_server, module):
    client = (
        httpclient.InferenceServerClient(tf_server.url) if module is httpclient else grpc_client_for(tf_server)
    )
    inputs, data = identity_inputs(module, 2)
    r = client.infer("tf_savedmodel_identity_all", inputs)
    for name, _ in IDENTITY_TYPES:
        out = r.as_numpy(f"OUTPUT_{name}")
        np.testing.assert_array_equal(out, data[name], err_msg=name)


def test_strings_through_a_graphdef(tf_server):
    client = httpclient.InferenceServerClient(tf_server.url)
    words = np.array([[b"a", b"", "\u00e9t\u00e9".encode()], [b"x" * 100, b"b", b"c"]], dtype=np.object_)
    i = httpclient.InferInput("INPUT0", [2, 3], "BYTES")
    i.set_data_from_numpy(words)
    out = client.infer("tf_graphdef_string", [i]).as_numpy("OUTPUT0")
    assert out.shape == (2, 3)
    readme = (FIXTURES / "README.md").read_text()
    assert "tf_graphdef_string" in readme
    # Each element came back changed the same way, however long.
    suffix = out[0][1]
    assert all(o == w + suffix for o, w in zip(out.flatten(), words.flatten())), out


def test_a_named_signature_is_served(tf_server):
    client = httpclient.InferenceServerClient(tf_server.url)
    x = RNG.standard_normal((2, 4)).astype(np.float32)
    i = httpclient.InferInput("INPUT0", [2, 4], "FP32")
    i.set_data_from_numpy(x)
    # TF_SIGNATURE_DEF names `triple`, not serving_default's doubling.
    np.testing.assert_allclose(client.infer("tf_savedmodel_signature", [i]).as_numpy("OUTPUT0"), x * 3)


def test_statistics_count_tensorflow_models(tf_server):
    client = httpclient.InferenceServerClient(tf_server.url)
    before = client.get_inference_statistics("tf_graphdef_add_sub")["model_stats"][0]["inference_count"]
    add_sub(client, httpclient, "tf_graphdef_add_sub", 2)
    after = client.get_inference_statistics("tf_graphdef_add_sub")["model_stats"][0]
    assert after["inference_count"] == before + 2
    assert int(after["inference_stats"]["compute_infer"]["ns"]) > 0


def with_config(repo, name, edit):
    path = repo / name / "config.pbtxt"
    path.write_text(edit(path.read_text()))


def test_dynamic_batching_forms_batches(tmp_path):
    repo = fixture_repo(tmp_path, ["tf_savedmodel_add_sub"])
    # With trtis's TF_DISABLE_THREAD_SPINNING too: accepted, and the model
    # serves.
    with_config(repo, "tf_savedmodel_add_sub", lambda t: t + "\ndynamic_batching { max_queue_delay_microseconds: 200000 }\n"
                'parameters { key: "TF_DISABLE_THREAD_SPINNING" value { string_value: "true" } }\n')
    server = start_or_fail(TrtisServer(repo, name="tf batching"))
    try:
        errors = []

        def one():
            try:
                add_sub(httpclient.InferenceServerClient(server.url), httpclient, "tf_savedmodel_add_sub", 1)
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        import threading

        threads = [threading.Thread(target=one) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        stats = httpclient.InferenceServerClient(server.url).get_inference_statistics(
            "tf_savedmodel_add_sub")["model_stats"][0]
        assert stats["inference_count"] == 6
        assert stats["execution_count"] < 6, stats
    finally:
        stop_and_check(server)


def test_a_savedmodel_without_config_is_completed_from_its_signature(tmp_path):
    repo = fixture_repo(tmp_path, ["tf_savedmodel_add_sub"])
    (repo / "tf_savedmodel_add_sub" / "config.pbtxt").unlink()
    server = start_or_fail(TrtisServer(repo, name="tf auto-complete"))
    try:
        client = httpclient.InferenceServerClient(server.url)
        config = client.get_model_config("tf_savedmodel_add_sub")
        assert config["platform"] == "tensorflow_savedmodel"
        assert config["max_batch_size"] == 4
        assert sorted(i["name"] for i in config["input"]) == ["INPUT0", "INPUT1"]
        assert [int(d) for d in config["input"][0]["dims"]] == [16]
        assert config["output"][0]["data_type"] == "TYPE_FP32"
        add_sub(client, httpclient, "tf_savedmodel_add_sub", 2)
    finally:
        stop_and_check(server)


# name, how the config or files are broken, what the reason says
BROKEN = {
    "corrupt_graphdef": ("tf_graphdef_add_sub", "corrupt", "unable to load model 'tf_graphdef_add_sub'"),
    # Parses (the names are right), but TensorFlow cannot import it.
    "unknown_op_graphdef": ("tf_graphdef_add_sub", "unknown_op", "unable to load model 'tf_graphdef_add_sub': "),
    "missing_signature": (
        "tf_savedmodel_add_sub",
        lambda t: t + '\nparameters { key: "TF_SIGNATURE_DEF" value { string_value: "nope" } }\n',
        "unable to load model 'tf_savedmodel_add_sub', expected 'nope' signature",
    ),
    "bad_spinning_flag": (
        "tf_savedmodel_add_sub",
        lambda t: t + '\nparameters { key: "TF_DISABLE_THREAD_SPINNING" value { string_value: "maybe" } }\n',
        "failed to convert 'maybe' to boolean",
    ),
    "unknown_input": (
        "tf_savedmodel_add_sub",
        lambda t: t.replace('"INPUT1"', '"INPUT9"'),
        "unexpected inference input 'INPUT9', allowed inputs are: INPUT0, INPUT1",
    ),
    "unknown_graph_input": (
        "tf_graphdef_add_sub",
        lambda t: t.replace('"INPUT1"', '"INPUT9"'),
        "unexpected inference input 'INPUT9', allowed inputs are: INPUT0, INPUT1",
    ),
    "wrong_datatype": (
        "tf_savedmodel_add_sub",
        lambda t: t.replace("TYPE_FP32", "TYPE_INT32", 1),
        "configuration expects datatype TYPE_INT32 for input 'INPUT0', model provides TYPE_FP32",
    ),
    "wrong_graph_datatype": (
        "tf_graphdef_add_sub",
        lambda t: t.replace("TYPE_FP32", "TYPE_INT32", 1),
        "configuration expects datatype TYPE_INT32 for input 'INPUT0', model provides TYPE_FP32",
    ),
}


def graph_def(nodes):
    """A GraphDef of (name, op) nodes, encoded by hand (field 1: NodeDef
    with name = 1, op = 2)."""

    def field(number, payload):
        return bytes([number << 3 | 2, len(payload)]) + payload

    return b"".join(field(1, field(1, n.encode()) + field(2, op.encode())) for n, op in nodes)


def test_broken_models_fail_alone_and_validate_config_agrees(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    for case, (model, edit, _) in BROKEN.items():
        shutil.copytree(FIXTURES / model, repo / case)
        config = repo / case / "config.pbtxt"
        text = config.read_text().replace(f'name: "{model}"', f'name: "{case}"')
        if edit == "corrupt":
            (repo / case / "1" / "model.graphdef").write_bytes(b"\x0a\xff\xff\xff garbage")
        elif edit == "unknown_op":
            (repo / case / "1" / "model.graphdef").write_bytes(graph_def(
                [("INPUT0", "Placeholder"), ("INPUT1", "Placeholder"), ("OUTPUT0", "NoSuchOp"), ("OUTPUT1", "NoSuchOp")]))
        else:
            text = edit(text).replace(f"model '{model}'", f"model '{case}'")
        config.write_text(text)
    shutil.copytree(FIXTURES / "tf_graphdef_add_sub", repo / "tf_graphdef_add_sub")
    server = start_or_fail(TrtisServer(repo, ["--exit-on-error=false", "--strict-readiness=false"],
                                       name="tf broken"))
    try:
        client = httpclient.InferenceServerClient(server.url)
        index = {m["name"]: m for m in client.get_model_repository_index()}
        for case, (_, _, reason) in BROKEN.items():
            assert index[case]["state"] == "UNAVAILABLE", index[case]
            assert reason.replace("tf_graphdef_add_sub", case).replace("tf_savedmodel_add_sub", case) \
                in index[case]["reason"], index[case]
        add_sub(client, httpclient, "tf_graphdef_add_sub", 2)
    finally:
        stop_and_check(server)
    # validate-config finds what needs no TensorFlow to know.
    out = subprocess.run([str(trtis_bin()), "validate-config", str(repo)], capture_output=True, text=True)
    assert out.returncode != 0
    for case in ["missing_signature", "bad_spinning_flag", "unknown_input", "unknown_graph_input", "wrong_datatype", "corrupt_graphdef"]:
        assert f"{case}/" in out.stdout + out.stderr, (case, out.stdout, out.stderr)


def test_a_missing_library_fails_the_model_with_the_reason(tmp_path):
    repo = fixture_repo(tmp_path, ["tf_graphdef_add_sub"])
    shutil.copytree(EXAMPLES / "simple", repo / "simple")
    server = start_or_fail(TrtisServer(
        repo, ["--exit-on-error=false", "--strict-readiness=false"], name="tf missing library",
        env={"TRTIS_TENSORFLOW_LIB": str(tmp_path / "no" / "libtensorflow_cc.so.2")},
    ))
    try:
        client = httpclient.InferenceServerClient(server.url)
        entry = next(m for m in client.get_model_repository_index() if m["name"] == "tf_graphdef_add_sub")
        assert entry["state"] == "UNAVAILABLE"
        assert "TRTIS_TENSORFLOW_LIB names" in entry["reason"] and "tensorflow-cpu" in entry["reason"], entry
        assert client.is_model_ready("simple")
    finally:
        stop_and_check(server)


# -- the classifier -------------------------------------------------------------


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    repo = tmp_path_factory.mktemp("tfc") / "repo"
    repo.mkdir()
    for name in ["efficientnet_lite0_savedmodel", "efficientnet_lite0_graphdef"]:
        shutil.copytree(TF_EXAMPLES / name, repo / name)
    for name in ["efficientnet_lite0", "preprocess_inception", "efficientnet_ensemble"]:
        shutil.copytree(EXAMPLES / name, repo / name)
    ensemble = (EXAMPLES / "efficientnet_ensemble" / "config.pbtxt").read_text()
    (repo / "efficientnet_tf_ensemble").mkdir()
    (repo / "efficientnet_tf_ensemble" / "1").mkdir()
    shutil.copy(EXAMPLES / "efficientnet_ensemble" / "labels.txt", repo / "efficientnet_tf_ensemble")
    (repo / "efficientnet_tf_ensemble" / "config.pbtxt").write_text(
        ensemble.replace('name: "efficientnet_ensemble"', 'name: "efficientnet_tf_ensemble"')
        .replace('model_name: "efficientnet_lite0"', 'model_name: "efficientnet_lite0_savedmodel"')
    )
    server = start_or_fail(TrtisServer(repo, name="tf classifier"))
    yield server
    stop_and_check(server)


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_the_classifier_agrees_with_onnx(classifier, module):
    client = httpclient.InferenceServerClient(classifier.url) if module is httpclient else grpc_client_for(classifier)
    x = RNG.uniform(-1, 1, (3, 3, 224, 224)).astype(np.float32)

    def logits(model, name_in, name_out):
        i = module.InferInput(name_in, list(x.shape), "FP32")
        i.set_data_from_numpy(x)
        return client.infer(model, [i]).as_numpy(name_out)

    onnx = logits("efficientnet_lite0", "input", "output")
    for model in ["efficientnet_lite0_savedmodel", "efficientnet_lite0_graphdef"]:
        tf = logits(model, "input", "output")
        assert tf.shape == (3, 1000)
        assert np.max(np.abs(tf - onnx)) < 1e-3, model


def test_trtis_infer_says_espresso(classifier):
    for model in ["efficientnet_lite0_savedmodel", "efficientnet_lite0_graphdef", "efficientnet_tf_ensemble"]:
        scaling = "NONE" if model.endswith("ensemble") else "INCEPTION"
        for protocol, url in [("http", f"127.0.0.1:{classifier.port}"), ("grpc", classifier.grpc_url)]:
            out = subprocess.run(
                [str(trtis_bin()), "infer", "-m", model, "-u", url, "-i", protocol, "-s", scaling, "-c", "3",
                 str(REPO_ROOT / "examples" / "images" / "coffee.jpg")],
                capture_output=True, text=True, timeout=120,
            )
            assert out.returncode == 0, out.stderr
            assert "(espresso)" in out.stdout.splitlines()[2], (model, protocol, out.stdout)


def test_the_ensemble_of_onnx_preprocessing_and_the_tf_classifier(classifier):
    client = httpclient.InferenceServerClient(classifier.url)
    image = RNG.integers(0, 256, size=(2, 224, 224, 3), dtype=np.uint8)

    def classes(model):
        i = httpclient.InferInput("IMAGE", list(image.shape), "UINT8")
        i.set_data_from_numpy(image)
        return client.infer(model, [i]).as_numpy("CLASSES")

    onnx, tf = classes("efficientnet_ensemble"), classes("efficientnet_tf_ensemble")
    assert np.max(np.abs(onnx - tf)) < 1e-3


def test_sequences_accumulate_in_implicit_state(tmp_path):
    """The sequence batcher feeds the START control and the implicit state
    (INPUT_STATE -> OUTPUT_STATE) to a SavedModel by their signature keys."""
    repo = fixture_repo(tmp_path, ["tf_savedmodel_accumulator"])
    server = start_or_fail(TrtisServer(repo, name="tf sequence"))
    try:
        for module, client, base in [
            (httpclient, httpclient.InferenceServerClient(server.url), 100),
            (grpcclient, grpc_client_for(server), 200),
        ]:
            def step(seq, value, start=False, end=False):
                i = module.InferInput("INPUT", [1, 1], "INT32")
                i.set_data_from_numpy(np.array([[value]], dtype=np.int32))
                r = client.infer("tf_savedmodel_accumulator", [i], sequence_id=seq,
                                 sequence_start=start, sequence_end=end)
                return int(r.as_numpy("OUTPUT")[0][0])

            assert step(base + 1, 5, start=True) == 5
            assert step(base + 2, 100, start=True) == 100
            assert step(base + 1, 6) == 11
            assert step(base + 2, 1) == 101
            assert step(base + 1, -1, end=True) == 10
            assert step(base + 2, 1, end=True) == 102
            assert step(base + 1, 3, start=True, end=True) == 3
    finally:
        stop_and_check(server)


def test_warmup_and_reshape(tmp_path):
    """model_warmup runs through the TensorFlow instance before READY, and a
    reshape lets clients send [4,4] to a model of [16]."""
    repo = fixture_repo(tmp_path, ["tf_graphdef_add_sub"])
    with_config(repo, "tf_graphdef_add_sub", lambda t: t.replace(
        "dims: [ 16 ]", "dims: [ 4, 4 ]\n    reshape: { shape: [ 16 ] }"
    ) + """
model_warmup [ {
  name: "zeros" batch_size: 2
  inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 4, 4 ] zero_data: true } }
  inputs { key: "INPUT1" value: { data_type: TYPE_FP32 dims: [ 4, 4 ] random_data: true } }
} ]
""")
    server = start_or_fail(TrtisServer(repo, name="tf warmup"))
    try:
        client = httpclient.InferenceServerClient(server.url)
        stats = client.get_inference_statistics("tf_graphdef_add_sub")["model_stats"][0]
        assert stats["inference_count"] == 0  # warmup is not counted, as in Triton
        a = RNG.standard_normal((3, 4, 4)).astype(np.float32)
        b = RNG.standard_normal((3, 4, 4)).astype(np.float32)
        inputs = [httpclient.InferInput("INPUT0", [3, 4, 4], "FP32"), httpclient.InferInput("INPUT1", [3, 4, 4], "FP32")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
        r = client.infer("tf_graphdef_add_sub", inputs)
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)
    finally:
        stop_and_check(server)


def test_gen_config_of_a_savedmodel(tmp_path):
    sm = FIXTURES / "tf_savedmodel_add_sub" / "1" / "model.savedmodel"
    out = subprocess.run([str(trtis_bin()), "gen-config", str(sm)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert 'name: "tf_savedmodel_add_sub"' in out.stdout
    assert 'platform: "tensorflow_savedmodel"' in out.stdout
    assert "max_batch_size: 4" in out.stdout
    assert out.stdout.count('data_type: TYPE_FP32') == 4
    # The generated config serves the model.
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURES / "tf_savedmodel_add_sub", repo / "tf_savedmodel_add_sub")
    (repo / "tf_savedmodel_add_sub" / "config.pbtxt").write_text(out.stdout)
    server = start_or_fail(TrtisServer(repo, name="tf gen-config"))
    try:
        add_sub(httpclient.InferenceServerClient(server.url), httpclient, "tf_savedmodel_add_sub", 2)
    finally:
        stop_and_check(server)
