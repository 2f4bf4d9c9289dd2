#!/usr/bin/env bash
# PostgreSQL's CPU per accepted message with and without the search
# indexes (issue 21 item 4: is indexing worth moving off the write
# transaction?). Alternating rounds of a short closed-loop chat on a fresh
# database, once with the migration's indexes, once with the search GIN
# index dropped (one since migration 00011, two before; search_text and
# search_words are still written: what
# is measured is the index maintenance). The CPU is that of the PostgreSQL
# backends serving aspd (utime + stime from /proc, by pg_stat_activity),
# so other work on the machine does not count, only the cache it evicts.
#
#   bench/searchcpu.sh            # ROUNDS=3 by default
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PG=${ASPD_BENCH_PG:-postgres://postgres@127.0.0.1:5432}
DB=aspd_searchcpu
ADDR=127.0.0.1:8093
OUT=${OUT:-/tmp/aspd-searchcpu}
ROUNDS=${ROUNDS:-3}
# The indexes the "without" rounds drop (SEARCHCPU_DROP="events_search
# events_session_time events_search_pending" drops every index of events
# that 949084b did not have).
DROP=${SEARCHCPU_DROP:-events_search}
# SEARCHCPU_SQL, when set, is run in the "without" rounds instead of the
# drops: a setting of the index against its default, e.g.
# SEARCHCPU_SQL="ALTER INDEX events_search SET (fastupdate = off)".
ALTER=${SEARCHCPU_SQL:-}
export ASPBENCH_ADMIN_TOKEN=bench-admin-token-0123456789
mkdir -p "$OUT"
go build -o "$OUT/aspd" ./cmd/aspd
go build -o "$OUT/aspbench" ./cmd/aspbench

PID=
stop_aspd() {
	[ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null || true; PID=
}
trap stop_aspd EXIT

# ticks: the CPU ticks (utime + stime) of DB's backends.
ticks() {
	local sum=0 p
	for p in $(psql "$PG/postgres" -Atc "SELECT pid FROM pg_stat_activity WHERE datname = '$DB'"); do
		[ -r "/proc/$p/stat" ] || continue
		sum=$((sum + $(awk '{ print $14 + $15 }' "/proc/$p/stat")))
	done
	echo "$sum"
}

round() { # $1: with | without
	stop_aspd
	psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB" >/dev/null
	ASPD_ADMIN_TOKEN=$ASPBENCH_ADMIN_TOKEN "$OUT/aspd" --database-url "$PG/$DB?sslmode=disable" \
		--listen "$ADDR" --data-dir "$OUT/data" >"$OUT/aspd.log" 2>&1 &
	PID=$!
	for _ in $(seq 100); do curl -fs "http://$ADDR/readyz" >/dev/null && break; sleep 0.1; done
	if [ "$1" = without ] && [ -n "$ALTER" ]; then
		psql "$PG/$DB" -qc "$ALTER"
	elif [ "$1" = without ]; then
		local ix
		for ix in $DROP; do psql "$PG/$DB" -qc "DROP INDEX $ix"; done
	fi
	# The backends' CPU over aspbench's measured window only (its "measure"
	# phase, announced on stderr), not the set-up of agents and sessions;
	# the messages of the window are counted by the events they wrote.
	local t0= m0= line
	while IFS= read -r line; do
		case $line in
		*" measure ..."*) t0=$(ticks); m0=$(messages); stmt_reset ;;
		*" measure done"*)
			local t1 m1
			t1=$(ticks); m1=$(messages)
			awk -v t=$((t1 - t0)) -v n=$((m1 - m0)) -v hz="$(getconf CLK_TCK)" -v w="$1" \
				'BEGIN { printf "%-8s indexes: %7d messages in the window, PostgreSQL %.1f us CPU per message\n", w, n, t / hz * 1e6 / n }'
			stmt_report $((m1 - m0)) ;;
		esac
	done < <("$OUT/aspbench" --server "http://$ADDR" chat --sessions 300 --participants 3 --duration 5s 2>&1 >/dev/null)
}

# With pg_stat_statements loaded (docs/benchmarks.md), also the statements'
# execution time and the WAL per message over the window: a steadier
# measure than the backends' CPU on a busy machine.
STMTS=
if psql "$PG/postgres" -Atc "SHOW shared_preload_libraries" | grep -q pg_stat_statements; then
	STMTS=1
	psql "$PG/postgres" -qc "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"
fi
stmt_reset() {
	[ -n "$STMTS" ] || return 0
	psql "$PG/postgres" -qAtc "SELECT pg_stat_statements_reset()" -c "SELECT pg_stat_reset_shared('wal')" >/dev/null
}
stmt_report() { # $1: messages in the window
	[ -n "$STMTS" ] || return 0
	psql "$PG/postgres" -qAt -v n="$1" -v db="$DB" <<'SQL'
SELECT format('         statements: %s us per message executing, of which the appends %s us; WAL %s bytes per message',
              round((sum(total_exec_time) * 1000 / :n)::numeric, 1),
              round((sum(total_exec_time) FILTER (WHERE query LIKE '%INSERT INTO events%') * 1000 / :n)::numeric, 1),
              (SELECT round(wal_bytes / :n) FROM pg_stat_wal))
  FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = :'db');
SQL
}

messages() { psql "$PG/$DB" -Atc "SELECT count(*) FROM events WHERE type = 'session.message'"; }

for _ in $(seq "$ROUNDS"); do round with; round without; done
