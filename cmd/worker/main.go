// Command worker runs one worker deployment of tierq's reference app: the
// three River queues of the service named by WORKER_SERVICE (analyzer or
// specgen, jobs.Registry), with worker counts named after the service
// (ANALYZER_QUEUE_PRIORITY_WORKERS, …) and fetch tuning from the environment
// (see .env.example). An analyzer deployment analyses only targets that
// resolve into ANALYSIS_ROOTS and cancels the other jobs (docs/jobs.md).
//
// SIGINT or SIGTERM stops fetching and lets running jobs finish for up to
// SOFT_STOP_TIMEOUT; jobs still running then are cancelled (River records
// them as errored and retries them), and the process exits 0. A second signal
// kills the process at once. Invalid configuration exits 2 before any
// database connection is made.
//
// Each job kind has its own timeout (package jobs); JOB_TIMEOUT applies only
// to kinds registered without one, and setting it logs a warning.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/internal/process"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/service"
	"github.com/tierq/tierq/worker"
)

func main() {
	process.Exit("worker", run(context.Background(), os.Args, os.Environ(), os.Stdout))
}

func run(ctx context.Context, _ []string, environ []string, stdout io.Writer) error {
	// Before there is a pool, the services only describe themselves: their
	// names and default worker counts are all the configuration needs.
	described, err := jobs.Registry(jobs.Deps{})
	if err != nil {
		return err
	}
	cfg, err := config.LoadWorker(environ, described)
	analysis, analysisErr := config.LoadSection[jobs.AnalysisConfig](environ)
	if err := config.Join(err, analysisErr); err != nil {
		return err
	}
	logger := cfg.NewLogger(stdout)
	if cfg.JobTimeoutSet() {
		logger.WarnContext(ctx, "JOB_TIMEOUT no longer bounds tierq's jobs: each job kind has its own timeout (docs/operations.md, \"Job timeouts and rescue\"); it applies only to kinds registered without one",
			slog.Duration("job_timeout", cfg.JobTimeout), slog.String("kind_timeouts", fmt.Sprint(jobs.Timeouts())))
	}

	var attrs []slog.Attr
	if cfg.Service == jobs.ServiceAnalyzer {
		attrs = append(attrs, slog.String("analysis_roots", analysis.Roots.String()))
	}
	return worker.Run(ctx, cfg, logger, func(pool *pgxpool.Pool) (*service.Registry, error) {
		return jobs.Registry(jobs.Deps{Pool: pool, Logger: logger, AnalysisRoots: analysis.Roots})
	}, attrs...)
}
