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

	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/invoices"
	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/service"
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

// services is the application's registry, built on the pool worker.Run
// opens: the invoices service alone.
func services(*pgxpool.Pool) (*service.Registry, error) {
	return invoices.Registry(invoices.Deps{})
}

func run(ctx context.Context, environ []string, stdout io.Writer) error {
	described, err := services(nil) // names and worker counts: no pool needed
	if err != nil {
		return err
	}
	cfg, err := config.LoadWorker(environ, described)
	if err != nil {
		return err // errors.Is(err, config.ErrInvalid): exit config.ExitCodeInvalid (2)
	}
	return worker.Run(ctx, cfg, cfg.NewLogger(stdout), services)
}
