// Command worker runs one worker deployment of tierq: the three River queues
// of the service named by WORKER_SERVICE (analyzer or specgen), with worker
// counts and fetch tuning from the environment (see .env.example).
//
// SIGINT or SIGTERM stops fetching and lets running jobs finish for up to
// SOFT_STOP_TIMEOUT; jobs still running then are cancelled (River records
// them as errored and retries them), and the process exits 0. A second signal
// kills the process at once. Invalid configuration exits 2 before any
// database connection is made.
package main

import (
	"context"
	"io"
	"log/slog"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/internal/process"
	"github.com/tierq/tierq/metrics"
	"github.com/tierq/tierq/worker"
)

func main() {
	process.Exit("worker", run(context.Background(), os.Args, os.Environ(), os.Stdout))
}

func run(ctx context.Context, _ []string, environ []string, stdout io.Writer) error {
	cfg, err := config.Load[config.Worker](environ)
	if err != nil {
		return err
	}
	logger := cfg.NewLogger(stdout)
	poolConfig, err := cfg.PoolConfig()
	if err != nil {
		return err
	}

	attrs := []any{slog.String("service", string(cfg.Service))}
	for name, qc := range cfg.Queues() {
		attrs = append(attrs, slog.Int(name, qc.Workers))
	}
	registry := metrics.NewRegistry()
	return process.Run(ctx, process.Spec{
		Name:            "worker",
		Logger:          logger,
		Pool:            poolConfig,
		SoftStopTimeout: cfg.SoftStopTimeout,
		NewClient: func(pool *pgxpool.Pool) (*river.Client[pgx.Tx], error) {
			return process.NewClient(pool, worker.RiverConfig(cfg, pool, logger), metrics.NewJobs(registry))
		},
		MetricsAddr: cfg.MetricsAddr,
		Metrics:     registry,
		Attrs:       attrs,
	})
}
