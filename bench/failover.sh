#!/usr/bin/env bash
# A database failover at full size: a primary and a streaming standby (synchronous, then
# asynchronous), 3 `mailroom worker` processes on a URL naming both, the primary SIGKILLed a
# quarter of the way through a campaign to 30,000 recipients and the standby promoted 2 s later.
# Prints when mail flowed again and the reconciliation (synchronous: no duplicate, `unknown`
# within a process kill's bound per worker; asynchronous: the duplicates counted). The test
# command runs the same tests at 6,000.
# Usage: bench/failover.sh [recipients=30000]
set -euo pipefail
cd "$(dirname "$0")/.."
export LEPTOS_OUTPUT_NAME=mailroom
FAILOVER_RECIPIENTS=${1:-30000} cargo test -p mailroom --test integration ops::failover \
  -- --nocapture --test-threads 1 2>&1 | grep -E "failover|frozen|tally|test result|panicked"
