package jobs_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/jobs/jobsconfig"
	"github.com/tierq/tierq/metrics"
	"github.com/tierq/tierq/producer"
	"github.com/tierq/tierq/scheduler"
	"github.com/tierq/tierq/tiers"
)

// startMaintenance starts a scheduler as cmd/scheduler does, for the
// reference app's services with the analyzer's maintenance configured by
// environ (config.Scheduler). The cron jobs have slots every 10 minutes:
// the latest is always younger than scheduler.CronCatchUp, so both run once
// when the scheduler starts (RunOnStart) and not again during a test.
func startMaintenance(t *testing.T, db *testdb.DB, environ ...string) *river.Client[pgx.Tx] {
	t.Helper()
	environ = append([]string{
		"DATABASE_URL=" + db.URL, "DATABASE_SCHEMA=" + db.Schema,
		"REANALYZE_CRON=@every 10m", "RETENTION_CRON=@every 10m",
	}, environ...)
	cfg, err := config.Load[config.Scheduler](environ)
	require.NoError(t, err)
	maintenance, err := jobsconfig.LoadMaintenance(environ, &cfg)
	require.NoError(t, err)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	services, err := jobs.Registry(jobs.Deps{Pool: db.Pool, Logger: logger, Maintenance: maintenance})
	require.NoError(t, err)
	m := metrics.NewScheduler(prometheus.NewRegistry(), services.Queues())
	schedulerConfig, err := cfg.Config(services, logger)
	require.NoError(t, err)
	riverConfig, err := scheduler.RiverConfig(schedulerConfig, db.Pool, services, m)
	require.NoError(t, err)
	return db.Start(t, riverConfig)
}

// TestMaintenanceIsTheAnalyzersPeriodicWork: with Deps.Maintenance the
// analyzer has the re-analysis and retention cron jobs, whose kinds the
// scheduler works (periodic kinds: no producer may insert one as the
// analyzer's work); without it, none.
func TestMaintenanceIsTheAnalyzersPeriodicWork(t *testing.T) {
	t.Parallel()
	every := river.PeriodicInterval(time.Hour)
	r, err := jobs.Registry(jobs.Deps{Maintenance: &jobs.Maintenance{ReanalyzeSchedule: every, RetentionSchedule: every}})
	require.NoError(t, err)
	require.Len(t, r.PeriodicJobs(), 2)
	analyzer, _ := r.Lookup(jobs.ServiceAnalyzer)
	var kinds []string
	for _, k := range analyzer.PeriodicKinds() {
		kinds = append(kinds, k.Name())
	}
	require.Equal(t, []string{jobs.KindReanalyzeStale, jobs.KindRetention}, kinds)
	require.Equal(t, []string{"analysis", "specview"}, r.KindNames())
	_, _, ok := r.ForKind(jobs.KindRetention)
	require.False(t, ok)

	r, err = jobs.Registry(jobs.Deps{})
	require.NoError(t, err)
	require.Empty(t, r.PeriodicJobs())

	_, err = jobs.Registry(jobs.Deps{Maintenance: &jobs.Maintenance{ReanalyzeSchedule: every}})
	require.ErrorContains(t, err, "schedules are required")
}

func insertResult(t *testing.T, db *testdb.DB, target, tier string, age time.Duration) int64 {
	t.Helper()
	var id int64
	require.NoError(t, db.Pool.QueryRow(context.Background(), `
		INSERT INTO analysis_results (job_id, target, user_id, tier, total_tests, go_tests, python_tests,
		                              js_tests, files_scanned, files_skipped, tests, created_at)
		VALUES ((SELECT coalesce(max(job_id), 0) + 1 FROM analysis_results), $1, 'u_' || $2, $2,
		        1, 1, 0, 0, 1, 0, '[]', now() - make_interval(secs => $3))
		RETURNING id`, target, tier, age.Seconds()).Scan(&id))
	return id
}

func TestReanalyzeQueuesStaleTargetsOnce(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()

	insertResult(t, db, "/srv/a", "enterprise", 48*time.Hour)
	insertResult(t, db, "/srv/b", "pro", 48*time.Hour)
	insertResult(t, db, "/srv/b", "pro", time.Hour) // b's latest result is fresh
	insertResult(t, db, "/srv/c", "free", 30*time.Hour)
	insertResult(t, db, "/srv/d", "pro", 30*time.Hour)
	// d already has a queued analysis (a user asked for it).
	var queued producer.Inserted
	require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		var err error
		queued, err = producer.Insert(ctx, db.Producer(t), tx, producer.Job{
			Args: jobs.AnalysisArgs{Target: "/srv/d", Tier: "pro"}, Service: testdb.Service(t, "analyzer"), Tier: tiers.Pro,
		})
		return err
	}))

	client := startMaintenance(t, db)
	waitCompleted(t, db, jobs.KindReanalyzeStale, 1)

	type row struct {
		Target   string
		Queue    string
		Priority int
	}
	analyses := func() []row {
		rows, err := db.Pool.Query(ctx, `SELECT args->>'target', queue, priority FROM river_job WHERE kind = 'analysis' ORDER BY args->>'target'`)
		require.NoError(t, err)
		out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
		require.NoError(t, err)
		return out
	}
	want := []row{
		{Target: "/srv/a", Queue: "analysis_scheduled", Priority: 2},
		{Target: "/srv/c", Queue: "analysis_scheduled", Priority: 4},
		{Target: "/srv/d", Queue: queued.Job.Queue, Priority: queued.Job.Priority},
	}
	require.Equal(t, want, analyses())

	// Another run while those are still queued adds nothing.
	_, err := client.Insert(ctx, jobs.ReanalyzeStaleArgs{}, &river.InsertOpts{Queue: scheduler.Queue})
	require.NoError(t, err)
	waitCompleted(t, db, jobs.KindReanalyzeStale, 2)
	require.Equal(t, want, analyses())
}

func waitCompleted(t *testing.T, db *testdb.DB, kind string, n int) {
	t.Helper()
	testdb.WaitFor(t, 20*time.Second, kind+" to complete", func() bool {
		return db.Count(t, `SELECT count(*) FROM river_job WHERE kind = $1 AND state = 'completed'`, kind) >= n
	})
}

func TestRetentionDeletesOldRowsInBatches(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()

	addDoc := func(resultID int64, age time.Duration) {
		_, err := db.Pool.Exec(ctx, `
			INSERT INTO spec_documents (job_id, analysis_result_id, title, content, test_count, created_at)
			VALUES ((SELECT coalesce(max(job_id), 0) + 1 FROM spec_documents), $1, 't', 'c', 1, now() - make_interval(secs => $2))`,
			resultID, age.Seconds())
		require.NoError(t, err)
	}
	for range 5 {
		addDoc(insertResult(t, db, "/srv/old", "free", 100*24*time.Hour), 100*24*time.Hour)
	}
	fresh := insertResult(t, db, "/srv/new", "free", time.Hour)
	addDoc(fresh, 3*time.Hour) // old document of a fresh result: deleted
	addDoc(fresh, time.Minute) // kept

	startMaintenance(t, db, "RETENTION_PERIOD=2h", "SWEEP_BATCH=2")
	waitCompleted(t, db, jobs.KindRetention, 1)

	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM analysis_results`))
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM analysis_results WHERE id = $1`, fresh))
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM spec_documents`))
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM spec_documents WHERE created_at > now() - interval '1 hour'`))
}
