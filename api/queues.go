package api

import (
	"net/http"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/tierq/tierq/internal/db"
	"github.com/tierq/tierq/internal/jobmetasql"
	"github.com/tierq/tierq/internal/queuestats"
	"github.com/tierq/tierq/internal/riverschema"
	"github.com/tierq/tierq/routing"
)

// QueueSummary is one queue in GET /v1/queues.
type QueueSummary = queuestats.Summary

func (s *Server) listQueues(w http.ResponseWriter, r *http.Request) {
	queues, err := queuestats.Summaries(r.Context(), s.pool, s.cfg.Registry.Queues())
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	unfetchable, err := queuestats.Unfetchable(r.Context(), s.pool)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	for i := range queues {
		queues[i].Unfetchable = unfetchable[queues[i].Name]
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
	// Held is how many of the priority's jobs fair share holds back
	// (queuestats.Summary.Held), due or not.
	Held int `json:"held"`
	// OldestAvailableSeconds is the longest wait among available jobs,
	// from when each became due (as WaitSeconds).
	OldestAvailableSeconds float64 `json:"oldest_available_seconds"`
	// OldestWaitingSeconds is the longest wait among available and held
	// jobs, from when each became due (queuestats.Summary's
	// OldestWaitingSeconds, for one priority).
	OldestWaitingSeconds float64 `json:"oldest_waiting_seconds"`
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
SELECT priority, state::text, count(*) FROM ` + riverschema.JobTable + `
WHERE state IN ` + queuestats.QueuedStatesSQL + ` AND queue = $1
GROUP BY priority, state`

// waitSQL reads the queue's available jobs through the (state, queue, ...)
// index: its cost follows the queue's backlog, not the table. Waits count
// from when each job's attempt became due (jobmetasql.DueAtSQL): a job the
// escalation sweep moved here keeps the wait it had before. A job whose
// scheduled_at is ahead (a retry or snooze River wrote as available) is not
// waiting yet and is left out: no wait is negative.
var waitSQL = `
SELECT j.priority, extract(epoch FROM now() - min(d.at))::float8,
       percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY extract(epoch FROM now() - d.at))::float8[]
FROM ` + riverschema.JobTable + ` AS j, LATERAL (SELECT ` + jobmetasql.DueAtSQL("j") + ` AS at) AS d
WHERE j.state = '` + riverschema.StateAvailable + `' AND j.queue = $1 AND ` + db.FiniteSQL("j.scheduled_at") + ` AND j.scheduled_at <= now()
GROUP BY j.priority`

// heldWaitSQL counts the queue's held jobs per priority, through fair
// share's river_job_tierq_held_idx, with the wait of the oldest of those
// whose scheduled_at has come, from its due time (0 when none).
var heldWaitSQL = `
SELECT j.priority, count(*)::int,
       greatest(coalesce(extract(epoch FROM now() - min(` + jobmetasql.DueAtSQL("j") + `)
           FILTER (WHERE ` + db.FiniteSQL("j.scheduled_at") + ` AND j.scheduled_at <= now())), 0), 0)::float8
FROM ` + riverschema.JobTable + ` AS j
WHERE ` + jobmetasql.HeldSQL("j") + ` AND j.queue = $1
GROUP BY j.priority`

func (s *Server) priorityStats(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	name := r.PathValue("queue")
	queues, err := queuestats.KnownQueues(ctx, s.pool, s.cfg.Registry.Queues())
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
		for _, state := range queuestats.QueuedStates {
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
			stat.OldestWaitingSeconds = oldest
			stat.WaitSeconds = Percentiles{P50: pct[0], P95: pct[1], P99: pct[2]}
		}
		return nil
	}); err != nil {
		s.internalError(w, r, err)
		return
	}
	rows, err = s.pool.Query(ctx, heldWaitSQL, name)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	if _, err := pgx.ForEachRow(rows, []any{&priority, &n, &oldest}, func() error {
		if priority >= 1 && priority <= 4 {
			stat := &out.Priorities[priority-1]
			stat.Held = n
			stat.OldestWaitingSeconds = max(stat.OldestWaitingSeconds, oldest)
		}
		return nil
	}); err != nil {
		s.internalError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}
