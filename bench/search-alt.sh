#!/usr/bin/env bash
# Search before and after migration 00011 (docs/benchmarks.md, "Search at
# 10M: time windows"), alternating, on one grown PostgreSQL database:
# each round puts back the two search indexes of before 00011 and
# measures an older build on them, then lets this tree's aspd migrate
# (00011 builds the search index with its time keys; its time is printed)
# and measures it. Reads and search only (bench/grow.sh SEARCH_ONLY=1).
#
#   bench/grow.sh fill aspd_gexp 0 1000000
#   git worktree add /tmp/old 3a4b1c7 && (cd /tmp/old && go build -o /tmp/aspd-old ./cmd/aspd)
#   ROUNDS=2 bench/search-alt.sh aspd_gexp /tmp/aspd-old
#
# Loopback only; every step stops by itself. Never point it at a database
# that matters: it drops and rebuilds its search indexes.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[ $# -eq 2 ] || { echo "usage: $0 DATABASE OLD_ASPD_BINARY" >&2; exit 2; }
PG=${ASPD_BENCH_PG:-postgres://postgres@127.0.0.1:5432}
DB=$PG/$1
OLD=$2
OUT=${OUT:-/tmp/aspd-search-alt}
mkdir -p "$OUT"
go build -o "$OUT/aspd" ./cmd/aspd
for r in $(seq "${ROUNDS:-2}"); do
	psql -q "$DB" -c "DROP INDEX IF EXISTS events_search" -c "DROP FUNCTION IF EXISTS aspd_search_keys(bigint)" \
		-c "CREATE INDEX IF NOT EXISTS events_search_words ON events USING GIN (search_words)" \
		-c "CREATE INDEX IF NOT EXISTS events_search_trigram ON events USING GIN (search_text gin_trgm_ops)" \
		-c "DELETE FROM goose_db_version WHERE version_id >= 11" -c "ANALYZE events"
	echo "=== round $r: before ($OLD)"
	SEARCH_ONLY=1 ASPD_BIN=$OLD OUT=$OUT bash bench/grow.sh measure "$1" | grep "^search"
	t0=$(date +%s%N)
	SEARCH_ONLY=1 ASPD_BIN=$OUT/aspd OUT=$OUT bash bench/grow.sh migrate "$1"
	echo "migration 00011 and start: $((($(date +%s%N) - t0) / 1000000)) ms"
	psql -q "$DB" -c "ANALYZE events"
	echo "=== round $r: after (this tree)"
	SEARCH_ONLY=1 ASPD_BIN=$OUT/aspd OUT=$OUT bash bench/grow.sh measure "$1" | grep "^search"
done
