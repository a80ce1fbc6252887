package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/scheduler"
	"github.com/tierq/tierq/service"
)

// renderInvoiceArgs are the args of a team's own kind, render_invoice.
type renderInvoiceArgs struct {
	InvoiceID int64 `json:"invoice_id"`
}

func (renderInvoiceArgs) Kind() string { return "render_invoice" }

// renderInvoiceTimeout bounds one render_invoice job, in every process.
const renderInvoiceTimeout = 2 * time.Minute

type renderInvoiceWorker struct {
	river.WorkerDefaults[renderInvoiceArgs]
	pool *pgxpool.Pool // nil while the service only describes itself
}

func (*renderInvoiceWorker) Work(context.Context, *river.Job[renderInvoiceArgs]) error { return nil }

// invoiceServices is the team's registry: its one service, invoicer, with
// its workers on pool.
func invoiceServices(pool *pgxpool.Pool) (*service.Registry, error) {
	invoicer, err := service.New(&service.Config{
		Name: "invoicer",
		Kinds: []service.Kind{service.WorkerKind(&renderInvoiceWorker{pool: pool},
			service.Timeout[renderInvoiceArgs](renderInvoiceTimeout))},
	})
	if err != nil {
		return nil, err
	}
	return service.NewRegistry(invoicer)
}

// A team's scheduler deployment for its own services: main calls run, and
// run is a few lines. The scheduler registers every kind of the team's
// registry (so that the leader's rescuer retries a stuck job of any of
// them), ages and escalates the jobs of its queues and runs its periodic
// jobs. RESCUE_STUCK_JOBS_AFTER must be longer than every kind's timeout,
// which each kind declares (service.Timeout: render_invoice's 2 minutes):
// Run checks it against the registry's and its own, and returns
// config.ErrInvalid (exit 2) before its River client starts.
func Example() {
	run := func(ctx context.Context, environ []string, stdout io.Writer) error {
		cfg, err := config.Load[config.Scheduler](environ)
		if err != nil {
			return err
		}
		return scheduler.Run(ctx, cfg, cfg.NewLogger(stdout), invoiceServices)
	}

	if err := run(context.Background(), os.Environ(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if errors.Is(err, config.ErrInvalid) {
			os.Exit(config.ExitCodeInvalid)
		}
		os.Exit(1)
	}
}
