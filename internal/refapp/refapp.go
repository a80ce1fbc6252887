// Package refapp is the reference app's processes: the worker, scheduler
// and API deployments of the services of package jobs, wired from the
// library. cmd/worker, cmd/scheduler and cmd/api are thin mains on it, and
// tests run the reference app in-process through it, exactly as the
// binaries do.
//
// The reference app's tables (analysis_results, spec_documents) are its
// own migration line (jobs.Migrations), not tierq's: `tierctl migrate`
// applies River's and tierq's migrations, and the worker and the scheduler
// apply the reference app's line when they start (applyMigrations), after
// tierq's schema check and before their River client starts. The API never
// reads those tables and leaves them alone.
package refapp

import (
	"context"
	"io"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tierq/tierq/api"
	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/jobs/jobsconfig"
	"github.com/tierq/tierq/scheduler"
	"github.com/tierq/tierq/service"
	"github.com/tierq/tierq/worker"
)

// RunWorker runs one worker deployment (cmd/worker) configured by environ
// until ctx ends or the process is signalled. Invalid configuration is an
// error matching config.ErrInvalid, returned before any connection.
func RunWorker(ctx context.Context, environ []string, stdout io.Writer) error {
	// Before there is a pool, the services only describe themselves: their
	// names and default worker counts are all the configuration needs.
	described, err := jobs.Registry(jobs.Deps{})
	if err != nil {
		return err
	}
	cfg, err := config.LoadWorker(environ, described)
	analysis, analysisErr := config.LoadSection[jobsconfig.AnalysisConfig](environ)
	if err := config.Join(err, analysisErr); err != nil {
		return err
	}
	logger := cfg.NewLogger(stdout)
	workerConfig, err := cfg.Config(described, logger)
	if err != nil {
		return err
	}
	if cfg.Service == jobs.ServiceAnalyzer {
		workerConfig.LogAttrs = append(workerConfig.LogAttrs, slog.String("analysis_roots", analysis.Roots.String()))
	}
	workerConfig.NewServices = func(pool *pgxpool.Pool) (*service.Registry, error) {
		if err := applyMigrations(ctx, pool, cfg.Schema, logger); err != nil {
			return nil, err
		}
		return jobs.Registry(jobs.Deps{Pool: pool, Logger: logger, AnalysisRoots: analysis.Roots})
	}
	return worker.Run(ctx, workerConfig)
}

// RunScheduler runs one scheduler replica (cmd/scheduler) configured by
// environ until ctx ends or the process is signalled. Invalid
// configuration, including a RESCUE_STUCK_JOBS_AFTER not longer than every
// kind's timeout or a bad tenant limit (<NAME>_<TIER>_TENANT_...,
// config.LoadLimits), is an error matching config.ErrInvalid, returned
// before any connection. The tenant limits are recorded in the database
// when it starts (scheduler.Config.Limits).
func RunScheduler(ctx context.Context, environ []string, stdout io.Writer) error {
	// The services' names are all the tenant limits' variables need
	// (<NAME>_<TIER>_TENANT_...).
	names, err := jobs.Registry(jobs.Deps{})
	if err != nil {
		return err
	}
	cfg, err := config.Load[config.Scheduler](environ)
	maintenance, maintenanceErr := jobsconfig.LoadMaintenance(environ, &cfg)
	tenantLimits, limitsErr := config.LoadLimits(environ, names)
	if err := config.Join(err, maintenanceErr, limitsErr); err != nil {
		return err
	}
	// The registry described without a pool has the kinds of the one
	// NewServices builds: Run checks RESCUE_STUCK_JOBS_AFTER against their
	// timeouts (and ExtraKinds') before it connects (Config.Validate), so
	// a bad value exits 2 before any connection, and again once connected.
	described, err := jobs.Registry(jobs.Deps{Maintenance: maintenance})
	if err != nil {
		return err
	}
	logger := cfg.NewLogger(stdout)
	schedulerConfig, err := cfg.Config(described, logger)
	if err != nil {
		return err
	}
	// Recorded in the database at start, for every other process.
	schedulerConfig.Limits = tenantLimits
	schedulerConfig.NewServices = func(pool *pgxpool.Pool) (*service.Registry, error) {
		if err := applyMigrations(ctx, pool, cfg.Schema, logger); err != nil {
			return nil, err
		}
		return jobs.Registry(jobs.Deps{Pool: pool, Logger: logger, Maintenance: maintenance})
	}
	// The load test's kind, no service's, is registered so that the
	// rescuer on this leader retries a stuck load-test job.
	schedulerConfig.ExtraKinds = loadTestKinds
	// After config's CRON_TZ: the maintenance cron jobs' next runs.
	schedulerConfig.LogAttrs = append(schedulerConfig.LogAttrs, maintenance.LogAttrs()...)
	// Run's *scheduler.KindTimeoutsError named as the environment does:
	// RESCUE_STUCK_JOBS_AFTER, exit 2.
	return cfg.RunError(scheduler.Run(ctx, schedulerConfig))
}

// loadTestKinds is the scheduler's Config.ExtraKinds: the load test's
// kind (jobs.LoadTestKind), worked on pool.
func loadTestKinds(pool *pgxpool.Pool) []service.Kind {
	return []service.Kind{jobs.LoadTestKind(pool)}
}

// RunAPI runs the HTTP API (cmd/api) configured by environ until ctx ends
// or the process is signalled. Invalid configuration is an error matching
// config.ErrInvalid, returned before any connection.
func RunAPI(ctx context.Context, environ []string, stdout io.Writer) error {
	cfg, err := config.Load[config.API](environ)
	analysis, analysisErr := config.LoadSection[jobsconfig.AnalysisConfig](environ)
	if err := config.Join(err, analysisErr); err != nil {
		return err
	}
	logger := cfg.NewLogger(stdout)
	// ANALYSIS_ROOTS reaches the API through the analyzer's check of its
	// requests.
	described, err := jobs.Registry(jobs.Deps{AnalysisRoots: analysis.Roots})
	if err != nil {
		return err
	}
	apiConfig, err := cfg.Config(described, logger)
	if err != nil {
		return err
	}
	apiConfig.NewServices = func(pool *pgxpool.Pool) (*service.Registry, error) {
		return jobs.Registry(jobs.Deps{Pool: pool, Logger: logger, AnalysisRoots: analysis.Roots})
	}
	apiConfig.LogAttrs = []slog.Attr{slog.String("analysis_roots", analysis.Roots.String())}
	return api.Run(ctx, apiConfig)
}

// applyMigrations applies the reference app's migration line
// (jobs.Migrations) to schema: its tables, which the analysis and specview
// workers write and the scheduler's maintenance reads. Idempotent, and
// safe from every process at once (an advisory lock per schema); it logs
// "reference app migrations applied" when it applied any. A database whose
// tables tierq's migration 00001 created before issue 30 keeps them and
// their rows: the line only records its version there.
func applyMigrations(ctx context.Context, pool *pgxpool.Pool, schema string, logger *slog.Logger) error {
	_, err := jobs.Migrations().Up(ctx, pool, schema, logger)
	return err
}
