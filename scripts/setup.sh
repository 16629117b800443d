#!/usr/bin/env bash
# Sets up everything trtis needs on a fresh machine, idempotently:
#   - the project-local Python environment .venv with the pinned test clients
#     (tritonclient 2.51.0) from PyPI;
#   - .venv-v1 with the TRTIS v1 API's client modules (tensorrtserver 1.11.0);
#   - .venv-torch with libtorch (unless TRTIS_NO_TORCH=1);
#   - .tools/tensorflow with the TensorFlow C API libraries (unless
#     TRTIS_NO_TENSORFLOW=1);
#   - .tools/openvino with OpenVINO's C API and CPU plugin (unless
#     TRTIS_NO_OPENVINO=1).
# Rust comes from the machine's toolchain; crates come from crates.io when
# cargo builds. Nothing is downloaded from anywhere but the package registries.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
REQ=scripts/requirements-test.txt
STAMP=.venv/.trtis-requirements

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PYTHON" -m venv .venv
fi
if ! cmp -s "$REQ" "$STAMP" 2>/dev/null; then
  echo "setup: installing $(grep -v '^#' "$REQ" | tr '\n' ' ')"
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -r "$REQ"
  cp "$REQ" "$STAMP"
fi

# The v1 API's reference client (tests/python_v1): NVIDIA's tensorrtserver
# 1.11.0 wheel, whose generated modules need protobuf 3, so a venv of its own
# (~150 MB, ~12 s).
V1_REQ=scripts/requirements-v1.txt
V1_STAMP=.venv-v1/.trtis-requirements
if [ ! -x .venv-v1/bin/python ]; then
  echo "setup: creating .venv-v1 (the TRTIS v1 API's client modules)"
  "$PYTHON" -m venv .venv-v1
fi
if ! cmp -s "$V1_REQ" "$V1_STAMP" 2>/dev/null; then
  echo "setup: installing $(grep -v '^#' "$V1_REQ" | tr '\n' ' ')"
  .venv-v1/bin/python -m pip install --quiet --disable-pip-version-check -r "$V1_REQ"
  cp "$V1_REQ" "$V1_STAMP"
fi

# Azurite, the Azure Blob Storage emulator (npm), for the object-storage
# repository tests (tests/python/test_remote_repository.py): ~22 s, ~190 MB.
AZURITE_REQ="azurite@3.35.0"
AZURITE_STAMP=.npm-tools/.trtis-requirements
if [ "$(cat "$AZURITE_STAMP" 2>/dev/null)" != "$AZURITE_REQ" ]; then
  if command -v npm >/dev/null; then
    echo "setup: installing $AZURITE_REQ into .npm-tools"
    npm install --prefix .npm-tools --no-audit --no-fund --silent "$AZURITE_REQ"
    echo "$AZURITE_REQ" >"$AZURITE_STAMP"
  else
    echo "setup: npm not found: the Azure repository test will fail (it needs azurite)"
  fi
fi

# HAProxy, the load balancer of the scale-out test (tests/python/
# test_scale_out.py): Debian's package and the two libraries it needs that
# the base system lacks, unpacked into .tools/haproxy (no install; ~1 s,
# 5 MB). Open-source nginx has no active health checks, which the test needs.
HAPROXY_DEBS="haproxy liblua5.3-0 libopentracing-c-wrapper0 libopentracing1"
HAPROXY_STAMP=.tools/haproxy/.trtis-requirements
if [ "$(cat "$HAPROXY_STAMP" 2>/dev/null)" != "$HAPROXY_DEBS" ]; then
  if command -v apt-get >/dev/null && command -v dpkg >/dev/null; then
    echo "setup: unpacking Debian's haproxy into .tools/haproxy"
    rm -rf .tools/haproxy && mkdir -p .tools/haproxy
    fetch() { (cd .tools/haproxy && apt-get download $HAPROXY_DEBS >/dev/null 2>&1); }
    # shellcheck disable=SC2086
    if ! fetch && [ "$(id -u)" = 0 ]; then apt-get update >/dev/null 2>&1 || true; fi
    if fetch || [ -n "$(ls .tools/haproxy/*.deb 2>/dev/null)" ]; then
      for deb in .tools/haproxy/*.deb; do dpkg -x "$deb" .tools/haproxy; done
      rm -f .tools/haproxy/*.deb
    fi
    if [ -x .tools/haproxy/usr/sbin/haproxy ]; then
      echo "$HAPROXY_DEBS" >"$HAPROXY_STAMP"
    else
      echo "setup: could not fetch Debian's haproxy (apt-get download): the scale-out test will fail"
    fi
  else
    echo "setup: no apt-get: the scale-out test needs haproxy in .tools/haproxy/usr/sbin/haproxy"
  fi
fi

# libtorch for the PyTorch backend (cargo feature `torch`): the `torch` wheel
# installed without its CUDA dependencies except the two libtorch_cpu.so
# links (rust-deps-notes §5b: ~35 s, ~1.4 GB). Python cannot `import torch`
# from it (no cuDNN); it is only the C++ library and headers that tch builds
# and links against. `.venv-torch/libtorch` is a stable link to the package
# folder; .cargo/config.toml points LIBTORCH at it.
TORCH_REQ="torch==2.13.0 nvidia-cuda-runtime==13.0.96 nvidia-cuda-cupti==13.0.85"
TORCH_STAMP=.venv-torch/.trtis-requirements
if [ "${TRTIS_NO_TORCH:-0}" != 1 ]; then
  if [ ! -x .venv-torch/bin/python ]; then
    echo "setup: creating .venv-torch (libtorch for the PyTorch backend)"
    "$PYTHON" -m venv .venv-torch
  fi
  if [ "$(cat "$TORCH_STAMP" 2>/dev/null)" != "$TORCH_REQ" ]; then
    echo "setup: installing $TORCH_REQ (no other dependencies)"
    # shellcheck disable=SC2086
    .venv-torch/bin/python -m pip install --quiet --disable-pip-version-check --no-deps $TORCH_REQ
    echo "$TORCH_REQ" >"$TORCH_STAMP"
  fi
  ln -sfn "$(cd .venv-torch && echo lib/python3*/site-packages/torch)" .venv-torch/libtorch
fi

# The TensorFlow C API for the TensorFlow backend: the two libraries of the
# tensorflow-cpu wheel that hold it (libtensorflow_cc.so.2 and, beside it,
# libtensorflow_framework.so.2), unpacked into .tools/tensorflow; the rest of
# the wheel (Python, Keras) is not needed. ~10 s from PyPI's 274 MB wheel;
# 853 MB on disk. Unless TRTIS_NO_TENSORFLOW=1.
TF_REQ="tensorflow-cpu==2.21.0"
TF_STAMP=.tools/tensorflow/.trtis-requirements
if [ "${TRTIS_NO_TENSORFLOW:-0}" != 1 ] && [ "$(cat "$TF_STAMP" 2>/dev/null)" != "$TF_REQ" ]; then
  echo "setup: unpacking the TensorFlow C API libraries of $TF_REQ into .tools/tensorflow"
  rm -rf .tools/tensorflow .tools/tf-wheel && mkdir -p .tools/tensorflow .tools/tf-wheel
  .venv/bin/python -m pip download --quiet --disable-pip-version-check --no-deps \
    --only-binary=:all: -d .tools/tf-wheel "$TF_REQ"
  .venv/bin/python - .tools/tf-wheel .tools/tensorflow <<'PY'
import pathlib, shutil, sys, zipfile
wheel = next(pathlib.Path(sys.argv[1]).glob("*.whl"))
with zipfile.ZipFile(wheel) as z:
    for name in ("libtensorflow_cc.so.2", "libtensorflow_framework.so.2"):
        with z.open("tensorflow/" + name) as src, open(pathlib.Path(sys.argv[2]) / name, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
PY
  rm -rf .tools/tf-wheel
  echo "$TF_REQ" >"$TF_STAMP"
fi

# OpenVINO for the OpenVINO backend: the C API and what it needs to run IR,
# ONNX and TensorFlow models on the CPU, from the openvino wheel's
# openvino/libs (the C API, the core, three frontends, the CPU plugin, TBB),
# unpacked into .tools/openvino; the Python part is not needed. ~5 s from
# PyPI's 59 MB wheel; ~100 MB on disk. Unless TRTIS_NO_OPENVINO=1.
OPENVINO_REQ="openvino==2026.4.1"
OPENVINO_STAMP=.tools/openvino/.trtis-requirements
if [ "${TRTIS_NO_OPENVINO:-0}" != 1 ] && [ "$(cat "$OPENVINO_STAMP" 2>/dev/null)" != "$OPENVINO_REQ" ]; then
  echo "setup: unpacking the OpenVINO C API and CPU plugin of $OPENVINO_REQ into .tools/openvino"
  rm -rf .tools/openvino .tools/ov-wheel && mkdir -p .tools/openvino .tools/ov-wheel
  .venv/bin/python -m pip download --quiet --disable-pip-version-check --no-deps \
    --only-binary=:all: -d .tools/ov-wheel "$OPENVINO_REQ"
  .venv/bin/python - .tools/ov-wheel .tools/openvino <<'PY'
import pathlib, re, shutil, sys, zipfile
wheel = next(pathlib.Path(sys.argv[1]).glob("*.whl"))
keep = re.compile(r"openvino/libs/(libopenvino(_c|_ir_frontend|_onnx_frontend|_tensorflow_frontend)?\.so\.\d+"
                  r"|libopenvino_intel_cpu_plugin\.so|libtbb\.so\.\d+|libtbbbind_2_5\.so\.\d+|libhwloc\.so\.\d+)$")
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if keep.match(name):
            with z.open(name) as src, open(pathlib.Path(sys.argv[2]) / pathlib.Path(name).name, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
PY
  rm -rf .tools/ov-wheel
  echo "$OPENVINO_REQ" >"$OPENVINO_STAMP"
fi

# mdBook, which builds the user guide (docs/, an mdBook; scripts/test.sh
# runs `.tools/mdbook/bin/mdbook build docs`), from crates.io: ~5-7 min to
# compile on 2 cores, so it is built once per machine into a cache outside
# the checkout ($TRTIS_CACHE, default ~/.cache/trtis; a fresh clone, as CI
# makes, links it) and .tools/mdbook points there. Unless TRTIS_NO_MDBOOK=1.
MDBOOK_VERSION=0.5.4
if [ "${TRTIS_NO_MDBOOK:-0}" != 1 ]; then
  MDBOOK_ROOT="${TRTIS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trtis}/mdbook-$MDBOOK_VERSION"
  if [ "$("$MDBOOK_ROOT/bin/mdbook" --version 2>/dev/null)" != "mdbook v$MDBOOK_VERSION" ]; then
    echo "setup: installing mdbook $MDBOOK_VERSION into $MDBOOK_ROOT"
    cargo install mdbook --locked --version "$MDBOOK_VERSION" --no-default-features --features search --root "$MDBOOK_ROOT"
  fi
  mkdir -p .tools
  if [ "$(readlink .tools/mdbook 2>/dev/null)" != "$MDBOOK_ROOT" ]; then
    rm -rf .tools/mdbook
    ln -s "$MDBOOK_ROOT" .tools/mdbook
  fi
fi
