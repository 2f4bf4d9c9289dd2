#!/usr/bin/env bash
# openapi-ts-check.sh: generate a TypeScript client from the OpenAPI
# description (docs/openapi.json) with npm's openapi-typescript and
# type-check it with tsc --noEmit, together with scripts/openapi-ts/usage.ts,
# which uses some of the generated types (and expects type errors where the
# wire shapes forbid a value): proof that generators accept the description
# and read the shapes aspd answers with (docs/api.md).
#
# The tools are pinned by scripts/openapi-ts/package-lock.json and installed
# with `npm ci` into a cache directory named after the lockfile's hash
# (ASPD_OPENAPI_TS_CACHE, default ~/.cache/aspd/openapi-ts), so a second run
# needs no network; nothing is written into the tree.
#
# Without node and npm (Debian: nodejs, npm) the check is skipped loudly;
# ASPD_REQUIRE_NPM=1 (CI) makes that a failure.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
SRC="$ROOT/scripts/openapi-ts"

# shellcheck source=require.sh
. "$ROOT/scripts/require.sh"
require_tools ASPD_REQUIRE_NPM "the TypeScript client is" \
	"node (Debian package nodejs)" "npm (Debian package npm)" sha256sum

lock_hash="$(sha256sum "$SRC/package-lock.json" | cut -c1-16)"
tools="${ASPD_OPENAPI_TS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/aspd/openapi-ts}/$lock_hash"
if [ ! -x "$tools/node_modules/.bin/openapi-typescript" ] || [ ! -x "$tools/node_modules/.bin/tsc" ]; then
	echo "== npm ci (scripts/openapi-ts/package-lock.json) into $tools"
	rm -rf "$tools"
	mkdir -p "$tools"
	cp "$SRC/package.json" "$SRC/package-lock.json" "$tools/"
	(cd "$tools" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp "$SRC/usage.ts" "$SRC/tsconfig.json" "$work/"

echo "== openapi-typescript docs/openapi.json"
"$tools/node_modules/.bin/openapi-typescript" docs/openapi.json -o "$work/aspd-api.d.ts"
echo "== tsc --noEmit (the generated types and scripts/openapi-ts/usage.ts)"
"$tools/node_modules/.bin/tsc" -p "$work/tsconfig.json"
echo "== openapi-ts-check: ok ($(wc -l <"$work/aspd-api.d.ts") lines of types)"
