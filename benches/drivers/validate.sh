#!/usr/bin/env bash
# Benchmark: validate-config on a generated repository of 100 models, in
# process (benches/validate_repo.rs, against bare file reading) and end to
# end with the release binary (against spawning /bin/true). The repository
# is generated into $TRTIS_BENCH_REPO (default target/bench-repo). Results
# on stdout. Run it with scripts/bench.sh validate.
set -euo pipefail
cd "$(dirname "$0")/../.."
export TRTIS_BENCH_REPO=${TRTIS_BENCH_REPO:-$PWD/target/bench-repo}
cargo bench --locked --bench validate_repo
cargo build --release --locked
runs=20
start=$(date +%s%N)
for _ in $(seq $runs); do ./target/release/trtis validate-config "$TRTIS_BENCH_REPO" >/dev/null; done
end=$(date +%s%N)
start_true=$(date +%s%N)
for _ in $(seq $runs); do /bin/true; done
end_true=$(date +%s%N)
echo "trtis validate-config (whole process, 100 models): $(( (end - start) / runs / 1000 )) us per run"
echo "process spawn reference (/bin/true):               $(( (end_true - start_true) / runs / 1000 )) us per run"
