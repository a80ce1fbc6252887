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
	"github.com/tierq/tierq/jobs"
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

func (*renderInvoiceWorker) Timeout(*river.Job[renderInvoiceArgs]) time.Duration {
	return renderInvoiceTimeout
}

func (*renderInvoiceWorker) Work(context.Context, *river.Job[renderInvoiceArgs]) error { return nil }

// invoiceServices is the team's registry: its one service, invoicer, with
// its workers on pool.
func invoiceServices(pool *pgxpool.Pool) (*service.Registry, error) {
	invoicer, err := service.New(&service.Config{
		Name:  "invoicer",
		Kinds: []service.Kind{service.WorkerKind(&renderInvoiceWorker{pool: pool})},
	})
	if err != nil {
		return nil, err
	}
	return service.NewRegistry(invoicer)
}

// A team's scheduler deployment for the reference app's services and its
// own: main calls run, and run is a few lines. The scheduler registers the
// kinds of both (so that the leader's rescuer retries a stuck job of any of
// them), ages and escalates the jobs of their queues and runs their
// periodic jobs, here the analyzer's maintenance (REANALYZE_CRON,
// RETENTION_CRON). RESCUE_STUCK_JOBS_AFTER must be longer than every
// kind's timeout: Run checks it against those given with KindTimeouts and
// its own, and returns config.ErrInvalid (exit 2) before it connects.
func Example() {
	run := func(ctx context.Context, environ []string, stdout io.Writer) error {
		cfg, err := config.Load[config.Scheduler](environ)
		maintenance, maintenanceErr := jobs.LoadMaintenance(environ, &cfg)
		if err := config.Join(err, maintenanceErr); err != nil {
			return err
		}
		logger := cfg.NewLogger(stdout)
		newServices := func(pool *pgxpool.Pool) (*service.Registry, error) {
			ref, err := jobs.Registry(jobs.Deps{Pool: pool, Logger: logger, Maintenance: maintenance})
			if err != nil {
				return nil, err
			}
			own, err := invoiceServices(pool)
			if err != nil {
				return nil, err
			}
			return ref.Join(own)
		}
		return scheduler.Run(ctx, cfg, logger, newServices,
			scheduler.KindTimeouts(jobs.Timeouts()),
			scheduler.KindTimeouts(map[string]time.Duration{"render_invoice": renderInvoiceTimeout}))
	}

	if err := run(context.Background(), os.Environ(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if errors.Is(err, config.ErrInvalid) {
			os.Exit(config.ExitCodeInvalid)
		}
		os.Exit(1)
	}
}
