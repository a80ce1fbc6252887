// Package app is the thumbnail example's three deployments, each a run
// function its main calls: the thumbnail service's own worker, and the
// scheduler and the API of an application that runs the reference app's
// services beside it. Each is a few lines on tierq's Run building blocks
// (worker.Run, scheduler.Run, api.Run) and exported packages only.
package app

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/tierq/tierq/api"
	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/examples/thumbnail"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/scheduler"
	"github.com/tierq/tierq/service"
	"github.com/tierq/tierq/worker"
)

// RunWorker runs the thumbnail service's worker deployment:
// WORKER_SERVICE=thumbnailer, THUMBNAILER_QUEUE_{PRIORITY,DEFAULT,SCHEDULED}_WORKERS
// (2, 1, 1 by default), THUMBNAIL_SOURCE_DIR and THUMBNAIL_OUTPUT_DIR
// (absolute, required), and a tierq worker's variables (.env.example).
func RunWorker(ctx context.Context, environ []string, stdout io.Writer) error {
	deps, err := depsFrom(environ)
	if err != nil {
		return err
	}
	services := func(*pgxpool.Pool) (*service.Registry, error) { return thumbnail.Registry(deps) }
	described, err := services(nil)
	if err != nil {
		return err
	}
	cfg, err := config.LoadWorker(environ, described)
	if err != nil {
		return err
	}
	return worker.Run(ctx, cfg, cfg.NewLogger(stdout), services)
}

// RunScheduler runs the one scheduler deployment of the reference app's
// services and the thumbnail service: every kind registered, every
// service's queues aged and escalated, every dead letter drained.
func RunScheduler(ctx context.Context, environ []string, stdout io.Writer) error {
	cfg, err := config.Load[config.Scheduler](environ)
	if err != nil {
		return err
	}
	logger := cfg.NewLogger(stdout)
	return scheduler.Run(ctx, cfg, logger,
		func(pool *pgxpool.Pool) (*service.Registry, error) {
			return thumbnail.WithReference(jobs.Deps{Pool: pool, Logger: logger, Maintenance: jobs.MaintenanceOf(&cfg)})
		},
		scheduler.KindTimeouts(jobs.Timeouts()),
		scheduler.KindTimeouts(thumbnail.Timeouts()),
		scheduler.AddWorkers(func(workers *river.Workers, pool *pgxpool.Pool) error {
			return river.AddWorkerSafely(workers, jobs.NewLoadTestWorker(pool))
		}),
	)
}

// RunAPI runs the API of the reference app's services and the thumbnail
// service: POST /v1/jobs accepts kind thumbnail beside analysis and
// specview.
func RunAPI(ctx context.Context, environ []string, stdout io.Writer) error {
	cfg, err := config.Load[config.API](environ)
	if err != nil {
		return err
	}
	logger := cfg.NewLogger(stdout)
	return api.Run(ctx, cfg, logger, func(pool *pgxpool.Pool) (*service.Registry, error) {
		return thumbnail.WithReference(jobs.Deps{Pool: pool, Logger: logger, AnalysisRoots: cfg.Analysis.Roots})
	})
}

// depsFrom reads THUMBNAIL_SOURCE_DIR and THUMBNAIL_OUTPUT_DIR: absolute
// directories, required. A bad value is a config.ErrInvalid naming it.
func depsFrom(environ []string) (thumbnail.Deps, error) {
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	var problems []string
	dir := func(name string) string {
		v := env[name]
		if !filepath.IsAbs(v) {
			problems = append(problems, fmt.Sprintf("%s=%q: must be an absolute directory", name, v))
		}
		return v
	}
	deps := thumbnail.Deps{SourceDir: dir("THUMBNAIL_SOURCE_DIR"), OutputDir: dir("THUMBNAIL_OUTPUT_DIR")}
	if len(problems) > 0 {
		return deps, fmt.Errorf("%w: %s", config.ErrInvalid, strings.Join(problems, "; "))
	}
	return deps, nil
}
