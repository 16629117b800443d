#!/usr/bin/env bash
# Makes NVIDIA Triton Inference Server 2.51 runnable here, CPU only, with its
# Python backend and trtis's minimal identity backend, as a same-run reference
# for the benchmarks (bench python, bench serve):
#   - target/bench/triton-venv: its own venv (the project's Python) with the
#     nvidia-pytriton==0.7.0 wheel, which ships tritonserver, the Python
#     backend and its stubs, plus numpy (same version as .venv's when < 2).
#     Installed with --no-deps: only the server binary is used, not pytriton's
#     Python API, so its client dependencies (~150 MB) are left out.
#   - target/bench/triton/backends: the backend directory, made as pytriton
#     makes its own: libtriton_python.so + triton_python_backend_utils.py and
#     the stub built for this Python version (triton_python_backend_stub),
#     with numpy and numpy.libs linked in beside them; and identity/, built
#     from benches/triton_identity.c (gcc). The stub embeds
#     libpython without the venv's site-packages; <backend dir>/python is on
#     its sys.path, so that is where numpy has to be.
#   - LD_LIBRARY_PATH: the wheel's nvidia_pytriton.libs (the copied backend
#     files lose their $ORIGIN rpath) and the project Python's LIBDIR, so the
#     stub embeds the same interpreter as .venv (trtis's worker and the plain
#     loop reference) rather than the system's libpython3.X.
# Idempotent. Writes target/bench/triton.env (sourceable) and prints how to
# run tritonserver. Exits non-zero with "setup-triton: error: ..." on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

PYTRITON_REQ="nvidia-pytriton==0.7.0"
VENV=target/bench/triton-venv
BACKENDS=target/bench/triton/backends
ENV_FILE=target/bench/triton.env
STAMP=$VENV/.trtis-requirements

say() { echo "setup-triton: $*"; }
die() {
  echo "setup-triton: error: $*" >&2
  exit 1
}

# The project's Python (as scripts/setup.sh and setup-perf-analyzer.sh use).
if [ -x .venv/bin/python ]; then
  PY=.venv/bin/python
else
  PY=${PYTHON:-python3}
  command -v "$PY" >/dev/null || die "no Python found (.venv/bin/python or $PY); run scripts/setup.sh"
fi
PYVER=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')

# numpy for the stub: the project's version when it has one below 2.0
# (pytriton 0.7.0 and Triton 2.51's stub want numpy < 2).
NUMPY_REQ="numpy<2"
if v=$("$PY" -c 'import numpy; print(numpy.__version__)' 2>/dev/null) && [ "${v%%.*}" -lt 2 ]; then
  NUMPY_REQ="numpy==$v"
fi
REQ="$PYTRITON_REQ $NUMPY_REQ"

mkdir -p target/bench
if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV with $PY (Python $PYVER)"
  "$PY" -m venv "$VENV" || die "could not create $VENV with $PY -m venv"
fi
if [ "$(cat "$STAMP" 2>/dev/null)" != "$REQ" ]; then
  say "installing $REQ into $VENV (--no-deps, --no-cache-dir; about 250 MB)"
  # shellcheck disable=SC2086
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-cache-dir --no-deps $REQ ||
    die "pip could not install $REQ (PyPI reachable? see the pip output above)"
  echo "$REQ" >"$STAMP"
else
  say "$REQ already in $VENV"
fi

SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
DIST=$SITE/pytriton/tritonserver
LIBS=$SITE/nvidia_pytriton.libs
TRITONSERVER=$DIST/bin/tritonserver
STUB=$DIST/python_backend_stubs/$PYVER/triton_python_backend_stub
[ -x "$TRITONSERVER" ] || die "no tritonserver in the installed wheel (looked for $TRITONSERVER)"
[ -d "$LIBS" ] || die "no nvidia_pytriton.libs beside pytriton in $SITE"
[ -f "$STUB" ] || die "nvidia-pytriton 0.7.0 has no Python backend stub for Python $PYVER (it has: $(ls "$DIST/python_backend_stubs" | tr '\n' ' '))"

# The libpython the stub embeds: the project Python's own when it is a shared
# build, else the system's (Debian's libpython3.X package).
LIBPY=libpython$PYVER.so.1.0
PYLIBDIR=$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR") or "")')
if [ -n "$PYLIBDIR" ] && [ -f "$PYLIBDIR/$LIBPY" ]; then
  LD_PATH="$LIBS:$PYLIBDIR"
  say "the stub embeds $PYLIBDIR/$LIBPY (the project's Python)"
else
  LD_PATH="$LIBS"
  if ! ldconfig -p | grep -q "$LIBPY"; then
    say "the project's Python has no shared $LIBPY: installing Debian's libpython$PYVER"
    { apt-get install -y -q "libpython$PYVER" || { apt-get update -q && apt-get install -y -q "libpython$PYVER"; }; } >/dev/null 2>&1 ||
      die "no $LIBPY for the stub: neither the project's Python ($PY) nor apt-get install libpython$PYVER provides one"
  fi
  say "the stub embeds the system's $LIBPY"
fi

# The backend directory, made from the wheel (3 MB) unless already made
# from the same install.
BSTAMP=$BACKENDS/.trtis-made-from
if [ "$(cat "$BSTAMP" 2>/dev/null)" != "$REQ $STUB" ]; then
  say "preparing $BACKENDS/python (libtriton_python.so, the Python $PYVER stub, numpy linked in)"
  rm -rf "$BACKENDS"
  mkdir -p "$BACKENDS/python"
  cp "$DIST/backends/python/libtriton_python.so" "$DIST/backends/python/triton_python_backend_utils.py" "$BACKENDS/python/"
  cp "$STUB" "$BACKENDS/python/triton_python_backend_stub"
  for pkg in numpy numpy.libs; do
    [ -e "$SITE/$pkg" ] || die "$SITE/$pkg missing after installing $NUMPY_REQ"
    ln -s "$SITE/$pkg" "$BACKENDS/python/$pkg"
  done
  echo "$REQ $STUB" >"$BSTAMP"
else
  say "$BACKENDS/python already prepared"
fi

# trtis's own minimal identity backend for Triton (benches/triton_identity.c),
# rebuilt when its source changes: the serve bench runs Triton's server on
# the identity model with it.
IDENTITY=$BACKENDS/identity/libtriton_identity.so
if [ ! -f "$IDENTITY" ] || [ benches/triton_identity.c -nt "$IDENTITY" ]; then
  command -v gcc >/dev/null || die "gcc is needed to build $IDENTITY (apt-get install gcc)"
  mkdir -p "$BACKENDS/identity"
  gcc -O2 -shared -fPIC -fvisibility=hidden -o "$IDENTITY" benches/triton_identity.c ||
    die "could not build $IDENTITY from benches/triton_identity.c"
  say "built $IDENTITY"
fi

# Every shared library must resolve with that LD_LIBRARY_PATH.
for f in "$TRITONSERVER" "$BACKENDS/python/libtriton_python.so" "$BACKENDS/python/triton_python_backend_stub"; do
  missing=$(LD_LIBRARY_PATH="$LD_PATH" ldd "$f" | grep 'not found' || true)
  [ -z "$missing" ] || die "$f: unresolved libraries: $missing"
done
# numpy must import from <backend dir>/python with nothing else on the path,
# in the interpreter whose libpython the stub embeds (when it is the project's).
base=$("$PY" -c 'import sys, os; print(os.path.join(sys.base_prefix, "bin", "python%d.%d" % sys.version_info[:2]))')
if [ "$LD_PATH" != "$LIBS" ] && [ -x "$base" ]; then
  "$base" -I -S -c "import sys; sys.path.insert(0, '$ROOT/$BACKENDS/python'); import numpy" ||
    die "numpy does not import from $BACKENDS/python"
fi

{
  echo "# Written by scripts/setup-triton.sh: Triton 2.51 ($PYTRITON_REQ), CPU only, Python $PYVER backend."
  echo "# Run: LD_LIBRARY_PATH=\$TRITON_LD_LIBRARY_PATH \$TRITONSERVER --backend-directory \$TRITON_BACKEND_DIR --model-repository REPO"
  printf 'TRITONSERVER=%q\n' "$TRITONSERVER"
  printf 'TRITON_BACKEND_DIR=%q\n' "$ROOT/$BACKENDS"
  printf 'TRITON_LD_LIBRARY_PATH=%q\n' "$LD_PATH"
} >"$ENV_FILE"

say "ready; settings in $ENV_FILE. Run tritonserver as:"
echo "  LD_LIBRARY_PATH=$LD_PATH \\"
echo "  $TRITONSERVER \\"
echo "    --backend-directory $ROOT/$BACKENDS \\"
echo "    --model-repository REPO --allow-metrics=false   # add --grpc-port/--http-port as needed"
