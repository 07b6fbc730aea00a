#!/usr/bin/env bash
# Soak (issue 7): 3 `mailroom serve` replicas on one embedded cluster, a campaign and every org's
# weekly digest due at the start, N dashboards holding the progress stream open and reloading
# pages, one global SMTP rate limit spreading the mail over the duration; then duplicates at the
# sink, accounting, memory growth, log errors. Exits non-zero if a check fails.
# Usage: bench/soak.sh [seconds=600] [recipients=200000] [orgs=10000] [dashboards=50]
# Environment: MAILROOM_BIN (default: target/release/mailroom, built here with cargo leptos),
# SOAK_SITE_ROOT (default target/site), SOAK_RATE, SOAK_DRAIN_SECONDS, SOAK_RSS_LIMIT_PCT,
# SOAK_KEEP=1 (see server/examples/soak.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
export LEPTOS_OUTPUT_NAME=mailroom
target=${CARGO_TARGET_DIR:-target}
if [[ -z ${MAILROOM_BIN:-} ]]; then
  cargo leptos build --release --precompress
  MAILROOM_BIN=$target/release/mailroom
fi
site=${SOAK_SITE_ROOT:-target/site}
[[ -f $site/pkg/mailroom.js ]] || { echo "no built site in $site (cargo leptos build --release)" >&2; exit 1; }
cargo build --release -p mailroom --example soak
exec "$target/release/examples/soak" "$MAILROOM_BIN" "$site" "$@"
