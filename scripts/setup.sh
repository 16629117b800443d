#!/usr/bin/env bash
# Sets up everything trtis needs on a fresh machine, idempotently:
#   - the project-local Python environment .venv with the pinned test clients
#     (tritonclient 2.51.0) from PyPI.
# Rust comes from the machine's toolchain; crates come from crates.io when
# cargo builds. Nothing is downloaded from anywhere but the package registries.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
REQ=scripts/requirements-test.txt
STAMP=.venv/.trtis-requirements

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PYTHON" -m venv .venv
fi
if ! cmp -s "$REQ" "$STAMP" 2>/dev/null; then
  echo "setup: installing $(grep -v '^#' "$REQ" | tr '\n' ' ')"
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -r "$REQ"
  cp "$REQ" "$STAMP"
fi
