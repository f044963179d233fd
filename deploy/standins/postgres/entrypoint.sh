#!/bin/sh
# The official image's start-up, reduced to what docker-compose.yml uses.
set -eu
user=${POSTGRES_USER:-postgres}
auth=${POSTGRES_HOST_AUTH_METHOD:-trust}
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  initdb -D "$PGDATA" -U "$user" --auth="$auth" --encoding=UTF8 >/dev/null
  echo "listen_addresses = '*'" >>"$PGDATA/postgresql.conf"
  echo "host all all all $auth" >>"$PGDATA/pg_hba.conf"
  pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
  for f in /docker-entrypoint-initdb.d/*.sql; do
    [ -e "$f" ] || continue
    echo "running $f"
    psql -v ON_ERROR_STOP=1 -q -U "$user" -d postgres -f "$f"
  done
  pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
fi
[ "$1" = postgres ] && shift && exec postgres -D "$PGDATA" "$@"
exec "$@"
