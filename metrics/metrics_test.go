package metrics_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/fairshare"
	"github.com/tierq/tierq/internal/promtest"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/metrics"
)

type outcomeArgs struct {
	Tier string `json:"tier"`
	Do   string `json:"do"`
}

func (outcomeArgs) Kind() string { return "outcome" }

func TestJobsHookCountsOutcomesAndWaits(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()

	reg := prometheus.NewRegistry()
	waits := &waitCounter{jobs: map[string]int{}}
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(_ context.Context, job *river.Job[outcomeArgs]) error {
		switch job.Args.Do {
		case "cancel":
			return river.JobCancel(errors.New("bad args"))
		case "fail":
			return errors.New("upstream down")
		}
		return nil
	}))
	db.Start(t, &river.Config{
		Schema:  db.Schema,
		Queues:  map[string]river.QueueConfig{"analysis_priority": {MaxWorkers: 2}},
		Workers: workers,
		Hooks:   []rivertype.Hook{metrics.NewJobs(reg).WithWaits(waits)},
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	})

	producer := db.Producer(t)
	for _, args := range []outcomeArgs{{"enterprise", "ok"}, {"enterprise", "ok"}, {"pro", "cancel"}, {"gold", "fail"}} {
		_, err := producer.Insert(ctx, args, &river.InsertOpts{Queue: "analysis_priority", MaxAttempts: 1})
		require.NoError(t, err)
	}
	// The tier in metadata (jobmeta.Tier) counts before args'.
	for _, job := range []struct{ args, metadata string }{
		{`{"do": "ok"}`, `{"tierq:tier": "pro_plus"}`},
		{`{"tier": "enterprise", "do": "ok"}`, `{"tierq:tier": "free"}`},
	} {
		testdb.InsertRaw(t, db, testdb.RawJob{Kind: "outcome", Queue: "analysis_priority", Args: job.args, Metadata: job.metadata})
	}
	testdb.WaitFor(t, 20*time.Second, "all six jobs to finish", func() bool {
		return db.Count(t, `SELECT count(*) FROM river_job WHERE finalized_at IS NOT NULL`) == 6
	})

	require.Equal(t, 3, testutil.CollectAndCount(reg, "tierq_jobs_total"), "completed, cancelled, error")
	require.Equal(t, 5, testutil.CollectAndCount(reg, "tierq_job_wait_seconds"), "enterprise, pro, pro_plus, free, and unknown for a tier that is not one")
	require.Equal(t, map[string]float64{
		"tierq_jobs_total{kind=outcome,outcome=completed,queue=analysis_priority}": 4,
		"tierq_job_wait_seconds_count{queue=analysis_priority,tier=pro_plus}":      1,
		"tierq_job_wait_seconds_count{queue=analysis_priority,tier=free}":          1,
		"tierq_jobs_total{kind=outcome,outcome=cancelled,queue=analysis_priority}": 1,
		"tierq_jobs_total{kind=outcome,outcome=error,queue=analysis_priority}":     1,
		"tierq_job_wait_seconds_count{queue=analysis_priority,tier=enterprise}":    2,
		"tierq_job_wait_seconds_count{queue=analysis_priority,tier=pro}":           1,
		"tierq_job_wait_seconds_count{queue=analysis_priority,tier=unknown}":       1,
	}, promtest.Values(t, reg, "tierq_"))
	waits.mu.Lock()
	defer waits.mu.Unlock()
	require.Equal(t, map[string]int{
		"analysis_priority enterprise": 2, "analysis_priority pro": 1, "analysis_priority pro_plus": 1,
		"analysis_priority free": 1, "analysis_priority unknown": 1,
	}, waits.jobs, "the wait observer is told every job's wait")
	require.False(t, waits.negative)
}

// waitCounter counts the waits it is told per queue and tier.
type waitCounter struct {
	mu       sync.Mutex
	jobs     map[string]int
	negative bool
}

func (w *waitCounter) ObserveWait(queue, tier string, wait time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.jobs[queue+" "+tier]++
	w.negative = w.negative || wait < 0
}

func TestOutcome(t *testing.T) {
	t.Parallel()
	tests := []struct {
		give error
		want string
	}{
		{nil, "completed"},
		{river.JobCancel(errors.New("x")), "cancelled"},
		{river.JobSnooze(time.Minute), "snoozed"},
		{errors.New("x"), "error"},
		{context.DeadlineExceeded, "error"},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, metrics.Outcome(tt.give), "%v", tt.give)
	}
}

// TestJobsHookReadsMetadataOfAnyShape: jobs whose metadata is an array, a
// scalar, null, over 1 MiB or nested 300 levels deep are worked and
// observed like any other (their wait counts from scheduled_at).
func TestJobsHookReadsMetadataOfAnyShape(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)

	reg := prometheus.NewRegistry()
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(context.Context, *river.Job[outcomeArgs]) error { return nil }))
	for _, shape := range testdb.BadShapes() {
		testdb.InsertRaw(t, db, testdb.RawJob{Kind: "outcome", Queue: "analysis_priority", Args: `{"tier": "pro", "do": "ok"}`,
			Metadata: shape, Wait: time.Hour})
	}
	db.Start(t, &river.Config{
		Schema:  db.Schema,
		Queues:  map[string]river.QueueConfig{"analysis_priority": {MaxWorkers: 2}},
		Workers: workers,
		Hooks:   []rivertype.Hook{metrics.NewJobs(reg)},
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	testdb.WaitFor(t, 20*time.Second, "every job to finish", func() bool {
		return db.Count(t, `SELECT count(*) FROM river_job WHERE finalized_at IS NOT NULL`) == 7
	})
	require.Equal(t, map[string]float64{
		"tierq_jobs_total{kind=outcome,outcome=completed,queue=analysis_priority}": 7,
		"tierq_job_wait_seconds_count{queue=analysis_priority,tier=pro}":           7,
	}, promtest.Values(t, reg, "tierq_"))
}

func TestFairShareCountsPassesPerQueue(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	f := metrics.NewFairShare(reg, []string{"a_priority", "a_default"})
	f.Pass("a_priority", 7, 2, 3, 1, 5)
	f.Pass("a_priority", 0, 3, 2, 1, 5)
	f.Lend("a_priority", 4, 1)

	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP tierq_fair_share_active_tenants Tenants with available or held jobs in the queue, at this process's last pass.
# TYPE tierq_fair_share_active_tenants gauge
tierq_fair_share_active_tenants{queue="a_default"} 0
tierq_fair_share_active_tenants{queue="a_priority"} 2
# HELP tierq_fair_share_admitted_total Held jobs this process's fair-share passes admitted (back to available) as their tenant's window had room, by queue.
# TYPE tierq_fair_share_admitted_total counter
tierq_fair_share_admitted_total{queue="a_default"} 0
tierq_fair_share_admitted_total{queue="a_priority"} 5
# HELP tierq_fair_share_held_total Available jobs this process's fair-share passes held back (to pending) because their tenant was over its window, by queue.
# TYPE tierq_fair_share_held_total counter
tierq_fair_share_held_total{queue="a_default"} 0
tierq_fair_share_held_total{queue="a_priority"} 7
# HELP tierq_fair_share_passes_total Fair-share passes this process ran, by queue.
# TYPE tierq_fair_share_passes_total counter
tierq_fair_share_passes_total{queue="a_default"} 0
tierq_fair_share_passes_total{queue="a_priority"} 2
# HELP tierq_lent_total Free jobs this process's lending passes moved into an idle priority queue, by that queue (only with <NAME>_LEND_IDLE_PRIORITY).
# TYPE tierq_lent_total counter
tierq_lent_total{queue="a_default"} 0
tierq_lent_total{queue="a_priority"} 4
`), "tierq_fair_share_active_tenants", "tierq_fair_share_admitted_total", "tierq_fair_share_held_total", "tierq_fair_share_passes_total", "tierq_lent_total"))
}

func TestFairShareCountsTenantsAtTheirCap(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	f := metrics.NewFairShare(reg, []string{"a_priority", "a_default"})
	var _ fairshare.CapObserver = f
	f.Caps("a_default", 3)
	f.Caps("a_default", 2)

	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP tierq_fair_share_tenants_at_cap Tenants with held jobs in the queue that are at their concurrency cap (<NAME>_<TIER>_TENANT_MAX_RUNNING or an override), at this process's last pass.
# TYPE tierq_fair_share_tenants_at_cap gauge
tierq_fair_share_tenants_at_cap{queue="a_default"} 2
tierq_fair_share_tenants_at_cap{queue="a_priority"} 0
`), "tierq_fair_share_tenants_at_cap"))
}
