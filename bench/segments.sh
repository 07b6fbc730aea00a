#!/usr/bin/env bash
# Segments at scale: events in through the API (events/s, CPU per event), segment counts
# (p50/p99 through the API) over 1,000,000 people and 10,000,000 events, and materialising a
# segment campaign beside the same rows by a hand-written statement in psql.
# First, the differential test of the segment compiler at ten times its CI size (15,000 trees;
# SEGMENT_CASES worlds of 25 trees, SEGMENT_SEED to vary them; BENCH_DIFFERENTIAL=0 skips it).
# BENCH_KEEP_DATA=1 keeps the database directory afterwards (to study plans on it);
# BENCH_REUSE_DATA=<that directory> measures its people and events again without seeding (a minute).
# Usage: bench/segments.sh [subscribers=1000000] [events=10000000] [api_events=1000000] [clients=4] [runs=50]
set -euo pipefail
cd "$(dirname "$0")/.."
export LEPTOS_OUTPUT_NAME=mailroom
if [[ ${BENCH_DIFFERENTIAL:-1} != 0 ]]; then
  (cd server && SEGMENT_CASES=${SEGMENT_CASES:-600} cargo test -p mailroom --test integration -- \
    --exact segments::differential::segment_sql_matches_an_independent_evaluator_on_random_worlds_and_trees)
fi
cargo build --release -p mailroom --bin mailroom --example segments_bench
target=${CARGO_TARGET_DIR:-target}
"$target/release/examples/segments_bench" "$target/release/mailroom" "$@"
