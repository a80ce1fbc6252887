package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
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
	timeouts   map[string]time.Duration
	addWorkers []func(workers *river.Workers, pool *pgxpool.Pool) error
	attrs      []any
}

// KindTimeouts gives Run the timeout of each job kind the deployment
// registers besides the scheduler's own (Timeouts): the kinds and periodic
// kinds of its services, and the kinds AddWorkers adds. The reference
// app's are jobs.Timeouts. Run checks RESCUE_STUCK_JOBS_AFTER against them
// and the scheduler's own before it connects; a kind given here and in
// Timeouts has the scheduler's timeout. Several KindTimeouts add up.
//
// A kind left out is not checked: a kind whose worker has no Timeout
// method needs no entry (JOB_TIMEOUT applies to it, and
// RESCUE_STUCK_JOBS_AFTER is already checked against that), but a kind
// with a timeout of its own that is left out may be rescued, and run a
// second time, while a worker still runs it
// (config.Scheduler.RescueStuckJobsAfter).
func KindTimeouts(timeouts map[string]time.Duration) RunOption {
	return func(o *runOptions) { maps.Copy(o.timeouts, timeouts) }
}

// AddWorkers has Run call add with the deployment's River workers, after
// the services' and the scheduler's own are registered, and its pool: for
// kinds of no service whose stuck jobs the leader's rescuer must still
// retry rather than discard as unknown, such as the reference app's
// load-test kind. add should use river.AddWorkerSafely: a kind registered
// twice is an error. Several AddWorkers run in order.
func AddWorkers(add func(workers *river.Workers, pool *pgxpool.Pool) error) RunOption {
	return func(o *runOptions) { o.addWorkers = append(o.addWorkers, add) }
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
// client RiverConfig makes of them (plus the workers of AddWorkers), with
// tierq's job metrics and the scheduler's (the sweeps' counts, and
// tierq_leader, which WatchLeader refreshes every second), served at
// /metrics on cfg.MetricsAddr when set. "scheduler started" is logged
// with the client ID, cfg's rescue, time zone, aging and escalation
// settings, and LogAttrs'.
//
// Before it connects, Run returns an error matching config.ErrInvalid (a
// main exits 2 on it) when RESCUE_STUCK_JOBS_AFTER is not longer than the
// timeout of every kind it knows of: its own (Timeouts) and those of
// KindTimeouts (config.Scheduler.CheckKindTimeouts). When JOB_TIMEOUT was
// set it logs a warning listing those timeouts: JOB_TIMEOUT applies only to
// kinds without their own.
//
// On the first signal River stops fetching, resigns leadership (another
// replica takes over at once) and lets running jobs finish for up to
// cfg.SoftStopTimeout, then cancels them, and Run returns nil; a second
// signal kills the process at once.
func Run(ctx context.Context, cfg config.Scheduler, logger *slog.Logger, newServices func(pool *pgxpool.Pool) (*service.Registry, error), opts ...RunOption) error {
	o := runOptions{timeouts: map[string]time.Duration{}}
	for _, opt := range opts {
		opt(&o)
	}
	// Every kind the scheduler registers: its services' and their periodic
	// kinds, the extra workers', and its own.
	timeouts := o.timeouts
	maps.Copy(timeouts, Timeouts())
	if err := cfg.CheckKindTimeouts(timeouts); err != nil {
		return err
	}
	if cfg.JobTimeoutSet() {
		logger.WarnContext(ctx, "JOB_TIMEOUT no longer bounds tierq's jobs: each job kind has its own timeout (docs/operations.md, \"Job timeouts and rescue\"); it applies only to kinds registered without one",
			slog.Duration("job_timeout", cfg.JobTimeout), slog.String("kind_timeouts", fmt.Sprint(timeouts)))
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
			schedulerMetrics = metrics.NewScheduler(registry, services.Queues())
			riverConfig, err := RiverConfig(cfg, pool, services, logger, schedulerMetrics)
			if err != nil {
				return nil, err
			}
			for _, add := range o.addWorkers {
				if err := add(riverConfig.Workers, pool); err != nil {
					return nil, fmt.Errorf("scheduler: add workers: %w", err)
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
