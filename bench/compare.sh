#!/usr/bin/env bash
# Compares two builds of aspd on the same scenarios, alternating them so
# that drift in the machine's load hits both alike: REV (a git revision,
# built in a temporary worktree) against the working tree.
#
#   bench/compare.sh 949084b               # chat and replay, 2 rounds
#   ROUNDS=3 bench/compare.sh HEAD~5 chat chat-rate
#   TMPDIR=/tmp/me ASPD_BENCH_DB=aspd_bench_me ASPD_BENCH_ADDR=127.0.0.1:8190 bench/compare.sh 949084b chat   # beside another run
#
# Each scenario is bench/run.sh's; the output keeps the throughput and
# latency lines of each run, labelled "base" (REV) or "new".
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REV=${1:?usage: bench/compare.sh REV [scenario ...]}
shift
[ $# -eq 0 ] && set -- chat replay
ROUNDS=${ROUNDS:-2}
# Beside another comparison on the same machine, give each its own
# ASPD_COMPARE_DIR, ASPD_BENCH_ADDR and ASPD_BENCH_DB (bench/run.sh).
DIR=${ASPD_COMPARE_DIR:-/tmp/aspd-compare}
BASE=$(mktemp -d /tmp/aspd-compare.XXXXXX)
trap 'git worktree remove --force "$BASE" >/dev/null 2>&1 || true' EXIT
git worktree add --detach "$BASE" "$REV" >/dev/null
# The base runs this tree's bench/run.sh and both sides this tree's
# aspbench, so both are driven and reported alike.
cp bench/run.sh "$BASE/bench/run.sh"
mkdir -p "$DIR-new"
go build -o "$DIR-new/aspbench-shared" ./cmd/aspbench
export ASPBENCH=$DIR-new/aspbench-shared
for round in $(seq "$ROUNDS"); do
	for side in base new; do
		dir=$BASE; [ "$side" = new ] && dir=$PWD
		for sc in "$@"; do
			echo "=== $side $sc (round $round)"
			(cd "$dir" && OUT=$DIR-$side bash bench/run.sh "$sc" 2>&1) |
				grep -E 'cores busy|^pgstat |load generator|^server pid|accepted_msgs_per_s|server_cpu_us_per_msg|server_allocs_per_msg|send_to_deliver |replay_ms|last_recipient|events_replayed|rss_per_connection|^aspd_|errors:|load average|did not start|already answers' || true
		done
	done
done
