#!/usr/bin/env bash
# Campaign engine: materialisation (vs the bare statement in psql), hand-off throughput by
# batch size and workers, end to end into Postfix smtp-sink with the worker's peak RSS; with the
# 1,000,000 sends in place, the dashboard under 50 clients on two replicas (BENCH_DASHBOARD=0 skips).
# Usage: bench/campaign.sh [recipients=1000000] [e2e=100000]
set -euo pipefail
cd "$(dirname "$0")/.."
command -v smtp-sink >/dev/null || { echo "needs Postfix's smtp-sink: apt-get install postfix" >&2; exit 1; }
export LEPTOS_OUTPUT_NAME=mailroom
cargo build --release -p mailroom --bin mailroom --example campaign_bench
target=${CARGO_TARGET_DIR:-target}
"$target/release/examples/campaign_bench" "$target/release/mailroom" "$@"
