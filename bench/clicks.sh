#!/usr/bin/env bash
# Click redirects: tracked links followed at a fixed rate (open loop) against one
# `mailroom serve --no-workers` (release): latency p50/p99/max, CPU per click, each recorded once.
# Usage: bench/clicks.sh [rate=500] [seconds=10] [people=10000]
set -euo pipefail
cd "$(dirname "$0")/.."
export LEPTOS_OUTPUT_NAME=mailroom
cargo build --release -p mailroom --bin mailroom --example click_bench
target=${CARGO_TARGET_DIR:-target}
"$target/release/examples/click_bench" "$target/release/mailroom" "$@"
