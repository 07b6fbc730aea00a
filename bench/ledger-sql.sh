#!/usr/bin/env bash
# The delivery ledger's row work at the SQL level, without the engine: what a schema design
# costs per message before any worker, socket or sink is involved. On a scratch PostgreSQL 15
# cluster (fsync on, autovacuum off so it cannot land inside one variant's run) with the
# project's migrations, pgbench clients each loop: claim 100 queued test deliveries (the lock
# and the `sending` update), mark them (the share lock and one mark-group row), record them
# delivered (the outcome update, deleting the mark group). The statements are the engine's
# shapes without its fairness walk, suppression re-check and progress slots.
#
# Variants (bench/ledger-sql/*.sql applied on top of the migrations):
#   base  the schema as it is;
#   hot   the claim a heap-only update (no index names a column it changes; leases in a
#         narrow table, one row per claim);
#   narrow  what is due in a narrow table of its own: a claim deletes from it and writes one
#         lease row per claim, a mark share-locks that row, the wide row is written once, with
#         the outcome;
#   lean  base without the seven secondary indexes the queue does not read (a bound);
#   narrow-lean  both (the floor the two would reach together);
#   unlocked  base with a mark that share-locks nothing (a bound: what the lock costs);
#   brin  base with retention's partial B-tree replaced by a BRIN index on finished_at.
# Prints messages/s, CPU per message of the whole machine less pgbench's own (PostgreSQL and
# the kernel's work for it: run on a quiet machine), heap-only updates, and each statement's
# mean latency.
#
# Usage: bench/ledger-sql.sh [rows=40000] [rounds=2] [clients="1 4"] [variants="base hot narrow lean"]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rows=${1:-40000}
rounds=${2:-2}
clients=${3:-1 4}
variants=${4:-base hot narrow lean}
bin=$(ls -d /usr/lib/postgresql/15/bin)
port=5499
dir=$(mktemp -d /tmp/ledger-sql.XXXXXX)
chmod 755 "$dir"
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
[ "$(id -u)" = 0 ] && chown postgres "$dir"
as_pg "$bin/initdb" -D "$dir/data" -A trust -U postgres >/dev/null
as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w \
  -o "-p $port -k $dir -c listen_addresses='' -c autovacuum=off" start >/dev/null
trap 'as_pg "$bin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null; rm -rf "$dir"' EXIT
psql() { command psql -X -q -h "$dir" -p "$port" -U postgres -v ON_ERROR_STOP=1 "$@"; }

psql -c "create database template_ledger"
for f in "$here"/../migrations/*.sql; do psql -d template_ledger -1 -f "$f" >/dev/null; done
psql -d template_ledger -c "insert into orgs (name, slug, from_name, from_address)
                            values ('Bench', 'bench', 'Bench', 'bench@example.org')"
for v in $variants; do
  psql -c "create database \"$v\" template template_ledger"
  [ -f "$here/ledger-sql/$v.sql" ] && psql -d "$v" -f "$here/ledger-sql/$v.sql"
done

busy() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; }
tick=$(getconf CLK_TCK)
for round in $(seq "$rounds"); do
  for c in $clients; do
    for v in $variants; do
      script="$here/ledger-sql/$v.bench"
      # A combined variant (narrow-lean) runs its first part's statements.
      [ -f "$script" ] || script="$here/ledger-sql/${v%%-*}.bench"
      [ -f "$script" ] || script="$here/ledger-sql/base.bench"
      psql -d "$v" -v n="$rows" -f "$here/ledger-sql/load.sql" 2>/dev/null
      hot0=$(psql -d "$v" -tAc "select n_tup_hot_upd || ' ' || n_tup_upd from pg_stat_user_tables where relname = 'deliveries'")
      t0=$(busy)
      s0=$(date +%s.%N)
      # Simple protocol: the claimed ids travel as text into the next statements' array literals.
      /usr/bin/time -f "%U %S" -o "$dir/pgbench.cpu" pgbench -h "$dir" -p "$port" -U postgres -n \
        -M simple -r -c "$c" -j "$c" -t $((rows / 100 / c)) -f "$script" "$v" >"$dir/pgbench.out"
      s1=$(date +%s.%N)
      t1=$(busy)
      left=$(psql -d "$v" -tAc "select count(*) from deliveries where status <> 'delivered'")
      hot1=$(psql -d "$v" -tAc "select n_tup_hot_upd || ' ' || n_tup_upd from pg_stat_user_tables where relname = 'deliveries'")
      [ "$left" = 0 ] || { echo "$v: $left deliveries not delivered" >&2; exit 1; }
      lat=$(awk '/statement latencies/{on=1; next} on && $1 ~ /^[0-9.]+$/ {printf "%s%.1f", sep, $1 * 10; sep=" / "}' "$dir/pgbench.out")
      python3 -c "
rows, wall = $rows, $s1 - $s0
(h0, u0), (h1, u1) = map(int, '$hot0'.split()), map(int, '$hot1'.split())
cpu = ($t1 - $t0) / $tick - sum(map(float, open('$dir/pgbench.cpu').read().split()))
print(f'round $round, {$c} clients, $v: {rows / wall:,.0f} msg/s, {cpu * 1e6 / rows:.1f} us CPU/msg, '
      f'{h1 - h0:,} of {u1 - u0:,} updates of the wide row heap-only; claim / mark / outcome {\"$lat\"} us per row')"
    done
  done
done
