#!/usr/bin/env bash
# The growth benchmark (docs/benchmarks.md "Growth: 1M and 10M events";
# issue 21 item 7): does aspd stay as fast on a large log as on an empty
# one? It fills a PostgreSQL database of its own (never the test
# database) through SQL that writes the rows aspd writes (bench/grow.sql),
# then starts aspd on it (loopback only) and measures send throughput
# (aspbench chat, short), the replay of 10,000 missed events, a session's
# events page, the operator's session list and search, one query shape at
# a time, and prints the disk bytes of the events table.
#
#   bench/grow.sh                      # empty, 1M, 10M (about an hour on 2 cores)
#   bench/grow.sh measure aspd_grow    # measure an existing database
#   bench/grow.sh fill aspd_grow 0 1000000      # create (if need be) and grow it
#   bench/grow.sh disk aspd_grow
#   bench/grow.sh migrate aspd_grow    # run the pending migrations (a new build on an older store)
#   bench/grow.sh fill-sqlite aspd_grow /tmp/grow-sqlite   # an embedded store with its events
#   SEARCH_ONLY=1 bench/grow.sh measure /tmp/grow-sqlite  # reads and search only
#   SIZES="1000000" bench/grow.sh      # only 1M
#
# Bounded: the fill is one INSERT ... SELECT (about 4 minutes per million
# events here, index builds included), every measurement stops by itself.
# Drop the databases afterwards if disk matters (10M events: about 12 GB):
#   psql postgres://postgres@127.0.0.1:5432/postgres -c 'DROP DATABASE aspd_grow'
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PG=${ASPD_BENCH_PG:-postgres://postgres@127.0.0.1:5432}
ADDR=127.0.0.1:8092
OUT=${OUT:-/tmp/aspd-grow}
export ASPBENCH_ADMIN_TOKEN=bench-admin-token-0123456789
mkdir -p "$OUT"
# ASPD_BIN measures another build (say, main's) on the same databases.
ASPD_BIN=${ASPD_BIN:-$OUT/aspd}
[ "$ASPD_BIN" = "$OUT/aspd" ] && go build -o "$OUT/aspd" ./cmd/aspd
go build -o "$OUT/aspbench" ./cmd/aspbench

PID=
start_aspd() { # $1: database, or the directory of an embedded (SQLite) store
	stop_aspd
	local store=(--database-url "$PG/$1?sslmode=disable" --data-dir "$OUT/data-$1")
	[[ $1 == */* ]] && store=(--data-dir "$1")
	ASPD_ADMIN_TOKEN=$ASPBENCH_ADMIN_TOKEN "$ASPD_BIN" "${store[@]}" \
		--listen "$ADDR" >"$OUT/aspd-${1//\//_}.log" 2>&1 &
	PID=$!
	# Up to 10 minutes: a store of millions of events may have a migration
	# to run first (00011 builds the search index: 260 s at 10M events).
	for _ in $(seq 6000); do
		curl -fs "http://$ADDR/readyz" >/dev/null && return
		kill -0 "$PID" 2>/dev/null || break
		sleep 0.1
	done
	echo "aspd did not start" >&2; exit 1
}
stop_aspd() {
	[ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null || true; PID=
}
trap stop_aspd EXIT

# create DB: a new database with aspd's schema (aspd migrates it).
create() {
	psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $1" -c "CREATE DATABASE $1" >/dev/null
	start_aspd "$1"; stop_aspd
}

# fill DB FROM TO: add the events FROM .. TO-1 (multiples of 10,000).
fill() {
	psql "$PG/postgres" -Atc "SELECT 1 FROM pg_database WHERE datname = '$1'" | grep -q 1 || create "$1"
	local t0=$SECONDS
	psql "$PG/$1" -1 -q -v from="$2" -v to="$3" -f bench/grow.sql
	# As autovacuum would soon: the visibility map lets index-only scans
	# skip the rows (a participant's search reads its sessions' newest
	# keys so, store/searchparticipant.go). Outside grow.sql's transaction.
	psql "$PG/$1" -q -c 'VACUUM (ANALYZE) events'
	echo "filled $1 with events $2..$3 in $((SECONDS - t0)) s"
}

# fill_sqlite DB DIR: an embedded store in DIR with DB's grown sessions,
# participants and events (its FTS5 indexes filled by the migration's
# triggers, as aspd's own INSERTs fill them).
fill_sqlite() {
	rm -rf "$2"; mkdir -p "$2"
	start_aspd "$2"; stop_aspd
	local t0=$SECONDS
	psql "$PG/$1" -q -c "\\copy (SELECT id, topic, state, created_by, created_at FROM sessions WHERE id LIKE 'sess\\_0%') TO '$OUT/se.csv' CSV" \
		-c "\\copy (SELECT session_id, handle, status, visible_through, last_change_seq, invited_at, joined_at FROM participants WHERE session_id LIKE 'sess\\_0%') TO '$OUT/pa.csv' CSV" \
		-c "\\copy (SELECT session_id, sequence, event_id, type, subject, audience, created_at, body, search_text FROM events WHERE session_id LIKE 'sess\\_0%' ORDER BY created_at) TO '$OUT/ev.csv' CSV"
	sqlite3 "$2/aspd.db" "CREATE TEMP TABLE se(id, topic, state, created_by, created_at);
		CREATE TEMP TABLE pa(session_id, handle, status, visible_through, last_change_seq, invited_at, joined_at);
		CREATE TEMP TABLE ev(session_id, sequence, event_id, type, subject, audience, created_at, body, search_text);" \
		".mode csv" ".import $OUT/se.csv se" ".import $OUT/pa.csv pa" ".import $OUT/ev.csv ev" \
		"BEGIN;
		INSERT INTO sessions (id, topic, state, created_by, created_at) SELECT id, topic, state, created_by, CAST(created_at AS INTEGER) FROM se;
		INSERT INTO participants (session_id, handle, status, visible_through, last_change_seq, invited_at, joined_at)
			SELECT session_id, handle, status, CAST(visible_through AS INTEGER), CAST(last_change_seq AS INTEGER),
				CAST(NULLIF(invited_at, '') AS INTEGER), CAST(joined_at AS INTEGER) FROM pa;
		INSERT INTO events SELECT session_id, CAST(sequence AS INTEGER), event_id, type, subject, audience, CAST(created_at AS INTEGER), body, search_text FROM ev;
		COMMIT; ANALYZE;"
	rm -f "$OUT/se.csv" "$OUT/pa.csv" "$OUT/ev.csv"
	echo "filled $2 from $1 in $((SECONDS - t0)) s: $(du -sb "$2/aspd.db" | cut -f1) bytes"
}

disk() {
	psql "$PG/$1" -Atc "SELECT 'events: ' || count(*) || ' rows, ' || pg_total_relation_size('events') || ' bytes (table ' ||
		pg_relation_size('events') || ', toast ' || pg_relation_size(reltoastrelid) || ')' FROM events, pg_class WHERE relname = 'events' GROUP BY reltoastrelid" \
		-c "SELECT indexrelname || ': ' || pg_relation_size(indexrelid) || ' bytes' FROM pg_stat_user_indexes WHERE relname = 'events' ORDER BY 1"
}

# best SECS URL: the best of 5 times (ms) of an operator GET.
best() {
	local b=
	for _ in 1 2 3 4 5; do
		t=$(curl -fs -o /dev/null -w '%{time_total}' -H "Authorization: Bearer $ASPBENCH_ADMIN_TOKEN" "$1") || { echo "FAILED"; return; }
		b=$(awk -v a="$t" -v b="${b:-1e9}" 'BEGIN { print (a < b ? a : b) }')
	done
	awk -v t="$b" 'BEGIN { printf "%.1f\n", t * 1000 }'
}

# The query shapes of docs/search.md, each with its name.
SHAPES=(
	'phrase|"widget release"'
	'rare term|quokka'
	'no hits|kubernetes'
	'common word|the'
	'two words|deploy invoice'
	'or|invoice or refund'
	'exclusion|widget -broken'
	'partial word|wid'
	'rare partial word|uokk'
	'e-mail|user42@example.com'
	'URL|tickets.example.org/issue/4242'
	'handle|@acme.agent42'
	'short word|go'
)

measure() {
	local db=$1
	start_aspd "$db"
	echo "=== $db"
	[ -n "${SEARCH_ONLY:-}" ] || measure_sends
	measure_reads "$db"
	stop_aspd
}

measure_sends() {
	"$OUT/aspbench" --server "http://$ADDR" --pid "$PID" --json chat --sessions 300 --participants 3 --duration 5s |
		jq -c "{chat_accepted_msgs_per_s: .figures.accepted_msgs_per_s, server_cpu_us_per_msg: .figures.server_cpu_us_per_msg}" || echo "chat FAILED"
	"$OUT/aspbench" --server "http://$ADDR" --pid "$PID" --json replay --sessions 100 --events 10000 |
		jq -c "{replay_ms: .figures.replay_ms}" || echo "replay FAILED"
}

measure_reads() {
	local db=$1
	local base="http://$ADDR/admin/v1"
	# The oldest grown session (when there is one), else any.
	local sid
	if [[ $db == */* ]]; then
		sid=$(sqlite3 "$db/aspd.db" "SELECT id FROM sessions ORDER BY created_at LIMIT 1")
	else
		sid=$(psql "$PG/$db" -Atc "SELECT id FROM sessions ORDER BY created_at LIMIT 1")
	fi
	echo "events page (oldest session, 100 events): $(best "$base/sessions/$sid/events?limit=100") ms"
	echo "session list (newest 50): $(best "$base/sessions?limit=50") ms"
	echo "session list (participant @grow.a7): $(best "$base/sessions?limit=50&participant=@grow.a7") ms"
	local shape name q
	for shape in "${SHAPES[@]}"; do
		name=${shape%%|*} q=${shape#*|}
		enc=$(jq -rn --arg q "$q" '$q|@uri')
		printf 'search %-18s %-36s %8s ms   participant: %8s ms   session: %8s ms   last day: %8s ms\n' "$name" "$q" \
			"$(best "$base/search?q=$enc")" \
			"$(best "$base/search?q=$enc&participant=@grow.a7")" \
			"$(best "$base/search?q=$enc&session=$sid")" \
			"$(best "$base/search?q=$enc&since=$(($(date +%s%3N) - 86400000))")"
	done
}

case ${1:-all} in
fill) fill "$2" "$3" "$4" ;;
fill-sqlite) fill_sqlite "$2" "$3" ;;
measure) measure "$2" ;;
disk) disk "$2" ;;
create) create "$2" ;;
migrate) start_aspd "$2"; stop_aspd ;; # run pending migrations (aspd migrates when it starts)
all)
	create aspd_grow
	measure aspd_grow
	from=0
	for n in ${SIZES:-1000000 10000000}; do
		fill aspd_grow "$from" "$n"
		from=$n
		measure aspd_grow
		disk aspd_grow
	done ;;
*) echo "usage: $0 [all | fill DB FROM TO | fill-sqlite DB DIR | measure DB|DIR | disk DB | create DB | migrate DB]" >&2; exit 2 ;;
esac
