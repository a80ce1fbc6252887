// Package worker builds the River client of a worker deployment: one process
// serving the three queues of one service (ADR-16), with the worker counts and
// fetch tuning from config.Worker, and only that service's job kinds
// registered and fetched (FetchOnlyKnownKinds), so an Analyzer worker never
// receives a SpecGenerator job.
package worker

import (
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/producer"
	"github.com/tierq/tierq/routing"
)

// RiverConfig is the River client configuration for cfg's service. Callers
// may add middleware or hooks before passing it to NewClient.
func RiverConfig(cfg config.Worker, pool *pgxpool.Pool, logger *slog.Logger) *river.Config {
	workers := river.NewWorkers()
	switch cfg.Service {
	case routing.Analyzer:
		river.AddWorker(workers, jobs.NewAnalysisWorker(pool, logger, cfg.Analysis.Roots...))
	case routing.SpecGen:
		river.AddWorker(workers, jobs.NewSpecViewWorker(pool, logger))
	}
	if cfg.LoadTestWorkload {
		river.AddWorker(workers, jobs.NewLoadTestWorker(pool))
	}

	queues := map[string]river.QueueConfig{}
	for name, qc := range cfg.Queues() {
		queues[name] = river.QueueConfig{
			MaxWorkers:        qc.Workers,
			FetchCooldown:     qc.FetchCooldown,
			FetchPollInterval: qc.PollInterval,
		}
	}

	return &river.Config{
		// Client-level: rate limit of the insert notifications this client
		// sends (the analyzer chains specview jobs); each queue has its own
		// cooldown below.
		FetchCooldown:       producer.NotifyCooldown,
		FetchOnlyKnownKinds: true,
		JobTimeout:          cfg.JobTimeout,
		// Only the scheduler deployment leads: a leader's rescuer discards
		// stuck jobs of kinds it has not registered, and a worker knows one
		// service's kinds only (docs/scheduling.md).
		LeaderElectionDisabled: true,
		Logger:                 logger,
		MaxAttempts:            cfg.MaxAttempts,
		Queues:                 queues,
		Schema:                 cfg.Schema,
		// The analyzer inserts specview jobs, a kind it does not work.
		SkipUnknownJobCheck: true,
		SoftStopTimeout:     cfg.SoftStopTimeout,
		Workers:             workers,
	}
}
