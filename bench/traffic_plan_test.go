package bench

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/examples/thumbnail"
	"github.com/tierq/tierq/jobmeta"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/tiers"
)

func TestZipfJobs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		rank int
		want int
	}{
		{name: "the largest", rank: 1, want: 5_000},
		{name: "second", rank: 2, want: 1_768},
		{name: "tenth", rank: 10, want: 158},
		{name: "hundredth", rank: 100, want: 5},
		{name: "last of the 3-job tenants", rank: 137, want: 3},
		{name: "thousandth, at least 1", rank: 1_000, want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, zipfJobs(5_000, 1.5, tt.rank))
		})
	}
}

// TestTrafficPlan checks the full run's traffic: its shape, the odd tenant
// ids, every class, and that it is the same for every run.
func TestTrafficPlan(t *testing.T) {
	t.Parallel()
	registry, err := thumbnail.WithReference(jobs.Deps{})
	require.NoError(t, err)
	services := registry.Services()
	sz := Options{}.trafficSizes()
	p := newTrafficPlan(sz.shape, services)

	require.Len(t, p.tenants, 1_003, "1,000 Zipf tenants and the odd ids")
	small, jobsOfSmall := 0, 0
	for _, tenant := range p.tenants[:1_000] {
		if tenant.jobs <= 3 {
			small++
			jobsOfSmall += tenant.jobs
			require.True(t, tenant.small)
			require.LessOrEqual(t, tenant.at, sz.shape.stream)
		}
	}
	require.Greater(t, small, 800, "most tenants have 1–3 jobs")
	require.Equal(t, 5_000, p.tenants[0].jobs)
	require.Equal(t, tiers.Enterprise, p.tenants[0].tier)
	require.Equal(t, jobs.ServiceAnalyzer, services[p.tenants[0].service].Name())
	require.Equal(t, "", p.tenants[1_000].id, "no tenant")
	require.Len(t, p.tenants[1_001].id, jobmeta.MaxTenantBytes)
	require.NoError(t, jobmeta.CheckTenant(p.tenants[1_001].id), "producers accept the 200-byte id")
	require.Len(t, p.tenants[1_002].id, longTenantBytes)
	require.Error(t, jobmeta.CheckTenant(p.tenants[1_002].id), "producers refuse the long id: SQL writes it")
	require.True(t, p.tenants[1_002].direct)

	mix := p.mix()
	total := 0
	for _, n := range mix {
		total += n
	}
	require.Equal(t, len(p.jobs), total)
	require.InDelta(t, 13_500, total, 1_000)
	for _, c := range trafficClasses {
		require.Positive(t, mix[c.name], c.name)
	}
	require.Greater(t, mix[classPlain], total*8/10)
	var serviceJobs [3]int
	scheduled := 0
	for _, j := range p.jobs {
		serviceJobs[j.service]++
		if j.scheduled {
			scheduled++
		}
		switch j.class {
		case classFailShort, classFailBackoff:
			require.Equal(t, outcomeDeadLettered, j.want)
			require.Equal(t, trafficMaxAttempts, j.args.FailAttempts, "fails every attempt")
		case classBadArgs:
			require.Equal(t, outcomeCancelled, j.want)
		default:
			require.Equal(t, outcomeCompleted, j.want)
			require.Less(t, j.args.FailAttempts, trafficMaxAttempts)
		}
		require.Equal(t, j.class != classFailBackoff && j.class != classSnoozeLong, j.prompt, j.class)
		require.True(t, j.args.Record)
	}
	for i, n := range serviceJobs {
		require.Positive(t, n, "service %s", services[i].Name())
	}
	require.Positive(t, scheduled)
	require.Equal(t, []string{"analysis_priority", "analysis_default", "specview_scheduled", "thumbnails_scheduled"}, p.unfetchable)

	again := newTrafficPlan(sz.shape, services)
	require.Equal(t, p.jobs, again.jobs, "the same traffic every run")
	backlog, stream := p.split()
	require.Len(t, stream, small)
	require.Len(t, backlog, 1_003-small)
	for i := 1; i < len(stream); i++ {
		require.LessOrEqual(t, p.tenants[stream[i-1]].at, p.tenants[stream[i]].at, "in order of arrival")
	}
	_ = jobsOfSmall
	require.Equal(t, 20*time.Second, sz.shape.stream)
}
