#!/usr/bin/env bash
# The long reliability cases (not part of scripts/test.sh): load/unload churn
# under traffic, idle half-open connections, SIGTERM with requests in
# flight, a fixed-rate soak with the RSS slope, and a flood of sequences
# never ended. Each is bounded in count and time, stops by itself and sends
# traffic to 127.0.0.1 only; they run one at a time.
#
#   scripts/reliability.sh [--quick] [NAME...] [-- DRIVER ARGS...]
#
# NAME: churn halfopen sigterm soak seqflood (default: all). --quick scales
# the counts down (30 cycles, 200+200 connections, a 1-minute soak, 500
# ids). Arguments after `--` go to every driver (e.g. `soak -- --minutes 3`).
# Builds the release binary first (TRTIS_BIN overrides the binary and skips
# the build). Summary: target/bench/reliability.md; exit status non-zero if
# any case failed.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh
if [ -z "${TRTIS_BIN:-}" ]; then
  cargo build --release --locked --bin trtis
  export TRTIS_BIN="$PWD/target/release/trtis"
fi

exec .venv/bin/python tests/reliability/run.py "$@"
