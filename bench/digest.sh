#!/usr/bin/env bash
# One digest tick over many due orgs: claims and enqueued deliveries per second.
# Usage: bench/digest.sh [orgs=100000] [admins_per_org=3]
# A private PostgreSQL 15 cluster (fsync on, defaults otherwise) under /tmp; the release binary.
set -euo pipefail
cd "$(dirname "$0")/.."
orgs=${1:-100000}
admins=${2:-3}
export LEPTOS_OUTPUT_NAME=mailroom
cargo build --release -p mailroom --bin mailroom
bin=${CARGO_TARGET_DIR:-target}/release/mailroom
pgbin=/usr/lib/postgresql/15/bin
dir=$(mktemp -d /tmp/mrbench.XXXXXX)
[[ $(id -u) == 0 ]] && chown nobody "$dir" && as=(runuser -u nobody --) || as=()
cleanup() { "${as[@]}" "$pgbin/pg_ctl" -D "$dir/pg" -m fast stop >/dev/null 2>&1 || true; rm -rf "$dir"; }
trap cleanup EXIT
"${as[@]}" "$pgbin/initdb" -D "$dir/pg" -U mailroom --auth=trust >/dev/null
"${as[@]}" "$pgbin/pg_ctl" -D "$dir/pg" -l "$dir/pg.log" -w \
  -o "-k $dir -c listen_addresses='' -c shared_buffers=256MB" start >/dev/null
"${as[@]}" "$pgbin/createdb" -h "$dir" -U mailroom bench
url="postgres://mailroom@localhost/bench?host=$dir"
psql=(psql -q -h "$dir" -U mailroom -d bench -v ON_ERROR_STOP=1)
"$bin" --database-url "$url" migrate >/dev/null
echo "seeding $orgs orgs with $admins opted-in admins each ..."
"${psql[@]}" <<SQL
insert into orgs (name, slug, timezone, digest_weekday, digest_hour, from_name, from_address)
select 'Org ' || i, 'org-' || i, (array['UTC','Europe/Berlin','America/New_York','Asia/Kathmandu'])[1 + i % 4],
       1, 0, 'Org', 'news@example.org'
from generate_series(1, $orgs) i;
insert into users (org_id, email, email_lower, name, role, password_hash)
select o.id, 'a' || k || '-' || o.id || '@example.org', 'a' || k || '-' || o.id || '@example.org', 'Admin', 'admin', 'x'
from orgs o, generate_series(1, $admins) k;
vacuum analyze;
SQL
# Monday 2026-11-30 12:00 UTC: every org's Monday-00:00 local slot (UTC-5 … UTC+5:45) has passed,
# less than 24 hours ago.
echo "one tick:"
export MAILROOM_ALLOW_FAKE_CLOCK=1
RUST_LOG=${RUST_LOG:-warn} /usr/bin/time -f '%e s wall, %M KiB max RSS (mailroom process)' \
  "$bin" --database-url "$url" digest-tick --now 2026-11-30T12:00:00Z | tee "$dir/tick.json"
python3 - "$dir/tick.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
s = r["seconds"]
print(f'claimed {r["claimed"]} orgs, enqueued {r["recipients"]} deliveries in {s:.2f} s: '
      f'{r["claimed"] / s:,.0f} claims/s, {r["recipients"] / s:,.0f} deliveries/s')
PY
# PostgreSQL's CPU: the postmaster's own and its finished backends' (a tick's backends end
# with its process), in milliseconds.
pg_cpu_ms() {
  local pid
  pid=$(head -1 "$dir/pg/postmaster.pid")
  awk -v hz="$(getconf CLK_TCK)" '{printf "%d\n", ($14 + $15 + $16 + $17) * 1000 / hz}' "/proc/$pid/stat"
}
echo "a second tick (nothing due any more):"
before=$(pg_cpu_ms)
"$bin" --database-url "$url" digest-tick --now 2026-11-30T12:01:00Z
sleep 1 # the postmaster reaps the tick's backends
echo "PostgreSQL CPU for that tick (its connections and the start-up's checks included): $(($(pg_cpu_ms) - before)) ms"
echo "ten more such ticks, one process each:"
before=$(pg_cpu_ms)
for m in 02 03 04 05 06 07 08 09 10 11; do
  "$bin" --database-url "$url" digest-tick --now "2026-11-30T12:${m}:00Z" >/dev/null
done
sleep 1
echo "PostgreSQL CPU per tick: $((($(pg_cpu_ms) - before) / 10)) ms"
echo "the tick's look for due orgs alone, 200 times in one psql session:"
before=$(pg_cpu_ms)
for _ in $(seq 200); do
  echo "select digest_due_at, id from orgs where digest_due_at <= '2026-11-30T12:30:00Z' and (digest_due_at, id) > ('-infinity', -9223372036854775808) order by digest_due_at, id limit 1000;"
done | "${psql[@]}" >/dev/null
sleep 1
echo "PostgreSQL CPU: $(($(pg_cpu_ms) - before)) ms in all (one connection's start included)"
