package worker_test

import (
	"context"
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
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/loadtest"
	"github.com/tierq/tierq/service"
	"github.com/tierq/tierq/tiers"
	"github.com/tierq/tierq/worker"
)

// fairBundle is a team's mailer service served by worker replicas of Run,
// each with the load-test workload registered (the jobs these tests queue).
type fairBundle struct {
	db     *testdb.DB
	mailer *service.Service
}

func setupFair(t *testing.T) *fairBundle {
	t.Helper()
	db := testdb.New(t)
	return &fairBundle{db: db, mailer: newMailer(t, nil, "mail")}
}

// startReplica runs one worker replica of the mailer until the test ends,
// with env on top of the bundle's settings, logging text to a buffer.
func (b *fairBundle) startReplica(t *testing.T, env ...string) {
	t.Helper()
	b.startReplicaLogging(t, func(w io.Writer) slog.Handler { return slog.NewTextHandler(w, nil) }, env...)
}

// startReplicaLogging is startReplica with the replica's log handler made
// by newHandler on the buffer it returns.
func (b *fairBundle) startReplicaLogging(t *testing.T, newHandler func(io.Writer) slog.Handler, env ...string) *proctest.Buffer {
	t.Helper()
	newServices := func(pool *pgxpool.Pool) (*service.Registry, error) {
		return service.NewRegistry(newMailer(t, pool, "mail"))
	}
	described, err := newServices(nil)
	require.NoError(t, err)
	cfg, err := config.LoadWorker(append([]string{
		"DATABASE_URL=" + b.db.URL, "DATABASE_SCHEMA=" + b.db.Schema, "WORKER_SERVICE=mailer",
		"LOAD_TEST_WORKLOAD=true", "MAILER_QUEUE_DEFAULT_WORKERS=0", "MAILER_QUEUE_SCHEDULED_WORKERS=0",
	}, env...), described)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	out := &proctest.Buffer{}
	done := make(chan error, 1)
	runCfg := runConfig(t, cfg, described, slog.New(newHandler(out)), newServices)
	go func() { done <- worker.Run(ctx, runCfg) }()
	t.Cleanup(func() { proctest.WaitReturn(t, cancel, done, out) })
	return out
}

// queue inserts n load-test jobs of sleepMS for tenant of tier, in one
// batch, and returns their ids.
func (b *fairBundle) queue(t *testing.T, tenant string, tier tiers.Tier, n, sleepMS int) []int64 {
	t.Helper()
	params := make([]river.InsertManyParams, n)
	for i := range params {
		params[i] = river.InsertManyParams{Args: loadtest.Args{SleepMS: sleepMS}, InsertOpts: b.mailer.InsertOpts(tier, tenant, false)}
	}
	res, err := b.db.Producer(t).InsertMany(context.Background(), params)
	require.NoError(t, err)
	ids := make([]int64, n)
	for i, r := range res {
		ids[i] = r.Job.ID
	}
	return ids
}

// waitCapacity waits until the replicas' heartbeats give the priority
// queue a capacity of n.
func (b *fairBundle) waitCapacity(t *testing.T, n int) {
	t.Helper()
	testdb.WaitFor(t, 20*time.Second, fmt.Sprintf("a capacity of %d", n), func() bool {
		return b.db.Count(t, `SELECT coalesce(sum(slots), 0) FROM fair_share_slots WHERE queue = 'mail_priority'`) == n
	})
}

// startOrder is the tenants of the queue's started jobs in start order.
func (b *fairBundle) startOrder(t *testing.T) []string {
	t.Helper()
	rows, err := b.db.Pool.Query(context.Background(), `
		SELECT metadata->>'tierq:tenant' FROM river_job
		WHERE queue = 'mail_priority' AND attempted_at IS NOT NULL ORDER BY attempted_at, id`)
	require.NoError(t, err)
	var order []string
	for rows.Next() {
		var tenant string
		require.NoError(t, rows.Scan(&tenant))
		order = append(order, tenant)
	}
	require.NoError(t, rows.Err())
	return order
}

// TestFairShareAcrossReplicas: two worker replicas of 2 priority workers
// each share the queue's 4 workers among three tenants by weight (a: 2, b
// and c: 1), although a queued its 40 jobs first: from the first start of
// c on, the start order is the weighted round robin, each tenant within
// slack jobs of its share at every point. By windows, from the first pass
// on, within 2. By turns (the default), within 3: the order is the jobs'
// turns (fairshare TestTurns), but four workers in two processes fetch
// concurrently and a fetch's jobs share one attempted_at (ordered here by
// id), so a tenant can start up to 2.5 jobs behind its share (seen once in
// make test, 2026-11-28, after 7 starts).
func TestFairShareAcrossReplicas(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		mode  string
		slack float64
	}{{"turns", 3}, {"windows", 2}} {
		t.Run(c.mode, func(t *testing.T) {
			t.Parallel()
			b := setupFair(t)
			ctx := context.Background()
			_, err := b.db.Pool.Exec(ctx, `INSERT INTO fair_share_weights (tenant, weight) VALUES ('a', 2)`)
			require.NoError(t, err)
			b.startReplica(t, "MAILER_QUEUE_PRIORITY_WORKERS=2", "QUEUE_FAIR_SHARE_MODE="+c.mode)
			b.startReplica(t, "MAILER_QUEUE_PRIORITY_WORKERS=2", "QUEUE_FAIR_SHARE_MODE="+c.mode)
			b.waitCapacity(t, 4)
			b.queue(t, "a", tiers.Pro, 40, 40)
			b.queue(t, "b", tiers.Pro, 20, 40)
			b.queue(t, "c", tiers.Pro, 20, 40)
			testdb.WaitFor(t, 60*time.Second, "48 jobs started", func() bool {
				return len(b.startOrder(t)) >= 48
			})
			order := b.startOrder(t)[:48]
			t.Logf("start order: %v", order)

			// By windows, the first starts come before the first pass (a's
			// jobs are first in line, and nothing is held until every worker
			// is busy): skip up to the first start of c, the last tenant in
			// line. Before the first hold come a look and a pass, each planned
			// cold on the connection that runs it (100–250 ms on a 2-core
			// machine, against 40 ms jobs on 4 workers: 100 starts a second):
			// up to about 25 of a's starts. (The bound was 20, 200 ms, until
			// make test's load made it 22 once, 2026-11-27; the pass's plan,
			// with the rate limits' view, takes about 4 ms to make instead of
			// 3. Before 2026-11-27 a worker also rested three times its first
			// pass's time after it, and c came after all 40.) By turns, only
			// a's starts before b and c were inserted come first.
			first := 0
			for first < len(order) && order[first] != "c" {
				first++
			}
			require.Less(t, first, 26, "c started late: %v", order)
			share := map[string]float64{"a": 0.5, "b": 0.25, "c": 0.25}
			counts := map[string]int{}
			for i, tenant := range order[first:] {
				counts[tenant]++
				n := float64(i + 1)
				for name, s := range share {
					require.InDelta(t, s*n, float64(counts[name]), c.slack,
						"after %d starts, %s has %d: %v", i+1, name, counts[name], order[first:])
				}
			}
		})
	}
}

// TestFairShareAloneUsesEveryWorker: a tenant alone has the whole
// capacity of both replicas: all four workers busy at once.
func TestFairShareAloneUsesEveryWorker(t *testing.T) {
	t.Parallel()
	b := setupFair(t)
	b.queue(t, "a", tiers.Enterprise, 60, 200)
	b.startReplica(t, "MAILER_QUEUE_PRIORITY_WORKERS=2")
	b.startReplica(t, "MAILER_QUEUE_PRIORITY_WORKERS=2")
	testdb.WaitFor(t, 30*time.Second, "4 running at once", func() bool {
		return b.db.Count(t, `SELECT count(*) FROM river_job WHERE queue = 'mail_priority' AND state = 'running'`) == 4
	})
	// A tenant alone needs no turns: nothing of it is held.
	require.Zero(t, b.db.Count(t, `SELECT count(*) FROM river_job WHERE queue = 'mail_priority' AND state = 'pending'`))
	b.waitCapacity(t, 4) // both replicas' heartbeats
}

// TestFairShareKeepsPriorityStrict: an enterprise tenant's jobs, queued
// behind a pro tenant's flood, all start before any more of the flood's.
// The enterprise tenant's jobs are held to a window of the capacity (4)
// while the flood keeps one place behind them: its refills come with the
// passes its starts wake, so its line runs dry only when a pass takes
// longer than one of its jobs (docs/fairness.md, Strict priority). Its
// jobs take 100 ms: with 20 ms jobs, passes slowed by two busy loops on a
// 2-core machine let 0 to 3 of the flood's jobs start between refills in
// 12 runs (0 to 1 with 100 ms jobs), close to the bound.
func TestFairShareKeepsPriorityStrict(t *testing.T) {
	t.Parallel()
	b := setupFair(t)
	b.queue(t, "a", tiers.Pro, 100, 20)
	b.startReplica(t, "MAILER_QUEUE_PRIORITY_WORKERS=2")
	b.startReplica(t, "MAILER_QUEUE_PRIORITY_WORKERS=2")
	testdb.WaitFor(t, 30*time.Second, "the flood under way", func() bool {
		return b.db.Count(t, `SELECT count(*) FROM river_job WHERE queue = 'mail_priority' AND attempted_at IS NOT NULL`) > 8
	})
	ids := b.queue(t, "b", tiers.Enterprise, 20, 100)
	testdb.WaitFor(t, 30*time.Second, "b's jobs started", func() bool {
		return b.db.Count(t, `SELECT count(*) FROM river_job WHERE id = ANY($1) AND attempted_at IS NOT NULL`, ids) == 20
	})
	// Starts of a between b's first start and its last: only jobs fetched
	// by fetches already under way when b's first was (at most the 4
	// workers). (From b's insert instead, the count took in every fetch
	// while the insert's transaction had not committed: under make test's
	// load, more than the 4 workers' worth.)
	aDuring := b.db.Count(t, `
		SELECT count(*) FROM river_job
		WHERE queue = 'mail_priority' AND metadata->>'tierq:tenant' = 'a'
		  AND attempted_at > (SELECT min(attempted_at) FROM river_job WHERE id = ANY($1))
		  AND attempted_at < (SELECT max(attempted_at) FROM river_job WHERE id = ANY($1))`, ids)
	require.LessOrEqual(t, aDuring, 4, fmt.Sprintf("a started %d jobs while b's waited", aDuring))
}

// TestLendingAcrossReplicas: two replicas of 2 priority workers each (a
// capacity of 4) with a floor of 1 lend at most 3 workers to a free
// backlog, all of them while no paid work waits, and stop lending while
// paid work waits. Jobs record their executions (the load-test workload
// completes a recorded job in the same transaction as its record), so the
// running rows counted are exact.
func TestLendingAcrossReplicas(t *testing.T) {
	t.Parallel()
	b := setupFair(t)
	ctx := context.Background()
	free := make([]river.InsertManyParams, 80)
	for i := range free {
		free[i] = river.InsertManyParams{Args: loadtest.Args{SleepMS: 100, Record: true}, InsertOpts: b.mailer.InsertOpts(tiers.Free, fmt.Sprintf("f%d", i%3), false)}
	}
	_, err := b.db.Producer(t).InsertMany(ctx, free)
	require.NoError(t, err)

	lend := []string{"MAILER_QUEUE_PRIORITY_WORKERS=2", "MAILER_QUEUE_DEFAULT_WORKERS=1", "MAILER_LEND_IDLE_PRIORITY=true", "MAILER_LEND_FLOOR=1"}
	b.startReplica(t, lend...)
	b.startReplica(t, lend...)

	lentRunning := func() int {
		return b.db.Count(t, `SELECT count(*) FROM river_job WHERE queue = 'mail_priority' AND state = 'running' AND metadata ? 'tierq:lent_from'`)
	}
	testdb.WaitFor(t, 20*time.Second, "3 lent jobs running", func() bool { return lentRunning() == 3 })

	paid := b.queue(t, "p", tiers.Pro, 6, 100)
	testdb.WaitFor(t, 20*time.Second, "paid jobs started", func() bool {
		return b.db.Count(t, `SELECT count(*) FROM river_job WHERE id = ANY($1) AND attempted_at IS NOT NULL`, paid) == 6
	})
	// Lent jobs that started while paid work waited: at most those lent
	// (made available) in the instant before it arrived.
	startedWhilePaidWaited := b.db.Count(t, `
		SELECT count(*) FROM river_job
		WHERE queue = 'mail_priority' AND metadata ? 'tierq:lent_from'
		  AND attempted_at > (SELECT min(created_at) FROM river_job WHERE id = ANY($1)) + interval '20 milliseconds'
		  AND attempted_at < (SELECT max(attempted_at) FROM river_job WHERE id = ANY($1))`, paid)
	require.Zero(t, startedWhilePaidWaited)

	testdb.WaitFor(t, 60*time.Second, "the free backlog done", func() bool {
		return b.db.Count(t, `SELECT count(*) FROM river_job WHERE queue IN ('mail_default', 'mail_priority') AND state <> 'completed'`) == 0
	})
	// At no moment more than capacity − floor lent jobs ran: the most
	// executions of lent jobs overlapping any one's start.
	most := b.db.Count(t, `
		WITH lent AS (
			SELECT e.started_at, e.completed_at FROM load_test_executions AS e JOIN river_job AS j ON j.id = e.job_id
			WHERE j.queue = 'mail_priority' AND j.metadata ? 'tierq:lent_from')
		SELECT max((SELECT count(*) FROM lent AS o WHERE o.started_at <= l.started_at AND o.completed_at > l.started_at))
		FROM lent AS l`)
	require.Equal(t, 3, most)
	require.Equal(t, 80, b.db.Count(t, `SELECT count(*) FROM load_test_executions`), "each free job ran once")
}
