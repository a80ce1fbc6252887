package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/internal/riverschema"
	"github.com/tierq/tierq/service"
)

// TrafficResult is the traffic scenario: what production sends, through the
// application's real processes (Options.AppCommand), with fair share and
// lending on. Every service of Options.Registry at once (tierctl passes the
// reference app's two and the thumbnail example's), each served by worker
// processes of its own deployment, two scheduler replicas and the API.
//
// The traffic is the same in every run (a fixed seed): Tenants tenants
// with Zipf-distributed sizes (tenant r has LargestTenantJobs / r^1.5 jobs,
// at least 1: one flood, most tenants 1–3 jobs), with a tier and a home
// service each, beside no tenant at all, a tenant id of 200 bytes (the
// longest producers accept) and one of 3,200 bytes written with SQL, as a
// producer that bypasses tierq would; jobs of every class of production
// (Mix: plain, transient failures retried after River's backoff or a
// short NextRetry, failures on every attempt dead-lettered after
// MaxAttempts 3, snoozes, bad args cancelled with the reason), some of them
// background work; and Unfetchable rows of a kind no worker runs, which
// must stay where they are and be reported. The tenants with more than 3
// jobs are queued at the start of a run, as one producer's batches; the
// small ones arrive one by one over StreamSeconds, from WarmSeconds after
// that insert. Every job records its executions (load_test_executions).
//
// Phases:
//
//   - warmup: one run with fair share on, checked like every run but
//     counted in no rate or median: the first run of a database was the
//     slowest of its bench in the three full runs of 2026-11-28's evening
//     before the warm-up (233.5–241.2 jobs/s against 248.3–266.9 for the
//     other on runs; not so in the two after: docs/benchmarks.md,
//     "traffic").
//   - throughput: the traffic with fair share on and off (QUEUE_PRIORITY_FAIR_SHARE
//     and QUEUE_DEFAULT_FAIR_SHARE), alternated on, off, on, off (Pairs
//     pairs), fresh workers and tables each time. A run's rate is its
//     prompt jobs (those planning no delay of 5 s or more) over the time
//     until 99% of them had ended; Ratio is the median on rate over the
//     median off rate.
//   - faults: the traffic with fair share on; midway (half the prompt jobs
//     ended) the worker process running the most jobs and the leading
//     scheduler are killed with SIGKILL, and a worker replaces the dead one
//     two seconds later, as an orchestrator would. The killed worker's jobs
//     stay running until the new leader's rescuer retries them
//     (RESCUE_STUCK_JOBS_AFTER=61s, as the chaos suite sets it).
//   - checks, after every run: every job completed, cancelled with its
//     reason, or dead-lettered, as it planned to (a job the kill cut short
//     may end dead-lettered instead of completed, when the rescue took its
//     last attempt); none lost, none stranded (queued, running or held),
//     none completed twice; the unfetchable rows still there and reported
//     by GET /v1/queues and tierq_unfetchable_jobs; the small tenants'
//     first starts within the bound docs/fairness.md states (Small); and at
//     sampled moments the held count and oldest wait of GET /v1/queues and
//     /metrics between SQL reads taken just before and just after
//     (Samples).
type TrafficResult struct {
	Tenants           int            `json:"tenants"`
	LargestTenantJobs int            `json:"largest_tenant_jobs"`
	SmallTenants      int            `json:"small_tenants"` // Zipf tenants of 1–3 jobs
	LongTenantBytes   int            `json:"long_tenant_bytes"`
	Jobs              int            `json:"jobs"` // per run
	Mix               map[string]int `json:"mix"`  // jobs per class
	Unfetchable       int            `json:"unfetchable_rows"`
	StreamSeconds     float64        `json:"stream_seconds"`
	WarmSeconds       float64        `json:"warm_seconds"`
	// Workers are each queue's workers across the worker processes,
	// Processes the processes per role (worker processes per service).
	Workers   map[string]int `json:"workers"`
	Processes map[string]int `json:"processes"`
	Pairs     int            `json:"pairs"`

	// Runs are every run in order: the warm-up, the throughput phase's,
	// then the faults phase's.
	Runs []TrafficRun `json:"runs"`

	// JobsPerSOn and JobsPerSOff are the throughput phase's median rates,
	// Ratio the first over the second.
	JobsPerSOn  float64 `json:"jobs_per_s_on"`
	JobsPerSOff float64 `json:"jobs_per_s_off"`
	Ratio       float64 `json:"ratio"`

	// Small is the small tenants' first starts with fair share on (the
	// median of each on run's figures, the faults run's included),
	// SmallOff with it off.
	Small    SmallTenants `json:"small"`
	SmallOff SmallTenants `json:"small_off"`

	// Faults is what the faults phase killed, and how the application
	// recovered.
	Faults TrafficFaults `json:"faults"`

	// Checks are the end checks over every run, each met or not.
	Checks []TrafficCheck `json:"checks"`
}

// TrafficRun is one run of the traffic.
type TrafficRun struct {
	Phase     string `json:"phase"` // warmup, throughput or faults
	FairShare bool   `json:"fair_share"`
	Jobs      int    `json:"jobs"`
	// JobsPerS is the rate of the prompt jobs (Prompt of them): 99% of
	// them over the time until 99% had ended (Seconds), from the start of
	// the run's inserts.
	Prompt   int     `json:"prompt"`
	Seconds  float64 `json:"seconds"`
	JobsPerS float64 `json:"jobs_per_s"`
	// QueueSeconds is, per queue, the time until 99% of its prompt jobs
	// had ended.
	QueueSeconds map[string]float64 `json:"queue_seconds"`
	// SettleSeconds is the time until every job had ended.
	SettleSeconds float64 `json:"settle_seconds"`
	// BacklogSeconds is how long the backlog's insert took (the tenants
	// queued at the start, in one producer's batches): the small tenants
	// start arriving WarmSeconds after it ends.
	BacklogSeconds float64 `json:"backlog_seconds"`
	Executions     int     `json:"executions"`
	// Where the jobs ended.
	Completed    int `json:"completed"`
	Cancelled    int `json:"cancelled"`
	DeadLettered int `json:"dead_lettered"`
	// Violations of the end checks (each must be 0): jobs in neither
	// river_job nor dead_letter_jobs, jobs still queued, running or held
	// at the settle limit, jobs that ended otherwise than planned,
	// cancelled jobs without their reason, jobs completed more than once
	// or whose attempt started twice.
	Lost              int `json:"lost"`
	Stranded          int `json:"stranded"`
	Unexpected        int `json:"unexpected"`
	CancelledNoReason int `json:"cancelled_without_reason"`
	RanTwice          int `json:"ran_twice"`
	StrandedHeld      int `json:"stranded_held"`
	// Examples describe the first few violations.
	Examples []string `json:"examples,omitempty"`
	// HeldPeak is the most jobs held at a sample, Lent the jobs that ran
	// lent to a priority queue.
	HeldPeak int `json:"held_peak"`
	Lent     int `json:"lent"`
	// Unfetchable: the rows of a kind no worker runs left at the end, and
	// what GET /v1/queues (unfetchable) and /metrics
	// (tierq_unfetchable_jobs) reported, summed over the queues.
	UnfetchableLeft   int `json:"unfetchable_left"`
	UnfetchableAPI    int `json:"unfetchable_api"`
	UnfetchableMetric int `json:"unfetchable_metric"`
	// Samples are the moments the API and the metrics were compared with
	// SQL, SamplesOutside the values that fell outside what the SQL reads
	// allow, SampleViolations the first few of them described.
	Samples          int      `json:"samples"`
	SamplesOutside   int      `json:"samples_outside"`
	SampleViolations []string `json:"sample_violations,omitempty"`
	// APISlowestMs is the slowest answer of GET /v1/queues or /metrics at
	// a sample.
	APISlowestMs float64 `json:"api_slowest_ms"`
	// Small is this run's small tenants' first starts.
	Small SmallTenants `json:"small"`
}

// SmallTenants are the first starts of the tenants with 1–3 jobs in
// their home queue (not the background queue, which keeps FIFO). A
// tenant's wait is from its insert to its first job's first start; its
// position that start's rank among the starts of its queue's jobs at its
// priority or worse since its insert (the starts at a better priority are
// River's strict priority, not other tenants' turns); its bound the
// capacity of the queue (its workers across the processes, as fair share
// counts them: a killed process's for its heartbeat's 15 s lease) plus the
// other tenants active at its priority while it waited (with a job due and
// waiting at some moment between its insert and its first start:
// inserted, or its snooze or retry delay passed, and not started yet):
// docs/fairness.md, "Many tenants": a newcomer waits behind up to about
// capacity + k jobs, k the active tenants. While a better priority waits,
// fair share holds every job of a worse one (their windows are 0): a
// newcomer there competes, when its priority's turn comes, with every
// tenant that arrived meanwhile, in no order of arrival (Overtaken: the
// starts ahead of it of jobs inserted after it).
type SmallTenants struct {
	Tenants  int     `json:"tenants"`
	WaitP50  float64 `json:"wait_p50_ms"`
	WaitP99  float64 `json:"wait_p99_ms"`
	Position float64 `json:"position_p99"`
	Bound    float64 `json:"bound_p99"`
	// OverBound is the p99 of position / bound: at most 1 when the bound
	// holds for 99% of them. Beyond the worst is its tenant.
	OverBound float64 `json:"over_bound_p99"`
	Worst     string  `json:"worst,omitempty"`
	Overtaken float64 `json:"overtaken_p99"`
	// Inverted is the p99 of the starts at a worse priority than its own
	// while it waited (a job inserted at a worse priority is available
	// until a pass holds it, and a worker the better priority's line left
	// idle between passes takes it), InvertedTenants how many tenants saw
	// any.
	Inverted        float64 `json:"inverted_p99"`
	InvertedTenants int     `json:"inverted_tenants"`
}

// TrafficFaults is the faults phase's kills and the recovery.
type TrafficFaults struct {
	// KilledWorker is the worker process killed, KilledRunning how many
	// jobs it was running then (stuck until rescued), AtSeconds when (from
	// the run's start).
	KilledWorker  string  `json:"killed_worker"`
	KilledRunning int     `json:"killed_running"`
	AtSeconds     float64 `json:"at_seconds"`
	// KilledScheduler is the leader killed, NewLeader the replica that
	// took over after TakeoverSeconds.
	KilledScheduler string  `json:"killed_scheduler"`
	NewLeader       string  `json:"new_leader"`
	TakeoverSeconds float64 `json:"takeover_seconds"`
	// Rescued are the killed worker's jobs that ended (completed or
	// dead-lettered), RecoverySeconds from the kill until the last did.
	Rescued         int     `json:"rescued"`
	RecoverySeconds float64 `json:"recovery_seconds"`
}

// TrafficCheck is one end check: Violations over every run (0 to be met).
type TrafficCheck struct {
	Name       string `json:"name"`
	Violations int    `json:"violations"`
	Met        bool   `json:"met"`
	Detail     string `json:"detail,omitempty"`
}

// trafficSizes are the traffic scenario's dimensions.
type trafficSizes struct {
	shape   trafficShape
	pairs   int // on/off pairs of the throughput phase; 0: the faults phase only
	workers int // worker processes per service
	// midway: the faults phase is a run of its own, and its kills come
	// when half the jobs ended. Otherwise (the tests' sizes, which cannot
	// wait a minute for a rescue) the kills come at the start of the last
	// on run, before its jobs are queued.
	midway bool
	// settle bounds a run, from its start.
	settle time.Duration
	// warm is the time from the end of the backlog's insert to the
	// stream's start: fair share's first pass over a fresh flood holds it
	// back in one statement (0.36 s for 5,000 jobs, BenchmarkFirstHold),
	// and a tenant arriving before it ends waits behind the flood's first
	// jobs. The bound is the line's once passes hold the backlog, as
	// tierctl bench tenants measures it.
	warm time.Duration
}

func (o Options) trafficSizes() trafficSizes {
	shape := trafficShape{exponent: 1.5, seed: 2026_11_27}
	var sz trafficSizes
	switch {
	case o.tiny:
		shape.tenants, shape.head, shape.stream, shape.noLongDelays = 40, 120, time.Second, true
		sz = trafficSizes{pairs: 1, workers: 1, settle: 2 * time.Minute, warm: 500 * time.Millisecond}
	case o.TrafficShort:
		shape.tenants, shape.head, shape.stream = 1_000, 1_000, 5*time.Second
		sz = trafficSizes{pairs: 0, workers: 2, midway: true, settle: 4 * time.Minute, warm: time.Second}
	case o.Quick:
		shape.tenants, shape.head, shape.stream = 300, 1_500, 5*time.Second
		sz = trafficSizes{pairs: 1, workers: 2, midway: true, settle: 4 * time.Minute, warm: time.Second}
	default:
		shape.tenants, shape.head, shape.stream = 1_000, 5_000, 20*time.Second
		sz = trafficSizes{pairs: 2, workers: 2, midway: true, settle: 5 * time.Minute, warm: 2 * time.Second}
	}
	if o.Runs > 0 && sz.pairs > 0 {
		sz.pairs = o.Runs
	}
	sz.shape = shape
	return sz
}

// trafficUnknownKind is the kind of the unfetchable rows: no worker runs it.
const trafficUnknownKind = "traffic_unknown_kind"

// Traffic runs the traffic scenario.
func Traffic(ctx context.Context, opts Options) (TrafficResult, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return TrafficResult{}, err
	}
	if opts.AppCommand == nil {
		return TrafficResult{}, errors.New("bench: the traffic scenario needs Options.AppCommand")
	}
	e, err := newEnv(ctx, opts)
	if err != nil {
		return TrafficResult{}, err
	}
	defer e.close()

	sz := opts.trafficSizes()
	services := opts.Registry.Services()
	plan := newTrafficPlan(sz.shape, services)
	res := TrafficResult{
		Tenants: sz.shape.tenants, LargestTenantJobs: zipfJobs(sz.shape.head, sz.shape.exponent, 1),
		LongTenantBytes: longTenantBytes, Jobs: len(plan.jobs), Mix: plan.mix(), Unfetchable: len(plan.unfetchable),
		StreamSeconds: sz.shape.stream.Seconds(), WarmSeconds: sz.warm.Seconds(), Workers: map[string]int{}, Processes: map[string]int{}, Pairs: sz.pairs,
	}
	for _, t := range plan.tenants {
		if t.rank > 0 && t.small {
			res.SmallTenants++
		}
	}
	for _, svc := range services {
		cfg, err := config.LoadWorker(append(slices.Clone(opts.WorkerEnv),
			"DATABASE_URL="+opts.DatabaseURL, "WORKER_SERVICE="+svc.Name(), "LOAD_TEST_WORKLOAD=true"), opts.Registry)
		if err != nil {
			return res, err
		}
		queues, err := workerQueues(cfg, opts)
		if err != nil {
			return res, err
		}
		for queue, qc := range queues {
			res.Workers[queue] = qc.Workers * sz.workers
		}
		res.Processes["worker "+svc.Name()] = sz.workers
	}
	res.Processes["scheduler"], res.Processes["api"] = 2, 1

	a := newApp(e)
	defer func() { _ = a.stop("") }()
	opts.progress().Stage("traffic: starting the schedulers and the API", 0)
	for range 2 {
		if _, err := a.scheduler(ctx); err != nil {
			return res, err
		}
	}
	api, err := a.api(ctx)
	if err != nil {
		return res, err
	}
	t := &trafficRunner{e: e, app: a, api: api, plan: plan, sz: sz, services: services, workers: res.Workers}
	if t.producer, err = e.producerClient(e.Pool); err != nil {
		return res, err
	}

	var modes []runMode
	if sz.pairs > 0 {
		modes = append(modes, runMode{phase: "warmup", fairShare: true})
	}
	for range sz.pairs {
		modes = append(modes, runMode{phase: "throughput", fairShare: true}, runMode{phase: "throughput"})
	}
	if sz.midway || len(modes) == 0 {
		modes = append(modes, runMode{phase: "faults", fairShare: true, faults: true})
	} else {
		modes[len(modes)-2].faults = true // the last on run, killed before its jobs are queued
	}
	var on, off []float64
	var smallOn, smallOff []SmallTenants
	for i, m := range modes {
		opts.progress().Stage(fmt.Sprintf("traffic run %d/%d: %s, fair share %s, %d jobs", i+1, len(modes), m.phase, onOff(m.fairShare), len(plan.jobs)), len(plan.jobs))
		run, err := t.run(ctx, m, &res.Faults)
		if err != nil {
			return res, fmt.Errorf("traffic run %d (%s, fair share %s): %w", i+1, m.phase, onOff(m.fairShare), err)
		}
		res.Runs = append(res.Runs, run)
		switch {
		case m.phase == "throughput" && m.fairShare:
			on = append(on, run.JobsPerS)
		case m.phase == "throughput":
			off = append(off, run.JobsPerS)
		}
		switch {
		case m.phase == "warmup":
		case m.fairShare:
			smallOn = append(smallOn, run.Small)
		default:
			smallOff = append(smallOff, run.Small)
		}
	}
	if err := a.unexpectedExits(); err != nil {
		return res, err
	}
	if len(on) > 0 {
		res.JobsPerSOn, res.JobsPerSOff = round(median(on), 1), round(median(off), 1)
		res.Ratio = round(median(on)/median(off), 3)
	}
	res.Small, res.SmallOff = medianSmall(smallOn), medianSmall(smallOff)
	res.Checks = trafficChecks(res)
	return res, nil
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// runMode is one run's settings.
type runMode struct {
	phase     string
	fairShare bool
	faults    bool
}

// trafficRunner runs the traffic's runs on one application.
type trafficRunner struct {
	e        *env
	app      *app
	api      *appProcess
	plan     trafficPlan
	sz       trafficSizes
	services []*service.Service
	workers  map[string]int
	producer *river.Client[pgx.Tx]

	// lastScrape is when /metrics was last read: the API caches its
	// database read for api.MetricsCacheFor (5 s), so a sample reads it
	// only that long after the last.
	lastScrape time.Time
}

// workerSettings are the worker processes' settings for a run: fair share
// as asked for the priority and default queues, lending on for every
// service (its floor at the default of 1), and the bench's WorkerEnv.
func (t *trafficRunner) workerSettings(fairShare bool) []string {
	settings := slices.Clone(t.e.opts.WorkerEnv)
	settings = append(settings, fmt.Sprintf("QUEUE_PRIORITY_FAIR_SHARE=%t", fairShare), fmt.Sprintf("QUEUE_DEFAULT_FAIR_SHARE=%t", fairShare))
	for _, svc := range t.services {
		settings = append(settings, svc.EnvPrefix()+"LEND_IDLE_PRIORITY=true", svc.EnvPrefix()+"LEND_FLOOR=1")
	}
	return settings
}

// startWorkers starts every service's worker processes at once.
func (t *trafficRunner) startWorkers(ctx context.Context, settings []string) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, svc := range t.services {
		for range t.sz.workers {
			wg.Go(func() {
				if _, err := t.app.worker(ctx, svc, settings); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return t.waitHeartbeats(ctx, len(t.services)*t.sz.workers)
}

// waitHeartbeats waits until n worker processes have recorded their
// fair-share heartbeat (fair_share_slots, written whether fair share is on
// or off): a process logs "worker started" before its admitter's first
// heartbeat, and by turns the jobs inserted before a queue's first
// heartbeat are a backlog its first process then places again, a start
// the run would measure instead of the steady state.
func (t *trafficRunner) waitHeartbeats(ctx context.Context, n int) error {
	deadline := time.Now().Add(processStartTimeout)
	for {
		var beats int
		if err := t.e.Pool.QueryRow(ctx, `SELECT count(DISTINCT client_id) FROM fair_share_slots WHERE expires_at > now()`).Scan(&beats); err != nil {
			return fmt.Errorf("count heartbeats: %w", err)
		}
		if beats >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d worker processes recorded a heartbeat after %s", beats, n, processStartTimeout)
		}
		if err := sleep(ctx, 10*time.Millisecond); err != nil {
			return err
		}
	}
}

// resetTraffic empties the tables a run writes.
func (e *env) resetTraffic(ctx context.Context) error {
	_, err := e.Pool.Exec(ctx, `TRUNCATE `+riverschema.JobTable+`, dead_letter_jobs, job_escalations, fair_share_slots, load_test_executions`)
	if err != nil {
		return fmt.Errorf("reset tables: %w", err)
	}
	return nil
}

// historyJobs is how many finished jobs each run of the traffic starts
// beside, in the services' queues.
const historyJobs = 20_000

// historyKind is the kind of those finished jobs: no worker runs it, and
// the checks, which follow the plan's jobs by id, never see them.
const historyKind = "tierq_bench_history"

// trafficHistory writes historyJobs completed jobs of 1,000 tenants across
// queues and analyzes river_job, so that each run starts on a table with
// the statistics of a service that has been running, as production's has,
// not on an empty table never analyzed. On the empty table the planner's
// generic plan of a fair-share pass read river_job sequentially for each id
// lookup (14 scans; one pass 107 ms in a quick run, from auto_explain)
// until autovacuum analyzed the table, which a run of a minute may never
// see: the runs with fair share paid for a table no production has.
// Both modes start the same way.
func (e *env) trafficHistory(ctx context.Context, queues []string) error {
	_, err := e.Pool.Exec(ctx, `
		INSERT INTO `+riverschema.JobTable+` (state, queue, priority, kind, args, metadata, max_attempts, attempt,
		                                     attempted_at, scheduled_at, created_at, finalized_at)
		SELECT 'completed', ($1::text[])[1 + i % cardinality($1::text[])], 1 + i % 4, $2, '{}',
		       jsonb_build_object('tierq:tenant', 'history-' || (i % 1000), 'tierq:tier', (ARRAY['free', 'pro', 'pro_plus', 'enterprise'])[1 + i % 4]),
		       1, 1, now() - interval '1 hour' + i * interval '100 milliseconds', now() - interval '1 hour' + i * interval '100 milliseconds',
		       now() - interval '1 hour' + i * interval '100 milliseconds', now() - interval '1 hour' + i * interval '100 milliseconds' + interval '20 milliseconds'
		FROM generate_series(1, $3::int) AS i`, queues, historyKind, historyJobs)
	if err != nil {
		return fmt.Errorf("write the finished jobs a run starts beside: %w", err)
	}
	if _, err := e.Pool.Exec(ctx, `ANALYZE `+riverschema.JobTable); err != nil {
		return fmt.Errorf("analyze river_job: %w", err)
	}
	return e.checkpoint(ctx)
}

// checkpoint starts each run from a checkpoint, so that no run pays for
// another's dirty pages and none has a timed checkpoint start midway
// (checkpoint_timeout counts from the last one: 5 min by default, longer
// than a run). A run still writes a full page image into the WAL for each
// page it first changes (the history's), every run alike; a timed
// checkpoint midway made one run flush its dirty pages and write a second
// round of images, and every commit waits on the WAL flush (WALWrite was
// the most sampled wait of a quick run, ahead of any statement's own
// work). A role that may not checkpoint (CHECKPOINT needs superuser or
// pg_checkpoint) runs without, with a warning.
func (e *env) checkpoint(ctx context.Context) error {
	_, err := e.Pool.Exec(ctx, `CHECKPOINT`)
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "42501" { // insufficient_privilege
		e.opts.logger().Warn("bench: no checkpoint before the run", slog.String("error", err.Error()))
		return nil
	}
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// queues are every service's queues.
func (t *trafficRunner) queues() []string {
	var out []string
	for _, svc := range t.services {
		out = append(out, svc.Queues()...)
	}
	return out
}
