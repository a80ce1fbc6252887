package bench

import (
	"context"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/internal/riverschema"
	"github.com/tierq/tierq/internal/seed"
	"github.com/tierq/tierq/loadtest"
	"github.com/tierq/tierq/routing"
	"github.com/tierq/tierq/worker"
)

// ScaleoutResult is the scaleout scenario: the measured scale-out model of
// one service. 1, 2, 4 and 8 worker processes of the service under test
// (Options.WorkerCommand: separate OS processes, each a worker deployment
// as its main runs it, with the load-test workload and the service's
// worker counts) on one database. The jobs are the load-test workload of
// ScaleoutJobMs. At each size, each phase on an empty table with the
// processes started afresh:
//
//   - paid, the processes connected directly to the server: a free backlog
//     queued in the service's default queue (routed by its InsertOpts,
//     more than every process's default workers finish meanwhile, which
//     the scenario checks), and beside it a paid stream of one enterprise
//     job every streamInterval for StreamSeconds (PaidJobs), by a producer
//     client; pickup is attempted_at − created_at (the database's clock).
//   - idle, then throughput, each process connected through a wireProxy of
//     its own that counts its statements, its fetches (River's
//     JobGetAvailable) and its connections: first the statements and
//     fetches per second with nothing queued, over IdleSeconds; then every
//     queue of the service seeded deeper than the processes can work in
//     the phase and, from WarmSeconds on, the jobs started per second over
//     WindowSeconds by the database's clock (attempted_at), in all, by
//     process (the River client that started them, attempted_by) and by
//     queue, each process's fetches and statements per second meanwhile,
//     and the CPU the machine, the processes, their PostgreSQL backends and
//     the bench used (Linux /proc).
//
// After each phase what is still queued is deleted and every job left must
// have completed on its first attempt (Reruns, Unfinished). Medians over
// runs per size.
type ScaleoutResult struct {
	Sizes []ScaleoutSize `json:"sizes"`
	// QueueWorkers are the service's worker counts per queue in each
	// process, and WorkersPerProcess their sum.
	QueueWorkers      map[string]int `json:"queue_workers"`
	WorkersPerProcess int            `json:"workers_per_process"`
	JobMs             int            `json:"job_ms"`
	PaidJobs          int            `json:"paid_jobs"` // per size and run
	IdleSeconds       float64        `json:"idle_seconds"`
	StreamSeconds     float64        `json:"stream_seconds"`
	WarmSeconds       float64        `json:"warm_seconds"`
	WindowSeconds     float64        `json:"window_seconds"`
	// CPUs is this machine's logical CPUs (the processes, PostgreSQL and
	// the bench share them when the server is local).
	CPUs  int  `json:"cpus"`
	Runs  int  `json:"runs"`
	Quick bool `json:"quick"`
	// Samples are the paid pickups (ms) of the last run per size
	// ("scaleout paid, 4 processes"), for plots.
	Samples map[string][]float64 `json:"-"`
}

// ScaleoutSize is one size of the scaleout scenario: medians over runs,
// rates per second, per-process figures the mean over its processes.
type ScaleoutSize struct {
	Processes int `json:"processes"`
	Workers   int `json:"workers"` // Processes × WorkersPerProcess
	// JobsPerS is the jobs started per second in the throughput window,
	// every queue, every process; QueueJobsPerS by queue, and
	// ProcessJobsPerS by process (the last run's).
	JobsPerS        float64            `json:"jobs_per_s"`
	QueueJobsPerS   map[string]float64 `json:"queue_jobs_per_s"`
	ProcessJobsPerS []float64          `json:"process_jobs_per_s"`
	// SlotBoundJobsPerS is what the slots allow: Workers / job duration.
	// BoundJobsPerS is the fetch-cadence bound: Σ over queues of workers /
	// max(job duration, fetch cooldown), since a queue fetches at most its
	// free slots once per cooldown (the default queue's 3 workers at
	// 100 ms: 30 jobs/s however short the jobs). BoundRatio is JobsPerS /
	// BoundJobsPerS: how much of what the configuration allows the machine
	// delivered.
	SlotBoundJobsPerS float64 `json:"slot_bound_jobs_per_s"`
	BoundJobsPerS     float64 `json:"bound_jobs_per_s"`
	BoundRatio        float64 `json:"bound_ratio"`
	// Idle* and Busy* are per process, idle and during the throughput
	// window; JobsPerFetch is JobsPerS over every process's busy fetches.
	IdleFetchesPerS    float64 `json:"idle_fetches_per_s"`
	IdleStatementsPerS float64 `json:"idle_statements_per_s"`
	BusyFetchesPerS    float64 `json:"busy_fetches_per_s"`
	BusyStatementsPerS float64 `json:"busy_statements_per_s"`
	JobsPerFetch       float64 `json:"jobs_per_fetch"`
	// IdleStatementKinds and BusyStatementKinds are the statements per
	// second per process by kind: River's by their sqlc name
	// (JobGetAvailable, JobSetStateIfRunningMany, …), others by their first
	// line (fair share's pass "WITH RECURSIVE", its advisory lock, begin
	// and commit), those of at least 0.05 a second.
	IdleStatementKinds map[string]float64 `json:"idle_statement_kinds"`
	BusyStatementKinds map[string]float64 `json:"busy_statement_kinds"`
	// Connections is the most connections a process held at once during
	// the idle and throughput phases (the mean over processes: its
	// PostgreSQL backends, counted by its proxy), MaxConnections the most
	// of any process.
	Connections    float64 `json:"connections"`
	MaxConnections int     `json:"max_connections"`
	// Paid* are the paid stream's pickups beside the free backlog;
	// BacklogWorked the free jobs started meanwhile, BacklogLeft those
	// still queued when the last paid job had started (never 0).
	PaidP50Ms     float64 `json:"paid_p50_ms"`
	PaidP95Ms     float64 `json:"paid_p95_ms"`
	PaidP99Ms     float64 `json:"paid_p99_ms"`
	BacklogWorked float64 `json:"backlog_worked"`
	BacklogLeft   float64 `json:"backlog_left"`
	// Reruns is how many jobs of every run and phase started more than once,
	// Unfinished how many started but did not complete: 0 both.
	Reruns     int `json:"reruns"`
	Unfinished int `json:"unfinished"`
	// CPU used during the throughput window, in cores (CPU seconds per
	// second): the whole machine (everything on it, other users
	// included), the worker processes, their PostgreSQL backends, and the
	// bench (during the window, its proxies). 0: not measured (no
	// Linux /proc; the backends also when the server runs elsewhere).
	MachineCores float64 `json:"machine_cores"`
	WorkerCores  float64 `json:"worker_cores"`
	BackendCores float64 `json:"backend_cores"`
	BenchCores   float64 `json:"bench_cores"`
}

// ScaleoutJobMs is how long a job of the scaleout scenario works.
const ScaleoutJobMs = 20

var scaleoutArgs = loadtest.Args{SleepMS: ScaleoutJobMs}

// Scaleout runs the scaleout scenario.
func Scaleout(ctx context.Context, opts Options) (ScaleoutResult, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return ScaleoutResult{}, err
	}
	if opts.WorkerCommand == nil {
		return ScaleoutResult{}, fmt.Errorf("bench: the scaleout scenario needs Options.WorkerCommand")
	}
	e, err := newEnv(ctx, opts)
	if err != nil {
		return ScaleoutResult{}, err
	}
	defer e.close()

	sz := opts.sizes()
	cfg, err := e.workerConfig(opts.WorkerEnv...)
	if err != nil {
		return ScaleoutResult{}, err
	}
	res := ScaleoutResult{
		QueueWorkers: map[string]int{}, JobMs: ScaleoutJobMs, PaidJobs: int(sz.scaleStream / streamInterval),
		IdleSeconds: sz.scaleIdle.Seconds(), StreamSeconds: sz.scaleStream.Seconds(),
		WarmSeconds: sz.scaleWarm.Seconds(), WindowSeconds: sz.scaleWindow.Seconds(),
		CPUs: runtime.NumCPU(), Runs: opts.runs(), Quick: opts.Quick, Samples: map[string][]float64{},
	}
	queues, err := workerQueues(cfg, opts)
	if err != nil {
		return res, err
	}
	for name, qc := range queues {
		res.QueueWorkers[name] = qc.Workers
		res.WorkersPerProcess += qc.Workers
	}

	measured := map[int][]scaleMeasure{}
	for run := range res.Runs {
		for _, n := range sz.scaleProcs {
			m, err := e.scaleoutSize(ctx, cfg, n, fmt.Sprintf("scaleout run %d/%d, %d processes", run+1, res.Runs, n))
			if err != nil {
				return res, fmt.Errorf("scaleout, %d processes: %w", n, err)
			}
			measured[n] = append(measured[n], m)
			res.Samples[fmt.Sprintf("scaleout paid, %d processes", n)] = m.lat
		}
	}
	for _, n := range sz.scaleProcs {
		res.Sizes = append(res.Sizes, scaleoutRow(queues, n, measured[n]))
	}
	return res, nil
}

// scaleMeasure is what one size of one run measured.
type scaleMeasure struct {
	idle, busy         wireRates
	processJobs        []int // per process, in process order
	peakConns          []int
	queueJobs          map[string]int
	jobs               int
	window             float64 // seconds, the database's clock
	lat                []float64
	worked, left       int
	reruns, unfinished int
	cpu                cpuUse
}

// scaleoutRow is the row of size n, whose processes serve served:
// medians of ms over runs.
func scaleoutRow(served map[string]worker.Queue, n int, ms []scaleMeasure) ScaleoutSize {
	s := ScaleoutSize{Processes: n, QueueJobsPerS: map[string]float64{}}
	var jobsPerS, idleF, idleS, busyF, busyS, perFetch, conns, p50, p95, p99, worked, left []float64
	var machine, workers, backends, bench []float64
	queues, idleKinds, busyKinds := map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
	for _, m := range ms {
		rate := float64(m.jobs) / m.window
		jobsPerS = append(jobsPerS, rate)
		for q, k := range m.queueJobs {
			queues[q] = append(queues[q], float64(k)/m.window)
		}
		idleF, idleS = append(idleF, mean(m.idle.fetches)), append(idleS, mean(m.idle.statements))
		busyF, busyS = append(busyF, mean(m.busy.fetches)), append(busyS, mean(m.busy.statements))
		for kind, v := range m.idle.kinds {
			idleKinds[kind] = append(idleKinds[kind], v)
		}
		for kind, v := range m.busy.kinds {
			busyKinds[kind] = append(busyKinds[kind], v)
		}
		if f := mean(m.busy.fetches) * float64(n); f > 0 {
			perFetch = append(perFetch, rate/f)
		}
		var c float64
		for _, k := range m.peakConns {
			c += float64(k)
			s.MaxConnections = max(s.MaxConnections, k)
		}
		conns = append(conns, c/float64(len(m.peakConns)))
		lat := slices.Sorted(slices.Values(m.lat))
		p50, p95, p99 = append(p50, percentile(lat, 50)), append(p95, percentile(lat, 95)), append(p99, percentile(lat, 99))
		worked, left = append(worked, float64(m.worked)), append(left, float64(m.left))
		s.Reruns += m.reruns
		s.Unfinished += m.unfinished
		machine, workers = append(machine, m.cpu.machine), append(workers, m.cpu.workers)
		backends, bench = append(backends, m.cpu.backends), append(bench, m.cpu.bench)
	}
	last := ms[len(ms)-1]
	for _, k := range last.processJobs {
		s.ProcessJobsPerS = append(s.ProcessJobsPerS, round(float64(k)/last.window, 1))
	}
	for q, rates := range queues {
		s.QueueJobsPerS[q] = round(median(rates), 1)
	}
	for _, qc := range served {
		job := time.Duration(ScaleoutJobMs) * time.Millisecond
		s.Workers += n * qc.Workers
		s.SlotBoundJobsPerS += float64(n*qc.Workers) / job.Seconds()
		s.BoundJobsPerS += float64(n*qc.Workers) / max(job, qc.FetchCooldown).Seconds()
	}
	s.SlotBoundJobsPerS, s.BoundJobsPerS = round(s.SlotBoundJobsPerS, 1), round(s.BoundJobsPerS, 1)
	s.JobsPerS = round(median(jobsPerS), 1)
	s.BoundRatio = round(median(jobsPerS)/s.BoundJobsPerS, 3)
	s.IdleStatementKinds, s.BusyStatementKinds = kindRates(idleKinds, len(ms)), kindRates(busyKinds, len(ms))
	s.IdleFetchesPerS, s.IdleStatementsPerS = round(median(idleF), 2), round(median(idleS), 2)
	s.BusyFetchesPerS, s.BusyStatementsPerS = round(median(busyF), 1), round(median(busyS), 1)
	if len(perFetch) > 0 {
		s.JobsPerFetch = round(median(perFetch), 2)
	}
	s.Connections = round(median(conns), 1)
	s.PaidP50Ms, s.PaidP95Ms, s.PaidP99Ms = round(median(p50), 2), round(median(p95), 2), round(median(p99), 2)
	s.BacklogWorked, s.BacklogLeft = median(worked), median(left)
	s.MachineCores, s.WorkerCores = round(median(machine), 2), round(median(workers), 2)
	s.BackendCores, s.BenchCores = round(median(backends), 2), round(median(bench), 2)
	return s
}

// kindRates are the median rates over runs of each kind of statement
// (a run that sent none counts 0), those of at least 0.05 a second.
func kindRates(kinds map[string][]float64, runs int) map[string]float64 {
	out := map[string]float64{}
	for kind, rates := range kinds {
		rates = append(rates, make([]float64, runs-len(rates))...)
		if v := median(rates); v >= 0.05 {
			out[kind] = round(v, 2)
		}
	}
	return out
}

// mean of xs (0 for none).
func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var t float64
	for _, x := range xs {
		t += x
	}
	return t / float64(len(xs))
}

// scaleoutSize runs the three phases at n worker processes, each on an
// empty table: the paid phase with the processes connected directly to
// the server (a proxy's hops would add to every pickup), then the idle and
// throughput phases with them started again behind their proxies, which
// count their statements and connections.
func (e *env) scaleoutSize(ctx context.Context, cfg config.Worker, n int, stage string) (scaleMeasure, error) {
	var m scaleMeasure
	sz := e.opts.sizes()

	e.opts.progress().Stage(fmt.Sprintf("%s: paid stream beside a free backlog", stage), int(sz.scaleStream/streamInterval))
	err := e.withWorkers(ctx, n, false, func([]*workerProcess) error {
		return e.scaleoutPaid(ctx, cfg, n, &m)
	})
	if err != nil {
		return m, err
	}

	e.opts.progress().Stage(fmt.Sprintf("%s: idle for %s, then throughput for %s", stage, sz.scaleIdle, sz.scaleWindow), 0)
	err = e.withWorkers(ctx, n, true, func(procs []*workerProcess) error {
		if err := sleep(ctx, sz.scaleWarm); err != nil {
			return err
		}
		if m.idle, err = countWire(ctx, procs, sz.scaleIdle); err != nil {
			return err
		}
		if err := e.scaleoutThroughput(ctx, cfg, procs, &m); err != nil {
			return err
		}
		for _, p := range procs {
			m.peakConns = append(m.peakConns, int(p.proxy.peak.Load()))
		}
		return nil
	})
	return m, err
}

// withWorkers runs f with n worker processes started on an empty table
// (startWorkers), and stops them after it.
func (e *env) withWorkers(ctx context.Context, n int, proxied bool, f func([]*workerProcess) error) error {
	if err := e.reset(ctx); err != nil {
		return err
	}
	procs, stop, err := e.startWorkers(ctx, n, proxied)
	if err != nil {
		return err
	}
	stopped := false
	defer func() {
		if !stopped { // f failed or panicked: stop them anyway
			_ = stop()
		}
	}()
	if err := f(procs); err != nil {
		return err
	}
	stopped = true
	return stop()
}

// wireRates are what the processes' proxies counted per second over a
// phase: each process's fetches and statements, and the statements by kind
// (statementKind) per process, the mean over processes.
type wireRates struct {
	fetches, statements []float64
	kinds               map[string]float64
}

// countWire counts each process's statements per second over d.
func countWire(ctx context.Context, procs []*workerProcess, d time.Duration) (wireRates, error) {
	before := make([]wireCount, len(procs))
	for i, p := range procs {
		before[i] = p.proxy.count()
	}
	start := time.Now()
	if err := sleep(ctx, d); err != nil {
		return wireRates{}, err
	}
	seconds := time.Since(start).Seconds()
	r := wireRates{kinds: map[string]float64{}}
	for i, p := range procs {
		c := p.proxy.count()
		r.fetches = append(r.fetches, float64(c.fetches-before[i].fetches)/seconds)
		r.statements = append(r.statements, float64(c.statements-before[i].statements)/seconds)
		for kind, n := range c.kinds {
			if d := n - before[i].kinds[kind]; d > 0 {
				r.kinds[kind] += float64(d) / seconds / float64(len(procs))
			}
		}
	}
	return r, nil
}

// scaleoutPaid is the paid phase: a free backlog in the default queue of
// the service under test, more than n processes' default workers finish
// in the phase, and a paid stream beside it.
func (e *env) scaleoutPaid(ctx context.Context, cfg config.Worker, n int, m *scaleMeasure) error {
	sz := e.opts.sizes()
	client, err := e.producerClient(e.Pool)
	if err != nil {
		return err
	}
	// The default queue's fetch-cadence bound at n processes, over the
	// phase and then some, with half again to spare.
	defaultQueue := e.opts.Service.Queue(routing.Default)
	phase := sz.scaleWarm + sz.scaleStream + 10*time.Second
	queues, err := workerQueues(cfg, e.opts)
	if err != nil {
		return err
	}
	backlog := int(float64(n)*queueBound(queues[defaultQueue])*phase.Seconds()*1.5) + 100
	free, err := e.insertFree(ctx, client, "", backlog, scaleoutArgs)
	if err != nil {
		return err
	}
	if err := seed.Analyze(ctx, e.Pool); err != nil {
		return err
	}
	if err := sleep(ctx, sz.scaleWarm); err != nil { // the free workers busy
		return err
	}
	ids, err := e.insertStream(ctx, streamInserter{client: client}, 1, scaleoutArgs, sz.scaleStream)
	if err != nil {
		return err
	}
	if err := waitStarted(ctx, e.Pool, ids, 60*time.Second); err != nil {
		return err
	}
	if err := e.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state NOT IN ('`+riverschema.StateAvailable+`', '`+riverschema.StatePending+`')),
			count(*) FILTER (WHERE state IN ('`+riverschema.StateAvailable+`', '`+riverschema.StatePending+`'))
		FROM `+riverschema.JobTable+` WHERE id = ANY($1)`, free).Scan(&m.worked, &m.left); err != nil {
		return fmt.Errorf("count backlog: %w", err)
	}
	if m.left == 0 {
		return fmt.Errorf("the free backlog (%d jobs) ran out before the paid stream ended: queue more", backlog)
	}
	if m.lat, err = pickupLatencies(ctx, e.Pool, ids); err != nil {
		return err
	}
	return e.endPhase(ctx, m)
}

// scaleoutThroughput is the throughput phase: every queue of the service
// under test seeded deeper than procs can work in the phase, then the jobs
// started in the window by process and queue, the fetches and statements
// of each process, and the CPU used.
func (e *env) scaleoutThroughput(ctx context.Context, cfg config.Worker, procs []*workerProcess, m *scaleMeasure) error {
	sz := e.opts.sizes()
	n := len(procs)
	queues, err := workerQueues(cfg, e.opts)
	if err != nil {
		return err
	}
	phase := 2*(sz.scaleWarm+sz.scaleWindow) + 2*time.Second
	for name, qc := range queues {
		jobs := int(float64(n)*queueBound(qc)*phase.Seconds()) + 50
		if err := seed.AvailableArgs(ctx, e.Pool, loadtest.Kind, name, fmt.Sprintf(`{"sleep_ms": %d}`, ScaleoutJobMs), 0, jobs); err != nil {
			return err
		}
	}
	if err := seed.Analyze(ctx, e.Pool); err != nil {
		return err
	}
	if err := sleep(ctx, sz.scaleWarm); err != nil {
		return err
	}

	appNames, workerPids := make([]string, n), make([]int, n)
	for i, p := range procs {
		appNames[i], workerPids[i] = p.appName, p.cmd.Process.Pid
	}
	var backendPids []int
	rows, err := e.Pool.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = ANY($1)`, appNames)
	if err == nil {
		backendPids, err = pgx.CollectRows(rows, pgx.RowTo[int])
	}
	if err != nil {
		return fmt.Errorf("list backends: %w", err)
	}
	cpuBefore := sampleCPU(workerPids, backendPids)
	cpuStart := time.Now()
	var t0, t1 time.Time
	if err := e.Pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&t0); err != nil {
		return fmt.Errorf("read clock: %w", err)
	}
	if m.busy, err = countWire(ctx, procs, sz.scaleWindow); err != nil {
		return err
	}
	if err := e.Pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&t1); err != nil {
		return fmt.Errorf("read clock: %w", err)
	}
	m.cpu = cpuBetween(cpuBefore, sampleCPU(workerPids, backendPids), time.Since(cpuStart).Seconds())
	m.window = t1.Sub(t0).Seconds()

	rows, err = e.Pool.Query(ctx, `SELECT queue FROM `+riverschema.JobTable+` WHERE state IN ('`+riverschema.StateAvailable+`', '`+riverschema.StatePending+`') GROUP BY queue`)
	if err != nil {
		return fmt.Errorf("count queued jobs: %w", err)
	}
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("count queued jobs: %w", err)
	}
	for _, name := range slices.Sorted(maps.Keys(queues)) {
		if !slices.Contains(left, name) {
			return fmt.Errorf("queue %s ran dry before the window ended: queue more", name)
		}
	}
	if err := e.drainPhase(ctx); err != nil {
		return err
	}

	rows, err = e.Pool.Query(ctx, `SELECT attempted_by[cardinality(attempted_by)], queue, count(*)::int
		FROM `+riverschema.JobTable+` WHERE attempted_at >= $1 AND attempted_at < $2 GROUP BY 1, 2`, t0, t1)
	if err != nil {
		return fmt.Errorf("count started jobs: %w", err)
	}
	type started struct {
		Client, Queue string
		N             int
	}
	counts, err := pgx.CollectRows(rows, pgx.RowToStructByPos[started])
	if err != nil {
		return fmt.Errorf("count started jobs: %w", err)
	}
	byClient := map[string]int{}
	for i, p := range procs {
		byClient[p.clientID] = i
	}
	m.processJobs, m.queueJobs = make([]int, n), map[string]int{}
	for _, c := range counts {
		i, ok := byClient[c.Client]
		if !ok {
			return fmt.Errorf("%d jobs started by River client %q, none of the worker processes", c.N, c.Client)
		}
		m.processJobs[i] += c.N
		m.queueJobs[c.Queue] += c.N
		m.jobs += c.N
	}
	return e.endPhase(ctx, m)
}

// queueBound is the fetch-cadence bound of a queue of one process at
// ScaleoutJobMs jobs: its workers / max(job duration, cooldown).
func queueBound(qc worker.Queue) float64 {
	return float64(qc.Workers) / max(time.Duration(ScaleoutJobMs)*time.Millisecond, qc.FetchCooldown).Seconds()
}

// drainPhase ends a phase: the jobs still queued (available, or held by
// fair share) are deleted and the running ones finish. It deletes only
// rows no one has locked (SKIP LOCKED), as often as needed: a delete that
// waited on the workers' fetches and fair share's passes could deadlock
// with them.
func (e *env) drainPhase(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		var queued, running int
		if _, err := e.Pool.Exec(ctx, `DELETE FROM `+riverschema.JobTable+` WHERE id IN (
				SELECT id FROM `+riverschema.JobTable+` WHERE state IN ('`+riverschema.StateAvailable+`', '`+riverschema.StatePending+`') FOR UPDATE SKIP LOCKED)`); err != nil {
			return fmt.Errorf("delete queued jobs: %w", err)
		}
		if err := e.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state IN ('`+riverschema.StateAvailable+`', '`+riverschema.StatePending+`')),
				count(*) FILTER (WHERE state = '`+riverschema.StateRunning+`')
			FROM `+riverschema.JobTable).Scan(&queued, &running); err != nil {
			return fmt.Errorf("count jobs: %w", err)
		}
		if queued == 0 && running == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d jobs still queued and %d running 30s after the phase", queued, running)
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

// endPhase drains the phase (drainPhase; a second time changes nothing),
// counts the
// jobs that started more than once or did not complete into m, and
// empties river_job for the next phase.
func (e *env) endPhase(ctx context.Context, m *scaleMeasure) error {
	if err := e.drainPhase(ctx); err != nil {
		return err
	}
	var reruns, unfinished int
	if err := e.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE attempt > 1 OR cardinality(attempted_by) > 1),
			count(*) FILTER (WHERE state <> '`+riverschema.StateCompleted+`')
		FROM `+riverschema.JobTable).Scan(&reruns, &unfinished); err != nil {
		return fmt.Errorf("check jobs: %w", err)
	}
	m.reruns += reruns
	m.unfinished += unfinished
	if _, err := e.Pool.Exec(ctx, `TRUNCATE `+riverschema.JobTable); err != nil {
		return fmt.Errorf("empty river_job: %w", err)
	}
	return nil
}
