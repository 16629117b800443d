#!/usr/bin/env bash
# CI check: Triton's own perf_analyzer completes runs against `trtis serve`
# over HTTP and gRPC, with and without system shared memory, and reports a
# throughput; and against the TorchScript classifier (PyTorch backend). (Speed is measured by `scripts/bench.sh serve`, not here.)
set -euo pipefail
cd "$(dirname "$0")/.."
lib="$(./scripts/setup-perf-analyzer.sh)"
export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
TRTIS_BIN=${TRTIS_BIN:-target/debug/trtis}
log=$(mktemp)
"$TRTIS_BIN" serve --model-store examples/model_repository --http-address 127.0.0.1 --http-port 0 \
  --grpc-address 127.0.0.1 --grpc-port 0 --metrics-port 0 --allow-client-shm 2>"$log" &
pid=$!
trap 'kill -INT $pid 2>/dev/null || true; rm -f "$log"' EXIT
for _ in $(seq 300); do
  http=$(sed -n 's/.*Started HTTPService at \(.*\)$/\1/p' "$log")
  grpc=$(sed -n 's/.*Started GRPCInferenceService at \(.*\)$/\1/p' "$log")
  [ -n "$http" ] && [ -n "$grpc" ] && break
  sleep 0.1
done
[ -n "$http" ] && [ -n "$grpc" ] || { cat "$log"; echo "perf_analyzer smoke: server did not start"; exit 1; }
passed=0 failed=0
run() {
  local what=$1; shift
  local out
  if out=$(timeout 120 target/bench/perf_analyzer -m "${MODEL:-simple}" "$@" --concurrency-range 2 -p 500 -r 5 -s 100 2>&1) \
      && grep -q "Throughput:" <<<"$out"; then
    echo "ok: perf_analyzer $what: $(grep -m1 'Throughput:' <<<"$out" | xargs)"
    passed=$((passed + 1))
  else
    echo "FAILED: perf_analyzer $what"; echo "$out" | tail -20
    failed=$((failed + 1))
  fi
}
run "-i http" -u "$http" -i http
run "-i grpc" -u "$grpc" -i grpc
run "-i http --shared-memory system" -u "$http" -i http --shared-memory system
run "-i grpc --shared-memory system" -u "$grpc" -i grpc --shared-memory system
MODEL=efficientnet_lite0_pt run "-m efficientnet_lite0_pt -i grpc" -u "$grpc" -i grpc
echo "perf_analyzer: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
