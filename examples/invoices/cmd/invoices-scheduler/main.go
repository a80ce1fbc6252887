// Command invoices-scheduler is the invoices service's scheduler deployment:
// River's leader for the application's database schema, which ages and
// escalates the invoices queues, drains their dead letters, rescues their
// stuck jobs and runs the service's periodic job. It reads a tierq
// scheduler's variables (.env.example); a bad one exits 2 naming it.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"example.com/invoices"
	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/scheduler"
)

func main() {
	if err := run(context.Background(), os.Environ(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "invoices-scheduler:", err)
		if errors.Is(err, config.ErrInvalid) {
			os.Exit(config.ExitCodeInvalid)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, environ []string, stdout io.Writer) error {
	cfg, err := config.Load[config.Scheduler](environ)
	if err != nil {
		return err // errors.Is(err, config.ErrInvalid): exit 2
	}
	registry, err := invoices.Registry(invoices.Deps{}) // no worker runs here: no mailer needed
	if err != nil {
		return err
	}
	schedulerConfig, err := cfg.Config(registry, cfg.NewLogger(stdout)) // a scheduler.Config
	if err != nil {
		return err
	}
	// RESCUE_STUCK_JOBS_AFTER not longer than every kind's timeout: exit 2.
	return cfg.RunError(scheduler.Run(ctx, schedulerConfig))
}
