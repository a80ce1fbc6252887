package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/tierq/tierq/internal/riverschema"
	"github.com/tierq/tierq/jobmeta"
	"github.com/tierq/tierq/loadtest"
	"github.com/tierq/tierq/producer"
	"github.com/tierq/tierq/routing"
	"github.com/tierq/tierq/tiers"
)

// FairnessResult is the fairness scenario: fair share among the tenants of
// one queue (package fairshare). Every job is the load-test workload of
// fairnessJobMs, an enterprise job routed with its tenant by the InsertOpts
// of the service under test into its priority queue, worked by its worker
// deployment at its default worker counts (the reference app's 5 priority
// workers). A job's latency is attempted_at − created_at of the attempt
// that ran it (the database's clock). Phases, each in a fresh table:
//
//   - flood: tenant a inserts Flood jobs at once (one InsertMany), then four
//     small tenants, b to e, each insert one job every 100 ms for
//     StreamSeconds (SmallJobs in all); fair share on, and off. The small
//     tenants' latencies are measured.
//   - idle: the small tenants' streams alone, fair share on.
//   - backlogged: tenants a to e with Backlogged jobs each, queued before the
//     worker starts tenant after tenant (every job of a ahead of every job of
//     b in River's fetch order, FIFO's worst case: with fair share the order
//     must not matter); the jobs each completes over WindowSeconds, from
//     WarmSeconds after the start, while all five still have work.
//   - alone: tenant a alone with Alone jobs, fair share on and off; jobs/s
//     over the same window.
//   - snooze: the comparator a team builds without fair share (tenantCap):
//     fair share off, and a per-process cap of SnoozeCap running jobs per
//     tenant, a job over it snoozed for 30 s ± 10 s; the flood and alone
//     phases again. The flood phase ends when every small tenant's job has
//     run (the flood need not finish).
//
// Medians over runs.
type FairnessResult struct {
	// Small* are the small tenants' latencies: SmallP99Ms with tenant a's
	// flood and fair share on, SmallP99OffMs with fair share off,
	// SmallP99IdleMs without the flood. GapMs is SmallP99Ms −
	// SmallP99IdleMs, what the flood costs the others with fair share, and
	// OffRatio is SmallP99OffMs / SmallP99Ms, what fair share saves them.
	SmallP50Ms     float64 `json:"small_p50_ms"`
	SmallP99Ms     float64 `json:"small_p99_ms"`
	SmallP50OffMs  float64 `json:"small_p50_off_ms"`
	SmallP99OffMs  float64 `json:"small_p99_off_ms"`
	SmallP50IdleMs float64 `json:"small_p50_idle_ms"`
	SmallP99IdleMs float64 `json:"small_p99_idle_ms"`
	GapMs          float64 `json:"gap_ms"`
	OffRatio       float64 `json:"off_ratio"`
	// JainIndex is Jain's fairness index, (Σx)² / (n·Σx²), of the jobs the
	// five backlogged tenants completed in the window (1: equal shares,
	// 1/n: one tenant has everything); BackloggedJobs are those counts per
	// tenant and BackloggedJobsPerS their sum per second.
	JainIndex          float64            `json:"jain_index"`
	BackloggedJobs     map[string]float64 `json:"backlogged_jobs"`
	BackloggedJobsPerS float64            `json:"backlogged_jobs_per_s"`
	// Alone* are tenant a's jobs/s alone, with fair share on and off;
	// WorkConservingRatio is the one over the other: a tenant alone must
	// have the whole queue. CapacityJobsPerS is the queue's nominal rate,
	// priority workers × 1000 / fairnessJobMs, which no phase reaches (each
	// job also costs a fetch and a completion).
	CapacityJobsPerS    float64 `json:"capacity_jobs_per_s"`
	AloneJobsPerS       float64 `json:"alone_jobs_per_s"`
	AloneOffJobsPerS    float64 `json:"alone_off_jobs_per_s"`
	WorkConservingRatio float64 `json:"work_conserving_ratio"`
	// Snooze* are the comparator's: the small tenants' latencies under
	// tenant a's flood, tenant a's jobs/s alone and SnoozeThroughputRatio
	// that over AloneOffJobsPerS, and the snoozes of each phase. SnoozeCap
	// is its cap, the priority workers less one: the most generous to a
	// tenant alone that still leaves a worker for the others.
	SnoozeCap             int     `json:"snooze_cap"`
	SnoozeSmallP50Ms      float64 `json:"snooze_small_p50_ms"`
	SnoozeSmallP99Ms      float64 `json:"snooze_small_p99_ms"`
	SnoozeAloneJobsPerS   float64 `json:"snooze_alone_jobs_per_s"`
	SnoozeThroughputRatio float64 `json:"snooze_throughput_ratio"`
	SnoozeFloodSnoozes    float64 `json:"snooze_flood_snoozes"`
	SnoozeAloneSnoozes    float64 `json:"snooze_alone_snoozes"`
	// SnoozeAloneLeft is how many of tenant a's jobs were ready to run at
	// the end of the comparator's alone window (median): 0 when its own
	// snoozes had pushed all the rest of its work out of the window.
	SnoozeAloneLeft float64 `json:"snooze_alone_left"`

	Flood         int     `json:"flood"`
	SmallJobs     int     `json:"small_jobs"` // per phase, the four small tenants together
	StreamSeconds float64 `json:"stream_seconds"`
	Backlogged    int     `json:"backlogged"` // per tenant
	Alone         int     `json:"alone"`
	WarmSeconds   float64 `json:"warm_seconds"`
	WindowSeconds float64 `json:"window_seconds"`
	Runs          int     `json:"runs"`
	// Samples are the latencies (ms) of the last run, per phase and small
	// tenant ("fairness flood (fair share on): b"), for plots.
	Samples map[string][]float64 `json:"-"`
}

// fairnessJobMs is how long a job of the fairness scenario works: with the
// reference app's 5 priority workers, 250 jobs/s, so that a flood of 5,000
// lasts 20 s.
const fairnessJobMs = 20

// fairnessInterval is the gap between two jobs of one small tenant.
const fairnessInterval = 100 * time.Millisecond

// The fairness scenario's tenants: a floods, or is alone; the small ones
// stream; all five are backlogged together.
const floodTenant = "a"

var (
	smallTenants      = []string{"b", "c", "d", "e"}
	backloggedTenants = []string{"a", "b", "c", "d", "e"}
)

// fairnessWorker builds the worker deployment of one phase on its pool.
type fairnessWorker func(pool *pgxpool.Pool) (*deployment, error)

// Fairness runs the fairness scenario.
func Fairness(ctx context.Context, opts Options) (FairnessResult, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return FairnessResult{}, err
	}
	e, err := newEnv(ctx, opts)
	if err != nil {
		return FairnessResult{}, err
	}
	defer e.close()

	sz := opts.sizes()
	res := FairnessResult{
		Flood: sz.fairFlood, SmallJobs: len(smallTenants) * int(sz.fairStream/fairnessInterval), StreamSeconds: sz.fairStream.Seconds(),
		Backlogged: sz.fairBacklog, Alone: len(backloggedTenants) * sz.fairBacklog,
		WarmSeconds: sz.fairWarm.Seconds(), WindowSeconds: sz.fairWindow.Seconds(),
		Runs: opts.runs(), BackloggedJobs: map[string]float64{}, Samples: map[string][]float64{},
	}
	// The phases set fair share themselves, after whatever --set says.
	fairOn, err := e.workerConfig(append(slices.Clone(opts.WorkerEnv), "QUEUE_PRIORITY_FAIR_SHARE=true")...)
	if err != nil {
		return res, err
	}
	fairOff, err := e.workerConfig(append(slices.Clone(opts.WorkerEnv), "QUEUE_PRIORITY_FAIR_SHARE=false")...)
	if err != nil {
		return res, err
	}
	workers := fairOn.Workers.Of(routing.Priority)
	res.SnoozeCap = max(1, workers-1)
	res.CapacityJobsPerS = float64(workers) * 1000 / fairnessJobMs

	on := func(pool *pgxpool.Pool) (*deployment, error) { return tierqDeployment(fairOn, pool, opts) }
	off := func(pool *pgxpool.Pool) (*deployment, error) { return tierqDeployment(fairOff, pool, opts) }
	var capped *tenantCap // the current snooze phase's
	snoozing := func(pool *pgxpool.Pool) (*deployment, error) {
		capped = newTenantCap(res.SnoozeCap, sz.snooze, sz.snoozeJitter)
		return tierqDeployment(fairOff, pool, opts, capped.install)
	}

	// capped: the comparator's phases, whose snoozes are counted.
	streams := []struct {
		name   string
		worker fairnessWorker
		flood  int
		capped bool
	}{
		{"flood (fair share on)", on, res.Flood, false},
		{"flood (fair share off)", off, res.Flood, false},
		{"idle (fair share on)", on, 0, false},
		{"flood (snooze cap)", snoozing, res.Flood, true},
	}
	rates := []struct {
		name    string
		worker  fairnessWorker
		tenants []string
		jobs    int // per tenant
		capped  bool
	}{
		{"backlogged (fair share on)", on, backloggedTenants, res.Backlogged, false},
		{"alone (fair share on)", on, []string{floodTenant}, res.Alone, false},
		{"alone (fair share off)", off, []string{floodTenant}, res.Alone, false},
		{"alone (snooze cap)", snoozing, []string{floodTenant}, res.Alone, true},
	}

	p50, p99 := map[string][]float64{}, map[string][]float64{}
	var (
		jain, snoozeFlood, snoozeAlone, aloneLeft []float64
		perTenant                                 = map[string][]float64{}
		perSecond                                 = map[string][]float64{}
	)
	for run := range res.Runs {
		for _, ph := range streams {
			opts.progress().Stage(fmt.Sprintf("fairness run %d/%d: %s", run+1, res.Runs, ph.name), res.SmallJobs)
			lat, err := e.fairStream(ctx, ph.worker, ph.flood, sz.fairStream)
			if err != nil {
				return res, fmt.Errorf("fairness %s: %w", ph.name, err)
			}
			var all []float64
			for _, tenant := range smallTenants {
				all = append(all, lat[tenant]...)
				res.Samples["fairness "+ph.name+": "+tenant] = lat[tenant]
			}
			slices.Sort(all)
			p50[ph.name] = append(p50[ph.name], percentile(all, 50))
			p99[ph.name] = append(p99[ph.name], percentile(all, 99))
			if ph.capped {
				snoozeFlood = append(snoozeFlood, float64(capped.snoozed.Load()))
			}
		}
		for _, ph := range rates {
			opts.progress().Stage(fmt.Sprintf("fairness run %d/%d: %s, %s window", run+1, res.Runs, ph.name, sz.fairWindow), 0)
			// The comparator's own snoozes may push the rest of a tenant's
			// work out of the window: that is measured, not refused.
			done, left, err := e.fairRates(ctx, ph.worker, ph.tenants, ph.jobs, sz.fairWarm, sz.fairWindow, !ph.capped)
			if err != nil {
				return res, fmt.Errorf("fairness %s: %w", ph.name, err)
			}
			var (
				xs    []float64
				total float64
			)
			for _, tenant := range ph.tenants {
				xs = append(xs, float64(done[tenant]))
				total += float64(done[tenant])
			}
			perSecond[ph.name] = append(perSecond[ph.name], total/sz.fairWindow.Seconds())
			switch {
			case len(ph.tenants) > 1:
				j, err := jainIndex(xs)
				if err != nil {
					return res, fmt.Errorf("fairness %s: %w", ph.name, err)
				}
				jain = append(jain, j)
				for _, tenant := range ph.tenants {
					perTenant[tenant] = append(perTenant[tenant], float64(done[tenant]))
				}
			case ph.capped:
				snoozeAlone = append(snoozeAlone, float64(capped.snoozed.Load()))
				aloneLeft = append(aloneLeft, float64(left[floodTenant]))
			}
		}
	}

	m := func(xs map[string][]float64, name string, d int) float64 { return round(median(xs[name]), d) }
	res.SmallP50Ms, res.SmallP99Ms = m(p50, streams[0].name, 2), m(p99, streams[0].name, 2)
	res.SmallP50OffMs, res.SmallP99OffMs = m(p50, streams[1].name, 2), m(p99, streams[1].name, 2)
	res.SmallP50IdleMs, res.SmallP99IdleMs = m(p50, streams[2].name, 2), m(p99, streams[2].name, 2)
	res.SnoozeSmallP50Ms, res.SnoozeSmallP99Ms = m(p50, streams[3].name, 2), m(p99, streams[3].name, 2)
	res.GapMs = round(res.SmallP99Ms-res.SmallP99IdleMs, 2)
	res.OffRatio = round(res.SmallP99OffMs/res.SmallP99Ms, 1)
	res.JainIndex = round(median(jain), 4)
	for tenant, xs := range perTenant {
		res.BackloggedJobs[tenant] = median(xs)
	}
	res.BackloggedJobsPerS = m(perSecond, rates[0].name, 1)
	res.AloneJobsPerS, res.AloneOffJobsPerS = m(perSecond, rates[1].name, 1), m(perSecond, rates[2].name, 1)
	res.SnoozeAloneJobsPerS = m(perSecond, rates[3].name, 1)
	res.WorkConservingRatio = round(median(perSecond[rates[1].name])/median(perSecond[rates[2].name]), 3)
	res.SnoozeThroughputRatio = round(median(perSecond[rates[3].name])/median(perSecond[rates[2].name]), 3)
	res.SnoozeFloodSnoozes, res.SnoozeAloneSnoozes = median(snoozeFlood), median(snoozeAlone)
	res.SnoozeAloneLeft = median(aloneLeft)
	return res, nil
}

// jainIndex is Jain's fairness index of xs, (Σx)² / (n·Σx²).
func jainIndex(xs []float64) (float64, error) {
	var sum, squares float64
	for _, x := range xs {
		sum += x
		squares += x * x
	}
	if squares == 0 {
		return 0, errors.New("no job completed in the window")
	}
	return sum * sum / (float64(len(xs)) * squares), nil
}

// fairnessArgs are the fairness scenario's jobs.
var fairnessArgs = loadtest.Args{SleepMS: fairnessJobMs}

// producerClient is an insert-only client on pool, configured as a
// producer's (producer.ClientConfig).
func (e *env) producerClient(pool *pgxpool.Pool) (*river.Client[pgx.Tx], error) {
	client, err := river.NewClient(riverpgxv5.New(pool), producer.ClientConfig(e.Name, e.opts.logger()))
	if err != nil {
		return nil, fmt.Errorf("producer client: %w", err)
	}
	return client, nil
}

// insertTenant inserts n of the fairness scenario's jobs for tenant in one
// InsertMany, as a producer inserting a batch does.
func (e *env) insertTenant(ctx context.Context, client *river.Client[pgx.Tx], tenant string, n int) error {
	params := make([]river.InsertManyParams, n)
	for i := range params {
		params[i] = river.InsertManyParams{Args: fairnessArgs, InsertOpts: e.opts.Service.InsertOpts(tiers.Enterprise, tenant, false)}
	}
	if _, err := client.InsertMany(ctx, params); err != nil {
		return fmt.Errorf("insert %d jobs of tenant %s: %w", n, tenant, err)
	}
	return nil
}

// fairStream runs one latency phase of the fairness scenario: a fresh
// table, the phase's worker started, flood jobs of tenant a inserted at
// once (none for 0), then the small tenants' streams for duration. It
// returns each small tenant's latencies in ms once every one of their jobs
// has completed: a job the comparator snoozed counts with the attempt that
// ran it.
func (e *env) fairStream(ctx context.Context, newWorker fairnessWorker, flood int, duration time.Duration) (map[string][]float64, error) {
	if err := e.reset(ctx); err != nil {
		return nil, err
	}
	workerPool, err := e.pool(ctx, 10)
	if err != nil {
		return nil, err
	}
	defer workerPool.Close()
	dep, err := newWorker(workerPool)
	if err != nil {
		return nil, err
	}
	stop, err := dep.start(ctx)
	if err != nil {
		return nil, err
	}
	defer stop()

	producerPool, err := e.pool(ctx, int32(len(smallTenants)+1))
	if err != nil {
		return nil, err
	}
	defer producerPool.Close()
	client, err := e.producerClient(producerPool)
	if err != nil {
		return nil, err
	}
	if err := sleep(ctx, e.opts.sizes().warmup); err != nil { // the worker's producers and listener are up
		return nil, err
	}
	if flood > 0 {
		if err := e.insertTenant(ctx, client, floodTenant, flood); err != nil {
			return nil, err
		}
	}
	byTenant, err := e.insertStreams(ctx, streamInserter{client: client}, smallTenants, fairnessInterval, fairnessArgs, duration)
	if err != nil {
		return nil, err
	}
	var ids []int64
	for _, tenant := range smallTenants {
		ids = append(ids, byTenant[tenant]...)
	}
	// Without fair share the small tenants wait for the whole flood; a job
	// the comparator snoozed comes back in at most its snooze and River's
	// scheduler interval.
	if err := waitCompleted(ctx, e.Pool, ids, duration+3*time.Minute); err != nil {
		return nil, err
	}
	rows, err := e.Pool.Query(ctx, `SELECT metadata->>'`+jobmeta.Tenant+`', extract(epoch FROM attempted_at - created_at)::float8 * 1000
		FROM `+riverschema.JobTable+` WHERE id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("read latencies: %w", err)
	}
	lat := map[string][]float64{}
	var (
		tenant string
		ms     float64
	)
	if _, err := pgx.ForEachRow(rows, []any{&tenant, &ms}, func() error {
		lat[tenant] = append(lat[tenant], ms)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read latencies: %w", err)
	}
	return lat, nil
}

// waitCompleted waits until every job of ids has completed: a job that was
// snoozed (it has attempted_at but went back to wait) has not.
func waitCompleted(ctx context.Context, pool *pgxpool.Pool, ids []int64, timeout time.Duration) error {
	return waitJobs(ctx, pool, ids, timeout, "state <> '"+riverschema.StateCompleted+"'", "completed")
}

// fairRates runs one throughput phase of the fairness scenario: a fresh
// table with jobs jobs of each of tenants queued, tenant after tenant (one
// InsertMany each, every job of a tenant ahead of the next tenant's in
// River's fetch order), the phase's worker started, and the jobs each tenant
// completed (River's finalized_at, this process's clock) over window, from
// warm after the start. left is each tenant's jobs ready to run (available
// and due, held, or running) at the window's end; with mustLast every
// tenant must still have some, or the window measured a tenant that ran out
// of work.
func (e *env) fairRates(ctx context.Context, newWorker fairnessWorker, tenants []string, jobs int, warm, window time.Duration, mustLast bool) (done, left map[string]int, err error) {
	if err := e.reset(ctx); err != nil {
		return nil, nil, err
	}
	client, err := e.producerClient(e.Pool)
	if err != nil {
		return nil, nil, err
	}
	for _, tenant := range tenants {
		if err := e.insertTenant(ctx, client, tenant, jobs); err != nil {
			return nil, nil, err
		}
	}
	if _, err := e.Pool.Exec(ctx, `ANALYZE `+riverschema.JobTable); err != nil {
		return nil, nil, fmt.Errorf("analyze river_job: %w", err)
	}

	workerPool, err := e.pool(ctx, 10)
	if err != nil {
		return nil, nil, err
	}
	defer workerPool.Close()
	dep, err := newWorker(workerPool)
	if err != nil {
		return nil, nil, err
	}
	stop, err := dep.start(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer stop()
	if err := sleep(ctx, warm); err != nil {
		return nil, nil, err
	}
	t0 := time.Now()
	if err := sleep(ctx, window); err != nil {
		return nil, nil, err
	}
	t1 := time.Now()
	queue := e.opts.Service.Queue(routing.Priority)
	left, err = e.countByTenant(ctx, `(state = '`+riverschema.StateAvailable+`' AND scheduled_at <= now()) OR state IN ('`+riverschema.StatePending+`', '`+riverschema.StateRunning+`')`, queue)
	if err != nil {
		return nil, nil, err
	}
	// River's completer records completions in batches, shortly after.
	if err := sleep(ctx, 500*time.Millisecond); err != nil {
		return nil, nil, err
	}
	done, err = e.countByTenant(ctx, `state = '`+riverschema.StateCompleted+`' AND finalized_at >= $2 AND finalized_at < $3`, queue, t0, t1)
	if err != nil {
		return nil, nil, err
	}
	if mustLast {
		for _, tenant := range tenants {
			if left[tenant] == 0 {
				return nil, nil, fmt.Errorf("tenant %s ran out of work before the window ended (%d jobs): queue more", tenant, jobs)
			}
		}
	}
	return done, left, nil
}

// countByTenant counts queue's ($1) jobs that meet the SQL condition where,
// per tenant.
func (e *env) countByTenant(ctx context.Context, where, queue string, args ...any) (map[string]int, error) {
	rows, err := e.Pool.Query(ctx, `SELECT coalesce(metadata->>'`+jobmeta.Tenant+`', ''), count(*)
		FROM `+riverschema.JobTable+` WHERE queue = $1 AND (`+where+`) GROUP BY 1`, append([]any{queue}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("count jobs by tenant: %w", err)
	}
	counts := map[string]int{}
	var (
		tenant string
		n      int
	)
	if _, err := pgx.ForEachRow(rows, []any{&tenant, &n}, func() error {
		counts[tenant] = n
		return nil
	}); err != nil {
		return nil, fmt.Errorf("count jobs by tenant: %w", err)
	}
	return counts, nil
}

// tenantCap is the fairness scenario's comparator: what a team builds when
// its queue has no fair share, and what the system tierq's design comes
// from had. A River worker middleware counts, in the process's memory, the
// jobs each tenant (jobmeta.Tenant) is running, and snoozes a job whose
// tenant already runs max of them, for snooze ± jitter (uniform, so that
// the snoozed jobs do not all come back at once). It knows nothing of the
// line: a flooding tenant's jobs still come first in River's fetch order,
// and each one over the cap costs a fetch and a snooze before the worker
// can take the next. It is the bench's, not tierq's.
type tenantCap struct {
	river.MiddlewareDefaults

	max            int
	snooze, jitter time.Duration
	snoozed        atomic.Int64
	// only, when set, are the tenants capped; the others run freely (the
	// limits scenario's comparator caps some tenants). Nil: every tenant.
	only map[string]bool

	mu      sync.Mutex
	running map[string]int
}

var _ rivertype.WorkerMiddleware = (*tenantCap)(nil)

func newTenantCap(limit int, snooze, jitter time.Duration) *tenantCap {
	return &tenantCap{max: limit, snooze: snooze, jitter: jitter, running: map[string]int{}}
}

// install adds the cap to a worker deployment's River configuration. The
// deployment leads: River's scheduler, which only a leader runs, makes
// snoozed jobs available again (in production tierq's scheduler
// deployment leads; the bench has none).
func (c *tenantCap) install(rc *river.Config) {
	rc.Middleware = append(rc.Middleware, c)
	rc.LeaderElectionDisabled = false
}

func (c *tenantCap) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	tenant := jobmeta.Read(job.Metadata).Tenant
	if c.only != nil && !c.only[tenant] {
		return doInner(ctx)
	}
	c.mu.Lock()
	if c.running[tenant] >= c.max {
		c.mu.Unlock()
		c.snoozed.Add(1)
		return river.JobSnooze(c.snooze - c.jitter + rand.N(2*c.jitter+1)) //nolint:gosec // jitter, not a secret
	}
	c.running[tenant]++
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.running[tenant]--
		c.mu.Unlock()
	}()
	return doInner(ctx)
}
