// Package queuestats reads what tierq's queues hold: jobs per queue and
// queued state, the jobs fair share holds back, each queue's oldest
// available job and its oldest waiting job (available or held, from its
// due time), and the River leader. The API's GET /v1/queues, readyz and
// /metrics and tierctl watch share them.
//
// Waiting means available or held (the design's rule): a job fair share
// holds back (River state pending, marked jobmeta.HeldAt) waits as surely
// as an available one, and a view that counted only available jobs would
// show a starving tenant as no wait at all. A job whose scheduled_at is
// still ahead is not waiting yet: River writes retries and snoozes of up to
// 5 s as available with a scheduled_at ahead, and its fetch skips them
// until then.
package queuestats

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tierq/tierq/internal/db"
	"github.com/tierq/tierq/internal/jobmetasql"
	"github.com/tierq/tierq/internal/riverschema"
	"github.com/tierq/tierq/jobmeta"
)

// schedulerQueue is the scheduler deployment's own queue (scheduler.Queue),
// listed whether or not a scheduler ever ran.
const schedulerQueue = "scheduler"

// QueuedStates are the states a queue's depth counts: waiting or running.
// Finished jobs (completed, cancelled, discarded) are River's history, kept
// for a day and deleted by River; counting them would read that history.
var QueuedStates = []string{
	riverschema.StateAvailable, riverschema.StateScheduled, riverschema.StateRetryable,
	riverschema.StatePending, riverschema.StateRunning,
}

// QueuedStatesSQL is QueuedStates as SQL literals. Literals, not a
// parameter cast to river_job_state[]: the planner cannot see through that
// cast, guesses that most of the table matches and scans all of it (210 ms
// at 1M rows instead of a few ms through the index).
const QueuedStatesSQL = `('` + riverschema.StateAvailable + `', '` + riverschema.StateScheduled + `', '` +
	riverschema.StateRetryable + `', '` + riverschema.StatePending + `', '` + riverschema.StateRunning + `')`

// KnownQueues are serviceQueues (service.Registry.Queues), the scheduler's
// queue and any other queue a River client has registered (river_queue), in
// that order.
func KnownQueues(ctx context.Context, q db.Querier, serviceQueues []string) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT name FROM `+riverschema.QueueTable+` ORDER BY name`)
	if err != nil {
		return nil, err
	}
	registered, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	queues := append(slices.Clip(serviceQueues), schedulerQueue)
	for _, name := range registered {
		if !slices.Contains(queues, name) {
			queues = append(queues, name)
		}
	}
	return queues, nil
}

// Summary is one queue in GET /v1/queues.
type Summary struct {
	Name string `json:"name"`
	// Counts are jobs per state, for the queued states and running.
	Counts map[string]int `json:"counts"`
	// Held is how many of the queue's jobs fair share holds back (River
	// state pending, marked jobmeta.HeldAt; included in Counts["pending"]),
	// due or not.
	Held int `json:"held"`
	// HeldByCap is how many of the held jobs are held by their tenant's
	// concurrency cap (marked jobmeta.CapHeldAt too), not by fair share's
	// window: they wait for one of the tenant's jobs to end, whatever the
	// queue's capacity.
	HeldByCap int `json:"held_by_cap"`
	// HeldByRate is how many of the held jobs are held by their tenant's
	// rate limit (marked jobmeta.RateHeldAt too): they wait for the
	// tenant's next token, or for its one job admitted and not started
	// yet to start.
	HeldByRate int `json:"held_by_rate"`
	// OldestAvailableSeconds is how long the longest-waiting available job
	// has been available in this queue (0 when none is available): since
	// its scheduled_at, so a job the escalation sweep or fair share's
	// admission moved here counts from the move (priority-stats counts from
	// when it became due). A job whose scheduled_at is ahead (a retry or
	// snooze River wrote as available) is not counted: never negative.
	// Held jobs are not counted: see OldestWaitingSeconds.
	OldestAvailableSeconds float64 `json:"oldest_available_seconds"`
	// OldestWaitingSeconds is how long the longest-waiting job of the queue
	// has waited, over its available and held jobs, from when each became
	// due (jobmetasql.DueAtSQL: its insert or the end of its retry's
	// backoff; a move by escalation, aging or fair share does not reset
	// it). Only jobs whose scheduled_at has come count; never negative; 0
	// when none waits. Exact: it reads every waiting job of the queue (see
	// waitingSQL for the cost).
	OldestWaitingSeconds float64 `json:"oldest_waiting_seconds"`
	// Unfetchable is how many of the queue's available jobs are due but of
	// a kind no worker serving the queue fetches (Unfetchable): no worker
	// will ever take them. Filled by GET /v1/queues, not by Summaries.
	Unfetchable int `json:"unfetchable"`
}

// queueCountsSQL counts queued and running jobs per queue and state over
// River's (state, queue, ...) index: one range per state.
const queueCountsSQL = `
SELECT queue, state::text, count(*) FROM ` + riverschema.JobTable + `
WHERE state IN ` + QueuedStatesSQL + `
GROUP BY queue, state`

// oldestAvailableSQL finds each queue's longest-waiting available job with
// one index probe per (queue, priority): the index is ordered by
// scheduled_at within (state, queue, priority). A job whose scheduled_at is
// ahead is not waiting yet and is passed over (the probe stops at the
// first: if the earliest is ahead, all are), and so is a hand-written
// infinite scheduled_at, which has no age.
const oldestAvailableSQL = `
SELECT q.queue, coalesce(extract(epoch FROM now() - min(o.scheduled_at)), 0)::float8
FROM unnest($1::text[]) AS q(queue)
CROSS JOIN generate_series(1, 4) AS p(priority)
LEFT JOIN LATERAL (
    SELECT scheduled_at FROM ` + riverschema.JobTable + `
    WHERE state = '` + riverschema.StateAvailable + `' AND queue = q.queue AND priority = p.priority
      AND scheduled_at > '-infinity' AND scheduled_at <= now()
    ORDER BY scheduled_at LIMIT 1
) AS o ON true
GROUP BY q.queue`

// waitingSQL counts each queue's held jobs (and of them, those held by
// their tenant's concurrency cap, jobmeta.CapHeldAt, and by its rate,
// jobmeta.RateHeldAt, from the same rows) and finds its longest-waiting
// job, available or held, from when each became due (jobmetasql.DueAtSQL), over
// the jobs whose scheduled_at has come. Exact, not a bound: a kept due time
// (jobmeta.DueAt) may be any time before scheduled_at and no index orders
// jobs by it, so every waiting job of the queue is read: the available ones
// through River's (state, queue, priority, scheduled_at, id) index, the
// held ones through river_job_tierq_held_idx (queue first), each with its
// row for the metadata. No sequential scan: the cost follows the queue's
// waiting jobs, not the table. Measured (BenchmarkSummaries, PostgreSQL 15,
// 2 cores, beside 100,000 finished jobs; the whole Summaries): 21 ms with
// 50,000 available jobs, 27 ms with 50,000 held and 1,000 admitted, and 181
// ms with 50,000 available jobs that all carry a kept due time (an
// escalated backlog: jobmetasql.DueAtSQL's checks cost about 3.5 µs a row). It runs
// on GET /v1/queues, on the API's metrics read (cached for
// api.MetricsCacheFor, 5 s, per replica) and on each refresh of tierctl
// watch (1 s by default).
var waitingSQL = `
SELECT q.queue, h.held, h.held_by_cap, h.held_by_rate,
       greatest(coalesce(extract(epoch FROM now() - least(a.due, h.due)), 0), 0)::float8
FROM unnest($1::text[]) AS q(queue)
CROSS JOIN LATERAL (
    SELECT min(` + jobmetasql.DueAtSQL("j") + `) AS due FROM ` + riverschema.JobTable + ` AS j
    WHERE j.state = '` + riverschema.StateAvailable + `' AND j.queue = q.queue
      AND j.scheduled_at > '-infinity' AND j.scheduled_at <= now()
) AS a
CROSS JOIN LATERAL (
    SELECT count(*)::int AS held,
           (count(*) FILTER (WHERE j.` + riverschema.JobMetadata + ` ? '` + jobmeta.CapHeldAt + `'))::int AS held_by_cap,
           (count(*) FILTER (WHERE j.` + riverschema.JobMetadata + ` ? '` + jobmeta.RateHeldAt + `'))::int AS held_by_rate,
           min(` + jobmetasql.DueAtSQL("j") + `) FILTER (WHERE j.scheduled_at > '-infinity' AND j.scheduled_at <= now()) AS due
    FROM ` + riverschema.JobTable + ` AS j
    WHERE ` + jobmetasql.HeldSQL("j") + ` AND j.queue = q.queue
) AS h`

// Summaries counts every known queue (KnownQueues): jobs per queued state,
// held jobs, the oldest available and the oldest waiting job.
func Summaries(ctx context.Context, q db.Querier, serviceQueues []string) ([]Summary, error) {
	queues, err := KnownQueues(ctx, q, serviceQueues)
	if err != nil {
		return nil, err
	}
	byName := map[string]*Summary{}
	out := make([]Summary, len(queues))
	for i, name := range queues {
		out[i] = Summary{Name: name, Counts: map[string]int{}}
		for _, state := range QueuedStates {
			out[i].Counts[state] = 0
		}
		byName[name] = &out[i]
	}
	rows, err := q.Query(ctx, queueCountsSQL)
	if err != nil {
		return nil, err
	}
	var (
		queue, state string
		n            int
		age          float64
	)
	if _, err := pgx.ForEachRow(rows, []any{&queue, &state, &n}, func() error {
		if s, ok := byName[queue]; ok {
			s.Counts[state] = n
		}
		return nil
	}); err != nil {
		return nil, err
	}
	rows, err = q.Query(ctx, oldestAvailableSQL, queues)
	if err != nil {
		return nil, err
	}
	if _, err := pgx.ForEachRow(rows, []any{&queue, &age}, func() error {
		byName[queue].OldestAvailableSeconds = age
		return nil
	}); err != nil {
		return nil, err
	}
	rows, err = q.Query(ctx, waitingSQL, queues)
	if err != nil {
		return nil, fmt.Errorf("read waiting jobs: %w", err)
	}
	var byCap, byRate int
	if _, err := pgx.ForEachRow(rows, []any{&queue, &n, &byCap, &byRate, &age}, func() error {
		byName[queue].Held = n
		byName[queue].HeldByCap = byCap
		byName[queue].HeldByRate = byRate
		byName[queue].OldestWaitingSeconds = age
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read waiting jobs: %w", err)
	}
	return out, nil
}

// unfetchableSQL counts, per queue whose workers fetch only the kinds they
// run (their fair-share heartbeats list them: fair_share_slots.kinds, and
// none says every kind), the queue's due available jobs of any other kind.
// A queue no live heartbeat serves is left out: with no worker at all its
// jobs wait for one, which other alerts report. It reads every available
// job of those queues (a kind is not in River's fetching index): for the
// metrics' cached read and GET /v1/queues, not for tierctl watch's refresh.
const unfetchableSQL = `
WITH known AS (
    SELECT s.queue, coalesce(array_agg(k.kind) FILTER (WHERE k.kind IS NOT NULL), '{}') AS kinds
    FROM fair_share_slots AS s
    LEFT JOIN LATERAL unnest(s.kinds) AS k(kind) ON true
    WHERE s.expires_at > now() AND s.slots > 0
    GROUP BY s.queue
    HAVING NOT bool_or(s.kinds IS NULL)
)
SELECT k.queue, (SELECT count(*) FROM ` + riverschema.JobTable + ` AS j
                 WHERE j.state = '` + riverschema.StateAvailable + `' AND j.queue = k.queue AND j.scheduled_at <= now()
                   AND NOT j.kind = ANY(k.kinds))::int
FROM known AS k`

// Unfetchable is, per queue whose workers fetch only the kinds they run,
// how many of its due available jobs are of a kind none of them runs: a
// misrouted producer's, or a kind whose workers were removed. They wait for
// good, hold no tenant's place and are never lent (package fairshare);
// someone must route them, delete them or run a worker of their kind.
// Queues without any (or without heartbeats) are absent.
func Unfetchable(ctx context.Context, q db.Querier) (map[string]int, error) {
	rows, err := q.Query(ctx, unfetchableSQL)
	if err != nil {
		return nil, fmt.Errorf("count unfetchable jobs: %w", err)
	}
	out := map[string]int{}
	var (
		queue string
		n     int
	)
	if _, err := pgx.ForEachRow(rows, []any{&queue, &n}, func() error {
		if n > 0 {
			out[queue] = n
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("count unfetchable jobs: %w", err)
	}
	return out, nil
}

// LeaderFreshness is how recently a River leader must have held a lease to
// count as present (readyz's leader field, tierq_leader_present): River's
// lease is 15s, a hand-over takes up to about 20s.
const LeaderFreshness = time.Minute

// leaderSQL reads the River leader that held a lease within $1 seconds
// (river_leader has at most one row).
const leaderSQL = `SELECT leader_id FROM ` + riverschema.LeaderTable + ` WHERE expires_at > now() - make_interval(secs => $1)`

// RecentLeader returns the ID of the River leader that held a lease within
// LeaderFreshness, or "" when there is none.
func RecentLeader(ctx context.Context, q db.Querier) (string, error) {
	var id string
	err := q.QueryRow(ctx, leaderSQL, LeaderFreshness.Seconds()).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read river_leader: %w", err)
	}
	return id, nil
}

// pausedSQL reads the queues River's pause holds (river_queue.paused_at).
const pausedSQL = `SELECT name, paused_at FROM ` + riverschema.QueueTable + ` WHERE ` + riverschema.QueuePausedAt + ` IS NOT NULL`

// Paused maps each paused queue to when it was paused (River's pause, as
// River UI's button and tierctl queues pause set it).
func Paused(ctx context.Context, q db.Querier) (map[string]time.Time, error) {
	rows, err := q.Query(ctx, pausedSQL)
	if err != nil {
		return nil, fmt.Errorf("read paused queues: %w", err)
	}
	out := map[string]time.Time{}
	var (
		name string
		at   time.Time
	)
	if _, err := pgx.ForEachRow(rows, []any{&name, &at}, func() error {
		out[name] = at
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read paused queues: %w", err)
	}
	return out, nil
}
