#!/usr/bin/env bash
# Benchmark of `trtis infer IMAGE`: the preprocessing alone per image
# (benches/preprocess.rs, against reading the file) and the whole command
# end to end (process start to printed classes) against the example
# repository served in release mode, next to the time to start the binary
# for nothing (`trtis --version`). Results: target/bench/infer-bench.md.
# Run it with scripts/bench.sh infer.
set -euo pipefail
cd "$(dirname "$0")/../.."
./scripts/setup.sh >/dev/null
cargo build --release --locked --bin trtis
mkdir -p target/bench
out=target/bench/infer-bench.md
{
  echo "# trtis infer on the example images"
  echo
  echo "Preprocessing alone (median of 30, release):"
  echo
  cargo bench --locked --bench preprocess 2>/dev/null
} > "$out"
port=18900
./target/release/trtis serve --model-store examples/model_repository --http-port $port \
  --grpc-port $((port + 1)) --metrics-port 0 >/dev/null 2>&1 &
server=$!
trap 'kill -INT $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  curl -sf "localhost:$port/v2/health/ready" >/dev/null && break
  sleep 0.05
done
time_ms() { # runs "$@" N times, prints the median wall time in ms
  .venv/bin/python - "$@" <<'PY'
import statistics, subprocess, sys, time
runs = []
for _ in range(15):
    t = time.perf_counter()
    subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, check=True)
    runs.append((time.perf_counter() - t) * 1000)
print(f"{statistics.median(runs):.1f}")
PY
}
bare=$(time_ms ./target/release/trtis --version)
{
  echo
  echo "End to end, median of 15 runs (process start to output), server on this machine:"
  echo
  echo "| command | ms | ratio to \`trtis --version\` |"
  echo "| --- | --- | --- |"
  echo "| \`trtis --version\` (reference: start the binary) | $bare | 1.0 |"
  for args in "examples/images/coffee.jpg" "-i grpc -u localhost:$((port + 1)) examples/images/coffee.jpg" "-b 4 examples/images"; do
    case "$args" in -i*) url="";; *) url="-u localhost:$port";; esac
    ms=$(time_ms ./target/release/trtis infer -m efficientnet_lite0 -s INCEPTION $url $args)
    ratio=$(.venv/bin/python -c "print(f'{$ms / $bare:.1f}')")
    echo "| \`trtis infer -m efficientnet_lite0 -s INCEPTION $args\` | $ms | $ratio |"
  done
} >> "$out"
cat "$out"
