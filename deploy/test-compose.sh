#!/usr/bin/env bash
# test-compose.sh: run docker-compose.yml for real, with podman, on a host
# that reaches no image registry, and check what the README says it does.
#
#   deploy/test-compose.sh
#
# 1. Builds stand-ins for the images the compose file and the Dockerfile
#    name, from Debian packages (deploy/stand-ins/): a bookworm base
#    (debootstrap --variant=minbase, podman import), a Go builder with the
#    host's toolchain, PostgreSQL 15 with an entrypoint that honours
#    POSTGRES_USER, POSTGRES_PASSWORD and POSTGRES_DB like the official
#    image's, and a static runtime with user 65532. Each is tagged with a
#    hash of its inputs (localhost/aspd-standin/NAME:HASH, also as the label
#    org.aspd.standin.inputs), so a later run reuses it.
# 2. podman-compose up -d --build, with POSTGRES_IMAGE, GO_IMAGE and
#    RUNTIME_IMAGE naming the stand-ins.
# 3. Waits for health: PostgreSQL's compose healthcheck, then aspd's /readyz.
# 4. Runs the README's compose walkthrough from the host: the ```sh blocks
#    annotated <!-- walkthrough: skip (compose: deploy/test-compose.sh) -->
#    (scripts/doc-walkthrough.sh skips them; this script runs them), in one
#    bash session with set -euo pipefail, curl on 127.0.0.1:8080 and `docker
#    compose` mapped to podman (below).
# 5. Restarts the aspd container and checks that the walkthrough's agent is
#    still there.
# 6. down -v, also on failure or interruption (trap).
#
# `docker compose` in the walkthrough: podman-compose 1.0.3 (Debian 12's)
# ignores depends_on's `condition: service_healthy`, runs no healthchecks
# by itself without systemd (podman schedules them with systemd timers), and
# exits 0 from `exec` whatever the command's status. So `up` starts the
# services in order and runs each healthcheck (`podman healthcheck run`)
# until it passes before starting what depends on it, and `exec` is `podman
# exec` in the service's container. Other subcommands go to podman-compose.
#
# Where no container engine can run (no podman, podman-compose or
# debootstrap, not root, `podman info` or a first container fails), it prints
# a SKIP line and exits 0; ASPD_REQUIRE_CONTAINERS=1 (CI) makes that a
# failure. podman needs, on these machines, the runc runtime, the cgroupfs
# cgroup manager and explicit nofile and nproc ulimits: .ci/run writes them
# to /etc/containers/containers.conf.d/.
#
# Bounded in time: COMPOSE_TEST_TIMEOUT seconds in all (default 1200), each
# wait bounded too. Loopback only: the compose file publishes
# 127.0.0.1:8080, which must be free. Variables: ASPD_DEBIAN_MIRROR (default:
# the host's apt source, else deb.debian.org), COMPOSE_TEST_KEEP=1 keeps the
# stack up and the work directory on failure, for a look.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
STANDINS="$ROOT/deploy/stand-ins"
README="$ROOT/README.md"
COMPOSE_FILE="$ROOT/docker-compose.yml"
PROJECT="aspdcomposetest"
# The annotation of the README's compose walkthrough blocks.
WALK_MARK='<!-- walkthrough: skip (compose: deploy/test-compose.sh) -->'
TOTAL="${COMPOSE_TEST_TIMEOUT:-1200}"

log() { printf '== compose [%ss]: %s\n' "$SECONDS" "$*" >&3; }
# Progress goes to fd 3, the script's stdout, also from inside the
# walkthrough, whose own output goes to a file.
exec 3>&1
# show FILE prints a log of podman-compose, which echoes every podman
# command line, environment included: secrets are masked.
show() { sed -E -e 's/((TOKEN|KEY|PASSWORD|DATABASE_URL)=)[^ ]*/\1xxxxx/g' -e 's/asp_[A-Za-z0-9_-]+/asp_xxxxx/g' "$1"; }
fail() {
	printf '*** compose test FAILED: %s\n' "$*" >&2
	exit 1
}
skip() {
	if [ "${ASPD_REQUIRE_CONTAINERS:-}" = "1" ]; then
		fail "$* (ASPD_REQUIRE_CONTAINERS=1: failing instead of skipping)"
	fi
	printf '*** SKIP: deploy/test-compose.sh: %s: docker-compose.yml is NOT tested.\n' "$*" >&2
	exit 0
}

# The whole run is bounded: a watchdog ends this script's process group
# after TOTAL seconds: TERM to every process of the run, whose trap (below)
# still tears the stack down; KILL 60 s later.
if [ -z "${COMPOSE_TEST_CHILD:-}" ]; then
	export COMPOSE_TEST_CHILD=1
	exec timeout --kill-after=60 "$TOTAL" "$0" "$@"
fi

# --- 0. Can a container engine run here?
for tool in podman debootstrap curl jq sha256sum tar; do
	command -v "$tool" >/dev/null 2>&1 || skip "$tool not found"
done
if command -v podman-compose >/dev/null 2>&1; then
	COMPOSE=(podman-compose)
elif podman compose version >/dev/null 2>&1; then
	COMPOSE=(podman compose)
else
	skip "neither podman-compose nor 'podman compose' found"
fi
[ "$(id -u)" = 0 ] || skip "debootstrap and rootful podman need root"
podman info >/dev/null 2>&1 || skip "podman info fails: $(podman info 2>&1 | tail -1)"
COMPOSE+=(-p "$PROJECT" -f "$COMPOSE_FILE")

WORK="$(mktemp -d "${TMPDIR:-/tmp}/aspd-compose.XXXXXX")"
started=0
cleanup() {
	local status=$?
	set +e
	case "$status" in
	0 | 1) ;; # passed, or fail said why
	143) printf '*** compose test FAILED: stopped after COMPOSE_TEST_TIMEOUT=%ss\n' "$TOTAL" >&2 ;;
	*) printf '*** compose test FAILED: exit status %s\n' "$status" >&2 ;;
	esac
	if [ "$status" -ne 0 ] && [ "$started" = 1 ]; then
		log "logs (failure)"
		for c in $(podman ps -a --filter "label=io.podman.compose.project=$PROJECT" --format '{{.Names}}'); do
			echo "--- $c"
			podman logs --tail 40 "$c" 2>&1
		done
	fi
	if [ "$status" -ne 0 ] && [ "${COMPOSE_TEST_KEEP:-}" = 1 ]; then
		log "COMPOSE_TEST_KEEP=1: left up; work directory $WORK"
		exit "$status"
	fi
	if [ "$started" = 1 ]; then
		log "down -v"
		"${COMPOSE[@]}" down -v >"$WORK/down.log" 2>&1 || cat "$WORK/down.log"
	fi
	# The build's intermediate images, untagged.
	podman image prune -f >/dev/null 2>&1
	rm -rf "$WORK"
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- 1. Stand-in images, cached by a hash of their inputs.

# debian_mirror prints the mirror for debootstrap: ASPD_DEBIAN_MIRROR, else
# the host's first Debian apt source, else deb.debian.org.
debian_mirror() {
	if [ -n "${ASPD_DEBIAN_MIRROR:-}" ]; then
		echo "$ASPD_DEBIAN_MIRROR"
		return
	fi
	local m
	m="$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null |
		awk '/^URIs:/ && $2 !~ /security/ { print $2; exit }')"
	[ -n "$m" ] || m="$(awk '/^deb / && $0 !~ /security/ { print $2; exit }' /etc/apt/sources.list 2>/dev/null)"
	echo "${m:-http://deb.debian.org/debian}"
}

# inputs_hash prints a short hash of its arguments (strings, and the
# contents of those that are files).
inputs_hash() {
	local a
	for a in "$@"; do
		printf '%s\n' "$a"
		if [ -f "$a" ]; then cat "$a"; fi
	done | sha256sum | cut -c1-16
}

# drop_stale TAG removes the other tags of TAG's repository (stand-ins of
# older inputs), so that the cache does not grow run after run. One still
# in use by another stand-in's image stays.
drop_stale() {
	local repo="${1%:*}" old
	for old in $(podman images --format '{{.Repository}}:{{.Tag}}' "$repo"); do
		[ "$old" = "$1" ] || podman rmi "$old" >/dev/null 2>&1 || true
	done
}

# have_image TAG succeeds if TAG is in podman's store.
have_image() { podman image exists "$1"; }

MIRROR="$(debian_mirror)"
SUITE=bookworm
INCLUDE=ca-certificates

BASE="localhost/aspd-standin/bookworm:$(inputs_hash v1 "$SUITE" "$MIRROR" minbase "$INCLUDE")"
if have_image "$BASE"; then
	log "base $BASE (cached)"
else
	log "base $BASE: debootstrap --variant=minbase $SUITE from $MIRROR"
	t0=$SECONDS
	timeout 600 debootstrap --variant=minbase --include="$INCLUDE" "$SUITE" "$WORK/rootfs" "$MIRROR" \
		>"$WORK/debootstrap.log" 2>&1 || {
		tail -20 "$WORK/debootstrap.log"
		fail "debootstrap"
	}
	rm -rf "$WORK"/rootfs/var/cache/apt/archives/*.deb "$WORK"/rootfs/var/lib/apt/lists/*
	tar -C "$WORK/rootfs" -c . |
		podman import --change 'CMD ["/bin/bash"]' \
			--change "LABEL org.aspd.standin.inputs=${BASE##*:}" - "$BASE" >"$WORK/import.log" 2>&1 ||
		{ cat "$WORK/import.log"; fail "podman import"; }
	rm -rf "$WORK/rootfs"
	log "base built in $((SECONDS - t0))s"
	drop_stale "$BASE"
fi
# A first container: where the engine cannot run one, skip (or fail).
if ! out="$(podman run --rm --network none "$BASE" true 2>&1)"; then
	skip "podman cannot run a container: $out"
fi

# standin NAME CONTEXT [INPUTS...]: builds deploy/stand-ins/NAME.Containerfile
# on the base unless its tag exists, and prints the tag.
standin() {
	local name="$1" ctx="$2"
	shift 2
	local hash tag
	hash="$(inputs_hash "$BASE" "$STANDINS/$name.Containerfile" "$@")"
	tag="localhost/aspd-standin/$name:$hash"
	if have_image "$tag"; then
		log "$name $tag (cached)" >&2
	else
		log "$name $tag: building" >&2
		local t0=$SECONDS
		cp "$STANDINS/$name.Containerfile" "$ctx/Containerfile"
		timeout 900 podman build -q --build-arg BASE_IMAGE="$BASE" \
			--build-arg GOPROXY="$(go env GOPROXY 2>/dev/null || echo https://proxy.golang.org,direct)" \
			--label "org.aspd.standin.inputs=$hash" -t "$tag" "$ctx" >"$WORK/build-$name.log" 2>&1 || {
			tail -30 "$WORK/build-$name.log" >&2
			fail "building the $name stand-in"
		}
		log "$name built in $((SECONDS - t0))s" >&2
		drop_stale "$tag"
	fi
	echo "$tag"
}

mkdir -p "$WORK/ctx-postgres" "$WORK/ctx-static" "$WORK/ctx-go"
cp "$STANDINS/postgres-entrypoint.sh" "$WORK/ctx-postgres/"
POSTGRES_IMAGE="$(standin postgres "$WORK/ctx-postgres" "$STANDINS/postgres-entrypoint.sh")"
RUNTIME_IMAGE="$(standin static "$WORK/ctx-static")"

command -v go >/dev/null 2>&1 || skip "no Go toolchain on the host for the Go builder stand-in"
GOROOT_HOST="$(go env GOROOT)"
GO_VERSION="$(go version)"
HOST_CA=/etc/ssl/certs/ca-certificates.crt
[ -f "$HOST_CA" ] || skip "no CA bundle at $HOST_CA for the Go builder stand-in"
GO_IMAGE="localhost/aspd-standin/go:$(inputs_hash "$BASE" "$STANDINS/go.Containerfile" "$GO_VERSION" "$GOROOT_HOST" "$HOST_CA")"
if ! have_image "$GO_IMAGE"; then
	# The toolchain goes into the build context: hard links where the file
	# system allows (no copy of ~300 MB), a copy otherwise.
	cp -al "$GOROOT_HOST" "$WORK/ctx-go/go" 2>/dev/null || cp -a "$GOROOT_HOST" "$WORK/ctx-go/go"
	cp "$HOST_CA" "$WORK/ctx-go/ca-certificates.crt"
fi
GO_IMAGE="$(standin go "$WORK/ctx-go" "$GO_VERSION" "$GOROOT_HOST" "$HOST_CA")"
rm -rf "$WORK/ctx-go"
export POSTGRES_IMAGE GO_IMAGE RUNTIME_IMAGE


# --- 2, 3. `docker compose` for the walkthrough, over podman.

# service_container SERVICE prints the service's (first) container name:
# PROJECT_SERVICE_1 (podman-compose) or PROJECT-SERVICE-1 (docker-compose).
service_container() {
	podman ps -a --filter "label=io.podman.compose.project=$PROJECT" --format '{{.Names}}' |
		grep -E "^${PROJECT}[_-]$1[_-]1\$" | head -1
}

# running SERVICE succeeds if the service's container runs.
running() {
	local c
	c="$(service_container "$1")"
	[ -n "$c" ] && [ "$(podman inspect -f '{{.State.Running}}' "$c" 2>/dev/null)" = true ]
}

# wait_healthy CONTAINER runs its healthcheck until it passes, for at most
# 120 s.
wait_healthy() {
	local c="$1" end=$((SECONDS + 120))
	while [ "$SECONDS" -lt "$end" ]; do
		if podman healthcheck run "$c" >/dev/null 2>&1; then
			log "$c healthy"
			return 0
		fi
		sleep 1
	done
	fail "$c: its healthcheck did not pass in 120 s"
}

# wait_ready waits for aspd's /readyz on the published port, at most 120 s.
wait_ready() {
	local end=$((SECONDS + 120))
	while [ "$SECONDS" -lt "$end" ]; do
		if curl -fsS -m 2 http://127.0.0.1:8080/readyz >/dev/null 2>&1; then
			log "aspd ready"
			return 0
		fi
		sleep 1
	done
	fail "aspd: /readyz did not answer 200 in 120 s"
}

# compose_up: up -d --build, one service at a time in dependency order
# (postgres, then aspd), each healthcheck run until it passes before the
# next service starts, as depends_on's condition asks.
compose_up() {
	started=1
	# podman-compose 1.0.3 exits 0 when a command it runs fails: each step
	# is checked by its effect. The image is untagged first (its layers stay
	# as the build cache) so that only this build can make it exist.
	local img
	for img in "${PROJECT}_aspd" "${PROJECT}-aspd"; do podman untag "$img" >/dev/null 2>&1 || true; done
	"${COMPOSE[@]}" build >"$WORK/build-aspd.log" 2>&1 || true
	if ! podman image exists "${PROJECT}_aspd" && ! podman image exists "${PROJECT}-aspd"; then
		show "$WORK/build-aspd.log" | tail -30
		fail "podman-compose build: no aspd image"
	fi
	log "aspd image built"
	"${COMPOSE[@]}" up -d --no-build postgres >"$WORK/up-postgres.log" 2>&1 || true
	running postgres || {
		show "$WORK/up-postgres.log"
		fail "podman-compose up: postgres is not running"
	}
	wait_healthy "$(service_container postgres)"
	"${COMPOSE[@]}" up -d --no-build >"$WORK/up.log" 2>&1 || true
	running aspd || {
		show "$WORK/up.log"
		fail "podman-compose up: aspd is not running"
	}
	wait_ready
}

docker() {
	[ "${1:-}" = compose ] || fail "the walkthrough ran 'docker $*': only 'docker compose' is mapped"
	shift
	local sub="${1:-}"
	shift || true
	case "$sub" in
	up) compose_up ;;
	exec)
		local svc="$1"
		shift
		podman exec -i "$(service_container "$svc")" "$@"
		;;
	*) "${COMPOSE[@]}" "$sub" "$@" ;;
	esac
}

# --- 4. The README's compose walkthrough.
if curl -s -m 2 -o /dev/null http://127.0.0.1:8080/ 2>/dev/null; then
	fail "127.0.0.1:8080 is in use: the compose file publishes aspd there"
fi
awk -v mark="$WALK_MARK" '
	prev == mark && /^```sh$/ { inblock = 1; n++; printf "# block %d (README.md:%d)\n", n, NR; prev = ""; next }
	inblock && /^```$/ { inblock = 0; next }
	inblock { print; next }
	{ prev = $0 }
' "$README" >"$WORK/walkthrough.sh"
blocks="$(grep -c '^# block ' "$WORK/walkthrough.sh" || true)"
[ "$blocks" -gt 0 ] || fail "README.md has no block annotated $WALK_MARK"
log "README walkthrough: $blocks block(s)"
# Run in this shell (docker, fail and the trap stay in force), from the
# repository root as a reader would, with a fresh token and key.
# Its output (an agent token among it) is shown only on failure, masked.
started=1
if ! (
	set -euo pipefail
	# shellcheck disable=SC1091
	. "$WORK/walkthrough.sh"
) >"$WORK/walkthrough.out" 2>&1; then
	show "$WORK/walkthrough.out"
	fail "the README's compose walkthrough failed"
fi
[ -n "$(service_container aspd)" ] || fail "the walkthrough did not start the stack"

# The walkthrough's agent, for the checks below.
AGENT="$(grep -o '@[a-z0-9.-]*' "$WORK/walkthrough.sh" | head -1)"
[ -n "$AGENT" ] || fail "the walkthrough creates no agent"
has_agent() {
	podman exec -i "$(service_container aspd)" /usr/local/bin/aspctl agent get "$AGENT" >/dev/null
}
has_agent || fail "$AGENT is not listed after the walkthrough"
# Chorus is on: the compose file gives aspd ASPD_CHORUS_KEY.
if podman logs "$(service_container aspd)" 2>&1 | grep -q 'Chorus webhooks are off'; then
	fail "Chorus is off in the compose stack (ASPD_CHORUS_KEY not passed?)"
fi

# --- 5. Restart aspd: the data is in PostgreSQL's volume, not the container.
log "restart aspd"
podman restart "$(service_container aspd)" >"$WORK/restart.log" 2>&1 || { cat "$WORK/restart.log"; fail "podman restart aspd"; }
wait_ready
has_agent || fail "$AGENT is gone after restarting aspd"
log "restart postgres"
# (podman complains on stderr that it cannot reach systemd for the
# healthcheck timers: expected here, where the script runs the checks.)
podman restart "$(service_container postgres)" >"$WORK/restart.log" 2>&1 || { cat "$WORK/restart.log"; fail "podman restart postgres"; }
wait_healthy "$(service_container postgres)"
wait_ready
has_agent || fail "$AGENT is gone after restarting postgres"

log "ok: stand-ins, up, health, README walkthrough, data kept across restarts"
# --- 6. down -v: the trap.
