package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/tierq/tierq/internal/riverschema"
	"github.com/tierq/tierq/jobmeta"
	"github.com/tierq/tierq/loadtest"
	"github.com/tierq/tierq/routing"
	"github.com/tierq/tierq/tiers"
)

// trickleInterval is the gap between two paid jobs of the lending and
// realistic scenarios' paid trickle.
const trickleInterval = 100 * time.Millisecond

// trickleJobMs is how long a job of the paid trickle works.
const trickleJobMs = 20

// trickleArgs are the paid trickle's jobs.
var trickleArgs = loadtest.Args{SleepMS: trickleJobMs}

// trickle is one phase of the lending and realistic scenarios: free jobs
// that take time, queued before the worker starts, and a paid trickle
// (trickleArgs, one enterprise job every trickleInterval) while the worker
// works them.
type trickle struct {
	name string
	// worker builds the phase's worker deployment on its pool.
	worker func(pool *pgxpool.Pool) (*deployment, error)
	// producer is the River configuration of the client that inserts every
	// job of the phase.
	producer func(schema string) *river.Config
	// queue is where every job goes: "" routes each by the InsertOpts of
	// the service under test (free jobs to its default queue, enterprise to
	// its priority queue); a name puts every job there at its tier's
	// starting priority (the one queue of ADR-16's Option B).
	queue string
	// free jobs of freeArgs are queued first, tiers.Free.
	free     int
	freeArgs loadtest.Args
}

// trickleResult is what one trickle phase measured.
type trickleResult struct {
	// lat are the paid jobs' insert→start latencies in ms (attempted_at −
	// created_at, the database's clock).
	lat []float64
	// worked is how many free jobs started during the phase, left how many
	// were still queued (available or held) when the last paid job had
	// started: never 0, or the trickle did not run beside a backlog.
	worked, left int
	// lent is how many free jobs the phase lent to the priority queue of
	// the service under test, maxLent the most of them running at once.
	lent, maxLent int
}

// insertFree queues n free jobs of args through client in one InsertMany,
// routed by the InsertOpts of the service under test (into queue instead,
// when not ""), and returns their ids.
func (e *env) insertFree(ctx context.Context, client *river.Client[pgx.Tx], queue string, n int, args loadtest.Args) ([]int64, error) {
	params := make([]river.InsertManyParams, n)
	for i := range params {
		opts := e.opts.Service.InsertOpts(tiers.Free, "", false)
		if queue != "" {
			opts.Queue = queue
		}
		params[i] = river.InsertManyParams{Args: args, InsertOpts: opts}
	}
	res, err := client.InsertMany(ctx, params)
	if err != nil {
		return nil, fmt.Errorf("insert %d free jobs: %w", n, err)
	}
	ids := make([]int64, len(res))
	for i, r := range res {
		ids[i] = r.Job.ID
	}
	return ids, nil
}

// backlogged queues n free jobs of args through client (insertFree, into
// queue when not ""), refreshes river_job's statistics, and starts the
// worker deployment newWorker makes on a pool of its own. stop stops the
// worker and closes its pool.
func (e *env) backlogged(ctx context.Context, client *river.Client[pgx.Tx], queue string, n int, args loadtest.Args,
	newWorker func(*pgxpool.Pool) (*deployment, error),
) (ids []int64, stop func(), err error) {
	if ids, err = e.insertFree(ctx, client, queue, n, args); err != nil {
		return nil, nil, err
	}
	if _, err := e.Pool.Exec(ctx, `ANALYZE `+riverschema.JobTable); err != nil {
		return nil, nil, fmt.Errorf("analyze river_job: %w", err)
	}
	workerPool, err := e.pool(ctx, 10)
	if err != nil {
		return nil, nil, err
	}
	dep, err := newWorker(workerPool)
	if err != nil {
		workerPool.Close()
		return nil, nil, err
	}
	stopWorker, err := dep.start(ctx)
	if err != nil {
		workerPool.Close()
		return nil, nil, err
	}
	return ids, func() { stopWorker(); workerPool.Close() }, nil
}

// runTrickle runs one trickle phase in a fresh table: the free jobs queued,
// the phase's worker started, after a warm-up the paid trickle for
// duration, and once every paid job has started, their latencies, the free
// backlog worked and left, and what was lent.
func (e *env) runTrickle(ctx context.Context, t trickle, duration time.Duration) (trickleResult, error) {
	var res trickleResult
	if err := e.reset(ctx); err != nil {
		return res, err
	}
	producerPool, err := e.pool(ctx, 4)
	if err != nil {
		return res, err
	}
	defer producerPool.Close()
	client, err := river.NewClient(riverpgxv5.New(producerPool), t.producer(e.Name))
	if err != nil {
		return res, fmt.Errorf("producer client: %w", err)
	}
	free, stop, err := e.backlogged(ctx, client, t.queue, t.free, t.freeArgs, t.worker)
	if err != nil {
		return res, err
	}
	defer stop()
	if err := sleep(ctx, e.opts.sizes().warmup); err != nil { // the worker's producers and listener are up, and its workers busy
		return res, err
	}
	byTenant, err := e.insertStreamsTo(ctx, streamInserter{client: client}, t.queue, []string{""}, trickleInterval, trickleArgs, duration)
	if err != nil {
		return res, err
	}
	ids := byTenant[""]
	if err := waitStarted(ctx, e.Pool, ids, 60*time.Second); err != nil {
		return res, err
	}
	// A job fair share holds back (pending) is still queued, not worked; a
	// lent job not yet started too.
	if err := e.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state NOT IN ('`+riverschema.StateAvailable+`', '`+riverschema.StatePending+`')),
			count(*) FILTER (WHERE state IN ('`+riverschema.StateAvailable+`', '`+riverschema.StatePending+`'))
		FROM `+riverschema.JobTable+` WHERE id = ANY($1)`, free).Scan(&res.worked, &res.left); err != nil {
		return res, fmt.Errorf("count backlog: %w", err)
	}
	if res.left == 0 {
		return res, fmt.Errorf("the free backlog (%d jobs) ran out before the paid trickle ended: queue more", t.free)
	}
	if res.lent, res.maxLent, err = e.lentStats(ctx); err != nil {
		return res, err
	}
	if res.lat, err = pickupLatencies(ctx, e.Pool, ids); err != nil {
		return res, err
	}
	return res, nil
}

// lentStats counts the jobs lent to the priority queue of the service under
// test since the last reset (they keep jobmeta.LentFrom; a lent job
// returned unstarted loses it, and is not counted), and the most of them
// running at once: the peak overlap of the runs of those that completed,
// attempted_at (the database's clock, at the fetch) to finalized_at
// (River's, this process's clock, when the job's work and hooks returned).
// A job still running by River's row is left out: River writes completions
// in batches, so such a job may have finished a while ago. River stamps
// finalized_at after the job's work-end hooks, which start the lending
// pass that lends the next job: the next lent job is fetched after that
// pass commits, milliseconds later, so a job handing its worker over does
// not overlap the next.
func (e *env) lentStats(ctx context.Context) (lent, maxRunning int, err error) {
	err = e.Pool.QueryRow(ctx, `
		WITH lent AS (
		    SELECT attempted_at AS s, finalized_at AS f, state = '`+riverschema.StateCompleted+`' AS done
		    FROM `+riverschema.JobTable+`
		    WHERE queue = $1 AND metadata ? '`+jobmeta.LentFrom+`'
		),
		ev AS (
		    SELECT s AS t, 1 AS d FROM lent WHERE done
		    UNION ALL
		    SELECT f, -1 FROM lent WHERE done
		)
		SELECT (SELECT count(*) FROM lent)::int,
		       coalesce((SELECT max(n) FROM (SELECT sum(d) OVER (ORDER BY t, d ROWS UNBOUNDED PRECEDING) AS n FROM ev) AS x), 0)::int`,
		e.opts.Service.Queue(routing.Priority)).Scan(&lent, &maxRunning)
	if err != nil {
		return 0, 0, fmt.Errorf("count lent jobs: %w", err)
	}
	return lent, maxRunning, nil
}
