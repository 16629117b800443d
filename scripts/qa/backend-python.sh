#!/usr/bin/env bash
# Runs Triton's own qa/L0_backend_python/<SUBTEST>/test.sh (v2.51.0), each unchanged, against a
# trtis binary through the triton-qa harness's stand-ins (../shared/tools/triton-qa/tsh.sh: a
# `tritonserver` that runs trtis on ports 30000-30002, python shims that record each test).
# The harness's run.sh must have prepared $W once (PREPARE_ONLY=1 run.sh /bin/true); pytest is
# added to its venv. triton_shm_monitor (a C++ module of Triton's CI) is stood in for by
# scripts/qa/triton_shm_monitor.py: trtis keeps no Python-backend regions in /dev/shm.
#   scripts/qa/backend-python.sh TRTIS SUBTEST...      e.g. response_sender async_execute
# Results: $W/results/bp_<SUBTEST>.jsonl, one line per folder printed (summarize.py).
set -u
TRTIS=$(readlink -f "$1"); shift
HERE=${TRITON_QA:-$(cd "$(dirname "$0")/../../.." && pwd)/shared/tools/triton-qa}
STUBS=$(cd "$(dirname "$0")" && pwd)
W=${W:-/tmp/triton-qa}
VENV=$W/venv; PY=$VENV/bin/python
D=$W/data; QA=$W/qa; RES=$W/results; LOGS=$W/logs
HP=30000; GP=30001; MP=30002
SUITE_TIMEOUT=${SUITE_TIMEOUT:-900}
export ORT_DYLIB_PATH=$(ls "$VENV"/lib/python3*/site-packages/onnxruntime/capi/libonnxruntime.so.1.* | head -1)
say() { echo "[$(date +%H:%M:%S)] $*" >&2; }
record() {
  "$PY" -c 'import json,sys; print(json.dumps({"run":sys.argv[1],"test":sys.argv[2],"status":sys.argv[3],"msg":sys.argv[4]}))' \
    "$1" "$2" "$3" "${4:-}" >>"$RES/$SUITE.jsonl"
}
"$PY" -c "import pytest" 2>/dev/null || "$VENV/bin/pip" install -q pytest
# Folders that clone python_backend (its examples) clone it from a local mirror (no network):
# PB_MIRROR, a clone of triton-inference-server/python_backend with branch r24.10 (the
# `fetch` tool's mirror by default).
PB_MIRROR=${PB_MIRROR:-/work/.mirror/triton-inference-server+python_backend/repo}
ORG=$W/orgs; mkdir -p "$ORG"
[ -d "$PB_MIRROR" ] && ln -sfn "$PB_MIRROR" "$ORG/python_backend"
source "$HERE/tsh.sh"
BP=$QA/L0_backend_python
for T in "$@"; do
  SUITE=bp_$T
  rm -f "$RES/$SUITE.jsonl"
  tsh "L0_backend_python/$T" QA_LENIENT=1 PYTHONPATH="$STUBS:$QA/common" MODELDIR="$BP" TRITON_DIR="$W/opt/tritonserver" SERVER="$W/opt/tritonserver/bin/tritonserver" \
    BACKEND_DIR="$W/opt/tritonserver/backends" DATADIR="$D" REPO_VERSION=qa TEST_WINDOWS=0 TEST_JETSON=0 \
    PYTHON_ENV_VERSION=11 QA_TSH_LABEL="$T" TRTIS_PYTHON="$VENV/bin/python" \
    TRITON_REPO_ORGANIZATION="$ORG" PYTHON_BACKEND_REPO_TAG=r24.10
  python3 "$HERE/summarize.py" "$RES" "$SUITE" | head -1
done
