// Package ctl is tierctl, tierq's operator command line, as a package:
// cmd/tierctl is a thin main around Main.
//
//	tierctl migrate            apply River's and tierq's migrations (idempotent)
//	tierctl enqueue            insert demo analysis work across every tier
//	tierctl watch              live view: queues, waits by tier, dead letters, leader
//	tierctl demo               a free flood beside a paid trickle: paid waits stay low
//	tierctl escalate JOB_ID    move a queued job to another queue (audited)
//	tierctl dlq ...            list, show, replay, purge and drain dead letters
//	tierctl subscriptions ...  set and list users' tiers
//	tierctl queues ...         list queues; pause and resume one (River's pause)
//	tierctl escalations list   the escalation audit, newest first
//
// It reads DATABASE_URL (and DATABASE_SCHEMA, LOG_LEVEL, LOG_FORMAT) from the
// environment. Invalid configuration or usage exits with status 2. Every
// command but migrate first checks that the schema has every migration this
// build needs (migrate.Check); when it does not, it exits 1 saying which
// versions it found and needs and to run `tierctl migrate`.
package ctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/signal"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/migrate"
	"github.com/tierq/tierq/service"
)

// Main runs tierctl with args (args[0] is the program's name) in environ,
// writing to stdout; ExitCode is the exit status of its error.
func Main(ctx context.Context, args, environ []string, stdout io.Writer) error {
	return run(ctx, args, environ, stdout)
}

// ExitCode is the exit status of an error Main returned: 0 for nil, 2
// (config.ExitCodeInvalid) for invalid configuration or usage, else 1.
func ExitCode(err error) int {
	var usage *usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, config.ErrInvalid) || errors.As(err, &usage):
		return config.ExitCodeInvalid
	default:
		return 1
	}
}

// usageError is a command line the commands cannot run: exit status 2.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func run(ctx context.Context, args, environ []string, stdout io.Writer) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	app := &app{environ: environ, stdout: stdout}
	root := &cobra.Command{
		Use:           "tierctl",
		Short:         "Operate tierq: migrations, demo work, queue progress, escalation, dead letters",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stdout)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	root.AddCommand(app.migrateCommand(), app.enqueueCommand(), app.watchCommand(), app.demoCommand(), app.escalateCommand(), app.dlqCommand(), app.subscriptionsCommand(), app.queuesCommand(), app.escalationsCommand(), app.benchCommand(), app.benchWorkerCommand(), app.benchProcessCommand())
	root.SetArgs(args[1:])
	err := root.ExecuteContext(ctx)
	if err != nil && strings.HasPrefix(err.Error(), "unknown command") {
		return &usageError{err} // cobra's own error for a mistyped subcommand
	}
	return err
}

// usageArgs wraps a cobra argument check so that its failure exits 2.
func usageArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return &usageError{err}
		}
		return nil
	}
}

// app is what every subcommand shares: the environment it was given and,
// once a command needs it, the configuration and a database pool.
type app struct {
	environ []string
	stdout  io.Writer
}

// referenceRegistry is the reference app's registry (jobs.Registry) without
// its workers' dependencies: tierctl runs none of their workers.
func referenceRegistry() (*service.Registry, error) { return jobs.Registry(jobs.Deps{}) }

// serviceQueues are the queues of the reference app's services, the queues
// tierctl escalates jobs between, replays dead letters into and watches.
func (a *app) serviceQueues() ([]string, error) {
	registry, err := referenceRegistry()
	if err != nil {
		return nil, err
	}
	return registry.Queues(), nil
}

// connect loads the configuration, opens a pool and checks that the
// schema has every migration (migrate.Check: a *migrate.SchemaError says
// to run `tierctl migrate`, exit status 1); the caller closes the pool. A
// database that does not answer is not an error here: the command meets
// it at its first query and reports it as before (watch keeps retrying).
func (a *app) connect(ctx context.Context) (config.CLI, *pgxpool.Pool, error) {
	cfg, pool, err := a.open(ctx)
	if err != nil {
		return cfg, nil, err
	}
	var schemaErr *migrate.SchemaError
	if err := migrate.Check(ctx, pool, cfg.Schema); errors.As(err, &schemaErr) {
		pool.Close()
		return cfg, nil, err
	}
	return cfg, pool, nil
}

// open loads the configuration and opens a pool without checking the
// schema (tierctl migrate); the caller closes it.
func (a *app) open(ctx context.Context) (config.CLI, *pgxpool.Pool, error) {
	cfg, err := config.Load[config.CLI](a.environ)
	if err != nil {
		return cfg, nil, err
	}
	poolConfig, err := cfg.PoolConfig()
	if err != nil {
		return cfg, nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, poolConfig)
	if err != nil {
		return cfg, nil, fmt.Errorf("connect to database: %w", err)
	}
	return cfg, pool, nil
}
