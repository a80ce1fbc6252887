package bench_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/bench"
	"github.com/tierq/tierq/internal/proctest"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/jobs"
)

// TestLimitsKeepsTheCap runs the limits scenario at tiny sizes: two worker
// processes (this test binary re-executed as the reference app's worker,
// 10 priority workers each), 10 enterprise tenants capped at 2 with 8 jobs
// each; then 2 capped tenants with 10 jobs each for the reaction, 4
// rate-limited tenants for 1 s, and the four variants of the
// work-conservation phase in this process. From the jobs' own execution
// records: every job ran exactly once and no tenant ever had more than 2
// running, nor a capped tenant of the caps variant more than 1; the
// reaction paired every start beyond a tenant's first 2 with an end; no
// rate-limited tenant started faster than its token bucket allows (within
// the one job the design allows). No speed or reaction time is checked:
// that is what tierctl bench limits is for.
func TestLimitsKeepsTheCap(t *testing.T) {
	db := testdb.New(t)
	prefix := schemaPrefix(t)
	registry := testdb.Registry(t)
	analyzer, ok := registry.Lookup(jobs.ServiceAnalyzer)
	require.True(t, ok)
	opts := bench.Tiny(bench.Options{
		DatabaseURL: testdb.URL(), Service: analyzer, Registry: registry, Runs: 1,
		WorkerCommand: func(environ []string) *exec.Cmd {
			cmd, _ := proctest.Command(t, environ...)
			return cmd
		},
	}, prefix)

	var r bench.Report
	require.NoError(t, bench.Run(context.Background(), "limits", opts, &r))
	require.Zero(t, db.Count(t, `SELECT count(*) FROM pg_namespace WHERE starts_with(nspname, $1)`, prefix+"_"), "the schema is dropped")
	require.Zero(t, db.Count(t, `SELECT count(*) FROM pg_stat_activity WHERE starts_with(application_name, $1)`, prefix+"_"),
		"no worker process is left connected")

	l := r.Limits
	require.NotNil(t, l)
	require.Equal(t, 10, l.ExactTenants)
	require.Equal(t, 2, l.ExactCap)
	require.Equal(t, 8, l.ExactJobsPerTenant)
	require.Equal(t, 20, l.ExactWorkers, "10 priority workers in each of 2 processes")
	require.Equal(t, 80, l.ExactJobs, "every job ran")
	require.Zero(t, l.ExactRanTwice, "no job ran twice")
	require.LessOrEqual(t, l.MaxRunningPerTenant, 2, "a tenant over its cap")
	require.GreaterOrEqual(t, l.MaxRunningPerTenant, 1)
	require.Equal(t, []int{l.MaxRunningPerTenant}, l.MaxRunningPerTenantRuns)
	require.True(t, l.ExactPass)
	require.GreaterOrEqual(t, l.ExactAtCapShare, 0.0)
	require.LessOrEqual(t, l.ExactAtCapShare, 1.0)

	require.Equal(t, 2, l.ReactionTenants)
	require.Equal(t, 16, l.ReactionSamples, "2 tenants × (10 jobs − the first 2)")
	require.GreaterOrEqual(t, l.ReactionP50Ms, 0.0, "no start before the end that made room for it")
	require.GreaterOrEqual(t, l.ReactionP99Ms, l.ReactionP50Ms)
	require.GreaterOrEqual(t, l.ReactionAdmitP99Ms, l.ReactionAdmitP50Ms)
	require.GreaterOrEqual(t, l.ReactionFetchP99Ms, l.ReactionFetchP50Ms)

	require.Equal(t, "20/s", l.RateDefault)
	require.Equal(t, "10/s", l.RateOverride)
	require.Len(t, l.RateTenants, 4)
	for i, rt := range l.RateTenants {
		require.Equal(t, []string{"20/s", "20/s", "10/s", "10/s"}[i], rt.Limit)
		require.Positive(t, rt.WithBurst, "tenant %s started jobs", rt.Tenant)
		require.LessOrEqual(t, rt.BucketExcess, 1.0, "tenant %s started faster than its bucket allows", rt.Tenant)
	}

	require.Equal(t, 10, l.ConserveWorkers, "5 priority workers in each of 2 deployments")
	require.Len(t, l.Variants, 4)
	for name, v := range l.Variants {
		require.Positive(t, v.JobsPerS, name)
		require.Equal(t, []float64{v.JobsPerS}, v.JobsPerSRuns, name)
		require.GreaterOrEqual(t, v.UncappedJobsPerS, 0.0, name)
		require.InDelta(t, v.JobsPerS, v.CappedJobsPerS+v.UncappedJobsPerS, 0.11, "%s: the tenants' jobs add up", name)
		require.Positive(t, v.UncappedLeft, "%s: the uncapped tenants had work throughout", name)
		require.GreaterOrEqual(t, v.CappedWaitP99Ms, v.CappedWaitP50Ms, name)
	}
	require.Len(t, l.WorkConservingRatioRuns, 1)
	require.Len(t, l.NoLimitsRatioRuns, 1)
	require.Equal(t, l.WorkConservingRatioRuns[0], l.WorkConservingRatio, "one run: its own ratio")
	require.Equal(t, 1, l.Variants["caps"].CappedMaxRunning, "a capped tenant over its cap of 1")
	require.Zero(t, l.Variants["caps"].Snoozes)
	require.Positive(t, l.Variants["snooze_cap"].Snoozes, "the comparator snoozed")

	raw, err := json.Marshal(r)
	require.NoError(t, err)
	var doc struct {
		Limits map[string]any `json:"limits"`
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	for _, k := range []string{"max_running_per_tenant", "exact_pass", "reaction_p50_ms", "reaction_p99_ms", "rate_max_over", "rate_bucket_excess", "rate_tenants",
		"variants", "work_conserving_ratio", "no_limits_ratio", "snooze_throughput_ratio"} {
		require.Contains(t, doc.Limits, k)
	}
	require.Contains(t, doc.Limits["variants"], "snooze_cap")
	met := map[string]bool{}
	for _, tg := range r.Targets {
		require.Equal(t, "limits", tg.Scenario)
		met[tg.Name] = tg.Met
	}
	require.Equal(t, 4*5, l.Alone["caps"].Jobs, "4 capped tenants × 5 jobs")
	require.Equal(t, 20, l.Alone["caps"].Done, "caps: every job of the capped tenants alone done in the window")
	require.Equal(t, 1, l.Alone["caps"].MaxRunning, "caps alone: a tenant over its cap of 1")
	require.Less(t, l.Alone["snooze_cap"].Done, 20, "the comparator's snoozed jobs still wait at the window's end")
	require.Greater(t, l.Alone["snooze_cap"].IdleP99Ms, l.Alone["caps"].IdleP99Ms)
	require.Len(t, met, 10)
	require.True(t, met["caps_alone_done"])
	require.True(t, met["snooze_alone_idle_p99_ms"])
	require.True(t, met["snooze_alone_done"])
	require.True(t, met["max_running_per_tenant"])
	require.True(t, met["caps_capped_max_running"])
	require.True(t, met["rate_bucket_excess"])
	require.NotEmpty(t, r.Rows())
}
