package app

import (
	"context"
	"io"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tierq/tierq/api"
	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/examples/thumbnail"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/jobs/jobsconfig"
	"github.com/tierq/tierq/scheduler"
	"github.com/tierq/tierq/service"
)

// RunSchedulerWithReference runs the one scheduler deployment of an
// application that runs the reference app's services beside the thumbnail
// service (thumbnail.WithReference): every kind registered, every
// service's queues aged and escalated, every dead letter drained, the
// reference app's maintenance (REANALYZE_*, RETENTION_*) run. Like the
// reference app's own scheduler, it applies the reference app's migration
// line (jobs.Migrations: the tables its maintenance reads) when it starts.
// Not the main path: a team runs RunScheduler, its own services alone.
func RunSchedulerWithReference(ctx context.Context, environ []string, stdout io.Writer) error {
	cfg, err := config.Load[config.Scheduler](environ)
	maintenance, maintenanceErr := jobsconfig.LoadMaintenance(environ, &cfg)
	if err := config.Join(err, maintenanceErr); err != nil {
		return err
	}
	logger := cfg.NewLogger(stdout)
	described, err := thumbnail.WithReference(jobs.Deps{Maintenance: maintenance})
	if err != nil {
		return err
	}
	schedulerConfig, err := cfg.Config(described, logger)
	if err != nil {
		return err
	}
	schedulerConfig.NewServices = func(pool *pgxpool.Pool) (*service.Registry, error) {
		if _, err := jobs.Migrations().Up(ctx, pool, cfg.Schema, logger); err != nil {
			return nil, err
		}
		return thumbnail.WithReference(jobs.Deps{Pool: pool, Logger: logger, Maintenance: maintenance})
	}
	// Every kind's timeout comes with the kind, the load test's too.
	schedulerConfig.ExtraKinds = func(pool *pgxpool.Pool) []service.Kind {
		return []service.Kind{jobs.LoadTestKind(pool)}
	}
	return cfg.RunError(scheduler.Run(ctx, schedulerConfig))
}

// RunAPIWithReference runs the one API of the reference app's services and
// the thumbnail service: POST /v1/jobs accepts kind thumbnail beside
// analysis and specview (ANALYSIS_ROOTS bounds the analyzer's targets).
// Not the main path: a team runs RunAPI, its own services alone.
func RunAPIWithReference(ctx context.Context, environ []string, stdout io.Writer) error {
	cfg, err := config.Load[config.API](environ)
	analysis, analysisErr := config.LoadSection[jobsconfig.AnalysisConfig](environ)
	if err := config.Join(err, analysisErr); err != nil {
		return err
	}
	logger := cfg.NewLogger(stdout)
	described, err := thumbnail.WithReference(jobs.Deps{AnalysisRoots: analysis.Roots})
	if err != nil {
		return err
	}
	apiConfig, err := cfg.Config(described, logger)
	if err != nil {
		return err
	}
	apiConfig.NewServices = func(pool *pgxpool.Pool) (*service.Registry, error) {
		return thumbnail.WithReference(jobs.Deps{Pool: pool, Logger: logger, AnalysisRoots: analysis.Roots})
	}
	return api.Run(ctx, apiConfig)
}
