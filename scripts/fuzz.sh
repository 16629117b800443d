#!/usr/bin/env bash
# A long fuzzing run of the network-facing parsers (tests/fuzz.rs): KServe
# HTTP bodies, gRPC ModelInferRequest conversion and config.pbtxt, each
# target with TRTIS_FUZZ_CASES cases (default 200000) in a release build.
# Prints each target's case count and timing, then the wall time.
#   scripts/fuzz.sh                      # 200000 cases per target
#   TRTIS_FUZZ_CASES=1000000 scripts/fuzz.sh
#   PROPTEST_RNG_SEED=42 scripts/fuzz.sh # a repeatable run
set -euo pipefail
cd "$(dirname "$0")/.."

export TRTIS_FUZZ_CASES="${TRTIS_FUZZ_CASES:-200000}"
cargo test --locked --release --test integration --no-run --quiet
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
start=$(date +%s)
status=0
cargo test --locked --release --test integration fuzz:: -- --nocapture "$@" >"$log" 2>&1 || status=$?
end=$(date +%s)
grep -E '^fuzz |^test .*(ok|FAILED|ignored)$|^test result' "$log" || true
if [ "$status" -ne 0 ]; then
    echo "--- failures ---"
    grep -A40 'minimal failing input\|panicked at' "$log" | head -200
fi
echo "TRTIS_FUZZ_CASES=$TRTIS_FUZZ_CASES per target; wall time $((end - start)) s"
exit "$status"
