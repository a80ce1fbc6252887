package worker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/service"
	"github.com/tierq/tierq/worker"
)

// mailServices is a team's registry: its one service, with its workers on
// pool (nil while the services only describe themselves).
func mailServices(pool *pgxpool.Pool) (*service.Registry, error) {
	mailer, err := service.New(&service.Config{
		Name:    "mailer",
		Kinds:   []service.Kind{service.WorkerKind(&sendWorker{pool: pool})},
		Workers: &service.ClassWorkers{Priority: 4, Default: 2, Scheduled: 1},
	})
	if err != nil {
		return nil, err
	}
	return service.NewRegistry(mailer)
}

// A team's worker deployment of its own service: main calls run, and run
// is a few lines. WORKER_SERVICE=mailer, and MAILER_QUEUE_PRIORITY_WORKERS,
// MAILER_QUEUE_DEFAULT_WORKERS and MAILER_QUEUE_SCHEDULED_WORKERS override
// the service's worker counts.
func Example() {
	run := func(ctx context.Context, environ []string, stdout io.Writer) error {
		described, err := mailServices(nil) // names and worker counts; no pool yet
		if err != nil {
			return err
		}
		cfg, err := config.LoadWorker(environ, described)
		if err != nil {
			return err
		}
		return worker.Run(ctx, cfg, cfg.NewLogger(stdout), mailServices)
	}

	if err := run(context.Background(), os.Environ(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if errors.Is(err, config.ErrInvalid) {
			os.Exit(config.ExitCodeInvalid)
		}
		os.Exit(1)
	}
}

// The River configuration of a deployment, for a main that runs its own
// River client; the environment's variables are named after the service.
func ExampleRiverConfig() {
	described, err := mailServices(nil)
	if err != nil {
		panic(err)
	}
	cfg, err := config.LoadWorker([]string{
		"DATABASE_URL=postgres://localhost/app", "WORKER_SERVICE=mailer",
		"MAILER_QUEUE_PRIORITY_WORKERS=8", "MAILER_QUEUE_SCHEDULED_WORKERS=0",
	}, described)
	if err != nil {
		panic(err)
	}
	var pool *pgxpool.Pool // the application's, connected
	services, err := mailServices(pool)
	if err != nil {
		panic(err)
	}
	riverConfig, err := worker.RiverConfig(cfg, services, pool, slog.New(slog.DiscardHandler))
	if err != nil {
		panic(err)
	}
	for _, name := range slices.Sorted(maps.Keys(riverConfig.Queues)) {
		q := riverConfig.Queues[name]
		fmt.Println(name, q.MaxWorkers, q.FetchCooldown)
	}

	_, err = config.LoadWorker([]string{"DATABASE_URL=postgres://localhost/app", "WORKER_SERVICE=billing", "MAILER_QUEUE_DEFAULT_WORKERS=two"}, described)
	fmt.Println(err)
	// Output:
	// mailer_default 2 100ms
	// mailer_priority 8 1ms
	// invalid configuration: WORKER_SERVICE="billing": unknown service (want mailer); MAILER_QUEUE_DEFAULT_WORKERS="two": not an integer
}
