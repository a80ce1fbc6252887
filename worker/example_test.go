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
	"time"

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

// A team's worker deployment configured in Go, without an environment: the
// registry, the service, the database and whatever differs from the
// defaults. Run connects, works the service's queues and stops on SIGINT or
// SIGTERM.
func Example() {
	run := func(ctx context.Context, databaseURL string, stdout io.Writer) error {
		registry, err := mailServices(nil) // names, queues, default worker counts
		if err != nil {
			return err
		}
		poolConfig, err := pgxpool.ParseConfig(databaseURL)
		if err != nil {
			return err
		}
		return worker.Run(ctx, worker.Config{
			Registry:    registry,
			NewServices: mailServices, // the workers, on Run's pool
			Service:     "mailer",
			Workers:     &service.ClassWorkers{Priority: 8, Default: 2, Scheduled: 0},
			Lend:        true,
			PoolConfig:  poolConfig,
			Logger:      slog.New(slog.NewTextHandler(stdout, nil)),
		})
	}

	if err := run(context.Background(), "postgres://localhost/app", os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// The same deployment configured by the environment: package config reads
// WORKER_SERVICE=mailer, MAILER_QUEUE_{PRIORITY,DEFAULT,SCHEDULED}_WORKERS
// and a tierq worker's variables, reports every bad one at once (exit 2),
// and translates them into a worker.Config.
func Example_environment() {
	run := func(ctx context.Context, environ []string, stdout io.Writer) error {
		described, err := mailServices(nil) // names and worker counts; no pool yet
		if err != nil {
			return err
		}
		cfg, err := config.LoadWorker(environ, described)
		if err != nil {
			return err
		}
		workerConfig, err := cfg.Config(described, cfg.NewLogger(stdout))
		if err != nil {
			return err
		}
		workerConfig.NewServices = mailServices
		return worker.Run(ctx, workerConfig)
	}

	if err := run(context.Background(), os.Environ(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if errors.Is(err, config.ErrInvalid) {
			os.Exit(config.ExitCodeInvalid)
		}
		os.Exit(1)
	}
}

// New applies the defaults and computes once what follows from the
// Config: the queues served, with their worker counts and tuning.
func ExampleNew() {
	registry, err := mailServices(nil)
	if err != nil {
		panic(err)
	}
	w, err := worker.New(worker.Config{
		Registry: registry,
		Service:  "mailer",
		Workers:  &service.ClassWorkers{Priority: 8, Default: 2}, // no scheduled queue
		Default:  worker.Tuning{FairShare: worker.FairShareOff},
	})
	if err != nil {
		panic(err)
	}
	for _, q := range w.Queues() {
		fmt.Println(q.Name, q.Workers, q.FetchCooldown, q.FetchPollInterval, q.FairShare)
	}
	fmt.Println(w.FetchedKinds())
	// Output:
	// mailer_priority 8 1ms 250ms true
	// mailer_default 2 100ms 1s false
	// [send_mail]
}

// Validate changes nothing and reports every problem at once.
func ExampleConfig_Validate() {
	registry, err := mailServices(nil)
	if err != nil {
		panic(err)
	}
	err = worker.Config{
		Registry:  registry,
		Service:   "billing",
		LendFloor: 20000,
		Priority:  worker.Tuning{FetchCooldown: time.Second, FetchPollInterval: 100 * time.Millisecond},
	}.Validate()
	fmt.Println(err)
	// Output:
	// worker: Service "billing" is not registered (registered: mailer)
	// worker: LendFloor is 20000: must be NoLendFloor (-1) or between 0 and 10000
	// worker: Priority.FetchPollInterval is 100ms: must not be shorter than the fetch cooldown (1s)
}

// The River configuration of a deployment, for a main that runs its own
// River client.
func ExampleDeployment_RiverConfig() {
	registry, err := mailServices(nil)
	if err != nil {
		panic(err)
	}
	w, err := worker.New(worker.Config{
		Registry: registry,
		Service:  "mailer",
		Workers:  &service.ClassWorkers{Priority: 8, Default: 2},
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	var pool *pgxpool.Pool // the application's, connected
	services, err := mailServices(pool)
	if err != nil {
		panic(err)
	}
	riverConfig, err := w.RiverConfig(services, pool)
	if err != nil {
		panic(err)
	}
	for _, name := range slices.Sorted(maps.Keys(riverConfig.Queues)) {
		q := riverConfig.Queues[name]
		fmt.Println(name, q.MaxWorkers, q.FetchCooldown)
	}
	// Output:
	// mailer_default 2 100ms
	// mailer_priority 8 1ms
}
