package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/tierq/tierq/internal/process"
	"github.com/tierq/tierq/limits"
	"github.com/tierq/tierq/metrics"
	"github.com/tierq/tierq/service"
)

// leaderWatchInterval is how often Run checks who leads (WatchLeader).
const leaderWatchInterval = time.Second

// RunOption configures Run. Its two options, AddKinds and LogAttrs, are
// deprecated: every setting of Run is a Config field (ExtraKinds,
// LogAttrs). Run keeps its opts so that callers passing them still build.
type RunOption func(*runOptions)

type runOptions struct {
	addKinds []func(pool *pgxpool.Pool) []service.Kind
	attrs    []any
}

// AddKinds adds the kinds that kinds returns to Config.ExtraKinds: Run
// registers them, given the deployment's pool, after the services' and the
// scheduler's own, and checks Config.RescueStuckJobsAfter against their
// timeouts. Run's validation (Config.Validate) calls kinds with a nil
// pool, as it calls ExtraKinds. Several AddKinds add up, after
// Config.ExtraKinds' kinds.
//
// Deprecated: set Config.ExtraKinds, which RiverConfig registers too.
func AddKinds(kinds func(pool *pgxpool.Pool) []service.Kind) RunOption {
	return func(o *runOptions) { o.addKinds = append(o.addKinds, kinds) }
}

// withAddKinds is cfg with the kinds of AddKinds added to its ExtraKinds.
func withAddKinds(cfg Config, addKinds []func(pool *pgxpool.Pool) []service.Kind) Config {
	if len(addKinds) == 0 {
		return cfg
	}
	extraKinds := cfg.ExtraKinds
	cfg.ExtraKinds = func(pool *pgxpool.Pool) []service.Kind {
		var kinds []service.Kind
		if extraKinds != nil {
			kinds = extraKinds(pool)
		}
		for _, add := range addKinds {
			kinds = append(kinds, add(pool)...)
		}
		return kinds
	}
	return cfg
}

// LogAttrs adds attrs to the "scheduler started" line, after
// Config.LogAttrs. Several LogAttrs add up.
//
// Deprecated: use Config.LogAttrs, which logs the same on the same line.
func LogAttrs(attrs ...slog.Attr) RunOption {
	return func(o *runOptions) {
		for _, a := range attrs {
			o.attrs = append(o.attrs, a)
		}
	}
}

// Run runs a scheduler deployment of cfg until ctx ends or the process
// gets SIGINT or SIGTERM. cfg takes its defaults (Config.WithDefaults) and
// is validated first (Config.Validate: every problem at once). Run
// connects with cfg.PoolConfig (required), builds the application's
// services on the pool with cfg.NewServices (or takes cfg.Registry; the
// services NewServices builds must be Registry's, by name), and
// runs the River client RiverConfig makes of them (with cfg.ExtraKinds),
// with tierq's job metrics and the scheduler's (the sweeps'
// counts, and tierq_leader, which WatchLeader refreshes every second),
// served at /metrics on cfg.MetricsAddr when set. Before its client
// starts it records its services (service.Registry.Record) and their
// tenant limits by tier, cfg.Limits (limits.Record). "scheduler started" is
// logged with the client ID, cfg's rescue, aging and escalation settings,
// the tenant limits it recorded (tenant_limits), and cfg.LogAttrs.
//
// Run returns CheckKindTimeouts' error, a *KindTimeoutsError (alone, or
// among Validate's problems: errors.As finds it), when
// cfg.RescueStuckJobsAfter is not longer than the timeout of every kind it
// registers (Timeouts: its own, the services' and ExtraKinds'; each kind
// declares its own, service.Timeout): before it connects, on cfg.Registry
// and ExtraKinds' kinds described without a pool (Validate), and again
// once it has built them on its pool, before its River client starts. With
// cfg.WarnJobTimeout Run logs a warning listing the kinds' timeouts:
// JobTimeout applies to none of them.
//
// On the first signal River stops fetching, resigns leadership (another
// replica takes over at once) and lets running jobs finish for up to
// cfg.SoftStopTimeout, then cancels them, and Run returns nil; a second
// signal kills the process at once.
func Run(ctx context.Context, cfg Config, opts ...RunOption) error {
	var o runOptions
	for _, opt := range opts {
		opt(&o)
	}
	cfg = withAddKinds(cfg, o.addKinds)
	if err := cfg.Validate(); err != nil {
		return err
	}
	cfg = cfg.WithDefaults()
	if cfg.PoolConfig == nil {
		return errors.New("scheduler: Config.PoolConfig is required to run")
	}
	logger := cfg.Logger

	registry := metrics.NewRegistry()
	// Made with the client (its queues are the services'), before
	// Background runs.
	var schedulerMetrics *metrics.Scheduler
	attrs := []any{
		slog.Duration("rescue_stuck_jobs_after", cfg.RescueStuckJobsAfter),
		slog.Duration("aging_interval", cfg.agingInterval()),
		slog.Duration("aging_step", cfg.AgingStep),
		slog.Int("aging_max_priority", cfg.AgingMaxPriority),
		slog.Duration("escalate_scheduled_after", cfg.escalateScheduledAfter()),
		slog.Duration("escalate_default_after", cfg.EscalateDefaultAfter),
		slog.String("tenant_limits", cfg.Limits.String()),
	}
	for _, a := range cfg.LogAttrs {
		attrs = append(attrs, a)
	}
	return process.Run(ctx, process.Spec{
		Name:            "scheduler",
		Logger:          logger,
		Pool:            cfg.PoolConfig,
		Schema:          cfg.Schema,
		SoftStopTimeout: max(cfg.SoftStopTimeout, 0), // as River's: 0 waits however long
		NewClient: func(pool *pgxpool.Pool) (*river.Client[pgx.Tx], error) {
			services := cfg.Registry
			if cfg.NewServices != nil {
				var err error
				if services, err = cfg.NewServices(pool); err != nil {
					return nil, fmt.Errorf("scheduler: services: %w", err)
				}
				if err := cfg.Registry.SameServices(services); err != nil {
					return nil, fmt.Errorf("scheduler: %w", err)
				}
			}
			// Every kind the scheduler registers: its services' and their
			// periodic kinds, ExtraKinds', and its own.
			var extra []service.Kind
			if cfg.ExtraKinds != nil {
				extra = cfg.ExtraKinds(pool)
			}
			timeouts := Timeouts(services, extra...)
			if err := CheckKindTimeouts(cfg.RescueStuckJobsAfter, timeouts); err != nil {
				return nil, err
			}
			if cfg.WarnJobTimeout {
				logger.WarnContext(ctx, "JobTimeout no longer bounds tierq's jobs: every kind made with service.WorkerKind has its own timeout (service.Timeout, else service.DefaultTimeout, 1m; docs/operations.md, \"Job timeouts and rescue\"); JobTimeout bounds only workers registered with River directly",
					slog.Duration("job_timeout", cfg.JobTimeout), slog.String("kind_timeouts", fmt.Sprint(timeouts)))
			}
			if err := services.Record(ctx, pool, "scheduler"); err != nil { // for the stock tierctl
				return nil, fmt.Errorf("scheduler: %w", err)
			}
			// The tiers' limits as this environment says, for every replica
			// of every process.
			if err := limits.Record(ctx, pool, cfg.Limits, services.Names(), "scheduler"); err != nil {
				return nil, fmt.Errorf("scheduler: %w", err)
			}
			schedulerMetrics = metrics.NewScheduler(registry, services.Queues())
			riverConfig, err := riverConfig(cfg, pool, services, schedulerMetrics, extra)
			if err != nil {
				return nil, err
			}
			return process.NewClient(pool, riverConfig, metrics.NewJobs(registry))
		},
		MetricsAddr: cfg.MetricsAddr,
		Metrics:     registry,
		Background: func(ctx context.Context, pool *pgxpool.Pool, client *river.Client[pgx.Tx]) {
			WatchLeader(ctx, pool, logger, leaderWatchInterval, client.ID(), schedulerMetrics)
		},
		Attrs: append(attrs, o.attrs...),
	})
}
