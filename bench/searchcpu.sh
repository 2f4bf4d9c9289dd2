#!/usr/bin/env bash
# PostgreSQL's CPU per accepted message with and without the search
# indexes (issue 21 item 4: is indexing worth moving off the write
# transaction?). Alternating rounds of a short closed-loop chat on a fresh
# database, once with the migration's indexes, once with the two GIN
# indexes dropped (search_text and search_words are still written: what
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
	[ "$1" = without ] && psql "$PG/$DB" -qc "DROP INDEX events_search_words; DROP INDEX events_search_trigram"
	local t0 after n
	t0=$(ticks)
	"$OUT/aspbench" --server "http://$ADDR" --json chat --sessions 300 --participants 3 --duration 5s >"$OUT/chat.json"
	after=$(ticks)
	n=$(( $(psql "$PG/$DB" -Atc "SELECT count(*) FROM events WHERE type = 'session.message'") ))
	awk -v t=$((after - t0)) -v n="$n" -v hz="$(getconf CLK_TCK)" -v w="$1" -v r="$(jq .figures.accepted_msgs_per_s "$OUT/chat.json")" \
		'BEGIN { printf "%-8s indexes: %7d messages, %6.1f msg/s, PostgreSQL %.1f us CPU per message\n", w, n, r, t / hz * 1e6 / n }'
}

for _ in $(seq "$ROUNDS"); do round with; round without; done
