package api

// The console's overview: per queue, jobs by state with the held ones
// apart, the oldest waiting job, River's pause and the dead letters
// pending; and the River leader. Read from the API's metrics snapshot
// (queuestats.Summaries, dlq.PendingDepth, queuestats.RecentLeader, at
// most MetricsCacheFor old, shared with /metrics' scrapes), so that a page
// load never reads the queues' waiting jobs itself; only River's pauses
// (one row per paused queue) are read on each load.
//
// Not here yet: waits p50/p99 over the last 5 and 60 minutes, which need
// waits recorded by the processes (issue 34), workers and lending.

import (
	"net/http"
	"time"

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
	snap := s.metrics.db.current()
	if snap.err != nil {
		s.consoleInternal(w, r, snap.err)
		return
	}
	paused, err := queuestats.Paused(ctx, s.pool)
	if err != nil {
		s.consoleInternal(w, r, err)
		return
	}
	summaries, depth, leader := snap.queues, snap.depth, snap.leader
	data := struct {
		Queues      []overviewQueue
		Leader      string
		DeadLetters int
		ReadAt      time.Time // when the snapshot was read
	}{Leader: leader, DeadLetters: depth.Total, ReadAt: snap.readAt}
	for _, sum := range summaries {
		at, isPaused := paused[sum.Name]
		data.Queues = append(data.Queues, overviewQueue{
			Summary: sum, Pending: sum.Counts[riverschema.StatePending] - sum.Held,
			Paused: isPaused, PausedAt: at, DeadLetters: depth.ByQueue[sum.Name],
		})
	}
	s.render(w, r, http.StatusOK, "overview", consolePage{Title: "Overview", Nav: "overview", Data: &data})
}
