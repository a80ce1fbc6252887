// Package ctl is tierctl, tierq's operator command line, as a package:
// cmd/tierctl runs its commands with the reference app's own added, and an
// application can build the same commands into its own binary with Command.
//
//	tierctl migrate            apply River's and tierq's migrations (idempotent)
//	tierctl services ...       list the services known in the database; forget one
//	tierctl enqueue            insert jobs of any known kind (--kind) across every tier
//	tierctl watch              live view: queues, waits by tier, dead letters, leader
//	tierctl escalate JOB_ID    move a queued job to another queue (audited)
//	tierctl dlq ...            list, show, replay, purge and drain dead letters
//	tierctl subscriptions ...  set and list users' tiers
//	tierctl queues ...         list queues; pause and resume one (River's pause)
//	tierctl escalations list   the escalation audit, newest first
//	tierctl limits ...         tenant limits by tier; a tenant's limits and quota; overrides
//
// It reads DATABASE_URL (and DATABASE_SCHEMA, LOG_LEVEL, LOG_FORMAT) from the
// environment it is given (Config.Environ), by design: ctl is a command
// line, whose configuration is the environment, and it reads it with
// package config (config.CLI), the one place tierq's variables, defaults
// and exit-2 messages live. It is therefore not a library package
// configured in Go as worker, scheduler and api are: it is the only
// package outside the commands, examples and reference app that imports
// config, and a binary embedding it links config. Invalid configuration or
// usage exits with status 2. Every
// command but migrate first checks that the schema has every migration this
// build needs (migrate.Check); when it does not, it exits 1 saying which
// versions it found and needs and to run `tierctl migrate`.
//
// # Which services
//
// tierctl links no application's code. It learns the services from the
// database it points at: every worker, scheduler and API process records its
// registry's services there when it starts (service.Registry.Record, table
// tierq_services: name, queues, kinds with their aliases and args' JSON
// fields), and escalate, dlq replay --to-queue, watch, queues and enqueue
// --kind work on the recorded services. A record stays until `tierctl
// services forget` deletes it, since a service's jobs outlive its processes.
// Built into an application's binary (Command with Config.Registry), the
// registry's services are known without a record and win over it.
//
// # The stock tierctl's own commands
//
// Package ctl imports none of tierq's reference app (package jobs), its
// examples or its benchmarks, so a binary that embeds it links none of them.
// The stock tierctl (cmd/tierctl) adds the commands that need them through
// Config: demo and bench (Config.Commands), and enqueue's demo analysis
// jobs, inserted without --kind (Config.Enqueue); they insert the reference
// app's kinds whatever is recorded. Without Config.Enqueue, enqueue
// requires --kind.
package ctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/migrate"
	"github.com/tierq/tierq/service"
)

// Main runs tierctl's commands with no Registry and none of the stock
// tierctl's own (Run with a Config of environ and stdout alone) with args
// (args[0] is the program's name), until the command ends or the process
// gets SIGINT or SIGTERM; ExitCode is the exit status of its error.
func Main(ctx context.Context, args, environ []string, stdout io.Writer) error {
	return Run(ctx, Config{Environ: environ, Stdout: stdout}, args)
}

// Config configures the commands Command makes. Its zero value is tierctl's
// commands without the stock tierctl's own (demo, bench, enqueue without
// --kind) on os.Stdout with an empty environment.
type Config struct {
	// Registry, when set, is the application's registry: its services are
	// known to every command whether or not a process recorded them in the
	// database, and enqueue --kind decodes a kind's args with its args type
	// (service.Kind.DecodeArgs, as the API does) rather than checking their
	// keys against the recorded field names, and inserts them as the API
	// does (producer.Insert: the kind's attempts, dedup that upgrades). The
	// services recorded in the database are known too; one that shares a
	// name, a queue or a kind with one of the registry's is left out: the
	// registry wins.
	//
	// Default: nil, the services recorded in the database alone.
	Registry *service.Registry

	// Environ is the environment the commands read their configuration
	// from (DATABASE_URL, DATABASE_SCHEMA, …), as os.Environ gives it.
	// Default: none (pass os.Environ()).
	Environ []string

	// Stdout is where the commands write. Default: os.Stdout.
	Stdout io.Writer

	// Commands are extra commands added to the root after tierctl's own,
	// such as the stock tierctl's demo and bench (cmd/tierctl). They write
	// where the root does, and ExitCode gives 2 for a bad flag of theirs or
	// for an error of theirs that is a *UsageError.
	//
	// Default: none.
	Commands []*cobra.Command

	// Enqueue, when set, is what enqueue inserts without --kind: the stock
	// tierctl's are the reference app's demo analysis jobs (cmd/tierctl).
	// Its flags and help are enqueue's too.
	//
	// Default: nil, enqueue requires --kind.
	Enqueue *Enqueue
}

// Command is tierctl's command tree, named "tierctl" (set Use to rename
// it), for an application to run as its own binary's root or add under it
// (root.AddCommand). Run it with ExecuteContext: the commands stop when the
// context ends (Main's ends with SIGINT or SIGTERM). Its errors are not
// printed; ExitCode gives the exit status of one.
//
//	cmd := ctl.Command(ctl.Config{Registry: registry, Environ: os.Environ()})
//	if err := cmd.ExecuteContext(ctx); err != nil {
//		fmt.Fprintln(os.Stderr, "invoicesctl:", err)
//		os.Exit(ctl.ExitCode(err))
//	}
func Command(cfg Config) *cobra.Command {
	stdout := cfg.Stdout
	if stdout == nil {
		stdout = os.Stdout
	}
	app := &app{environ: cfg.Environ, stdout: stdout, registry: cfg.Registry, enqueue: cfg.Enqueue}
	root := &cobra.Command{
		Use:           "tierctl",
		Short:         "Operate tierq: migrations, demo work, queue progress, escalation, dead letters",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stdout)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &UsageError{err} })
	root.AddCommand(app.migrateCommand(), app.servicesCommand(), app.enqueueCommand(), app.watchCommand(), app.escalateCommand(), app.dlqCommand(), app.subscriptionsCommand(), app.queuesCommand(), app.escalationsCommand(), app.limitsCommand())
	root.AddCommand(cfg.Commands...)
	return root
}

// ExitCode is the exit status of an error Main or Run returned: 0 for nil,
// 2 (config.ExitCodeInvalid) for invalid configuration or usage (a
// *UsageError), else 1.
func ExitCode(err error) int {
	var usage *UsageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, config.ErrInvalid) || errors.As(err, &usage) || strings.HasPrefix(err.Error(), "unknown command"):
		return config.ExitCodeInvalid
	default:
		return 1
	}
}

// UsageError is a command line the commands cannot run: ExitCode gives 2
// for it. Its message is Err's. A command of Config.Commands returns one
// for a bad argument.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Run runs the commands Command(cfg) makes with args (args[0] is the
// program's name) until the command ends or the process gets SIGINT or
// SIGTERM; ExitCode is the exit status of its error. cmd/tierctl runs the
// stock tierctl with it.
func Run(ctx context.Context, cfg Config, args []string) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	root := Command(cfg)
	root.SetArgs(args[1:])
	err := root.ExecuteContext(ctx)
	if err != nil && strings.HasPrefix(err.Error(), "unknown command") {
		return &UsageError{err} // cobra's own error for a mistyped subcommand
	}
	return err
}

// usageArgs wraps a cobra argument check so that its failure exits 2.
func usageArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return &UsageError{err}
		}
		return nil
	}
}

// app is what every subcommand shares: the environment it was given and,
// once a command needs it, the configuration and a database pool.
type app struct {
	environ  []string
	stdout   io.Writer
	registry *service.Registry // Config.Registry; nil for the stock tierctl
	enqueue  *Enqueue          // Config.Enqueue; nil: enqueue requires --kind
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
