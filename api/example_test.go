package api_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
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

// A team's API for its own services, configured in Go without an
// environment. POST /v1/jobs accepts the kinds of the team's registry and
// no other ({"kind": "render_invoice", "user_id": "u_1", "args":
// {"invoice_id": 7}} goes to invoicer_priority or invoicer_default by the
// user's tier), and the queue, escalation and dead-letter endpoints,
// /metrics and River UI cover its queues. (An API that also serves the
// reference app's services gives Run a registry joining jobs.Registry with
// the team's, service.Registry.Join, and loads ANALYSIS_ROOTS,
// jobsconfig.AnalysisConfig, as cmd/api does: a side case.)
func Example() {
	run := func(ctx context.Context, databaseURL string, stdout io.Writer) error {
		registry, err := invoiceServices(nil) // its kinds' checks need no pool
		if err != nil {
			return err
		}
		poolConfig, err := pgxpool.ParseConfig(databaseURL)
		if err != nil {
			return err
		}
		return api.Run(ctx, api.Config{
			Token:      "producer-token-0123456789", // from a secret store
			AdminToken: "admin-token-0123456789",
			Registry:   registry,
			Addr:       ":8081",
			PoolConfig: poolConfig,
			Logger:     slog.New(slog.NewTextHandler(stdout, nil)),
		})
	}

	if err := run(context.Background(), "postgres://localhost/app", os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// The same API configured by the environment: package config reads
// API_TOKEN, API_ADMIN_TOKEN, API_ADDR and the database's variables,
// reports every bad one at once (exit 2), and translates them into an
// api.Config.
func Example_environment() {
	run := func(ctx context.Context, environ []string, stdout io.Writer) error {
		cfg, err := config.Load[config.API](environ)
		if err != nil {
			return err
		}
		registry, err := invoiceServices(nil)
		if err != nil {
			return err
		}
		apiConfig, err := cfg.Config(registry, cfg.NewLogger(stdout))
		if err != nil {
			return err
		}
		return api.Run(ctx, apiConfig)
	}

	if err := run(context.Background(), os.Environ(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if errors.Is(err, config.ErrInvalid) {
			os.Exit(config.ExitCodeInvalid)
		}
		os.Exit(1)
	}
}

// The defaults, applied in one place, and a validation that changes nothing
// and reports every problem at once.
func ExampleConfig_Validate() {
	cfg := api.Config{Token: "producer-token-0123456789", AdminToken: "short"}
	fmt.Println(cfg.WithDefaults().Addr, cfg.WithDefaults().MaxAttempts, cfg.WithDefaults().RequestTimeout)
	fmt.Println(cfg.Validate())
	// Output:
	// 127.0.0.1:8081 10 30s
	// api: AdminToken must be at least 16 characters
	// api: Registry is required
}
