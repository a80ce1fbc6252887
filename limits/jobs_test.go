package limits_test

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/limits"
	"github.com/tierq/tierq/tiers"
)

// TestLookupJobs: a tenant's view counts its jobs in the service's three
// queues: running and available counted against its cap, held, and held by
// its cap; not another tenant's, nor its jobs in another service's queue,
// nor an uncapped tenant's running and available jobs.
func TestLookupJobs(t *testing.T) {
	t.Parallel()
	b := setupCaps(t) // mailer: free capped at 1, pro_plus at 3, pro uncapped
	ctx := t.Context()

	// u1 (free, cap 1): three jobs, one let through and run, two held by
	// the cap; one more in the priority queue held by the cap too; one
	// held by fair share's window in the scheduled queue.
	b.insert(t, b.db.Pool, "mailer_default", "free", "u1", 3)
	b.exec(t, `UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now()
		WHERE state = 'available' AND metadata->>'tierq:tenant' = 'u1'`)
	b.insert(t, b.db.Pool, "mailer_priority", "free", "u1", 1)
	b.exec(t, `INSERT INTO river_job (kind, args, queue, priority, state, max_attempts, metadata)
		VALUES ('mail', '{}', 'mailer_scheduled', 4, 'pending', 25,
		        '{"tierq:tier": "free", "tierq:tenant": "u1", "tierq:held_at": "2026-12-05T18:00:00Z"}')`)
	// Not u1's in mailer: another tenant's (one of them held by its rate),
	// u1's in a queue of no service.
	b.insert(t, b.db.Pool, "mailer_default", "free", "u2", 2)
	b.exec(t, `INSERT INTO river_job (kind, args, queue, priority, state, max_attempts, metadata)
		VALUES ('mail', '{}', 'mailer_default', 4, 'pending', 25,
		        '{"tierq:tier": "free", "tierq:tenant": "u2", "tierq:held_at": "2026-12-05T18:00:00Z",
		          "tierq:rated": "mailer", "tierq:rate_held_at": "2026-12-05T18:00:00Z"}')`)
	b.insert(t, b.db.Pool, "other_default", "free", "u1", 4)
	// u3 (pro_plus, cap 3): two available. u4 (pro, no cap): not counted.
	b.insert(t, b.db.Pool, "mailer_default", "pro_plus", "u3", 2)
	b.insert(t, b.db.Pool, "mailer_priority", "pro", "u4", 2)

	jobs := func(tier tiers.Tier, tenant string) limits.Jobs {
		t.Helper()
		got, err := limits.Lookup(ctx, b.db.Pool, "mailer", tier, tenant, time.Time{})
		require.NoError(t, err)
		return got.Jobs
	}
	require.Equal(t, limits.Jobs{Running: 1, Available: 0, Held: 4, HeldByCap: 3}, jobs(tiers.Free, "u1"))
	require.Equal(t, limits.Jobs{Running: 0, Available: 1, Held: 2, HeldByCap: 1, HeldByRate: 1}, jobs(tiers.Free, "u2"))
	require.Equal(t, limits.Jobs{Available: 2}, jobs(tiers.ProPlus, "u3"))
	require.Equal(t, limits.Jobs{}, jobs(tiers.Pro, "u4"), "an uncapped tenant's jobs do not count")
	require.Equal(t, limits.Jobs{}, jobs(tiers.Free, "nobody"))

	// The running job ends: the oldest held job of the default queue is
	// admitted as fair share's pass would, and counts as available.
	b.exec(t, `UPDATE river_job SET state = 'completed', finalized_at = now() WHERE state = 'running'`)
	b.exec(t, `UPDATE river_job SET state = 'available' WHERE id = (
		SELECT min(id) FROM river_job WHERE state = 'pending' AND metadata->>'tierq:tenant' = 'u1' AND queue = 'mailer_default')`)
	require.Equal(t, limits.Jobs{Running: 0, Available: 1, Held: 3, HeldByCap: 2}, jobs(tiers.Free, "u1"))

	// A service no process recorded has no queues: nothing counts.
	got, err := limits.Lookup(ctx, b.db.Pool, "ghost", tiers.Free, "u1", time.Time{})
	require.NoError(t, err)
	require.Equal(t, limits.Jobs{}, got.Jobs)
}

// TestLookupJobsPlan: Lookup's counts read the tenant's rows through the
// capped and held indexes, never the whole of river_job, beside 40,000
// finished jobs, 20,000 held and 2,000 counted against caps of 200
// tenants.
func TestLookupJobsPlan(t *testing.T) {
	t.Parallel()
	b := setupCaps(t)
	ctx := t.Context()
	testdb.SeedFinished(t, b.db, 40_000)
	// Marked as counted against mailer's cap, as the trigger marks them;
	// of the pro tier, which has no cap, so that the trigger leaves them
	// as written instead of holding them.

	b.exec(t, `
		INSERT INTO river_job (kind, args, queue, priority, state, max_attempts, metadata, attempt, attempted_at)
		SELECT 'mail', '{}', (ARRAY['mailer_priority', 'mailer_default', 'mailer_scheduled'])[1 + i % 3], 4,
		       CASE WHEN i % 3 = 0 THEN 'running' ELSE 'available' END::river_job_state, 25,
		       jsonb_build_object('tierq:tier', 'pro', 'tierq:tenant', 't' || i % 200, 'tierq:capped', 'mailer'),
		       CASE WHEN i % 3 = 0 THEN 1 ELSE 0 END, CASE WHEN i % 3 = 0 THEN now() END
		FROM generate_series(1, 2000) AS i;
		INSERT INTO river_job (kind, args, queue, priority, state, max_attempts, metadata)
		SELECT 'mail', '{}', (ARRAY['mailer_priority', 'mailer_default', 'mailer_scheduled'])[1 + i % 3], 4, 'pending', 25,
		       jsonb_build_object('tierq:tier', 'free', 'tierq:tenant', 't' || i % 200, 'tierq:held_at', now())
		           || CASE WHEN i % 3 = 0 THEN jsonb_build_object('tierq:cap_held_at', now(), 'tierq:capped', 'mailer') ELSE '{}' END
		FROM generate_series(1, 20000) AS i;
		ANALYZE river_job`)

	args := []any{"mailer", "free", "t7", nil}
	rows, err := b.db.Pool.Query(ctx, "EXPLAIN "+limits.LookupSQL, args...)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	plan := strings.Join(lines, "\n")
	require.NotContains(t, plan, "Seq Scan on river_job", plan)
	require.Contains(t, plan, "river_job_tierq_capped_idx", "running and available jobs through their index:\n%s", plan)
	require.Contains(t, plan, "river_job_tierq_held_idx", "held jobs through their index:\n%s", plan)
	testdb.WriteExplain(t, b.db, "limits-lookup.txt", limits.LookupSQL, args...)

	// And the counts, exact: t7's jobs are those with i = 7 + 200k; a third
	// of them (k = 1, 4, 7, ...: i divisible by 3) running or held by the
	// cap. Counted against the cap: k < 10, 3 running and 7 available;
	// held: k < 100, 100, 33 of them by the cap.
	got, err := limits.Lookup(ctx, b.db.Pool, "mailer", tiers.Free, "t7", time.Time{})
	require.NoError(t, err)
	require.Equal(t, limits.Jobs{Running: 3, Available: 7, Held: 100, HeldByCap: 33}, got.Jobs)
}
