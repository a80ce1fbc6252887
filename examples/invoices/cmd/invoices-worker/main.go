// Command invoices-worker is the invoices service's worker deployment:
// WORKER_SERVICE=invoices, INVOICES_QUEUE_{PRIORITY,DEFAULT,SCHEDULED}_WORKERS
// (2, 1, 1 by default) and a tierq worker's variables (.env.example). A bad
// variable exits 2 naming it; SIGINT or SIGTERM lets running jobs finish for
// up to SOFT_STOP_TIMEOUT.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"example.com/invoices"
	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/worker"
)

func main() {
	if err := run(context.Background(), os.Environ(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "invoices-worker:", err)
		if errors.Is(err, config.ErrInvalid) {
			os.Exit(config.ExitCodeInvalid)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, environ []string, stdout io.Writer) error {
	// The invoices workers need no pool: the registry that describes the
	// service is the one the deployment runs.
	registry, err := invoices.Registry(invoices.Deps{})
	if err != nil {
		return err
	}
	cfg, err := config.LoadWorker(environ, registry)
	if err != nil {
		return err // errors.Is(err, config.ErrInvalid): exit config.ExitCodeInvalid (2)
	}
	workerConfig, err := cfg.Config(registry, cfg.NewLogger(stdout)) // a worker.Config
	if err != nil {
		return err
	}
	return worker.Run(ctx, workerConfig)
}
