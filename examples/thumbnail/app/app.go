// Package app is the thumbnail example's three deployments, each a run
// function its main calls: the thumbnail service's own worker, and the
// scheduler and the API of an application that runs the reference app's
// services beside it. Each is a few lines on tierq's Run building blocks
// (worker.Run, scheduler.Run, api.Run) and exported packages only.
package app

import (
	"context"
	"io"
	"path/filepath"

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
	dirs, dirsErr := config.LoadSection[Dirs](environ)
	services := func(*pgxpool.Pool) (*service.Registry, error) {
		return thumbnail.Registry(thumbnail.Deps{SourceDir: dirs.SourceDir, OutputDir: dirs.OutputDir})
	}
	described, err := services(nil)
	if err != nil {
		return err
	}
	cfg, err := config.LoadWorker(environ, described)
	if err := config.Join(err, dirsErr); err != nil {
		return err
	}
	return worker.Run(ctx, cfg, cfg.NewLogger(stdout), services)
}

// RunScheduler runs the one scheduler deployment of the reference app's
// services and the thumbnail service: every kind registered, every
// service's queues aged and escalated, every dead letter drained.
func RunScheduler(ctx context.Context, environ []string, stdout io.Writer) error {
	cfg, err := config.Load[config.Scheduler](environ)
	maintenance, maintenanceErr := jobs.LoadMaintenance(environ, &cfg)
	if err := config.Join(err, maintenanceErr); err != nil {
		return err
	}
	logger := cfg.NewLogger(stdout)
	return scheduler.Run(ctx, cfg, logger,
		func(pool *pgxpool.Pool) (*service.Registry, error) {
			return thumbnail.WithReference(jobs.Deps{Pool: pool, Logger: logger, Maintenance: maintenance})
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
	analysis, analysisErr := config.LoadSection[jobs.AnalysisConfig](environ)
	if err := config.Join(err, analysisErr); err != nil {
		return err
	}
	logger := cfg.NewLogger(stdout)
	return api.Run(ctx, cfg, logger, func(pool *pgxpool.Pool) (*service.Registry, error) {
		return thumbnail.WithReference(jobs.Deps{Pool: pool, Logger: logger, AnalysisRoots: analysis.Roots})
	})
}

// Dirs is the thumbnail service's own configuration, a config.Section
// loaded beside tierq's worker configuration: where the images are and
// where their thumbnails go.
type Dirs struct {
	// SourceDir is where the images are (THUMBNAIL_SOURCE_DIR), an absolute
	// directory. Required.
	SourceDir string `env:"THUMBNAIL_SOURCE_DIR,required"`
	// OutputDir is where the thumbnails are written (THUMBNAIL_OUTPUT_DIR),
	// an absolute directory. Required.
	OutputDir string `env:"THUMBNAIL_OUTPUT_DIR,required"`
}

// Validate implements config.Section.
func (d *Dirs) Validate(c *config.Checker) {
	if !filepath.IsAbs(d.SourceDir) {
		c.Fail("SourceDir", "must be an absolute directory")
	}
	if !filepath.IsAbs(d.OutputDir) {
		c.Fail("OutputDir", "must be an absolute directory")
	}
}
