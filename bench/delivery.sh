#!/usr/bin/env bash
# Delivery throughput: the delivery engine beside its peers in one run — Postfix smtp-source into
# the same smtp-sink, graphile-worker (npm) on the same PostgreSQL — and Mailroom's SMTP client
# alone (the raw ceiling).
# Usage: bench/delivery.sh [messages=100000] [connections=8] [batch=200] [orgs=1]
# Environment: BENCH_DKIM=1, BENCH_MARKS_AHEAD=8, BENCH_REPLY_DELAY_MS=20, BENCH_GRAPHILE=0 (see delivery_bench.rs);
# BENCH_HOG=N runs N busy loops at normal priority for the whole run (CPU contention: every
# contender, the engine and its peers alike, competes with them); BENCH_IO_HOG=N runs N writers
# that each write 64 MiB and fsync it, again and again, on the disk the bench's database is on
# (I/O contention, as a build beside it makes: every commit's fsync queues behind them).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v smtp-sink >/dev/null || { echo "needs Postfix's smtp-sink: apt-get install postfix" >&2; exit 1; }
command -v node >/dev/null || { echo "needs node (the machine's Node.js) for graphile-worker" >&2; exit 1; }
npm ci --prefix bench/graphile --no-audit --no-fund --loglevel=error
export LEPTOS_OUTPUT_NAME=mailroom
cargo build --release -p mailroom --bin mailroom --example delivery_bench
target=${CARGO_TARGET_DIR:-target}
hogs=()
for _ in $(seq 1 "${BENCH_HOG:-0}"); do
  sh -c 'while :; do :; done' &
  hogs+=($!)
done
io_dir=$(mktemp -d "${TMPDIR:-/tmp}/delivery-bench-io.XXXXXX")
for i in $(seq 1 "${BENCH_IO_HOG:-0}"); do
  sh -c "while :; do dd if=/dev/zero of='$io_dir/$i' bs=1M count=64 conv=fsync status=none; done" &
  hogs+=($!)
done
trap '[ ${#hogs[@]} -eq 0 ] || kill "${hogs[@]}" 2>/dev/null; rm -rf "$io_dir"' EXIT
[ ${#hogs[@]} -eq 0 ] || echo "contention: ${BENCH_HOG:-0} busy loops, ${BENCH_IO_HOG:-0} fsync writers running"
"$target/release/examples/delivery_bench" "$target/release/mailroom" "$@"
