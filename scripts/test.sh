#!/usr/bin/env bash
# Runs every test: sets up what the tests need (scripts/setup.sh), then the
# Rust unit and integration tests, including the ones that use Triton's own
# Python client package. This is what CI runs (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh
export TRTIS_REQUIRE_PYTHON=1
cargo test --locked "$@"
