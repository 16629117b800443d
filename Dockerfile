# syntax=docker/dockerfile:1
# The trtis container image: one release binary and the ONNX Runtime library
# on a slim Debian, run as a non-root user.
#
#   docker build -t trtis .                        # ONNX Runtime + Python backends
#   docker build -t trtis:torch --build-arg WITH_TORCH=1 .   # + PyTorch (libtorch)
#   docker build -t trtis:slim --build-arg WITH_PYTHON=0 .   # no python3/numpy
#   docker build -t trtis:noov --build-arg WITH_OPENVINO=0 .  # no OpenVINO (98 MB less)
#   docker run -p 8000-8002:8000-8002 -v "$PWD/models:/models:ro" trtis
#
# Stage 1 builds the binary (and with WITH_TORCH=1 the PyTorch backend
# library) and assembles /opt/trtis with scripts/runtime-layout.sh; stage 2 is
# debian:bookworm-slim with python3 (for Python models) and that folder only:
# the onnxruntime and torch wheels are installed in stage 1 and only their
# shared libraries are carried over, so the image has no pip, no wheel
# metadata and no compiler. CI cannot pull images: it lints this file
# (hadolint) and serves the same layout without a container
# (scripts/check-deploy.sh), then builds this final stage with podman on a
# Debian base made locally, the builder stage replaced by that layout, and
# runs it as the Deployment does (scripts/check-image.sh).
#
# Every download comes from a package registry (crates.io, PyPI, Debian) and
# the pins are scripts/setup.sh's.

ARG RUST_VERSION=1.95

# ---------------------------------------------------------------- 1. build
FROM rust:${RUST_VERSION}-slim-bookworm AS build
ARG WITH_TORCH=0
ARG WITH_PYTHON=1
ARG WITH_OPENVINO=1
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# python3-venv: the wheels' venvs and the runtime venv (Debian's python3, the
# same build the runtime stage installs, so the venv's interpreter link holds).
# g++ (the backend's C++ shim) and patchelf (its RUNPATH): WITH_TORCH=1 only.
# Debian versions are not pinned: bookworm's security updates should land.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3-venv \
 && if [ "$WITH_TORCH" = 1 ]; then apt-get install -y --no-install-recommends g++ patchelf; fi \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /src

# The pinned wheels, before the sources so that a source change keeps these
# layers. onnxruntime without its Python dependencies: only its shared
# library is used. torch as scripts/setup.sh installs it (the C++ library and
# the two CUDA runtime stubs libtorch_cpu links; no cuDNN, CPU only), where
# .cargo/config.toml's LIBTORCH points.
ARG ORT_VERSION=1.31.1
ARG TORCH_REQ="torch==2.13.0 nvidia-cuda-runtime==13.0.96 nvidia-cuda-cupti==13.0.85"
ARG OPENVINO_REQ="openvino==2026.4.1"
RUN python3 -m venv /opt/wheels \
 && /opt/wheels/bin/pip install --no-cache-dir --disable-pip-version-check --no-deps "onnxruntime==${ORT_VERSION}"
# OpenVINO's libraries (the wheel's openvino/libs), as scripts/setup.sh takes
# them: installed without dependencies, the C API, core, CPU plugin, three
# frontends and TBB copied out to /opt/openvino.
RUN mkdir -p /opt/openvino \
 && if [ "$WITH_OPENVINO" = 1 ]; then \
      /opt/wheels/bin/pip install --no-cache-dir --disable-pip-version-check --no-deps "$OPENVINO_REQ" \
      && libs="$(echo /opt/wheels/lib/python3*/site-packages/openvino/libs)" \
      && cp "$libs"/libopenvino.so.* "$libs"/libopenvino_c.so.* "$libs"/libopenvino_ir_frontend.so.* \
            "$libs"/libopenvino_onnx_frontend.so.* "$libs"/libopenvino_tensorflow_frontend.so.* \
            "$libs"/libopenvino_intel_cpu_plugin.so "$libs"/libtbb.so.* "$libs"/libtbbbind_2_5.so.* \
            "$libs"/libhwloc.so.* /opt/openvino/; \
    fi
# hadolint ignore=SC2086
RUN mkdir -p .venv-torch \
 && if [ "$WITH_TORCH" = 1 ]; then \
      python3 -m venv .venv-torch \
      && .venv-torch/bin/pip install --no-cache-dir --disable-pip-version-check --no-deps $TORCH_REQ \
      && ln -sfn "$(echo /src/.venv-torch/lib/python3*/site-packages/torch)" .venv-torch/libtorch; \
    fi

COPY . .

# The release build, --locked. The registry and target folders are BuildKit
# caches (rebuilds are incremental), so the results are copied out to /out.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    if [ "$WITH_TORCH" = 1 ]; then cargo build --release --locked --workspace; \
    else cargo build --release --locked -p trtis -p trtis-python-native; fi \
 && mkdir -p /out \
 && cp target/release/trtis target/release/lib_trtis_native.so /out/ \
 && if [ "$WITH_TORCH" = 1 ]; then cp target/release/libtrtis_torch.so /out/; fi

# /stage/opt/trtis: bin/trtis, lib/libonnxruntime.so*, lib/openvino/, venv/ (numpy) and
# bin/lib_trtis_native.so (the Python worker's native core), and
# with torch bin/libtrtis_torch.so + the libtorch libraries in lib/. The
# script checks that every shared library resolves inside the layout or from
# the system.
# hadolint ignore=SC2086
RUN --mount=type=cache,target=/root/.cache/pip \
    flags=--assemble-only; \
    if [ "$WITH_TORCH" = 1 ]; then flags="$flags --with-torch"; fi; \
    if [ "$WITH_PYTHON" != 1 ]; then flags="$flags --no-python"; fi; \
    if [ "$WITH_OPENVINO" != 1 ]; then flags="$flags --no-openvino"; fi; \
    TRTIS_BIN=/out/trtis TRTIS_TORCH_LIB=/out/libtrtis_torch.so \
    TRTIS_PYTHON_NATIVE_LIB=/out/lib_trtis_native.so \
    ORT_CAPI="$(echo /opt/wheels/lib/python3*/site-packages/onnxruntime/capi)" \
    LIBTORCH=/src/.venv-torch/libtorch PYTHON=/usr/bin/python3 OPENVINO_DIR=/opt/openvino \
    scripts/runtime-layout.sh $flags /stage

# -------------------------------------------------------------- 2. runtime
FROM debian:bookworm-slim
ARG WITH_PYTHON=1
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# python3: the interpreter of Python models (the venv in /opt/trtis links to
# it). ca-certificates: TLS to object storage (remote model repositories).
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && if [ "$WITH_PYTHON" = 1 ]; then apt-get install -y --no-install-recommends python3; fi \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 trtis \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin trtis \
 && mkdir -p /models

COPY --from=build /stage/opt/trtis /opt/trtis

# Where trtis finds its libraries and interpreter (scripts/runtime-layout.sh
# reads these lines and runs its check with them).
ENV PATH=/opt/trtis/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    ORT_DYLIB_PATH=/opt/trtis/lib/libonnxruntime.so \
    TRTIS_PYTHON=/opt/trtis/venv/bin/python3 \
    TRTIS_OPENVINO_LIB=/opt/trtis/lib/openvino/libopenvino_c.so

# Numeric, so that Kubernetes' runAsNonRoot can check it.
USER 10001:10001
WORKDIR /tmp

# HTTP/REST, gRPC, Prometheus metrics.
EXPOSE 8000 8001 8002

# `trtis status` exits 0 only when the server answers and is ready; no curl
# needed. (Kubernetes ignores HEALTHCHECK: deploy/ uses httpGet probes.)
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s --retries=3 \
  CMD ["trtis", "status", "-u", "127.0.0.1:8000"]

# SIGTERM drains (not ready at once, in-flight requests finish, exit 0
# within --exit-timeout-secs, default 30 s): give `docker stop -t 40`.
STOPSIGNAL SIGTERM
ENTRYPOINT ["trtis", "serve"]
CMD ["--model-store", "/models"]
