# Sourced by the bench/ha scripts: a throwaway PostgreSQL server from
# Debian's postgresql package, on a unix socket only (no TCP), in a fresh
# directory under /tmp, run as the `postgres` user when we are root.
#
#   pg_start            starts it; sets PG_DIR (socket directory) and
#                       PG_BIN; stops it on EXIT (pg_stop)
#   pg_createdb NAME    a fresh database
#   pg_url NAME         Dial's URL of database NAME
#   pg_sqlalchemy NAME  SQLAlchemy's URL of it (psycopg2), for Optuna
#   pg_stop             stops it (immediate) and removes the directory

PG_BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
PG_DIR=

pg_as() {
  if [[ $(id -u) == 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}

pg_start() {
  if [[ -z "$PG_BIN" || ! -x "$PG_BIN/initdb" ]]; then
    echo "no PostgreSQL server: apt-get install postgresql" >&2
    return 2
  fi
  PG_DIR=$(mktemp -d /tmp/dial-pgbench-XXXXXX)
  [[ $(id -u) == 0 ]] && chown postgres: "$PG_DIR"
  trap pg_stop EXIT
  pg_as "$PG_BIN/initdb" -D "$PG_DIR/data" -A trust -U postgres -E UTF8 \
    --no-sync >"$PG_DIR/initdb.log" 2>&1 || return 1
  # Its output must not hold our pipes open: pg_ctl leaves the server
  # running with the descriptors it was given.
  pg_as "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -w -t 60 -l "$PG_DIR/server.log" \
    -o "-k $PG_DIR -c listen_addresses='' -c max_connections=100" \
    start </dev/null >/dev/null 2>&1
}

pg_createdb() {
  pg_as "$PG_BIN/createdb" -h "$PG_DIR" -U postgres "$1" </dev/null
}

pg_url() { echo "postgresql:///$1?host=$PG_DIR&user=postgres"; }
pg_sqlalchemy() { echo "postgresql+psycopg2://postgres@/$1?host=$PG_DIR"; }

pg_stop() {
  [[ -n "$PG_DIR" && -d "$PG_DIR" ]] || return 0
  pg_as "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -w -m immediate stop \
    </dev/null >/dev/null 2>&1
  rm -rf "$PG_DIR"
  PG_DIR=
}
