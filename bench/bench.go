// Package bench is tierctl bench: measurements of tierq against bare River
// and PostgreSQL that anyone can rerun (docs/benchmarks.md). Each scenario
// creates a schema of its own in the target database (internal/scratch),
// works only there, and drops it at the end; production tables of the target
// database are never touched.
//
// The bench drives one service, the service under test (Options.Service;
// tierctl bench passes the reference app's first service): its worker
// deployment, configured and run as the worker process runs it (fair
// share's admitter beside the River client, as worker.Run does), and its
// queues. Phases that model bare River or River's defaults run a bare River
// client. The workload is the load-test kind (package loadtest) with a sleep
// of 0, a job that does nothing, so that what is measured is the queue, not
// the work.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/fairshare"
	"github.com/tierq/tierq/internal/riverschema"
	"github.com/tierq/tierq/internal/scratch"
	"github.com/tierq/tierq/internal/seed"
	"github.com/tierq/tierq/metrics"
	"github.com/tierq/tierq/service"
	"github.com/tierq/tierq/worker"
)

// Options are what every scenario takes.
type Options struct {
	// DatabaseURL is the server and database to work in (in a schema of
	// the bench's own).
	DatabaseURL string
	// Quick runs each scenario small: about a minute each.
	Quick bool
	// Runs is how many times a scenario repeats its measurement; results
	// are medians. 0 means 3 (1 with Quick).
	Runs int
	// Progress shows what the bench is doing; nil shows nothing.
	Progress Progress
	// Logger receives River's own logs; nil discards them.
	Logger *slog.Logger
	// WorkerEnv are extra NAME=value settings for the worker configuration
	// of the service under test (as its worker process reads them), to
	// measure other worker counts or fetch tuning than the defaults
	// (CheckWorkerEnv says which).
	WorkerEnv []string

	// Service is the service under test: the scenarios run its worker
	// deployment (WORKER_SERVICE=<its name>, with its default worker
	// counts, as config.LoadWorker loads it, and the load-test workload
	// registered), and route their jobs into its queues with its
	// InsertOpts. tierctl bench passes the reference app's first service.
	//
	// Default: Registry's first service. One of Service and Registry is
	// required.
	Service *service.Service

	// Registry is every service of the application, Service among them:
	// the registry the worker deployment is configured from
	// (config.LoadWorker, worker.New), whose queues the sweeps and
	// dead-letter replays act on and the seeded history and discarded jobs
	// fill. The workers of its kinds are registered but never run (the
	// scenarios run the load-test workload only), so a registry built
	// without its workers' dependencies will do.
	//
	// Default: a registry of Service alone.
	Registry *service.Registry

	// ProducerArgs are the args of the i-th job (from 0) of run (from 0)
	// that the insert scenario inserts through producer.Insert: of a kind
	// of Service's, and different for every i of a run, since
	// producer.Insert's unique options make equal jobs one. tierctl bench
	// passes the reference app's analysis of target /bench/<run>/<i>.
	//
	// Required by the insert scenario; the others do not use it.
	ProducerArgs func(run, i int) river.JobArgs

	// WorkerCommand is how the scaleout scenario starts one worker process
	// of Registry's application: an unstarted command that runs a worker
	// deployment (worker.Run, as the application's worker main does)
	// configured by environ alone, whose variables it must pass on as they
	// are (DATABASE_URL, DATABASE_SCHEMA, WORKER_SERVICE,
	// LOAD_TEST_WORKLOAD=true, LOG_FORMAT=json, WorkerEnv, …; it may add its
	// own). The scenario sets its output, starts it, waits for its "worker
	// started" log line, and stops it with SIGTERM. tierctl bench passes
	// itself (its hidden bench-worker command, the reference app's worker).
	//
	// Required by the scaleout and limits scenarios; the others do not use
	// it. The limits scenario adds <NAME>_QUEUE_PRIORITY_WORKERS and
	// DATABASE_MAX_CONNS of its own.
	WorkerCommand func(environ []string) *exec.Cmd

	// AppCommand is how the traffic scenario starts one process of
	// Registry's application: an unstarted command that runs role
	// (RoleWorker, RoleScheduler or RoleAPI) configured by environ alone,
	// whose variables it must pass on as they are (DATABASE_URL,
	// DATABASE_SCHEMA, WORKER_SERVICE, LOAD_TEST_WORKLOAD=true,
	// LOG_FORMAT=json, API_ADDR, …; it may add its own, such as a
	// service's own configuration). The scenario sets its output, starts
	// it, waits for its start line ("worker started", "scheduler started",
	// "api listening"), and stops it with SIGTERM or kills it with SIGKILL.
	// tierctl bench passes itself (its hidden bench-process command: the
	// reference app's workers, the thumbnail example's worker, and the
	// scheduler and API of both).
	//
	// Required by the traffic scenario; the others do not use it.
	AppCommand func(role Role, environ []string) *exec.Cmd

	// TrafficShort runs the traffic scenario's short version, the chaos
	// suite's: 1,000 tenants with a smaller flood, and the faults phase
	// only (no throughput alternation).
	TrafficShort bool

	tiny         bool   // the tests' sizes: every code path, no meaningful numbers
	schemaPrefix string // the scenarios' schemas are <schemaPrefix>_<random>; "": tierq_bench
}

// withDefaults is o with Service and Registry set, or an error when o names
// no service or a Service that is not Registry's.
func (o Options) withDefaults() (Options, error) {
	switch {
	case o.Service == nil && o.Registry == nil:
		return o, errors.New("bench: no service to measure (Options.Service or Options.Registry)")
	case o.Registry == nil:
		registry, err := service.NewRegistry(o.Service)
		if err != nil {
			return o, fmt.Errorf("bench: %w", err)
		}
		o.Registry = registry
	case o.Service == nil:
		services := o.Registry.Services()
		if len(services) == 0 {
			return o, errors.New("bench: Options.Registry has no service")
		}
		o.Service = services[0]
	}
	if s, ok := o.Registry.Lookup(o.Service.Name()); !ok || !slices.Equal(s.Queues(), o.Service.Queues()) {
		return o, fmt.Errorf("bench: service %s is not one of Options.Registry's (%s)", o.Service.Name(), strings.Join(o.Registry.Names(), ", "))
	}
	return o, nil
}

// sizes are the dimensions of the scenarios.
type sizes struct {
	stream, idle time.Duration // isolation: stream length, idle count
	warmup       time.Duration // a started client's time to settle before measuring
	backlog      int
	drainJobs    int // throughput: jobs drained per variant
	adr          time.Duration
	sweepSmall   int // sweeps: rows in river_job, and repetitions
	sweepLarge   int
	sweepReps    int
	dlqRows      int
	// console: river_job rows, dead letters, tenants besides the big one,
	// requests per page
	consoleJobs, consoleDeadLetters, consoleTenants, consoleRequests int
	insertOne                                                        int // insert: jobs one by one, and batched
	insertBatched                                                    int
	fairFlood                                                        int           // fairness: tenant a's flood
	fairStream                                                       time.Duration // the small tenants' streams
	fairBacklog                                                      int           // jobs per backlogged tenant; tenant a alone has five times as many
	fairWarm                                                         time.Duration // the throughput window starts this long after the worker
	fairWindow                                                       time.Duration
	snooze                                                           time.Duration // the comparator's snooze, ± snoozeJitter
	snoozeJitter                                                     time.Duration
	lendBacklog                                                      int           // lending: free jobs queued per phase
	lendWarm                                                         time.Duration // the drain window starts this long after the worker
	lendWindow                                                       time.Duration
	lendStream                                                       time.Duration // the paid trickle's length
	realBacklog                                                      int           // realistic: free jobs queued per phase
	realStream                                                       time.Duration // the paid trickle's length
	scaleProcs                                                       []int         // scaleout: the numbers of worker processes
	scaleIdle                                                        time.Duration // the idle count
	scaleStream                                                      time.Duration // the paid stream's length
	scaleWarm                                                        time.Duration // a phase starts measuring this long after its jobs are queued
	scaleWindow                                                      time.Duration // the throughput window
}

func (o Options) sizes() sizes {
	switch {
	case o.tiny:
		// The comparator's snooze is short enough that River makes the job
		// available again at once (it is under River's scheduler interval):
		// a snoozed small job must not hold the tests for 30 s.
		return sizes{stream: time.Second, idle: time.Second, warmup: 200 * time.Millisecond, backlog: 200, drainJobs: 600, adr: time.Second,
			sweepSmall: 2_000, sweepLarge: 4_000, sweepReps: 2, dlqRows: 500, insertOne: 20, insertBatched: 2_000,
			fairFlood: 200, fairStream: time.Second, fairBacklog: 300, fairWarm: 500 * time.Millisecond, fairWindow: 1500 * time.Millisecond,
			snooze: time.Second, snoozeJitter: 500 * time.Millisecond,
			lendBacklog: 400, lendWarm: 300 * time.Millisecond, lendWindow: time.Second, lendStream: time.Second,
			realBacklog: 200, realStream: time.Second,
			scaleProcs: []int{1, 2}, scaleIdle: time.Second, scaleStream: time.Second, scaleWarm: 300 * time.Millisecond, scaleWindow: time.Second,
			consoleJobs: 2_000, consoleDeadLetters: 300, consoleTenants: 20, consoleRequests: 2}
	case o.Quick:
		return sizes{stream: 8 * time.Second, idle: 5 * time.Second, warmup: time.Second, backlog: 50_000, drainJobs: 50_000, adr: 5 * time.Second,
			sweepSmall: 10_000, sweepLarge: 1_000_000, sweepReps: 5, dlqRows: 20_000, insertOne: 2_000, insertBatched: 20_000,
			fairFlood: 2_500, fairStream: 10 * time.Second, fairBacklog: 500, fairWarm: time.Second, fairWindow: 5 * time.Second,
			snooze: 30 * time.Second, snoozeJitter: 10 * time.Second,
			lendBacklog: 3_000, lendWarm: time.Second, lendWindow: 10 * time.Second, lendStream: 10 * time.Second,
			realBacklog: 5_000, realStream: 15 * time.Second,
			scaleProcs: []int{1, 2, 4, 8}, scaleIdle: 2 * time.Second, scaleStream: 5 * time.Second, scaleWarm: time.Second, scaleWindow: 4 * time.Second,
			consoleJobs: 100_000, consoleDeadLetters: 10_000, consoleTenants: 1_000, consoleRequests: 5}
	}
	return sizes{stream: 30 * time.Second, idle: 10 * time.Second, warmup: time.Second, backlog: 50_000, drainJobs: 150_000, adr: 10 * time.Second,
		sweepSmall: 10_000, sweepLarge: 1_000_000, sweepReps: 10, dlqRows: 100_000, insertOne: 5_000, insertBatched: 100_000,
		fairFlood: 5_000, fairStream: 20 * time.Second, fairBacklog: 1_000, fairWarm: 2 * time.Second, fairWindow: 10 * time.Second,
		snooze: 30 * time.Second, snoozeJitter: 10 * time.Second,
		lendBacklog: 6_000, lendWarm: 2 * time.Second, lendWindow: 20 * time.Second, lendStream: 20 * time.Second,
		realBacklog: 5_000, realStream: 30 * time.Second,
		scaleProcs: []int{1, 2, 4, 8}, scaleIdle: 4 * time.Second, scaleStream: 15 * time.Second, scaleWarm: 2 * time.Second, scaleWindow: 8 * time.Second,
		consoleJobs: 1_000_000, consoleDeadLetters: 100_000, consoleTenants: 10_000, consoleRequests: 7}
}

// Progress is told about each stage of a scenario.
type Progress interface {
	// Stage starts a stage of total steps (0: unknown).
	Stage(name string, total int)
	// Add records n steps done in the current stage.
	Add(n int)
}

type noProgress struct{}

func (noProgress) Stage(string, int) {}
func (noProgress) Add(int)           {}

func (o Options) runs() int {
	switch {
	case o.Runs > 0:
		return o.Runs
	case o.Quick:
		return 1
	}
	return 3
}

func (o Options) progress() Progress {
	if o.Progress == nil {
		return noProgress{}
	}
	return o.Progress
}

func (o Options) logger() *slog.Logger {
	if o.Logger == nil {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return o.Logger
}

// env is one scenario's schema.
type env struct {
	*scratch.Schema
	opts Options
}

// newEnv creates the scenario's schema; the caller drops it with close.
func newEnv(ctx context.Context, opts Options) (*env, error) {
	prefix := opts.schemaPrefix
	if prefix == "" {
		prefix = "tierq_bench"
	}
	s, err := scratch.New(ctx, opts.DatabaseURL, prefix, 20)
	if err != nil {
		return nil, err
	}
	return &env{Schema: s, opts: opts}, nil
}

func (e *env) close() {
	if err := e.Drop(context.Background()); err != nil {
		e.opts.logger().Warn("bench: drop schema", slog.String("error", err.Error()))
	}
}

// pool opens another pool on the schema, as a separate process would have.
func (e *env) pool(ctx context.Context, maxConns int32) (*pgxpool.Pool, error) {
	return e.newPool(ctx, maxConns, true)
}

// unflushedPool is pool, its connections committing without waiting for
// the WAL flush (synchronous_commit off): the isolation scenario's
// diagnostic phases, never a deployment's setting.
func (e *env) unflushedPool(ctx context.Context, maxConns int32) (*pgxpool.Pool, error) {
	return e.newPool(ctx, maxConns, false)
}

func (e *env) newPool(ctx context.Context, maxConns int32, flush bool) (*pgxpool.Pool, error) {
	cfg := e.PoolConfig.Copy()
	cfg.MaxConns = maxConns
	if !flush {
		cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	return pool, nil
}

// discardedQueues are the queues, kinds and args of the discarded jobs the
// sweeps and dlq scenarios seed: every service's queues, each with the
// service's first kind and args that say the tier (pro) and the job's
// number. Nothing works them: only the drain and the replay read them.
func discardedQueues(registry *service.Registry) []seed.Queue {
	var queues []seed.Queue
	for _, svc := range registry.Services() {
		kind := svc.Kinds()[0].Name()
		for _, queue := range svc.Queues() {
			queues = append(queues, seed.Queue{Name: queue, Kind: kind, Args: `{"seq": {i}, "tier": "pro"}`})
		}
	}
	return queues
}

// reset empties the job tables between measurements, and the fair-share
// heartbeats (a stopped deployment deletes its own; a leftover would count
// as capacity in the next measurement's windows).
func (e *env) reset(ctx context.Context) error {
	_, err := e.Pool.Exec(ctx, `TRUNCATE `+riverschema.JobTable+`, dead_letter_jobs, job_escalations, fair_share_slots`)
	if err != nil {
		return fmt.Errorf("reset tables: %w", err)
	}
	return nil
}

// deployment is the River client of a worker deployment, not yet started,
// and what runs beside it: tierq's fair-share admitter, or nothing for a
// client that models bare River or River's defaults.
type deployment struct {
	client   *river.Client[pgx.Tx]
	admitter *fairshare.Admitter
}

// riverDeployment is a client of cfg on pool with nothing beside it.
func riverDeployment(pool *pgxpool.Pool, cfg *river.Config) (*deployment, error) {
	client, err := river.NewClient(riverpgxv5.New(pool), cfg)
	if err != nil {
		return nil, fmt.Errorf("new river client: %w", err)
	}
	return &deployment{client: client}, nil
}

// tierqDeployment is tierq's worker deployment of cfg (the service under
// test, from opts.Registry) on pool, built as worker.Run builds it: the
// River configuration of Deployment.RiverConfig with the job-metrics hook
// and the hook of the fair-share admitter of Deployment.NewAdmitter, which start
// runs beside the client. adjust, when given, changes the River
// configuration last (the fairness scenario's comparator adds its
// middleware).
func tierqDeployment(cfg config.Worker, pool *pgxpool.Pool, opts Options, adjust ...func(*river.Config)) (*deployment, error) {
	w, err := workerDeployment(cfg, opts)
	if err != nil {
		return nil, err
	}
	rc, err := w.RiverConfig(opts.Registry, pool)
	if err != nil {
		return nil, err
	}
	admitter, err := w.NewAdmitter(pool, nil)
	if err != nil {
		return nil, err
	}
	rc.Hooks = append(rc.Hooks, metrics.NewJobs(prometheus.NewRegistry()), admitter.Hook())
	for _, f := range adjust {
		f(rc)
	}
	d, err := riverDeployment(pool, rc)
	if err != nil {
		return nil, err
	}
	d.admitter = admitter
	return d, nil
}

// workerDeployment is the worker.Deployment of cfg, the service under test
// from opts.Registry, as worker.Run makes it.
func workerDeployment(cfg config.Worker, opts Options) (*worker.Deployment, error) {
	wc, err := cfg.Config(opts.Registry, opts.logger())
	if err != nil {
		return nil, err
	}
	return worker.New(wc)
}

// workerQueues are the queues the worker deployment of cfg serves, by name,
// with their worker counts and tuning, as worker.New derives them
// (Deployment.Queues): the one derivation, the worker's.
func workerQueues(cfg config.Worker, opts Options) (map[string]worker.Queue, error) {
	w, err := workerDeployment(cfg, opts)
	if err != nil {
		return nil, err
	}
	queues := map[string]worker.Queue{}
	for _, q := range w.Queues() {
		queues[q.Name] = q
	}
	return queues, nil
}

// start starts the deployment's client and, beside it, its admitter, as
// worker.Run does. stop stops the client (its running jobs finish), then
// the admitter, and waits for both: the admitter's last statements (its
// heartbeat rows deleted) are done before the caller closes the pool.
func (d *deployment) start(ctx context.Context) (stop func(), err error) {
	if err := d.client.Start(ctx); err != nil {
		return nil, fmt.Errorf("start river client: %w", err)
	}
	if d.admitter == nil {
		return func() { stopClient(d.client) }, nil
	}
	admitterCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.admitter.Run(admitterCtx)
	}()
	return func() {
		stopClient(d.client)
		cancel()
		<-done
	}, nil
}

func stopClient(client *river.Client[pgx.Tx]) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = client.Stop(ctx)
}

// percentile is the nearest-rank p-th percentile (0 < p <= 100) of sorted.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[max(rank, 1)-1]
}

// median of xs (NaN for none).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// round keeps d decimals, for readable JSON.
func round(x float64, d int) float64 {
	p := math.Pow(10, float64(d))
	return math.Round(x*p) / p
}

// sleep waits d or until ctx ends (Ctrl-C), whichever is first.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// CheckWorkerEnv accepts only the worker settings a bench may vary: worker
// counts and fetch tuning, QUEUE_* and <PREFIX>QUEUE_* for each service of
// registry (its EnvPrefix). The database, schema and service are the
// bench's own.
func CheckWorkerEnv(registry *service.Registry, env []string) error {
	prefixes := []string{"QUEUE_"}
	for _, svc := range registry.Services() {
		prefixes = append(prefixes, svc.EnvPrefix()+"QUEUE_")
	}
	for _, kv := range env {
		name, _, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("--set wants NAME=value, not %q", kv)
		}
		if !slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(name, p) }) {
			return fmt.Errorf("--set %s: only worker counts and fetch tuning (%s*) can be set", name, strings.Join(prefixes, "*, "))
		}
	}
	return nil
}
