#!/usr/bin/env bash
# A CSV import through the dashboard's upload endpoint: time to import N rows into a list and
# the serving process's peak memory, to show the file is streamed, never held whole.
# Usage: bench/import.sh [rows=100000]
# `mailroom serve` (release) on its embedded PostgreSQL in a temporary data directory.
set -euo pipefail
cd "$(dirname "$0")/.."
rows=${1:-100000}
export LEPTOS_OUTPUT_NAME=mailroom
cargo build --release -p mailroom --bin mailroom
bin=${CARGO_TARGET_DIR:-target}/release/mailroom
dir=$(mktemp -d /tmp/mrimport.XXXXXX)
chmod o+x "$dir" # the embedded PostgreSQL runs as `postgres` when started as root
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export MAILROOM_DATA_DIR=$dir/data
logins=$("$bin" demo)
password=$(awk '$3 == "adam@acme.example" { print $4 }' <<<"$logins")
RUST_LOG=warn "$bin" serve --listen "127.0.0.1:$port" >"$dir/serve.log" 2>&1 &
pid=$!
cleanup() { kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
base=http://127.0.0.1:$port
until curl -fsS "$base/readyz" >/dev/null 2>&1; do sleep 0.2; done
jar=$dir/cookies
curl -fsS -c "$jar" -o /dev/null -H "Origin: $base" --data-urlencode email=adam@acme.example --data-urlencode "password=$password" "$base/api/login"
api() { curl -fsS -b "$jar" -H "Origin: $base" "$@"; }
api -o /dev/null --data-urlencode "name=Bench $rows" "$base/api/create_list"
list=$(api -X POST "$base/api/lists" | python3 -c "import json,sys; print([l['id'] for l in json.load(sys.stdin)['lists'] if l['name']=='Bench $rows'][0])")
python3 - "$rows" >"$dir/people.csv" <<'PY'
import sys
print("email,name")
for i in range(int(sys.argv[1])):
    print(f"bench{i}@example.org,Bench Person {i}")
PY
size=$(du -h "$dir/people.csv" | cut -f1)
rss_before=$(awk '/VmRSS/ {print $2}' /proc/$pid/status)
start=$(date +%s.%N)
location=$(api -o /dev/null -w '%{redirect_url}' -F "file=@$dir/people.csv;type=text/csv" "$base/api/lists/$list/import")
id=${location##*/}
uploaded=$(date +%s.%N)
while :; do
  status=$(api -X POST --data-urlencode "id=$id" "$base/api/import_status")
  state=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['status'])" "$status")
  [[ $state != running ]] && break
  sleep 0.2
done
end=$(date +%s.%N)
hwm=$(awk '/VmHWM/ {print $2}' /proc/$pid/status)
echo "file: $rows rows, $size"
echo "status: $state — $status" | cut -c1-300
python3 - "$start" "$uploaded" "$end" "$rows" "$rss_before" "$hwm" <<'PY'
import sys
start, uploaded, end, rows, before, hwm = map(float, sys.argv[1:])
print(f"upload answered in {uploaded - start:.2f} s; import done {end - start:.2f} s after the upload began "
      f"({rows / (end - start):,.0f} rows/s)")
print(f"serve RSS before: {before / 1024:.1f} MiB; peak over its life: {hwm / 1024:.1f} MiB")
PY
