package fairshare

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
)

// TestRefill: between two passes a refill fills only the places the started
// jobs' tenants freed, up to the windows the last pass left, counting the
// line as it is now: a start refilled twice (by this process and another's
// refill or pass) admits once.
func TestRefill(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	const queue = "fair_priority"
	a, err := New(db.Pool, &Config{Queues: map[string]Queue{queue: {Workers: 4, Fair: true}}})
	require.NoError(t, err)
	insertAvailable(t, db, queue, "a", 10)
	insertAvailable(t, db, queue, "b", 10)
	q := a.queues[queue]
	hook := a.Hook().(*hook) //nolint:forcetypeassert // the package's own
	pending := func() int { return db.Count(t, `SELECT count(*) FROM river_job WHERE state = 'pending'`) }
	inLine := func(tenant string) int {
		return db.Count(t, `SELECT count(*) FROM river_job WHERE state = 'available' AND metadata->>'tierq:tenant' = $1`, tenant)
	}
	// start starts n of tenant's jobs in line, as River's fetch and the
	// hook's WorkBegin would.
	start := func(tenant string, n int) {
		t.Helper()
		rows, err := db.Pool.Query(ctx, `UPDATE river_job SET state = 'running', attempted_at = now(), attempt = 1
			WHERE id IN (SELECT id FROM river_job WHERE state = 'available' AND metadata->>'tierq:tenant' = $1 ORDER BY id LIMIT $2)
			RETURNING id`, tenant, n)
		require.NoError(t, err)
		defer rows.Close()
		for rows.Next() {
			var id int64
			require.NoError(t, rows.Scan(&id))
			require.NoError(t, hook.WorkBegin(ctx, &rivertype.JobRow{ID: id, Queue: queue}))
		}
		require.NoError(t, rows.Err())
	}

	p, err := a.Pass(ctx, queue)
	require.NoError(t, err)
	require.Equal(t, Pass{Ran: true, Held: 16, Tenants: 2, Capacity: 4}, p, "windows of 2 each")
	require.Equal(t, []string{"a", "b"}, q.winTenants)
	require.Equal(t, []int32{2, 2}, q.winSizes)

	start("a", 2)
	p, err = a.refill(ctx, q)
	require.NoError(t, err)
	require.Equal(t, Pass{Ran: true, Refill: true, Admitted: 2}, p, "a's two places, and none of b's")
	require.Equal(t, 2, inLine("a"))
	require.Equal(t, 2, inLine("b"))
	require.Equal(t, 14, pending())
	require.Empty(t, q.started, "taken")

	// The same start refilled again (another process's refill came first):
	// a's places are full, nothing is admitted.
	var ids []int64
	rows, err := db.Pool.Query(ctx, `SELECT id FROM river_job WHERE state = 'running'`)
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	require.Len(t, ids, 2)
	q.started = ids
	p, err = a.refill(ctx, q)
	require.NoError(t, err)
	require.Equal(t, Pass{Ran: true, Refill: true}, p)
	require.Equal(t, 14, pending())

	// Nothing started: nothing to do until the next pass.
	p, err = a.refill(ctx, q)
	require.NoError(t, err)
	require.Equal(t, Pass{Ran: true, Refill: true, Waiting: true}, p)

	// A tenant the last pass did not see waits for the next pass: its
	// window is the pass's to decide.
	insertAvailable(t, db, queue, "c", 3)
	start("c", 1)
	p, err = a.refill(ctx, q)
	require.NoError(t, err)
	require.Equal(t, Pass{Ran: true, Refill: true}, p)
	require.Equal(t, 2, inLine("c"), "c's other two jobs, not held yet")
}

// TestTheLoopRefillsBetweenPasses: while work is held, the loop answers a
// start with a refill until a pass is due again (passRest times the last
// pass's time), then passes.
func TestTheLoopRefillsBetweenPasses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	const queue = "fair_priority"
	a, err := New(db.Pool, &Config{Queues: map[string]Queue{queue: {Workers: 2, Fair: true}}})
	require.NoError(t, err)
	insertAvailable(t, db, queue, "a", 10)
	insertAvailable(t, db, queue, "b", 10)
	q := a.queues[queue]

	p, err := a.step(ctx, q, look)
	require.NoError(t, err)
	require.Equal(t, 18, p.Held, "a first pass: no windows known yet")
	q.passedAt = time.Now().Add(time.Hour) // the next pass is far off
	p, err = a.step(ctx, q, look)
	require.NoError(t, err)
	require.True(t, p.Refill && p.Waiting, "no start yet: %+v", p)
	p, err = a.step(ctx, q, check)
	require.NoError(t, err)
	require.False(t, p.Refill, "a tick's check always passes")

	q.passedAt = time.Time{} // the next pass is due
	p, err = a.step(ctx, q, look)
	require.NoError(t, err)
	require.False(t, p.Refill)
	require.True(t, p.Ran)
}
