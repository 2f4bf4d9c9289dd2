#!/bin/sh
# Entrypoint of the PostgreSQL stand-in image (deploy/test-compose.sh): as
# the official postgres image's, on the first start with an empty data
# directory it creates the cluster with POSTGRES_USER (default postgres) as
# superuser, password POSTGRES_PASSWORD (required), and the database
# POSTGRES_DB (default: the user's name); every start then runs the server
# as the postgres user, listening on all interfaces, with password
# (scram-sha-256) authentication over TCP and trust on the local socket
# (which the healthcheck's pg_isready uses).
set -eu

: "${PGDATA:=/var/lib/postgresql/data}"
POSTGRES_USER="${POSTGRES_USER:-postgres}"
POSTGRES_DB="${POSTGRES_DB:-$POSTGRES_USER}"
BIN=/usr/lib/postgresql/15/bin

if [ "$(id -u)" = 0 ]; then
	# A named volume arrives owned by root.
	mkdir -p "$PGDATA" /var/run/postgresql
	chown postgres:postgres "$PGDATA" /var/run/postgresql
	chmod 700 "$PGDATA"
	exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi

if [ ! -s "$PGDATA/PG_VERSION" ]; then
	if [ -z "${POSTGRES_PASSWORD:-}" ]; then
		echo "postgres stand-in: POSTGRES_PASSWORD is not set" >&2
		exit 1
	fi
	pwfile="$(mktemp)"
	printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
	"$BIN/initdb" -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pwfile" \
		--auth-local=trust --auth-host=scram-sha-256 --encoding=UTF8 --locale=C >/dev/null
	rm -f "$pwfile"
	echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
	if [ "$POSTGRES_DB" != postgres ]; then
		# Single-user mode: no server listens while the cluster is set up.
		# The name is an identifier: double quotes, doubled inside.
		db="$(printf '%s' "$POSTGRES_DB" | sed 's/"/""/g')"
		echo "CREATE DATABASE \"$db\"" | "$BIN/postgres" --single -D "$PGDATA" postgres >/dev/null
	fi
	echo "postgres stand-in: initialised $PGDATA (user $POSTGRES_USER, database $POSTGRES_DB)"
fi

exec "$BIN/postgres" -D "$PGDATA" -c listen_addresses='*' "$@"
