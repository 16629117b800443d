#!/usr/bin/env bash
# Benchmark of `trtis serve` with perf_analyzer (Triton's load generator):
# sets up perf_analyzer from the tritonclient==2.51.0 wheel (it needs
# Debian's libb64-0d and libcudart.so.12 from the nvidia-cuda-runtime-cu12
# wheel; no GPU is touched), builds trtis in release mode and runs
# bench/serve_bench.py. Results: target/bench/serve-bench.md.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
mkdir -p target/bench
if ! ldconfig -p | grep -q libb64.so.0d; then
  apt-get install -y -q libb64-0d >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q libb64-0d >/dev/null; }
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check nvidia-cuda-runtime-cu12
if [ ! -x target/bench/perf_analyzer ]; then
  .venv/bin/python -m pip download --quiet --no-deps tritonclient==2.51.0 -d target/bench/wheel
  .venv/bin/python - <<'PY'
import glob, zipfile
wheel = zipfile.ZipFile(glob.glob("target/bench/wheel/tritonclient-2.51.0-*.whl")[0])
name = next(n for n in wheel.namelist() if n.endswith("bin/perf_analyzer"))
open("target/bench/perf_analyzer", "wb").write(wheel.read(name))
PY
  chmod +x target/bench/perf_analyzer
fi
export LD_LIBRARY_PATH="$(echo "$PWD"/.venv/lib/python3*/site-packages/nvidia/cuda_runtime/lib)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cargo build --release --locked --bin trtis
.venv/bin/python bench/serve_bench.py
