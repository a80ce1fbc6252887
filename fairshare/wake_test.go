package fairshare

import (
	"context"
	"testing"

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
