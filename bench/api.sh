#!/usr/bin/env bash
# The REST API on one `mailroom serve` (release): bulk upsert subscribers/s beside the CSV
# import of as many rows, and transactional sends from concurrent clients (p50/p99 to the 201,
# then the same keys again, to the 200), every message checked to be queued once.
# Usage: bench/api.sh [rows=100000] [requests=5000] [clients=50] [bulk_clients=1]
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -f target/site/pkg/mailroom.js ]] || { echo "build the site first (cargo leptos build): serve needs target/site" >&2; exit 1; }
export LEPTOS_OUTPUT_NAME=mailroom
cargo build --release -p mailroom --bin mailroom --example api_bench
target=${CARGO_TARGET_DIR:-target}
"$target/release/examples/api_bench" "$target/release/mailroom" "$@"
