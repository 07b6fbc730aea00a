#!/usr/bin/env bash
# Build times of the server binary (dev profile, the edit-compile loop): once from clean, then
# incrementally after touching one file of each layer (a page, a `db` file, a domain type, a
# server file), best of `runs`. Clean builds take minutes: pass `incremental` to skip them.
# Usage: bench/build.sh [runs=2] [incremental]
set -euo pipefail
cd "$(dirname "$0")/.."
export LEPTOS_OUTPUT_NAME=mailroom
runs=${1:-2}
build() { cargo build -p mailroom --bin mailroom --quiet 2>/dev/null; }
secs() { local t0; t0=$(date +%s.%N); "$@"; echo "$(date +%s.%N) - $t0" | bc; }
build
if [ "${2:-}" != incremental ]; then
  cargo clean -p mailroom -p app $(cargo metadata --no-deps --format-version 1 \
    | python3 -c 'import json,sys; print(" ".join("-p "+p["name"] for p in json.load(sys.stdin)["packages"] if p["name"] not in ("mailroom","app")))') --quiet 2>/dev/null || true
  printf '%-44s %6.1f s\n' "workspace crates from clean (deps built)" "$(secs build)"
fi
# A page, an engine file (`db`, in `core/` since the core became a crate of its own), a domain
# type, a server file.
for f in app/src/pages/overview.rs core/src/db/lists.rs core/src/domain/week_key.rs \
  server/src/workers/digest.rs; do
  best=
  for _ in $(seq "$runs"); do
    touch "$f"
    t=$(secs build)
    if [ -z "$best" ] || [ "$(echo "$t < $best" | bc)" = 1 ]; then best=$t; fi
  done
  printf 'touch %-38s %6.1f s\n' "$f" "$best"
done
