#!/usr/bin/env bash
# Builds trtis and checks the example model repository with
# `trtis validate-config`. (When `trtis serve` lands, this serves it.)
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --release --locked
./target/release/trtis validate-config examples/model_repository
