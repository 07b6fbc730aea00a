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
# BENCH_SENDER=1: a `mailroom worker` sends the automation's mail while the steps are taken, and
# the delay to each message's delivery is printed (at its default flags, 1,845 msg/s with
# 1,000,000 queued on 2026-12-06: the full size takes about 15 minutes). Its flags can be set
# through the environment (MAILROOM_SMTP_CONNECTIONS=8 …), which the worker inherits.
if [ -n "${BENCH_SENDER:-}" ]; then export MAILROOM_BIN="$target/release/mailroom"; fi
"$target/release/examples/automation_bench" "$@"
