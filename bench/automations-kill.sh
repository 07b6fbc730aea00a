#!/usr/bin/env bash
# Automations at full size: 3 `mailroom worker` processes take a welcome series (three mails,
# two waits) for 100,000 people joining its list while a random one is SIGKILLed every second
# while steps are due or mail unsent, the workers' clock moved past each wait in phases; then everyone must have been enrolled
# once, taken all five steps once and ended completed, and no message arrived twice. Then the
# same on a PostgreSQL of the test's own, crash-restarted three times (while people join, and at
# each later phase). The test command runs the same tests at 1,500.
# Usage: bench/automations-kill.sh [people=100000]
set -euo pipefail
cd "$(dirname "$0")/.."
export LEPTOS_OUTPUT_NAME=mailroom
# Release builds: a debug worker sends a few hundred messages a second, and 300,000 go out.
AUTOMATION_KILL_PEOPLE=${1:-100000} cargo test --release -p mailroom --test integration \
  automations::kill -- --nocapture --test-threads 1 2>&1 | grep -E "kills|test result|panicked"
