#!/usr/bin/env bash
# Delivery throughput: the delivery engine beside its peers in one run — Postfix smtp-source into
# the same smtp-sink, graphile-worker (npm) on the same PostgreSQL — and Mailroom's SMTP client
# alone (the raw ceiling).
# Usage: bench/delivery.sh [messages=100000] [connections=8] [batch=200] [orgs=1]
# Environment: BENCH_DKIM=1, BENCH_MARKS_AHEAD=8, BENCH_REPLY_DELAY_MS=20, BENCH_GRAPHILE=0 (see delivery_bench.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v smtp-sink >/dev/null || { echo "needs Postfix's smtp-sink: apt-get install postfix" >&2; exit 1; }
command -v node >/dev/null || { echo "needs node (the machine's Node.js) for graphile-worker" >&2; exit 1; }
npm ci --prefix bench/graphile --no-audit --no-fund --loglevel=error
export LEPTOS_OUTPUT_NAME=mailroom
cargo build --release -p mailroom --bin mailroom --example delivery_bench
target=${CARGO_TARGET_DIR:-target}
"$target/release/examples/delivery_bench" "$target/release/mailroom" "$@"
