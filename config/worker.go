package config

import (
	"log/slog"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/tierq/tierq/routing"
	"github.com/tierq/tierq/service"
	"github.com/tierq/tierq/worker"
)

// MaxQueueWorkers is River's own limit on one queue's workers in one process.
const MaxQueueWorkers = service.MaxQueueWorkers

// Worker is the configuration of a worker deployment: one process serving
// the three queues of one service of the application's registry
// (service.Registry). LoadWorker loads it; the registry decides which
// values WORKER_SERVICE accepts and which worker-count variables exist.
type Worker struct {
	Database
	Logging
	Jobs
	Observability

	// Service is the name of the service this deployment works
	// (WORKER_SERVICE), one of the registry's. Required; a deployment
	// serves exactly one service, and registers and fetches only that
	// service's kinds.
	Service string `env:"WORKER_SERVICE,required"`

	// Workers are the service's worker counts per queue, per process
	// (River's MaxWorkers), each from a variable named after the service:
	// <NAME>_QUEUE_PRIORITY_WORKERS, <NAME>_QUEUE_DEFAULT_WORKERS and
	// <NAME>_QUEUE_SCHEDULED_WORKERS, where <NAME>_ is the service's
	// EnvPrefix (service "mailer": MAILER_QUEUE_PRIORITY_WORKERS). 0 means
	// this deployment does not serve that queue; at least one of the
	// service's queues must be served. Every registered service's variables
	// are checked, not only this one's, so that a bad value in an
	// environment shared by several deployments stops each of them.
	//
	// Default: the service's own (service.Config.Workers).
	Workers service.ClassWorkers

	// Lend lends the service's idle priority workers to its free jobs
	// (<NAME>_LEND_IDLE_PRIORITY, default false: ADR-16's behaviour, paid
	// workers idle while free work waits). LendFloor
	// (<NAME>_LEND_FLOOR, default 1) is how many priority workers, across
	// every worker process of the service, are never lent, so that paid
	// work arriving finds them free (package fairshare, Lend). Like the
	// worker counts, every registered service's variables are checked.
	Lend      bool
	LendFloor int

	// Fetch tuning per queue class, the same for every service. The
	// cooldown is the shortest time between two fetches of a queue (it
	// bounds throughput: at most MaxWorkers jobs per cooldown); the poll
	// interval is how often an idle queue looks for work when no
	// LISTEN/NOTIFY wake-up came. Priority queues want low pickup latency;
	// scheduled queues can wait. The priority defaults come from tierctl
	// bench isolation (docs/benchmarks.md): at 1ms (River's smallest) a
	// wake-up that lands just after another fetch waits at most 1ms, not
	// the cooldown, so paid pickup stays near this machine's floor even
	// when inserts come faster than one per cooldown; the price is paid only
	// when the queue is busy (one fetch per about 3 jobs, against 5 at
	// 10ms), never when idle. A 250ms poll caps the wait of a job whose
	// insert sent no wake-up, for about 3 more idle queries per second per
	// process.
	PriorityFetchCooldown      time.Duration `env:"QUEUE_PRIORITY_FETCH_COOLDOWN" envDefault:"1ms"`
	PriorityFetchPollInterval  time.Duration `env:"QUEUE_PRIORITY_FETCH_POLL_INTERVAL" envDefault:"250ms"`
	DefaultFetchCooldown       time.Duration `env:"QUEUE_DEFAULT_FETCH_COOLDOWN" envDefault:"100ms"`
	DefaultFetchPollInterval   time.Duration `env:"QUEUE_DEFAULT_FETCH_POLL_INTERVAL" envDefault:"1s"`
	ScheduledFetchCooldown     time.Duration `env:"QUEUE_SCHEDULED_FETCH_COOLDOWN" envDefault:"250ms"`
	ScheduledFetchPollInterval time.Duration `env:"QUEUE_SCHEDULED_FETCH_POLL_INTERVAL" envDefault:"2s"`

	// Fair share among tenants inside a queue, per class (package
	// fairshare, docs/fairness.md): a tenant's available jobs beyond its
	// share of the queue's workers wait in River's pending state and are
	// admitted as its places in line free, so one tenant's flood does not
	// queue every other tenant of the same priority behind it. On for the
	// priority and default queues; the scheduled queue's background work
	// keeps plain FIFO. Turning it off releases what is held.
	PriorityFairShare  bool `env:"QUEUE_PRIORITY_FAIR_SHARE" envDefault:"true"`
	DefaultFairShare   bool `env:"QUEUE_DEFAULT_FAIR_SHARE" envDefault:"true"`
	ScheduledFairShare bool `env:"QUEUE_SCHEDULED_FAIR_SHARE" envDefault:"false"`

	// FairSharePassInterval is the shortest time between two fair-share
	// passes over one queue in one process while the queue is contended:
	// how fast a held job is admitted when a place frees. Passes run only
	// when the process's workers of the queue are all busy or jobs are
	// held, so an uncontended queue pays nothing. Default 2ms.
	FairSharePassInterval time.Duration `env:"FAIR_SHARE_PASS_INTERVAL" envDefault:"2ms"`

	// FairShareMode is how the queues with fair share on share their
	// workers: "turns" (each job's turn written into scheduled_at as it
	// becomes available, nothing held) or "windows" (held jobs and passes;
	// docs/fairness.md). Every worker process of a queue must use the
	// same. Default turns.
	FairShareMode string `env:"QUEUE_FAIR_SHARE_MODE" envDefault:"turns"`

	// LoadTestWorkload registers the load-test workload kind (`loadtest`, a
	// job that sleeps for the time its args say) on this worker, for tests
	// and load tests only. Default false.
	LoadTestWorkload bool `env:"LOAD_TEST_WORKLOAD" envDefault:"false"`

	// baseQueue is the service's base queue, from the registry it was
	// loaded with.
	baseQueue string
}

// LoadWorker parses environ (KEY=VALUE strings, as from os.Environ) into
// the configuration of a worker deployment of one of services, and
// validates it, as Load does. WORKER_SERVICE must name one of services;
// each service's worker counts come from the variables named after it
// (Worker.Workers).
//
// LoadWorker reads only the services' names, base queues and default worker
// counts, never their workers: a registry built before the database pool
// exists (its workers without one) serves, as long as it has the same
// services as the one the deployment runs (worker.Deployment.RiverConfig
// and worker.Run check).
func LoadWorker(environ []string, services *service.Registry) (Worker, error) {
	if services == nil {
		panic("config: LoadWorker needs the application's services")
	}
	return load(environ, services, (*Worker).validate)
}

// BaseQueue is the base queue of this deployment's service. The Worker
// must come from LoadWorker.
//
// Deprecated: the worker derives its queues itself: use the service's
// BaseQueue (service.Registry.Lookup) or worker.New(cfg).Queues() of the
// translated Config (Worker.Config).
func (w *Worker) BaseQueue() string { return w.baseQueue }

// Config is the worker.Config of this environment, for worker.New or
// worker.Run: a deployment of registry's services (the registry w was
// loaded with, or one of the same services) logging to logger. Every value
// comes from w, translated to worker.Config's conventions where they differ
// (LEND_FLOOR=0 is worker.NoLendFloor, SOFT_STOP_TIMEOUT=0 a negative
// SoftStopTimeout: wait for running jobs however long); JOB_TIMEOUT set in
// the environment is WarnJobTimeout. Set NewServices (services built on the
// pool) and LogAttrs on the result as needed. The Worker must come from
// LoadWorker.
func (w *Worker) Config(registry *service.Registry, logger *slog.Logger) (worker.Config, error) {
	poolConfig, err := w.PoolConfig()
	if err != nil {
		return worker.Config{}, err
	}
	workers := w.Workers
	floor := w.LendFloor
	if floor == 0 {
		floor = worker.NoLendFloor
	}
	return worker.Config{
		Registry:              registry,
		Service:               w.Service,
		Workers:               &workers,
		Lend:                  w.Lend,
		LendFloor:             floor,
		Priority:              tuning(w.PriorityFetchCooldown, w.PriorityFetchPollInterval, w.PriorityFairShare),
		Default:               tuning(w.DefaultFetchCooldown, w.DefaultFetchPollInterval, w.DefaultFairShare),
		Scheduled:             tuning(w.ScheduledFetchCooldown, w.ScheduledFetchPollInterval, w.ScheduledFairShare),
		FairSharePassInterval: w.FairSharePassInterval,
		FairShareWindows:      w.FairShareMode == "windows",
		LoadTestWorkload:      w.LoadTestWorkload,
		JobTimeout:            w.JobTimeout,
		WarnJobTimeout:        w.JobTimeoutSet(),
		MaxAttempts:           w.MaxAttempts,
		SoftStopTimeout:       softStop(w.SoftStopTimeout),
		PoolConfig:            poolConfig,
		Schema:                w.Schema,
		MetricsAddr:           w.MetricsAddr,
		Logger:                logger,
	}, nil
}

// tuning is one queue class's worker.Tuning.
func tuning(cooldown, poll time.Duration, fair bool) worker.Tuning {
	t := worker.Tuning{FetchCooldown: cooldown, FetchPollInterval: poll, FairShare: worker.FairShareOff}
	if fair {
		t.FairShare = worker.FairShareOn
	}
	return t
}

// softStop is SOFT_STOP_TIMEOUT as the library's SoftStopTimeout: 0 (no
// timeout, River's meaning) is a negative value there, whose 0 is the
// default.
func softStop(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// QueueClass is the River tuning of one class of queue.
//
// Deprecated: use worker.Queue, from worker.New(cfg).Queues() of the
// translated Config (Worker.Config).
type QueueClass struct {
	Workers       int
	FetchCooldown time.Duration
	PollInterval  time.Duration
	// FairShare: the queue shares its workers among tenants (package
	// fairshare).
	FairShare bool
}

// Queues returns the configured queues of this deployment's service, keyed by
// queue name, with queues of 0 workers left out. The Worker must come from
// LoadWorker, which knows the service's queue names.
//
// Deprecated: the worker derives its queues itself, once: use
// worker.New(cfg).Queues() of the translated Config (Worker.Config), as
// tierctl bench does. Kept for config's tests, which check the translation
// against it.
func (w *Worker) Queues() map[string]QueueClass {
	queues := map[string]QueueClass{}
	for _, class := range routing.Classes() {
		n := w.Workers.Of(class)
		if n == 0 {
			continue
		}
		qc := QueueClass{Workers: n}
		switch class {
		case routing.Priority:
			qc.FetchCooldown, qc.PollInterval, qc.FairShare = w.PriorityFetchCooldown, w.PriorityFetchPollInterval, w.PriorityFairShare
		case routing.Default:
			qc.FetchCooldown, qc.PollInterval, qc.FairShare = w.DefaultFetchCooldown, w.DefaultFetchPollInterval, w.DefaultFairShare
		case routing.Scheduled:
			qc.FetchCooldown, qc.PollInterval, qc.FairShare = w.ScheduledFetchCooldown, w.ScheduledFetchPollInterval, w.ScheduledFairShare
		}
		queues[routing.QueueName(w.baseQueue, class)] = qc
	}
	return queues
}

// fill sets the fields no variable sets directly: the selected service's
// worker counts, lending and base queue, read by validateServices.
func (w *Worker) fill(c *checker) {
	if s := c.selected; s != nil {
		w.Workers, w.Lend, w.LendFloor, w.baseQueue = s.counts, s.lend, s.floor, s.svc.BaseQueue()
	}
	w.Jobs.fill(c)
}

func (w *Worker) validate(c *checker) {
	w.Database.validate(c)
	w.Logging.validate(c)
	w.Observability.validate(c)

	w.validateServices(c)

	c.fetch("PriorityFetchCooldown", w.PriorityFetchCooldown, "PriorityFetchPollInterval", w.PriorityFetchPollInterval)
	c.fetch("DefaultFetchCooldown", w.DefaultFetchCooldown, "DefaultFetchPollInterval", w.DefaultFetchPollInterval)
	c.fetch("ScheduledFetchCooldown", w.ScheduledFetchCooldown, "ScheduledFetchPollInterval", w.ScheduledFetchPollInterval)
	if w.FairSharePassInterval < 0 || w.FairSharePassInterval > time.Second {
		c.fail("FairSharePassInterval", "must be between 0 and 1s")
	}
	if w.FairShareMode != "windows" && w.FairShareMode != "turns" {
		c.fail("FairShareMode", "must be windows or turns")
	}

	w.Jobs.validate(c)
}

// validateServices checks WORKER_SERVICE against the registered services
// and every service's worker counts, and keeps what the selected service's
// variables set in the checker (fill copies it into the Worker). It reads
// the raw variables only, so it runs even when another variable did not
// parse.
func (w *Worker) validateServices(c *checker) {
	if c.services == nil {
		panic("config: a Worker is loaded with LoadWorker, which knows the application's services")
	}
	name, set := c.vars[c.fields["Service"].key]
	selected, known := c.services.Lookup(name)
	if set && !known {
		c.fail("Service", "unknown service (want %s)", orList(c.services.Names()))
	}
	for _, svc := range c.services.Services() {
		counts, ok := c.classWorkers(svc)
		lend, floor := c.lending(svc)
		if svc != selected {
			continue
		}
		c.selected = &selectedService{svc: svc, counts: counts, lend: lend, floor: floor}
		if ok && counts == (service.ClassWorkers{}) {
			c.fail("Service", "serves no queue: set at least one of %sQUEUE_{PRIORITY,DEFAULT,SCHEDULED}_WORKERS above 0", svc.EnvPrefix())
		}
	}
}

// classWorkers reads svc's worker count variables; a variable that is unset
// or empty keeps the service's default, as caarlos0/env does for the
// variables struct fields declare. ok is false when any is bad.
func (c *checker) classWorkers(svc *service.Service) (counts service.ClassWorkers, ok bool) {
	counts, ok = svc.Workers(), true
	for _, class := range routing.Classes() {
		key := svc.EnvPrefix() + "QUEUE_" + strings.ToUpper(class.String()) + "_WORKERS"
		raw := c.vars[key]
		if raw == "" {
			continue
		}
		n, err := strconv.ParseInt(raw, 10, 32) // as caarlos0/env parses an int
		switch {
		case err != nil:
			c.failVar(key, "%s", reasonOf(reflect.TypeFor[int](), err))
			ok = false
			continue
		case n < 0 || n > MaxQueueWorkers:
			c.failVar(key, "must be between 0 and %d", MaxQueueWorkers)
			ok = false
			continue
		}
		switch class {
		case routing.Priority:
			counts.Priority = int(n)
		case routing.Default:
			counts.Default = int(n)
		case routing.Scheduled:
			counts.Scheduled = int(n)
		}
	}
	return counts, ok
}

// Lending variables' names after a service's EnvPrefix, and the floor's
// default.
const (
	lendVar          = "LEND_IDLE_PRIORITY"
	lendFloorVar     = "LEND_FLOOR"
	defaultLendFloor = 1
)

// lending reads svc's lending variables; an unset or empty one keeps its
// default. A bad one is recorded and read as its default.
func (c *checker) lending(svc *service.Service) (lend bool, floor int) {
	floor = defaultLendFloor
	if raw := c.vars[svc.EnvPrefix()+lendVar]; raw != "" {
		v, err := strconv.ParseBool(raw) // as caarlos0/env parses a bool
		if err != nil {
			c.failVar(svc.EnvPrefix()+lendVar, "%s", reasonOf(reflect.TypeFor[bool](), err))
		}
		lend = v
	}
	if raw := c.vars[svc.EnvPrefix()+lendFloorVar]; raw != "" {
		n, err := strconv.ParseInt(raw, 10, 32)
		switch {
		case err != nil:
			c.failVar(svc.EnvPrefix()+lendFloorVar, "%s", reasonOf(reflect.TypeFor[int](), err))
		case n < 0 || n > MaxQueueWorkers:
			c.failVar(svc.EnvPrefix()+lendFloorVar, "must be between 0 and %d", MaxQueueWorkers)
		default:
			floor = int(n)
		}
	}
	return lend, floor
}

// orList joins names as "a", "a or b", "a, b or c".
func orList(names []string) string {
	if len(names) == 0 {
		return "none is registered"
	}
	if len(names) == 1 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}
