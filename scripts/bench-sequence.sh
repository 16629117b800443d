#!/usr/bin/env bash
# The sequence batcher under perf_analyzer (--sequence-length 20, gRPC) on
# the example stateful models, against the same graph served stateless with
# dynamic batching in the same run; trtis perf next to perf_analyzer.
# Results: target/bench/sequence-bench.md.
set -euo pipefail
cd "$(dirname "$0")/.."
lib="$(./scripts/setup-perf-analyzer.sh)"
export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cargo build --release --locked --bin trtis
.venv/bin/python bench/sequence_bench.py
