#!/usr/bin/env bash
# perf_analyzer against `trtis perf` on the same trtis server, model and
# flags, in the same run: throughput ratio and client CPU per request.
# Results: target/bench/perf-compare.md.
set -euo pipefail
cd "$(dirname "$0")/.."
lib="$(./scripts/setup-perf-analyzer.sh)"
export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cargo build --release --locked --bin trtis
.venv/bin/python bench/perf_compare.py
