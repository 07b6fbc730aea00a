#!/usr/bin/env bash
# Automations: enrolling people through a list import beside the campaign materialisation of
# the same people, and steps dispatched when every wait ends at one instant.
# Usage: bench/automations.sh [people=1000000] [runners=2] [batch=500]
set -euo pipefail
cd "$(dirname "$0")/.."
export LEPTOS_OUTPUT_NAME=mailroom
command -v smtp-sink >/dev/null || { echo "needs Postfix's smtp-sink: apt-get install postfix" >&2; exit 1; }
cargo build --release -p mailroom --bin mailroom --example automation_bench
target=${CARGO_TARGET_DIR:-target}
# The worker sends the automation's mail while the steps are taken (BENCH_NO_SENDER=1: not).
if [ -z "${BENCH_NO_SENDER:-}" ]; then export MAILROOM_BIN="$target/release/mailroom"; fi
"$target/release/examples/automation_bench" "$@"
