#!/usr/bin/env bash
# The one entry point for the end-to-end benchmarks:
#   scripts/bench.sh                 lists them, one line each
#   scripts/bench.sh NAME            runs one; results go to target/bench/
#   scripts/bench.sh NAME --help     describes one (its driver's own text)
# Each NAME's driver is benches/drivers/NAME.py or NAME.sh. The Python
# drivers get Triton's perf_analyzer set up (scripts/setup-perf-analyzer.sh,
# with the LD_LIBRARY_PATH it needs) and a release build of trtis first; the
# python driver also sets up Triton 2.51 for its reference
# (scripts/setup-triton.sh).
# The cargo benches (benches/*.rs) also run alone: cargo bench --bench NAME.
set -euo pipefail
cd "$(dirname "$0")/.."

# NAME, then what it measures. Results: target/bench/NAME-bench.md (perf:
# perf-compare.md; validate prints them).
benches=(
  "serve     perf_analyzer on trtis serve (identity, simple, the classifier vs ONNX Runtime; Triton 2.51 beside it on identity)"
  "batching  the dynamic batcher on a compute-bound MLP vs ONNX Runtime called directly"
  "compute   trtis vs Triton 2.51's own ONNX Runtime backend, same repository, alternating takes (MLP, classifier; c=1 to 32)"
  "threads   the compute MLP's thread, spinning and instance settings at c=1 to 32 vs ONNX Runtime with the same threads"
  "perf      trtis perf vs perf_analyzer: same server and flags, throughput and client CPU"
  "infer     trtis infer IMAGE end to end, and the image preprocessing alone"
  "sequence  the sequence batcher under perf_analyzer vs the same graph served stateless"
  "ensemble  the example ensemble vs the client calling both models itself"
  "pytorch   the PyTorch backend (TorchScript and .pt2 classifiers, MLP) vs libtorch called directly"
  "tensorflow the TensorFlow backend (SavedModel classifier, dynamic batching, c=1/4/16) vs the C API called directly"
  "trees     tree models on the FIL backend (XGBoost and LightGBM, 500 trees) vs xgboost's inplace_predict and lightgbm's predict in-process, batch 1/128/10000, and served"
  "openvino  the classifier on OpenVINO (IR) vs on ONNX Runtime through trtis at c=1/4/16, and each engine in-process"
  "python    the Python backend (add_sub model.py) vs Triton 2.51's and a plain Python loop"
  "custom    a custom.h library (the addsub example) vs the built-in identity backend, same shapes"
  "streaming time to first token and tokens/s of the example text_generator over SSE (generate_stream, /v1/completions) vs gRPC streaming"
  "tracing   OpenTelemetry spans over OTLP: server CPU per request untraced vs rate 1000 and 1, and with the collector down"
  "v1        the legacy v1 API vs KServe v2 on the same identity model and client shape"
  "ab        two builds of trtis (TRTIS_A, TRTIS_B) on identity over HTTP and gRPC, same run"
  "load      start to READY of 7-8 real models (classifiers, Python) loaded 4 at a time vs 1 (--model-load-thread-count)"
  "remote    an S3 repository (moto) vs the same repository on local disk: start to READY, idle RSS"
  "validate  validate-config on a generated 100-model repository (prints to stdout)"
  "gpu       a KIND_GPU instance (the classifier on CUDA) vs ONNX Runtime on the same GPU (GPU machines: scripts/test-gpu.sh --bench)"
)

list() {
  echo "usage: scripts/bench.sh NAME [--help]   (results in target/bench/)"
  echo
  printf '  %s\n' "${benches[@]}"
  echo
  echo "cargo benches alone: cargo bench --bench validate_repo|preprocess|sequence_bookkeeping"
}

# The driver's description: a Python module's docstring, a script's
# leading comment block.
describe() {
  case "$1" in
    *.py) python3 - "$1" <<'PY' ;;
import ast, signal, sys
signal.signal(signal.SIGPIPE, signal.SIG_DFL)
print(ast.get_docstring(ast.parse(open(sys.argv[1]).read())))
PY
    *.sh) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$1" ;;
  esac
}

if [ $# -eq 0 ]; then
  list
  exit 0
fi
name=$1
shift
driver=
for line in "${benches[@]}"; do
  if [ "${line%% *}" = "$name" ]; then
    for f in "benches/drivers/$name.py" "benches/drivers/$name.sh"; do
      [ -f "$f" ] && driver=$f
    done
  fi
done
if [ -z "$driver" ]; then
  echo "scripts/bench.sh: no benchmark named '$name'" >&2
  list >&2
  exit 2
fi
case "${1:-}" in
  -h | --help)
    describe "$driver"
    exit 0
    ;;
esac
if [ $# -gt 0 ]; then
  echo "scripts/bench.sh: '$name' takes no arguments (scripts/bench.sh $name --help)" >&2
  exit 2
fi

case "$driver" in
  *.py)
    lib="$(./scripts/setup-perf-analyzer.sh)"
    export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    # The workspace (with the PyTorch backend library), then the floor: with
    # --example, cargo builds only the examples, not the libraries.
    cargo build --release --locked --workspace
    cargo build --release --locked --example echo_floor
    .venv/bin/python "$driver"
    ;;
  *.sh)
    bash "$driver"
    ;;
esac
