#!/usr/bin/env bash
# Reproduces docs/benchmarks.md on this machine: builds aspd and aspbench,
# starts aspd on a fresh local PostgreSQL database (loopback only), runs each
# scenario and the pgbench ceiling, and prints every result. Bounded: each
# scenario stops by itself (see the flags), the whole run takes 3-5 minutes.
#
#   bench/run.sh            # all scenarios
#   bench/run.sh chat       # one of: chat chat-rate fanout replay idle pgbench pgbench-rate purge purge-sqlite
#   bench/run.sh chat-2nodes chat-rate-2nodes   # two aspd nodes on one database (docs/cluster.md)
#   bench/run.sh timeline   # chat-rate, then each message over 10 ms put beside aspd's GC cycles and
#                           # PostgreSQL's slow statements (aspbench timeline; docs/benchmarks.md)
#   ASPD_FLAGS="--group-commit=false" bench/run.sh chat-rate   # compare aspd settings
#   ASPD_ENV="GOGC=400" bench/run.sh chat-rate   # aspd's environment alone (not aspbench's)
#   ASPD_BENCH_ADDR=127.0.0.1:8190 ASPD_BENCH_DB=aspd_bench_me bench/run.sh chat   # beside another run
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PG=${ASPD_BENCH_PG:-postgres://postgres@127.0.0.1:5432}
# Two runs on one machine must not share the port or the database (the
# second one's load would go to the first one's aspd).
DB=${ASPD_BENCH_DB:-aspd_bench}
ADDR=${ASPD_BENCH_ADDR:-127.0.0.1:8090}
OUT=${OUT:-/tmp/aspd-bench}
export ASPBENCH_ADMIN_TOKEN=bench-admin-token-0123456789
mkdir -p "$OUT"
go build -o "$OUT/aspd" ./cmd/aspd
# ASPBENCH lets bench/compare.sh drive both builds with one load generator.
ASPBENCH=${ASPBENCH:-$OUT/aspbench}
[ "$ASPBENCH" = "$OUT/aspbench" ] && go build -o "$OUT/aspbench" ./cmd/aspbench

PID=
PID2=
# fresh_db: no aspd of ours left, none of another run on ADDR, and an empty
# database.
fresh_db() {
	stop_aspd
	if curl -fs "http://$ADDR/readyz" >/dev/null 2>&1; then
		echo "another aspd already answers on $ADDR: set ASPD_BENCH_ADDR (and ASPD_BENCH_DB)" >&2; exit 1
	fi
	psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB" >/dev/null
}
# wait_ready ADDR: waits up to 5 s for the aspd at ADDR to be ready.
wait_ready() {
	for _ in $(seq 50); do curl -fs "http://$1/readyz" >/dev/null && return; sleep 0.1; done
	echo "aspd on $1 did not start" >&2; exit 1
}
start_aspd() {
	fresh_db
	ASPD_ADMIN_TOKEN=$ASPBENCH_ADMIN_TOKEN env ${ASPD_ENV:-} "$OUT/aspd" --database-url "$PG/$DB?sslmode=disable" \
		--listen "$ADDR" --data-dir "$OUT/data" ${ASPD_FLAGS:-} >"$OUT/aspd.log" 2>&1 &
	PID=$!
	wait_ready "$ADDR"
}
stop_aspd() {
	[ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null || true; PID=
	[ -n "$PID2" ] && kill "$PID2" 2>/dev/null && wait "$PID2" 2>/dev/null || true; PID2=
}
trap stop_aspd EXIT
# start_aspd_timeline: start_aspd with the PostgreSQL log of slow statements
# on for the database alone (log_min_duration_statement = 2 ms, no
# parameters; both go with the database at the next DROP) and aspd at
# GODEBUG=gctrace=1, its output stamped line by line with the wall time
# (aspbench stamp); PID stays aspd's own. PGLOG_OK=1 when the setting took.
PGLOG_OK=
start_aspd_timeline() {
	fresh_db
	local err
	PGLOG_OK=
	if err=$(psql "$PG/postgres" -qc "ALTER DATABASE $DB SET log_min_duration_statement = 2" 2>&1); then
		PGLOG_OK=1
		# Without the statements' parameters: the message path's arrays would
		# make it megabytes, written by PostgreSQL during the measurement.
		psql "$PG/postgres" -qc "ALTER DATABASE $DB SET log_parameter_max_length = 0" >/dev/null 2>&1 ||
			echo "timeline: could not turn off the logging of parameters on $DB" >&2
	else
		echo "timeline: cannot set log_min_duration_statement on $DB (it needs a PostgreSQL superuser): $err; going on without PostgreSQL's log" >&2
	fi
	# GODEBUG: gctrace=1 added to any GODEBUG of ASPD_ENV or of this shell.
	local w envs=() gd="GODEBUG=${GODEBUG:+$GODEBUG,}gctrace=1"
	for w in ${ASPD_ENV:-}; do
		case $w in GODEBUG=*) gd="$w,gctrace=1" ;; *) envs+=("$w") ;; esac
	done
	ASPD_ADMIN_TOKEN=$ASPBENCH_ADMIN_TOKEN env "${envs[@]}" "$gd" "$OUT/aspd" --database-url "$PG/$DB?sslmode=disable" \
		--listen "$ADDR" --data-dir "$OUT/data" ${ASPD_FLAGS:-} > >("$ASPBENCH" stamp >"$OUT/aspd.log") 2>&1 &
	PID=$!
	wait_ready "$ADDR"
}
# timeline: chat-rate's load with --timeline, then aspbench timeline on the
# messages, aspd's stamped log and the part of PostgreSQL's log written
# meanwhile.
timeline() {
	local pglog=${ASPD_BENCH_PGLOG:-/var/log/postgresql/postgresql-15-main.log} off=
	start_aspd_timeline
	if [ -n "$PGLOG_OK" ] && [ -r "$pglog" ]; then
		off=$(stat -c %s "$pglog")
	elif [ -n "$PGLOG_OK" ]; then
		echo "timeline: cannot read PostgreSQL's log $pglog (set ASPD_BENCH_PGLOG); going on without it" >&2
	fi
	local rc=0 pgarg=()
	# A failed run (exit 1) still wrote its timeline: look at it, then fail.
	bench chat --sessions 300 --participants 3 --rate 2000 --duration 10s --timeline "$OUT/timeline.jsonl" || rc=$?
	if [ -n "$off" ]; then
		tail -c +"$((off + 1))" "$pglog" >"$OUT/pg.log"
		pgarg=(--pg-log "$OUT/pg.log" --pg-db "$DB")
	fi
	echo "--- timeline ($OUT/timeline.jsonl, $OUT/aspd.log${off:+, $OUT/pg.log})"
	"$ASPBENCH" timeline --messages "$OUT/timeline.jsonl" --aspd-log "$OUT/aspd.log" "${pgarg[@]}" --slow "${TIMELINE_SLOW:-10ms}"
	return "$rc"
}
# Two nodes: start_aspd, then a second aspd on the same database at ADDR2.
ADDR2=${ASPD_BENCH_ADDR2:-127.0.0.1:8091}
start_cluster() {
	start_aspd
	ASPD_ADMIN_TOKEN=$ASPBENCH_ADMIN_TOKEN env ${ASPD_ENV:-} "$OUT/aspd" --database-url "$PG/$DB?sslmode=disable" \
		--listen "$ADDR2" --data-dir "$OUT/data2" ${ASPD_FLAGS:-} >"$OUT/aspd2.log" 2>&1 &
	PID2=$!
	wait_ready "$ADDR2"
}
bench2() { # agents round-robin over both nodes; --pid reports the first node's process
	"$ASPBENCH" --server "http://$ADDR,http://$ADDR2" --pid "$PID" "$@"
	local a
	for a in "$ADDR" "$ADDR2"; do # each node's one-round-trip appends (store/fastappend.go)
		curl -fs -H "Authorization: Bearer $ASPBENCH_ADMIN_TOKEN" "http://$a/metrics" |
			grep -E '^aspd_store_guessed_appends_total\{' | sed "s/^/$a /" || true
	done
}
# syscw: aspd's write system calls so far (/proc/PID/io): to its clients'
# sockets, to the database and to its log.
syscw() { awk '/^syscw:/ {print $2}' "/proc/$PID/io" 2>/dev/null || echo 0; }
# cpu_ticks / cpu_busy: how busy the whole machine was (every core, every
# process) between two points, from /proc/stat.
cpu_ticks() { awk '/^cpu / {print $2+$3+$4+$7+$8+$9, $5+$6}' /proc/stat; }
# pg_ticks / pg_cpu: the CPU time (utime + stime, in clock ticks) of the
# local PostgreSQL server: the postmaster, its live children and, through
# the postmaster's cutime and cstime, the backends that have exited. Empty
# when the server's processes cannot be read (another host, another user's
# /proc), and pg_cpu then says nothing.
pg_ticks() {
	local pm
	pm=$(awk '/^PPid:/ {print $2}' "/proc/$(psql "$PG/postgres" -qAtc "SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'" 2>/dev/null)/status" 2>/dev/null) || return 0
	[ -r "/proc/$pm/stat" ] || return 0
	{ awk '{print $14 + $15 + $16 + $17}' "/proc/$pm/stat"
	  for c in $(cat /proc/"$pm"/task/*/children 2>/dev/null); do awk '{print $14 + $15}' "/proc/$c/stat" 2>/dev/null; done
	} | awk '{t += $1} END {print t}'
}
# pg_cpu T0 TX [SECONDS]: PostgreSQL's cores and CPU per transaction since
# pg_ticks gave T0, for TX transactions over SECONDS of wall time.
pg_cpu() {
	local t1; t1=$(pg_ticks)
	[ -n "$1" ] && [ -n "$t1" ] || return 0
	awk -v t="$((t1 - $1))" -v n="$2" -v s="${3:-10}" -v hz="$(getconf CLK_TCK)" \
		'BEGIN {printf "postgres cpu: %.2f cores, %.0f us per transaction (%d transactions)\n", t / hz / s, t / hz * 1e6 / n, n}'
}
cpu_busy() {
	local b0 i0 b1 i1
	read -r b0 i0 <<<"$1"
	read -r b1 i1 <<<"$(cpu_ticks)"
	awk -v b="$((b1 - b0))" -v i="$((i1 - i0))" 'BEGIN {printf "machine busy: %.0f%% of its cores\n", 100 * b / (b + i)}'
}
# PGSTAT=1: PostgreSQL's statements over the run (pg_stat_statements, which
# must be in shared_preload_libraries; docs/benchmarks.md says how), to
# compare what two builds ask of the database per message.
pgstat_reset() {
	[ -n "${PGSTAT:-}" ] || return 0
	psql "$PG/postgres" -qAtc "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" \
		-c "SELECT pg_stat_statements_reset()" -c "SELECT pg_stat_reset_shared('wal')" >/dev/null
}
pgstat_report() {
	[ -n "${PGSTAT:-}" ] || return 0
	psql "$PG/postgres" -qAt -v db="$DB" -v top="${PGSTAT_TOP:-12}" <<'SQL'
SELECT 'pgstat total: calls ' || sum(calls) || ' exec_ms ' || round(sum(total_exec_time)) ||
       ' wal_bytes ' || sum(wal_bytes) || ' wal_fpi ' || sum(wal_fpi) ||
       ' blks_hit ' || sum(shared_blks_hit) || ' blks_dirtied ' || sum(shared_blks_dirtied)
  FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = :'db');
SELECT 'pgstat wal: records ' || wal_records || ' fpi ' || wal_fpi || ' bytes ' || wal_bytes ||
       ' writes ' || wal_write || ' syncs ' || wal_sync FROM pg_stat_wal;
-- Grouped by the statement's start: a multi-row VALUES list of each
-- length is a statement of its own to pg_stat_statements.
SELECT 'pgstat stmt: calls ' || sum(calls) || ' exec_ms ' || round(sum(total_exec_time)) || ' rows ' || sum(rows) ||
       ' max_ms ' || round(max(max_exec_time)::numeric, 1) || ' wal_bytes ' || sum(wal_bytes) || ' blks_hit ' || sum(shared_blks_hit) || ' | ' || q
  FROM (SELECT *, left(regexp_replace(query, '\s+', ' ', 'g'), 110) AS q FROM pg_stat_statements
         WHERE dbid = (SELECT oid FROM pg_database WHERE datname = :'db')) s
 GROUP BY q ORDER BY sum(total_exec_time) DESC LIMIT :top;
SQL
}
bench() {
	local w0; w0=$(syscw)
	pgstat_reset
	"$ASPBENCH" --server "http://$ADDR" --pid "$PID" "$@"
	pgstat_report
	# Over the whole run (set-up and warm-up too), like the delivery counters
	# below: divide by aspd_events_delivered_total for writes per event.
	echo "aspd_write_syscalls $(($(syscw) - w0))"
	# Delivery counters of the run: pings that confirmed, events written.
	curl -fs -H "Authorization: Bearer $ASPBENCH_ADMIN_TOKEN" "http://$ADDR/metrics" |
		grep -E '^aspd_(store_guessed_appends_total\{[^}]*\}|events_delivered_total|delivery_confirms_total|delivery_acks_total|slow_consumers_total|cluster_notify_sent_total|cluster_notify_skipped_total) ' || true
}

# purge_under_load SEED-COMMAND...: seeds the ended 100,000-event session
# (due 45s later), runs 500 msg/s before, waits, runs it again across the
# purge, and prints the purge's log lines to place it in the window.
purge_under_load() {
	local t0 wait_s
	t0=$(date +%s)
	"$@"
	echo "--- before the purge ($(date -u +%T))"
	bench chat --sessions 300 --participants 3 --rate 500 --duration 15s
	wait_s=$((t0 + 30 - $(date +%s))); [ "$wait_s" -gt 0 ] && sleep "$wait_s"
	echo "--- during the purge ($(date -u +%T); the session is due 45s after seeding, checked every 1s)"
	bench chat --sessions 300 --participants 3 --rate 500 --duration 45s
	echo "--- done ($(date -u +%T))"
	grep -h "retention" "$OUT/aspd.log" || true
}

run() {
	case $1 in
	chat)      start_aspd; bench chat --sessions 300 --participants 3 --duration 10s ;;
	chat-rate) start_aspd; bench chat --sessions 300 --participants 3 --rate 2000 --duration 10s ;;
	fanout)    start_aspd; bench --timeout 10m fanout --participants 1000 --rate 10 --messages 100 ;;
	replay)    start_aspd; bench replay --sessions 100 --events 10000 ;;
	chat-2nodes)      start_cluster; bench2 chat --sessions 300 --participants 3 --duration 10s ;;
	chat-rate-2nodes) start_cluster; bench2 chat --sessions 300 --participants 3 --rate 2000 --duration 10s ;;
	timeline)  timeline ;;
	idle)      start_aspd; bench --timeout 5m idle --connections "${IDLE_CONNECTIONS:-19000}" --agents 100 --duration 5s ;;
	purge) # 500 msg/s before and during a retention purge of 100,000 events
		ASPD_FLAGS="${ASPD_FLAGS:-} --retention-closed-sessions 1h --retention-interval 1s" start_aspd
		purge_under_load psql "$PG/$DB" -q -v events=100000 -f bench/purge-seed.sql ;;
	purge-sqlite) # the same on the embedded store, whose one writer a purge shares with every send
		stop_aspd; rm -rf "$OUT/data-sqlite"
		ASPD_ADMIN_TOKEN=$ASPBENCH_ADMIN_TOKEN env ${ASPD_ENV:-} "$OUT/aspd" --data-dir "$OUT/data-sqlite" --listen "$ADDR" \
			--retention-closed-sessions 1h --retention-interval 1s ${ASPD_FLAGS:-} >"$OUT/aspd.log" 2>&1 &
		PID=$!
		wait_ready "$ADDR"
		purge_under_load sqlite3 "$OUT/data-sqlite/aspd.db" ".timeout 10000" ".read bench/purge-seed-sqlite.sql" ;;
	pgbench)
		stop_aspd
		psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB" >/dev/null
		psql "$PG/$DB" -q -f bench/pgbench-setup.sql
		local busy0 pg0 out; busy0=$(cpu_ticks); pg0=$(pg_ticks)
		out=$(pgbench -n -c 32 -j 2 -T 10 -f bench/pgbench-insert.sql "$PG/$DB")
		echo "$out"
		cpu_busy "$busy0"
		pg_cpu "$pg0" "$(awk '/^number of transactions actually processed/ {print $NF}' <<<"$out" | cut -d/ -f1)" ;;
	pgbench-rate) # PostgreSQL alone at chat-rate's 2,000 commits/s: its own latency tail
		stop_aspd
		psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB" >/dev/null
		psql "$PG/$DB" -q -f bench/pgbench-setup.sql
		rm -rf "$OUT/pgbench-log"; mkdir -p "$OUT/pgbench-log"
		local pg0; pg0=$(pg_ticks)
		(cd "$OUT/pgbench-log" && pgbench -n -c 8 -j 2 -R 2000 -T 10 -l -f "$OLDPWD/bench/pgbench-insert.sql" "$PG/$DB") | grep -E '^(tps|latency)'
		pg_cpu "$pg0" "$(cat "$OUT"/pgbench-log/pgbench_log.* | wc -l)"
		# pgbench's per-transaction log: the third field is the latency in
		# µs (from the scheduled start, as -R measures), the fifth the second.
		cat "$OUT"/pgbench-log/pgbench_log.* | awk '{print $3 / 1000}' | sort -n |
			awk '{a[NR] = $1} END {printf "commit latency (ms): n %d p50 %.3f p99 %.3f p99.9 %.3f max %.3f\n", NR, a[int(NR*0.5)], a[int(NR*0.99)], a[int(NR*0.999)], a[NR]}'
		cat "$OUT"/pgbench-log/pgbench_log.* | awk 'NR == 1 || $5 < t0 {t0 = $5} $3 > 10000 {n[$5]++; if ($3 > m[$5]) m[$5] = $3}
			END {for (s in n) printf "  second %2d: %d commits over 10 ms, the longest %.1f ms\n", s - t0, n[s], m[s] / 1000}' | sort -n -k2 ;;
	*) echo "unknown scenario $1" >&2; exit 2 ;;
	esac
}
if [ $# -eq 0 ]; then set -- chat chat-rate fanout replay idle pgbench; fi
for s in "$@"; do echo "=== $s"; run "$s"; done
