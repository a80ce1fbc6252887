package bench_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/bench"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/jobs"
)

// TestTenantsMeasuresANewcomer runs the tenants scenario at tiny sizes (3 and
// 20 active tenants with a backlog each; a flood under 1 id and spread over
// 10): in every case the newcomer's job started while every other id still
// had work, its position and wait were read, the passes were timed and saw
// every id and the newcomer, and the schema is gone afterwards. It checks no
// speed (not even that the line held a job at the newcomer's insert: it can
// run dry between refills): that is what tierctl bench tenants is for.
func TestTenantsMeasuresANewcomer(t *testing.T) {
	db := testdb.New(t)
	prefix := schemaPrefix(t)
	registry := testdb.Registry(t)
	analyzer, ok := registry.Lookup(jobs.ServiceAnalyzer)
	require.True(t, ok)
	opts := bench.Tiny(bench.Options{DatabaseURL: testdb.URL(), Service: analyzer, Registry: registry, Runs: 1}, prefix)

	var r bench.Report
	require.NoError(t, bench.Run(context.Background(), "tenants", opts, &r))
	require.Zero(t, db.Count(t, `SELECT count(*) FROM pg_namespace WHERE starts_with(nspname, $1)`, prefix+"_"), "the schema is dropped")

	te := r.Tenants
	require.NotNil(t, te)
	require.Equal(t, 5, te.Workers, "the reference app's priority workers")
	require.Equal(t, 20, te.JobMs)
	require.InDelta(t, 250, te.CapacityJobsPerS, 0.01)
	require.Equal(t, 1_000, te.SpreadFlood)
	require.Equal(t, 1, te.Runs)
	require.Len(t, te.Tenants, 2)
	require.Len(t, te.Spread, 2)
	for k, c := range append(append([]bench.NewcomerCase{}, te.Tenants...), te.Spread...) {
		ids := []int{3, 20, 1, 10}[k]
		require.Equal(t, ids, c.IDs)
		require.Equal(t, 5+ids, c.Bound, "workers + ids")
		if k < 2 {
			require.GreaterOrEqual(t, c.Jobs, 3*ids, "%d ids: a backlog each", ids)
		} else {
			require.Equal(t, 1_000, c.Jobs, "the flood")
		}
		require.GreaterOrEqual(t, c.Position, 1.0, "%d ids: the newcomer started", ids)
		require.Positive(t, c.WaitMs, "%d ids", ids)
		require.Equal(t, []float64{c.Position}, c.Positions, "one run")
		require.Equal(t, []float64{c.WaitMs}, c.WaitsMs)
		// The line is read once, just before the newcomer's insert: it may
		// be empty then (its refill is a pass, and 5 workers of 20 ms jobs
		// drain a line of a few jobs faster than a pass under load;
		// docs/benchmarks.md, traffic, "why fair share on is slower").
		// That is a speed figure, which tierctl bench tenants reports; what
		// the design bounds is how long the line can be.
		if ids > 1 { // a tenant alone is never held: its whole flood is in line
			require.LessOrEqual(t, c.Line, float64(c.Bound), "%d ids: the line holds at most the windows, capacity + ids (rounded up)", ids)
		}
		require.GreaterOrEqual(t, c.JobsPerS, 0.0)
		require.Positive(t, c.Passes, "%d ids: passes were timed (passMarker is in the pass statement)", ids)
		require.Positive(t, c.PassP50Ms, "%d ids", ids)
		require.GreaterOrEqual(t, c.PassP95Ms, c.PassP50Ms)
		require.Positive(t, c.PassesPerS)
		require.Positive(t, c.PassBusy)
		// Every id is active in every pass; the newcomer's one job may be
		// fetched, run and done between two passes (its place comes
		// early: the pass before it moved the others' places behind it),
		// most likely under make test's parallel load (3 for 3 ids in CI,
		// 20 for 20 in a local make test).
		require.Contains(t, []int{ids, ids + 1}, c.PassTenants, "%d ids: a pass saw every id", ids)
	}

	raw, err := json.Marshal(r)
	require.NoError(t, err)
	var doc struct {
		Tenants struct {
			Tenants []map[string]any `json:"tenants"`
			Spread  []map[string]any `json:"spread"`
		} `json:"tenants"`
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	require.Len(t, doc.Tenants.Tenants, 2)
	require.Len(t, doc.Tenants.Spread, 2)
	for _, k := range []string{"ids", "jobs", "bound", "line", "position", "wait_ms", "pass_p50_ms", "pass_p95_ms", "pass_busy", "pass_tenants"} {
		require.Contains(t, doc.Tenants.Tenants[0], k)
		require.Contains(t, doc.Tenants.Spread[1], k)
	}
	require.Len(t, te.Table(), 5, "a header and a row per case")
	require.Len(t, r.Rows(), 4)
	require.Empty(t, r.Targets, "a measurement, not a goal")
}
