package upgradetest_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/proctest"
	"github.com/tierq/tierq/internal/refapp"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/loadtest"
	"github.com/tierq/tierq/migrate"
)

// TestInfiniteTimestampsNeverStopRiver is issue 27's fourth case, through
// the reference app's scheduler and analyzer deployments (River's job
// scheduler, fetch and rescuer running as in production). The database is
// at tierq's version before migration 00010, and a producer writing SQL
// has put, beside good load-test jobs in analysis_priority, a retryable
// and an available job whose scheduled_at is -infinity, a killed worker's
// running job at -infinity, and an available and a scheduled job at
// infinity.
//
// River cannot read those rows ("cannot scan -Infinity into *time.Time"):
// its job scheduler fails every run, so no due retryable or scheduled job
// becomes available; its rescuer fails, so the killed worker's jobs stay
// running; the worker's fetch that took the available one fails and
// leaves the good jobs it took with it running, never worked.
//
// Then migrate.Up applies 00010 while the deployments run, and nothing is
// restarted: every good job completes (those left running once the
// rescuer takes them: the test moves their start an hour back instead of
// waiting RESCUE_STUCK_JOBS_AFTER), the -infinity jobs are worked, the
// infinity ones are cancelled with their reason, and River logs no more
// errors. Before the migration existed the test failed waiting for the
// jobs to finish.
func TestInfiniteTimestampsNeverStopRiver(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	// 00010's check dropped, its version still recorded: the processes
	// check the schema's version at start (migrate.Check) and would refuse
	// one without 00010; the version is forgotten under them, before Up.
	testdb.AllowInfinite(t, db)
	ctx := context.Background()

	insert := func(state, scheduled, attempted string, attempt int) int64 {
		t.Helper()
		var id int64
		require.NoError(t, db.Pool.QueryRow(ctx, `
			INSERT INTO river_job (state, queue, priority, kind, args, max_attempts, attempt, scheduled_at, attempted_at)
			VALUES ($1::river_job_state, 'analysis_priority', 4, $2, '{"sleep_ms": 10}', 5, $3, `+scheduled+`, `+attempted+`)
			RETURNING id`, state, loadtest.Kind, attempt).Scan(&id))
		return id
	}
	const (
		due     = "now() - interval '1 second'"
		longAgo = "now() - interval '2 hours'"
	)
	var available, dueLater []int64
	for range 8 {
		available = append(available, insert("available", due, "NULL", 0))
	}
	for range 2 {
		dueLater = append(dueLater,
			insert("retryable", due, "now() - interval '1 minute'", 1),
			insert("scheduled", due, "NULL", 0))
	}
	killed := insert("running", longAgo, longAgo, 1)
	good := slices.Concat(available, dueLater, []int64{killed})
	availableMinus := insert("available", "'-infinity'", "NULL", 0)
	retryableMinus := insert("retryable", "'-infinity'", "now() - interval '1 minute'", 1)
	killedMinus := insert("running", "'-infinity'", longAgo, 1)
	never := []int64{insert("available", "'infinity'", "NULL", 0), insert("scheduled", "'infinity'", "NULL", 0)}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("jobs: %+v", db.Jobs(t, "true"))
		}
	})

	// Windows: this schema has every migration but 00010's check, a state
	// no upgrade passes through (00010 comes before 00017's trigger of
	// turns). By turns, the trigger places the jobs River's scheduler makes
	// available against a line whose head is -infinity, and the scheduler
	// did not log River's scan error this test waits for (30 s, in vain).
	logs := proctest.Start(t,
		[]string{"DATABASE_URL=" + db.URL, "DATABASE_SCHEMA=" + db.Schema, "DATABASE_MAX_CONNS=4", "SOFT_STOP_TIMEOUT=2s", "QUEUE_FAIR_SHARE_MODE=windows"},
		proctest.Deployment{Name: "scheduler", Run: refapp.RunScheduler, Env: []string{"RESCUE_STUCK_JOBS_AFTER=1h"}},
		proctest.Deployment{Name: "analyzer", Run: refapp.RunWorker, Env: []string{
			"WORKER_SERVICE=analyzer", "LOAD_TEST_WORKLOAD=true", "ANALYZER_QUEUE_PRIORITY_WORKERS=4",
			"ANALYZER_QUEUE_DEFAULT_WORKERS=0", "ANALYZER_QUEUE_SCHEDULED_WORKERS=0",
		}},
	)

	// --- River stalls. ---

	waitLines(t, logs["scheduler"], 2, "JobScheduler: Error scheduling jobs", "cannot scan -Infinity")
	waitLines(t, logs["scheduler"], 1, "JobRescuer: Error rescuing jobs", "cannot scan -Infinity")
	waitLines(t, logs["analyzer"], 1, "Error fetching jobs", "cannot scan -Infinity")
	// Two runs of the job scheduler failed: no due job was made available.
	require.Len(t, db.Jobs(t, "id = ANY($1) AND state IN ('retryable', 'scheduled')", dueLater), len(dueLater))
	// The rescuer's run failed: the killed worker's job is still running.
	require.Len(t, db.Jobs(t, "id = ANY($1) AND state = 'running'", []int64{killed}), 1)
	// The fetch that took the -infinity job started the jobs it took with
	// it (one statement, one attempted_at) and handed none to a worker.
	var stranded []int64
	for _, j := range db.Jobs(t, `id = ANY($1) AND state = 'running'
		AND attempted_at = (SELECT attempted_at FROM river_job WHERE id = $2)`, available, availableMinus) {
		stranded = append(stranded, j.ID)
	}
	require.NotEmpty(t, stranded)
	t.Logf("stalled: %d good jobs left running by the failed fetch", len(stranded))

	// --- The upgrade, under the running deployments. ---

	// The schema as the release before 00010 left it (testdb.BeforeFiniteTimestamps).
	testdb.BeforeFiniteTimestamps(t, db)
	res, err := migrate.Up(ctx, db.Pool, db.Schema, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	marks := map[string]int{"scheduler": len(logs["scheduler"].String()), "analyzer": len(logs["analyzer"].String())}
	// An hour passes for the jobs the failed fetch started.
	_, err = db.Pool.Exec(ctx, `UPDATE river_job SET attempted_at = attempted_at - interval '2 hours' WHERE id = ANY($1)`,
		append(slices.Clone(stranded), availableMinus))
	require.NoError(t, err)

	worked := slices.Concat(good, []int64{availableMinus, retryableMinus, killedMinus})
	testdb.WaitFor(t, 90*time.Second, "every good and -infinity job completed, the infinity ones cancelled", func() bool {
		return len(db.Jobs(t, "id = ANY($1) AND state = 'completed'", worked)) == len(worked) &&
			len(db.Jobs(t, "id = ANY($1) AND state = 'cancelled'", never)) == len(never)
	})
	require.Equal(t, []int64{10, 11, 12, 13, 14, 15, 16, 17, 18, 19}, res.TierqApplied)
	for _, id := range never {
		var reason, cancelledFrom string
		require.NoError(t, db.Pool.QueryRow(ctx, `
			SELECT errors[cardinality(errors)]->>'error', metadata->'tierq:repaired'->>'cancelled_from'
			FROM river_job WHERE id = $1`, id).Scan(&reason, &cancelledFrom))
		require.Contains(t, reason, "cancelled: scheduled_at was infinity")
		require.NotEmpty(t, cancelledFrom)
	}
	require.Equal(t, 3, db.Count(t, `SELECT count(*) FROM river_job
		WHERE id = ANY($1) AND metadata->'tierq:repaired'->>'scheduled_at' = '-infinity'`,
		[]int64{availableMinus, retryableMinus, killedMinus}))
	for name, mark := range marks {
		after := logs[name].String()[mark:]
		for _, msg := range []string{"Error scheduling jobs", "Error rescuing jobs", "Error fetching jobs", "cannot scan"} {
			require.NotContains(t, after, msg, "%s after the upgrade", name)
		}
	}
}

// waitLines waits until out has n lines that each contain every one of
// parts.
func waitLines(t *testing.T, out *proctest.Buffer, n int, parts ...string) {
	t.Helper()
	testdb.WaitFor(t, 30*time.Second, strings.Join(parts, " … "), func() bool {
		found := 0
		for line := range strings.Lines(out.String()) {
			if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(line, p) }) {
				found++
			}
		}
		return found >= n
	})
}
