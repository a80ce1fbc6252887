package fairshare_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/aging"
	"github.com/tierq/tierq/escalation"
	"github.com/tierq/tierq/fairshare"
	"github.com/tierq/tierq/internal/testdb"
)

// TestHeldWorkAgesAndEscalates: while a job is held the sweeps leave it
// alone (its tenant is over its share: moving it would not start it
// sooner, and would hand a flood's old jobs the lead). Once admitted, aging
// counts its whole wait (the due time admission keeps), and escalation its
// wait in line, as for any job.
func TestHeldWorkAgesAndEscalates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("Aging", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 4, true)
		b.insert(t, "a", 4, 10, 10*time.Minute) // queued ten minutes ago
		b.insert(t, "z", 4, 1, 0)               // another tenant, just now
		_, err := b.admitter.Pass(ctx, queue)
		require.NoError(t, err)
		// Capacity 4: z needs one place, a has the other three.
		require.Equal(t, map[string]int{"a/available": 3, "a/pending": 7, "z/available": 1}, b.counts(t))

		settings := aging.Settings{Step: time.Minute, MaxPriority: 1, Queues: []string{queue}}
		res, err := aging.Sweep(ctx, b.db.Pool, settings)
		require.NoError(t, err)
		require.Equal(t, 3, res.Total, "the three in line, not the seven held")
		require.Equal(t, 7, b.db.Count(t, `SELECT count(*) FROM river_job WHERE state = 'pending' AND priority = 4`))

		// Two start; a, now at priority 1 with one job in line, is alone
		// at its level: its window is the capacity, and the next three
		// admitted are at the back of the line (scheduled_at now) but ten
		// minutes due.
		require.Len(t, b.fetch(t, 2), 2)
		p, err := b.admitter.Pass(ctx, queue)
		require.NoError(t, err)
		require.Equal(t, 3, p.Admitted)
		res, err = aging.Sweep(ctx, b.db.Pool, settings)
		require.NoError(t, err)
		require.Equal(t, 3, res.Total)
		require.Equal(t, 4, b.db.Count(t, `SELECT count(*) FROM river_job WHERE state = 'available' AND priority = 1`))
	})

	t.Run("Escalation", func(t *testing.T) {
		t.Parallel()
		const (
			free = "svc_default"
			paid = "svc_priority"
		)
		db := testdb.New(t)
		a, err := fairshare.New(db.Pool, &fairshare.Config{Queues: map[string]fairshare.Queue{free: {Workers: 4, Fair: true}}})
		require.NoError(t, err)
		_, err = db.Pool.Exec(ctx, `
			INSERT INTO river_job (kind, args, queue, priority, state, scheduled_at, max_attempts, metadata)
			SELECT 'fair_test', '{}'::jsonb, $1, 4, 'available'::river_job_state, now() - interval '10 minutes' + i * interval '1 millisecond', 25, '{"tierq:tenant": "a"}'::jsonb
			FROM generate_series(1, 10) AS i
			UNION ALL
			SELECT 'fair_test', '{}'::jsonb, $1, 4, 'available'::river_job_state, now(), 25, '{"tierq:tenant": "z"}'::jsonb`, free)
		require.NoError(t, err)
		_, err = a.Pass(ctx, free)
		require.NoError(t, err)
		// The queue's workers are live (their heartbeat): its held jobs are
		// its passes' (the sweep moves held jobs only out of a queue no
		// live worker serves).
		_, err = db.Pool.Exec(ctx, `INSERT INTO fair_share_slots (client_id, queue, slots, expires_at) VALUES ('w1', $1, 4, now() + interval '1 hour')`, free)
		require.NoError(t, err)

		queues := []string{"svc_scheduled", free, paid}
		res, err := escalation.Sweep(ctx, db.Pool, queues, escalation.Rules(0, 5*time.Minute), 100)
		require.NoError(t, err)
		require.Equal(t, 3, res.Total, "the three in line for ten minutes move; the seven held stay")
		require.Equal(t, 7, db.Count(t, `SELECT count(*) FROM river_job WHERE queue = $1 AND state = 'pending'`, free))

		// Escalation measures the wait in line (scheduled_at): an admitted
		// job's starts at its admission, so a flood does not move to the
		// paid queue wholesale; it moves once it has waited in line as
		// long as the rule says.
		p, err := a.Pass(ctx, free)
		require.NoError(t, err)
		require.Equal(t, 3, p.Admitted)
		res, err = escalation.Sweep(ctx, db.Pool, queues, escalation.Rules(0, 5*time.Minute), 100)
		require.NoError(t, err)
		require.Zero(t, res.Total)
		testdb.WaitFor(t, 10*time.Second, "the admitted jobs escalated after 100ms in line", func() bool {
			_, err := escalation.Sweep(ctx, db.Pool, queues, escalation.Rules(0, 100*time.Millisecond), 100)
			require.NoError(t, err)
			return db.Count(t, `SELECT count(*) FROM river_job WHERE queue = $1 AND metadata->>'tierq:tenant' = 'a'`, paid) == 6
		})
		require.Equal(t, 4, db.Count(t, `SELECT count(*) FROM river_job WHERE queue = $1 AND state = 'pending'`, free), "the held ones stay")
	})
}
