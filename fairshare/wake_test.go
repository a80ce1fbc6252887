package fairshare

import (
	"context"
	"testing"

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
	_, err = db.Pool.Exec(ctx, `
		INSERT INTO river_job (kind, args, queue, priority, state, max_attempts, metadata)
		SELECT 'fair_test', '{}', $1, 2, 'available', 25, '{"tierq:tenant": "a"}'
		FROM generate_series(1, 10)`, queue)
	require.NoError(t, err)
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
	require.Equal(t, 8, p.Held)
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
