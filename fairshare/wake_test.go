package fairshare

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
)

// TestAPassThatStartsHoldingLooksAgain: the hook wakes a queue's loop on
// held work only once a pass has recorded it, so the workers may fetch and
// finish every job a first holding pass left in line while it runs, and wake
// nobody. That pass wakes the loop itself; later passes that find work
// still held leave it to the hook.
func TestAPassThatStartsHoldingLooksAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	const queue = "fair_priority"
	a, err := New(db.Pool, &Config{Queues: map[string]Queue{queue: {Workers: 2, Fair: true}}})
	require.NoError(t, err)
	insertAvailable(t, db, queue, "a", 10)
	// A second tenant: a tenant alone is never held back.
	insertAvailable(t, db, queue, "b", 1)
	q := a.queues[queue]
	woken := func() bool {
		select {
		case <-q.wake:
			return true
		default:
			return false
		}
	}

	p, err := a.Pass(ctx, queue)
	require.NoError(t, err)
	require.Equal(t, 9, p.Held, "a's window is 1: capacity 2 over two tenants")
	require.True(t, woken(), "the first pass that holds work runs another")

	p, err = a.Pass(ctx, queue)
	require.NoError(t, err)
	require.Equal(t, 1, p.HeldTenants)
	require.False(t, woken(), "work was held already: the hook wakes the loop")
}

// TestBusyWorkersWakeOnlyAFairQueue: with every worker busy a queue with
// fair share on may have a tenant over its window; one with fair share off
// holds nothing back, and a pass there would read its backlog for nothing.
func TestBusyWorkersWakeOnlyAFairQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, err := New(nil, &Config{Queues: map[string]Queue{"fair": {Workers: 2, Fair: true}, "fifo": {Workers: 2}}})
	require.NoError(t, err)
	hook := a.Hook().(*hook) //nolint:forcetypeassert // the package's own
	for name, wakes := range map[string]bool{"fair": true, "fifo": false} {
		q := a.queues[name]
		job := &rivertype.JobRow{Queue: name}
		require.NoError(t, hook.WorkBegin(ctx, job))
		require.Empty(t, q.wake, "%s: one of two workers busy", name)
		require.NoError(t, hook.WorkBegin(ctx, job))
		require.Equal(t, wakes, len(q.wake) == 1, "%s: both workers busy", name)
	}
}

// TestATenantAloneIsNotHeld: a tenant alone needs no turns, so its backlog
// stays in line (no row updates), and the loop only looks for a newcomer
// among the jobs inserted since; the newcomer's arrival holds the backlog
// back at once, and it stays windowed while any of it is held.
func TestATenantAloneIsNotHeld(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	const queue = "fair_priority"
	a, err := New(db.Pool, &Config{Queues: map[string]Queue{queue: {Workers: 2, Fair: true}}})
	require.NoError(t, err)
	insert := func(tenant string, n int) { insertAvailable(t, db, queue, tenant, n) }
	q := a.queues[queue]
	insert("a", 50)

	p, err := a.Pass(ctx, queue)
	require.NoError(t, err)
	require.Equal(t, Pass{Ran: true, Tenants: 1, Capacity: 2, Lone: true}, p)
	p, err = a.pass(ctx, q, look)
	require.NoError(t, err)
	require.Equal(t, Pass{Ran: true, Lone: true, Checked: true}, p, "a look, not a pass")
	insert("a", 10)
	p, err = a.pass(ctx, q, look)
	require.NoError(t, err)
	require.True(t, p.Checked, "more of the same tenant: still a look")
	require.Zero(t, db.Count(t, `SELECT count(*) FROM river_job WHERE state = 'pending'`))

	insert("b", 1)
	p, err = a.pass(ctx, q, look)
	require.NoError(t, err)
	require.Equal(t, Pass{Ran: true, Held: 59, Tenants: 2, Capacity: 2}, p, "the newcomer: a's backlog held back to its window")

	// b's job starts: a is alone again, but with held work: windowed (the
	// whole capacity), not released.
	_, err = db.Pool.Exec(ctx, `UPDATE river_job SET state = 'running', attempted_at = now(), attempt = 1
		WHERE metadata->>'tierq:tenant' = 'b'`)
	require.NoError(t, err)
	p, err = a.pass(ctx, q, look)
	require.NoError(t, err)
	require.Equal(t, Pass{Ran: true, Admitted: 1, Tenants: 1, HeldTenants: 1, Capacity: 2, WindowHeld: 1}, p)
	require.Equal(t, 58, db.Count(t, `SELECT count(*) FROM river_job WHERE state = 'pending'`))
}

// TestJobsIntoAnEmptyQueueAreLookedAt: when the last pass found the queue
// empty, the first jobs in are of the tenant alone (here jobs without a
// tenant, as a load test inserts them): a look adopts it, with no pass (a
// pass per process, and with many replicas a try of the pass's lock each);
// a job of a second tenant is a newcomer.
func TestJobsIntoAnEmptyQueueAreLookedAt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	const queue = "fair_priority"
	a, err := New(db.Pool, &Config{Queues: map[string]Queue{queue: {Workers: 2, Fair: true}}})
	require.NoError(t, err)
	q := a.queues[queue]

	p, err := a.Pass(ctx, queue)
	require.NoError(t, err)
	require.Equal(t, Pass{Ran: true, Capacity: 2, Lone: true}, p, "empty")
	require.Nil(t, q.loneName)

	insertAvailable(t, db, queue, "", 20)
	p, err = a.pass(ctx, q, look)
	require.NoError(t, err)
	require.Equal(t, Pass{Ran: true, Lone: true, Checked: true}, p, "a look, not a pass")
	require.NotNil(t, q.loneName)
	require.Empty(t, *q.loneName, "jobs without a tenant: the tenant ''")
	p, err = a.pass(ctx, q, look)
	require.NoError(t, err)
	require.True(t, p.Checked, "still a look")

	insertAvailable(t, db, queue, "b", 1)
	p, err = a.pass(ctx, q, look)
	require.NoError(t, err)
	require.Equal(t, Pass{Ran: true, Held: 19, Tenants: 2, Capacity: 2}, p, "the newcomer: the tenantless backlog held back to its window")
}

// TestATickChecksATenantAlone: every fifth tick over a tenant alone is a
// check of the whole queue, not a pass: a pass ranks every available job,
// a check stops at the first one a pass would act on. It finds what a look
// misses, a job of another tenant made available with an old scheduled_at,
// and a job still marked held; without fair share only the second, and
// held jobs.
func TestATickChecksATenantAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	a, err := New(db.Pool, &Config{Queues: map[string]Queue{
		"fair_priority": {Workers: 2, Fair: true}, "fair_default": {Workers: 2},
	}})
	require.NoError(t, err)
	fair, off := a.queues["fair_priority"], a.queues["fair_default"]
	insertAvailable(t, db, "fair_priority", "a", 50)
	p, err := a.Pass(ctx, "fair_priority")
	require.NoError(t, err)
	require.Equal(t, Pass{Ran: true, Tenants: 1, Capacity: 2, Lone: true}, p)
	p, err = a.pass(ctx, fair, check)
	require.NoError(t, err)
	require.Equal(t, Pass{Ran: true, Lone: true, Checked: true}, p, "a check, not a pass")

	insertAvailable(t, db, "fair_priority", "b", 1)
	_, err = db.Pool.Exec(ctx, `UPDATE river_job SET scheduled_at = now() - interval '1 hour' WHERE metadata->>'tierq:tenant' = 'b'`)
	require.NoError(t, err)
	p, err = a.pass(ctx, fair, look)
	require.NoError(t, err)
	require.True(t, p.Checked, "a look misses a newcomer made available with an old scheduled_at")
	p, err = a.pass(ctx, fair, check)
	require.NoError(t, err)
	require.Equal(t, Pass{Ran: true, Held: 49, Tenants: 2, Capacity: 2}, p, "the check found it: a pass held a's backlog back")

	insertAvailable(t, db, "fair_default", "a", 3)
	insertAvailable(t, db, "fair_default", "b", 3)
	p, err = a.Pass(ctx, "fair_default")
	require.NoError(t, err)
	require.Equal(t, Pass{Ran: true, Tenants: 2, Capacity: 2}, p, "fair share off: nothing held")
	p, err = a.pass(ctx, off, check)
	require.NoError(t, err)
	require.True(t, p.Checked, "two tenants, fair share off: nothing to do")
	_, err = db.Pool.Exec(ctx, `UPDATE river_job SET metadata = metadata || '{"tierq:held_at": "2026-11-26T00:00:00Z"}'
		WHERE id = (SELECT min(id) FROM river_job WHERE queue = 'fair_default')`)
	require.NoError(t, err)
	p, err = a.pass(ctx, off, check)
	require.NoError(t, err)
	require.False(t, p.Checked, "a job still marked held: a pass")
	require.Zero(t, db.Count(t, `SELECT count(*) FROM river_job WHERE metadata ? 'tierq:held_at' AND state = 'available'`), "the pass cleared the mark")
}

// insertAvailable inserts n available jobs of tenant into queue at
// priority 2; tenant "" records none (a load test's jobs).
func insertAvailable(t *testing.T, db *testdb.DB, queue, tenant string, n int) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), `
		INSERT INTO river_job (kind, args, queue, priority, state, max_attempts, metadata)
		SELECT 'fair_test', '{}', $1, 2, 'available', 25,
		       CASE WHEN $2 = '' THEN '{}'::jsonb ELSE jsonb_build_object('tierq:tenant', $2::text) END
		FROM generate_series(1, $3)`, queue, tenant, n)
	require.NoError(t, err)
}

// TestALookSeesALateCommit: a job's scheduled_at is its insert
// transaction's start, and it becomes visible when the transaction commits:
// a batch insert that takes long commits jobs older than the watermark of a
// look taken meanwhile. The look keeps its watermark behind any writing
// transaction still open (watermarkSQL), so the next look still finds a
// newcomer among the late jobs and a pass holds the lone tenant back.
func TestALookSeesALateCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	const queue = "fair_priority"
	a, err := New(db.Pool, &Config{Queues: map[string]Queue{queue: {Workers: 2, Fair: true}}})
	require.NoError(t, err)
	q := a.queues[queue]
	insertAvailable(t, db, queue, "a", 50)
	p, err := a.Pass(ctx, queue)
	require.NoError(t, err)
	require.True(t, p.Lone, "a alone: %+v", p)

	// A producer's batch: its transaction starts, writes b's job, and is
	// still open when the look runs, well past loneMargin later.
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `
		INSERT INTO river_job (kind, args, queue, priority, state, max_attempts, metadata)
		VALUES ('fair_test', '{}', $1, 2, 'available', 25, '{"tierq:tenant": "b"}')`, queue)
	require.NoError(t, err)
	var started time.Time
	require.NoError(t, tx.QueryRow(ctx, `SELECT now()`).Scan(&started))
	testdb.WaitFor(t, 10*time.Second, "the database's clock a second past the batch's start", func() bool {
		return db.Count(t, `SELECT count(*) FROM (SELECT 1 WHERE clock_timestamp() > $1::timestamptz + interval '1 second') AS x`, started) == 1
	})
	p, err = a.pass(ctx, q, look)
	require.NoError(t, err)
	require.Equal(t, Pass{Ran: true, Lone: true, Checked: true}, p, "b's job is not committed yet")
	require.True(t, q.watermark.Before(started), "the watermark %s waits for the batch started at %s", q.watermark, started)

	require.NoError(t, tx.Commit(ctx))
	p, err = a.pass(ctx, q, look)
	require.NoError(t, err)
	require.Equal(t, Pass{Ran: true, Held: 49, Tenants: 2, Capacity: 2}, p, "the newcomer in the late batch: a held back to its window")
}
