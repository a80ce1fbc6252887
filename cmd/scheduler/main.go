// Command scheduler runs tierq's scheduler deployment: the only River client
// allowed to lead. On the leader it runs River's maintenance (retries,
// scheduled-job promotion, rescue of stuck jobs of every kind, cleanup) and
// tierq's periodic jobs: the aging and escalation sweeps and the re-analysis
// and retention cron jobs. Run two replicas; one leads, the other takes over
// when it goes away. See docs/scheduling.md.
//
// Invalid configuration exits 2 before any database connection is made.
package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/internal/process"
	"github.com/tierq/tierq/metrics"
	"github.com/tierq/tierq/routing"
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
	logger := cfg.NewLogger(stdout)
	poolConfig, err := cfg.PoolConfig()
	if err != nil {
		return err
	}

	registry := metrics.NewRegistry()
	schedulerMetrics := metrics.NewScheduler(registry, routing.Queues())
	return process.Run(ctx, process.Spec{
		Name:            "scheduler",
		Logger:          logger,
		Pool:            poolConfig,
		SoftStopTimeout: cfg.SoftStopTimeout,
		NewClient: func(pool *pgxpool.Pool) (*river.Client[pgx.Tx], error) {
			return process.NewClient(pool, scheduler.RiverConfig(cfg, pool, logger, schedulerMetrics), metrics.NewJobs(registry))
		},
		MetricsAddr: cfg.MetricsAddr,
		Metrics:     registry,
		Background: func(ctx context.Context, pool *pgxpool.Pool, client *river.Client[pgx.Tx]) {
			scheduler.WatchLeader(ctx, pool, logger, time.Second, client.ID(), schedulerMetrics)
		},
		Attrs: []any{
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
