package worker

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tierq/tierq/fairshare"
	"github.com/tierq/tierq/loadtest"
	"github.com/tierq/tierq/producer"
	"github.com/tierq/tierq/routing"
	"github.com/tierq/tierq/service"
)

// Defaults of Config, applied by WithDefaults.
const (
	// DefaultJobTimeout is Config.JobTimeout's default (River's).
	DefaultJobTimeout = time.Minute
	// DefaultSoftStopTimeout is Config.SoftStopTimeout's default: under
	// Kubernetes' default grace period of 30s.
	DefaultSoftStopTimeout = 25 * time.Second
	// DefaultLendFloor is Config.LendFloor's default.
	DefaultLendFloor = 1
	// NoLendFloor as Config.LendFloor lends every idle priority worker.
	NoLendFloor = -1
	// MaxQueueWorkers is River's own limit on one queue's workers in one
	// process.
	MaxQueueWorkers = service.MaxQueueWorkers
)

// FairShare turns the fair share among tenants of one class of queue on or
// off (package fairshare, docs/fairness.md). Its zero value,
// FairShareDefault, is the class's default.
type FairShare int

const (
	// FairShareDefault is the class's default: on for the priority and
	// default queues, off for the scheduled queue (background work keeps
	// plain FIFO).
	FairShareDefault FairShare = iota
	// FairShareOn shares the queue's workers among tenants.
	FairShareOn
	// FairShareOff leaves the queue plain FIFO, and releases what is held.
	FairShareOff
)

// Tuning is the River tuning of one class of queue, the same for every
// service. A zero field takes the class's default (DefaultTuning).
type Tuning struct {
	// FetchCooldown is the shortest time between two fetches of the queue
	// (River's QueueConfig.FetchCooldown): it bounds throughput, at most
	// the queue's workers per cooldown. Between 1ms and 1m. Default 1ms for
	// the priority queue (a wake-up landing just after a fetch waits at
	// most 1ms: paid pickup stays near the machine's floor, for one fetch
	// per about 3 jobs when busy, never when idle; tierctl bench isolation,
	// docs/benchmarks.md), 100ms for the default queue, 250ms for the
	// scheduled queue.
	FetchCooldown time.Duration

	// FetchPollInterval is how often an idle queue looks for work when no
	// LISTEN/NOTIFY wake-up came (River's QueueConfig.FetchPollInterval):
	// the longest wait of a job whose insert sent no wake-up. Between 1ms
	// and 1h, and not shorter than FetchCooldown. Default 250ms for the
	// priority queue, 1s for the default queue, 2s for the scheduled queue.
	FetchPollInterval time.Duration

	// FairShare: a tenant's available jobs beyond its share of the queue's
	// workers wait in River's pending state and are admitted as its places
	// in line free, so one tenant's flood does not queue every other tenant
	// of the same priority behind it. Default (FairShareDefault): on for
	// the priority and default queues, off for the scheduled queue.
	FairShare FairShare
}

// DefaultTuning is the tuning of class's queues that a zero Tuning field
// takes.
func DefaultTuning(class routing.Class) Tuning {
	switch class {
	case routing.Priority:
		return Tuning{FetchCooldown: time.Millisecond, FetchPollInterval: 250 * time.Millisecond, FairShare: FairShareOn}
	case routing.Default:
		return Tuning{FetchCooldown: 100 * time.Millisecond, FetchPollInterval: time.Second, FairShare: FairShareOn}
	default:
		return Tuning{FetchCooldown: 250 * time.Millisecond, FetchPollInterval: 2 * time.Second, FairShare: FairShareOff}
	}
}

func (t Tuning) withDefaults(class routing.Class) Tuning {
	def := DefaultTuning(class)
	if t.FetchCooldown == 0 {
		t.FetchCooldown = def.FetchCooldown
	}
	if t.FetchPollInterval == 0 {
		t.FetchPollInterval = def.FetchPollInterval
	}
	if t.FairShare == FairShareDefault {
		t.FairShare = def.FairShare
	}
	return t
}

// Config is the configuration of a worker deployment: one process serving
// the three queues of one service of the application's registry (ADR-16),
// registering and fetching only that service's kinds. Build it in Go, or
// from the environment with package config (config.Worker.Config). Every
// field but Registry and Service has a default, which WithDefaults applies;
// Validate checks it without changing it.
type Config struct {
	// Registry is the application's services (package service): Service
	// must name one of them, whose base queue, default worker counts and
	// kinds the deployment takes. Required. It may be a registry built
	// without a database pool (its workers without one) when NewServices
	// builds the one Run runs.
	Registry *service.Registry

	// NewServices builds, on the pool Run opens, the registry whose workers
	// Run runs: for workers that need the pool, or anything else made once
	// connected. It must have Registry's services, by name, and Service's
	// queues and fetched kinds must be Registry's, or Run fails naming
	// both. Default: nil, Run runs Registry's workers.
	NewServices func(pool *pgxpool.Pool) (*service.Registry, error)

	// Service is the name of the service this deployment works, one of
	// Registry's. Required: a deployment serves exactly one service, and
	// registers and fetches only its kinds.
	Service string

	// Workers are the service's worker counts per queue in this process
	// (River's MaxWorkers), each between 0 and MaxQueueWorkers. 0 means
	// this deployment does not serve that queue; at least one queue must be
	// served. Default (nil): the service's own (service.Config.Workers).
	Workers *service.ClassWorkers

	// Lend lends the service's idle priority workers to its free jobs
	// (package fairshare, Lend) when the deployment serves the priority
	// queue. Default false: paid workers idle while free work waits
	// (ADR-16).
	Lend bool

	// LendFloor is how many priority workers, across every worker process
	// of the service, are never lent, so that paid work arriving finds them
	// free; at most MaxQueueWorkers. Used only with Lend. Default (0):
	// DefaultLendFloor, 1; NoLendFloor (-1) keeps none back.
	LendFloor int

	// Priority, Default and Scheduled are the fetch tuning and fair share
	// of the service's priority, default and scheduled queues. Each zero
	// field takes the class's default (DefaultTuning).
	Priority, Default, Scheduled Tuning

	// FairSharePassInterval is the shortest time between two fair-share
	// passes over one queue in one process while the queue is contended:
	// how fast a held job is admitted when a place frees. Passes run only
	// when the process's workers of the queue are all busy or jobs are
	// held, so an uncontended queue pays nothing. At most 1s. Default (0):
	// fairshare.DefaultPassInterval, 2ms.
	FairSharePassInterval time.Duration

	// FairShareWindows shares the queues with fair share on by windows
	// (held jobs admitted by passes: fairshare.Queue.Fair) instead of by
	// turns (fairshare.Queue.Turns: each job's turn among its line's
	// tenants is written into its scheduled_at as it becomes available, and
	// nothing is held for its turn). Windows cost more throughput (docs/
	// benchmarks.md, "traffic") and bound a newcomer's wait by the
	// capacity plus one place per tenant; turns put a newcomer at the head.
	// Every process serving a queue must agree. Default false (turns).
	FairShareWindows bool

	// LoadTestWorkload registers the load-test workload kind (package
	// loadtest: a job that sleeps for the time its args say), for tests and
	// load tests only. Default false.
	LoadTestWorkload bool

	// JobTimeout is River's JobTimeout: the timeout of a job kind whose
	// worker has no Timeout method of its own. Every kind made with
	// service.WorkerKind has one (service.Timeout, else
	// service.DefaultTimeout), so it applies only to a worker registered in
	// River directly, and must then be the same in every deployment.
	// Default DefaultJobTimeout, 1m.
	JobTimeout time.Duration

	// WarnJobTimeout has Run log a warning at start, listing the kinds'
	// timeouts, that JobTimeout bounds none of them: for an operator who
	// set JobTimeout expecting it to (package config sets it when the
	// environment sets the job timeout). Default false.
	WarnJobTimeout bool

	// MaxAttempts is how many times a job this process inserts (work a job
	// chains) is tried before River discards it, unless its kind or insert
	// sets its own; between 1 and 1000. Default
	// producer.DefaultMaxAttempts, 10.
	MaxAttempts int

	// SoftStopTimeout is how long a stopping process lets running jobs
	// finish before it cancels them (River retries them). Keep it under the
	// orchestrator's grace period. Default DefaultSoftStopTimeout, 25s; a
	// negative value waits for running jobs however long they take.
	SoftStopTimeout time.Duration

	// PoolConfig is the database's pgxpool configuration (pool size,
	// search_path). Required by Run, which opens the pool with
	// idle_in_transaction_session_timeout added unless it is set
	// (Deployment.SessionPoolConfig); RiverConfig and NewAdmitter take a
	// pool instead.
	PoolConfig *pgxpool.Config

	// Schema is the PostgreSQL schema holding River's and tierq's tables,
	// checked by Run before it starts. Default "": the connection's
	// search_path.
	Schema string

	// MetricsAddr, when set, is where Run serves Prometheus metrics at
	// /metrics, with /healthz and /readyz (host:port). Default "": no
	// metrics server.
	MetricsAddr string

	// Logger is where the deployment logs. Default slog.Default().
	Logger *slog.Logger

	// LogAttrs are logged with "worker started", after the service's name
	// and before each served queue's worker count. Default none.
	LogAttrs []slog.Attr
}

// WithDefaults returns a copy of c with every unset field at its default.
// A Workers default needs Registry to know Service; left nil otherwise.
func (c Config) WithDefaults() Config {
	if c.Workers == nil && c.Registry != nil {
		if svc, ok := c.Registry.Lookup(c.Service); ok {
			w := svc.Workers()
			c.Workers = &w
		}
	}
	if c.LendFloor == 0 {
		c.LendFloor = DefaultLendFloor
	}
	c.Priority = c.Priority.withDefaults(routing.Priority)
	c.Default = c.Default.withDefaults(routing.Default)
	c.Scheduled = c.Scheduled.withDefaults(routing.Scheduled)
	if c.FairSharePassInterval == 0 {
		c.FairSharePassInterval = fairshare.DefaultPassInterval
	}
	if c.JobTimeout == 0 {
		c.JobTimeout = DefaultJobTimeout
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = producer.DefaultMaxAttempts
	}
	if c.SoftStopTimeout == 0 {
		c.SoftStopTimeout = DefaultSoftStopTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate checks c as WithDefaults leaves it (a zero field that has a
// default is not an error) and reports every problem at once
// (errors.Join). It changes nothing.
func (c Config) Validate() error {
	c = c.WithDefaults()
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf("worker: "+format, args...)) }

	var svc *service.Service
	switch {
	case c.Registry == nil:
		fail("Registry is required")
	case c.Service == "":
		fail("Service is required (one of %s)", strings.Join(c.Registry.Names(), ", "))
	default:
		var ok bool
		if svc, ok = c.Registry.Lookup(c.Service); !ok {
			fail("Service %q is not registered (registered: %s)", c.Service, strings.Join(c.Registry.Names(), ", "))
		}
	}
	if c.Workers != nil {
		served := false
		for _, class := range routing.Classes() {
			n := c.Workers.Of(class)
			if n < 0 || n > MaxQueueWorkers {
				fail("Workers.%s is %d: must be between 0 and %d", className(class), n, MaxQueueWorkers)
			}
			served = served || n > 0
		}
		if !served && svc != nil {
			fail("service %s serves no queue: at least one of Workers.Priority, Workers.Default and Workers.Scheduled must be above 0", svc.Name())
		}
	}
	if c.LendFloor < NoLendFloor || c.LendFloor > MaxQueueWorkers {
		fail("LendFloor is %d: must be NoLendFloor (-1) or between 0 and %d", c.LendFloor, MaxQueueWorkers)
	}
	for _, class := range routing.Classes() {
		t := c.tuning(class)
		if t.FetchCooldown < time.Millisecond || t.FetchCooldown > time.Minute {
			fail("%s.FetchCooldown is %s: must be between 1ms and 1m", className(class), t.FetchCooldown)
		}
		if t.FetchPollInterval < time.Millisecond || t.FetchPollInterval > time.Hour {
			fail("%s.FetchPollInterval is %s: must be between 1ms and 1h", className(class), t.FetchPollInterval)
		} else if t.FetchPollInterval < t.FetchCooldown {
			fail("%s.FetchPollInterval is %s: must not be shorter than the fetch cooldown (%s)", className(class), t.FetchPollInterval, t.FetchCooldown)
		}
		if t.FairShare < FairShareDefault || t.FairShare > FairShareOff {
			fail("%s.FairShare is %d: not a FairShare value", className(class), t.FairShare)
		}
	}
	if c.FairSharePassInterval < 0 || c.FairSharePassInterval > time.Second {
		fail("FairSharePassInterval is %s: must be between 0 and 1s", c.FairSharePassInterval)
	}
	if c.JobTimeout < 0 {
		fail("JobTimeout is %s: must not be negative", c.JobTimeout)
	}
	if c.MaxAttempts < 1 || c.MaxAttempts > 1000 {
		fail("MaxAttempts is %d: must be between 1 and 1000", c.MaxAttempts)
	}
	return errors.Join(errs...)
}

// className is the name of class's Tuning field.
func className(class routing.Class) string {
	s := class.String()
	return strings.ToUpper(s[:1]) + s[1:]
}

// tuning is c's Tuning of class.
func (c *Config) tuning(class routing.Class) Tuning {
	switch class {
	case routing.Priority:
		return c.Priority
	case routing.Default:
		return c.Default
	default:
		return c.Scheduled
	}
}

// Queue is one queue a worker deployment serves, as its Config makes it.
type Queue struct {
	// Name is the queue's name: the service's base queue and the class
	// (billing_priority).
	Name  string
	Class routing.Class
	// Workers is the queue's worker count in this process (above 0).
	Workers           int
	FetchCooldown     time.Duration
	FetchPollInterval time.Duration
	// FairShare: the queue shares its workers among tenants.
	FairShare bool
}

// derived is what follows from a Config with its defaults, computed once
// (New) and handed to RiverConfig, NewAdmitter and Run: the service, the
// queues served, the kinds fetched and the lending.
type derived struct {
	svc    *service.Service
	queues []Queue // in class order; queues of 0 workers left out
	kinds  []string
	lend   *fairshare.Lend
}

func derive(c *Config) *derived {
	svc, _ := c.Registry.Lookup(c.Service)
	d := &derived{svc: svc, kinds: fetchedKinds(svc, c.LoadTestWorkload)}
	for _, class := range routing.Classes() {
		n := c.Workers.Of(class)
		if n == 0 {
			continue
		}
		t := c.tuning(class)
		d.queues = append(d.queues, Queue{
			Name: svc.Queue(class), Class: class, Workers: n,
			FetchCooldown: t.FetchCooldown, FetchPollInterval: t.FetchPollInterval, FairShare: t.FairShare == FairShareOn,
		})
	}
	if c.Lend && c.Workers.Priority > 0 {
		d.lend = &fairshare.Lend{Queue: svc.Queue(routing.Priority), From: svc.Queue(routing.Default), Floor: max(c.LendFloor, 0)}
	}
	return d
}

// fetchedKinds are the kinds a deployment of svc fetches: svc's kinds with
// their aliases, and the load-test workload's when loadTest. Sorted.
func fetchedKinds(svc *service.Service, loadTest bool) []string {
	var kinds []string
	for _, k := range svc.Kinds() {
		kinds = append(kinds, k.FetchedNames()...)
	}
	if loadTest {
		kinds = append(kinds, loadtest.Kind)
	}
	slices.Sort(kinds)
	return slices.Compact(kinds)
}
