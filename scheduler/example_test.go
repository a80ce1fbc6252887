package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
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

// A team's scheduler deployment configured in Go, without an environment.
// The scheduler registers every kind of the team's registry (so that the
// leader's rescuer retries a stuck job of any of them), ages and escalates
// the jobs of its queues and runs its periodic jobs. RescueStuckJobsAfter
// must be longer than every kind's timeout, which each kind declares
// (service.Timeout: render_invoice's 2 minutes): Run checks it against the
// registry's and its own before its River client starts.
func Example() {
	run := func(ctx context.Context, databaseURL string, stdout io.Writer) error {
		registry, err := invoiceServices(nil)
		if err != nil {
			return err
		}
		poolConfig, err := pgxpool.ParseConfig(databaseURL)
		if err != nil {
			return err
		}
		return scheduler.Run(ctx, scheduler.Config{
			Registry:             registry,
			NewServices:          invoiceServices, // the periodic workers, on Run's pool
			RescueStuckJobsAfter: 30 * time.Minute,
			AgingInterval:        -1, // no aging
			DLQAlertWebhookURL:   "https://hooks.example.com/dead-letters",
			PoolConfig:           poolConfig,
			Logger:               slog.New(slog.NewTextHandler(stdout, nil)),
		})
	}

	if err := run(context.Background(), "postgres://localhost/app", os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// The same deployment configured by the environment: package config reads
// a tierq scheduler's variables, reports every bad one at once (exit 2), and
// translates them into a scheduler.Config, and names
// RESCUE_STUCK_JOBS_AFTER in Run's error when it is not longer than every
// kind's timeout (exit 2 too).
func Example_environment() {
	run := func(ctx context.Context, environ []string, stdout io.Writer) error {
		cfg, err := config.Load[config.Scheduler](environ)
		if err != nil {
			return err
		}
		registry, err := invoiceServices(nil)
		if err != nil {
			return err
		}
		schedulerConfig, err := cfg.Config(registry, cfg.NewLogger(stdout))
		if err != nil {
			return err
		}
		schedulerConfig.NewServices = invoiceServices
		// Run's *scheduler.KindTimeoutsError becomes an error naming
		// RESCUE_STUCK_JOBS_AFTER.
		return cfg.RunError(scheduler.Run(ctx, schedulerConfig))
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
func ExampleConfig_WithDefaults() {
	registry, err := invoiceServices(nil)
	if err != nil {
		panic(err)
	}
	cfg := scheduler.Config{Registry: registry, EscalateScheduledAfter: -1}.WithDefaults()
	fmt.Println(cfg.QueueWorkers, cfg.RescueStuckJobsAfter, cfg.AgingInterval, cfg.DLQDrainInterval, cfg.EscalateScheduledAfter)
	// Aging and the dead-letter drain; escalation is off with both rules.
	fmt.Println(len(scheduler.PeriodicJobs(cfg, registry)), "periodic jobs")

	fmt.Println(scheduler.Config{RescueStuckJobsAfter: 30 * time.Second, AgingMaxPriority: 7}.Validate())
	// Output:
	// 2 1h0m0s 1m0s 30s -1ns
	// 2 periodic jobs
	// scheduler: Registry is required
	// scheduler: RescueStuckJobsAfter is 30s: must be longer than JobTimeout (1m0s), the timeout of job kinds without their own, or such jobs are rescued while they still run
	// scheduler: AgingMaxPriority is 7: must be between 1 and 4
}
