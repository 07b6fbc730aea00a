#!/usr/bin/env bash
# Automations: enrolling people through a list import beside the campaign materialisation of
# the same people, and steps dispatched when every wait ends at one instant.
# Usage: bench/automations.sh [people=1000000] [runners=2] [batch=500]
set -euo pipefail
cd "$(dirname "$0")/.."
export LEPTOS_OUTPUT_NAME=mailroom
cargo build --release -p mailroom --example automation_bench
target=${CARGO_TARGET_DIR:-target}
"$target/release/examples/automation_bench" "$@"
