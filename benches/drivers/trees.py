"""Tree models on the FIL backend against the frameworks' own predictors,
same run (issue 59).

The benchmark models, made at bench time by the real packages (installed
into .venv-bench-trees: xgboost-cpu, lightgbm, scikit-learn) on
scikit-learn's make_classification (32 features, 5% of the cells NaN):
XGBoost binary:logistic and LightGBM binary, 500 trees of depth 8 each.
Both served as FIL models (one CPU instance, max batch 8192,
dynamic_batching with a 100 µs delay, predict_proba dims [1]).

In-process, on the same 10,000 held-out rows at batch 1, 128 and 10,000:
the FIL backend's instance loaded and run directly
(examples/engine_direct.rs, --rows), XGBoost's `inplace_predict` and
LightGBM's `predict`, each framework at its best of 1 and every core's
threads; TAKES alternating takes, medians. Served: perf_analyzer over gRPC,
one row per request from the same rows, at concurrency 1, 4 and 16;
throughput against the engine's own in-process batch-128 rate.

Run it with scripts/bench.sh trees. Results: target/bench/trees-bench.md.
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402

VENV = os.path.join(bench.ROOT, ".venv-bench-trees")
PACKAGES = ["xgboost-cpu==3.2.0", "lightgbm==4.7.0", "scikit-learn==1.9.1", "numpy<2"]
DIRECT = os.path.join(bench.ROOT, "target/release/examples/engine_direct")
WORK = os.path.join(bench.OUT, "trees")
BATCHES = (1, 128, 10000)
TAKES = int(os.environ.get("TREES_TAKES", "3"))
SECONDS = 3.0
FEATURES = 32

# Runs in .venv-bench-trees: makes the models and rows (once), or times a
# framework's predictor on the rows at each batch size.
HELPER = textwrap.dedent('''
    import json, os, sys, time
    import numpy as np
    work, what = sys.argv[1], sys.argv[2]
    if what == "make":
        import lightgbm as lgb, xgboost as xgb
        from sklearn.datasets import make_classification
        X, y = make_classification(n_samples=60000, n_features=%(F)d, n_informative=20, random_state=0)
        X = X.astype(np.float32)
        X[np.random.default_rng(0).random(X.shape) < 0.05] = np.nan
        train, test = slice(0, 50000), slice(50000, 60000)
        b = xgb.train({"objective": "binary:logistic", "max_depth": 8, "eta": 0.1, "nthread": os.cpu_count()},
                      xgb.DMatrix(X[train], y[train]), num_boost_round=500)
        b.save_model(os.path.join(work, "xgboost.json"))
        m = lgb.train({"objective": "binary", "max_depth": 8, "num_leaves": 255, "learning_rate": 0.1,
                       "verbose": -1, "num_threads": os.cpu_count()},
                      lgb.Dataset(X[train], y[train]), num_boost_round=500)
        m.save_model(os.path.join(work, "model.txt"))
        X[test].tofile(os.path.join(work, "rows.f32"))
        sys.exit(0)
    X = np.fromfile(os.path.join(work, "rows.f32"), np.float32).reshape(-1, %(F)d)
    seconds = float(sys.argv[4])
    out = {}
    for batch in json.loads(sys.argv[3]):
        best = 0.0
        for threads in sorted({1, os.cpu_count()}):
            if what == "xgboost":
                import xgboost as xgb
                b = xgb.Booster(model_file=os.path.join(work, "xgboost.json"))
                b.set_param({"nthread": threads})
                run = lambda rows: b.inplace_predict(rows)
            else:
                import lightgbm as lgb
                m = lgb.Booster(model_file=os.path.join(work, "model.txt"))
                run = lambda rows: m.predict(rows, num_threads=threads)
            at, rows_done = 0, 0
            for _ in range(3):
                run(X[:batch])
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                if at + batch > len(X):
                    at = 0
                run(X[at:at + batch])
                at += batch
                rows_done += batch
            best = max(best, rows_done / (time.perf_counter() - t0))
        out[batch] = best
    print(json.dumps(out))
''') % {"F": FEATURES}


def config(name, model_type):
    return textwrap.dedent(f'''\
        name: "{name}"
        backend: "fil"
        max_batch_size: 10000
        input [ {{ name: "input__0" data_type: TYPE_FP32 dims: [ {FEATURES} ] }} ]
        output [ {{ name: "output__0" data_type: TYPE_FP32 dims: [ 1 ] }} ]
        instance_group [ {{ count: 1 kind: KIND_CPU }} ]
        dynamic_batching {{ max_queue_delay_microseconds: 100 }}
        parameters [
          {{ key: "model_type" value: {{ string_value: "{model_type}" }} }},
          {{ key: "is_classifier" value: {{ string_value: "true" }} }},
          {{ key: "predict_proba" value: {{ string_value: "true" }} }}
        ]
        ''')


def helper(*args):
    out = subprocess.run([os.path.join(VENV, "bin/python"), "-c", HELPER, WORK, *args],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout) if out.stdout.strip() else None


def direct(model_dir, batch):
    out = subprocess.run([DIRECT, "--model-dir", model_dir, "--batch", str(batch), "--seconds", str(SECONDS),
                          "--rows", os.path.join(WORK, "rows.f32")],
                         capture_output=True, text=True, check=True, cwd=bench.ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])["infer_per_s"]


def main():
    os.makedirs(WORK, exist_ok=True)
    if not os.path.exists(os.path.join(VENV, "bin/python")):
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
        subprocess.run([os.path.join(VENV, "bin/pip"), "install", "-q", *PACKAGES], check=True)
    if not os.path.exists(os.path.join(WORK, "rows.f32")):
        print("trees: training the benchmark models (500 trees, depth 8)", flush=True)
        helper("make")
    subprocess.run(["cargo", "build", "--release", "--locked", "--example", "engine_direct"], cwd=bench.ROOT, check=True)
    repo = tempfile.mkdtemp(prefix="trtis-trees-")
    models = {"xgb_trees": ("xgboost_json", "xgboost.json", "xgboost"),
              "lgb_trees": ("lightgbm", "model.txt", "lightgbm")}
    for name, (model_type, file, _) in models.items():
        os.makedirs(os.path.join(repo, name, "1"))
        shutil.copy(os.path.join(WORK, file), os.path.join(repo, name, "1", file))
        open(os.path.join(repo, name, "config.pbtxt"), "w").write(config(name, model_type))
    got = {}
    try:
        for take in range(TAKES):
            for name, (_, _, framework) in models.items():
                order = ("trtis", framework) if take % 2 == 0 else (framework, "trtis")
                for who in order:
                    if who == "trtis":
                        rates = {b: direct(os.path.join(repo, name), b) for b in BATCHES}
                    else:
                        rates = {int(k): v for k, v in helper(framework, json.dumps(BATCHES), str(SECONDS)).items()}
                    for b, v in rates.items():
                        got.setdefault((name, who, b), []).append(v)
                    print(name, who, {b: f"{v:.0f}" for b, v in rates.items()}, flush=True)
        # Served: one row per request, rows from the same held-out set.
        rows = __import__("array").array("f")
        with open(os.path.join(WORK, "rows.f32"), "rb") as f:
            rows.frombytes(f.read(FEATURES * 4 * 200))
        data = {"data": [{"input__0": {"content": [None if x != x else x for x in rows[i * FEATURES:(i + 1) * FEATURES]],
                                       "shape": [FEATURES]}} for i in range(200)]}
        # perf_analyzer's JSON has no NaN: a missing value goes as 0 here.
        for entry in data["data"]:
            entry["input__0"]["content"] = [0.0 if x is None else x for x in entry["input__0"]["content"]]
        data_file = os.path.join(WORK, "rows.json")
        json.dump(data, open(data_file, "w"))
        server = bench.Server(repo, 18500)
        served = {}
        for name in models:
            for c in (1, 4, 16):
                r = bench.perf(server, name, c, extra=("--input-data", data_file), protocol="grpc")
                served[(name, c)] = r
                print(name, "served c", c, r, flush=True)
        server.stop()
    finally:
        shutil.rmtree(repo, ignore_errors=True)
    med = lambda k: statistics.median(got[k])  # noqa: E731
    lines = ["# Tree models: the FIL backend vs the frameworks' own predictors", "",
             f"{os.cpu_count()} CPUs. 500 trees of depth 8, {FEATURES} features (5% NaN), binary; "
             f"{TAKES} alternating takes of {SECONDS:.0f} s, medians; frameworks at their best of 1 and "
             f"{os.cpu_count()} threads (xgboost-cpu 3.2.0, lightgbm 4.7.0).", "",
             "| model | batch | trtis engine rows/s | framework rows/s | trtis / framework |",
             "| --- | --- | --- | --- | --- |"]
    for name, (_, _, framework) in models.items():
        for b in BATCHES:
            t, f = med((name, "trtis", b)), med((name, framework, b))
            lines.append(f"| {name} ({framework}) | {b} | {t:.0f} | {f:.0f} | {t / f:.2f} |")
    lines += ["", "Served: perf_analyzer over gRPC, one row per request, dynamic batching (100 µs).", "",
              "| model | concurrency | rows/s | p50 ms | server CPU µs/row | / in-process batch 128 |",
              "| --- | --- | --- | --- | --- | --- |"]
    for (name, c), r in served.items():
        if "error" in r:
            lines.append(f"| {name} | {c} | {r['error']} | | | |")
            continue
        ref = med((name, "trtis", 128))
        lines.append(f"| {name} | {c} | {r['throughput']:.0f} | {r['p50_ms']:.2f} | {r['cpu_us']:.1f} | "
                     f"{r['throughput'] / ref:.2f} |")
    text = "\n".join(lines) + "\n"
    open(os.path.join(bench.OUT, "trees-bench.md"), "w").write(text)
    print(text)


if __name__ == "__main__":
    main()
