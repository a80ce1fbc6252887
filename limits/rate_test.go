package limits_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/limits"
	"github.com/tierq/tierq/tiers"
)

// setupRates is a schema where service mailer (queues mailer_priority,
// mailer_default, mailer_scheduled) limits free tenants to 3 jobs started
// an hour (no token comes back within a test) and pro_plus tenants to a
// cap of 2 and 3 an hour; pro tenants have no limit.
func setupRates(t *testing.T) *capBundle {
	perHour := limits.Rate{Count: 3, Per: time.Hour}
	return setupMailer(t, limits.Tiers{tiers.Free: {Rate: perHour}, tiers.ProPlus: {MaxRunning: 2, Rate: perHour}})
}

// rateStates counts tenant's jobs of service mailer by state; held by the
// rate counts "rate_held" besides "pending".
func (b *capBundle) rateStates(t *testing.T, tenant string) map[string]int {
	return b.heldStates(t, tenant, "tierq:rate_held_at", "rate_held")
}

// start starts tenant's available job (one at most: the rule), as River's
// fetch does, and returns its id.
func (b *capBundle) start(t *testing.T, tenant string) int64 {
	t.Helper()
	var id int64
	require.NoError(t, b.db.Pool.QueryRow(t.Context(), `
		UPDATE river_job SET state = 'running', attempted_at = now(), attempt = attempt + 1
		WHERE id = (SELECT id FROM river_job WHERE state = 'available' AND metadata->>'tierq:tenant' = $1)
		RETURNING id`, tenant).Scan(&id))
	return id
}

// admitOne makes one of tenant's held jobs available, as fair share's pass
// does, and tells whether the trigger let it be (false: held again).
func (b *capBundle) admitOne(t *testing.T, tenant string) bool {
	t.Helper()
	var state string
	require.NoError(t, b.db.Pool.QueryRow(t.Context(), `
		UPDATE river_job SET state = 'available', metadata = metadata - 'tierq:held_at' - 'tierq:rate_held_at'
		WHERE id = (SELECT min(id) FROM river_job WHERE state = 'pending' AND metadata->>'tierq:tenant' = $1)
		RETURNING state::text`, tenant).Scan(&state))
	return state == "available"
}

// TestRateTrigger is the database's side of rate limits (migration 00015):
// a job becoming available takes a token from its tenant's bucket, and a
// rate-limited tenant has at most one job available and not started.
func TestRateTrigger(t *testing.T) {
	t.Parallel()

	t.Run("ABucketOfThree", func(t *testing.T) {
		t.Parallel()
		b := setupRates(t)
		b.insert(t, b.db.Pool, "mailer_default", "free", "u1", 6)
		// One job waits to start; the rest are held by the rate.
		require.Equal(t, map[string]int{"available": 1, "pending": 5, "rate_held": 5}, b.rateStates(t, "u1"))
		require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM river_job WHERE state = 'available' AND metadata->>'tierq:rated' = 'mailer' AND metadata->>'tierq:capped' = 'mailer'`))
		// While it has not started, nothing else is let through, even with
		// tokens left.
		require.False(t, b.admitOne(t, "u1"))
		b.start(t, "u1")
		require.True(t, b.admitOne(t, "u1")) // the second token
		b.start(t, "u1")
		require.True(t, b.admitOne(t, "u1")) // the third
		b.start(t, "u1")
		require.False(t, b.admitOne(t, "u1")) // none left
		require.Equal(t, map[string]int{"running": 3, "pending": 3, "rate_held": 3}, b.rateStates(t, "u1"))
		var tokens float64
		require.NoError(t, b.db.Pool.QueryRow(t.Context(), `SELECT tokens FROM tenant_rate_buckets WHERE service = 'mailer' AND tenant = 'u1'`).Scan(&tokens))
		require.Less(t, tokens, 0.01)

		// 20 minutes later, a third of an hour: one token is back.
		b.exec(t, `UPDATE tenant_rate_buckets SET at = at - interval '20 minutes' WHERE tenant = 'u1'`)
		require.True(t, b.admitOne(t, "u1"))
		b.start(t, "u1")
		require.False(t, b.admitOne(t, "u1"))
		// An hour idle fills the bucket to its burst, never beyond.
		b.exec(t, `UPDATE tenant_rate_buckets SET at = at - interval '5 hours' WHERE tenant = 'u1'`)
		for range 2 {
			require.True(t, b.admitOne(t, "u1"))
			b.start(t, "u1")
		}
		b.insert(t, b.db.Pool, "mailer_priority", "free", "u1", 2)
		require.Equal(t, map[string]int{"running": 6, "available": 1, "pending": 1, "rate_held": 1}, b.rateStates(t, "u1"))
		b.start(t, "u1")
		require.False(t, b.admitOne(t, "u1")) // three tokens were the burst
		require.Equal(t, map[string]int{"running": 7, "pending": 1, "rate_held": 1}, b.rateStates(t, "u1"))
	})

	t.Run("TheRuleSpansTheServicesQueuesAndRetriesCount", func(t *testing.T) {
		t.Parallel()
		b := setupRates(t)
		ids := b.insert(t, b.db.Pool, "mailer_priority", "free", "u1", 1)
		b.insert(t, b.db.Pool, "mailer_scheduled", "free", "u1", 1)
		require.Equal(t, map[string]int{"available": 1, "pending": 1, "rate_held": 1}, b.rateStates(t, "u1"))
		// The job runs, fails, and River's retry makes it available again:
		// a second start, a second token.
		b.exec(t, `UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now() WHERE id = $1`, ids[0])
		b.exec(t, `UPDATE river_job SET state = 'retryable', scheduled_at = now() WHERE id = $1`, ids[0])
		b.exec(t, `UPDATE river_job SET state = 'available' WHERE id = $1`, ids[0])
		require.Equal(t, map[string]int{"available": 1, "pending": 1, "rate_held": 1}, b.rateStates(t, "u1"))
		var tokens float64
		require.NoError(t, b.db.Pool.QueryRow(t.Context(), `SELECT tokens FROM tenant_rate_buckets WHERE tenant = 'u1'`).Scan(&tokens))
		require.InDelta(t, 1.0, tokens, 0.01)
		// A job staying available (a lent job going back, an operator's
		// UPDATE) is not charged twice.
		b.exec(t, `UPDATE river_job SET state = 'available' WHERE id = $1`, ids[0])
		require.NoError(t, b.db.Pool.QueryRow(t.Context(), `SELECT tokens FROM tenant_rate_buckets WHERE tenant = 'u1'`).Scan(&tokens))
		require.InDelta(t, 1.0, tokens, 0.01)
	})

	t.Run("AJobNoWorkerFetchesDoesNotBlockTheTenant", func(t *testing.T) {
		t.Parallel()
		b := setupRates(t)
		// The workers of mailer_default fetch kind mail only.
		b.exec(t, `UPDATE fair_share_slots SET kinds = '{mail}' WHERE queue = 'mailer_default'`)
		b.exec(t, `INSERT INTO river_job (kind, args, queue, priority, state, max_attempts, metadata)
			VALUES ('unknown_kind', '{}', 'mailer_default', 2, 'available', 25, '{"tierq:tier": "free", "tierq:tenant": "u1"}')`)
		b.insert(t, b.db.Pool, "mailer_default", "free", "u1", 2)
		// The unknown kind took a token but blocks nothing: the next job of
		// kind mail is let through too, and the one after waits.
		require.Equal(t, map[string]int{"available": 2, "pending": 1, "rate_held": 1}, b.rateStates(t, "u1"))
	})

	t.Run("AJobInAQueueWithoutWorkersWaitsToStart", func(t *testing.T) {
		t.Parallel()
		b := setupRates(t)
		// No live worker serves mailer_scheduled (a restart, a scale to
		// zero): the job there starts when workers come, and counts as
		// waiting meanwhile (starts never bunch beyond the rule).
		b.exec(t, `UPDATE fair_share_slots SET expires_at = now() - interval '1 second' WHERE queue = 'mailer_scheduled'`)
		b.insert(t, b.db.Pool, "mailer_scheduled", "free", "u1", 1)
		b.insert(t, b.db.Pool, "mailer_default", "free", "u1", 2)
		require.Equal(t, map[string]int{"available": 1, "pending": 2, "rate_held": 2}, b.rateStates(t, "u1"))
	})

	t.Run("OverridesAndTiers", func(t *testing.T) {
		t.Parallel()
		b := setupRates(t)
		none, two := limits.Rate{}, limits.Rate{Count: 2, Per: time.Minute}
		_, err := limits.SetOverride(t.Context(), b.db.Pool, "mailer", "u_none", limits.Override{Rate: &none})
		require.NoError(t, err)
		_, err = limits.SetOverride(t.Context(), b.db.Pool, "mailer", "u_pro", limits.Override{Rate: &two})
		require.NoError(t, err)
		b.insert(t, b.db.Pool, "mailer_default", "free", "u_none", 4)     // override 0: no rate
		b.insert(t, b.db.Pool, "mailer_priority", "pro", "u_pro", 4)      // override beats the pro tier's none
		b.insert(t, b.db.Pool, "mailer_priority", "pro", "u_other", 4)    // pro: no rate
		b.insert(t, b.db.Pool, "mailer_default", "free", "", 4)           // no tenant: no per-tenant limit
		b.insert(t, b.db.Pool, "other_default", "free", "u_elsewhere", 4) // a queue of no service
		require.Equal(t, map[string]int{"available": 4}, b.rateStates(t, "u_none"))
		require.Equal(t, map[string]int{"available": 1, "pending": 3, "rate_held": 3}, b.rateStates(t, "u_pro"))
		require.Equal(t, map[string]int{"available": 4}, b.rateStates(t, "u_other"))
		require.Equal(t, map[string]int{"available": 4}, b.rateStates(t, ""))
		require.Equal(t, 4, b.db.Count(t, `SELECT count(*) FROM river_job WHERE queue = 'other_default' AND state = 'available'`))
		require.Equal(t, 0, b.db.Count(t, `SELECT count(*) FROM tenant_rate_buckets WHERE tenant <> 'u_pro'`))
	})

	t.Run("CapAndRateTogether", func(t *testing.T) {
		t.Parallel()
		b := setupRates(t)
		// pro_plus: a cap of 2 and 3 an hour. Two start; the third is held
		// by the cap (it never reaches the rate's bucket), and once one
		// ends the third token lets one more through.
		b.insert(t, b.db.Pool, "mailer_priority", "pro_plus", "u1", 5)
		first := b.start(t, "u1")
		require.True(t, b.admitOne(t, "u1"))
		b.start(t, "u1")
		require.False(t, b.admitOne(t, "u1"))
		require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM river_job WHERE state = 'pending' AND metadata ? 'tierq:cap_held_at' AND NOT metadata ? 'tierq:rate_held_at'`))
		b.exec(t, `UPDATE river_job SET state = 'completed', finalized_at = now() WHERE id = $1`, first)
		require.True(t, b.admitOne(t, "u1"))
		b.start(t, "u1")
		b.exec(t, `UPDATE river_job SET state = 'completed', finalized_at = now() WHERE id = (SELECT min(id) FROM river_job WHERE state = 'running')`)
		require.False(t, b.admitOne(t, "u1")) // room under the cap, no token
		require.Equal(t, map[string]int{"running": 1, "completed": 2, "pending": 2, "rate_held": 2}, b.rateStates(t, "u1"))
	})

	t.Run("RacingInsertsLetOneThrough", func(t *testing.T) {
		t.Parallel()
		b := setupRates(t)
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() { b.insert(t, b.db.Pool, "mailer_default", "free", "u_race", 1) })
		}
		wg.Wait()
		require.Equal(t, map[string]int{"available": 1, "pending": 19, "rate_held": 19}, b.rateStates(t, "u_race"))
	})
}
