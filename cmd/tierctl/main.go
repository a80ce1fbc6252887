// Command tierctl is tierq's operator command line: package ctl's commands
// (see its documentation for each command and the environment it reads),
// with the commands of tierq's reference app added: demo, bench (and the
// hidden processes it starts), and enqueue's demo analysis jobs, inserted
// without --kind. They live here so that package ctl, which an application
// embeds in its own binary, links none of the reference app.
package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/spf13/cobra"

	"github.com/tierq/tierq/ctl"
	"github.com/tierq/tierq/tiers"
)

func main() {
	if err := run(context.Background(), os.Args, os.Environ(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "tierctl:", err)
		os.Exit(ctl.ExitCode(err))
	}
}

// run runs the stock tierctl with args (args[0] is the program's name) in
// environ, writing to stdout, until the command ends or the process gets
// SIGINT or SIGTERM (ctl.Run).
func run(ctx context.Context, args, environ []string, stdout io.Writer) error {
	a := &app{environ: environ, stdout: stdout}
	return ctl.Run(ctx, ctl.Config{
		Environ:  environ,
		Stdout:   stdout,
		Enqueue:  a.analysisEnqueue(),
		Commands: []*cobra.Command{a.demoCommand(), a.benchCommand(), a.benchWorkerCommand(), a.benchProcessCommand()},
	}, args)
}

// app is what the reference app's commands share: the environment tierctl
// was given and where it writes.
type app struct {
	environ []string
	stdout  io.Writer
}

// usageArgs wraps a cobra argument check so that its failure exits 2.
func usageArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return &ctl.UsageError{Err: err}
		}
		return nil
	}
}

// connectProducer connects as ctl's inserting commands do
// (ctl.ConnectProducer); the caller closes the pool.
func (a *app) connectProducer(ctx context.Context) (*pgxpool.Pool, *river.Client[pgx.Tx], error) {
	return ctl.ConnectProducer(ctx, a.environ)
}

// demoUserID is the user id of the i-th demo job: 7 users per tier, as
// ctl's enqueue makes them.
func demoUserID(prefix string, tier tiers.Tier, i int) string {
	return fmt.Sprintf("%s_%s_%d", prefix, tier, i%7)
}
