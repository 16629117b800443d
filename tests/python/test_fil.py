"""Tree models on the `fil` backend (Triton's FIL backend's configs and
files) through Triton's own clients against a real `trtis serve`.

The models are tests/fixtures/fil/models, made by the real xgboost,
lightgbm and scikit-learn packages (make_fixtures.py, versions in
provenance.json), each with the rows it was checked on and the framework's
own predictions (`expected.npz`): XGBoost JSON and UBJSON, LightGBM text,
scikit-learn forests as Treelite checkpoints; binary, multi-class,
regression, Poisson, missing values, categorical features, random forests
(LightGBM's and scikit-learn's), gradient boosting and an isolation forest.

Covered: every fixture over HTTP and gRPC equals the framework's own
predict within 1e-5 relative (probabilities, classes by the
threshold and by the most probable class, margins of a regressor); the
dynamic batcher; `trtis infer` with a .npy; an ensemble of a Python
feature step and a tree model; bad models, parameters, configs
and requests refused with the reason by `serve` and `validate-config`
alike, the server serving on.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from trtis_harness import REPO_ROOT, grpc_client_for, running_server, trtis_bin

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "fil" / "models"
SERVED = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())
FILES = {"xgboost_json": "xgboost.json", "xgboost_ubj": "xgboost.ubj", "lightgbm": "model.txt",
         "treelite_checkpoint": "checkpoint.tl", "xgboost": "xgboost.model"}


def config(name: str, model_type: str, features: int, width: int, *, classifier: bool,
           proba: bool, extra: str = "") -> str:
    params = [("model_type", model_type), ("output_class", str(classifier).lower()),
              ("predict_proba", str(proba).lower()), ("threshold", "0.5")]
    listed = ",\n  ".join(f'{{ key: "{k}" value: {{ string_value: "{v}" }} }}' for k, v in params)
    return (f'name: "{name}"\nbackend: "fil"\nmax_batch_size: 256\n'
            f'input [ {{ name: "input__0" data_type: TYPE_FP32 dims: [ {features} ] }} ]\n'
            f'output [ {{ name: "output__0" data_type: TYPE_FP32 dims: [ {width} ] }} ]\n'
            f'instance_group [ {{ count: 1 kind: KIND_CPU }} ]\n'
            f'dynamic_batching {{ max_queue_delay_microseconds: 500 }}\n'
            f'parameters [\n  {listed}\n]\n{extra}')


def fixture(name: str) -> tuple[str, dict]:
    """(model_type, expected arrays) of a fixture."""
    text = (FIXTURES / name / "config.pbtxt").read_text()
    model_type = next(t for t in FILES if f'"{t}"' in text)
    return model_type, dict(np.load(FIXTURES / name / "expected.npz"))


def variants(name: str) -> list[tuple[str, str, np.ndarray]]:
    """The configs a fixture is served with: (model name, config, expected
    output__0 for the fixture's rows)."""
    model_type, e = fixture(name)
    rows = e["X"]
    features = rows.shape[1]
    preds = e["predictions"].astype(np.float64)
    if name == "skl_isolation_forest":
        # Treelite's (and so Triton's) score is -score_samples, within 1e-8
        # of scikit-learn's.
        preds = e["treelite_gtil"].reshape(-1)
        assert np.allclose(preds, -e["predictions"], rtol=1e-6)
    out = []
    if "proba" in e:  # binary: [1-p, p], p alone, and the class
        p = e["proba"][:, 1]
        out.append((f"{name}__proba2", config(f"{name}__proba2", model_type, features, 2, classifier=True, proba=True), e["proba"]))
        out.append((f"{name}__proba1", config(f"{name}__proba1", model_type, features, 1, classifier=True, proba=True), p))
        out.append((f"{name}__class", config(f"{name}__class", model_type, features, 1, classifier=True, proba=False), (p > 0.5).astype(np.float64)))
    elif preds.ndim == 2:  # multi-class probabilities, and the class
        k = preds.shape[1]
        out.append((f"{name}__proba", config(f"{name}__proba", model_type, features, k, classifier=True, proba=True), preds))
        out.append((f"{name}__class", config(f"{name}__class", model_type, features, 1, classifier=True, proba=False), preds.argmax(axis=1).astype(np.float64)))
    else:  # a regressor
        out.append((f"{name}__reg", config(f"{name}__reg", model_type, features, 1, classifier=False, proba=False), preds))
    return out


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("fil")
    for name in SERVED:
        model_type, _ = fixture(name)
        for model, text, _ in variants(name):
            (root / model / "1").mkdir(parents=True)
            shutil.copy(FIXTURES / name / "1" / FILES[model_type], root / model / "1")
            (root / model / "config.pbtxt").write_text(text)
    return root


@pytest.fixture(scope="module")
def server(repo):
    yield from running_server(repo)


def close(got: np.ndarray, want: np.ndarray, what: str) -> None:
    got, want = np.asarray(got, np.float64).reshape(want.shape), want
    # 1e-5 relative, with an absolute floor for values near zero (a float32
    # output of a sum of leaves).
    assert np.allclose(got, want, rtol=1e-5, atol=1e-6), (
        f"{what}: largest difference {np.max(np.abs(got - want))}\n{got[:4]}\n{want[:4]}")


@pytest.mark.parametrize("name", SERVED)
def test_predictions_equal_the_frameworks_own(server, name):
    rows = fixture(name)[1]["X"].astype(np.float32)
    http = httpclient.InferenceServerClient(server.url)
    grpc = grpc_client_for(server)
    for model, _, want in variants(name):
        for client, mod in ((http, httpclient), (grpc, grpcclient)):
            inp = mod.InferInput("input__0", list(rows.shape), "FP32")
            inp.set_data_from_numpy(rows)
            got = client.infer(model, [inp]).as_numpy("output__0")
            # Triton drops dimensions of 1: dims [1] answers [batch].
            want_shape = (len(rows),) + tuple(d for d in want.shape[1:] if d != 1)
            assert got.shape == want_shape, (model, got.shape)
            close(got, want, f"{model} over {mod.__name__}")


def test_single_rows_are_batched_by_the_dynamic_batcher(server):
    name = "xgb_multiclass"
    rows = fixture(name)[1]["X"].astype(np.float32)
    model, _, want = variants(name)[0]
    http = httpclient.InferenceServerClient(server.url, concurrency=16)

    def send(i):
        inp = httpclient.InferInput("input__0", [1, rows.shape[1]], "FP32")
        inp.set_data_from_numpy(rows[i:i + 1])
        return http.async_infer(model, [inp])

    pending = [send(i) for i in range(len(rows))]
    got = np.stack([p.get_result().as_numpy("output__0")[0] for p in pending])
    close(got, want, model)
    stats = http.get_inference_statistics(model)["model_stats"][0]
    assert stats["execution_count"] < stats["inference_count"], stats


def test_trtis_infer_reads_a_npy(server, tmp_path):
    name = "lgb_regression"
    rows = fixture(name)[1]["X"].astype(np.float32)[:3]
    model, _, want = variants(name)[0]
    np.save(tmp_path / "rows.npy", rows)
    out = subprocess.run([str(trtis_bin()), "infer", "-u", server.url, "-m", model,
                          "--input", f"input__0={tmp_path / 'rows.npy'}", "--output-dir", str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    close(np.load(tmp_path / "out" / "output__0.npy"), want[:3], "trtis infer")


BAD = {
    # (files to write, config) -> a fragment of the reason
    "truncated": (("xgboost.json", b'{"learner": {"learner_model_param": '), dict(model_type="xgboost_json", features=30, width=1), "not an XGBoost JSON model"),
    "wrong_type": (None, dict(model_type="lightgbm", features=30, width=1), "not a LightGBM text model"),
    "few_features": (None, dict(model_type="xgboost_json", features=12, width=1), "dims must be [ 30 ]"),
    "bad_type": (None, dict(model_type="pickle", features=30, width=1), "pickle not recognized as a valid serialization format."),
    "wrong_width": (None, dict(model_type="xgboost_json", features=30, width=3, proba=True), "dims must hold 1 (p) or 2 ([1-p, p]) values"),
}


def test_bad_models_and_configs_are_refused_with_the_reason(tmp_path):
    repo = tmp_path / "repo"
    good = FIXTURES / "xgb_binary" / "1" / "xgboost.json"
    for name, (file, c, _) in BAD.items():
        (repo / name / "1").mkdir(parents=True)
        target = "model.txt" if c["model_type"] == "lightgbm" else "xgboost.json"
        if file:
            (repo / name / "1" / file[0]).write_bytes(file[1])
        else:
            shutil.copy(good, repo / name / "1" / target)
        (repo / name / "config.pbtxt").write_text(config(name, c["model_type"], c["features"], c["width"], classifier=True, proba=c.get("proba", False)))
    shutil.copytree(FIXTURES / "xgb_binary", repo / "good", ignore=shutil.ignore_patterns("expected.npz"))
    (repo / "good" / "config.pbtxt").write_text(config("good", "xgboost_json", 30, 1, classifier=True, proba=False))
    for server in running_server(repo, ["--exit-on-error=false", "--strict-readiness=false"]):
        http = httpclient.InferenceServerClient(server.url)
        index = {m["name"]: m for m in http.get_model_repository_index()}
        for name, (_, _, fragment) in BAD.items():
            assert index[name]["state"] == "UNAVAILABLE", index[name]
            assert fragment in index[name]["reason"], (name, index[name]["reason"])
        # The server serves on: the good model answers; a row of NaNs takes
        # every default direction; a batch past max_batch_size is refused.
        rows = np.full((2, 30), np.nan, np.float32)
        inp = httpclient.InferInput("input__0", [2, 30], "FP32")
        inp.set_data_from_numpy(rows)
        assert http.infer("good", [inp]).as_numpy("output__0").shape == (2,)
        big = httpclient.InferInput("input__0", [257, 30], "FP32")
        big.set_data_from_numpy(np.zeros((257, 30), np.float32))
        with pytest.raises(InferenceServerException, match="batch-size must be <= 256"):
            http.infer("good", [big])
    out = subprocess.run([str(trtis_bin()), "validate-config", str(repo)], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    for name, (_, _, fragment) in BAD.items():
        assert fragment in out.stdout + out.stderr, (name, out.stdout)


def test_gpu_tuning_parameters_are_noted_and_unknown_ones_warned(tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURES / "xgb_binary", repo / "m", ignore=shutil.ignore_patterns("expected.npz"))
    extra = ('parameters [ { key: "storage_type" value: { string_value: "SPARSE" } },\n'
             '  { key: "no_such_knob" value: { string_value: "1" } } ]\n')
    (repo / "m" / "config.pbtxt").write_text(config("m", "xgboost_json", 30, 1, classifier=True, proba=False, extra=extra))
    out = subprocess.run([str(trtis_bin()), "validate-config", str(repo)], capture_output=True, text=True, timeout=60)
    assert "no_such_knob" in out.stdout and "does not read it" in out.stdout, out.stdout
    for server in running_server(repo):
        assert httpclient.InferenceServerClient(server.url).is_model_ready("m")
        assert any("storage_type tunes FIL on a GPU" in line for line in server.log_lines())


FEATURE_STEP = '''import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """A feature step: the client sends half of each value."""

    def execute(self, requests):
        out = []
        for request in requests:
            raw = pb_utils.get_input_tensor_by_name(request, "RAW").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("FEATURES", (raw * 2).astype(np.float32))]))
        return out
'''


def test_an_ensemble_of_a_python_feature_step_and_a_tree_model(tmp_path):
    name = "xgb_binary"
    e = fixture(name)[1]
    rows = e["X"].astype(np.float32)
    repo = tmp_path / "repo"
    (repo / "features" / "1").mkdir(parents=True)
    (repo / "features" / "1" / "model.py").write_text(FEATURE_STEP)
    (repo / "features" / "config.pbtxt").write_text(
        'backend: "python"\nmax_batch_size: 64\n'
        'input [ { name: "RAW" data_type: TYPE_FP32 dims: [ 30 ] } ]\n'
        'output [ { name: "FEATURES" data_type: TYPE_FP32 dims: [ 30 ] } ]\n')
    (repo / "trees" / "1").mkdir(parents=True)
    shutil.copy(FIXTURES / name / "1" / "xgboost.json", repo / "trees" / "1")
    (repo / "trees" / "config.pbtxt").write_text(config("trees", "xgboost_json", 30, 2, classifier=True, proba=True))
    (repo / "scored" / "1").mkdir(parents=True)
    (repo / "scored" / "config.pbtxt").write_text(
        'platform: "ensemble"\nmax_batch_size: 64\n'
        'input [ { name: "RAW" data_type: TYPE_FP32 dims: [ 30 ] } ]\n'
        'output [ { name: "PROBA" data_type: TYPE_FP32 dims: [ 2 ] } ]\n'
        'ensemble_scheduling { step [\n'
        '  { model_name: "features" model_version: -1 input_map { key: "RAW" value: "RAW" }'
        ' output_map { key: "FEATURES" value: "features" } },\n'
        '  { model_name: "trees" model_version: -1 input_map { key: "input__0" value: "features" }'
        ' output_map { key: "output__0" value: "PROBA" } } ] }\n')
    for server in running_server(repo, ["--python", sys.executable]):
        for client, mod in ((httpclient.InferenceServerClient(server.url), httpclient), (grpc_client_for(server), grpcclient)):
            inp = mod.InferInput("RAW", list(rows.shape), "FP32")
            inp.set_data_from_numpy(rows / 2)
            close(client.infer("scored", [inp]).as_numpy("PROBA"), e["proba"], f"ensemble over {mod.__name__}")
