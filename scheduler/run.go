package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/internal/process"
	"github.com/tierq/tierq/metrics"
	"github.com/tierq/tierq/service"
)

// leaderWatchInterval is how often Run checks who leads (WatchLeader).
const leaderWatchInterval = time.Second

// RunOption configures Run.
type RunOption func(*runOptions)

type runOptions struct {
	addKinds []func(pool *pgxpool.Pool) []service.Kind
	attrs    []any
}

// AddKinds has Run register the kinds that kinds returns, given the
// deployment's pool, after the services' and the scheduler's own: kinds of
// no service whose stuck jobs the leader's rescuer must still retry rather
// than discard as unknown, such as the reference app's load-test kind
// (jobs.LoadTestKind). Each declares its timeout as every kind does
// (service.Timeout), and Run checks RESCUE_STUCK_JOBS_AFTER against it. A
// kind registered twice is an error. Several AddKinds add up.
func AddKinds(kinds func(pool *pgxpool.Pool) []service.Kind) RunOption {
	return func(o *runOptions) { o.addKinds = append(o.addKinds, kinds) }
}

// LogAttrs adds attrs to the "scheduler started" line: the settings of the
// application's own periodic jobs (the reference app logs its cron jobs'
// next runs). Several LogAttrs add up.
func LogAttrs(attrs ...slog.Attr) RunOption {
	return func(o *runOptions) {
		for _, a := range attrs {
			o.attrs = append(o.attrs, a)
		}
	}
}

// Run runs a scheduler deployment until ctx ends or the process gets
// SIGINT or SIGTERM. It connects to cfg's database, builds the
// application's services on the pool with newServices, and runs the River
// client RiverConfig makes of them (plus the workers of AddKinds), with
// tierq's job metrics and the scheduler's (the sweeps' counts, and
// tierq_leader, which WatchLeader refreshes every second), served at
// /metrics on cfg.MetricsAddr when set. "scheduler started" is logged
// with the client ID, cfg's rescue, time zone, aging and escalation
// settings, and LogAttrs'.
//
// Once it has built the services, before its River client starts, Run
// returns an error matching config.ErrInvalid (a main exits 2 on it) when
// RESCUE_STUCK_JOBS_AFTER is not longer than the timeout of every kind it
// registers (Timeouts: its own, the services' and AddKinds'; each kind
// declares its own, service.Timeout), naming the variable and each kind
// (config.Scheduler.CheckKindTimeouts). A main that wants the check before
// it connects makes it itself on a registry built without a pool, as the
// reference app's does. When JOB_TIMEOUT was set Run logs a warning listing
// the kinds' timeouts: JOB_TIMEOUT applies to none of them.
//
// On the first signal River stops fetching, resigns leadership (another
// replica takes over at once) and lets running jobs finish for up to
// cfg.SoftStopTimeout, then cancels them, and Run returns nil; a second
// signal kills the process at once.
func Run(ctx context.Context, cfg config.Scheduler, logger *slog.Logger, newServices func(pool *pgxpool.Pool) (*service.Registry, error), opts ...RunOption) error {
	var o runOptions
	for _, opt := range opts {
		opt(&o)
	}
	poolConfig, err := cfg.PoolConfig()
	if err != nil {
		return err
	}

	registry := metrics.NewRegistry()
	// Made with the client (its queues are the services'), before
	// Background runs.
	var schedulerMetrics *metrics.Scheduler
	return process.Run(ctx, process.Spec{
		Name:            "scheduler",
		Logger:          logger,
		Pool:            poolConfig,
		Schema:          cfg.Schema,
		SoftStopTimeout: cfg.SoftStopTimeout,
		NewClient: func(pool *pgxpool.Pool) (*river.Client[pgx.Tx], error) {
			services, err := newServices(pool)
			if err != nil {
				return nil, fmt.Errorf("scheduler: services: %w", err)
			}
			// Every kind the scheduler registers: its services' and their
			// periodic kinds, AddKinds', and its own.
			var extra []service.Kind
			for _, kinds := range o.addKinds {
				extra = append(extra, kinds(pool)...)
			}
			timeouts := Timeouts(services, extra...)
			if err := cfg.CheckKindTimeouts(timeouts); err != nil {
				return nil, err
			}
			if cfg.JobTimeoutSet() {
				logger.WarnContext(ctx, "JOB_TIMEOUT no longer bounds tierq's jobs: every kind made with service.WorkerKind has its own timeout (service.Timeout, else service.DefaultTimeout, 1m; docs/operations.md, \"Job timeouts and rescue\"); JOB_TIMEOUT bounds only workers registered with River directly",
					slog.Duration("job_timeout", cfg.JobTimeout), slog.String("kind_timeouts", fmt.Sprint(timeouts)))
			}
			if err := services.Record(ctx, pool, "scheduler"); err != nil { // for the stock tierctl
				return nil, fmt.Errorf("scheduler: %w", err)
			}
			schedulerMetrics = metrics.NewScheduler(registry, services.Queues())
			riverConfig, err := RiverConfig(cfg, pool, services, logger, schedulerMetrics)
			if err != nil {
				return nil, err
			}
			for _, k := range extra {
				if err := k.AddWorker(riverConfig.Workers); err != nil {
					return nil, fmt.Errorf("scheduler: add kinds: %w", err)
				}
			}
			return process.NewClient(pool, riverConfig, metrics.NewJobs(registry))
		},
		MetricsAddr: cfg.MetricsAddr,
		Metrics:     registry,
		Background: func(ctx context.Context, pool *pgxpool.Pool, client *river.Client[pgx.Tx]) {
			WatchLeader(ctx, pool, logger, leaderWatchInterval, client.ID(), schedulerMetrics)
		},
		Attrs: append([]any{
			slog.Duration("rescue_stuck_jobs_after", cfg.RescueStuckJobsAfter),
			slog.String("cron_tz", cfg.CronTZ),
			slog.Duration("aging_interval", cfg.AgingInterval),
			slog.Duration("aging_step", cfg.AgingStep),
			slog.Int("aging_max_priority", cfg.AgingMaxPriority),
			slog.Duration("escalate_scheduled_after", cfg.EscalateScheduledAfter),
			slog.Duration("escalate_default_after", cfg.EscalateDefaultAfter),
		}, o.attrs...),
	})
}
