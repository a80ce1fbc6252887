package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/fairshare"
	"github.com/tierq/tierq/internal/riverschema"
	"github.com/tierq/tierq/jobmeta"
	"github.com/tierq/tierq/metrics"
	"github.com/tierq/tierq/routing"
	"github.com/tierq/tierq/tiers"
)

// TenantsResult is the tenants scenario: a newcomer's first start in a
// queue of many active tenants, and what a pass costs there (package
// fairshare). It is a measurement of the design's bound, not a goal: no
// target. Every job is the load-test workload of fairnessJobMs, an
// enterprise job routed with its tenant by the service under test's
// InsertOpts into its priority queue, worked by its worker deployment with
// fair share on by windows (QUEUE_FAIR_SHARE_MODE=windows unless --set
// says otherwise: the passes it times are windows'), at its default
// worker counts (the reference app's 5 priority workers; --set
// ANALYZER_QUEUE_PRIORITY_WORKERS=… measures others). Each case, in a fresh table:
//
//   - a backlog of IDs tenant ids is queued (one InsertMany per batch, the
//     ids in turn: job i is tenant t<i mod IDs>'s), the worker started,
//     and left WarmSeconds after its first pass that holds work back, so
//     that every id has its window in line and the rest held;
//   - a newcomer tenant inserts one job. Its Position is its start's rank
//     among the queue's starts after its insert (River's attempted_at; 1:
//     the first), its wait attempted_at − created_at (the database's
//     clock), Line the queue's jobs in line (available and due) just before
//     the insert. Every id must still have work when it starts, or the case
//     measured ids that ran out.
//
// Two families: Tenants, 10, 100, 1,000 and 10,000 active tenants each with
// a backlog (--quick: up to 1,000), and Spread, one producer's flood of
// SpreadFlood jobs under 1 tenant id and spread over 50 (the case of a
// producer that sends its jobs under many ids, to fair share many tenants
// each with a window). Fair share cannot tell the two families apart: a
// window per id. The design's bound is Bound = workers + ids: each id has a
// window of at least one place, so the line holds at most about the
// capacity plus one place per id, and the newcomer's job goes to its back
// (the places of tenants with jobs running move behind it).
//
// The pass cost is read on the worker's own connections: each execution of
// the pass statement over the queue, from its send to its result (pgx's
// query tracer), of the passes that started from half the warm-up on until
// the newcomer was seen started (polled every 100 ms; one still running then is waited for: over a lone
// tenant's flood, the pass that holds the flood back locks its rows, and
// River's fetch, which skips locked rows, may take the newcomer's job
// before that pass ends).
//
// Medians over runs.
type TenantsResult struct {
	// Workers is the priority queue's capacity, JobMs each job's work, and
	// CapacityJobsPerS the nominal rate, Workers × 1000 / JobMs.
	Workers          int     `json:"workers"`
	JobMs            int     `json:"job_ms"`
	CapacityJobsPerS float64 `json:"capacity_jobs_per_s"`
	WarmSeconds      float64 `json:"warm_seconds"`
	SpreadFlood      int     `json:"spread_flood"`
	Runs             int     `json:"runs"`
	// Tenants are the cases of active tenants with a backlog each, Spread
	// those of one flood over IDs ids.
	Tenants []NewcomerCase `json:"tenants"`
	Spread  []NewcomerCase `json:"spread"`
}

// NewcomerCase is one case of the tenants scenario, medians over runs.
type NewcomerCase struct {
	// IDs are the active tenant ids beside the newcomer, Jobs their backlog
	// in all, and Bound the design's bound on Position: Workers + IDs.
	IDs   int `json:"ids"`
	Jobs  int `json:"jobs"`
	Bound int `json:"bound"`
	// Line is the jobs in line at the newcomer's insert; Position and WaitMs
	// its first start's rank and wait (Positions and WaitsMs each run's).
	Line      float64   `json:"line"`
	Position  float64   `json:"position"`
	WaitMs    float64   `json:"wait_ms"`
	Positions []float64 `json:"positions"`
	WaitsMs   []float64 `json:"waits_ms"`
	// JobsPerS are the queue's starts per second during the wait.
	JobsPerS float64 `json:"jobs_per_s"`
	// PassP50Ms and PassP95Ms are the pass statement's durations on the
	// worker's connections, round trip included; PassesPerS how many ran
	// per second, and PassBusy the share of the time one was running
	// (passes over a queue take its lock: at most about 1, one database
	// core). Passes counts those timed (of the last run).
	PassP50Ms  float64 `json:"pass_p50_ms"`
	PassP95Ms  float64 `json:"pass_p95_ms"`
	PassesPerS float64 `json:"passes_per_s"`
	PassBusy   float64 `json:"pass_busy"`
	Passes     int     `json:"passes"`
	// PassTenants is the most active tenants a pass saw (the admitter's
	// Observer): IDs + 1 once the newcomer is in.
	PassTenants int `json:"pass_tenants"`
}

// tenantsSizes are the tenants scenario's dimensions.
type tenantsSizes struct {
	tenants []int         // the Tenants cases' ids
	spread  []int         // the Spread cases' ids
	flood   int           // the Spread cases' backlog, in all
	warm    time.Duration // after the first holding pass, before the newcomer
}

func (o Options) tenantsSizes() tenantsSizes {
	switch {
	case o.tiny:
		return tenantsSizes{tenants: []int{3, 20}, spread: []int{1, 10}, flood: 1_000, warm: 300 * time.Millisecond}
	case o.Quick:
		return tenantsSizes{tenants: []int{10, 100, 1_000}, spread: []int{1, 50}, flood: 2_500, warm: time.Second}
	}
	return tenantsSizes{tenants: []int{10, 100, 1_000, 10_000}, spread: []int{1, 50}, flood: 5_000, warm: 2 * time.Second}
}

// newcomerTenant is the tenant whose first job is measured.
const newcomerTenant = "newcomer"

// Tenants runs the tenants scenario.
func Tenants(ctx context.Context, opts Options) (TenantsResult, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return TenantsResult{}, err
	}
	e, err := newEnv(ctx, opts)
	if err != nil {
		return TenantsResult{}, err
	}
	defer e.close()

	sz := opts.tenantsSizes()
	// Windows: the scenario measures passes, which turns do not run.
	cfg, err := e.workerConfig(slices.Concat([]string{"QUEUE_FAIR_SHARE_MODE=windows"}, opts.WorkerEnv, []string{"QUEUE_PRIORITY_FAIR_SHARE=true"})...)
	if err != nil {
		return TenantsResult{}, err
	}
	workers := cfg.Workers.Of(routing.Priority)
	res := TenantsResult{
		Workers: workers, JobMs: fairnessJobMs, CapacityJobsPerS: float64(workers) * 1000 / fairnessJobMs,
		WarmSeconds: sz.warm.Seconds(), SpreadFlood: sz.flood, Runs: opts.runs(),
	}
	type spec struct {
		family string
		ids    int
		jobs   int
	}
	var specs []spec
	for _, n := range sz.tenants {
		specs = append(specs, spec{"tenants", n, n * tenantBacklog(n, workers, res.CapacityJobsPerS, sz.warm)})
	}
	for _, n := range sz.spread {
		specs = append(specs, spec{"spread", n, sz.flood})
	}
	cases := make([]NewcomerCase, len(specs))
	for k, s := range specs {
		cases[k] = NewcomerCase{IDs: s.ids, Jobs: s.jobs, Bound: workers + s.ids}
	}
	runs := make([][]newcomerRun, len(specs))
	for run := range res.Runs {
		for k, s := range specs {
			opts.progress().Stage(fmt.Sprintf("tenants run %d/%d: %s, %d ids, %d jobs", run+1, res.Runs, s.family, s.ids, s.jobs), 0)
			r, err := e.newcomer(ctx, cfg, s.ids, s.jobs, sz.warm, res.CapacityJobsPerS)
			if err != nil {
				return res, fmt.Errorf("tenants %s, %d ids: %w", s.family, s.ids, err)
			}
			runs[k] = append(runs[k], r)
		}
	}
	for k, s := range specs {
		c := summarizeNewcomer(cases[k], runs[k])
		if s.family == "tenants" {
			res.Tenants = append(res.Tenants, c)
		} else {
			res.Spread = append(res.Spread, c)
		}
	}
	return res, nil
}

// tenantBacklog is how many jobs each of n tenants queues so that all of
// them still have work when the newcomer starts: half as much again as the
// queue can run in the warm-up, a second's start and the newcomer's wait
// (about one place per tenant and the capacity), shared among them, and 2
// more.
func tenantBacklog(n, workers int, rate float64, warm time.Duration) int {
	need := (warm.Seconds()+1)*rate + float64(n+workers)
	return max(3, int(1.5*need/float64(n))+2)
}

// newcomerRun is one run of one case.
type newcomerRun struct {
	line, position, waitMs, jobsPerS float64
	passes                           []time.Duration
	passSeconds                      float64 // the time the passes were timed over
	passTenants                      int
}

func summarizeNewcomer(c NewcomerCase, runs []newcomerRun) NewcomerCase {
	var lines, positions, waits, rates, p50s, p95s, perS, busy []float64
	for _, r := range runs {
		lines = append(lines, r.line)
		positions = append(positions, r.position)
		waits = append(waits, r.waitMs)
		rates = append(rates, r.jobsPerS)
		var ms []float64
		var total float64
		for _, d := range r.passes {
			ms = append(ms, float64(d.Microseconds())/1000)
			total += d.Seconds()
		}
		slices.Sort(ms)
		if len(ms) > 0 {
			p50s = append(p50s, percentile(ms, 50))
			p95s = append(p95s, percentile(ms, 95))
		}
		if r.passSeconds > 0 {
			perS = append(perS, float64(len(ms))/r.passSeconds)
			busy = append(busy, total/r.passSeconds)
		}
		c.PassTenants = max(c.PassTenants, r.passTenants)
		c.Passes = len(ms)
	}
	c.Line, c.Position, c.WaitMs = median(lines), median(positions), round(median(waits), 2)
	c.Positions, c.WaitsMs = positions, waits
	c.JobsPerS = round(median(rates), 1)
	// No pass in a case (none would be timed over a lone tenant's queue
	// before the newcomer): 0, not NaN, which JSON cannot carry.
	orZero := func(xs []float64, d int) float64 {
		if len(xs) == 0 {
			return 0
		}
		return round(median(xs), d)
	}
	c.PassP50Ms, c.PassP95Ms = orZero(p50s, 2), orZero(p95s, 2)
	c.PassesPerS, c.PassBusy = orZero(perS, 1), orZero(busy, 3)
	return c
}

// newcomer runs one case: a fresh table, jobs jobs of ids tenant ids queued
// in turn, the worker deployment of cfg started with its passes timed,
// warm after its first pass that held work back (or at once, for one id:
// a tenant alone is never held), then the newcomer's one job.
func (e *env) newcomer(ctx context.Context, cfg config.Worker, ids, jobs int, warm time.Duration, rate float64) (newcomerRun, error) {
	var r newcomerRun
	if err := e.reset(ctx); err != nil {
		return r, err
	}
	client, err := e.producerClient(e.Pool)
	if err != nil {
		return r, err
	}
	if err := e.insertSpread(ctx, client, ids, jobs); err != nil {
		return r, err
	}
	if _, err := e.Pool.Exec(ctx, `ANALYZE `+riverschema.JobTable); err != nil {
		return r, fmt.Errorf("analyze river_job: %w", err)
	}

	queue := e.opts.Service.Queue(routing.Priority)
	timer := &passTimer{queue: queue}
	poolCfg := e.PoolConfig.Copy()
	poolCfg.MaxConns = 10
	poolCfg.ConnConfig.Tracer = timer
	workerPool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return r, fmt.Errorf("connect: %w", err)
	}
	defer workerPool.Close()
	obs := &passObserver{queue: queue, held: make(chan struct{})}
	dep, err := observedDeployment(cfg, workerPool, e.opts, obs)
	if err != nil {
		return r, err
	}
	stop, err := dep.start(ctx)
	if err != nil {
		return r, err
	}
	defer stop()
	if ids > 1 {
		select {
		case <-obs.held:
		case <-ctx.Done():
			return r, ctx.Err()
		case <-time.After(time.Minute):
			return r, errors.New("no pass held work back within a minute")
		}
	}
	if err := sleep(ctx, warm/2); err != nil {
		return r, err
	}
	from := time.Now()
	if err := sleep(ctx, warm-warm/2); err != nil {
		return r, err
	}

	if err := e.Pool.QueryRow(ctx, `SELECT count(*) FROM `+riverschema.JobTable+` WHERE state = '`+riverschema.StateAvailable+`' AND queue = $1 AND scheduled_at <= now()`,
		queue).Scan(&r.line); err != nil {
		return r, fmt.Errorf("count the line: %w", err)
	}
	row, err := client.Insert(ctx, fairnessArgs, e.opts.Service.InsertOpts(tiers.Enterprise, newcomerTenant, false))
	if err != nil {
		return r, fmt.Errorf("insert the newcomer's job: %w", err)
	}
	id := row.Job.ID
	// Its wait is at most about one place per id and the capacity, at the
	// queue's rate; ten times that, and two minutes for a slow machine.
	timeout := 2*time.Minute + time.Duration(10*float64(ids+int(rate))/rate*float64(time.Second))
	if err := waitJobs(ctx, e.Pool, []int64{id}, timeout, "attempted_at IS NULL", "started"); err != nil {
		return r, fmt.Errorf("the newcomer's job: %w", err)
	}
	to := time.Now()
	var (
		started time.Time
		ranOut  int
	)
	if err := e.Pool.QueryRow(ctx, `
		SELECT n.attempted_at,
		       extract(epoch FROM n.attempted_at - n.created_at)::float8 * 1000,
		       1 + (SELECT count(*) FROM `+riverschema.JobTable+` AS j
		            WHERE j.queue = n.queue AND j.id <> n.id AND j.attempted_at > n.created_at AND j.attempted_at < n.attempted_at),
		       $2::int - (SELECT count(DISTINCT j.metadata->>'`+jobmeta.Tenant+`') FROM `+riverschema.JobTable+` AS j
		                  WHERE j.queue = n.queue AND j.id <> n.id AND (j.attempted_at IS NULL OR j.attempted_at > n.attempted_at))
		FROM `+riverschema.JobTable+` AS n WHERE n.id = $1`, id, ids).Scan(&started, &r.waitMs, &r.position, &ranOut); err != nil {
		return r, fmt.Errorf("read the newcomer's start: %w", err)
	}
	if ranOut > 0 {
		return r, fmt.Errorf("%d of %d tenant ids ran out of work before the newcomer started (%d jobs): queue more", ranOut, ids, jobs)
	}
	r.waitMs = round(r.waitMs, 2)
	if r.waitMs > 0 {
		r.jobsPerS = round((r.position-1)/(r.waitMs/1000), 1)
	}
	// A pass that started before the newcomer did may still run (the
	// holding pass over a lone tenant's flood: River's fetch skips the rows
	// it has locked, and takes the newcomer's).
	if err := timer.settle(ctx, 10*time.Second); err != nil {
		return r, err
	}
	r.passes = timer.between(from, to)
	r.passSeconds = to.Sub(from).Seconds()
	r.passTenants = obs.most()
	return r, nil
}

// tenantsInsertBatch is how many jobs one InsertMany of a case's backlog
// carries.
const tenantsInsertBatch = 5_000

// insertSpread inserts jobs of the scenario's jobs for ids tenant ids, in
// turn (job i is tenant t<i mod ids>'s), as one producer spreading a flood
// would, in batches of tenantsInsertBatch.
func (e *env) insertSpread(ctx context.Context, client *river.Client[pgx.Tx], ids, jobs int) error {
	for start := 0; start < jobs; start += tenantsInsertBatch {
		params := make([]river.InsertManyParams, min(tenantsInsertBatch, jobs-start))
		for i := range params {
			tenant := fmt.Sprintf("t%d", (start+i)%ids)
			params[i] = river.InsertManyParams{Args: fairnessArgs, InsertOpts: e.opts.Service.InsertOpts(tiers.Enterprise, tenant, false)}
		}
		if _, err := client.InsertMany(ctx, params); err != nil {
			return fmt.Errorf("insert %d jobs of %d tenants: %w", len(params), ids, err)
		}
	}
	return nil
}

// observedDeployment is tierqDeployment, with obs told about every pass of
// the admitter.
func observedDeployment(cfg config.Worker, pool *pgxpool.Pool, opts Options, obs fairshare.Observer) (*deployment, error) {
	w, err := workerDeployment(cfg, opts)
	if err != nil {
		return nil, err
	}
	rc, err := w.RiverConfig(opts.Registry, pool)
	if err != nil {
		return nil, err
	}
	admitter, err := w.NewAdmitter(pool, obs)
	if err != nil {
		return nil, err
	}
	rc.Hooks = append(rc.Hooks, metrics.NewJobs(prometheus.NewRegistry()), admitter.Hook())
	d, err := riverDeployment(pool, rc)
	if err != nil {
		return nil, err
	}
	d.admitter = admitter
	return d, nil
}

// passObserver records the most active tenants the passes over queue saw,
// and closes held at the first pass that held work back.
type passObserver struct {
	queue string
	held  chan struct{}

	mu      sync.Mutex
	tenants int
	closed  bool
}

var _ fairshare.Observer = (*passObserver)(nil)

func (o *passObserver) Pass(queue string, held, _, tenants, heldTenants, _ int) {
	if queue != o.queue {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.tenants = max(o.tenants, tenants)
	if (held > 0 || heldTenants > 0) && !o.closed {
		close(o.held)
		o.closed = true
	}
}

func (o *passObserver) Lend(string, int, int) {}

func (o *passObserver) most() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.tenants
}

// passMarker is a piece of the pass statement's text that no other
// statement has (its loose scan of the tenants with held work): how
// passTimer tells a pass from the worker's other statements. The tenants
// scenario's test fails if no pass is timed.
const passMarker = "held_all(tenant, level, tier) AS ("

// passTimer is a pgx query tracer that records when each execution of the
// pass statement over queue started and how long it took, from its send to
// its result.
type passTimer struct {
	queue string

	mu       sync.Mutex
	inflight int
	starts   []time.Time
	took     []time.Duration
}

var _ pgx.QueryTracer = (*passTimer)(nil)

type passStartKey struct{}

func (t *passTimer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if !strings.Contains(data.SQL, passMarker) || len(data.Args) == 0 || data.Args[0] != t.queue {
		return ctx
	}
	t.mu.Lock()
	t.inflight++
	t.mu.Unlock()
	return context.WithValue(ctx, passStartKey{}, time.Now())
}

func (t *passTimer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	start, ok := ctx.Value(passStartKey{}).(time.Time)
	if !ok {
		return
	}
	took := time.Since(start)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.inflight--
	if data.Err == nil {
		t.starts = append(t.starts, start)
		t.took = append(t.took, took)
	}
}

// settle waits until no pass is running, at most timeout.
func (t *passTimer) settle(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		t.mu.Lock()
		n := t.inflight
		t.mu.Unlock()
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("a pass still running %s after the newcomer started", timeout)
		}
		if err := sleep(ctx, 5*time.Millisecond); err != nil {
			return err
		}
	}
}

// between is the durations of the passes that started from from to to.
func (t *passTimer) between(from, to time.Time) []time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []time.Duration
	for i, s := range t.starts {
		if !s.Before(from) && s.Before(to) {
			out = append(out, t.took[i])
		}
	}
	return out
}
