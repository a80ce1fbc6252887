package worker_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/jobs/jobsconfig"
	"github.com/tierq/tierq/routing"
	"github.com/tierq/tierq/service"
	"github.com/tierq/tierq/tiers"
)

type testBundle struct {
	db       *testdb.DB
	producer *river.Client[pgx.Tx]
	fixture  string
	analyzer *service.Service // the reference app's services, for their queues
	specGen  *service.Service
	roots    jobs.AnalysisRoots // ANALYSIS_ROOTS of the latest workerConfig
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	db := testdb.New(t)
	producer := db.Producer(t)
	fixture, err := filepath.Abs("../jobs/scan/testdata/fixture")
	require.NoError(t, err)
	return &testBundle{
		db: db, producer: producer, fixture: fixture,
		analyzer: testdb.Service(t, jobs.ServiceAnalyzer), specGen: testdb.Service(t, jobs.ServiceSpecGen),
	}
}

// workerConfig loads a worker configuration the way cmd/worker does, with fast
// fetching so tests do not wait on poll intervals.
func (b *testBundle) workerConfig(t *testing.T, svc *service.Service, extra ...string) config.Worker {
	t.Helper()
	environ := append([]string{
		"DATABASE_URL=" + b.db.URL, "DATABASE_SCHEMA=" + b.db.Schema, "WORKER_SERVICE=" + svc.Name(),
		"QUEUE_PRIORITY_FETCH_COOLDOWN=10ms", "QUEUE_PRIORITY_FETCH_POLL_INTERVAL=100ms",
		"QUEUE_DEFAULT_FETCH_COOLDOWN=10ms", "QUEUE_DEFAULT_FETCH_POLL_INTERVAL=100ms",
		"QUEUE_SCHEDULED_FETCH_COOLDOWN=10ms", "QUEUE_SCHEDULED_FETCH_POLL_INTERVAL=100ms",
	}, extra...)
	described, err := jobs.Registry(jobs.Deps{})
	require.NoError(t, err)
	cfg, err := config.LoadWorker(environ, described)
	require.NoError(t, err)
	analysis, err := config.LoadSection[jobsconfig.AnalysisConfig](environ)
	require.NoError(t, err)
	b.roots = analysis.Roots
	return cfg
}

// start starts a client built from cfg (after mutate, if given), with the
// reference app's services built on the test's pool as cmd/worker builds
// them, and stops it when the test ends.
func (b *testBundle) start(t *testing.T, cfg config.Worker, mutate func(*river.Config)) *river.Client[pgx.Tx] {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	services, err := jobs.Registry(jobs.Deps{Pool: b.db.Pool, Logger: logger, AnalysisRoots: b.roots})
	require.NoError(t, err)
	described, err := jobs.Registry(jobs.Deps{})
	require.NoError(t, err)
	riverConfig, err := riverConfig(cfg, described, services, b.db.Pool, logger)
	require.NoError(t, err)
	if mutate != nil {
		mutate(riverConfig)
	}
	return b.db.Start(t, riverConfig)
}

func TestEachTierRoutedAndWorkedThroughBothServices(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()

	b.start(t, b.workerConfig(t, b.analyzer), nil)
	b.start(t, b.workerConfig(t, b.specGen), nil)

	type inserted struct {
		tier        tiers.Tier
		isScheduled bool
		jobID       int64
	}
	var all []inserted
	for _, tier := range tiers.All() {
		for _, isScheduled := range []bool{false, true} {
			res, err := b.producer.Insert(ctx,
				jobs.AnalysisArgs{Target: b.fixture, UserID: "user_" + tier.String(), Tier: tier.String()},
				b.analyzer.InsertOpts(tier, "", isScheduled))
			require.NoError(t, err)
			all = append(all, inserted{tier: tier, isScheduled: isScheduled, jobID: res.Job.ID})
		}
	}

	testdb.WaitFor(t, 30*time.Second, "every spec document", func() bool {
		var n int
		require.NoError(t, b.db.Pool.QueryRow(ctx, "SELECT count(*) FROM spec_documents").Scan(&n))
		return n == len(all)
	})

	for _, in := range all {
		name := fmt.Sprintf("%s scheduled=%v", in.tier, in.isScheduled)
		wantClass := routing.ClassFor(in.tier, in.isScheduled)

		analysis := b.db.Jobs(t, "id = $1", in.jobID)
		require.Len(t, analysis, 1, name)
		require.Equal(t, b.analyzer.Queue(wantClass), analysis[0].Queue, name)
		require.Equal(t, "completed", analysis[0].State, name)
		require.Equal(t, routing.StartingPriority(in.tier), analysis[0].Priority, name)

		var resultID, total int64
		require.NoError(t, b.db.Pool.QueryRow(ctx,
			"SELECT id, total_tests FROM analysis_results WHERE job_id = $1", in.jobID).Scan(&resultID, &total))
		require.EqualValues(t, 19, total, name)

		specs := b.db.Jobs(t, "kind = 'specview' AND (args->>'analysis_result_id')::bigint = $1", resultID)
		require.Len(t, specs, 1, name)
		require.Equal(t, b.specGen.Queue(wantClass), specs[0].Queue, name)
		require.Equal(t, routing.StartingPriority(in.tier), specs[0].Priority, name)
		require.Equal(t, "completed", specs[0].State, name)

		var content string
		require.NoError(t, b.db.Pool.QueryRow(ctx,
			"SELECT content FROM spec_documents WHERE job_id = $1", specs[0].ID).Scan(&content))
		require.Contains(t, content, "- Select queue: unknown tier goes default\n", name)
		require.Contains(t, content, "## go/pkg/router_test.go\n", name)
	}
}

func TestUnknownTierRoutesDefaultAndIsCounted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.start(t, b.workerConfig(t, b.analyzer), nil)

	unknownBefore := routing.UnknownTierCount()
	// A producer in another language inserted the job with a tier it made up.
	res, err := b.producer.Insert(ctx, jobs.AnalysisArgs{Target: b.fixture, Tier: "platinum"},
		&river.InsertOpts{Queue: "analysis_priority"})
	require.NoError(t, err)

	testdb.WaitFor(t, 30*time.Second, "the analysis to complete", func() bool {
		return b.db.Jobs(t, "id = $1", res.Job.ID)[0].State == "completed"
	})
	specs := b.db.Jobs(t, "kind = 'specview'")
	require.Len(t, specs, 1)
	// The analysis ran in the priority queue, so its spec keeps that class;
	// the unknown tier gets the lowest starting priority there.
	require.Equal(t, "specview_priority", specs[0].Queue)
	require.Equal(t, routing.PriorityLowest, specs[0].Priority)
	require.Greater(t, routing.UnknownTierCount(), unknownBefore, "the unknown tier was counted")
}

func TestPermanentErrorsCancelWithReason(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.start(t, b.workerConfig(t, b.analyzer), nil)
	b.start(t, b.workerConfig(t, b.specGen), nil)

	missing, err := b.producer.Insert(ctx, jobs.AnalysisArgs{Target: "/no/such/dir", Tier: "pro"}, b.analyzer.InsertOpts(tiers.Pro, "", false))
	require.NoError(t, err)
	empty, err := b.producer.Insert(ctx, jobs.AnalysisArgs{Tier: "free"}, b.analyzer.InsertOpts(tiers.Free, "", false))
	require.NoError(t, err)
	noResult, err := b.producer.Insert(ctx, jobs.SpecViewArgs{AnalysisResultID: 999_999}, b.specGen.InsertOpts(tiers.Free, "", false))
	require.NoError(t, err)

	// Args of the wrong JSON types, as a producer in another language could send.
	var wrongTypes int64
	require.NoError(t, b.db.Pool.QueryRow(ctx, `
		INSERT INTO river_job (kind, queue, args, priority, max_attempts, state)
		VALUES ('analysis', 'analysis_default', '{"target": 42}', 4, 25, 'available') RETURNING id`).Scan(&wrongTypes))

	want := map[int64]string{
		missing.Job.ID:  `target "/no/such/dir" does not exist`,
		empty.Job.ID:    "bad analysis args: target is required",
		noResult.Job.ID: "analysis result not found: id 999999",
		wrongTypes:      "bad analysis args: json: cannot unmarshal number",
	}
	for id, reason := range want {
		testdb.WaitFor(t, 30*time.Second, fmt.Sprintf("job %d cancelled", id), func() bool {
			return b.db.Jobs(t, "id = $1", id)[0].State == "cancelled"
		})
		var attempt int
		var lastError string
		require.NoError(t, b.db.Pool.QueryRow(ctx,
			"SELECT attempt, errors[array_length(errors, 1)]->>'error' FROM river_job WHERE id = $1", id).Scan(&attempt, &lastError))
		require.Equal(t, 1, attempt, "cancelled on the first attempt, not retried")
		require.Contains(t, lastError, reason)
	}
}

func TestSpecGenDeploymentNeverTakesAnalysisWork(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.start(t, b.workerConfig(t, b.specGen), nil)

	// Analysis jobs in every analysis queue, and, to prove the specgen worker
	// was fetching all along, specview jobs it must finish.
	for _, tier := range tiers.All() {
		for _, isScheduled := range []bool{false, true} {
			_, err := b.producer.Insert(ctx, jobs.AnalysisArgs{Target: b.fixture, Tier: tier.String()}, b.analyzer.InsertOpts(tier, "", isScheduled))
			require.NoError(t, err)
		}
	}
	var resultID int64
	require.NoError(t, b.db.Pool.QueryRow(ctx, `
		INSERT INTO analysis_results (job_id, target, total_tests, go_tests, python_tests, js_tests, files_scanned, files_skipped, tests)
		VALUES (-1, 'x', 0, 0, 0, 0, 0, 0, '[]') RETURNING id`).Scan(&resultID))
	for _, tier := range tiers.All() {
		_, err := b.producer.Insert(ctx, jobs.SpecViewArgs{AnalysisResultID: resultID}, b.specGen.InsertOpts(tier, "", false))
		require.NoError(t, err)
	}
	// Jobs in the analysis kind routed, wrongly, to a specview queue.
	_, err := b.producer.Insert(ctx, jobs.AnalysisArgs{Target: b.fixture}, &river.InsertOpts{Queue: "specview_default"})
	require.NoError(t, err)

	testdb.WaitFor(t, 30*time.Second, "the specview jobs", func() bool {
		return len(b.db.Jobs(t, "kind = 'specview' AND state = 'completed'")) == 4
	})
	time.Sleep(300 * time.Millisecond) // several more fetch rounds
	analysis := b.db.Jobs(t, "kind = 'analysis'")
	require.Len(t, analysis, 9)
	for _, j := range analysis {
		require.Equal(t, "available", j.State, "job %d in %s", j.ID, j.Queue)
		require.Zero(t, j.Attempt, "job %d in %s was fetched", j.ID, j.Queue)
	}
}

// blocker is worker middleware that holds every job until released, and
// records the most jobs it saw running at once per queue.
type blocker struct {
	mu      sync.Mutex
	running map[string]int
	max     map[string]int
	release chan struct{}
}

func newBlocker() *blocker {
	return &blocker{running: map[string]int{}, max: map[string]int{}, release: make(chan struct{})}
}

func (bl *blocker) middleware() rivertype.Middleware {
	return river.WorkerMiddlewareFunc(func(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
		bl.mu.Lock()
		bl.running[job.Queue]++
		bl.max[job.Queue] = max(bl.max[job.Queue], bl.running[job.Queue])
		bl.mu.Unlock()
		defer func() {
			bl.mu.Lock()
			bl.running[job.Queue]--
			bl.mu.Unlock()
		}()
		select {
		case <-bl.release:
		case <-ctx.Done():
			return ctx.Err()
		}
		return doInner(ctx)
	})
}

func (bl *blocker) maxSeen() map[string]int {
	bl.mu.Lock()
	defer bl.mu.Unlock()
	out := map[string]int{}
	for k, v := range bl.max {
		out[k] = v
	}
	return out
}

func TestConcurrencyPerQueueNeverExceedsConfiguredCount(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()

	// Two replicas of one deployment: MaxWorkers is per process, so the
	// database sees up to twice the configured count running.
	const replicas = 2
	counts := map[string]int{"analysis_priority": 3, "analysis_default": 2, "analysis_scheduled": 1}
	cfg := b.workerConfig(t, b.analyzer,
		"ANALYZER_QUEUE_PRIORITY_WORKERS=3", "ANALYZER_QUEUE_DEFAULT_WORKERS=2", "ANALYZER_QUEUE_SCHEDULED_WORKERS=1")
	blockers := make([]*blocker, replicas)
	for i := range blockers {
		blockers[i] = newBlocker()
		b.start(t, cfg, func(c *river.Config) { c.Middleware = append(c.Middleware, blockers[i].middleware()) })
	}

	const perQueue = 12
	for queue := range counts {
		for range perQueue {
			_, err := b.producer.Insert(ctx, jobs.AnalysisArgs{Target: b.fixture, Tier: "free"}, &river.InsertOpts{Queue: queue})
			require.NoError(t, err)
		}
	}

	runningByQueue := func() map[string]int {
		rows, err := b.db.Pool.Query(ctx, "SELECT queue, count(*) FROM river_job WHERE state = 'running' GROUP BY queue")
		require.NoError(t, err)
		out := map[string]int{}
		for rows.Next() {
			var queue string
			var n int
			require.NoError(t, rows.Scan(&queue, &n))
			out[queue] = n
		}
		require.NoError(t, rows.Err())
		return out
	}

	// Saturate: every replica fills every queue to its count, and no further.
	testdb.WaitFor(t, 30*time.Second, "all queues saturated", func() bool {
		running := runningByQueue()
		for queue, n := range counts {
			require.LessOrEqual(t, running[queue], replicas*n, queue)
			if running[queue] < replicas*n {
				return false
			}
		}
		return true
	})
	time.Sleep(300 * time.Millisecond) // more fetch rounds while saturated
	for queue, n := range runningByQueue() {
		require.Equal(t, replicas*counts[queue], n, queue)
	}
	for _, bl := range blockers {
		require.Equal(t, counts, bl.maxSeen())
	}

	for _, bl := range blockers {
		close(bl.release)
	}
	testdb.WaitFor(t, 60*time.Second, "every job completed", func() bool {
		return len(b.db.Jobs(t, "kind = 'analysis' AND state = 'completed'")) == perQueue*len(counts)
	})
	for _, bl := range blockers {
		require.Equal(t, counts, bl.maxSeen())
	}
}

func TestLoadTestWorkloadRecordsExecutionsAndFailsOnPurpose(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	client := b.start(t, b.workerConfig(t, b.analyzer, "LOAD_TEST_WORKLOAD=true"), nil)

	// Recorded: one execution row, completed in the completing transaction.
	ok, err := b.producer.Insert(ctx, jobs.LoadTestArgs{SleepMS: 5, Record: true}, &river.InsertOpts{Queue: "analysis_priority"})
	require.NoError(t, err)
	// Fails while fail_until is ahead, then succeeds on its retry.
	until := time.Now().Add(500 * time.Millisecond)
	flaky, err := b.producer.Insert(ctx, jobs.LoadTestArgs{Record: true, FailUntil: &until}, &river.InsertOpts{Queue: "analysis_priority"})
	require.NoError(t, err)
	// Fails every attempt: discarded after its only one.
	never := time.Now().Add(time.Hour)
	doomed, err := b.producer.Insert(ctx, jobs.LoadTestArgs{Record: true, FailUntil: &never}, &river.InsertOpts{Queue: "analysis_priority", MaxAttempts: 1})
	require.NoError(t, err)

	testdb.WaitFor(t, 20*time.Second, "the three jobs to finish", func() bool {
		return b.db.Count(t, `SELECT count(*) FROM river_job WHERE id = ANY($1) AND state IN ('completed', 'discarded')`,
			[]int64{ok.Job.ID, flaky.Job.ID, doomed.Job.ID}) == 3
	})

	type execution struct {
		Attempt   int
		ClientID  string
		Completed bool
	}
	executions := func(id int64) []execution {
		rows, err := b.db.Pool.Query(ctx, `SELECT attempt, client_id, completed_at IS NOT NULL FROM load_test_executions WHERE job_id = $1 ORDER BY id`, id)
		require.NoError(t, err)
		out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[execution])
		require.NoError(t, err)
		return out
	}
	require.Equal(t, []execution{{1, client.ID(), true}}, executions(ok.Job.ID))
	require.Equal(t, []execution{{1, client.ID(), false}, {2, client.ID(), true}}, executions(flaky.Job.ID))
	require.Equal(t, []execution{{1, client.ID(), false}}, executions(doomed.Job.ID))

	var state, lastError string
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT state, errors[array_length(errors, 1)]->>'error' FROM river_job WHERE id = $1`, doomed.Job.ID).Scan(&state, &lastError))
	require.Equal(t, "discarded", state)
	require.Contains(t, lastError, "failing on purpose")
	require.Equal(t, "completed", b.db.Jobs(t, "id = $1", flaky.Job.ID)[0].State)
}
