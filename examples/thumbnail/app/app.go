// Package app is the thumbnail example's three deployments, each a run
// function its main calls: the thumbnail service's worker, scheduler and
// API, on the thumbnail service's registry alone, as a team runs its own
// services. Each is a few lines on tierq's Run building blocks (worker.Run,
// scheduler.Run, api.Run) and exported packages only.
//
// RunSchedulerWithReference and RunAPIWithReference are the side case: one
// scheduler and one API for the reference app's services and the thumbnail
// service together in one database (thumbnail.WithReference), the mains
// thumbnail-scheduler-with-reference and thumbnail-api-with-reference.
package app

import (
	"context"
	"io"
	"path/filepath"

	"github.com/tierq/tierq/api"
	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/examples/thumbnail"
	"github.com/tierq/tierq/scheduler"
	"github.com/tierq/tierq/worker"
)

// RunWorker runs the thumbnail service's worker deployment:
// WORKER_SERVICE=thumbnailer, THUMBNAILER_QUEUE_{PRIORITY,DEFAULT,SCHEDULED}_WORKERS
// (2, 1, 1 by default), THUMBNAIL_SOURCE_DIR and THUMBNAIL_OUTPUT_DIR
// (absolute, required), and a tierq worker's variables (.env.example).
func RunWorker(ctx context.Context, environ []string, stdout io.Writer) error {
	dirs, dirsErr := config.LoadSection[Dirs](environ)
	// The thumbnail worker needs no pool: the registry that describes the
	// service is the one the deployment runs.
	registry, err := thumbnail.Registry(thumbnail.Deps{SourceDir: dirs.SourceDir, OutputDir: dirs.OutputDir})
	if err != nil {
		return err
	}
	cfg, err := config.LoadWorker(environ, registry)
	if err := config.Join(err, dirsErr); err != nil {
		return err
	}
	workerConfig, err := cfg.Config(registry, cfg.NewLogger(stdout))
	if err != nil {
		return err
	}
	return worker.Run(ctx, workerConfig)
}

// RunScheduler runs the thumbnail service's scheduler deployment: its
// queues aged and escalated, its dead letters drained, and its kind
// registered, so that the leader's rescuer retries a stuck thumbnail job.
// It reads a tierq scheduler's variables (.env.example) and nothing of its
// own: the kind's worker is never run here, so it needs no directories.
func RunScheduler(ctx context.Context, environ []string, stdout io.Writer) error {
	cfg, err := config.Load[config.Scheduler](environ)
	if err != nil {
		return err
	}
	registry, err := thumbnail.Registry(thumbnail.Deps{})
	if err != nil {
		return err
	}
	schedulerConfig, err := cfg.Config(registry, cfg.NewLogger(stdout))
	if err != nil {
		return err
	}
	// A RESCUE_STUCK_JOBS_AFTER not longer than every kind's timeout exits
	// 2, named as the environment does.
	return cfg.RunError(scheduler.Run(ctx, schedulerConfig))
}

// RunAPI runs the thumbnail service's API: POST /v1/jobs accepts kind
// thumbnail (its args decoded strictly and validated), GET /v1/queues and
// /metrics list the thumbnails_* queues, and /openapi.json describes the
// kind. It reads a tierq API's variables (.env.example).
func RunAPI(ctx context.Context, environ []string, stdout io.Writer) error {
	cfg, err := config.Load[config.API](environ)
	if err != nil {
		return err
	}
	registry, err := thumbnail.Registry(thumbnail.Deps{})
	if err != nil {
		return err
	}
	apiConfig, err := cfg.Config(registry, cfg.NewLogger(stdout))
	if err != nil {
		return err
	}
	return api.Run(ctx, apiConfig)
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
