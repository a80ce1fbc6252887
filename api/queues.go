package api

import (
	"context"
	"net/http"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/tierq/tierq/internal/db"
	"github.com/tierq/tierq/routing"
)

// queuedStates are the states a queue's depth counts: waiting or running.
// Finished jobs (completed, cancelled, discarded) are River's history, kept
// for a day and deleted by River; counting them would read that history.
var queuedStates = []string{"available", "scheduled", "retryable", "pending", "running"}

// queuedStatesSQL is queuedStates as SQL literals. Literals, not a
// parameter cast to river_job_state[]: the planner cannot see through that
// cast, guesses that most of the table matches and scans all of it (210 ms
// at 1M rows instead of a few ms through the index).
const queuedStatesSQL = `('available', 'scheduled', 'retryable', 'pending', 'running')`

// knownQueues are the service queues, the scheduler's queue and any queue a
// River client has registered (river_queue).
func knownQueues(ctx context.Context, q db.Querier) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT name FROM river_queue ORDER BY name`)
	if err != nil {
		return nil, err
	}
	registered, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	queues := append(routing.Queues(), "scheduler")
	for _, name := range registered {
		if !slices.Contains(queues, name) {
			queues = append(queues, name)
		}
	}
	return queues, nil
}

// QueueSummary is one queue in GET /v1/queues.
type QueueSummary struct {
	Name string `json:"name"`
	// Counts are jobs per state, for the queued states and running.
	Counts map[string]int `json:"counts"`
	// OldestAvailableSeconds is how long the longest-waiting available job
	// has been available in this queue (0 when none is available): since
	// its scheduled_at, so a job the escalation sweep moved here counts from
	// the move (priority-stats counts from when it became due).
	OldestAvailableSeconds float64 `json:"oldest_available_seconds"`
}

// queueCountsSQL counts queued and running jobs per queue and state over
// River's (state, queue, ...) index: one range per state.
const queueCountsSQL = `
SELECT queue, state::text, count(*) FROM river_job
WHERE state IN ` + queuedStatesSQL + `
GROUP BY queue, state`

// oldestAvailableSQL finds each queue's longest-waiting available job with
// one index probe per (queue, priority): the index is ordered by
// scheduled_at within (state, queue, priority). A hand-written infinite
// scheduled_at has no age and is passed over.
const oldestAvailableSQL = `
SELECT q.queue, coalesce(extract(epoch FROM now() - min(o.scheduled_at)), 0)::float8
FROM unnest($1::text[]) AS q(queue)
CROSS JOIN generate_series(1, 4) AS p(priority)
LEFT JOIN LATERAL (
    SELECT scheduled_at FROM river_job
    WHERE state = 'available' AND queue = q.queue AND priority = p.priority
      AND scheduled_at > '-infinity' AND scheduled_at < 'infinity'
    ORDER BY scheduled_at LIMIT 1
) AS o ON true
GROUP BY q.queue`

// QueueSummaries counts every known queue.
func QueueSummaries(ctx context.Context, q db.Querier) ([]QueueSummary, error) {
	queues, err := knownQueues(ctx, q)
	if err != nil {
		return nil, err
	}
	byName := map[string]*QueueSummary{}
	out := make([]QueueSummary, len(queues))
	for i, name := range queues {
		out[i] = QueueSummary{Name: name, Counts: map[string]int{}}
		for _, state := range queuedStates {
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
	return out, nil
}

func (s *Server) listQueues(w http.ResponseWriter, r *http.Request) {
	queues, err := QueueSummaries(r.Context(), s.pool)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"queues": queues})
}

// PriorityStats is GET /v1/queues/{queue}/priority-stats: OJS's
// priority-stats idea for one River queue.
type PriorityStats struct {
	Queue string `json:"queue"`
	// Priorities has one entry per River priority 1..4.
	Priorities []PriorityStat `json:"priorities"`
}

// PriorityStat is one priority of a queue.
type PriorityStat struct {
	Priority int `json:"priority"`
	// Counts are jobs per state (queued states and running).
	Counts map[string]int `json:"counts"`
	// OldestAvailableSeconds is the longest wait among available jobs,
	// from when each became due (as WaitSeconds).
	OldestAvailableSeconds float64 `json:"oldest_available_seconds"`
	// WaitSeconds are percentiles of how long the available jobs have
	// waited so far, from when each became due (its insert or the end of a
	// retry's backoff; an escalation does not reset it): p50, p95, p99; 0
	// when none.
	WaitSeconds Percentiles `json:"wait_seconds"`
}

// Percentiles of a distribution, in seconds.
type Percentiles struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
}

const priorityCountsSQL = `
SELECT priority, state::text, count(*) FROM river_job
WHERE state IN ` + queuedStatesSQL + ` AND queue = $1
GROUP BY priority, state`

// waitSQL reads the queue's available jobs through the (state, queue, ...)
// index: its cost follows the queue's backlog, not the table. Waits count
// from when each job's attempt became due (db.DueAtSQL): a job the
// escalation sweep moved here keeps the wait it had before.
var waitSQL = `
SELECT j.priority, extract(epoch FROM now() - min(d.at))::float8,
       percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY extract(epoch FROM now() - d.at))::float8[]
FROM river_job AS j, LATERAL (SELECT ` + db.DueAtSQL("j") + ` AS at) AS d
WHERE j.state = 'available' AND j.queue = $1 AND ` + db.FiniteSQL("j.scheduled_at") + `
GROUP BY j.priority`

func (s *Server) priorityStats(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	name := r.PathValue("queue")
	queues, err := knownQueues(ctx, s.pool)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	if !slices.Contains(queues, name) {
		writeError(w, http.StatusNotFound, "queue %.128q not found (known: service queues, scheduler, and queues River clients registered)", name)
		return
	}
	out := PriorityStats{Queue: name}
	for p := routing.PriorityEscalated; p <= routing.PriorityLowest; p++ {
		stat := PriorityStat{Priority: p, Counts: map[string]int{}}
		for _, state := range queuedStates {
			stat.Counts[state] = 0
		}
		out.Priorities = append(out.Priorities, stat)
	}
	rows, err := s.pool.Query(ctx, priorityCountsSQL, name)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	var (
		priority, n int
		state       string
		oldest      float64
		pct         []float64
	)
	if _, err := pgx.ForEachRow(rows, []any{&priority, &state, &n}, func() error {
		if priority >= 1 && priority <= 4 {
			out.Priorities[priority-1].Counts[state] = n
		}
		return nil
	}); err != nil {
		s.internalError(w, r, err)
		return
	}
	rows, err = s.pool.Query(ctx, waitSQL, name)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	if _, err := pgx.ForEachRow(rows, []any{&priority, &oldest, &pct}, func() error {
		if priority >= 1 && priority <= 4 && len(pct) == 3 {
			stat := &out.Priorities[priority-1]
			stat.OldestAvailableSeconds = oldest
			stat.WaitSeconds = Percentiles{P50: pct[0], P95: pct[1], P99: pct[2]}
		}
		return nil
	}); err != nil {
		s.internalError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}
