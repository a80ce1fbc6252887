// Command scheduler runs tierq's scheduler deployment for the reference
// app's services (jobs.Registry): the only River client allowed to lead. On
// the leader it runs River's maintenance (retries, scheduled-job promotion,
// rescue of stuck jobs of every kind, cleanup) and the periodic jobs: the
// aging and escalation sweeps, the dead-letter drain, and the analyzer's
// re-analysis and retention cron jobs. Run two replicas; one leads, the
// other takes over when it goes away. See docs/scheduling.md.
//
// Invalid configuration exits 2 before any database connection is made; so
// does a RESCUE_STUCK_JOBS_AFTER that is not longer than the timeout of
// every job kind (jobs.Timeouts and scheduler.Timeouts), since the rescuer
// would then retry jobs a worker may still be running.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/internal/process"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/metrics"
	"github.com/tierq/tierq/scheduler"
)

func main() {
	process.Exit("scheduler", run(context.Background(), os.Args, os.Environ(), os.Stdout))
}

func run(ctx context.Context, _ []string, environ []string, stdout io.Writer) error {
	cfg, err := config.Load[config.Scheduler](environ)
	if err != nil {
		return err
	}
	// Every kind the scheduler registers: the reference app's (its services'
	// kinds, their periodic kinds and the load test's) and its own.
	timeouts := jobs.Timeouts()
	maps.Copy(timeouts, scheduler.Timeouts())
	if err := cfg.CheckKindTimeouts(timeouts); err != nil {
		return err
	}
	logger := cfg.NewLogger(stdout)
	if cfg.JobTimeoutSet() {
		logger.WarnContext(ctx, "JOB_TIMEOUT no longer bounds tierq's jobs: each job kind has its own timeout (docs/operations.md, \"Job timeouts and rescue\"); it applies only to kinds registered without one",
			slog.Duration("job_timeout", cfg.JobTimeout), slog.String("kind_timeouts", fmt.Sprint(timeouts)))
	}
	poolConfig, err := cfg.PoolConfig()
	if err != nil {
		return err
	}

	registry := metrics.NewRegistry()
	// Made with the client (its services' workers need the pool), before
	// Background runs.
	var schedulerMetrics *metrics.Scheduler
	return process.Run(ctx, process.Spec{
		Name:            "scheduler",
		Logger:          logger,
		Pool:            poolConfig,
		SoftStopTimeout: cfg.SoftStopTimeout,
		NewClient: func(pool *pgxpool.Pool) (*river.Client[pgx.Tx], error) {
			services, err := jobs.Registry(jobs.Deps{Pool: pool, Logger: logger, Maintenance: jobs.MaintenanceOf(&cfg)})
			if err != nil {
				return nil, err
			}
			schedulerMetrics = metrics.NewScheduler(registry, services.Queues())
			riverConfig, err := scheduler.RiverConfig(cfg, pool, services, logger, schedulerMetrics)
			if err != nil {
				return nil, err
			}
			// Registered so that the rescuer on this leader retries a stuck
			// load-test job; it is no service's kind.
			river.AddWorker(riverConfig.Workers, jobs.NewLoadTestWorker(pool))
			return process.NewClient(pool, riverConfig, metrics.NewJobs(registry))
		},
		MetricsAddr: cfg.MetricsAddr,
		Metrics:     registry,
		Background: func(ctx context.Context, pool *pgxpool.Pool, client *river.Client[pgx.Tx]) {
			scheduler.WatchLeader(ctx, pool, logger, time.Second, client.ID(), schedulerMetrics)
		},
		Attrs: []any{
			slog.Duration("rescue_stuck_jobs_after", cfg.RescueStuckJobsAfter),
			slog.String("cron_tz", cfg.CronTZ),
			slog.String("reanalyze_cron", cfg.ReanalyzeCron),
			slog.String("retention_cron", cfg.RetentionCron),
			slog.Duration("aging_interval", cfg.AgingInterval),
			slog.Duration("aging_step", cfg.AgingStep),
			slog.Int("aging_max_priority", cfg.AgingMaxPriority),
			slog.Duration("escalate_scheduled_after", cfg.EscalateScheduledAfter),
			slog.Duration("escalate_default_after", cfg.EscalateDefaultAfter),
		},
	})
}
