#!/usr/bin/env bash
# Benchmark of `trtis serve` with perf_analyzer (Triton's load generator):
# sets up perf_analyzer (scripts/setup-perf-analyzer.sh), builds trtis in
# release mode and runs bench/serve_bench.py. Results: target/bench/serve-bench.md.
set -euo pipefail
cd "$(dirname "$0")/.."
lib="$(./scripts/setup-perf-analyzer.sh)"
export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cargo build --release --locked --bin trtis
.venv/bin/python bench/serve_bench.py
