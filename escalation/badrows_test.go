package escalation_test

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/escalation"
	"github.com/tierq/tierq/internal/jobmetasql"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/routing"
)

// TestEscalateMovesRowsOfAnyShape: an operator's escalation of a job whose
// metadata is not a JSON object moves it and leaves the metadata as it is.
// Before, jsonb_set failed on it ("path element at position 1 is not an
// integer" for an array, "cannot set path in scalar" otherwise) and the
// API answered 500.
func TestEscalateMovesRowsOfAnyShape(t *testing.T) {
	t.Parallel()
	serviceQueues := testdb.Registry(t).Queues()
	tdb := testdb.New(t)
	ctx := context.Background()

	for _, name := range slices.Sorted(maps.Keys(testdb.NotObjects)) {
		metadata := testdb.NotObjects[name]
		t.Run(name, func(t *testing.T) {
			id := testdb.InsertRaw(t, tdb, testdb.RawJob{Kind: "loadtest", Queue: "analysis_default", Metadata: metadata, Args: metadata})
			res, err := escalation.Escalate(ctx, tdb.Pool, serviceQueues, escalation.Request{JobID: id, To: routing.Priority, Actor: "alice", Reason: "bad row"})
			require.NoError(t, err)
			require.Equal(t, "analysis_priority", res.ToQueue)
			require.Equal(t, 1, tdb.Count(t, `SELECT count(*) FROM river_job WHERE id = $1 AND queue = 'analysis_priority'
				AND priority = 1 AND metadata = $2::jsonb`, id, metadata))
		})
	}
}

// TestEscalateIntoAPausedQueue: an operator may move a job into a queue
// paused with River's QueuePause; the answer says the queue is paused (the
// sweeps never do this: see the scheduler's TestSweepsLeavePausedQueuesAlone).
func TestEscalateIntoAPausedQueue(t *testing.T) {
	t.Parallel()
	serviceQueues := testdb.Registry(t).Queues()
	tdb := testdb.New(t)
	ctx := context.Background()

	_, err := tdb.Pool.Exec(ctx, `INSERT INTO river_queue (name, created_at, metadata, updated_at) VALUES ('specview_priority', now(), '{}', now())`)
	require.NoError(t, err)
	require.NoError(t, tdb.Producer(t).QueuePause(ctx, "specview_priority", nil))

	id := insert(t, tdb, "specview_default", 4)
	res, err := escalation.Escalate(ctx, tdb.Pool, serviceQueues, escalation.Request{JobID: id, To: routing.Priority, Actor: "alice", Reason: "urgent"})
	require.NoError(t, err)
	require.True(t, res.Changed)
	require.True(t, res.ToQueuePaused)
	require.Equal(t, "specview_priority", tdb.Jobs(t, "id = $1", id)[0].Queue)

	// Asking again changes nothing and still says so.
	res, err = escalation.Escalate(ctx, tdb.Pool, serviceQueues, escalation.Request{JobID: id, To: routing.Priority, Actor: "alice", Reason: "urgent"})
	require.NoError(t, err)
	require.False(t, res.Changed)
	require.True(t, res.ToQueuePaused)

	// Into a queue that runs: not paused.
	other := insert(t, tdb, "analysis_default", 4)
	res, err = escalation.Escalate(ctx, tdb.Pool, serviceQueues, escalation.Request{JobID: other, To: routing.Priority, Actor: "alice", Reason: "urgent"})
	require.NoError(t, err)
	require.False(t, res.ToQueuePaused)
}

// TestSweepKeepsTheDueTime: a moved job's metadata keeps when its attempt
// became due (jobmetasql.DueAt reads it back), across two moves, and a later
// scheduled_at (a retry) makes the kept time stale.
func TestSweepKeepsTheDueTime(t *testing.T) {
	t.Parallel()
	serviceQueues := testdb.Registry(t).Queues()
	tdb := testdb.New(t)
	ctx := context.Background()

	id := testdb.InsertRaw(t, tdb, testdb.RawJob{Kind: "loadtest", Queue: "analysis_scheduled", Wait: 3 * time.Hour})
	dueAt := func() (time.Time, time.Time) {
		var (
			scheduledAt time.Time
			metadata    []byte
			sqlDue      time.Time
		)
		require.NoError(t, tdb.Pool.QueryRow(ctx, `SELECT j.scheduled_at, j.metadata, `+jobmetasql.DueAtSQL("j")+` FROM river_job AS j WHERE id = $1`, id).
			Scan(&scheduledAt, &metadata, &sqlDue))
		goDue := jobmetasql.DueAt(scheduledAt, time.Time{}, nil, metadata)
		require.True(t, goDue.Equal(sqlDue), "Go %s, SQL %s", goDue, sqlDue)
		return goDue, scheduledAt
	}
	before, _ := dueAt()

	_, err := escalation.Sweep(ctx, tdb.Pool, serviceQueues, escalation.Rules(time.Hour, 0), 100)
	require.NoError(t, err)
	due, scheduledAt := dueAt()
	require.True(t, due.Equal(before), "kept across the first move: %s, was %s", due, before)
	require.WithinDuration(t, time.Now(), scheduledAt, time.Minute, "the move puts it at the back of its new queue")

	// A second move keeps the same time.
	_, err = tdb.Pool.Exec(ctx, `UPDATE river_job SET scheduled_at = scheduled_at - interval '2 hours',
		metadata = metadata || jsonb_build_object('tierq:moved_at', (extract(epoch FROM scheduled_at - interval '2 hours') * 1000000)::bigint)
		WHERE id = $1`, id)
	require.NoError(t, err)
	_, err = escalation.Sweep(ctx, tdb.Pool, serviceQueues, escalation.Rules(0, time.Hour), 100)
	require.NoError(t, err)
	require.Equal(t, "analysis_priority", tdb.Jobs(t, "id = $1", id)[0].Queue)
	due, _ = dueAt()
	require.True(t, due.Equal(before), "kept across the second move: %s, was %s", due, before)

	// River gives the job a new scheduled_at (a retry): that is when the
	// next attempt is due.
	_, err = tdb.Pool.Exec(ctx, `UPDATE river_job SET scheduled_at = now() - interval '1 minute' WHERE id = $1`, id)
	require.NoError(t, err)
	due, scheduledAt = dueAt()
	require.True(t, due.Equal(scheduledAt))
}

// TestDueAtReadsMetadataOfAnyShape: SQL and Go agree, and fall back to
// scheduled_at, for metadata of every shape and for kept times that are not
// numbers or are out of range.
func TestDueAtReadsMetadataOfAnyShape(t *testing.T) {
	t.Parallel()
	tdb := testdb.New(t)
	ctx := context.Background()

	shapes := slices.Collect(maps.Values(testdb.NotObjects))
	shapes = append(shapes,
		`{"tierq_due_at": "yesterday", "tierq_moved_at": "now"}`,
		`{"tierq_due_at": 1e300, "tierq_moved_at": 1e300}`,
		`{"tierq_due_at": -5, "tierq_moved_at": 12}`,
		`{"tierq_due_at": [1], "tierq_moved_at": {"x": 1}}`,
		testdb.Deep(300))
	for _, metadata := range shapes {
		id := testdb.InsertRaw(t, tdb, testdb.RawJob{Kind: "loadtest", Queue: "analysis_default", Metadata: metadata, Wait: time.Hour})
		var (
			scheduledAt, sqlDue time.Time
			raw                 []byte
		)
		require.NoError(t, tdb.Pool.QueryRow(ctx, `SELECT j.scheduled_at, j.metadata, `+jobmetasql.DueAtSQL("j")+` FROM river_job AS j WHERE id = $1`, id).
			Scan(&scheduledAt, &raw, &sqlDue))
		require.True(t, sqlDue.Equal(scheduledAt), "SQL, metadata %.60s", metadata)
		require.True(t, jobmetasql.DueAt(scheduledAt, time.Time{}, nil, raw).Equal(scheduledAt), "Go, metadata %.60s", metadata)
	}
}
