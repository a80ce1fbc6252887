package fairshare_test

import (
	"context"
	"testing"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/fairshare"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/limits"
	"github.com/tierq/tierq/tiers"
)

// capsBundle is fair share over the priority and default queues of
// service fair (fair_priority, fair_default, fair_scheduled), 5 workers
// each, where pro tenants are capped at 1 job running and free tenants not
// at all.
type capsBundle struct {
	*bundle
}

func setupCaps(t *testing.T) *capsBundle {
	t.Helper()
	db := testdb.New(t)
	_, err := db.Pool.Exec(t.Context(), `
		INSERT INTO tierq_services (name, base_queue, queues, kinds, recorded_by)
		VALUES ('fair', 'fair', '{fair_priority,fair_default,fair_scheduled}', '[]', 'test')`)
	require.NoError(t, err)
	require.NoError(t, limits.Record(t.Context(), db.Pool, limits.Config{Services: map[string]limits.Tiers{
		"fair": {tiers.Pro: {MaxRunning: 1}},
	}}, []string{"fair"}, "scheduler"))
	a, err := fairshare.New(db.Pool, &fairshare.Config{Queues: map[string]fairshare.Queue{
		queue:          {Workers: 5, Fair: true},
		"fair_default": {Workers: 5, Fair: true},
	}})
	require.NoError(t, err)
	b := &capsBundle{&bundle{db: db, admitter: a}}
	b.beat(t) // live workers of every kind: the passes' view of what starts
	return b
}

// insertTier inserts n available jobs of tenant and tier at priority into
// queue q, in one statement; the cap trigger decides what lands held.
func (b *capsBundle) insertTier(t *testing.T, q, tier, tenant string, priority, n int) {
	t.Helper()
	_, err := b.db.Pool.Exec(t.Context(), `
		INSERT INTO river_job (kind, args, queue, priority, state, scheduled_at, max_attempts, metadata)
		SELECT 'fair_test', '{}', $1, $2, 'available', now() - interval '1 minute' + i * interval '1 microsecond', 25,
		       jsonb_build_object('tierq:tier', $3::text, 'tierq:tenant', $4::text)
		FROM generate_series(1, $5) AS i`, q, priority, tier, tenant, n)
	require.NoError(t, err)
}

func (b *capsBundle) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	_, err := b.db.Pool.Exec(t.Context(), sql, args...)
	require.NoError(t, err)
}

func (b *capsBundle) capHeld(t *testing.T) int {
	t.Helper()
	return b.db.Count(t, `SELECT count(*) FROM river_job WHERE state = 'pending' AND metadata ? 'tierq:cap_held_at'`)
}

func TestPassWithCaps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("CapHeldJobsDoNotCloseWorseLevels", func(t *testing.T) {
		t.Parallel()
		b := setupCaps(t)
		// Pro tenant p, capped at 1, has 20 jobs at priority 1: one
		// available, 19 held by the cap; its one job starts.
		b.insertTier(t, queue, "pro", "p", 1, 20)
		require.Equal(t, map[string]int{"p/available": 1, "p/pending": 19}, b.counts(t))
		require.Equal(t, 19, b.capHeld(t))
		require.Equal(t, []string{"p"}, b.fetch(t, 1))

		// Free tenant f, not capped, has 20 jobs at priority 3. p's held
		// jobs are no demand while p is at its cap: f is alone and keeps
		// every place (counted as demand, they left f's level no capacity
		// and a window of 1, four workers idle).
		b.insertTier(t, queue, "free", "f", 3, 20)
		p, err := b.admitter.Pass(ctx, queue)
		require.NoError(t, err)
		require.Equal(t, fairshare.Pass{Ran: true, Tenants: 1, HeldTenants: 1, Capacity: 5, AtCap: 1}, p)
		require.Equal(t, map[string]int{"p/running": 1, "p/pending": 19, "f/available": 20}, b.counts(t))

		// p's job ends: p has room for one job, which the pass admits at
		// p's priority, ahead of f's; f keeps the rest of the capacity.
		b.exec(t, `UPDATE river_job SET state = 'completed', finalized_at = now() WHERE queue = $1 AND state = 'running'`, queue)
		p, err = b.admitter.Pass(ctx, queue)
		require.NoError(t, err)
		require.Equal(t, 1, p.Admitted)
		require.Equal(t, 0, p.AtCap)
		require.Equal(t, map[string]int{"p/completed": 1, "p/available": 1, "p/pending": 18, "f/available": 4, "f/pending": 16}, b.counts(t))
		require.Equal(t, []string{"p", "f", "f", "f", "f"}, b.fetch(t, 5))

		// At its cap again, p is no active tenant: f has the capacity.
		p, err = b.admitter.Pass(ctx, queue)
		require.NoError(t, err)
		require.Equal(t, 1, p.AtCap)
		require.Equal(t, 1, p.Tenants)
		require.Equal(t, 5, b.counts(t)["f/available"])
	})

	t.Run("WorkHeldOnlyByLimitsWakesNoPass", func(t *testing.T) {
		t.Parallel()
		b := setupCaps(t)
		b.capAt(t, "p", 2)
		begin, ok := b.admitter.Hook().(rivertype.HookWorkBegin)
		require.True(t, ok)
		end, ok := b.admitter.Hook().(rivertype.HookWorkEnd)
		require.True(t, ok)
		other := &rivertype.JobRow{Queue: queue, Metadata: []byte(`{"tierq:tenant": "x"}`)}

		// p, capped at 2, has 5 jobs: two in line, three held by the cap.
		// One starts and ends: p has room for one, which the pass admits;
		// the cap, not p's window (2), keeps its other two held.
		b.insertTier(t, queue, "pro", "p", 1, 5)
		started := b.start(t, 1)
		b.exec(t, `UPDATE river_job SET state = 'completed', finalized_at = now() WHERE id = $1`, started[0].ID)
		p, err := b.admitter.Pass(ctx, queue)
		require.NoError(t, err)
		require.Equal(t, fairshare.Pass{Ran: true, Admitted: 1, Tenants: 1, HeldTenants: 1, Capacity: 5}, p)
		require.True(t, b.admitter.Woken(queue), "held work found: the loop looks once more")
		require.False(t, b.admitter.Waiting(queue))
		// Another tenant's job starting or ending gives p no room: no pass.
		require.NoError(t, begin.WorkBegin(ctx, other))
		require.False(t, b.admitter.Woken(queue))
		require.NoError(t, end.WorkEnd(ctx, other, nil))
		require.False(t, b.admitter.Woken(queue))

		// After limitedFor, starts and ends wake passes again.
		b.admitter.EndLimited(queue)
		require.True(t, b.admitter.Waiting(queue))
		require.NoError(t, begin.WorkBegin(ctx, other))
		require.True(t, b.admitter.Woken(queue))
		require.NoError(t, end.WorkEnd(ctx, other, nil))
		require.True(t, b.admitter.Woken(queue))

		// Free tenants f and g queue 8 jobs each for 5 workers: p's two
		// in line take 2 of the capacity at priority 1, and the pass holds
		// f and g back beyond their windows of 2 of the other 3.
		b.insertTier(t, queue, "free", "f", 3, 8)
		b.insertTier(t, queue, "free", "g", 3, 8)
		p, err = b.admitter.Pass(ctx, queue)
		require.NoError(t, err)
		require.Equal(t, fairshare.Pass{Ran: true, Held: 12, Tenants: 3, HeldTenants: 1, Capacity: 5, AtCap: 1}, p)
		require.True(t, b.admitter.Woken(queue), "no longer only limits: the loop looks once more")
		require.True(t, b.admitter.Waiting(queue))
		require.NoError(t, begin.WorkBegin(ctx, other))
		require.True(t, b.admitter.Woken(queue))

		// Their windows, not a limit, keep their jobs held: a job starting
		// or ending may give them a place.
		p, err = b.admitter.Pass(ctx, queue)
		require.NoError(t, err)
		require.Equal(t, fairshare.Pass{Ran: true, Tenants: 3, HeldTenants: 3, Capacity: 5, AtCap: 1, WindowHeld: 2}, p)
		require.NoError(t, end.WorkEnd(ctx, other, nil))
		require.True(t, b.admitter.Woken(queue))

		// Once they are gone, only the cap holds again.
		b.exec(t, `DELETE FROM river_job WHERE metadata->>'tierq:tenant' IN ('f', 'g')`)
		p, err = b.admitter.Pass(ctx, queue)
		require.NoError(t, err)
		require.Equal(t, fairshare.Pass{Ran: true, Tenants: 1, HeldTenants: 1, Capacity: 5, AtCap: 1}, p)
		require.False(t, b.admitter.Waiting(queue))
		require.NoError(t, begin.WorkBegin(ctx, other))
		require.False(t, b.admitter.Woken(queue))
	})

	t.Run("AJobEndingInAnotherQueueOfTheServiceMakesRoomAtOnce", func(t *testing.T) {
		t.Parallel()
		b := setupCaps(t)
		// p's one job runs in the default queue; its other jobs wait
		// held in the priority queue.
		b.insertTier(t, "fair_default", "pro", "p", 2, 1)
		b.insertTier(t, queue, "pro", "p", 1, 3)
		require.Equal(t, map[string]int{"p/pending": 3}, b.counts(t))
		var id int64
		var meta []byte
		require.NoError(t, b.db.Pool.QueryRow(ctx, `
			UPDATE river_job SET state = 'running', attempted_at = now(), attempt = 1
			WHERE queue = 'fair_default' RETURNING id, metadata`).Scan(&id, &meta))

		p, err := b.admitter.Pass(ctx, queue)
		require.NoError(t, err)
		require.Equal(t, 0, p.Admitted)
		require.Equal(t, 1, p.AtCap)

		// This process's worker finishes it; River has not written the
		// completion yet (it batches them). The pass counts it as
		// finished, and so does the trigger in the pass's transaction.
		end, ok := b.admitter.Hook().(rivertype.HookWorkEnd)
		require.True(t, ok)
		require.NoError(t, end.WorkEnd(ctx, &rivertype.JobRow{ID: id, Queue: "fair_default", Metadata: meta}, nil))
		p, err = b.admitter.Pass(ctx, queue)
		require.NoError(t, err)
		require.Equal(t, 1, p.Admitted)
		require.Equal(t, map[string]int{"p/available": 1, "p/pending": 2}, b.counts(t))

		// Another process's pass does not know it finished: p stays at
		// its cap for it until River writes the completion.
		other, err := fairshare.New(b.db.Pool, &fairshare.Config{Queues: map[string]fairshare.Queue{queue: {Workers: 5, Fair: true}}})
		require.NoError(t, err)
		b.fetch(t, 1)
		p, err = other.Pass(ctx, queue)
		require.NoError(t, err)
		require.Equal(t, 0, p.Admitted)
		require.Equal(t, 1, p.AtCap)
	})

	t.Run("NoCapsNoChange", func(t *testing.T) {
		t.Parallel()
		b := setupCaps(t)
		b.exec(t, `UPDATE tier_limits SET max_running = 0`)
		b.insertTier(t, queue, "pro", "p", 1, 20)
		b.insertTier(t, queue, "free", "f", 1, 1)
		p, err := b.admitter.Pass(ctx, queue)
		require.NoError(t, err)
		require.Equal(t, fairshare.Pass{Ran: true, Held: 16, Tenants: 2, Capacity: 5}, p)
		require.Equal(t, 0, b.db.Count(t, `SELECT count(*) FROM river_job WHERE metadata ? 'tierq:capped'`))
	})
}
