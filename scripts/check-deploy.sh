#!/usr/bin/env bash
# check-deploy.sh: check the operations kit in deploy/ with the tools that
# will run it (docs/operators.md, "Operations kit"):
#
# - promtool check rules: deploy/prometheus/aspd-rules.yml is valid;
# - promtool test rules: deploy/prometheus/aspd-rules.test.yml, synthetic
#   series on which each alert fires for a bad instance and not for a
#   healthy one;
# - systemd-analyze verify: deploy/systemd/aspd.service loads without a
#   warning. verify insists that ExecStart's binary exists, so aspd is built
#   from this tree into a temporary directory and the unit's ExecStart
#   (/usr/local/bin/aspd) is rewritten to it in a temporary copy; nothing is
#   installed. verify exits 0 on unknown keys and unparsable values (it
#   only warns), so any output fails the check too;
# - systemd-analyze security --offline: the unit's exposure level stays at
#   most SECURITY_THRESHOLD (tenths: 20 is "2.0", systemd's "OK" band).
#
# The metric names these files use are checked by `go test ./deploy`
# (TestOpsKitNamesExistingMetrics), which needs neither tool.
#
# Without promtool (Debian: prometheus) or systemd-analyze (Debian:
# systemd) the check is skipped loudly; ASPD_REQUIRE_OPSKIT=1 (CI) makes
# that a failure.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

SECURITY_THRESHOLD=20

# shellcheck source=require.sh
. "$ROOT/scripts/require.sh"
require_tools ASPD_REQUIRE_OPSKIT "the operations kit is" \
	"promtool (Debian package prometheus)" "systemd-analyze (Debian package systemd)"

echo "== promtool check rules"
promtool check rules deploy/prometheus/aspd-rules.yml
echo "== promtool test rules"
promtool test rules deploy/prometheus/aspd-rules.test.yml

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "== systemd-analyze verify deploy/systemd/aspd.service (ExecStart: aspd built into $tmp)"
go build -o "$tmp/aspd" ./cmd/aspd
grep -q '^ExecStart=/usr/local/bin/aspd ' deploy/systemd/aspd.service || {
	echo "deploy/systemd/aspd.service: no ExecStart=/usr/local/bin/aspd line to check against the built binary" >&2
	exit 1
}
sed "s#^ExecStart=/usr/local/bin/aspd #ExecStart=$tmp/aspd #" deploy/systemd/aspd.service >"$tmp/aspd.service"
if ! out="$(systemd-analyze verify "$tmp/aspd.service" 2>&1)" || [ -n "$out" ]; then
	echo "$out" | sed "s#$tmp/#deploy/systemd/ (copy) #" >&2
	echo "systemd-analyze verify: deploy/systemd/aspd.service has errors or warnings" >&2
	exit 1
fi
echo "ok"

echo "== systemd-analyze security --offline (threshold $SECURITY_THRESHOLD)"
if ! out="$(systemd-analyze security --offline=yes --threshold="$SECURITY_THRESHOLD" "$tmp/aspd.service" 2>&1)"; then
	echo "$out" >&2
	echo "deploy/systemd/aspd.service: exposure above $SECURITY_THRESHOLD (the ✗ lines above say why)" >&2
	exit 1
fi
echo "$out" | tail -n 1

echo "== check-deploy: ok"
