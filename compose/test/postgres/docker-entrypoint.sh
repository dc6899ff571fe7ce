#!/bin/bash
# The official postgres image's first-start contract, for the stand-in image: as root,
# own the data directory and re-run as postgres; on an empty data directory, initdb
# with POSTGRES_USER and POSTGRES_PASSWORD, allow password logins from any host,
# create POSTGRES_DB with a socket-only server, then run the command.
set -euo pipefail
if [[ ${1:0:1} == - ]]; then
	set -- postgres "$@"
fi
if [[ $1 != postgres ]]; then
	exec "$@"
fi
if [[ $(id -u) == 0 ]]; then
	mkdir -p "$PGDATA"
	chown -R postgres:postgres "$PGDATA"
	chmod 0700 "$PGDATA"
	exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi

if [[ ! -s $PGDATA/PG_VERSION ]]; then
	if [[ -z ${POSTGRES_PASSWORD:-} && ${POSTGRES_HOST_AUTH_METHOD:-} != trust ]]; then
		echo "error: the database is uninitialized and POSTGRES_PASSWORD is not set" >&2
		exit 1
	fi
	user=${POSTGRES_USER:-postgres}
	db=${POSTGRES_DB:-$user}
	initdb --username="$user" --pwfile=<(printf '%s\n' "${POSTGRES_PASSWORD:-}") ${POSTGRES_INITDB_ARGS:-}
	echo "listen_addresses = '*'" >>"$PGDATA/postgresql.conf"
	printf '\nhost all all all %s\n' "${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}" >>"$PGDATA/pg_hba.conf"
	pg_ctl -D "$PGDATA" -o "-c listen_addresses='' -p ${PGPORT:-5432}" -w start
	if [[ $db != postgres ]]; then
		psql -v ON_ERROR_STOP=1 --username "$user" --dbname postgres -p "${PGPORT:-5432}" \
			--set db="$db" <<<'CREATE DATABASE :"db";'
	fi
	pg_ctl -D "$PGDATA" -m fast -w stop
	echo "PostgreSQL init process complete; ready for start up."
fi
exec "$@"
