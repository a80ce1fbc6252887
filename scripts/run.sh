#!/usr/bin/env bash
# run.sh — `make run`: a working tierq on this machine in one command.
#
# Finds or starts PostgreSQL (scripts/pg.sh), migrates, starts one worker per
# service (analyzer and specgen), the scheduler and the API in the background,
# runs `tierctl demo` (a free flood beside a paid trickle, about two minutes;
# DEMO=off skips it), enqueues a mix of real analyses of this repository's
# directories across every tier, and shows the live view (`tierctl watch`)
# until Ctrl-C.
#
# Stopping, as production stops (docs/operations.md, "Stopping"): the
# workers, the scheduler and the API run in sessions of their own (setsid),
# so the terminal's Ctrl-C (SIGINT) and hang-up (SIGHUP) reach this script
# and its foreground tierctl only. On the first of SIGINT, SIGTERM or SIGHUP
# the script sends each process exactly one SIGTERM and waits for all of
# them: running jobs get SOFT_STOP_TIMEOUT (default 25s) to finish, and a job
# still running then goes back to its queue. A second Ctrl-C while stopping
# sends nothing (a second signal would kill a worker at once); it prints
# what is still running and how to kill it. The script ends when every
# process it started has exited, so the next run finds the API's port free.
#
# Variables beyond the processes' own: DEMO (on|off), DEMO_SLEEP_MS,
# DEMO_FLAGS (extra tierctl demo flags), DEMO_JOBS (real analyses enqueued
# after the demo, default 60), TIERQ_BIN_DIR (where the binaries are built,
# default .tierq/bin), TIERQ_LOG_DIR (the processes' logs, default
# .tierq/logs).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

bin=${TIERQ_BIN_DIR:-$root/.tierq/bin}
logs=${TIERQ_LOG_DIR:-$root/.tierq/logs}
soft_stop=${SOFT_STOP_TIMEOUT:-25s}

pids=()     # the workers, the scheduler and the API
names=()    # their names, by index
client=     # the foreground tierctl (demo, enqueue, watch) while one runs
stopping=0

# join ITEMS...: the items separated by ", ".
join() { local out= item; for item in "$@"; do out+="${out:+, }$item"; done; echo "${out:-nothing}"; }

# say prints to the terminal, which may be gone (SIGHUP): never fatal.
say() { echo "$@" 2>/dev/null || true; }

# stop sends each process one SIGTERM, once, and waits for every one.
stop() {
  trap '' PIPE
  set +e
  if [ "$stopping" = 1 ]; then return; fi
  stopping=1
  trap still_stopping INT
  trap '' TERM HUP
  if [ -n "$client" ]; then kill -TERM "$client" 2>/dev/null; fi # tierctl takes a second signal as none
  if [ ${#pids[@]} -gt 0 ]; then
    say
    say "stopping: one SIGTERM each to the workers, the scheduler and the API; running jobs get up to SOFT_STOP_TIMEOUT=$soft_stop to finish, then go back to their queue (Ctrl-C again does not cut this short)"
    kill -TERM "${pids[@]}" 2>/dev/null
    local i status summary=()
    for i in "${!pids[@]}"; do
      # wait returns early when a trapped signal (a second Ctrl-C) arrives,
      # and a wait cut short as the process exits can lose its status (bash
      # then reported "exit -1"): wait only once the process is gone (this
      # shell has reaped it), which returns its status at once. A signal
      # meanwhile runs its trap after the current sleep.
      while kill -0 "${pids[$i]}" 2>/dev/null; do sleep 0.1; done
      wait "${pids[$i]}" 2>/dev/null; status=$?
      summary+=("${names[$i]} exit $status")
    done
    say "stopped: $(join "${summary[@]}"). Logs: $logs/"
    if command -v psql >/dev/null 2>&1; then
      say "jobs left running: $(psql "$DATABASE_URL" -XAtqc "select count(*) from ${DATABASE_SCHEMA:+\"$DATABASE_SCHEMA\".}river_job where state = 'running'" 2>&1)"
    fi
  fi
  if [ -n "$client" ]; then wait "$client" 2>/dev/null; fi
  if [ "${TIERQ_PG_STARTED:-}" = 1 ]; then scripts/pg.sh stop; fi
}

# still_stopping names the processes still running and the kill line for
# them alone: the pid of one that exited (the scheduler and the API stop at
# once) is free for the system to give another process.
still_stopping() {
  local i running=() alive=()
  for i in "${!pids[@]}"; do
    if kill -0 "${pids[$i]}" 2>/dev/null; then
      running+=("${names[$i]} (pid ${pids[$i]})")
      alive+=("${pids[$i]}")
    fi
  done
  say
  if [ ${#alive[@]} -eq 0 ]; then
    say "still stopping, no second signal sent: every process has exited"
    return
  fi
  say "still stopping, no second signal sent: waiting for $(join "${running[@]}") to finish running jobs (at most SOFT_STOP_TIMEOUT=$soft_stop); to kill them at once: kill -KILL ${alive[*]}"
}

on_signal() {
  stop
  exit 0
}
trap stop EXIT
trap on_signal INT TERM HUP

# start NAME LOG CMD...: CMD in the background, in a session of its own (no
# terminal signals), its output in LOG.
start() {
  local name=$1 log=$2
  shift 2
  if command -v setsid >/dev/null 2>&1; then
    # Not a process group leader (this shell runs without job control), so
    # setsid(1) calls setsid() and execs: $! is the process itself.
    setsid "$@" </dev/null >"$log" 2>&1 &
  else
    set -m # a process group of its own: the terminal signals only the foreground group
    "$@" </dev/null >"$log" 2>&1 &
    set +m
  fi
  pids+=($!)
  names+=("$name")
}

# foreground CMD...: a tierctl command in this script's process group (so
# Ctrl-C reaches it), waited for in a way a signal to this script
# interrupts: the script then stops it too.
foreground() {
  "$@" &
  client=$!
  local status=0
  wait "$client" || status=$?
  client=
  return "$status"
}

eval "$(scripts/pg.sh run)"
export DATABASE_URL
# The demo analyses this checkout: the analyzer, the API and tierctl enqueue
# accept targets in it and nowhere else.
export ANALYSIS_ROOTS=${ANALYSIS_ROOTS:-$root}
# Dead letters are drained every 5s here (30s by default), so that a job
# that failed every attempt shows up quickly.
export DLQ_DRAIN_INTERVAL=${DLQ_DRAIN_INTERVAL:-5s}

mkdir -p "$bin" "$logs"
echo "building into $bin..."
go build -o "$bin/" ./cmd/...

"$bin/tierctl" migrate

# The demo's flood is the load-test workload (jobs that only sleep), which
# make run's own workers, and only they, register.
for svc in analyzer specgen; do
  start "worker $svc" "$logs/worker-$svc.log" env LOAD_TEST_WORKLOAD=true WORKER_SERVICE=$svc "$bin/worker"
  echo "worker $svc started (pid ${pids[-1]}, log $logs/worker-$svc.log)"
done

start scheduler "$logs/scheduler.log" "$bin/scheduler"
echo "scheduler started (pid ${pids[-1]}, log $logs/scheduler.log): retries, rescue, aging, escalation, cron, dead letters"

# Local development tokens, printed so that curl can use them.
export API_TOKEN=${API_TOKEN:-dev-producer-token-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')}
export API_ADMIN_TOKEN=${API_ADMIN_TOKEN:-dev-admin-token-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')}
export API_ADDR=${API_ADDR:-127.0.0.1:8081}
start api "$logs/api.log" "$bin/api"
echo "api started on http://$API_ADDR (pid ${pids[-1]}, log $logs/api.log); analysis targets must be in ANALYSIS_ROOTS=$ANALYSIS_ROOTS"
echo "River UI: http://$API_ADDR/riverui/ (user: any, password: $API_ADMIN_TOKEN)"
echo "Console: http://$API_ADDR/console/ (user: your name, recorded as the actor of what you do there; password: $API_ADMIN_TOKEN)"
echo
echo "In a second terminal, in this directory, paste these to use curl and tierctl (the README's session):"
echo "  export API_URL='http://$API_ADDR' API_TOKEN='$API_TOKEN' API_ADMIN_TOKEN='$API_ADMIN_TOKEN'"
echo "  export DATABASE_URL='$DATABASE_URL'${DATABASE_SCHEMA:+ DATABASE_SCHEMA='$DATABASE_SCHEMA'} PATH=\"$bin:\$PATH\""

if [ "${DEMO:-on}" != off ]; then
  echo
  echo "the demo runs the load-test workload: jobs that sleep ${DEMO_SLEEP_MS:-100} ms on average (no real analysis);"
  echo "watch the free backlog grow and drain while paid waits stay low (also in River UI). DEMO=off skips it."
  # shellcheck disable=SC2086 # DEMO_FLAGS is a list of flags
  foreground "$bin/tierctl" demo --sleep-ms "${DEMO_SLEEP_MS:-100}" ${DEMO_FLAGS:-} || echo "demo failed (see above); everything stays up"
  echo
  echo "demo done; everything stays up for exploring: curl $API_ADDR, River UI http://$API_ADDR/riverui/ and the console http://$API_ADDR/console/ (password: $API_ADMIN_TOKEN)"
fi

# Real analyses of this checkout's directories, in every tier (after the
# demo, so that its waits are the demo's own).
targets=(--target "$root")
for d in "$root"/*/; do targets+=(--target "${d%/}"); done
foreground "$bin/tierctl" enqueue --count "${DEMO_JOBS:-60}" "${targets[@]}"

echo "watching queues; Ctrl-C stops everything (running jobs finish first)"
foreground "$bin/tierctl" watch || true
