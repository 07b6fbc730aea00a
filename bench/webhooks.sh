#!/usr/bin/env bash
# Relay webhook intake: events recorded per second by one `mailroom serve` (release), posted by
# concurrent clients as the generic relay, one event per request and then in batches.
# Usage: bench/webhooks.sh [events=20000] [batch=100] [concurrency=16]
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -f target/site/pkg/mailroom.js ]] || { echo "build the site first (cargo leptos build): serve needs target/site" >&2; exit 1; }
export LEPTOS_OUTPUT_NAME=mailroom
cargo build --release -p mailroom --bin mailroom --example webhook_bench
target=${CARGO_TARGET_DIR:-target}
"$target/release/examples/webhook_bench" "$target/release/mailroom" "$@"
