# require.sh, sourced by the check scripts: require_tools VAR WHAT TOOL...
# returns when every TOOL ("name" or "name (Debian package pkg)") is on the
# PATH. Otherwise it says loudly that WHAT is NOT checked and exits the
# script: 0 (a skip), or 1 when the variable VAR is 1 (CI sets it: there a
# skipped check is a failure).
require_tools() {
	local var="$1" what="$2" tool missing=()
	shift 2
	for tool in "$@"; do
		command -v "${tool%% *}" >/dev/null 2>&1 || missing+=("$tool")
	done
	[ "${#missing[@]}" -eq 0 ] && return 0
	local msg="*** $(basename "$0"): ${missing[*]} not found: $what NOT checked."
	if [ "${!var:-}" = "1" ]; then
		echo "$msg $var=1: failing instead of skipping." >&2
		exit 1
	fi
	echo "$msg Set $var=1 to make this a failure." >&2
	exit 0
}
