#!/usr/bin/env bash
# Delivery throughput: raw SMTP ceiling vs the delivery engine, into Postfix smtp-sink.
# Usage: bench/delivery.sh [messages=100000] [connections=8] [batch=200] [orgs=1]
set -euo pipefail
cd "$(dirname "$0")/.."
command -v smtp-sink >/dev/null || { echo "needs Postfix's smtp-sink: apt-get install postfix" >&2; exit 1; }
export LEPTOS_OUTPUT_NAME=mailroom
cargo build --release -p mailroom --bin mailroom --example delivery_bench
target=${CARGO_TARGET_DIR:-target}
"$target/release/examples/delivery_bench" "$target/release/mailroom" "$@"
