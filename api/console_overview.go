package api

// The console's overview: per queue, jobs by state with the held ones
// apart, the oldest waiting job, River's pause and the dead letters
// pending; and the River leader. The same reads as GET /v1/queues
// (queuestats.Summaries), /metrics' DLQ depth (dlq.PendingDepth) and
// readyz's leader (queuestats.RecentLeader).
//
// Not here yet: waits p50/p99 over the last 5 and 60 minutes, which need
// waits recorded by the processes (issue 34), workers and lending.

import (
	"net/http"
	"time"

	"github.com/tierq/tierq/dlq"
	"github.com/tierq/tierq/internal/queuestats"
	"github.com/tierq/tierq/internal/riverschema"
)

// overviewQueue is one queue's row.
type overviewQueue struct {
	queuestats.Summary
	// Pending is pending jobs not held: waiting for a job they depend on
	// (River's pending state), not for fair share.
	Pending     int
	Paused      bool
	PausedAt    time.Time
	DeadLetters int
}

func (s *Server) consoleOverview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	summaries, err := queuestats.Summaries(ctx, s.pool, s.cfg.Registry.Queues())
	if err != nil {
		s.consoleInternal(w, r, err)
		return
	}
	paused, err := queuestats.Paused(ctx, s.pool)
	if err != nil {
		s.consoleInternal(w, r, err)
		return
	}
	depth, err := dlq.PendingDepth(ctx, s.pool)
	if err != nil {
		s.consoleInternal(w, r, err)
		return
	}
	leader, err := queuestats.RecentLeader(ctx, s.pool)
	if err != nil {
		s.consoleInternal(w, r, err)
		return
	}
	data := struct {
		Queues      []overviewQueue
		Leader      string
		DeadLetters int
	}{Leader: leader, DeadLetters: depth.Total}
	for _, sum := range summaries {
		at, isPaused := paused[sum.Name]
		data.Queues = append(data.Queues, overviewQueue{
			Summary: sum, Pending: sum.Counts[riverschema.StatePending] - sum.Held,
			Paused: isPaused, PausedAt: at, DeadLetters: depth.ByQueue[sum.Name],
		})
	}
	s.render(w, r, http.StatusOK, "overview", consolePage{Title: "Overview", Nav: "overview", Data: &data})
}
