#!/usr/bin/env bash
# Runs the GPU tests, on a machine with an NVIDIA GPU and its driver (none
# of the CI machines has one: there this script stops and says so, exit 3):
#   - .venv-gpu: the GPU build of ONNX Runtime with the CUDA and cuDNN
#     libraries it needs, all from PyPI (onnxruntime-gpu[cuda,cudnn], the
#     same version as .venv's CPU build; the libraries are nvidia-* wheels);
#   - TensorRT's libraries for ONNX Runtime's TensorRT provider, also from
#     PyPI (tensorrt-cu13-libs 10.x: the provider of onnxruntime-gpu 1.31
#     links libnvinfer.so.10 and libnvonnxparser.so.10, built on CUDA 13);
#   - trtis pointed at it: ORT_DYLIB_PATH to its libonnxruntime.so, the
#     nvidia wheels' and tensorrt_libs' lib directories on LD_LIBRARY_PATH;
#   - libtorch on CUDA: the torch wheel's CUDA dependencies added to
#     .venv-torch (scripts/setup.sh leaves them out; about 2.7 GB), and the
#     PyTorch backend library linked with libtorch_cuda (TRTIS_TORCH_CUDA=1);
#   - the Rust GPU tests (tests/gpu.rs, #[ignore]d elsewhere):
#     TRTIS_GPU_TESTS=1 cargo test --release --test integration -- --ignored gpu::
#   - the tritonclient GPU tests (marked `gpu`, skipped elsewhere):
#     TRTIS_GPU_TESTS=1 pytest -m gpu tests/python; tritonclient's
#     cuda_shared_memory utilities need cuda-python 12 and the CUDA 12
#     runtime, installed into .venv here (PyPI: cuda-python,
#     nvidia-cuda-runtime-cu12);
#   - with --bench, the GPU benchmark (scripts/bench.sh gpu).
# Run scripts/setup.sh first (it makes .venv, which the pytest run uses).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -e /proc/driver/nvidia/version ] && ! nvidia-smi -L >/dev/null 2>&1; then
  echo "test-gpu: no NVIDIA GPU driver on this machine (/proc/driver/nvidia/version, nvidia-smi);" >&2
  echo "test-gpu: the GPU tests need a GPU. CPU-only checks run in scripts/test.sh." >&2
  exit 3
fi
[ -x .venv/bin/python ] || { echo "test-gpu: run scripts/setup.sh first" >&2; exit 2; }

ORT_VERSION=$(.venv/bin/python -c 'import onnxruntime; print(onnxruntime.__version__)')
VENV=.venv-gpu
if [ ! -x "$VENV/bin/python" ]; then
  .venv/bin/python -m venv "$VENV"
fi
STAMP="$VENV/.trtis-ort-$ORT_VERSION-trt10"
if [ ! -e "$STAMP" ]; then
  "$VENV/bin/pip" install -q "onnxruntime-gpu[cuda,cudnn]==$ORT_VERSION" "tensorrt-cu13-libs>=10.13,<11"
  touch "$STAMP"
fi
if [ ! -e .venv-torch/.trtis-cuda ] && [ -x .venv-torch/bin/python ]; then
  TORCH_VERSION=$(ls -d .venv-torch/lib/python3*/site-packages/torch-*.dist-info | sed 's/.*torch-\(.*\)\.dist-info/\1/')
  .venv-torch/bin/python -m pip install -q "torch==$TORCH_VERSION"
  touch .venv-torch/.trtis-cuda
fi
export TRTIS_TORCH_CUDA=1
if [ ! -e .venv/.trtis-gpu-client ]; then
  # cuda-python 13 has no `cudart` module, which tritonclient 2.51 imports;
  # its pkg_resources needs a setuptools that still has it.
  .venv/bin/pip install -q "cuda-python>=12,<13" "nvidia-cuda-runtime-cu12" "setuptools<81"
  touch .venv/.trtis-gpu-client
fi
SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
CLIENT_SITE=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
ORT_DYLIB_PATH=$(ls "$SITE"/onnxruntime/capi/libonnxruntime.so.* | head -1)
NVIDIA_LIBS=$(ls -d "$SITE"/nvidia/*/lib "$SITE"/tensorrt_libs "$CLIENT_SITE"/nvidia/*/lib 2>/dev/null | paste -sd: -)
export ORT_DYLIB_PATH LD_LIBRARY_PATH="$NVIDIA_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TRTIS_GPU_TESTS=1
echo "test-gpu: ONNX Runtime $ORT_VERSION (GPU build) at $ORT_DYLIB_PATH"
nvidia-smi -L || true

cargo build --release --locked --workspace
cargo test --release --locked --test integration -- --ignored gpu::
cargo build --locked --workspace
TRTIS_BIN="$PWD/target/debug/trtis" .venv/bin/python -m pytest tests/python -q -m gpu
if [ "${1:-}" = "--bench" ]; then
  ./scripts/bench.sh gpu
fi
echo "test-gpu: all GPU tests passed"
