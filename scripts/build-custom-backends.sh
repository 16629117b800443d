#!/usr/bin/env bash
# Builds the example custom backends (examples/custom_backends/*.c, TRTIS's
# custom.h C API) into shared libraries with the system C compiler:
#   scripts/build-custom-backends.sh [OUT_DIR]   (default target/custom-backends)
# Makes libaddsub.so (the seed's API form), libaddsub_1x.so (the same source
# as TRTIS 1.x's form: CustomInitializeData, CustomVersion 2,
# CustomExecuteV2), libsequence.so, libfaulty.so and libincomplete.so (no
# CustomExecute). The Rust example (examples/custom_backends/rust) is a
# workspace crate: `cargo build --workspace` builds libtrtis_custom_addsub.so.
# The tests call this script; nothing built is committed.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-target/custom-backends}"
mkdir -p "$out"
src=examples/custom_backends
cc="${CC:-cc}"
flags=(-shared -fPIC -O2 -std=c11 -Wall -Wextra -Werror -I"$src")
"$cc" "${flags[@]}" -o "$out/libaddsub.so" "$src/addsub.c"
"$cc" "${flags[@]}" -DTRTIS_CUSTOM_1X -o "$out/libaddsub_1x.so" "$src/addsub.c"
"$cc" "${flags[@]}" -o "$out/libsequence.so" "$src/sequence.c"
"$cc" "${flags[@]}" -o "$out/libfaulty.so" "$src/faulty.c"
"$cc" "${flags[@]}" -o "$out/libincomplete.so" "$src/incomplete.c"
echo "$out"
