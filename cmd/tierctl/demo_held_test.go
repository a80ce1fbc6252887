package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
)

// TestDemoShowsHeldJobs reads back, as the demo reads its own jobs, a free
// queue where fair share holds a tenant back and admitted jobs whose due
// time was kept: the backlog counts the held jobs, and waits run from the
// due time (attempted_at - due time), not from the scheduled_at admission
// wrote.
func TestDemoShowsHeldJobs(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	var ids []int64
	for _, j := range []testdb.WaitingJob{
		{Queue: "analysis_default", Held: true, Tenant: "starving", Scheduled: 90 * time.Second},
		{Queue: "analysis_default", Held: true, Tenant: "starving", Scheduled: 80 * time.Second},
		{Queue: "specview_default", Held: true, Tenant: "starving", Scheduled: 70 * time.Second},
		{Queue: "analysis_default", Tenant: "busy", Scheduled: 5 * time.Second, Due: 6 * time.Second},
	} {
		ids = append(ids, testdb.InsertWaitingJob(t, db, j))
	}
	// started inserts a completed job of queue that became due dueAgo
	// seconds ago, was moved (admitted) movedAgo seconds ago when movedAgo
	// is not 0, and was attempted wait seconds after it became due.
	started := func(queue string, dueAgo, movedAgo, wait float64) {
		t.Helper()
		var id int64
		require.NoError(t, db.Pool.QueryRow(ctx, `
			WITH t AS (SELECT now() - make_interval(secs => $2) AS due,
			                  now() - make_interval(secs => CASE WHEN $3 = 0 THEN $2 ELSE $3 END) AS scheduled_at)
			INSERT INTO river_job (state, queue, priority, kind, args, metadata, max_attempts, attempt,
			                       scheduled_at, attempted_at, finalized_at)
			SELECT 'completed', $1, 4, 'loadtest', '{}',
			       CASE WHEN $3 = 0 THEN '{}'::jsonb
			            ELSE jsonb_build_object('tierq:due_at', (extract(epoch FROM t.due) * 1000000)::bigint,
			                                    'tierq:moved_at', (extract(epoch FROM t.scheduled_at) * 1000000)::bigint) END,
			       10, 1, t.scheduled_at, t.due + make_interval(secs => $4), now()
			FROM t RETURNING id`, queue, dueAgo, movedAgo, wait).Scan(&id))
		ids = append(ids, id)
	}
	// Free: held 100 s, then admitted 20 s ago and started at once; and a
	// job never held, started 2 s after its insert.
	started("analysis_default", 120, 20, 100)
	started("specview_default", 50, 0, 2)
	// Paid: 10 ms.
	started("analysis_priority", 30, 0, 0.010)

	var out bytes.Buffer
	d := &demo{pool: db.Pool, app: &app{stdout: &out}, ids: ids}
	stats, err := d.stats(ctx)
	require.NoError(t, err)
	free := stats["free"]
	require.Equal(t, 6, free.jobs)
	require.Equal(t, 4, free.waiting, "three held and one available")
	require.Equal(t, 3, free.held)
	require.Equal(t, 2, free.started)
	// percentile_cont over 2 s and 100 s: p50 51 s, p99 99.02 s (from
	// scheduled_at the admitted job would show 0 s).
	require.InDelta(t, 51_000, free.p50, 50)
	require.InDelta(t, 99_020, free.p99, 50)
	require.InDelta(t, 10, stats["paid"].p99, 1)

	require.NoError(t, d.report(ctx, time.Now()))
	require.Regexp(t, `^\[  0s\] free backlog     4 \(3 held\) \| paid wait p50 10ms p99 10ms \(1 started\) \| free wait p50 51\.0s p99 99\.0s \| completed: free 2/6, paid 1/1, background 0/0\n$`, out.String())
}
