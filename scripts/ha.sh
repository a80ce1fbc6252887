#!/usr/bin/env bash
# ha.sh COMMAND DIR — a throwaway highly available PostgreSQL on loopback,
# managed by pg_auto_failover (Debian's postgresql-15-auto-failover): a
# monitor, a primary and a synchronous standby, each with its own port, data
# directory and pg_autoctl keeper under DIR. For the chaos suite's
# database-failover scenario (docs/reliability.md), and by hand:
#
#   eval "$(scripts/ha.sh start /tmp/ha)"     # DATABASE_URL: both nodes, read-write one
#   scripts/ha.sh kill-primary /tmp/ha        # the primary's whole node: keeper and postgres
#   scripts/ha.sh wait-primary /tmp/ha        # until the standby is promoted and takes writes
#   scripts/ha.sh state /tmp/ha               # pg_autoctl show state
#   scripts/ha.sh stop /tmp/ha                # everything stopped, DIR removed
#
# start: creates what is missing and starts what is not running (idempotent),
#   waits until one node is primary and takes writes and the other is its
#   secondary, then prints exports: DATABASE_URL (multi-host,
#   target_session_attrs=read-write, connect_timeout=2, as pgx and libpq read
#   it), TIERQ_HA_PRIMARY_URL and TIERQ_HA_STANDBY_URL (one node each),
#   TIERQ_HA_MONITOR_URL, TIERQ_HA_PRIMARY (the primary's node name). Installs
#   the package when pg_autoctl is missing (as root).
# kill-primary: SIGKILL to the primary's keeper (its whole process group: the
#   keeper's services and the postgres they started), so that nothing restarts
#   it in place, as when its machine is lost; prints TIERQ_HA_KILLED (node)
#   and TIERQ_HA_KILLED_AT (Unix time, ns).
# wait-primary: waits until another node is primary for the monitor and
#   accepts a write; prints TIERQ_HA_PRIMARY, TIERQ_HA_PRIMARY_AT (Unix time
#   of the first write it accepted) and TIERQ_HA_FAILOVER_SECONDS (from the
#   kill: the manager's failover time).
#
# pg_autoctl refuses root: as root everything runs as TIERQ_HA_USER (default
# postgres, which the package creates), who must be able to reach DIR. Its
# sockets go to each node's folder (PG_REGRESS_SOCK_DIR, pg_autoctl's hook
# for that), its configuration and state too (XDG_*), so nothing is left
# outside DIR. Listens on 127.0.0.1 only, with trust authentication and no
# TLS: a test setup, never a production one.
#
# Failover settings. The manager's defaults take about 50 s from a lost
# primary to a promoted standby: the monitor waits until the node has not
# reported for node_considered_unhealthy_timeout (20 s) and failed its health
# checks, then gives the old primary primary_demote_timeout (30 s) to demote
# itself before the standby takes writes. Unless TIERQ_HA_DEFAULT_TIMEOUTS=1,
# start shortens them (docs/reliability.md, database failover):
#   monitor: pgautofailover.health_check_period=1000, health_check_timeout=1000,
#            health_check_max_retries=1, health_check_retry_delay=500,
#            node_considered_unhealthy_timeout=4000, primary_demote_timeout=5000
#   keepers: timeout.network_partition_timeout=3 — a primary cut off from the
#            monitor and its standby demotes itself after 3 s, before the
#            monitor's 5 s demote timeout lets the standby take writes, so a
#            partition still cannot leave two primaries.
set -euo pipefail

cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|kill-primary|wait-primary|state|stop DIR" >&2; exit 2; }
case "$dir" in /*) ;; *) dir="$(pwd)/$dir" ;; esac

hauser=${TIERQ_HA_USER:-postgres}
dbname=${TIERQ_HA_DB:-tierq}
bindir=${TIERQ_HA_BINDIR:-/usr/lib/postgresql/15/bin} # the package's PostgreSQL
nodes=(node1 node2)
wait_limit=${TIERQ_HA_WAIT:-180}

self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
log() { echo "ha.sh: $*" >&2; }
die() { log "$*"; exit 1; }
now() { date +%s.%N; }
# since T: seconds from Unix time T to now; over T N: more than N seconds since T.
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
over() { awk -v a="$1" -v b="$(now)" -v n="$2" 'BEGIN { exit !(b - a > n) }'; }

# ensure_installed: pg_autoctl and the server binaries it drives.
ensure_installed() {
  if command -v pg_autoctl >/dev/null 2>&1 && [ -x "$bindir/pg_ctl" ] && [ -x "$bindir/psql" ]; then
    return
  fi
  [ "$(id -u)" = 0 ] || die "no pg_autoctl or no $bindir/pg_ctl, and not root: install Debian's postgresql-15-auto-failover"
  log "installing pg_auto_failover (apt-get install postgresql-15-auto-failover)"
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql-15-auto-failover >/dev/null
  command -v pg_autoctl >/dev/null 2>&1 || die "the package is installed but pg_autoctl is not on PATH"
  [ -x "$bindir/pg_ctl" ] || die "no $bindir/pg_ctl after installing: set TIERQ_HA_BINDIR"
}

# as_node NAME COMMAND…: runs COMMAND as the HA user with node NAME's
# environment (sockets, configuration and state under DIR/NAME).
as_node() {
  local name=$1; shift
  local nd="$dir/$name"
  local env=(env -i PATH="$bindir:/usr/local/bin:/usr/bin:/bin" HOME="$nd" LANG=C.UTF-8
    XDG_CONFIG_HOME="$nd/config" XDG_DATA_HOME="$nd/share" XDG_RUNTIME_DIR="$nd/run"
    PGHOST="$nd" PG_REGRESS_SOCK_DIR="$nd")
  if [ "$(id -u)" = 0 ]; then
    ${as_node_exec:-} setpriv --reuid="$hauser" --regid="$hauser" --init-groups "${env[@]}" "$@"
  else
    ${as_node_exec:-} "${env[@]}" "$@"
  fi
}

# dbuser: the nodes' superuser, the one initdb made: the OS user running them.
dbuser() { if [ "$(id -u)" = 0 ]; then echo "$hauser"; else id -un; fi; }

port_of() { cat "$dir/$1/port"; }
node_url() { echo "postgres://$(dbuser)@127.0.0.1:$(port_of "$1")/${2:-$dbname}?sslmode=disable&connect_timeout=2"; }
monitor_url() { node_url monitor pg_auto_failover; }

# sql URL QUERY: one query, unaligned, nothing but its rows; fails quietly.
sql() { PGOPTIONS='-c statement_timeout=3000' "$bindir/psql" "$1" -XAtqc "$2" 2>/dev/null; }

# free_port: a loopback port nothing answers on and no other node of DIR
# took, outside the kernel's range of ephemeral ports: a client connection's
# local port there (or its TIME-WAIT) would make postgres fail to bind, and
# pg_autoctl retry for a long time.
free_port() {
  local p taken lo hi base span
  taken=$(cat "$dir"/*/port 2>/dev/null || true)
  read -r lo hi </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || { lo=32768; hi=60999; }
  if [ "$hi" -le 64000 ]; then base=$((hi + 1)) span=$((65000 - hi))
  elif [ "$lo" -ge 12000 ]; then base=$((lo - 10000)) span=9000
  else base=56100 span=4000; fi
  for _ in $(seq 200); do
    p=$((base + RANDOM % span))
    grep -qx "$p" <<<"$taken" && continue
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && continue
    echo "$p"; return
  done
  die "no free port found in $base-$((base + span))"
}

# keeper_pid NAME: the pid of NAME's running `pg_autoctl run`, or nothing.
keeper_pid() {
  local pid
  pid=$(cat "$dir/$1/pid" 2>/dev/null) || return 0
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 0
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "pg_autoctl run --pgdata $dir/$1/data" && echo "$pid"
  return 0
}

# run_keeper NAME: `pg_autoctl run` in the background, in a session and
# process group of its own (its postgres stays in that group).
run_keeper() {
  local name=$1
  [ -n "$(keeper_pid "$name")" ] && return
  log "starting $name's keeper (log: $dir/$name/keeper.log)"
  (cd "$dir/$name" && exec setsid bash -c 'echo $$ > pid.tmp && mv pid.tmp pid && exec "$@"' ha-keeper \
    "$self" as-node "$dir" "$name" pg_autoctl run --pgdata "$dir/$name/data" \
    >>"$dir/$name/keeper.log" 2>&1 </dev/null &)
  for _ in $(seq 50); do [ -n "$(keeper_pid "$name")" ] && return; sleep 0.1; done
  die "$name's keeper did not start: $(tail -5 "$dir/$name/keeper.log")"
}

# children_of PID: the pids of PID's children, from /proc (no procps
# needed): each stat line is "pid (comm) state ppid …", comm may hold spaces.
children_of() {
  cat /proc/[0-9]*/stat 2>/dev/null | awk -v p="$1" '{ pid = $1; sub(/^.*\) /, ""); if ($2 == p) print pid }' | tr '\n' ' ' || true
}

# kill_keeper NAME SIGNAL: SIGNAL to the keeper's process group.
kill_keeper() {
  local pid
  pid=$(keeper_pid "$1")
  [ -n "$pid" ] && kill "-$2" -- "-$pid" 2>/dev/null || true
}

# mkdir_node NAME: the node's folder, owned by the HA user.
mkdir_node() {
  mkdir -p "$dir/$1"
  [ "$(id -u)" = 0 ] && chown "$hauser" "$dir/$1"
  [ -f "$dir/$1/port" ] || free_port >"$dir/$1/port"
}

# states: "name reportedstate goalstate" per node, from the monitor.
states() { sql "$(monitor_url)" "SELECT nodename, reportedstate, goalstate FROM pgautofailover.node ORDER BY nodeid" | tr '|' ' '; }

# primary_name: the node the monitor has as primary (reported and assigned).
primary_name() { states | awk '($2 == "primary" || $2 == "wait_primary" || $2 == "single") && $3 == $2 { print $1; exit }'; }

# writable NAME: does NAME's postgres accept a write now?
writable() {
  sql "$(node_url "$1")" "INSERT INTO tierq_ha_probe VALUES (1, now()) ON CONFLICT (id) DO UPDATE SET at = excluded.at RETURNING 1" | grep -qx 1
}

monitor_settings=(
  "pgautofailover.health_check_period=1000"
  "pgautofailover.health_check_timeout=1000"
  "pgautofailover.health_check_max_retries=1"
  "pgautofailover.health_check_retry_delay=500"
  "pgautofailover.node_considered_unhealthy_timeout=4000"
  "pgautofailover.primary_demote_timeout=5000"
)
keeper_settings=("timeout.network_partition_timeout=3")

start_monitor() {
  mkdir_node monitor
  if [ ! -f "$dir/monitor/data/PG_VERSION" ]; then
    log "creating the monitor on 127.0.0.1:$(port_of monitor)"
    as_node monitor pg_autoctl create monitor --pgdata "$dir/monitor/data" --pgport "$(port_of monitor)" \
      --pgctl "$bindir/pg_ctl" --hostname 127.0.0.1 --listen 127.0.0.1 --auth trust --no-ssl \
      >>"$dir/monitor/create.log" 2>&1 || die "pg_autoctl create monitor failed: $(tail -20 "$dir/monitor/create.log")"
  fi
  run_keeper monitor
  local start; start=$(now)
  until [ "$(sql "$(monitor_url)" "SELECT 1")" = 1 ]; do
    over "$start" 60 && die "the monitor does not answer after 60 s: $(tail -20 "$dir/monitor/keeper.log")"
    sleep 0.2
  done
  local kv
  if [ "${TIERQ_HA_DEFAULT_TIMEOUTS:-}" != 1 ]; then
    for kv in "${monitor_settings[@]}"; do
      sql "$(monitor_url)" "ALTER SYSTEM SET ${kv%%=*} = '${kv#*=}'" >/dev/null
    done
  fi
  sql "$(monitor_url)" "SELECT pg_reload_conf()" >/dev/null
}

# create_node NAME: registers NAME with the monitor and initialises it: the
# first one as the primary (initdb), the second as its standby
# (pg_basebackup from the primary, which must be running).
create_node() {
  local name=$1
  mkdir_node "$name"
  [ -f "$dir/$name/created" ] && return
  log "creating $name on 127.0.0.1:$(port_of "$name")"
  local kv
  local mon="postgres://autoctl_node@127.0.0.1:$(port_of monitor)/pg_auto_failover?sslmode=disable"
  as_node "$name" pg_autoctl create postgres --pgdata "$dir/$name/data" --pgport "$(port_of "$name")" \
    --pgctl "$bindir/pg_ctl" --hostname 127.0.0.1 --listen 127.0.0.1 --name "$name" --dbname "$dbname" \
    --auth trust --no-ssl --monitor "$mon" \
    >>"$dir/$name/create.log" 2>&1 || die "pg_autoctl create postgres ($name) failed: $(tail -20 "$dir/$name/create.log")"
  if [ "$name" = node1 ]; then
    # Room for a test's processes (initdb's default is 100); the standby
    # copies postgresql.conf from here, and a standby needs at least the
    # primary's max_connections. After pg_autoctl's includes, so it wins.
    echo "max_connections = ${TIERQ_HA_MAX_CONNECTIONS:-300} # ha.sh" >>"$dir/$name/data/postgresql.conf"
  fi
  if [ "${TIERQ_HA_DEFAULT_TIMEOUTS:-}" != 1 ]; then
    for kv in "${keeper_settings[@]}"; do
      as_node "$name" pg_autoctl config set --pgdata "$dir/$name/data" "${kv%%=*}" "${kv#*=}" >/dev/null
    done
  fi
  touch "$dir/$name/created"
}

# wait_ready: one node primary and taking writes, the other its secondary
# (the primary then commits synchronously to it).
wait_ready() {
  local start st p s; start=$(now)
  while :; do
    st=$(states || true)
    p=$(awk '$2 == "primary" && $3 == "primary" { print $1 }' <<<"$st")
    s=$(awk '$2 == "secondary" && $3 == "secondary" { print $1 }' <<<"$st")
    if [ -n "$p" ] && [ -n "$s" ]; then
      sql "$(node_url "$p")" "CREATE TABLE IF NOT EXISTS tierq_ha_probe (id int PRIMARY KEY, at timestamptz)" >/dev/null || true
      writable "$p" && break
    fi
    over "$start" $wait_limit && die "no primary with a secondary after ${wait_limit}s: $(echo "$st" | tr '\n' ';')"
    sleep 0.2
  done
  echo "$p $s"
}

start() {
  ensure_installed
  mkdir -p "$dir"
  if [ "$(id -u)" = 0 ]; then
    id "$hauser" >/dev/null 2>&1 || die "no user $hauser (set TIERQ_HA_USER)"
    chown "$hauser" "$dir"
    setpriv --reuid="$hauser" --regid="$hauser" --init-groups test -w "$dir" -a -x "$dir" ||
      die "$dir is not reachable by user $hauser: every parent folder needs x for others"
  fi
  local began; began=$(now)
  start_monitor
  # The first node becomes the primary; it must run before the second can
  # copy it.
  create_node node1
  run_keeper node1
  create_node node2
  run_keeper node2
  local ready p s; ready=$(wait_ready); p=${ready% *}; s=${ready#* }
  local sync; sync=$(sql "$(node_url "$p")" "SHOW synchronous_standby_names")
  log "ready in $(since "$began")s: $p primary, $s secondary (synchronous_standby_names: $sync)"
  echo "export DATABASE_URL='postgres://$(dbuser)@127.0.0.1:$(port_of node1),127.0.0.1:$(port_of node2)/$dbname?sslmode=disable&target_session_attrs=read-write&connect_timeout=2'"
  echo "export TIERQ_HA_PRIMARY='$p'"
  echo "export TIERQ_HA_PRIMARY_URL='$(node_url "$p")'"
  echo "export TIERQ_HA_STANDBY_URL='$(node_url "$s")'"
  echo "export TIERQ_HA_MONITOR_URL='$(monitor_url)'"
}

kill_primary() {
  local p pid pgpid start
  p=$(primary_name)
  [ -n "$p" ] || die "the monitor has no primary: $(states | tr '\n' ';')"
  pid=$(keeper_pid "$p")
  [ -n "$pid" ] || die "$p's keeper is not running"
  pgpid=$(head -1 "$dir/$p/data/postmaster.pid" 2>/dev/null || true)
  # The postmaster is in the keeper's process group, but each of its children
  # (backends, walsenders, checkpointer…) makes a session of its own: they
  # get the signal too, at once, as when the machine is lost.
  local children=""
  [ -n "$pgpid" ] && children=$(children_of "$pgpid")
  # shellcheck disable=SC2086 # one pid a word
  kill -KILL -- "-$pid" $pgpid $children 2>/dev/null || true
  local at; at=$(now)
  echo "$p $at" >"$dir/killed"
  start=$(now)
  while (exec 3<>"/dev/tcp/127.0.0.1/$(port_of "$p")") 2>/dev/null || [ -n "$(keeper_pid "$p")" ]; do
    over "$start" 10 && die "$p still answers 10 s after SIGKILL"
    sleep 0.05
  done
  log "killed $p (keeper $pid, postgres $pgpid)"
  echo "export TIERQ_HA_KILLED='$p'"
  echo "export TIERQ_HA_KILLED_AT='$at'"
}

wait_primary() {
  local killed at p="" n
  [ -f "$dir/killed" ] || die "no primary was killed (kill-primary first)"
  read -r killed at <"$dir/killed"
  while :; do
    for n in "${nodes[@]}"; do
      [ "$n" = "$killed" ] && continue
      if states | awk -v n="$n" '$1 == n && ($2 == "primary" || $2 == "wait_primary") { f = 1 } END { exit !f }' && writable "$n"; then
        p=$n; break 2
      fi
    done
    over "$at" $wait_limit && die "no new primary ${wait_limit}s after the kill: $(states | tr '\n' ';')"
    sleep 0.1
  done
  local ready; ready=$(now)
  log "$p accepts writes, $(awk -v a="$at" -v b="$ready" 'BEGIN { printf "%.2f", b - a }')s after $killed was killed"
  echo "export TIERQ_HA_PRIMARY='$p'"
  echo "export TIERQ_HA_PRIMARY_AT='$ready'"
  echo "export TIERQ_HA_FAILOVER_SECONDS='$(awk -v a="$at" -v b="$ready" 'BEGIN { printf "%.2f", b - a }')'"
}

stop() {
  [ -d "$dir" ] || return 0
  local n pid
  for n in "${nodes[@]}" monitor; do kill_keeper "$n" TERM; done
  for _ in $(seq 50); do
    pid=""
    for n in "${nodes[@]}" monitor; do pid+=$(keeper_pid "$n"); done
    [ -z "$pid" ] && break
    sleep 0.1
  done
  # What did not stop: the keeper's group, its postmaster and the
  # postmaster's children, which each run in a session of their own (a
  # background worker of the monitor outlives a killed postmaster).
  local children
  for n in "${nodes[@]}" monitor; do
    kill_keeper "$n" KILL
    pid=$(head -1 "$dir/$n/data/postmaster.pid" 2>/dev/null || true)
    if [ -n "$pid" ] && tr "\\0" " " 2>/dev/null <"/proc/$pid/cmdline" | grep -q -- "-D $dir/$n/data"; then
      children=$(children_of "$pid")
      # shellcheck disable=SC2086 # one pid a word
      kill -KILL "$pid" $children 2>/dev/null || true
    fi
  done
  rm -rf "$dir"
  log "stopped and removed $dir"
}

case "$cmd" in
  start) start ;;
  kill-primary) kill_primary ;;
  wait-primary) wait_primary ;;
  state) as_node monitor pg_autoctl show state --pgdata "$dir/monitor/data" ;;
  stop) stop ;;
  as-node) shift 2; as_node_exec=exec as_node "$@" ;; # internal: run_keeper's child, replaced by pg_autoctl
  *) echo "usage: $0 start|kill-primary|wait-primary|state|stop DIR" >&2; exit 2 ;;
esac
