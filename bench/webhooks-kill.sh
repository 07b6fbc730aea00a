#!/usr/bin/env bash
# Events out at full size: 3 `mailroom worker` processes send a campaign to 50,000 recipients
# and its webhooks (one answer in ten a 503) while a random one is SIGKILLed every 1.5 s; then
# every committed outcome must have reached the endpoint under one webhook-id, and nothing the
# database does not hold. The test command runs the same test at 3,000.
# Usage: bench/webhooks-kill.sh [recipients=50000]
set -euo pipefail
cd "$(dirname "$0")/.."
export LEPTOS_OUTPUT_NAME=mailroom
WEBHOOK_KILL_RECIPIENTS=${1:-50000} cargo test -p mailroom --test integration \
  sigkilled_workers_report_every_committed_outcome -- --nocapture 2>&1 | grep -E "kills|outcomes|test result|panicked"
