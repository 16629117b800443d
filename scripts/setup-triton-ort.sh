#!/usr/bin/env bash
# Builds Triton 2.51's own ONNX Runtime backend (libtriton_onnxruntime.so,
# branch r24.10 of triton-inference-server/onnxruntime_backend), CPU only,
# into the backend directory of scripts/setup-triton.sh, so that the same
# tritonserver serves `platform: "onnxruntime_onnx"` models with Triton's
# backend: a same-run reference for trtis's ONNX path. The wheel
# (nvidia-pytriton 0.7.0) ships only the Python backend.
#   - Sources: bare git snapshots under ${MIRROR:-/work/.mirror}, each at
#     OWNER+NAME/repo: triton-inference-server/{onnxruntime_backend,backend,
#     core,common} (r24.10) and yalue/onnxruntime_go (onnxruntime_c_api.h at
#     ORT_API_VERSION 29, which newer ONNX Runtime libraries still serve).
#   - Plain g++ (no CMake, Release flags as Triton's builds, TRITON_ENABLE_GPU
#     off), at most 2 jobs; apt rapidjson-dev. Linked with --no-undefined
#     against the wheel's libtritonserver-*.so.
#   - ONNX Runtime: the library trtis uses (ORT_DYLIB_PATH, else .venv's
#     onnxruntime wheel), copied beside the backend as libonnxruntime.so.1
#     (rpath $ORIGIN), so both servers run the same ONNX Runtime.
# Sources, objects and the built backend stay in target/bench/triton-ort-build
# (3.4 MB): setup-triton.sh may wipe the backend directory, and a rerun puts
# it back without compiling. Installed: 29 MB, nearly all of it ONNX Runtime.
# First build: ~1 min of g++ on 2 cores (+ apt rapidjson-dev). Idempotent.
# Ends by serving a tiny ONNX model with it. "setup-triton-ort: error: ..."
# and a non-zero exit on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

MIRROR=${MIRROR:-/work/.mirror}
TAG=r24.10        # Triton 2.51.0
ORTGO_REV=b4e0f0b # yalue/onnxruntime_go "upgrade to ORT 1.29.0"
JOBS=2
BUILD=$ROOT/target/bench/triton-ort-build

say() { echo "setup-triton-ort: $*"; }
die() { echo "setup-triton-ort: error: $*" >&2 && exit 1; }

scripts/setup-triton.sh >/dev/null || die "scripts/setup-triton.sh failed (run it alone to see why)"
# shellcheck disable=SC1091
source target/bench/triton.env
SITE=${TRITONSERVER%/pytriton/tritonserver/bin/tritonserver}
TSLIB=$(ls "$SITE"/nvidia_pytriton.libs/libtritonserver-*.so 2>/dev/null | head -n 1 || true)
[ -f "$TSLIB" ] || die "no libtritonserver-*.so in $SITE/nvidia_pytriton.libs"

# The ONNX Runtime library trtis loads (src/core/backend/onnx: ORT_DYLIB_PATH, else .venv's).
ORTLIB=${ORT_DYLIB_PATH:-$(ls "$ROOT"/.venv/lib/python3*/site-packages/onnxruntime/capi/libonnxruntime.so.* 2>/dev/null | sort | tail -n 1 || true)}
[ -f "$ORTLIB" ] || die "no libonnxruntime.so in .venv (scripts/setup.sh installs onnxruntime), or set ORT_DYLIB_PATH"

command -v g++ >/dev/null || die "g++ is needed (apt-get install g++)"
if [ ! -f /usr/include/rapidjson/document.h ]; then
  say "installing rapidjson-dev (apt)"
  { apt-get install -y -q rapidjson-dev || { apt-get update -q && apt-get install -y -q rapidjson-dev; }; } >/dev/null 2>&1 ||
    die "rapidjson-dev is needed and apt-get could not install it"
fi

# The sources' revisions; a change in them (or in ORTLIB, TSLIB, g++, flags) rebuilds.
REVS=""
T=triton-inference-server
for r in $T+onnxruntime_backend@$TAG $T+backend@$TAG $T+core@$TAG $T+common@$TAG yalue+onnxruntime_go@$ORTGO_REV; do
  repo=${r%@*} ref=${r#*@}
  [ -d "$MIRROR/$repo/repo" ] ||
    die "missing repository snapshot $MIRROR/$repo/repo: a bare git snapshot of github:${repo/+//} is needed (set MIRROR to the folder holding OWNER+NAME/repo)"
  rev=$(git --git-dir="$MIRROR/$repo/repo" rev-parse --verify -q "$ref^{commit}") || die "the $repo snapshot has no $ref"
  REVS+="${repo/+//} $ref $rev"$'\n'
done
ORTGO=$MIRROR/yalue+onnxruntime_go/repo
CXXFLAGS="-std=c++17 -O3 -DNDEBUG -fPIC -Wall -Wno-unused-parameter -Wno-type-limits -DTRITON_ENABLE_STATS=1"
WANT="${REVS}onnxruntime $ORTLIB"$'\n'"tritonserver $TSLIB"$'\n'"g++ $(g++ -dumpfullversion) $CXXFLAGS"
OUT=$BUILD/out
say "sources:"
printf '%s' "$REVS" | sed 's/^/  /'

if [ "$(cat "$BUILD/stamp" 2>/dev/null)" != "$WANT" ] || [ ! -f "$OUT/libtriton_onnxruntime.so" ]; then
  say "building libtriton_onnxruntime.so in $BUILD ($JOBS g++ jobs, about a minute)"
  start=$SECONDS
  rm -rf "$BUILD"
  SRC=$BUILD/src
  mkdir -p "$SRC/ort_include" "$BUILD/obj" "$OUT"
  for r in onnxruntime_backend:src backend:include:src core:include common:include:src; do
    IFS=: read -r -a paths <<<"$r" # REPO:PATHS... of the r24.10 tree, into $SRC/REPO
    mkdir -p "$SRC/${paths[0]}"
    git --git-dir="$MIRROR/triton-inference-server+${paths[0]}/repo" archive "$TAG" "${paths[@]:1}" | tar -x -C "$SRC/${paths[0]}" ||
      die "could not extract ${paths[0]} $TAG from its snapshot"
  done
  for h in onnxruntime_c_api.h onnxruntime_ep_c_api.h onnxruntime_error_code.h; do # the last two when present
    ! git --git-dir="$ORTGO" cat-file -e "$ORTGO_REV:$h" 2>/dev/null || git --git-dir="$ORTGO" show "$ORTGO_REV:$h" >"$SRC/ort_include/$h"
  done
  [ -s "$SRC/ort_include/onnxruntime_c_api.h" ] || die "no onnxruntime_c_api.h at onnxruntime_go $ORTGO_REV"
  # triton-backend-utils, triton-common-async-work-queue and the backend itself.
  UNITS="backend/src/backend_common backend/src/backend_input_collector backend/src/backend_memory
    backend/src/backend_model backend/src/backend_model_instance backend/src/backend_output_responder
    common/src/async_work_queue common/src/error common/src/thread_pool
    onnxruntime_backend/src/onnxruntime onnxruntime_backend/src/onnxruntime_loader
    onnxruntime_backend/src/onnxruntime_utils"
  export CXXFLAGS SRC OBJ=$BUILD/obj
  export INC="-I$SRC/backend/include -I$SRC/common/include -I$SRC/core/include -I$SRC/ort_include -I$SRC/onnxruntime_backend/src"
  # shellcheck disable=SC2016,SC2086
  printf '%s\n' $UNITS | xargs -P "$JOBS" -n 1 bash -c 'u=$1; echo "  g++ $u.cc"; exec g++ $CXXFLAGS $INC -c "$SRC/$u.cc" -o "$OBJ/${u//\//_}.o"' _ ||
    die "compiling the backend failed (see the g++ output above)"
  # Needs libonnxruntime.so.1 (ORTLIB's soname), found beside it at run time.
  # shellcheck disable=SC2016
  g++ -shared -o "$OUT/libtriton_onnxruntime.so" "$BUILD"/obj/*.o \
    -Wl,--version-script="$SRC/onnxruntime_backend/src/libtriton_onnxruntime.ldscript" \
    -Wl,--no-undefined -Wl,-rpath,'$ORIGIN' "$ORTLIB" "$TSLIB" -lpthread ||
    die "linking libtriton_onnxruntime.so failed"
  echo "$WANT" >"$BUILD/stamp"
  say "built in $((SECONDS - start)) s"
fi

# Install (again, after setup-triton.sh rebuilt the backend directory).
DEST=$TRITON_BACKEND_DIR/onnxruntime
mkdir -p "$DEST"
cmp -s "$OUT/libtriton_onnxruntime.so" "$DEST/libtriton_onnxruntime.so" || cp "$OUT/libtriton_onnxruntime.so" "$DEST/"
cmp -s "$ORTLIB" "$DEST/libonnxruntime.so.1" || cp "$ORTLIB" "$DEST/libonnxruntime.so.1"
missing=$(LD_LIBRARY_PATH="$TRITON_LD_LIBRARY_PATH" ldd "$DEST/libtriton_onnxruntime.so" | grep 'not found' || true)
[ -z "$missing" ] || die "$DEST/libtriton_onnxruntime.so: unresolved libraries: $missing"
say "installed $DEST/libtriton_onnxruntime.so (ONNX Runtime from $ORTLIB)"

# Check: serve a tiny ONNX model (C = A + B, FP32 [-1,4]) with it.
TMP=$(mktemp -d)
PID=""
trap '[ -z "$PID" ] || { kill "$PID"; wait "$PID"; } 2>/dev/null || true; rm -rf "$TMP"' EXIT
fail() { echo "--- tritonserver log (tail) ---" >&2; tail -n 30 "$TMP/server.log" >&2 || true; die "$*"; }
mkdir -p "$TMP/models/add/1"
.venv/bin/python - "$TMP/models/add/1/model.onnx" <<'EOF' || die "could not make the test model with .venv's onnx package"
import sys
from onnx import TensorProto, helper, save
t = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [None, 4])
g = helper.make_graph([helper.make_node("Add", ["A", "B"], ["C"])], "add", [t("A"), t("B")], [t("C")])
save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), sys.argv[1])
EOF
cat >"$TMP/models/add/config.pbtxt" <<'EOF'
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "A" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "B" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "C" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
EOF
read -r HTTP GRPC < <(.venv/bin/python -c 'import socket
s = [socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1", 0)) for x in s]
print(*[x.getsockname()[1] for x in s])')
LD_LIBRARY_PATH=$TRITON_LD_LIBRARY_PATH "$TRITONSERVER" --backend-directory "$TRITON_BACKEND_DIR" \
  --model-repository "$TMP/models" --http-port "$HTTP" --grpc-port "$GRPC" --allow-metrics=false >"$TMP/server.log" 2>&1 &
PID=$!
for _ in $(seq 120); do
  curl -sf "http://127.0.0.1:$HTTP/v2/models/add/ready" >/dev/null && break
  kill -0 "$PID" 2>/dev/null || fail "tritonserver exited before the model was ready"
  sleep 0.5
done
curl -sf "http://127.0.0.1:$HTTP/v2/models/add/ready" >/dev/null || fail "the model did not become ready in 60 s"
req='{"inputs": [{"name": "A", "shape": [2, 4], "datatype": "FP32", "data": [1, 2, 3, 4, 5, 6, 7, 8]},
  {"name": "B", "shape": [2, 4], "datatype": "FP32", "data": [10, 20, 30, 40, 50, 60, 70, 80]}]}'
resp=$(curl -sf -H 'Content-Type: application/json' -d "$req" "http://127.0.0.1:$HTTP/v2/models/add/infer") ||
  fail "the inference request failed"
.venv/bin/python -c 'import json, sys
o = json.loads(sys.argv[1])["outputs"][0]
assert o["name"] == "C" and o["shape"] == [2, 4] and o["data"] == [11, 22, 33, 44, 55, 66, 77, 88], o' "$resp" ||
  fail "wrong inference result: $resp"
say "check passed: tritonserver served an ONNX Add model with this backend (2x4 batch, result correct)"
say "use it as setup-triton.sh prints: its backend directory now holds onnxruntime/ too:"
echo "  source target/bench/triton.env"
echo "  LD_LIBRARY_PATH=\$TRITON_LD_LIBRARY_PATH \$TRITONSERVER --backend-directory \$TRITON_BACKEND_DIR \\"
echo "    --model-repository REPO --allow-metrics=false   # REPO with platform: \"onnxruntime_onnx\" models"
say "ready"
