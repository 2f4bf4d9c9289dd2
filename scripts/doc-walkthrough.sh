#!/usr/bin/env bash
# doc-walkthrough.sh: run every ```sh block of README.md and docs/*.md, in
# file order, against a fresh aspd built from this tree, so that the docs
# cannot drift from the code. Exits non-zero on the first failing block.
#
#   scripts/doc-walkthrough.sh              # every file
#   scripts/doc-walkthrough.sh docs/api.md  # some files (README.md is not implied)
#
# How blocks run (the README's "Testing" notes say the same, shorter):
#
# - One aspd for the whole run: embedded store in a temporary directory,
#   started before the first file on a free loopback port; the blocks run
#   with that directory as their working directory (aspd-data/admin.token is
#   there, as for a reader who started aspd in their own directory). A
#   block that starts aspd (`aspd FLAGS`, `go run ./cmd/aspd FLAGS`)
#   restarts that one server with its flags, on the same data directory.
# - One bash session per file: variables and functions carry from block to
#   block, as in a reader's terminal. It runs with `set -euo pipefail`: a
#   failing command, an unset variable or a failing pipeline fails the block.
# - `curl`, `aspctl`, `aspd` and `go run ./cmd/{aspd,aspctl}` are shell
#   functions that use the binaries built from this tree and send
#   localhost:8080 and 127.0.0.1:8080, the docs' address, to the run's
#   server. `curl` also fails on any 5xx, and on any 4xx whose error code the
#   block does not show (a `"code":"..."` in the block, usually in the
#   comment with the expected answer); conversely, every error code a block
#   shows must be answered by one of its commands.
# - Annotations, an HTML comment on the line right before a fence (invisible
#   where the Markdown is rendered):
#     <!-- walkthrough: skip (reason) -->      the block is not run; the
#                                              reason is printed
#     <!-- walkthrough: background -->         the block runs in the
#                                              background (a stream, a
#                                              listener, an agent) until the
#                                              end of its file
#     <!-- walkthrough: file NAME -->          any block (json, python...):
#                                              written to NAME in the working
#                                              directory before the file's
#                                              blocks run ("save this as")
#   and anywhere in a file:
#     <!-- walkthrough: skip-file (reason) --> no block of the file is run
#
# Needs bash, curl, jq and python3 (the Chorus example agent). Without one
# of them the walkthrough is skipped loudly; ASPD_REQUIRE_WALKTHROUGH=1 (CI)
# makes that a failure. WALK_KEEP=1 keeps the temporary directory;
# WALK_FILE_TIMEOUT bounds each file's session (seconds, default 90).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

FILE_TIMEOUT="${WALK_FILE_TIMEOUT:-90}" # seconds per file

missing=()
for tool in curl jq python3 awk setsid timeout; do
	command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ "${#missing[@]}" -gt 0 ]; then
	msg="*** doc walkthrough: ${missing[*]} not found: the docs' shell blocks are NOT run."
	if [ "${ASPD_REQUIRE_WALKTHROUGH:-}" = "1" ]; then
		echo "$msg ASPD_REQUIRE_WALKTHROUGH=1: failing instead of skipping." >&2
		exit 1
	fi
	echo "$msg" >&2
	exit 0
fi

if [ "$#" -gt 0 ]; then
	files=("$@")
else
	files=(README.md)
	while IFS= read -r f; do files+=("$f"); done < <(LC_ALL=C ls docs/*.md)
fi

WALK_DIR="$(mktemp -d "${TMPDIR:-/tmp}/aspd-walkthrough.XXXXXX")"
export WALK_DIR
mkdir -p "$WALK_DIR/bin" "$WALK_DIR/run" "$WALK_DIR/gen"
ok=0

cleanup() {
	local pid
	if [ -s "$WALK_DIR/aspd.pid" ]; then
		pid="$(cat "$WALK_DIR/aspd.pid")"
		kill "$pid" 2>/dev/null || true
		for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$pid" 2>/dev/null || true
	fi
	if [ "$ok" = 1 ] && [ "${WALK_KEEP:-}" != "1" ]; then
		rm -rf "$WALK_DIR"
	else
		echo "walkthrough: files kept in $WALK_DIR" >&2
	fi
}
trap cleanup EXIT

if [ -n "${WALK_BIN_DIR:-}" ]; then # prebuilt (scripts/walkthrough_test.go)
	cp "$WALK_BIN_DIR/aspd" "$WALK_BIN_DIR/aspctl" "$WALK_DIR/bin/"
else
	echo "== doc walkthrough: building aspd and aspctl"
	go build -o "$WALK_DIR/bin/aspd" ./cmd/aspd
	go build -o "$WALK_DIR/bin/aspctl" ./cmd/aspctl
fi

# lib.sh is sourced by every file's session: the wrappers and the block
# bookkeeping.
cat >"$WALK_DIR/lib.sh" <<'LIB'
# shellcheck shell=bash
# The reader's environment must not leak into the run.
for __v in $(compgen -e); do
	case "$__v" in ASPD_* | ASPCTL_*) unset "$__v" ;; esac
done
unset __v
PATH="$WALK_DIR/bin:$PATH"
cd "$WALK_DIR/run"

# The run's port; __walk_server updates it. (Few forks: on a loaded
# machine each one costs tens of milliseconds.)
WALK_PORT="$(cat "$WALK_DIR/port" 2>/dev/null || true)"

# __walk_args sets WALK_ARGS to its arguments with the docs' address
# rewritten to the run's server.
__walk_args() {
	local a
	WALK_ARGS=()
	for a in "$@"; do
		a="${a//localhost:8080/127.0.0.1:$WALK_PORT}"
		WALK_ARGS+=("${a//127.0.0.1:8080/127.0.0.1:$WALK_PORT}")
	done
}

__walk_fail() { # tokens in the command are not printed
	local msg="$*"
	msg="$(sed -E 's/(Bearer|token=)[ ]*[^ "&]+/\1 ***/g' <<<"$msg")"
	echo "walkthrough: FAIL $WALK_FILE (block at line $WALK_FENCE): $msg" >&2
}

# __walk_server (re)starts the run's aspd with the given flags.
__walk_server() {
	local pid before line
	if [ -s "$WALK_DIR/aspd.pid" ]; then
		pid="$(cat "$WALK_DIR/aspd.pid")"
		kill "$pid" 2>/dev/null || true
		for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		if kill -0 "$pid" 2>/dev/null; then
			echo "walkthrough: aspd (pid $pid) did not stop" >&2
			return 1
		fi
	fi
	touch "$WALK_DIR/aspd.log"
	before="$(wc -l <"$WALK_DIR/aspd.log")"
	echo "walkthrough: starting aspd $* (data in $WALK_DIR/run)" >&2
	# Its own session, so that a timed-out file does not take it down; the
	# pid file is aspd's own pid (setsid does not fork in a background job).
	(cd "$WALK_DIR/run" && setsid bash -c 'echo $$ >"$WALK_DIR/aspd.pid"; exec "$WALK_DIR/bin/aspd" "$@" --listen 127.0.0.1:0' aspd "$@" \
		>>"$WALK_DIR/aspd.log" 2>&1 </dev/null &)
	for _ in $(seq 1 300); do
		line="$(tail -n +"$((before + 1))" "$WALK_DIR/aspd.log" | grep -m1 'msg="aspd listening"' || true)"
		if [ -n "$line" ]; then
			line="${line#*addr=http://127.0.0.1:}"
			WALK_PORT="${line%% *}"
			echo "$WALK_PORT" >"$WALK_DIR/port"
			command curl -fsS -o /dev/null "http://127.0.0.1:$WALK_PORT/readyz" && return 0
		fi
		sleep 0.1
	done
	echo "walkthrough: aspd did not start; its log:" >&2
	tail -n +"$((before + 1))" "$WALK_DIR/aspd.log" >&2
	return 1
}

aspd() {
	case "${1:-}" in
	export | import | version | --version | -version | help | --help | -h | -help)
		command "$WALK_DIR/bin/aspd" "$@"
		;;
	*) __walk_server "$@" ;;
	esac
}

aspctl() {
	local rc=0 server
	__walk_args "${ASPCTL_SERVER:-http://127.0.0.1:8080}"
	server="${WALK_ARGS[0]}"
	__walk_args "$@"
	ASPCTL_SERVER="$server" command "$WALK_DIR/bin/aspctl" "${WALK_ARGS[@]}" || rc=$?
	if [ "$rc" -gt 128 ] && [ -e "$WALK_DIR/stopping" ]; then rc=0; fi # a background listener we stopped
	return "$rc"
}

go() {
	case "${1:-} ${2:-}" in
	"run ./cmd/aspctl")
		shift 2
		aspctl "$@"
		;;
	"run ./cmd/aspd")
		shift 2
		aspd "$@"
		;;
	*)
		__walk_fail "'go $*' is not run by the walkthrough: annotate the block (<!-- walkthrough: skip (reason) -->)"
		return 1
		;;
	esac
}

# curl runs the real curl on the rewritten arguments, then judges the
# answer: 5xx fails; 4xx fails unless the block shows its error code.
curl() {
	local rc=0 hdr body status="" code line
	__walk_args "$@"
	hdr="$WALK_DIR/hdr.$WALK_BLOCK.$BASHPID.$RANDOM"
	body="$WALK_DIR/body.$BASHPID.$RANDOM"
	command curl --no-progress-meter -D "$hdr" "${WALK_ARGS[@]}" | tee "$body" || rc=$?
	if [ "$rc" -ne 0 ]; then
		if [ "$rc" -gt 128 ] && [ -e "$WALK_DIR/stopping" ]; then
			rc=0 # a background stream we stopped
		else
			__walk_fail "curl $* exited $rc"
			return "$rc"
		fi
	fi
	while IFS= read -r line; do # the last status line (after any 100 Continue)
		[[ "$line" =~ ^HTTP/[0-9.]+\ ([0-9]{3}) ]] && status="${BASH_REMATCH[1]}"
	done <"$hdr"
	if [ -n "$status" ] && [ "$status" -ge 400 ]; then
		code="$(jq -r '.error.code // empty' "$body" 2>/dev/null || true)"
		if [ "$status" -ge 500 ]; then
			__walk_fail "curl $* answered $status ${code:-}: a 5xx is a bug"
			return 1
		fi
		if [ -z "$code" ] || ! grep -qx -- "$code" "$WALK_DIR/gen/$WALK_BLOCK.codes"; then
			__walk_fail "curl $* answered $status ${code:-(no error code)}, which the block does not show (show the expected answer, e.g. # {\"error\":{\"code\":\"$code\",...}}, or fix the command)"
			return 1
		fi
		echo "$code" >>"$WALK_DIR/gen/$WALK_BLOCK.seen"
	fi
	return 0
}

__walk_begin() { # file fence-line block-id mode lineno
	WALK_FILE="$1" WALK_FENCE="$2" WALK_BLOCK="$3" WALK_MODE="$4" WALK_BASE="$5"
	WALK_DEPTH="$BASH_SUBSHELL" # a background block runs one deeper
	[ "$WALK_MODE" = fg ] || WALK_DEPTH=$((WALK_DEPTH + 1))
	: >"$WALK_DIR/gen/$WALK_BLOCK.seen"
}

# __walk_end checks that every error code the block shows was answered.
__walk_end() {
	local code
	while IFS= read -r code; do
		[ -n "$code" ] || continue
		if ! grep -qx -- "$code" "$WALK_DIR/gen/$WALK_BLOCK.seen"; then
			__walk_fail "the block shows error $code, but none of its commands answered it"
			return 1
		fi
	done <"$WALK_DIR/gen/$WALK_BLOCK.codes"
	[ "$WALK_MODE" = bg ] || echo "walkthrough: ok $WALK_FILE:$WALK_FENCE" >&2
}

__walk_err() { # the failing command's status
	local n="${#BASH_LINENO[@]}"
	# A background block's command that we stopped (SIGTERM): not a failure.
	if [ "$WALK_MODE" = bg ] && [ -e "$WALK_DIR/stopping" ] && [ "$1" -gt 128 ]; then
		__walk_end
		exit $?
	fi
	# In a command substitution: the command it belongs to reports.
	[ "$BASH_SUBSHELL" -le "$WALK_DEPTH" ] || return 0
	# The failing line of the generated script: where the outermost
	# function was called from (a wrapper's failure is its caller's).
	echo "walkthrough: FAIL $WALK_FILE:$((WALK_FENCE + BASH_LINENO[n - 2] - WALK_BASE)) (block at line $WALK_FENCE): a command failed (exit $1)" >&2
}

# __walk_bg records a background block and waits until it is ready: its
# stream answered 200, or a second for blocks without curl.
__walk_bg() { # pid block-id uses-curl
	echo "$1 $2" >>"$WALK_DIR/bg.$$"
	if [ "$3" = 1 ]; then
		for _ in $(seq 1 50); do
			grep -a -q -E '^HTTP/[0-9.]+ 200' "$WALK_DIR"/hdr."$2".* 2>/dev/null && return 0
			kill -0 "$1" 2>/dev/null || return 0
			sleep 0.1
		done
	else
		sleep 1
	fi
}

# __walk_children prints the pids whose parent is $1 (from /proc: procps
# may not be installed).
__walk_children() {
	local parent="$1" f s state ppid
	for f in /proc/[0-9]*/stat; do
		{ read -r s <"$f"; } 2>/dev/null || continue
		read -r state ppid _ <<<"${s##*) }"
		if [ "$ppid" = "$parent" ]; then echo "${f//[^0-9]/}"; fi
	done
	return 0
}

# __walk_finish stops the file's background blocks (their children, by
# pid: the blocks themselves then run to their end and check their codes)
# and any job a block left running.
__walk_finish() {
	local pid id child rc=0
	touch "$WALK_DIR/stopping"
	if [ -s "$WALK_DIR/bg.$$" ]; then
		while read -r pid id; do
			for child in $(__walk_children "$pid"); do kill "$child" 2>/dev/null || true; done
			if ! wait "$pid"; then
				echo "walkthrough: background block $id failed; its output:" >&2
				cat "$WALK_DIR/gen/$id.out" >&2 || true
				rc=1
			fi
		done <"$WALK_DIR/bg.$$"
	fi
	for pid in $(jobs -p); do kill "$pid" 2>/dev/null || true; done
	rm -f "$WALK_DIR/stopping"
	return "$rc"
}
LIB

# The walkthrough's own server, before the first file.
(
	# shellcheck source=/dev/null
	source "$WALK_DIR/lib.sh"
	__walk_server
) || exit 1

# gen.awk turns one Markdown file into a bash script (stdout) and writes
# each block to gen/ID.sh and its shown error codes to gen/ID.codes;
# "file" blocks go to run/NAME. It reports skips on fd 3 (skips file).
cat >"$WALK_DIR/gen.awk" <<'AWK'
function fail(msg) { printf "walkthrough: %s:%d: %s\n", FILENAME, FNR, msg > "/dev/stderr"; bad = 1; exit 1 }
function trim(s) { sub(/^[ \t]+/, "", s); sub(/[ \t]+$/, "", s); return s }
BEGIN { infence = 0; n = 0; skipfile = "" }
FNR == 1 { id_prefix = FILENAME; gsub(/[^A-Za-z0-9]/, "_", id_prefix) }
{
	line = $0
	if (!infence && line ~ /<!-- walkthrough: skip-file \(.+\) -->/) {
		skipfile = line; sub(/.*<!-- walkthrough: skip-file \(/, "", skipfile); sub(/\) -->.*/, "", skipfile)
	}
	if (!infence && match(line, /^ *```/)) {
		info = trim(substr(line, RLENGTH + 1)); split(info, w, /[ \t]+/); lang = w[1]
		indent = RLENGTH - 3
		infence = 1; fence_line = FNR; body = ""; nlines = 0
		ann = ""; ann_arg = ""
		if (prev ~ /<!-- walkthrough:/) {
			a = prev; sub(/^[ \t]*<!-- walkthrough: */, "", a); sub(/ *--> *$/, "", a)
			if (a ~ /^skip \(.+\)$/) { ann = "skip"; ann_arg = substr(a, 7, length(a) - 7) }
			else if (a == "background") ann = "background"
			else if (a ~ /^file [^ ]+$/) { ann = "file"; ann_arg = substr(a, 6) }
			else if (a ~ /^skip-file /) ann = ""
			else fail("unknown annotation: " a)
		}
		is_sh = (lang == "sh" || lang == "bash")
		if (is_sh && indent > 0 && ann != "skip") fail("an indented sh block is not run: put it at column 0 or annotate it")
		if (ann == "file" && ann_arg ~ /\//) fail("file annotation: a plain file name, please")
		prev = line
		next
	}
	if (infence && line ~ /^ *```[ \t]*$/) {
		infence = 0
		if (ann == "file") {
			out = outdir "/run/" ann_arg
			printf "%s", body > out; close(out)
		}
		if (is_sh) {
			n++
			id = id_prefix "_" n
			if (skipfile != "" || ann == "skip") {
				printf "%s:%d\t%s\n", FILENAME, fence_line, (ann == "skip" ? ann_arg : skipfile) >> skips
			} else {
				printf "%s", body > (outdir "/gen/" id ".sh"); close(outdir "/gen/" id ".sh")
				codes = ""; rest = body
				while (match(rest, /"code" *: *"[a-z0-9_-]+"/)) {
					c = substr(rest, RSTART, RLENGTH); sub(/^"code" *: *"/, "", c); sub(/"$/, "", c)
					codes = codes c "\n"; rest = substr(rest, RSTART + RLENGTH)
				}
				printf "%s", codes > (outdir "/gen/" id ".codes"); close(outdir "/gen/" id ".codes")
				uses_curl = (body ~ /(^|[^A-Za-z_])curl /) ? 1 : 0
				if (ann == "background") {
					printf "__walk_begin '%s' %d %s bg $LINENO; (\n%s__walk_end\n) >\"$WALK_DIR/gen/%s.out\" 2>&1 &\n__walk_bg $! %s %d\n", FILENAME, fence_line, id, body, id, id, uses_curl
				} else {
					printf "__walk_begin '%s' %d %s fg $LINENO\n%s__walk_end\n", FILENAME, fence_line, id, body
				}
				ran++
			}
		}
		prev = line
		next
	}
	if (infence) { body = body line "\n"; nlines++ }
	prev = line
}
END {
	if (bad) exit 1
	if (infence) { printf "walkthrough: %s: unterminated fence at line %d\n", FILENAME, fence_line > "/dev/stderr"; exit 1 }
}
AWK

: >"$WALK_DIR/skips"
ran_total=0
for f in "${files[@]}"; do
	if [ ! -f "$f" ]; then
		echo "walkthrough: no such file: $f" >&2
		exit 1
	fi
	gen="$WALK_DIR/gen/$(echo "$f" | tr -c 'A-Za-z0-9\n' '_').sh"
	{
		echo "# generated from $f by scripts/doc-walkthrough.sh"
		echo "source \"\$WALK_DIR/lib.sh\""
		echo "set -eEuo pipefail"
		echo "trap '__walk_err \$?' ERR"
		awk -v outdir="$WALK_DIR" -v skips="$WALK_DIR/skips" -f "$WALK_DIR/gen.awk" "$f"
		echo "__walk_finish"
	} >"$gen"
	blocks="$(grep -c '^__walk_begin ' "$gen" || true)"
	# Syntax first, block by block, so that an unclosed quote names its block.
	for b in $(grep -o "^__walk_begin '[^']*' [0-9]* [A-Za-z0-9_]*" "$gen" | awk '{print $4}'); do
		if ! bash -n "$WALK_DIR/gen/$b.sh" 2>"$WALK_DIR/syntax.err"; then
			echo "walkthrough: FAIL $f: a block does not parse as bash:" >&2
			cat "$WALK_DIR/syntax.err" >&2
			exit 1
		fi
	done
	if [ "$blocks" = 0 ]; then
		continue
	fi
	echo "== $f ($blocks blocks)"
	rc=0
	(cd "$WALK_DIR/run" && timeout -k 5 "$FILE_TIMEOUT" bash "$gen") >"$WALK_DIR/$(basename "$gen" .sh).log" 2>&1 || rc=$?
	if [ "$rc" -eq 0 ]; then
		grep -a '^walkthrough: ' "$WALK_DIR/$(basename "$gen" .sh).log" | grep -v '^walkthrough: ok ' || true
	else
		[ "$rc" -eq 124 ] && echo "walkthrough: FAIL $f: timed out after ${FILE_TIMEOUT}s (a long-running command needs <!-- walkthrough: background -->)" >&2
		echo "---- last lines of the session ($WALK_DIR/$(basename "$gen" .sh).log):" >&2
		tail -n 40 "$WALK_DIR/$(basename "$gen" .sh).log" >&2
		echo "---- last lines of aspd's log:" >&2
		tail -n 15 "$WALK_DIR/aspd.log" >&2
		exit 1
	fi
	ran_total=$((ran_total + blocks))
done

skipped="$(wc -l <"$WALK_DIR/skips")"
echo "== doc walkthrough: $ran_total blocks ran, $skipped skipped"
if [ "$skipped" -gt 0 ]; then
	# One line per file and reason: "skipped FILE:LINE[,LINE...]<TAB>reason".
	awk -F '\t' '{ split($1, p, ":"); k = p[1] "\t" $2
		if (!(k in lines)) { order[++n] = k; lines[k] = p[1] ":" p[2] } else lines[k] = lines[k] "," p[2] }
		END { for (i = 1; i <= n; i++) { split(order[i], q, "\t"); print "  skipped " lines[order[i]] "\t" q[2] } }' "$WALK_DIR/skips"
fi
ok=1
