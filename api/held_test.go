package api_test

import (
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
)

// seedStarvingHeldTenant gives analysis_default a tenant fair share has
// held back for 90 s (three held jobs: one inserted 90 s ago, one escalated
// here 20 s ago after becoming due 90 s ago, one from 10 s ago) beside
// another tenant's two admitted jobs, available for 5 s; and
// analysis_priority one retry River wrote as available 3 s ahead (not
// waiting yet).
func seedStarvingHeldTenant(t *testing.T, b *bundle) {
	t.Helper()
	for _, j := range []testdb.WaitingJob{
		{Queue: "analysis_default", Held: true, Tenant: "starving", Scheduled: 90 * time.Second},
		{Queue: "analysis_default", Held: true, Tenant: "starving", Scheduled: 20 * time.Second, Due: 90 * time.Second},
		{Queue: "analysis_default", Held: true, Tenant: "starving", Scheduled: 10 * time.Second},
		{Queue: "analysis_default", Tenant: "busy", Scheduled: 5 * time.Second, Due: 6 * time.Second},
		{Queue: "analysis_default", Tenant: "busy", Scheduled: 5 * time.Second, Due: 6 * time.Second},
		{Queue: "analysis_priority", Scheduled: -3 * time.Second},
	} {
		testdb.InsertWaitingJob(t, b.db, j)
	}
}

// TestQueuesShowHeldJobs: GET /v1/queues and priority-stats count held
// jobs and measure the oldest wait over available and held jobs from their
// due time: 90 s for the starving tenant, where the oldest available job
// says 5 s (6 s from its due time); a job scheduled 3 s ahead waits 0, not
// -3.
func TestQueuesShowHeldJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	seedStarvingHeldTenant(t, b)

	res := b.do(t, "GET", "/v1/queues", adminToken, nil)
	require.Equal(t, http.StatusOK, res.status)
	byName := map[string]map[string]any{}
	for _, q := range res.json(t)["queues"].([]any) {
		byName[q.(map[string]any)["name"].(string)] = q.(map[string]any)
	}
	def := byName["analysis_default"]
	require.EqualValues(t, 3, def["held"])
	require.EqualValues(t, 3, def["counts"].(map[string]any)["pending"])
	require.EqualValues(t, 2, def["counts"].(map[string]any)["available"])
	require.InDelta(t, 5, def["oldest_available_seconds"], 1)
	require.InDelta(t, 90, def["oldest_waiting_seconds"], 1)

	prio := byName["analysis_priority"]
	require.EqualValues(t, 0, prio["held"])
	require.EqualValues(t, 1, prio["counts"].(map[string]any)["available"])
	require.EqualValues(t, 0, prio["oldest_available_seconds"], "0, not -3")
	require.EqualValues(t, 0, prio["oldest_waiting_seconds"], "0, not -3")

	require.EqualValues(t, 0, byName["specview_default"]["held"])
	require.EqualValues(t, 0, byName["specview_default"]["oldest_waiting_seconds"])

	// priority-stats: the same per priority (every job here is priority 4),
	// its oldest available from the due time as its percentiles.
	p4 := func(queue string) map[string]any {
		t.Helper()
		res := b.do(t, "GET", "/v1/queues/"+queue+"/priority-stats", adminToken, nil)
		require.Equal(t, http.StatusOK, res.status)
		priorities := res.json(t)["priorities"].([]any)
		require.Len(t, priorities, 4)
		for _, p := range priorities[:3] {
			require.EqualValues(t, 0, p.(map[string]any)["held"])
			require.EqualValues(t, 0, p.(map[string]any)["oldest_waiting_seconds"])
		}
		return priorities[3].(map[string]any)
	}
	stat := p4("analysis_default")
	require.EqualValues(t, 3, stat["held"])
	require.InDelta(t, 6, stat["oldest_available_seconds"], 1, "the admitted jobs became due 6 s ago")
	require.InDelta(t, 90, stat["oldest_waiting_seconds"], 1)
	stat = p4("analysis_priority")
	require.EqualValues(t, 0, stat["oldest_available_seconds"], "0, not -3")
	require.EqualValues(t, 0, stat["oldest_waiting_seconds"], "0, not -3")
	require.EqualValues(t, 0, stat["wait_seconds"].(map[string]any)["p99"], "0, not -3")
}

// TestMetricsShowHeldJobs: the same in /metrics: tierq_held_jobs and
// tierq_oldest_waiting_seconds.
func TestMetricsShowHeldJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	seedStarvingHeldTenant(t, b)

	metrics := string(b.do(t, "GET", "/metrics", "", nil).body)
	for _, want := range []string{
		`tierq_held_jobs{queue="analysis_default"} 3`,
		`tierq_held_jobs{queue="analysis_priority"} 0`,
		`tierq_queue_depth{queue="analysis_default",state="pending"} 3`,
		`tierq_oldest_available_seconds{queue="analysis_priority"} 0`,
		`tierq_oldest_waiting_seconds{queue="analysis_priority"} 0`,
		`tierq_oldest_waiting_seconds{queue="specview_default"} 0`,
	} {
		require.Contains(t, metrics, want)
	}
	gauge := func(name string) float64 {
		t.Helper()
		m := regexp.MustCompile(name + `\{queue="analysis_default"\} (\S+)`).FindStringSubmatch(metrics)
		require.Len(t, m, 2, name)
		v, err := strconv.ParseFloat(m[1], 64)
		require.NoError(t, err)
		return v
	}
	require.InDelta(t, 5, gauge("tierq_oldest_available_seconds"), 1)
	require.InDelta(t, 90, gauge("tierq_oldest_waiting_seconds"), 1)
}

// TestMetricsShowJobsHeldByCap: tierq_jobs_held_by_cap{queue} counts the
// held jobs a tenant's concurrency cap holds (tierq:cap_held_at), of every
// tenant, apart from those fair share's window holds, and
// tierq_jobs_held_by_rate{queue} those a rate holds (tierq:rate_held_at);
// GET /v1/queues says the same in held_by_cap and held_by_rate.
func TestMetricsShowJobsHeldByCap(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, j := range []testdb.WaitingJob{
		// analysis_default: two tenants' jobs held by their caps, one held
		// by the window, one available.
		{Queue: "analysis_default", Held: true, CapHeld: true, Capped: "analyzer", Tenant: "acme", Scheduled: 30 * time.Second},
		{Queue: "analysis_default", Held: true, CapHeld: true, Capped: "analyzer", Tenant: "acme", Scheduled: 20 * time.Second},
		{Queue: "analysis_default", Held: true, CapHeld: true, Capped: "analyzer", Tenant: "globex", Scheduled: 10 * time.Second},
		{Queue: "analysis_default", Held: true, Tenant: "initech", Scheduled: 10 * time.Second},
		{Queue: "analysis_default", Tenant: "initech", Scheduled: 5 * time.Second},
		// analysis_priority: one held by a cap.
		{Queue: "analysis_priority", Held: true, CapHeld: true, Capped: "analyzer", Tenant: "acme", Scheduled: 5 * time.Second},
		// specview_default: held by the window, and two by a rate.
		{Queue: "specview_default", Held: true, Tenant: "acme", Scheduled: 5 * time.Second},
		{Queue: "specview_default", Held: true, RateHeld: true, Tenant: "acme", Scheduled: 5 * time.Second},
		{Queue: "specview_default", Held: true, RateHeld: true, Tenant: "hooli", Scheduled: 5 * time.Second},
	} {
		testdb.InsertWaitingJob(t, b.db, j)
	}

	metrics := string(b.do(t, "GET", "/metrics", "", nil).body)
	for _, want := range []string{
		`tierq_jobs_held_by_cap{queue="analysis_default"} 3`,
		`tierq_jobs_held_by_cap{queue="analysis_priority"} 1`,
		`tierq_jobs_held_by_cap{queue="analysis_scheduled"} 0`,
		`tierq_jobs_held_by_cap{queue="specview_default"} 0`,
		`tierq_jobs_held_by_rate{queue="analysis_default"} 0`,
		`tierq_jobs_held_by_rate{queue="specview_default"} 2`,
		`tierq_held_jobs{queue="analysis_default"} 4`,
		`tierq_held_jobs{queue="specview_default"} 3`,
	} {
		require.Contains(t, metrics, want)
	}

	res := b.do(t, "GET", "/v1/queues", adminToken, nil)
	require.Equal(t, http.StatusOK, res.status)
	heldByCap, heldByRate := map[string]any{}, map[string]any{}
	for _, q := range res.json(t)["queues"].([]any) {
		heldByCap[q.(map[string]any)["name"].(string)] = q.(map[string]any)["held_by_cap"]
		heldByRate[q.(map[string]any)["name"].(string)] = q.(map[string]any)["held_by_rate"]
	}
	require.EqualValues(t, 3, heldByCap["analysis_default"])
	require.EqualValues(t, 1, heldByCap["analysis_priority"])
	require.EqualValues(t, 0, heldByCap["specview_default"])
	require.EqualValues(t, 0, heldByRate["analysis_default"])
	require.EqualValues(t, 2, heldByRate["specview_default"])
}
