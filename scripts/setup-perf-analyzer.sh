#!/usr/bin/env bash
# Makes Triton's perf_analyzer runnable here: the binary inside the
# tritonclient==2.51.0 wheel (the newest that runs on Debian 12's glibc), which
# needs Debian's libb64-0d and libcudart.so.12 from the nvidia-cuda-runtime-cu12
# wheel (no GPU is touched). Prints the LD_LIBRARY_PATH it needs.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh >&2
mkdir -p target/bench
if ! ldconfig -p | grep -q libb64.so.0d; then
  { apt-get install -y -q libb64-0d || { apt-get update -q && apt-get install -y -q libb64-0d; }; } >/dev/null 2>&1
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check nvidia-cuda-runtime-cu12 >&2
if [ ! -x target/bench/perf_analyzer ]; then
  .venv/bin/python -m pip download --quiet --disable-pip-version-check --no-deps tritonclient==2.51.0 -d target/bench/wheel >&2
  .venv/bin/python - <<'PY'
import glob, zipfile
wheel = zipfile.ZipFile(glob.glob("target/bench/wheel/tritonclient-2.51.0-*.whl")[0])
name = next(n for n in wheel.namelist() if n.endswith("bin/perf_analyzer"))
open("target/bench/perf_analyzer", "wb").write(wheel.read(name))
PY
  chmod +x target/bench/perf_analyzer
fi
echo "$(echo "$PWD"/.venv/lib/python3*/site-packages/nvidia/cuda_runtime/lib)"
