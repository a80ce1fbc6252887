package fairshare_test

import (
	"context"
	"testing"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/limits"
)

// start makes the n best available jobs running, as River's fetch would,
// and returns them as the hook sees them.
func (b *capsBundle) start(t *testing.T, n int) []*rivertype.JobRow {
	t.Helper()
	rows, err := b.db.Pool.Query(t.Context(), `
		UPDATE river_job SET state = 'running', attempted_at = now(), attempt = attempt + 1
		WHERE id IN (SELECT id FROM river_job WHERE state = 'available' ORDER BY priority, scheduled_at, id LIMIT $1)
		RETURNING id, queue, metadata`, n)
	require.NoError(t, err)
	var jobs []*rivertype.JobRow
	for rows.Next() {
		j := &rivertype.JobRow{}
		require.NoError(t, rows.Scan(&j.ID, &j.Queue, &j.Metadata))
		jobs = append(jobs, j)
	}
	require.NoError(t, rows.Err())
	require.Len(t, jobs, n)
	return jobs
}

// capAt caps tenant at n jobs running by an override.
func (b *capsBundle) capAt(t *testing.T, tenant string, n int) {
	t.Helper()
	_, err := limits.SetOverride(t.Context(), b.db.Pool, "fair", tenant, limits.Override{MaxRunning: &n})
	require.NoError(t, err)
}

// beat records a live heartbeat of 5 workers fetching every kind in each
// of the service's priority and default queues, as a running worker's
// would: the refill admits only jobs a live worker fetches.
func (b *capsBundle) beat(t *testing.T) {
	t.Helper()
	b.exec(t, `INSERT INTO fair_share_slots (client_id, queue, slots, heartbeat_at, expires_at)
		VALUES ('w', 'fair_priority', 5, now(), now() + interval '1 hour'), ('w', 'fair_default', 5, now(), now() + interval '1 hour')`)
}

// TestRefill: the fast path of limits admits a tenant's next job held by
// its cap when one of its jobs ends in this process, and by its rate when
// one starts; the triggers still decide.
func TestRefill(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("Cap", func(t *testing.T) {
		t.Parallel()
		b := setupCaps(t) // pro tenants capped at 1
		// p's one job runs in the default queue; three wait held by the
		// cap in the priority queue, beside a job of p held by fair share
		// for its turn (held_at alone), which the refill leaves alone.
		b.insertTier(t, "fair_default", "pro", "p", 2, 1)
		b.insertTier(t, queue, "pro", "p", 1, 3)
		b.exec(t, `UPDATE river_job SET metadata = metadata - 'tierq:cap_held_at' WHERE id = (SELECT min(id) FROM river_job WHERE queue = $1)`, queue)
		var (
			id   int64
			meta []byte
		)
		require.NoError(t, b.db.Pool.QueryRow(ctx, `
			UPDATE river_job SET state = 'running', attempted_at = now(), attempt = 1
			WHERE queue = 'fair_default' RETURNING id, metadata`).Scan(&id, &meta))

		// Still running: the trigger holds the job again.
		n, err := b.admitter.Refill(ctx, []string{string(meta)}, []string{"fair_default"})
		require.NoError(t, err)
		require.Equal(t, 0, n)
		require.Equal(t, map[string]int{"p/pending": 3}, b.counts(t))

		// It ends in this process (River has not written it yet): one job
		// held by the cap comes back, in the priority queue, not the job
		// held for its turn.
		end, ok := b.admitter.Hook().(rivertype.HookWorkEnd)
		require.True(t, ok)
		require.NoError(t, end.WorkEnd(ctx, &rivertype.JobRow{ID: id, Queue: "fair_default", Metadata: meta}, nil))
		n, err = b.admitter.Refill(ctx, []string{string(meta)}, []string{"fair_default"})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, map[string]int{"p/available": 1, "p/pending": 2}, b.counts(t))
		require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM river_job WHERE state = 'pending' AND id = (SELECT min(id) FROM river_job WHERE queue = $1)`, queue))
		require.Equal(t, 0, b.db.Count(t, `SELECT count(*) FROM river_job WHERE state = 'available' AND metadata ? 'tierq:held_at'`))

		// With a job in line, none more.
		n, err = b.admitter.Refill(ctx, []string{string(meta)}, []string{"fair_default"})
		require.NoError(t, err)
		require.Equal(t, 0, n)

		// A paused queue gets none: the job in line starts, ends, and the
		// priority queue is paused.
		require.NoError(t, b.db.Pool.QueryRow(ctx, `
			UPDATE river_job SET state = 'running', attempted_at = now(), attempt = 1
			WHERE state = 'available' RETURNING id, metadata`).Scan(&id, &meta))
		require.NoError(t, end.WorkEnd(ctx, &rivertype.JobRow{ID: id, Queue: queue, Metadata: meta}, nil))
		b.exec(t, `INSERT INTO river_queue (name, created_at, metadata, paused_at, updated_at) VALUES ($1, now(), '{}', now(), now())`, queue)
		n, err = b.admitter.Refill(ctx, []string{string(meta)}, []string{queue})
		require.NoError(t, err)
		require.Equal(t, 0, n)
	})

	t.Run("AJobForEachEndedOneBesideAJobInLine", func(t *testing.T) {
		t.Parallel()
		b := setupCaps(t)
		b.capAt(t, "p", 2)
		// p, capped at 2, has 6 jobs: two start, four wait held by the cap.
		b.insertTier(t, queue, "pro", "p", 1, 6)
		require.Equal(t, map[string]int{"p/available": 2, "p/pending": 4}, b.counts(t))
		started := b.start(t, 2)
		end, ok := b.admitter.Hook().(rivertype.HookWorkEnd)
		require.True(t, ok)

		// Both end in this process at once (River has not written either):
		// one refill of both admits two.
		for _, j := range started {
			require.NoError(t, end.WorkEnd(ctx, j, nil))
		}
		n, err := b.admitter.Refill(ctx, []string{string(started[0].Metadata), string(started[1].Metadata)}, []string{queue, queue})
		require.NoError(t, err)
		require.Equal(t, 2, n)
		require.Equal(t, map[string]int{"p/running": 2, "p/available": 2, "p/pending": 2}, b.counts(t))

		// River writes them; one of the two in line starts and ends: the
		// refill admits the next beside the job still in line.
		b.exec(t, `UPDATE river_job SET state = 'completed', finalized_at = now() WHERE state = 'running'`)
		started = b.start(t, 1)
		require.NoError(t, end.WorkEnd(ctx, started[0], nil))
		n, err = b.admitter.Refill(ctx, []string{string(started[0].Metadata)}, []string{queue})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, map[string]int{"p/completed": 2, "p/running": 1, "p/available": 2, "p/pending": 1}, b.counts(t))

		// Two in line: at its cap, none more.
		n, err = b.admitter.Refill(ctx, []string{string(started[0].Metadata)}, []string{queue})
		require.NoError(t, err)
		require.Equal(t, 0, n)
		require.Equal(t, map[string]int{"p/completed": 2, "p/running": 1, "p/available": 2, "p/pending": 1}, b.counts(t))
	})

	t.Run("Rate", func(t *testing.T) {
		t.Parallel()
		b := setupRates(t) // pro tenants: 2 a minute
		b.insertTier(t, queue, "pro", "p", 1, 3)
		require.Equal(t, map[string]int{"p/available": 1, "p/pending": 2}, b.counts(t))
		var meta []byte
		require.NoError(t, b.db.Pool.QueryRow(ctx, `
			UPDATE river_job SET state = 'running', attempted_at = now(), attempt = 1
			WHERE state = 'available' RETURNING metadata`).Scan(&meta))
		// It started: the second token admits the next.
		n, err := b.admitter.Refill(ctx, []string{string(meta)}, []string{queue})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		b.exec(t, `UPDATE river_job SET state = 'running', attempted_at = now(), attempt = 1 WHERE state = 'available'`)
		// No token left: held again.
		n, err = b.admitter.Refill(ctx, []string{string(meta)}, []string{queue})
		require.NoError(t, err)
		require.Equal(t, 0, n)
		require.Equal(t, map[string]int{"p/running": 2, "p/pending": 1}, b.counts(t))
	})
}
