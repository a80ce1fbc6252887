package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/tierq/tierq/internal/riverschema"
	"github.com/tierq/tierq/jobmeta"
	"github.com/tierq/tierq/loadtest"
	"github.com/tierq/tierq/routing"
)

// run runs the traffic once: fresh tables and worker processes with fair
// share as m says, the backlog queued and the small tenants streamed while
// the workers work, samples taken, the kills of the faults phase, and,
// once every job ended (or the settle limit passed), what the checks read.
func (t *trafficRunner) run(ctx context.Context, m runMode, faults *TrafficFaults) (TrafficRun, error) {
	r := TrafficRun{Phase: m.phase, FairShare: m.fairShare, Jobs: len(t.plan.jobs)}
	if err := t.app.stop(RoleWorker); err != nil {
		return r, err
	}
	if err := t.e.resetTraffic(ctx); err != nil {
		return r, err
	}
	if err := t.e.trafficHistory(ctx, t.queues()); err != nil {
		return r, err
	}
	settings := t.workerSettings(m.fairShare)
	if err := t.startWorkers(ctx, settings); err != nil {
		return r, err
	}

	// On the way out the run's goroutines are told to stop, then awaited.
	var wg sync.WaitGroup
	defer wg.Wait()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		k          *kill
		recovered  = make(chan error, 1)
		recovering bool
	)
	killNow := func() error {
		var err error
		if k, err = t.kill(ctx, faults); err != nil {
			return err
		}
		recovering = true
		wg.Go(func() { recovered <- t.replace(runCtx, settings, k, faults) })
		return nil
	}
	ids := make([]int64, len(t.plan.jobs))
	var start time.Time
	if err := t.e.Pool.QueryRow(ctx, `SELECT now()`).Scan(&start); err != nil {
		return r, fmt.Errorf("read the clock: %w", err)
	}
	began := time.Now()
	if m.faults && !t.sz.midway {
		// The tests' sizes: the kills before the traffic, so that no job
		// waits a minute for its rescue.
		if err := killNow(); err != nil {
			return r, err
		}
	}
	if err := t.insertUnfetchable(ctx); err != nil {
		return r, err
	}
	backlog, stream := t.plan.split()
	queued := time.Now()
	if err := t.insertTenants(ctx, backlog, ids); err != nil {
		return r, err
	}
	r.BacklogSeconds = round(time.Since(queued).Seconds(), 2)

	// The small tenants arrive while the workers work, from warm after the
	// backlog is queued.
	streamStart := time.Now().Add(t.sz.warm)
	streamErr := make(chan error, 1)
	wg.Go(func() {
		for _, ti := range stream {
			if err := sleep(runCtx, time.Until(streamStart.Add(t.plan.tenants[ti].at))); err != nil {
				streamErr <- err
				return
			}
			if err := t.insertTenants(runCtx, []int{ti}, ids); err != nil {
				streamErr <- err
				return
			}
		}
		streamErr <- nil
	})
	// Samples of the API and the metrics against SQL, until the run ends.
	samples := &sampleLog{}
	wg.Go(func() { t.sampleUntil(runCtx, samples) })

	streamDone, reported := false, 0
	deadline := began.Add(t.sz.settle)
	for time.Now().Before(deadline) {
		if !streamDone {
			select {
			case err := <-streamErr:
				if err != nil {
					return r, fmt.Errorf("stream the small tenants: %w", err)
				}
				streamDone = true
			default:
			}
		}
		if recovering {
			select {
			case err := <-recovered:
				if err != nil {
					return r, err
				}
				recovering = false
			default:
			}
		}
		ended, unfinished, err := t.progress(ctx)
		if err != nil {
			return r, err
		}
		t.e.opts.progress().Add(ended - reported)
		reported = ended
		if m.faults && k == nil && 2*ended >= len(t.plan.jobs) {
			if err := killNow(); err != nil {
				return r, err
			}
		}
		if streamDone && !recovering && unfinished == 0 {
			break
		}
		if err := sleep(ctx, 250*time.Millisecond); err != nil {
			return r, err
		}
	}
	r.SettleSeconds = round(time.Since(began).Seconds(), 2)
	cancel()
	wg.Wait()
	if !streamDone {
		if err := <-streamErr; err != nil && !errors.Is(err, context.Canceled) {
			return r, err
		}
	}
	if recovering {
		if err := <-recovered; err != nil {
			return r, fmt.Errorf("recover from the kills (within the settle limit, %s): %w", t.sz.settle, err)
		}
	}
	// A closing sample, once every job ended, while the workers that do
	// not fetch the unfetchable rows still beat: they are still there, and
	// reported.
	if err := sleep(ctx, time.Until(t.lastScrape.Add(metricsFresh))); err != nil {
		return r, err
	}
	closing, err := t.sample(ctx)
	samples.add(closing, err)
	samples.result(&r)
	if err := t.readUnfetchable(ctx, &r, closing); err != nil {
		return r, err
	}
	c, err := t.collect(ctx, ids)
	if err != nil {
		return r, err
	}
	var hits []int64
	capa := capacity{workers: t.workers}
	if k != nil {
		hits = k.hits
		faults.AtSeconds = round(k.at.Sub(began).Seconds(), 2)
		capa.killedAt, capa.killed = k.at, map[string]int{}
		for _, svc := range t.services {
			if svc.Name() != k.worker.service {
				continue
			}
			for _, queue := range svc.Queues() {
				capa.killed[queue] = t.workers[queue] / t.sz.workers
			}
		}
	}
	t.account(&r, c, start, hits, capa)
	if k != nil {
		t.recovery(faults, c, k.at, hits)
	}
	return r, nil
}

// insertUnfetchable writes the plan's rows of a kind no worker runs, due
// now, as a misrouted producer would.
func (t *trafficRunner) insertUnfetchable(ctx context.Context) error {
	for _, queue := range t.plan.unfetchable {
		if _, err := t.e.Pool.Exec(ctx, `
			INSERT INTO `+riverschema.JobTable+` (state, queue, priority, kind, args, metadata, max_attempts, scheduled_at)
			VALUES ('`+riverschema.StateAvailable+`', $1, 4, $2, '{}', $3, $4, now())`,
			queue, trafficUnknownKind, routing.InsertMetadata(0, "misrouted", queue, 4), trafficMaxAttempts); err != nil {
			return fmt.Errorf("insert an unfetchable row: %w", err)
		}
	}
	return nil
}

// insertTenants inserts every job of the tenants (indexes into the plan's
// tenants), in their order: through the producer's River client (tierq's
// producer.ClientConfig, which refuses tenant ids breaking the rule) in
// batches of tenantsInsertBatch, and a direct tenant's with SQL. ids gets
// each job's id.
func (t *trafficRunner) insertTenants(ctx context.Context, tenants []int, ids []int64) error {
	var (
		params []river.InsertManyParams
		idx    []int
	)
	flush := func() error {
		if len(params) == 0 {
			return nil
		}
		res, err := t.producer.InsertMany(ctx, params)
		if err != nil {
			return fmt.Errorf("insert %d jobs: %w", len(params), err)
		}
		for k, row := range res {
			ids[idx[k]] = row.Job.ID
		}
		params, idx = params[:0], idx[:0]
		return nil
	}
	for _, ti := range tenants {
		tenant := t.plan.tenants[ti]
		for _, ji := range t.plan.byTenant[ti] {
			j := t.plan.jobs[ji]
			svc := t.services[j.service]
			opts := svc.InsertOpts(j.tier, tenant.id, j.scheduled)
			opts.MaxAttempts = trafficMaxAttempts
			if tenant.direct {
				id, err := t.insertDirect(ctx, j.args, opts)
				if err != nil {
					return err
				}
				ids[ji] = id
				continue
			}
			params = append(params, river.InsertManyParams{Args: j.args, InsertOpts: opts})
			idx = append(idx, ji)
			if len(params) == tenantsInsertBatch {
				if err := flush(); err != nil {
					return err
				}
			}
		}
	}
	return flush()
}

// insertDirect writes one job with SQL, as a producer that bypasses River
// would: the row River's insert would write, with the metadata as is.
func (t *trafficRunner) insertDirect(ctx context.Context, args loadtest.Args, opts *river.InsertOpts) (int64, error) {
	raw, err := json.Marshal(args)
	if err != nil {
		return 0, err
	}
	var id int64
	if err := t.e.Pool.QueryRow(ctx, `
		INSERT INTO `+riverschema.JobTable+` (state, queue, priority, kind, args, metadata, max_attempts, scheduled_at)
		VALUES ('`+riverschema.StateAvailable+`', $1, $2, $3, $4, $5, $6, now()) RETURNING id`,
		opts.Queue, opts.Priority, loadtest.Kind, raw, opts.Metadata, opts.MaxAttempts).Scan(&id); err != nil {
		return 0, fmt.Errorf("insert a job with SQL: %w", err)
	}
	return id, nil
}

// progress counts the run's jobs that ended (completed, cancelled, or in
// dead_letter_jobs) and those not ended yet (every load-test row of
// river_job in another state: queued, running, held, or discarded and not
// drained yet).
func (t *trafficRunner) progress(ctx context.Context) (ended, unfinished int, err error) {
	err = t.e.Pool.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM `+riverschema.JobTable+` WHERE kind = $1 AND state IN ('`+riverschema.StateCompleted+`', '`+riverschema.StateCancelled+`'))
		     + (SELECT count(*) FROM dead_letter_jobs WHERE kind = $1),
		       (SELECT count(*) FROM `+riverschema.JobTable+` WHERE kind = $1 AND state NOT IN ('`+riverschema.StateCompleted+`', '`+riverschema.StateCancelled+`'))`,
		loadtest.Kind).Scan(&ended, &unfinished)
	if err != nil {
		return 0, 0, fmt.Errorf("count the ended jobs: %w", err)
	}
	return ended, unfinished, nil
}

// kill is what the faults phase killed.
type kill struct {
	worker *appProcess
	at     time.Time
	hits   []int64 // the jobs the worker was running: stuck until rescued
}

// kill is the faults phase's fault: the worker process running the most
// jobs (of any service: the first one's may have run dry by midway) and
// the leading scheduler, killed with SIGKILL at once. The leader is found
// first so that nothing stands between reading the victim's running jobs
// and killing it.
func (t *trafficRunner) kill(ctx context.Context, f *TrafficFaults) (*kill, error) {
	leader, err := t.app.waitLeader(ctx, time.Minute)
	if err != nil {
		return nil, err
	}
	var victim *appProcess
	// Waiting up to 30 s for a worker running any job (the tests' sizes
	// kill before the traffic: none).
	for deadline := time.Now().Add(30 * time.Second); ; {
		victim = nil
		most := -1
		// The first service's workers first: on a tie (none running, the
		// tests' sizes) the victim is the first service's first worker.
		workers := t.app.live(RoleWorker)
		slices.SortStableFunc(workers, func(a, b *appProcess) int {
			return cmpBool(b.service == t.services[0].Name(), a.service == t.services[0].Name())
		})
		for _, p := range workers {
			var n int
			if err := t.e.Pool.QueryRow(ctx, `SELECT count(*) FROM `+riverschema.JobTable+` WHERE state = '`+riverschema.StateRunning+`' AND attempted_by[array_length(attempted_by, 1)] = $1`,
				p.clientID).Scan(&n); err != nil {
				return nil, fmt.Errorf("count a worker's running jobs: %w", err)
			}
			if n > most {
				victim, most = p, n
			}
		}
		if victim == nil {
			return nil, errors.New("no worker process to kill")
		}
		if most > 0 || !t.sz.midway || time.Now().After(deadline) {
			break
		}
		if err := sleep(ctx, 10*time.Millisecond); err != nil {
			return nil, err
		}
	}
	victim.kill()
	leader.kill()
	k := &kill{worker: victim, at: time.Now()}
	// A statement the victim sent just before it died still runs to its
	// end, and a fetch commits: its jobs are running and the victim's
	// once its backends have gone, not before (one was missed, and ended
	// dead-lettered against its plan, its rescue having used its last
	// attempt).
	if err := t.e.waitBackendsGone(ctx, t.e.Name+"_"+victim.name, 10*time.Second); err != nil {
		return nil, err
	}
	rows, err := t.e.Pool.Query(ctx, `SELECT id FROM `+riverschema.JobTable+` WHERE state = '`+riverschema.StateRunning+`' AND attempted_by[array_length(attempted_by, 1)] = $1`, victim.clientID)
	if err != nil {
		return nil, fmt.Errorf("read the killed worker's jobs: %w", err)
	}
	if k.hits, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
		return nil, fmt.Errorf("read the killed worker's jobs: %w", err)
	}
	f.KilledWorker, f.KilledRunning, f.KilledScheduler = victim.name, len(k.hits), leader.name
	return k, nil
}

// cmpBool orders true before false: cmpBool(b, a) sorts a's true first.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// waitBackendsGone waits until no backend of PostgreSQL has application_name
// name: a killed process's connections closed, and what they were running
// ended.
func (e *env) waitBackendsGone(ctx context.Context, name string, timeout time.Duration) error {
	for deadline := time.Now().Add(timeout); ; {
		var n int
		if err := e.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = left($1, 63)`, name).Scan(&n); err != nil {
			return fmt.Errorf("count %s's connections: %w", name, err)
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s's %d connections still open %s after it was killed", name, n, timeout)
		}
		if err := sleep(ctx, 10*time.Millisecond); err != nil {
			return err
		}
	}
}

// replace is what an orchestrator does after the kills: a new worker in
// the dead one's place two seconds later, and a replacement scheduler once
// the surviving one took over (awaited: River's lease, 15 s, must run out).
func (t *trafficRunner) replace(ctx context.Context, settings []string, k *kill, f *TrafficFaults) error {
	if err := sleep(ctx, 2*time.Second); err != nil {
		return err
	}
	for _, svc := range t.services {
		if svc.Name() != k.worker.service {
			continue
		}
		if _, err := t.app.worker(ctx, svc, settings); err != nil {
			return err
		}
	}
	next, err := t.app.waitLeader(ctx, 2*time.Minute)
	if err != nil {
		return err
	}
	f.NewLeader, f.TakeoverSeconds = next.name, round(time.Since(k.at).Seconds(), 2)
	_, err = t.app.scheduler(ctx)
	return err
}

// readUnfetchable reads the unfetchable rows left, and what the closing
// sample's API and metrics reported of them.
func (t *trafficRunner) readUnfetchable(ctx context.Context, r *TrafficRun, closing sampled) error {
	if err := t.e.Pool.QueryRow(ctx, `SELECT count(*) FROM `+riverschema.JobTable+` WHERE kind = $1 AND state = '`+riverschema.StateAvailable+`'`,
		trafficUnknownKind).Scan(&r.UnfetchableLeft); err != nil {
		return fmt.Errorf("count the unfetchable rows: %w", err)
	}
	for _, q := range closing.queues {
		r.UnfetchableAPI += q.Unfetchable
	}
	for _, n := range closing.metrics.unfetchable {
		r.UnfetchableMetric += int(n)
	}
	return nil
}

// collected is what a run left in the database: every job of the plan
// (by index) and every execution.
type collected struct {
	jobs       []jobEnd
	executions map[int64][]execution // by job id
}

// jobEnd is where one job of the plan ended.
type jobEnd struct {
	id        int64
	state     string // a river_job state, "dead_lettered", or "" (lost)
	held      bool
	lent      bool
	created   time.Time
	attempted *time.Time // the last attempt's start
	finalized *time.Time // completed, cancelled, or discarded
	lastError string
}

// execution is one recorded attempt.
type execution struct {
	attempt   int
	clientID  string
	started   time.Time
	completed *time.Time
}

// collect reads where every job ended, and every execution.
func (t *trafficRunner) collect(ctx context.Context, ids []int64) (collected, error) {
	c := collected{jobs: make([]jobEnd, len(ids)), executions: map[int64][]execution{}}
	byID := make(map[int64]int, len(ids))
	for i, id := range ids {
		byID[id] = i
		c.jobs[i].id = id
	}
	rows, err := t.e.Pool.Query(ctx, `
		SELECT id, state::text, metadata ? $2 AND jsonb_typeof(metadata) = 'object', metadata ? $3, created_at, attempted_at, finalized_at,
		       coalesce(errors[array_length(errors, 1)]->>'error', '')
		FROM `+riverschema.JobTable+` WHERE id = ANY($1)`, ids, jobmeta.HeldAt, jobmeta.LentFrom)
	if err != nil {
		return c, fmt.Errorf("read the jobs: %w", err)
	}
	var e jobEnd
	if _, err := pgx.ForEachRow(rows, []any{&e.id, &e.state, &e.held, &e.lent, &e.created, &e.attempted, &e.finalized, &e.lastError}, func() error {
		c.jobs[byID[e.id]] = e
		e.attempted, e.finalized = nil, nil // pgx writes into a pointer it finds
		return nil
	}); err != nil {
		return c, fmt.Errorf("read the jobs: %w", err)
	}
	rows, err = t.e.Pool.Query(ctx, `
		SELECT job_id, metadata ? $2, created_at, finalized_at, coalesce(errors->-1->>'error', '')
		FROM dead_letter_jobs WHERE job_id = ANY($1)`, ids, jobmeta.LentFrom)
	if err != nil {
		return c, fmt.Errorf("read the dead letters: %w", err)
	}
	if _, err := pgx.ForEachRow(rows, []any{&e.id, &e.lent, &e.created, &e.finalized, &e.lastError}, func() error {
		e.state, e.held, e.attempted = "dead_lettered", false, nil
		c.jobs[byID[e.id]] = e
		e.finalized = nil
		return nil
	}); err != nil {
		return c, fmt.Errorf("read the dead letters: %w", err)
	}
	rows, err = t.e.Pool.Query(ctx, `SELECT job_id, attempt, client_id, started_at, completed_at FROM load_test_executions`)
	if err != nil {
		return c, fmt.Errorf("read the executions: %w", err)
	}
	var (
		id int64
		x  execution
	)
	if _, err := pgx.ForEachRow(rows, []any{&id, &x.attempt, &x.clientID, &x.started, &x.completed}, func() error {
		c.executions[id] = append(c.executions[id], x)
		x.completed = nil
		return nil
	}); err != nil {
		return c, fmt.Errorf("read the executions: %w", err)
	}
	return c, nil
}
