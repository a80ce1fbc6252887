// Package worker runs a worker deployment: one process serving the three
// queues of one service of the application's registry (ADR-16), with the
// worker counts and fetch tuning of config.Worker, and only that service's
// job kinds registered and fetched (FetchOnlyKnownKinds), so that a worker of
// one service never receives another service's job.
//
// RiverConfig is the River client configuration of such a deployment, for a
// main that runs its own River client; Run is the whole process (connect,
// start, stop on a signal, metrics). A team's worker deployment of its own
// service is a few lines of its main:
//
//	described, err := newServices(nil) // names and worker counts; no pool yet
//	if err != nil {
//		return err
//	}
//	cfg, err := config.LoadWorker(environ, described) // exit 2 on config.ErrInvalid
//	if err != nil {
//		return err
//	}
//	return worker.Run(ctx, cfg, cfg.NewLogger(stdout), newServices)
//
// where newServices(pool) builds the team's service.Registry with its
// workers on pool.
package worker

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/fairshare"
	"github.com/tierq/tierq/internal/process"
	"github.com/tierq/tierq/loadtest"
	"github.com/tierq/tierq/metrics"
	"github.com/tierq/tierq/producer"
	"github.com/tierq/tierq/routing"
	"github.com/tierq/tierq/service"
)

// RiverConfig is the River client configuration of a worker deployment of
// cfg's service (cfg.Service) from services: the service's queues with
// cfg's worker counts and fetch tuning, the workers of the service's kinds
// (and the load-test workload's when cfg.LoadTestWorkload), on pool.
// Callers may add middleware or hooks before passing it to river.NewClient.
//
// services is the registry the deployment runs, its workers built on pool.
// cfg may have been loaded with another registry of the same services, one
// built before the pool existed (config.LoadWorker); RiverConfig returns an
// error when services has no service of cfg's name or its queues are not
// the ones cfg was loaded with, and when two workers share a kind.
func RiverConfig(cfg config.Worker, services *service.Registry, pool *pgxpool.Pool, logger *slog.Logger) (*river.Config, error) {
	svc, ok := services.Lookup(cfg.Service)
	if !ok {
		return nil, fmt.Errorf("worker: service %q is not registered (registered: %s)", cfg.Service, strings.Join(services.Names(), ", "))
	}

	queues := map[string]river.QueueConfig{}
	for name, qc := range cfg.Queues() {
		if !slices.Contains(svc.Queues(), name) {
			return nil, fmt.Errorf("worker: queue %s is not one of service %s's (%s): the configuration was loaded with another registry",
				name, svc.Name(), strings.Join(svc.Queues(), ", "))
		}
		queues[name] = river.QueueConfig{
			MaxWorkers:        qc.Workers,
			FetchCooldown:     qc.FetchCooldown,
			FetchPollInterval: qc.PollInterval,
		}
	}

	workers := river.NewWorkers()
	if err := svc.AddWorkers(workers); err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	if cfg.LoadTestWorkload {
		if err := river.AddWorkerSafely(workers, loadtest.NewWorker(pool)); err != nil {
			return nil, fmt.Errorf("worker: load-test workload: %w", err)
		}
	}

	return &river.Config{
		// Client-level: rate limit of the insert notifications this client
		// sends (a service's workers may chain jobs); each queue has its
		// own cooldown below.
		FetchCooldown:       producer.NotifyCooldown,
		FetchOnlyKnownKinds: true,
		JobTimeout:          cfg.JobTimeout,
		// Only the scheduler deployment leads: a leader's rescuer discards
		// stuck jobs of kinds it has not registered, and a worker knows one
		// service's kinds only (docs/scheduling.md).
		LeaderElectionDisabled: true,
		Logger:                 logger,
		MaxAttempts:            cfg.MaxAttempts,
		Queues:                 queues,
		Schema:                 cfg.Schema,
		// A service's workers may insert jobs of kinds another service
		// works (a chained next step).
		SkipUnknownJobCheck: true,
		SoftStopTimeout:     cfg.SoftStopTimeout,
		Workers:             workers,
	}, nil
}

// NewAdmitter is the fair-share admitter of a worker deployment of cfg's
// service from services (package fairshare): every queue the deployment
// serves, with its worker count, its class's fair-share setting and the
// kinds it fetches (FetchedKinds, which travel with its heartbeat), and
// the lending of its
// idle priority workers to its free jobs when cfg.Lend is set and this
// deployment serves the priority queue. A main that runs its own
// River client from RiverConfig adds the admitter's Hook to the config's
// Hooks and runs it beside the client (go admitter.Run(ctx)); without it
// nothing is held back, and jobs another process held wait for a process
// that runs one. Run does both.
//
// observer, when not nil, is told about every pass (metrics.NewFairShare).
func NewAdmitter(cfg config.Worker, services *service.Registry, pool *pgxpool.Pool, logger *slog.Logger, observer fairshare.Observer) (*fairshare.Admitter, error) {
	kinds, err := FetchedKinds(cfg, services)
	if err != nil {
		return nil, err
	}
	queues := map[string]fairshare.Queue{}
	for name, qc := range cfg.Queues() {
		queues[name] = fairshare.Queue{Workers: qc.Workers, Fair: qc.FairShare, Kinds: kinds}
	}
	var lend *fairshare.Lend
	priority, defaultQueue := routing.QueueName(cfg.BaseQueue(), routing.Priority), routing.QueueName(cfg.BaseQueue(), routing.Default)
	if _, served := queues[priority]; cfg.Lend && served {
		lend = &fairshare.Lend{Queue: priority, From: defaultQueue, Floor: cfg.LendFloor}
	}
	admitter, err := fairshare.New(pool, &fairshare.Config{
		Lend:         lend,
		Queues:       queues,
		PassInterval: cfg.FairSharePassInterval,
		Logger:       logger,
		Observer:     observer,
	})
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	return admitter, nil
}

// FetchedKinds are the job kinds a worker deployment of cfg's service from
// services fetches (RiverConfig sets FetchOnlyKnownKinds): the service's
// kinds with their aliases, and the load-test workload's when
// cfg.LoadTestWorkload. Sorted.
func FetchedKinds(cfg config.Worker, services *service.Registry) ([]string, error) {
	svc, ok := services.Lookup(cfg.Service)
	if !ok {
		return nil, fmt.Errorf("worker: service %q is not registered (registered: %s)", cfg.Service, strings.Join(services.Names(), ", "))
	}
	var kinds []string
	for _, k := range svc.Kinds() {
		kinds = append(kinds, k.FetchedNames()...)
	}
	if cfg.LoadTestWorkload {
		kinds = append(kinds, loadtest.Kind)
	}
	slices.Sort(kinds)
	return slices.Compact(kinds), nil
}

// Run runs a worker deployment of cfg's service until ctx ends or the
// process gets SIGINT or SIGTERM. It connects to cfg's database, builds the
// application's services on the pool with newServices, and runs the River
// client RiverConfig makes of them, with tierq's job metrics (served at
// /metrics on cfg.MetricsAddr when set) and fair share (NewAdmitter). On the first signal River stops
// fetching and lets running jobs finish for up to cfg.SoftStopTimeout, then
// cancels them (River retries them), and Run returns nil; a second signal
// kills the process at once.
//
// When JOB_TIMEOUT was set Run logs a warning listing the kinds' timeouts:
// JOB_TIMEOUT applies to none of them (config.Jobs.JobTimeout).
//
// attrs are logged with "worker started", after the service's name and
// each served queue's worker count.
func Run(ctx context.Context, cfg config.Worker, logger *slog.Logger, newServices func(pool *pgxpool.Pool) (*service.Registry, error), attrs ...slog.Attr) error {
	poolConfig, err := cfg.PoolConfig()
	if err != nil {
		return err
	}
	started := []any{slog.String("service", cfg.Service)}
	for _, a := range attrs {
		started = append(started, a)
	}
	for name, qc := range cfg.Queues() {
		started = append(started, slog.Int(name, qc.Workers))
	}
	registry := metrics.NewRegistry()
	var admitter *fairshare.Admitter
	return process.Run(ctx, process.Spec{
		Name:            "worker",
		Logger:          logger,
		Pool:            poolConfig,
		Schema:          cfg.Schema,
		SoftStopTimeout: cfg.SoftStopTimeout,
		NewClient: func(pool *pgxpool.Pool) (*river.Client[pgx.Tx], error) {
			services, err := newServices(pool)
			if err != nil {
				return nil, fmt.Errorf("worker: services: %w", err)
			}
			if cfg.JobTimeoutSet() {
				logger.WarnContext(ctx, "JOB_TIMEOUT no longer bounds tierq's jobs: every kind made with service.WorkerKind has its own timeout (service.Timeout, else service.DefaultTimeout, 1m; docs/operations.md, \"Job timeouts and rescue\"); JOB_TIMEOUT bounds only workers registered with River directly",
					slog.Duration("job_timeout", cfg.JobTimeout), slog.String("kind_timeouts", fmt.Sprint(services.Timeouts())))
			}
			if err := services.Record(ctx, pool, "worker"); err != nil { // for the stock tierctl
				return nil, fmt.Errorf("worker: %w", err)
			}
			riverConfig, err := RiverConfig(cfg, services, pool, logger)
			if err != nil {
				return nil, err
			}
			if admitter, err = NewAdmitter(cfg, services, pool, logger, metrics.NewFairShare(registry, slices.Sorted(maps.Keys(cfg.Queues())))); err != nil {
				return nil, err
			}
			return process.NewClient(pool, riverConfig, metrics.NewJobs(registry), admitter.Hook())
		},
		Background: func(ctx context.Context, _ *pgxpool.Pool, _ *river.Client[pgx.Tx]) {
			admitter.Run(ctx)
		},
		MetricsAddr: cfg.MetricsAddr,
		Metrics:     registry,
		Attrs:       started,
	})
}
