#!/usr/bin/env bash
# Benchmark of the dynamic batcher: a compute-bound ONNX model (8 dense
# 1024x1024 layers) through `trtis serve` with perf_analyzer over gRPC at
# concurrency 1, 4, 16, 32, against ONNX Runtime called directly in the
# same run. Results: target/bench/batching-bench.md.
set -euo pipefail
cd "$(dirname "$0")/.."
lib="$(./scripts/setup-perf-analyzer.sh)"
export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cargo build --release --locked --bin trtis
.venv/bin/python bench/batching_bench.py
