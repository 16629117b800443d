#!/usr/bin/env bash
# Sets up what serving needs (ONNX Runtime's library from PyPI, into .venv;
# libtorch from the `torch` wheel, into .venv-torch), builds trtis and its
# PyTorch backend library in release mode and serves the example model repository over
# HTTP on port 8000 (override with TRTIS_HTTP_PORT). Ctrl-C stops it.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh
cargo build --release --locked --workspace
./target/release/trtis validate-config examples/model_repository
exec ./target/release/trtis serve --model-store examples/model_repository "$@"
