#!/usr/bin/env bash
# The seed's promise at full size: 3 `mailroom worker` processes, a random one SIGKILLed every
# 1.5 s and restarted, until a campaign to 50,000 recipients (overlapping lists, case-variant
# duplicates) is sent; then the database is reconciled with the SMTP sink (no duplicate, nothing
# lost, counter slots = count(*)). The test command runs the same test at 5,000.
# Usage: bench/campaign-kill.sh [recipients=50000]
set -euo pipefail
cd "$(dirname "$0")/.."
export LEPTOS_OUTPUT_NAME=mailroom
CAMPAIGN_KILL_RECIPIENTS=${1:-50000} cargo test -p mailroom --test integration \
  sigkill_a_random_worker_every_few_seconds -- --nocapture 2>&1 | grep -E "kills|tally|test result|panicked"
