#!/usr/bin/env bash
# Runs every test: sets up what the tests need (scripts/setup.sh), then
# rustfmt and clippy (warnings are errors), the Rust unit and integration
# tests, then the protocol compatibility suite that
# drives a real `trtis serve` with Triton's own Python client (tritonclient).
# Everything is built with the PyTorch backend (`--features torch`, libtorch
# from .venv-torch); clippy also checks the build without any optional
# backend. This is what CI runs (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh
export TRTIS_REQUIRE_PYTHON=1 TRTIS_REQUIRE_TORCH=1
cargo fmt --all -- --check
cargo clippy --locked --all-targets --features torch -- -D warnings
# The optional backends and tools stay buildable without their features.
cargo clippy --locked --no-default-features --lib --bins -- -D warnings
cargo test --locked --features torch "$@"
cargo build --locked --features torch --bin trtis
TRTIS_BIN="$PWD/target/debug/trtis" .venv/bin/python -m pytest tests/python -q
./scripts/perf-analyzer-smoke.sh
