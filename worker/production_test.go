package worker_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/internal/proctest"
	"github.com/tierq/tierq/internal/queuestats"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/loadtest"
	"github.com/tierq/tierq/scheduler"
	"github.com/tierq/tierq/service"
	"github.com/tierq/tierq/tiers"
	"github.com/tierq/tierq/worker"
)

// Production traffic through a team's worker and scheduler deployments
// (worker.Run and scheduler.Run, as their mains run them, River's
// maintenance on in the scheduler): retries River writes available a few
// seconds ahead, jobs of kinds no worker of the queue fetches, a tenant id
// of thousands of bytes. Issue 27; each failed on 40aba78.

// flakyArgs is a job of the production tests' service: it works SleepMS
// and, with FailFirst, fails its first attempt.
type flakyArgs struct {
	SleepMS   int  `json:"sleep_ms"`
	FailFirst bool `json:"fail_first"`
}

func (flakyArgs) Kind() string { return "flaky" }

// flakyWorker retries after retryIn: River's executor writes a retry of 5 s
// or less straight into available, with its scheduled_at ahead.
type flakyWorker struct {
	river.WorkerDefaults[flakyArgs]
}

const retryIn = 4 * time.Second

func (*flakyWorker) NextRetry(*river.Job[flakyArgs]) time.Time { return time.Now().Add(retryIn) }

func (*flakyWorker) Work(ctx context.Context, job *river.Job[flakyArgs]) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Duration(job.Args.SleepMS) * time.Millisecond):
	}
	if job.Args.FailFirst && job.Attempt == 1 {
		return errors.New("downstream unavailable")
	}
	return nil
}

// productionRegistry is the team's service "billing" (queues bill_*) with
// the flaky kind.
func productionRegistry(*pgxpool.Pool) (*service.Registry, error) {
	svc, err := service.New(&service.Config{
		Name:      "billing",
		BaseQueue: "bill",
		Kinds:     []service.Kind{service.WorkerKind(&flakyWorker{})},
		Workers:   &service.ClassWorkers{Priority: 2, Default: 2, Scheduled: 1},
	})
	if err != nil {
		return nil, err
	}
	return service.NewRegistry(svc)
}

type productionBundle struct {
	db      *testdb.DB
	billing *service.Service
}

// setupProduction starts a worker deployment of billing (with the load-test
// workload, and env on top) and a scheduler deployment, until the test ends.
func setupProduction(t *testing.T, env ...string) *productionBundle {
	t.Helper()
	db := testdb.New(t)
	registry, err := productionRegistry(nil)
	require.NoError(t, err)
	billing, _ := registry.Lookup("billing")
	common := []string{"DATABASE_URL=" + db.URL, "DATABASE_SCHEMA=" + db.Schema}

	workerCfg, err := config.LoadWorker(append(append(common, "WORKER_SERVICE=billing", "LOAD_TEST_WORKLOAD=true"), env...), registry)
	require.NoError(t, err)
	schedulerCfg, err := config.Load[config.Scheduler](common)
	require.NoError(t, err)
	proctest.Start(t, nil,
		proctest.Deployment{Name: "worker", Run: func(ctx context.Context, _ []string, out io.Writer) error {
			return worker.Run(ctx, runConfig(t, workerCfg, registry, slog.New(slog.NewTextHandler(out, nil)), productionRegistry))
		}},
		proctest.Deployment{Name: "scheduler", Run: func(ctx context.Context, _ []string, out io.Writer) error {
			schedulerConfig, err := schedulerCfg.Config(registry, slog.New(slog.NewTextHandler(out, nil)))
			if err != nil {
				return err
			}
			schedulerConfig.NewServices = productionRegistry
			schedulerConfig.ExtraKinds = func(pool *pgxpool.Pool) []service.Kind {
				return []service.Kind{service.WorkerKind(loadtest.NewWorker(pool), service.Timeout[loadtest.Args](loadtest.Timeout))}
			}
			return scheduler.Run(ctx, schedulerConfig)
		}},
	)
	b := &productionBundle{db: db, billing: billing}
	testdb.WaitFor(t, 20*time.Second, "the worker's heartbeat", func() bool {
		return db.Count(t, `SELECT count(*) FROM fair_share_slots WHERE queue = 'bill_default'`) == 1
	})
	return b
}

// insert queues jobs of args for tenant's free tier through River's
// client with tierq's insert options.
func (b *productionBundle) insert(t *testing.T, tenant string, args river.JobArgs, n int) {
	t.Helper()
	params := make([]river.InsertManyParams, n)
	for i := range params {
		params[i] = river.InsertManyParams{Args: args, InsertOpts: b.billing.InsertOpts(tiers.Free, tenant, false)}
	}
	_, err := b.db.Producer(t).InsertMany(context.Background(), params)
	require.NoError(t, err)
}

// insertRaw queues n rows of kind for tenant into queue directly, as
// another producer may: args {"sleep_ms": sleepMS}.
func (b *productionBundle) insertRaw(t *testing.T, queue, kind, tenant string, sleepMS, n int) {
	t.Helper()
	_, err := b.db.Pool.Exec(context.Background(), `
		INSERT INTO river_job (kind, args, queue, priority, state, scheduled_at, max_attempts, metadata)
		SELECT $1, jsonb_build_object('sleep_ms', $4::int), $2, 3, 'available', now() + i * interval '1 microsecond', 3,
		       jsonb_build_object('tierq:tenant', $3::text, 'tierq:tier', 'free')
		FROM generate_series(1, $5) AS i`, kind, queue, tenant, sleepMS, n)
	require.NoError(t, err)
}

// count is how many of tenant's jobs match cond (SQL over river_job).
func (b *productionBundle) count(t *testing.T, tenant, cond string) int {
	t.Helper()
	return b.db.Count(t, `SELECT count(*) FROM river_job WHERE metadata->>'tierq:tenant' = $1 AND `+cond, tenant)
}

// TestRetriesDoNotStallFairShare: a tenant's flood fails each job's first
// attempt, River writing each retry available 4 s ahead. Before: the
// retries not yet due filled the tenant's window, its held jobs were not
// admitted and both workers idled until they were due, two first attempts
// per 4 s ("timed out after 30s waiting for every first attempt", the
// last count 45 of 60). After: the first attempts run back to back while the retries
// wait, and every job completes on its second.
func TestRetriesDoNotStallFairShare(t *testing.T) {
	t.Parallel()
	b := setupProduction(t, "BILLING_QUEUE_DEFAULT_WORKERS=2")
	b.insert(t, "a", flakyArgs{SleepMS: 20, FailFirst: true}, 60)
	// A second tenant: from its first job on, a's flood is held to its
	// window.
	b.insert(t, "b", flakyArgs{SleepMS: 20}, 1)
	last := -1
	testdb.WaitFor(t, 30*time.Second, "every first attempt", func() bool {
		started := b.count(t, "a", `attempt >= 1`)
		if started != last {
			t.Logf("first attempts: %d of 60", started)
			last = started
		}
		return started == 60
	})
	testdb.WaitFor(t, 60*time.Second, "every job completed", func() bool {
		return b.db.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'flaky' AND state = 'completed'`) == 61
	})
}

// TestUnfetchableRowsDoNotStrandATenant: a misrouted producer put two jobs
// of a kind no worker of bill_default runs there for tenant x, beside x's
// and y's own. Before: x's two rows filled its window for good and x's
// five jobs stayed held, the workers idle ("timed out after 30s waiting
// for x's jobs to complete"). After: x's jobs complete; the misrouted
// rows stay available, counted for an operator.
func TestUnfetchableRowsDoNotStrandATenant(t *testing.T) {
	t.Parallel()
	b := setupProduction(t, "BILLING_QUEUE_DEFAULT_WORKERS=2")
	b.insertRaw(t, "bill_default", loadtest.Kind, "y", 20, 30)
	b.insertRaw(t, "bill_default", "analysis", "x", 0, 2)
	b.insertRaw(t, "bill_default", loadtest.Kind, "x", 20, 5)
	testdb.WaitFor(t, 30*time.Second, "x's jobs to complete", func() bool {
		return b.count(t, "x", `kind = 'loadtest' AND state = 'completed'`) == 5
	})
	testdb.WaitFor(t, 30*time.Second, "y's jobs to complete", func() bool {
		return b.count(t, "y", `state = 'completed'`) == 30
	})
	require.Equal(t, 2, b.count(t, "x", `kind = 'analysis' AND state = 'available'`))
	// Reported (GET /v1/queues, tierq_unfetchable_jobs): the worker's
	// heartbeat says which kinds bill_default's workers run.
	unfetchable, err := queuestats.Unfetchable(context.Background(), b.db.Pool)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"bill_default": 2}, unfetchable)
}

// TestUnfetchableRowsDoNotStopLending: one misrouted row in the priority
// queue. Before: it read as paid work waiting, and the idle paid workers
// never took a free job ("timed out after 30s waiting for a lent job").
func TestUnfetchableRowsDoNotStopLending(t *testing.T) {
	t.Parallel()
	b := setupProduction(t, "BILLING_QUEUE_DEFAULT_WORKERS=1", "BILLING_LEND_IDLE_PRIORITY=true", "BILLING_LEND_FLOOR=0")
	b.insertRaw(t, "bill_priority", "analysis", "p", 0, 1)
	b.insertRaw(t, "bill_default", loadtest.Kind, "f", 200, 20)
	testdb.WaitFor(t, 30*time.Second, "a lent job", func() bool {
		return b.db.Count(t, `SELECT count(*) FROM river_job WHERE queue = 'bill_priority' AND kind = 'loadtest'
			AND attempted_at IS NOT NULL AND metadata->>'tierq:lent_from' = 'bill_default'`) >= 1
	})
}

// TestLongTenantIDDoesNotStopFairShare: a direct insert with a tenant id of
// 3,200 characters floods bill_default, then a newcomer queues one job.
// Before: every pass failed ("index row size 3256 exceeds btree version 4
// maximum 2704 for index \"river_job_tierq_held_idx\"") and the newcomer
// started after the whole flood ("the newcomer started with 0 of the
// flood not started"). After: the flood is held to its window and the
// newcomer starts within a few jobs.
func TestLongTenantIDDoesNotStopFairShare(t *testing.T) {
	t.Parallel()
	b := setupProduction(t, "BILLING_QUEUE_DEFAULT_WORKERS=2")
	raw := make([]byte, 1600)
	_, err := rand.Read(raw)
	require.NoError(t, err)
	long := hex.EncodeToString(raw)
	b.insertRaw(t, "bill_default", loadtest.Kind, long, 50, 60)
	testdb.WaitFor(t, 30*time.Second, "the flood to start", func() bool {
		return b.count(t, long, `attempted_at IS NOT NULL`) >= 1
	})
	b.insertRaw(t, "bill_default", loadtest.Kind, "newcomer", 0, 1)
	testdb.WaitFor(t, 30*time.Second, "the newcomer to start", func() bool {
		return b.count(t, "newcomer", `attempted_at IS NOT NULL`) == 1
	})
	waiting := b.count(t, long, `attempted_at IS NULL`)
	require.Greater(t, waiting, 40, fmt.Sprintf("the newcomer started with %d of the flood not started", waiting))
}

// TestSmallestPoolTakesTurns: at the smallest pool allowed
// (DATABASE_MAX_CONNS=2), fair share by turns (the default) holds one of the
// worker's two connections in its placing loop, and the rest of the process
// shares the other. A tenant's flood whose first attempts fail (retries
// written 4 s ahead, placed by that loop when due) and a second tenant's job
// inserted after it: the second tenant's job starts before most of the
// flood, and every job completes.
func TestSmallestPoolTakesTurns(t *testing.T) {
	t.Parallel()
	b := setupProduction(t, "DATABASE_MAX_CONNS=2", "BILLING_QUEUE_DEFAULT_WORKERS=2")
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM fair_share_slots WHERE queue = 'bill_default' AND turns`))
	b.insert(t, "a", flakyArgs{SleepMS: 50, FailFirst: true}, 40)
	b.insert(t, "b", flakyArgs{SleepMS: 0}, 1)
	testdb.WaitFor(t, 30*time.Second, "b's job to start", func() bool {
		return b.count(t, "b", `attempted_at IS NOT NULL`) == 1
	})
	waiting := b.count(t, "a", `attempted_at IS NULL`)
	require.Greater(t, waiting, 30, "b's job started with %d of a's 40 first attempts not started", waiting)
	testdb.WaitFor(t, 60*time.Second, "every job completed", func() bool {
		return b.db.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'flaky' AND state = 'completed'`) == 41
	})
	require.Equal(t, 40, b.count(t, "a", `attempt = 2`))
}
