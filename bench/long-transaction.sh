#!/usr/bin/env bash
# The delivery engine while a long pg_dump runs (what `mailroom backup` runs): one worker, 8
# connections, Postfix's smtp-sink, a queue kept full; a window without a dump, a window of the
# same length while pg_dump holds its snapshot (its output read slowly), and up to two minutes
# after it. Prints each window's rate, the ratio, and the queue tables' dead row versions.
# Usage: bench/long-transaction.sh [seconds per window=600] [connections=8]
set -euo pipefail
cd "$(dirname "$0")/.."
command -v smtp-sink >/dev/null || { echo "needs Postfix's smtp-sink: scripts/setup" >&2; exit 1; }
export LEPTOS_OUTPUT_NAME=mailroom
cargo build --release -p mailroom --bin mailroom --example long_transaction_bench
target=${CARGO_TARGET_DIR:-target}
"$target/release/examples/long_transaction_bench" "$target/release/mailroom" "$@"
