package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/limits"
	"github.com/tierq/tierq/loadtest"
	"github.com/tierq/tierq/tiers"
)

// startTwoReplicas starts two worker replicas of the mailer with 2
// priority and 2 default workers each (the default queue's fetch cooldown
// at 1 ms) and waits for both queues' capacity of 4.
func (b *fairBundle) startTwoReplicas(t *testing.T) {
	t.Helper()
	env := []string{"MAILER_QUEUE_PRIORITY_WORKERS=2", "MAILER_QUEUE_DEFAULT_WORKERS=2", "QUEUE_DEFAULT_FETCH_COOLDOWN=1ms"}
	b.startReplica(t, env...)
	b.startReplica(t, env...)
	b.waitCapacity(t, 4)
	testdb.WaitFor(t, 20*time.Second, "the default queue's capacity of 4", func() bool {
		return b.db.Count(t, `SELECT coalesce(sum(slots), 0) FROM fair_share_slots WHERE queue = 'mail_default'`) == 4
	})
}

// TestCapsAcrossReplicas: two worker replicas of the mailer, 2 default
// and 2 priority workers each, with free tenants capped at 1 job running
// (MAILER_FREE_TENANT_MAX_RUNNING=1, as the scheduler records it). Free
// tenants f1 and f2 and an uncapped free tenant u (an override of 0) queue
// their backlogs at once; f1 also has pro jobs in the priority queue,
// capped at 1 by its override of 1 (an override beats the tier's default,
// and the cap spans the service's queues). From the jobs' own execution
// records: never more than one job of f1, or of f2, ran at any instant,
// across both replicas and both queues; f1 and f2 ran side by side; and u
// used the rest of the default queue's capacity.
func TestCapsAcrossReplicas(t *testing.T) {
	t.Parallel()
	b := setupFair(t)
	ctx := context.Background()
	require.NoError(t, limits.Record(ctx, b.db.Pool, limits.Config{Services: map[string]limits.Tiers{
		"mailer": {tiers.Free: {MaxRunning: 1}},
	}}, []string{"mailer"}, "scheduler"))
	one, zero := 1, 0
	_, err := limits.SetOverride(ctx, b.db.Pool, "mailer", "f1", limits.Override{MaxRunning: &one})
	require.NoError(t, err)
	_, err = limits.SetOverride(ctx, b.db.Pool, "mailer", "u", limits.Override{MaxRunning: &zero})
	require.NoError(t, err)

	b.startTwoReplicas(t)

	var params []river.InsertManyParams
	add := func(tenant string, tier tiers.Tier, n int) {
		for range n {
			params = append(params, river.InsertManyParams{
				Args: loadtest.Args{SleepMS: 40, Record: true}, InsertOpts: b.mailer.InsertOpts(tier, tenant, false)})
		}
	}
	add("u", tiers.Free, 40)
	add("f1", tiers.Free, 12)
	add("f2", tiers.Free, 12)
	add("f1", tiers.Pro, 6)
	res, err := b.db.Producer(t).InsertMany(ctx, params)
	require.NoError(t, err)
	// The insert itself holds each capped tenant's jobs beyond its cap:
	// 17 of f1's 18 and 11 of f2's 12.
	held := 0
	for _, r := range res {
		if r.Job.State == rivertype.JobStatePending {
			held++
		}
	}
	require.Equal(t, 28, held)

	testdb.WaitFor(t, 90*time.Second, "every job done", func() bool {
		return b.db.Count(t, `SELECT count(*) FROM river_job WHERE state <> 'completed'`) == 0
	})
	require.Equal(t, 70, b.db.Count(t, `SELECT count(*) FROM load_test_executions WHERE completed_at IS NOT NULL`), "each job ran once")

	// most is the most executions of tenant's jobs (or, with other, of
	// either tenant) running at the start of any of them.
	most := func(tenants ...string) int {
		return b.db.Count(t, `
			WITH e AS (
				SELECT e.started_at, e.completed_at FROM load_test_executions AS e JOIN river_job AS j ON j.id = e.job_id
				WHERE j.metadata->>'tierq:tenant' = ANY($1))
			SELECT max((SELECT count(*) FROM e AS o WHERE o.started_at <= s.started_at AND o.completed_at > s.started_at))
			FROM e AS s`, tenants)
	}
	require.Equal(t, 1, most("f1"), "f1 over its cap")
	require.Equal(t, 1, most("f2"), "f2 over its cap")
	require.Equal(t, 2, most("f1", "f2"), "f1 and f2 never ran side by side")
	require.GreaterOrEqual(t, most("u"), 2, "u did not use the rest of the capacity")

	// How soon a capped tenant's next job started after its last ended
	// (logged: River's fetch and the pass, not asserted: timing).
	var p50, p99 float64
	require.NoError(t, b.db.Pool.QueryRow(ctx, `
		WITH e AS (
			SELECT j.metadata->>'tierq:tenant' AS tenant, e.started_at,
			       lag(e.completed_at) OVER (PARTITION BY j.metadata->>'tierq:tenant' ORDER BY e.started_at) AS prev
			FROM load_test_executions AS e JOIN river_job AS j ON j.id = e.job_id
			WHERE j.metadata->>'tierq:tenant' IN ('f1', 'f2'))
		SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - prev) * 1000),
		       percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - prev) * 1000)
		FROM e WHERE prev IS NOT NULL`).Scan(&p50, &p99))
	t.Log(fmt.Sprintf("capped tenants' next start after an end: p50 %.1f ms, p99 %.1f ms", p50, p99))
}
