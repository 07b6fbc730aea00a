#!/usr/bin/env bash
# Worker throughput with 0 and with 100 open progress streams: one `mailroom serve` (release)
# sends campaigns into Postfix's smtp-sink while 0, then 100, clients hold the campaign's
# progress stream open on it; alternating runs, messages/s by the database clock.
# Usage: bench/progress-streams.sh [recipients=30000] [streams=100] [rounds=2]
set -euo pipefail
cd "$(dirname "$0")/.."
command -v smtp-sink >/dev/null || { echo "needs Postfix's smtp-sink: apt-get install postfix" >&2; exit 1; }
[[ -f target/site/pkg/mailroom.js ]] || { echo "build the site first (cargo leptos build): serve needs target/site" >&2; exit 1; }
export LEPTOS_OUTPUT_NAME=mailroom
cargo build --release -p mailroom --bin mailroom --example progress_streams_bench
target=${CARGO_TARGET_DIR:-target}
"$target/release/examples/progress_streams_bench" "$target/release/mailroom" "$@"
