package scheduler_test

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/robfig/cron/v3"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/internal/promtest"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/internal/workertest"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/jobs/jobsconfig"
	"github.com/tierq/tierq/metrics"
	"github.com/tierq/tierq/scheduler"
	"github.com/tierq/tierq/service"
	"github.com/tierq/tierq/tiers"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// schedulerConfig loads a scheduler configuration the way cmd/scheduler
// does.
func schedulerConfig(t *testing.T, db *testdb.DB, extra ...string) config.Scheduler {
	t.Helper()
	cfg, err := config.Load[config.Scheduler](append([]string{
		"DATABASE_URL=" + db.URL, "DATABASE_SCHEMA=" + db.Schema,
	}, extra...))
	require.NoError(t, err)
	return cfg
}

// runConfig is cfg translated for scheduler.Run (config.Scheduler.Config),
// logging to logger, its services built on Run's pool by newServices.
func runConfig(t testing.TB, cfg config.Scheduler, logger *slog.Logger, newServices func(*pgxpool.Pool) (*service.Registry, error)) scheduler.Config {
	t.Helper()
	described, err := newServices(nil)
	require.NoError(t, err)
	schedulerConfig, err := cfg.Config(described, logger)
	require.NoError(t, err)
	schedulerConfig.NewServices = newServices
	return schedulerConfig
}

func startScheduler(t *testing.T, db *testdb.DB, cfg config.Scheduler) *river.Client[pgx.Tx] {
	t.Helper()
	return db.Start(t, riverConfig(t, cfg, db.Pool, discard, newMetrics(t, prometheus.NewRegistry())))
}

// riverConfig is the scheduler's River configuration as cmd/scheduler makes
// it: the reference app's services, the analyzer with its maintenance (its
// periodic jobs and kinds), and the load-test kind.
func riverConfig(t testing.TB, cfg config.Scheduler, pool *pgxpool.Pool, logger *slog.Logger, m *metrics.Scheduler) *river.Config {
	t.Helper()
	// The analyzer's cron jobs have slots every 10 minutes: the latest is
	// always younger than CronCatchUp, so both run once when the scheduler
	// becomes leader (RunOnStart) and not again during a test.
	maintenance, err := jobsconfig.LoadMaintenance([]string{"REANALYZE_CRON=@every 10m", "RETENTION_CRON=@every 10m"}, &cfg)
	require.NoError(t, err)
	services, err := jobs.Registry(jobs.Deps{Pool: pool, Logger: logger, Maintenance: maintenance})
	require.NoError(t, err)
	schedulerConfig, err := cfg.Config(services, logger)
	require.NoError(t, err)
	schedulerConfig.ExtraKinds = func(pool *pgxpool.Pool) []service.Kind { return []service.Kind{jobs.LoadTestKind(pool)} }
	rc, err := scheduler.RiverConfig(schedulerConfig, pool, services, m)
	require.NoError(t, err)
	return rc
}

func newMetrics(t testing.TB, reg prometheus.Registerer) *metrics.Scheduler {
	return metrics.NewScheduler(reg, testdb.Registry(t).Queues())
}

func TestShortestGap(t *testing.T) {
	t.Parallel()

	from := time.Date(2026, 11, 21, 10, 17, 0, 0, time.UTC)
	for spec, want := range map[string]time.Duration{
		"0 */6 * * *":  6 * time.Hour,
		"30 3 * * *":   24 * time.Hour,
		"*/7 * * * *":  4 * time.Minute, // :56 → :00 is the short gap
		"@every 2s":    2 * time.Second,
		"@every 500ms": time.Second, // River's smallest unique period
		"0 9 * * 1-5":  24 * time.Hour,
	} {
		schedule, err := cron.ParseStandard(spec)
		require.NoError(t, err)
		require.Equal(t, want, scheduler.ShortestGap(schedule, from), spec)
	}
}

func TestCronSlot(t *testing.T) {
	t.Parallel()

	parse := func(spec string) river.PeriodicSchedule {
		schedule, err := cron.ParseStandard(spec)
		require.NoError(t, err)
		return schedule
	}
	at := func(s string) time.Time {
		ts, err := time.Parse(time.RFC3339Nano, s)
		require.NoError(t, err)
		return ts
	}
	tests := []struct {
		name     string
		schedule river.PeriodicSchedule
		now      string
		want     string
		wantOK   bool
	}{
		{"on time", parse("0 */6 * * *"), "2026-11-21T06:00:00.01Z", "2026-11-21T06:00:00Z", true},
		{"built 100ms early", parse("0 */6 * * *"), "2026-11-21T05:59:59.9Z", "2026-11-21T06:00:00Z", true},
		{"hand-over 20s later", parse("30 3 * * *"), "2026-11-21T03:30:20Z", "2026-11-21T03:30:00Z", true},
		{"slot too old to catch up", parse("30 3 * * *"), "2026-11-21T15:00:00Z", "2026-11-21T03:30:00Z", false},
		{"weekend: Friday's slot", parse("0 9 * * 1-5"), "2026-11-22T10:00:00Z", "2026-11-20T09:00:00Z", false},
		{"aligned every", config.AlignedEvery(2 * time.Second), "2026-11-21T10:00:11.5Z", "2026-11-21T10:00:10Z", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			slot, ok := scheduler.CronSlot(tt.schedule, at(tt.now))
			require.Equal(t, at(tt.want), slot.UTC())
			require.Equal(t, tt.wantOK, ok)
		})
	}
}

// markStuck makes a job look like its worker died while running it 2h ago.
func markStuck(t *testing.T, db *testdb.DB, id int64) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), `
		UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now() - interval '2 hours',
		       attempted_by = '{crashed_worker}' WHERE id = $1`, id)
	require.NoError(t, err)
}

func TestStuckSpecViewJobIsRetriedWhileSchedulerLeads(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()

	res, err := db.Producer(t).Insert(ctx, jobs.SpecViewArgs{AnalysisResultID: 1, Tier: "pro"}, testdb.Service(t, jobs.ServiceSpecGen).InsertOpts(tiers.Pro, "", false))
	require.NoError(t, err)
	markStuck(t, db, res.Job.ID)

	startScheduler(t, db, schedulerConfig(t, db)) // RESCUE_STUCK_JOBS_AFTER=1h
	testdb.WaitFor(t, 20*time.Second, "the rescuer to pick up the stuck job", func() bool {
		return db.Jobs(t, "id = $1", res.Job.ID)[0].State != "running"
	})
	job := db.Jobs(t, "id = $1", res.Job.ID)[0]
	require.Contains(t, []string{"retryable", "available"}, job.State, "retried, not discarded")
	var lastError string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT errors[1]->>'error' FROM river_job WHERE id = $1`, res.Job.ID).Scan(&lastError))
	require.Contains(t, lastError, "Stuck job rescued")

	// The scheduler knows the kind but does not serve specview queues: the
	// job waits for a specgen worker.
	time.Sleep(time.Second)
	require.Contains(t, []string{"retryable", "available"}, db.Jobs(t, "id = $1", res.Job.ID)[0].State)
}

// TestLeaderWithoutTheKindDiscardsAStuckJob is the failure the scheduler's
// design avoids: an analyzer worker allowed to lead discards a stuck specview
// job as a kind it does not know.
func TestLeaderWithoutTheKindDiscardsAStuckJob(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()

	res, err := db.Producer(t).Insert(ctx, jobs.SpecViewArgs{AnalysisResultID: 1}, testdb.Service(t, jobs.ServiceSpecGen).InsertOpts(tiers.Pro, "", false))
	require.NoError(t, err)
	markStuck(t, db, res.Job.ID)

	riverConfig := workertest.RiverConfig(t, db, "WORKER_SERVICE=analyzer")
	require.True(t, riverConfig.LeaderElectionDisabled, "workers never lead")
	riverConfig.LeaderElectionDisabled = false // what tierq does not do
	db.Start(t, riverConfig)

	testdb.WaitFor(t, 20*time.Second, "the rescuer to pick up the stuck job", func() bool {
		return db.Jobs(t, "id = $1", res.Job.ID)[0].State != "running"
	})
	require.Equal(t, "discarded", db.Jobs(t, "id = $1", res.Job.ID)[0].State)
}

func TestEscalationRuleRunsOnTheScheduler(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)

	id := testdb.InsertWaiting(t, db, jobs.LoadTestArgs{}, &river.InsertOpts{Queue: "analysis_scheduled", Priority: 4}, 0)
	startScheduler(t, db, schedulerConfig(t, db, "ESCALATE_SCHEDULED_AFTER=1s", "ESCALATION_INTERVAL=1s"))
	testdb.WaitFor(t, 10*time.Second, "the job to move to analysis_default", func() bool {
		return db.Jobs(t, "id = $1", id)[0].Queue == "analysis_default"
	})
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM job_escalations WHERE job_id = $1 AND actor = 'scheduler'`, id))
}

// TestStarvationBound floods a priority queue with better-priority work and
// checks that a worse-priority job still starts, within the bound of
// docs/scheduling.md, once aging runs — and not before aging could have
// lifted it to the flood's priority.
//
// Accelerated time: AGING_STEP=1s, AGING_INTERVAL=1s, so a priority-4 job
// reaches priority 2 after 2s of waiting and is picked up at the next sweep.
func TestStarvationBound(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	producerClient := db.Producer(t)

	db.Start(t, workertest.RiverConfig(t, db,
		"WORKER_SERVICE=analyzer", "LOAD_TEST_WORKLOAD=true",
		"ANALYZER_QUEUE_PRIORITY_WORKERS=2", "ANALYZER_QUEUE_DEFAULT_WORKERS=0", "ANALYZER_QUEUE_SCHEDULED_WORKERS=0",
		"QUEUE_PRIORITY_FETCH_COOLDOWN=5ms", "QUEUE_PRIORITY_FETCH_POLL_INTERVAL=50ms",
	))

	// The flood: enterprise-priority (2) jobs of 20ms, topped up to 40
	// available every 10ms, so two workers never run dry.
	var flooded atomic.Int64
	floodDone := make(chan struct{})
	go func() {
		defer close(floodDone)
		for ctx.Err() == nil {
			var available int
			if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'available' AND priority = 2`).Scan(&available); err != nil {
				return
			}
			var params []river.InsertManyParams
			for range 40 - available {
				params = append(params, river.InsertManyParams{Args: jobs.LoadTestArgs{SleepMS: 20},
					InsertOpts: &river.InsertOpts{Queue: "analysis_priority", Priority: 2}})
			}
			if len(params) > 0 {
				if _, err := producerClient.InsertMany(ctx, params); err != nil {
					return
				}
				flooded.Add(int64(len(params)))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	insertPro := func() int64 {
		res, err := producerClient.Insert(ctx, jobs.LoadTestArgs{}, &river.InsertOpts{Queue: "analysis_priority", Priority: 4})
		require.NoError(t, err)
		return res.Job.ID
	}
	startedAfter := func(id int64) (started bool, waited time.Duration) {
		var w *time.Duration
		require.NoError(t, db.Pool.QueryRow(ctx,
			`SELECT attempted_at - scheduled_at FROM river_job WHERE id = $1`, id).Scan(&w))
		if w == nil {
			return false, 0
		}
		return true, *w
	}

	testdb.WaitFor(t, 5*time.Second, "the flood to be running", func() bool { return flooded.Load() >= 40 })

	// Without aging the flood starves a priority-4 job.
	starved := insertPro()
	time.Sleep(3 * time.Second)
	started, _ := startedAfter(starved)
	require.False(t, started, "without aging, the flood must hold the priority-4 job back (else this test proves nothing)")

	// With aging: step 1s, max priority 2, sweep every 1s.
	startScheduler(t, db, schedulerConfig(t, db, "AGING_INTERVAL=1s", "AGING_STEP=1s", "AGING_MAX_PRIORITY=2", "ESCALATE_SCHEDULED_AFTER=0"))
	aged := insertPro()
	testdb.WaitFor(t, 15*time.Second, "the aged job to start", func() bool {
		ok, _ := startedAfter(aged)
		return ok
	})
	_, waited := startedAfter(aged)
	// Bound (docs/scheduling.md): (base − max)·step + interval + the
	// time to finish older work at the job's new priority and free a worker
	// (here ≤ 40 jobs × 20ms / 2 workers = 0.4s) + fetch and sweep latency.
	// The margin (2s) covers that and a loaded test machine.
	const step, interval = time.Second, time.Second
	bound := 2*step + interval + 2*time.Second
	t.Logf("priority-4 job under a flood of %d priority-2 jobs started after %s (bound %s)", flooded.Load(), waited, bound)
	require.GreaterOrEqual(t, waited, 2*step-100*time.Millisecond, "it cannot start before aging lifts it to the flood's priority")
	require.LessOrEqual(t, waited, bound)

	started, _ = startedAfter(starved)
	require.True(t, started, "the job starved before aging ran has started too")
	cancel()
	<-floodDone
}

// TestSweepMetricsMatchTheDatabase runs the scheduler over a known mix of
// waiting jobs and checks that tierq_aging_promotions_total and the
// scheduler's tierq_escalations_total agree with what the database shows
// changed.
func TestSweepMetricsMatchTheDatabase(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)

	// Five jobs that waited 10 minutes at priority 4: with a 1m step one
	// sweep lifts each to the cap (2) at once, and later sweeps leave them.
	for range 5 {
		testdb.InsertWaiting(t, db, jobs.LoadTestArgs{}, &river.InsertOpts{Queue: "specview_priority", Priority: 4}, 10*time.Minute)
	}
	// Three scheduled-class jobs past ESCALATE_SCHEDULED_AFTER (too young
	// for aging), and one job aging leaves alone (already at the cap).
	for range 3 {
		testdb.InsertWaiting(t, db, jobs.LoadTestArgs{}, &river.InsertOpts{Queue: "analysis_scheduled", Priority: 4}, 5*time.Second)
	}
	testdb.InsertWaiting(t, db, jobs.LoadTestArgs{}, &river.InsertOpts{Queue: "analysis_priority", Priority: 2}, time.Hour)

	reg := prometheus.NewRegistry()
	m := newMetrics(t, reg)
	db.Start(t, riverConfig(t, schedulerConfig(t, db,
		"AGING_INTERVAL=1s", "AGING_STEP=1m", "AGING_MAX_PRIORITY=2",
		"ESCALATION_INTERVAL=1s", "ESCALATE_SCHEDULED_AFTER=2s", "ESCALATE_DEFAULT_AFTER=1h",
	), db.Pool, discard, m))

	testdb.WaitFor(t, 15*time.Second, "the sweeps to move and promote every due job", func() bool {
		return db.Count(t, `SELECT count(*) FROM river_job WHERE queue = 'specview_priority' AND priority = 2`) == 5 &&
			db.Count(t, `SELECT count(*) FROM river_job WHERE queue = 'analysis_default'`) == 3
	})
	// Let a few more sweeps run: they find nothing and must count nothing.
	sweeps := db.Count(t, `SELECT count(*) FROM river_job WHERE kind = $1 AND state = 'completed'`, scheduler.KindAgingSweep)
	testdb.WaitFor(t, 10*time.Second, "two more aging sweeps", func() bool {
		return db.Count(t, `SELECT count(*) FROM river_job WHERE kind = $1 AND state = 'completed'`, scheduler.KindAgingSweep) >= sweeps+2
	})

	want := map[string]float64{
		"tierq_leader{}": 0,
		"tierq_sweep_skipped_rows_total{reason=metadata_not_object,sweep=aging}":          0,
		"tierq_sweep_skipped_rows_total{reason=metadata_not_object,sweep=escalation}":     0,
		"tierq_sweep_skipped_rows_total{reason=scheduled_at_not_finite,sweep=aging}":      0,
		"tierq_sweep_skipped_rows_total{reason=scheduled_at_not_finite,sweep=escalation}": 0,
		"tierq_aging_promotions_total{queue=analysis_priority}":                           0,
		"tierq_aging_promotions_total{queue=analysis_default}":                            0,
		"tierq_aging_promotions_total{queue=analysis_scheduled}":                          0,
		"tierq_aging_promotions_total{queue=specview_priority}":                           5,
		"tierq_aging_promotions_total{queue=specview_default}":                            0,
		"tierq_aging_promotions_total{queue=specview_scheduled}":                          0,
	}
	audited := db.Count(t, `SELECT count(*) FROM job_escalations WHERE actor = 'scheduler'
		AND from_queue = 'analysis_scheduled' AND to_queue = 'analysis_default'`)
	require.Equal(t, 3, audited)
	want["tierq_escalations_total{actor_kind=scheduler,from=analysis_scheduled,to=analysis_default}"] = float64(audited)
	require.Equal(t, want, promtest.Values(t, reg, "tierq_"))
}

// TestLeaderGauge checks WatchLeader's tierq_leader: 1 for the client that
// holds river_leader, 0 for another client's ID, and 0 while the database
// does not answer (river_leader locked by another transaction) until it
// answers again.
func TestLeaderGauge(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	client := startScheduler(t, db, schedulerConfig(t, db))
	testdb.WaitFor(t, 20*time.Second, "the client to lead", func() bool {
		return db.Count(t, `SELECT count(*) FROM river_leader WHERE leader_id = $1`, client.ID()) == 1
	})
	reg, otherReg := prometheus.NewRegistry(), prometheus.NewRegistry()
	leader, other := newMetrics(t, reg), newMetrics(t, otherReg)
	other.SetLeader(true) // the watcher must correct it
	const interval = 100 * time.Millisecond
	go scheduler.WatchLeader(ctx, db.Pool, discard, interval, client.ID(), leader)
	go scheduler.WatchLeader(ctx, db.Pool, discard, interval, "scheduler_elsewhere_1_1", other)
	gauge := func(reg *prometheus.Registry) float64 {
		return promtest.Values(t, reg, "tierq_leader")["tierq_leader{}"]
	}
	testdb.WaitFor(t, 5*time.Second, "tierq_leader 1 on the leader", func() bool { return gauge(reg) == 1 })
	testdb.WaitFor(t, 5*time.Second, "tierq_leader 0 on the other", func() bool { return gauge(otherReg) == 0 })

	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `LOCK TABLE river_leader IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	testdb.WaitFor(t, 5*time.Second, "tierq_leader 0 while the database does not answer", func() bool { return gauge(reg) == 0 })
	require.NoError(t, tx.Rollback(ctx))
	testdb.WaitFor(t, 5*time.Second, "tierq_leader 1 again", func() bool { return gauge(reg) == 1 })
}
