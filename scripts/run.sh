#!/usr/bin/env bash
# run.sh — `make run`: a working tierq on this machine in one command.
#
# Finds or starts PostgreSQL (scripts/pg.sh), migrates, starts one worker per
# service (analyzer and specgen), the scheduler and the API in the background,
# runs `tierctl demo` (a free flood beside a paid trickle, about two minutes;
# DEMO=off skips it), enqueues a mix of real analyses of this repository's
# directories across every tier, and shows the live view (`tierctl watch`)
# until Ctrl-C, which stops the workers gracefully.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

eval "$(scripts/pg.sh run)"
export DATABASE_URL
# The demo analyses this checkout: the analyzer, the API and tierctl enqueue
# accept targets in it and nowhere else.
export ANALYSIS_ROOTS=${ANALYSIS_ROOTS:-$root}
# Stop a throwaway cluster this run started, even if a step below fails.
trap '[ "${TIERQ_PG_STARTED:-}" = 1 ] && scripts/pg.sh stop' EXIT

mkdir -p .tierq/bin .tierq/logs
echo "building..."
go build -o .tierq/bin/ ./cmd/...

.tierq/bin/tierctl migrate

pids=()
stop_workers() {
  trap - INT TERM
  if [ ${#pids[@]} -gt 0 ]; then
    echo; echo "stopping workers, scheduler and api (they finish running work first)..."
    kill -TERM "${pids[@]}" 2>/dev/null || true
    wait "${pids[@]}" 2>/dev/null || true
    echo "stopped. Logs: .tierq/logs/"
  fi
  if [ "${TIERQ_PG_STARTED:-}" = 1 ]; then
    scripts/pg.sh stop
  fi
}
trap stop_workers EXIT
trap 'exit 0' INT TERM

# The demo's flood is the load-test workload (jobs that only sleep), which
# make run's own workers, and only they, register.
for svc in analyzer specgen; do
  LOAD_TEST_WORKLOAD=true WORKER_SERVICE=$svc .tierq/bin/worker >".tierq/logs/worker-$svc.log" 2>&1 &
  pids+=($!)
  echo "worker $svc started (pid $!, log .tierq/logs/worker-$svc.log)"
done

.tierq/bin/scheduler >.tierq/logs/scheduler.log 2>&1 &
pids+=($!)
echo "scheduler started (pid $!, log .tierq/logs/scheduler.log): retries, rescue, aging, escalation, cron, dead letters"

# Local development tokens, printed so that curl can use them.
export API_TOKEN=${API_TOKEN:-dev-producer-token-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')}
export API_ADMIN_TOKEN=${API_ADMIN_TOKEN:-dev-admin-token-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')}
export API_ADDR=${API_ADDR:-127.0.0.1:8081}
.tierq/bin/api >.tierq/logs/api.log 2>&1 &
pids+=($!)
echo "api started on http://$API_ADDR (pid $!, log .tierq/logs/api.log); analysis targets must be in ANALYSIS_ROOTS=$ANALYSIS_ROOTS"
echo "  API_TOKEN=$API_TOKEN"
echo "  API_ADMIN_TOKEN=$API_ADMIN_TOKEN"
echo "River UI: http://$API_ADDR/riverui/ (user: any, password: $API_ADMIN_TOKEN)"

if [ "${DEMO:-on}" != off ]; then
  echo
  echo "the demo runs the load-test workload: jobs that sleep ${DEMO_SLEEP_MS:-100} ms on average (no real analysis);"
  echo "watch the free backlog grow and drain while paid waits stay low (also in River UI). DEMO=off skips it."
  .tierq/bin/tierctl demo --sleep-ms "${DEMO_SLEEP_MS:-100}" ${DEMO_FLAGS:-} || echo "demo failed (see above); everything stays up"
  echo
  echo "demo done; everything stays up for exploring: curl http://$API_ADDR, River UI http://$API_ADDR/riverui/ (user: any, password: $API_ADMIN_TOKEN)"
fi

# Real analyses of this checkout's directories, in every tier (after the
# demo, so that its waits are the demo's own).
targets=(--target "$root")
for d in "$root"/*/; do targets+=(--target "$d"); done
.tierq/bin/tierctl enqueue --count "${DEMO_JOBS:-60}" "${targets[@]}"

echo "watching queues; Ctrl-C to stop"
.tierq/bin/tierctl watch || true
