#!/usr/bin/env bash
# The example ensemble (preprocessing model + classifier) against the client
# calling both models itself, same client and images, same run; plus
# perf_analyzer on the ensemble. Results: target/bench/ensemble-bench.md.
set -euo pipefail
cd "$(dirname "$0")/.."
lib="$(./scripts/setup-perf-analyzer.sh)"
export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cargo build --release --locked --bin trtis
.venv/bin/python bench/ensemble_bench.py
