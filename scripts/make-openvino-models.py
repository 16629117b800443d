#!/usr/bin/env python3
"""Make the OpenVINO IR models (model.xml + model.bin) that trtis's OpenVINO backend tests and
examples use, with OpenVINO's own converter and opset API from the PyPI wheel.

What it writes (every file is rewritten on each run):

  tests/fixtures/openvino/             small IR test models, made from scratch with ov.opset
    add_sub/model.xml, .bin            OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1,
                                       FP32 [-1, 4] (dynamic dimension 0)
    add_sub_fixed/model.xml, .bin      the same maths, static [2, 4]
    add_sub_layout/model.xml, .bin     add_sub with the layout "N..." on every input and output
                                       (what makes Triton's auto-complete batch an OpenVINO model)
    accumulator/model.xml, .bin        a running sum for the sequence batcher's implicit state, FP32 [-1, 1]:
                                       OUTPUT = OUTPUT_STATE = INPUT_STATE * (1 - START) + INPUT
    README.md                          what each model computes
  examples/model_repository/efficientnet_lite0_openvino/1/model.xml, model.bin
                                       the project's EfficientNet-Lite0 classifier converted from its
                                       ONNX file (../shared/models/efficientnet_lite0/efficientnet_lite0.onnx)
                                       by ov.convert_model, FP32 weights (compress_to_fp16=False):
                                       input "input" FP32 [-1, 3, 224, 224], output "output" [-1, 1000]

The script checks every model by compiling it on the CPU and running it: the fixtures exactly,
the classifier against ONNX Runtime on the same ONNX file (max |difference| <= 1e-3 on the
project's four images and a random batch) and coffee.png -> espresso (967). It fails (exit
status 1) if a check fails.

Run (from the repository root; the venv is not needed by the tests: about 370 MB, 20 s):

  python3 -m venv /tmp/ovgen-venv
  /tmp/ovgen-venv/bin/pip install openvino==2026.4.1 onnxruntime==1.31.1 numpy==2.4.6 pillow==13.0.0
  /tmp/ovgen-venv/bin/python scripts/make-openvino-models.py [--models-dir ../shared/models]

openvino must be the version scripts/setup.sh installs for the backend (OPENVINO_REQ). The
output is deterministic for a given version.

Provenance: this script is trtis's own code; the fixtures are made from scratch; the classifier
comes from the project's ONNX file (weights Apache-2.0, see ../shared/models/README.md).
"""

import argparse
import shutil
import sys
from pathlib import Path

import numpy as np
import openvino as ov
import openvino.opset13 as ops

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "openvino"
CLASSIFIER = ROOT / "examples" / "model_repository" / "efficientnet_lite0_openvino" / "1"


def pinned():
    for line in (ROOT / "scripts" / "setup.sh").read_text().splitlines():
        if line.startswith("OPENVINO_REQ="):
            return line.split("==", 1)[1].strip('"')
    raise SystemExit("no OPENVINO_REQ pin in scripts/setup.sh")


def add_sub(shape, layout=None):
    a = ops.parameter(shape, np.float32, name="INPUT0")
    b = ops.parameter(shape, np.float32, name="INPUT1")
    s = ops.add(a, b)
    d = ops.subtract(a, b)
    s.output(0).get_tensor().set_names({"OUTPUT0"})
    d.output(0).get_tensor().set_names({"OUTPUT1"})
    model = ov.Model([s, d], [a, b], "add_sub")
    if layout:
        ppp = ov.preprocess.PrePostProcessor(model)
        for i in range(2):
            ppp.input(i).model().set_layout(ov.Layout(layout))
            ppp.output(i).model().set_layout(ov.Layout(layout))
        model = ppp.build()
    return model


def accumulator():
    x = ops.parameter([-1, 1], np.float32, name="INPUT")
    start = ops.parameter([-1, 1], np.float32, name="START")
    state = ops.parameter([-1, 1], np.float32, name="INPUT_STATE")
    one = ops.constant(np.ones((1, 1), np.float32))
    new = ops.add(ops.multiply(state, ops.subtract(one, start)), x)
    out = ops.multiply(new, one)
    new.output(0).get_tensor().set_names({"OUTPUT_STATE"})
    out.output(0).get_tensor().set_names({"OUTPUT"})
    return ov.Model([out, new], [x, start, state], "accumulator")


def run(core, path, feeds):
    compiled = core.compile_model(core.read_model(path), "CPU")
    result = compiled(feeds)
    return {out.get_any_name(): result[out] for out in compiled.outputs}


def fixtures(core):
    shutil.rmtree(FIXTURES, ignore_errors=True)
    FIXTURES.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name, shape, batch, layout in (
        ("add_sub", [-1, 4], 3, None),
        ("add_sub_fixed", [2, 4], 2, None),
        ("add_sub_layout", [-1, 4], 3, "N..."),
    ):
        (FIXTURES / name).mkdir()
        xml = FIXTURES / name / "model.xml"
        ov.save_model(add_sub(shape, layout), xml, compress_to_fp16=False)
        a = rng.standard_normal((batch, 4)).astype(np.float32)
        b = rng.standard_normal((batch, 4)).astype(np.float32)
        out = run(core, xml, {"INPUT0": a, "INPUT1": b})
        assert np.array_equal(out["OUTPUT0"], a + b) and np.array_equal(out["OUTPUT1"], a - b), name
        print(f"wrote {xml.relative_to(ROOT)}")
    (FIXTURES / "accumulator").mkdir()
    xml = FIXTURES / "accumulator" / "model.xml"
    ov.save_model(accumulator(), xml, compress_to_fp16=False)
    x = np.array([[2.0], [3.0]], np.float32)
    start = np.array([[1.0], [0.0]], np.float32)
    state = np.array([[5.0], [5.0]], np.float32)
    out = run(core, xml, {"INPUT": x, "START": start, "INPUT_STATE": state})
    assert np.array_equal(out["OUTPUT"], [[2.0], [8.0]]) and np.array_equal(out["OUTPUT_STATE"], [[2.0], [8.0]])
    print(f"wrote {xml.relative_to(ROOT)}")
    (FIXTURES / "README.md").write_text(
        "# OpenVINO IR test models\n\n"
        f"Made by `scripts/make-openvino-models.py` with openvino {ov.__version__} from PyPI, from scratch "
        "(`openvino.opset13`).\n\n"
        "- `add_sub/`: `OUTPUT0 = INPUT0 + INPUT1`, `OUTPUT1 = INPUT0 - INPUT1`, FP32 `[-1, 4]`.\n"
        "- `add_sub_fixed/`: the same, static FP32 `[2, 4]`.\n"
        "- `add_sub_layout/`: `add_sub` with the layout `N...` on every input and output (auto-complete batches it).\n"
        "- `accumulator/`: a running sum for the sequence batcher's implicit state, FP32 `[-1, 1]`: "
        "`OUTPUT = OUTPUT_STATE = INPUT_STATE * (1 - START) + INPUT`.\n"
    )


def classifier(core, models_dir):
    import onnxruntime as ort
    from PIL import Image

    onnx = models_dir / "efficientnet_lite0" / "efficientnet_lite0.onnx"
    shutil.rmtree(CLASSIFIER, ignore_errors=True)
    CLASSIFIER.mkdir(parents=True)
    xml = CLASSIFIER / "model.xml"
    ov.save_model(ov.convert_model(onnx), xml, compress_to_fp16=False)
    session = ort.InferenceSession(str(onnx), providers=["CPUExecutionProvider"])
    images = []
    for name in ("coffee", "chelsea", "rocket", "astronaut"):
        pixels = np.asarray(Image.open(models_dir / "images" / "224" / f"{name}.png").convert("RGB"))
        images.append((pixels.astype(np.float32) / 127.5 - 1).transpose(2, 0, 1))
    worst = 0.0
    rng = np.random.default_rng(1)
    for x in (np.stack(images[:1]), np.stack(images), rng.uniform(-1, 1, (5, 3, 224, 224)).astype(np.float32)):
        got = run(core, xml, {"input": x})["output"]
        want = session.run(None, {"input": x})[0]
        worst = max(worst, float(np.abs(got - want).max()))
    top = int(run(core, xml, {"input": np.stack(images[:1])})["output"].argmax())
    print(f"wrote {xml.relative_to(ROOT)}; max |OpenVINO - ONNX Runtime| = {worst:.2e}; coffee -> class {top}")
    assert worst <= 1e-3, worst
    assert top == 967, "coffee.png is not classified as espresso (967)"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--models-dir", default=str(ROOT.parent / "shared" / "models"))
    args = parser.parse_args()
    if ov.__version__.split("-")[0] != pinned():
        sys.exit(f"openvino {ov.__version__} here, but scripts/setup.sh pins {pinned()}")
    core = ov.Core()
    fixtures(core)
    classifier(core, Path(args.models_dir))
    print("all checks passed")


if __name__ == "__main__":
    main()
