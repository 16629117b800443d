#!/usr/bin/env bash
# Runs every test: sets up what the tests need (scripts/setup.sh), then
# rustfmt and clippy (warnings are errors), the Rust unit and integration
# tests, then the protocol compatibility suite that
# drives a real `trtis serve` with Triton's own Python client (tritonclient),
# and the v1 API suite with TRTIS 1.11's own generated client modules.
# The PyTorch backend library (backends/torch, linked against libtorch from
# .venv-torch) is built and checked too; clippy also checks the server built
# without its optional parts; then the deployment files (scripts/check-deploy.sh).
# This is what CI runs (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh
export TRTIS_REQUIRE_PYTHON=1 TRTIS_REQUIRE_TORCH=1 TRTIS_REQUIRE_OPENVINO=1
cargo fmt --all -- --check
cargo clippy --locked --workspace --all-targets -- -D warnings
# The optional backends and tools stay buildable without their features.
cargo clippy --locked --no-default-features --lib --bins -- -D warnings
# The tests load the PyTorch backend library from beside the binary.
cargo build --locked --workspace
cargo test --locked "$@"
TRTIS_BIN="$PWD/target/debug/trtis" .venv/bin/python -m pytest tests/python -q
TRTIS_BIN="$PWD/target/debug/trtis" .venv-v1/bin/python -m pytest tests/python_v1 -q
./scripts/perf-analyzer-smoke.sh
# The Dockerfile and deploy/ checked statically, and the image's runtime
# layout built from this checkout and served without a container; then the
# image's final stage built with podman on a locally made Debian base and
# run as the Deployment runs it (~35 s warm, ~2 min the first time).
./scripts/check-deploy.sh
TRTIS_BIN="$PWD/target/debug/trtis" ./scripts/check-image.sh
# The user guide (docs/, an mdBook) builds into target/book; its commands
# and config snippets ran with tests/python (test_docs.py).
.tools/mdbook/bin/mdbook build docs
