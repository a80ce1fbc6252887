#!/usr/bin/env bash
# pg.sh MODE — find or start a PostgreSQL server for tierq and print the shell
# exports that point at it. MODE is "run" (database tierq, DATABASE_URL),
# "test" (database tierq_test, TEST_DATABASE_URL) or "bench" (database
# tierq_bench, DATABASE_URL; tierctl bench works in schemas of its own there).
# MODE "bindir" only makes sure the server binaries are installed and prints
# TIERQ_PG_BINDIR (the chaos suite runs a cluster of its own with them).
#
#   eval "$(scripts/pg.sh test)"
#
# In order:
#   1. DATABASE_URL / TEST_DATABASE_URL, if set and answering.
#   2. A server on 127.0.0.1:5432 answering as user postgres (trust auth).
#   3. A throwaway cluster under .tierq/pg (started, or created and started):
#      installs the Debian postgresql package if no server binaries are found,
#      and runs initdb/pg_ctl as an unprivileged user, since initdb refuses root.
# Set TIERQ_LOCAL_PG=1 to skip 1 and 2 and always use the throwaway cluster.
# When this call started the cluster it also prints TIERQ_PG_STARTED=1, so the
# caller can stop it when done: scripts/pg.sh stop
set -euo pipefail

mode=${1:-test}
root=$(cd "$(dirname "$0")/.." && pwd)
state="$root/.tierq"
pgdir="$state/pg"
pguser=tierq-pg

case "$mode" in
  run)  var=DATABASE_URL;      dbname=tierq ;;
  test) var=TEST_DATABASE_URL; dbname=tierq_test ;;
  bench) var=DATABASE_URL;     dbname=tierq_bench ;;
  stop)
    bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
    [ -f "$pgdir/data/postmaster.pid" ] || { echo "no throwaway cluster running" >&2; exit 0; }
    as_pg() { if [ "$(id -u)" = 0 ]; then su -s /bin/sh "$pguser" -c "$*"; else sh -c "$*"; fi; }
    as_pg "'$bindir/pg_ctl' -D '$pgdir/data' stop -m fast" >&2
    exit 0 ;;
  bindir) ;;
  *) echo "usage: $0 run|test|bench|bindir|stop" >&2; exit 2 ;;
esac

log() { echo "pg.sh: $*" >&2; }

# server_bindir: the newest PostgreSQL server binaries, installed (Debian's
# postgresql package) when there are none and this runs as root.
server_bindir() {
  local dir
  dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
  if [ -z "$dir" ] || [ ! -x "$dir/initdb" ]; then
    [ "$(id -u)" = 0 ] || { log "no PostgreSQL server binaries and not root: install the postgresql package"; exit 1; }
    log "installing PostgreSQL (apt-get install postgresql)"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >&2
    dir=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
  fi
  echo "$dir"
}

if [ "$mode" = bindir ]; then
  echo "export TIERQ_PG_BINDIR='$(server_bindir)'"
  exit 0
fi

# answers URL: does a server accept connections at URL? Uses psql when present,
# else bash's /dev/tcp to the host and port (good enough to pick a server).
answers() {
  if command -v psql >/dev/null 2>&1; then
    PGCONNECT_TIMEOUT=3 psql "$1" -XAtqc 'select 1' >/dev/null 2>&1
  else
    local hostport=${1#*@}; hostport=${hostport%%/*}
    (exec 3<>"/dev/tcp/${hostport%:*}/${hostport#*:}") 2>/dev/null
  fi
}

# ensure_db ADMIN_URL NAME: create database NAME if it does not exist.
ensure_db() {
  command -v psql >/dev/null 2>&1 || return 0 # the Go test helper creates it too
  if [ -z "$(psql "$1" -XAtqc "select 1 from pg_database where datname = '$2'")" ]; then
    psql "$1" -XAtqc "create database \"$2\"" >/dev/null 2>&1 || true
  fi
}

emit() {
  echo "export $var='$1'"
  log "$var=$1"
}

# 1. The caller's URL.
if [ "${TIERQ_LOCAL_PG:-}" != 1 ] && [ -n "${!var:-}" ]; then
  if answers "${!var}"; then emit "${!var}"; exit 0; fi
  log "$var is set but does not answer; looking further"
fi

# 2. A local server on the default port.
if [ "${TIERQ_LOCAL_PG:-}" != 1 ] && answers "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"; then
  ensure_db "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable" "$dbname"
  emit "postgres://postgres@127.0.0.1:5432/$dbname?sslmode=disable"
  exit 0
fi

# 3. A throwaway cluster.
bindir=$(server_bindir)

mkdir -p "$pgdir"
if [ "$(id -u)" = 0 ]; then
  id "$pguser" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$pguser"
  chown "$pguser" "$pgdir"
  # The server needs to reach its data directory through every parent folder.
  if ! su -s /bin/sh "$pguser" -c "test -w '$pgdir'"; then
    pgdir=/tmp/tierq-pg-$(echo "$root" | md5sum | cut -c1-8)
    log "$state is not reachable by user $pguser; using $pgdir"
    mkdir -p "$pgdir" && chown "$pguser" "$pgdir"
  fi
  as_pg() { su -s /bin/sh "$pguser" -c "$*"; }
else
  as_pg() { sh -c "$*"; }
fi

if [ ! -f "$pgdir/data/PG_VERSION" ]; then
  log "creating a throwaway cluster in $pgdir/data"
  as_pg "'$bindir/initdb' -D '$pgdir/data' -U postgres --auth=trust -E UTF8 --locale=C.UTF-8" >/dev/null
fi

port=$(cat "$pgdir/port" 2>/dev/null || true)
if ! as_pg "'$bindir/pg_ctl' -D '$pgdir/data' status" >/dev/null 2>&1; then
  for p in $(seq 55432 55532); do
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then port=$p; break; fi
  done
  echo "$port" > "$pgdir/port.tmp" && mv "$pgdir/port.tmp" "$pgdir/port"
  log "starting the throwaway cluster on 127.0.0.1:$port (log: $pgdir/server.log)"
  # Throwaway: no fsync; WAL sized so checkpoints do not throttle benchmarks.
  echo "export TIERQ_PG_STARTED=1" # the caller stops what it started: scripts/pg.sh stop
  as_pg "'$bindir/pg_ctl' -D '$pgdir/data' -l '$pgdir/server.log' -w -t 60 start -o \"-p $port -c listen_addresses=127.0.0.1 -c unix_socket_directories='' -c max_connections=200 -c fsync=off -c full_page_writes=off -c synchronous_commit=off -c max_wal_size=8GB\"" >/dev/null
fi

ensure_db "postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable" "$dbname"
emit "postgres://postgres@127.0.0.1:$port/$dbname?sslmode=disable"
