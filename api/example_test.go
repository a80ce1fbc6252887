package api_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/tierq/tierq/api"
	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/service"
)

// renderInvoiceArgs are the args of a team's own kind, render_invoice.
// POST /v1/jobs decodes a request's args into them strictly and calls
// Validate.
type renderInvoiceArgs struct {
	InvoiceID int64 `json:"invoice_id"`
}

func (renderInvoiceArgs) Kind() string { return "render_invoice" }

// Validate refuses an args without an invoice (a 400).
func (a renderInvoiceArgs) Validate() error {
	if a.InvoiceID <= 0 {
		return errors.New("invoice_id must be positive")
	}
	return nil
}

type renderInvoiceWorker struct {
	river.WorkerDefaults[renderInvoiceArgs]
	pool *pgxpool.Pool
}

func (*renderInvoiceWorker) Work(context.Context, *river.Job[renderInvoiceArgs]) error { return nil }

// invoiceServices is the team's registry: its one service, invoicer (queues
// invoicer_priority, invoicer_default, invoicer_scheduled).
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

// A team's API for its own services: main calls run, and run is a few
// lines. POST /v1/jobs accepts the kinds of the team's registry and no
// other ({"kind": "render_invoice", "user_id": "u_1", "args":
// {"invoice_id": 7}} goes to invoicer_priority or invoicer_default by the
// user's tier), and the queue, escalation and dead-letter endpoints,
// /metrics and River UI cover its queues. (An API that also serves the
// reference app's services gives Run a registry joining jobs.Registry with
// the team's, service.Registry.Join, and loads ANALYSIS_ROOTS,
// jobsconfig.AnalysisConfig, as cmd/api does: a side case.)
func Example() {
	run := func(ctx context.Context, environ []string, stdout io.Writer) error {
		cfg, err := config.Load[config.API](environ)
		if err != nil {
			return err
		}
		return api.Run(ctx, cfg, cfg.NewLogger(stdout), invoiceServices)
	}

	if err := run(context.Background(), os.Environ(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if errors.Is(err, config.ErrInvalid) {
			os.Exit(config.ExitCodeInvalid)
		}
		os.Exit(1)
	}
}
