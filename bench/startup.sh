#!/usr/bin/env bash
# Time from `mailroom serve` to a ready dashboard (/readyz answers 200): the first start on an
# empty data directory (initdb + migrations) and later starts (cluster exists), RUNS times each.
# Usage: bench/startup.sh [path/to/mailroom] [runs]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-${CARGO_TARGET_DIR:-target}/release/mailroom}
runs=${2:-3}
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
ms() { date +%s%3N; }

one_start() { # data dir → prints milliseconds to ready, then stops the server
  local t0 pid
  t0=$(ms)
  "$bin" serve --data-dir "$1" --listen "127.0.0.1:$port" --site-root target/site >"$1.log" 2>&1 &
  pid=$!
  until curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1; do
    kill -0 "$pid" 2>/dev/null || { cat "$1.log" >&2; exit 1; }
    sleep 0.01
  done
  echo $(($(ms) - t0))
  kill -TERM "$pid"
  wait "$pid"
}

for i in $(seq 1 "$runs"); do
  dir=$(mktemp -d /tmp/mrbench.XXXXXX)
  first=$(one_start "$dir")
  later=$(one_start "$dir")
  again=$(one_start "$dir")
  echo "run $i: first start ${first} ms, later starts ${later} ms, ${again} ms"
  rm -rf "$dir" "$dir.log"
done
