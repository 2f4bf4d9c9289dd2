#!/usr/bin/env bash
# The plans behind docs/search.md's figures for a participant's events and
# the time windows, on a grown store (bench/grow.sh fill): EXPLAIN
# (ANALYZE, BUFFERS) of each alternative, printed as its execution time and
# buffers. Read-only; each statement is one query on loopback PostgreSQL.
#
#   bench/search-explain.sh aspd_grow
#
# 1. A participant's every event, for a phrase with no hit among them:
#    read session by session (aspd's step), in the heap's order (a bitmap
#    scan), and with the search index's bitmap ANDed in (no OFFSET 0).
# 2. A handle with a participant: the words' hits ANDed with the sessions'
#    events (aspd's bitmap step), and the same planned freely.
# 3. For each minute of the 3 with the most events (the smallest time
#    window, 2^16 ms): its events, the table blocks they lie in, and the
#    phrase's ILIKE and words within that window's key.
set -euo pipefail
DB=${1:?usage: $0 DB}
PG=${ASPD_BENCH_PG:-postgres://postgres@127.0.0.1:5432}
P=${PARTICIPANT:-@grow.a7}
explain() { # $1: label, $2: settings, $3: query
	printf '%-58s %s\n' "$1" "$(psql "$PG/$DB" -Atq -c "BEGIN" -c "$2" -c "EXPLAIN (ANALYZE, BUFFERS) $3" -c "ROLLBACK" |
		awk '/^ *Buffers:/ && !b {b=$0} /Execution Time/ {t=$0} END {gsub(/^ +/, "", b); print t "   " b}')"
}
sessions="ARRAY(SELECT p.session_id FROM participants p WHERE p.handle = '$P')"
phrase="(e.search_words @@ websearch_to_tsquery('simple', '\"widget release\"') OR e.search_text ILIKE '%widget release%')"
cols="session_id, sequence, created_at, type, subject, search_text, search_words"
off="SELECT set_config('enable_seqscan', 'off', true)"
page="ORDER BY e.created_at + 0 DESC, e.session_id DESC, e.sequence DESC LIMIT 21"
explain "1. phrase, participant: session by session" "$off" \
	"SELECT e.session_id FROM (SELECT $cols FROM events WHERE session_id = ANY($sessions) OFFSET 0) e WHERE $phrase $page"
explain "1. phrase, participant: in the heap's order" "$off, set_config('enable_indexscan', 'off', true)" \
	"SELECT e.session_id FROM (SELECT $cols FROM events WHERE session_id = ANY($sessions) OFFSET 0) e WHERE $phrase $page"
explain "1. phrase, participant: no OFFSET 0, in the heap's order" "$off, set_config('enable_indexscan', 'off', true)" \
	"SELECT e.session_id FROM events e WHERE session_id = ANY($sessions) AND $phrase $page"
handle="(e.search_words @@ websearch_to_tsquery('simple', '\"acme agent42\"') OR (e.search_words @@ to_tsquery('simple', 'acme & agent42:*') AND (e.search_text || '') ILIKE '%@acme.agent42%'))"
explain "2. handle, participant: AND (aspd's bitmap step)" "$off, set_config('enable_indexscan', 'off', true)" \
	"SELECT e.session_id FROM events e WHERE $handle AND e.session_id = ANY($sessions) $page"
explain "2. handle, participant: planned freely" "$off" \
	"SELECT e.session_id FROM events e WHERE $handle AND e.session_id = ANY($sessions) $page"
psql "$PG/$DB" -Atq -F ' ' -c "SELECT created_at >> 16, count(*), count(DISTINCT (ctid::text::point)[0])
	FROM events GROUP BY 1 ORDER BY 2 DESC LIMIT 3" | while read -r key n blocks; do
	echo "3. minute $key: $n events in $blocks table blocks"
	w="aspd_search_keys(e.created_at) @> ARRAY[${key}::bigint]"
	explain "   the phrase's ILIKE in its window" "$off" "SELECT count(*) FROM events e WHERE e.search_text ILIKE '%widget release%' AND $w"
	explain "   the phrase's words in its window" "$off" "SELECT count(*) FROM events e WHERE e.search_words @@ websearch_to_tsquery('simple', '\"widget release\"') AND $w"
done
