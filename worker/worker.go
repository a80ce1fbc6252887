// Package worker runs a worker deployment: one process serving the three
// queues of one service of the application's registry (ADR-16), with the
// worker counts and fetch tuning of a Config, and only that service's
// job kinds registered and fetched (FetchOnlyKnownKinds), so that a worker of
// one service never receives another service's job.
//
// A Config is built in Go from the application's service.Registry and plain
// values (see the example), or from the environment by package config
// (config.Worker.Config), which this package does not import. New applies
// its defaults, validates it and computes once what follows from it: the
// queues served with their worker counts and tuning, the kinds fetched, the
// lending. Deployment.RiverConfig is the River client configuration of the
// deployment, for a main that runs its own River client; Run is the whole
// process (connect, start, stop on a signal, metrics):
//
//	return worker.Run(ctx, worker.Config{
//		Registry:   registry, // the team's service.Registry
//		Service:    "billing",
//		PoolConfig: poolConfig,
//		Logger:     logger,
//	})
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/tierq/tierq/fairshare"
	"github.com/tierq/tierq/internal/pauserepair"
	"github.com/tierq/tierq/internal/process"
	"github.com/tierq/tierq/loadtest"
	"github.com/tierq/tierq/metrics"
	"github.com/tierq/tierq/producer"
	"github.com/tierq/tierq/service"
	"github.com/tierq/tierq/waitstats"
)

// Deployment is a worker deployment made from a Config by New: the Config
// with its defaults and what follows from it, computed once.
type Deployment struct {
	cfg Config
	d   *derived
}

// New applies cfg's defaults (Config.WithDefaults), validates it
// (Config.Validate: every problem at once) and returns the deployment. It
// keeps copies of cfg.Workers and cfg.LogAttrs: the caller may change them
// afterwards.
func New(cfg Config) (*Deployment, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cloned(cfg.WithDefaults())
	return &Deployment{cfg: cfg, d: derive(&cfg)}, nil
}

// cloned is cfg with copies of what it points to that a caller may change:
// Workers and LogAttrs.
func cloned(cfg Config) Config {
	if cfg.Workers != nil {
		w := *cfg.Workers
		cfg.Workers = &w
	}
	cfg.LogAttrs = slices.Clone(cfg.LogAttrs)
	return cfg
}

// Config is the deployment's Config, with its defaults (a copy: changing
// its Workers or LogAttrs changes nothing of the deployment).
func (w *Deployment) Config() Config { return cloned(w.cfg) }

// Queues are the queues the deployment serves, in class order (priority,
// default, scheduled); a queue of 0 workers is not served.
func (w *Deployment) Queues() []Queue { return slices.Clone(w.d.queues) }

// QueueNames are the names of Queues, sorted.
func (w *Deployment) QueueNames() []string {
	names := make([]string, 0, len(w.d.queues))
	for _, q := range w.d.queues {
		names = append(names, q.Name)
	}
	slices.Sort(names)
	return names
}

// FetchedKinds are the job kinds the deployment fetches (RiverConfig sets
// FetchOnlyKnownKinds): the service's kinds in Config.Registry with their
// aliases, and the load-test workload's when Config.LoadTestWorkload.
// Sorted. RiverConfig checks that the registry it runs has the same.
func (w *Deployment) FetchedKinds() []string { return slices.Clone(w.d.kinds) }

// RiverConfig is the River client configuration of the deployment: the
// service's queues with their worker counts and fetch tuning, the workers
// of the service's kinds in services (and the load-test workload's when
// Config.LoadTestWorkload), on pool. Callers may add middleware or hooks
// before passing it to river.NewClient.
//
// services is the registry whose workers the client runs: Config.Registry,
// or one of the same services built on pool (Config.NewServices).
// RiverConfig returns an error when services has no service of
// Config.Service's name, or its queues or fetched kinds (FetchedKinds, which
// come from Config.Registry) are not the ones of Config.Registry's, and when
// two workers share a kind.
func (w *Deployment) RiverConfig(services *service.Registry, pool *pgxpool.Pool) (*river.Config, error) {
	cfg := &w.cfg
	svc, ok := services.Lookup(cfg.Service)
	if !ok {
		return nil, fmt.Errorf("worker: service %q is not registered (registered: %s)", cfg.Service, strings.Join(services.Names(), ", "))
	}

	queues := map[string]river.QueueConfig{}
	for _, q := range w.d.queues {
		if !slices.Contains(svc.Queues(), q.Name) {
			return nil, fmt.Errorf("worker: queue %s is not one of service %s's (%s): the configuration was made with another registry",
				q.Name, svc.Name(), strings.Join(svc.Queues(), ", "))
		}
		queues[q.Name] = river.QueueConfig{
			MaxWorkers:        q.Workers,
			FetchCooldown:     q.FetchCooldown,
			FetchPollInterval: q.FetchPollInterval,
		}
	}

	if kinds := fetchedKinds(svc, cfg.LoadTestWorkload); !slices.Equal(kinds, w.d.kinds) {
		return nil, fmt.Errorf("worker: service %s fetches kinds %s in the registry given, %s in Config.Registry: the configuration was made with another registry",
			svc.Name(), strings.Join(kinds, ", "), strings.Join(w.d.kinds, ", "))
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
		Logger:                 cfg.Logger,
		MaxAttempts:            cfg.MaxAttempts,
		Queues:                 queues,
		Schema:                 cfg.Schema,
		// A service's workers may insert jobs of kinds another service
		// works (a chained next step).
		SkipUnknownJobCheck: true,
		// River waits for running jobs however long without one.
		SoftStopTimeout: max(cfg.SoftStopTimeout, 0),
		Workers:         workers,
	}, nil
}

// NewAdmitter is the fair-share admitter of the deployment (package
// fairshare), on pool: every queue it serves, with its worker count, its
// class's fair share and the kinds it fetches (FetchedKinds, which travel
// with its heartbeat), and the lending of its idle priority workers to its
// free jobs when Config.Lend is set and it serves the priority queue. A main
// that runs its own River client from RiverConfig adds the admitter's Hook
// to the config's Hooks and runs it beside the client (go
// admitter.Run(ctx)); without it nothing is held back, and jobs another
// process held wait for a process that runs one. Run does both.
//
// observer, when not nil, is told about every pass (metrics.NewFairShare).
func (w *Deployment) NewAdmitter(pool *pgxpool.Pool, observer fairshare.Observer) (*fairshare.Admitter, error) {
	queues := map[string]fairshare.Queue{}
	for _, q := range w.d.queues {
		queues[q.Name] = fairshare.Queue{Workers: q.Workers, Fair: q.FairShare, Turns: q.FairShare && !w.cfg.FairShareWindows, Kinds: slices.Clone(w.d.kinds)}
	}
	var lend *fairshare.Lend
	if w.d.lend != nil {
		l := *w.d.lend
		lend = &l
	}
	admitter, err := fairshare.New(pool, &fairshare.Config{
		Lend:         lend,
		Queues:       queues,
		PassInterval: w.cfg.FairSharePassInterval,
		Logger:       w.cfg.Logger,
		Observer:     observer,
	})
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	return admitter, nil
}

// Run runs a worker deployment of cfg until ctx ends or the process gets
// SIGINT or SIGTERM: New, then Deployment.Run.
func Run(ctx context.Context, cfg Config) error {
	w, err := New(cfg)
	if err != nil {
		return err
	}
	return w.Run(ctx)
}

// Run runs the deployment until ctx ends or the process gets SIGINT or
// SIGTERM. It connects with Config.PoolConfig (required), builds the
// services on the pool with Config.NewServices (or takes Config.Registry;
// the services NewServices builds must be Registry's, by name, with the
// same queues and kinds for Config.Service: see RiverConfig),
// and runs the River client RiverConfig makes of them, with tierq's job
// metrics (served at /metrics on Config.MetricsAddr when set), the jobs'
// waits recorded for the operator console (waitstats.Recorder, flushed to
// job_wait_stats every 10 s and at the stop) and fair share
// (NewAdmitter). On the first signal River stops fetching and lets
// running jobs finish for up to Config.SoftStopTimeout, then cancels them
// (River retries them), and Run returns nil; a second signal kills the
// process at once.
//
// Run also repairs a queue pause its River client missed (package
// internal/pauserepair): River pauses producers by a notification, which
// is lost when sent while the client's LISTEN connection is down (a
// failover), and falls back on a poll every minute. When this process
// starts a job of a queue more than a second after the queue's paused_at,
// it sends River's pause message again and logs a warning ("pause
// repair: …", with the queue, paused_at and last_start), and sends it
// every 2 s while the queue stays paused, for two minutes: the pause holds
// within about 2 s of the notifier's return.
//
// With Config.WarnJobTimeout Run logs a warning listing the kinds'
// timeouts: JobTimeout applies to none of them.
//
// The pool's sessions end when idle in a transaction for longer than the
// longest job timeout (SessionPoolConfig), so that a worker cut off from
// the database mid-transaction does not hold row locks that stop River's
// rescuer.
func (w *Deployment) Run(ctx context.Context) error {
	cfg := &w.cfg
	if cfg.PoolConfig == nil {
		return errors.New("worker: Config.PoolConfig is required to run")
	}
	logger := cfg.Logger
	started := []any{slog.String("service", cfg.Service)}
	for _, a := range cfg.LogAttrs {
		started = append(started, a)
	}
	for _, q := range w.d.queues {
		started = append(started, slog.Int(q.Name, q.Workers))
	}
	registry := metrics.NewRegistry()
	var (
		admitter *fairshare.Admitter
		repairer *pauserepair.Repairer
		waits    *waitstats.Recorder
	)
	return process.Run(ctx, process.Spec{
		Name:            "worker",
		Logger:          logger,
		Pool:            w.SessionPoolConfig(cfg.PoolConfig),
		Schema:          cfg.Schema,
		SoftStopTimeout: max(cfg.SoftStopTimeout, 0), // as River's: 0 waits however long
		NewClient: func(pool *pgxpool.Pool) (*river.Client[pgx.Tx], error) {
			services := cfg.Registry
			if cfg.NewServices != nil {
				var err error
				if services, err = cfg.NewServices(pool); err != nil {
					return nil, fmt.Errorf("worker: services: %w", err)
				}
				if err := cfg.Registry.SameServices(services); err != nil {
					return nil, fmt.Errorf("worker: %w", err)
				}
			}
			if cfg.WarnJobTimeout {
				logger.WarnContext(ctx, "JobTimeout no longer bounds tierq's jobs: every kind made with service.WorkerKind has its own timeout (service.Timeout, else service.DefaultTimeout, 1m; docs/operations.md, \"Job timeouts and rescue\"); JobTimeout bounds only workers registered with River directly",
					slog.Duration("job_timeout", cfg.JobTimeout), slog.String("kind_timeouts", fmt.Sprint(services.Timeouts())))
			}
			if err := services.Record(ctx, pool, "worker"); err != nil { // for the stock tierctl
				return nil, fmt.Errorf("worker: %w", err)
			}
			riverConfig, err := w.RiverConfig(services, pool)
			if err != nil {
				return nil, err
			}
			if admitter, err = w.NewAdmitter(pool, metrics.NewFairShare(registry, w.QueueNames())); err != nil {
				return nil, err
			}
			if repairer, err = pauserepair.New(pool, pauserepair.Config{Queues: w.QueueNames(), Logger: logger}); err != nil {
				return nil, fmt.Errorf("worker: %w", err)
			}
			if waits, err = waitstats.NewRecorder(pool, &waitstats.Config{Logger: logger}); err != nil {
				return nil, fmt.Errorf("worker: %w", err)
			}
			return process.NewClient(pool, riverConfig, metrics.NewJobs(registry).WithWaits(waits), admitter.Hook(), repairer.Hook())
		},
		Background: func(ctx context.Context, _ *pgxpool.Pool, _ *river.Client[pgx.Tx]) {
			var wg sync.WaitGroup
			wg.Go(func() { _ = repairer.Run(ctx) }) // returns nil when ctx ends; it logs its failed rounds
			wg.Go(func() { waits.Run(ctx) })
			admitter.Run(ctx)
			wg.Wait()
		},
		MetricsAddr: cfg.MetricsAddr,
		Metrics:     registry,
		Attrs:       started,
	})
}
