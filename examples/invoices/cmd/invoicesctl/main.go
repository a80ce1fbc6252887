// Command invoicesctl is tierctl's commands (package ctl) built into a
// binary of the invoices application's own, with its registry: the invoices
// service is known without a record in the database, and enqueue --kind
// decodes --args into its args types with every check the API runs. It
// reads tierctl's variables (DATABASE_URL, DATABASE_SCHEMA, …); usage and
// configuration errors exit 2.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"example.com/invoices"
	"github.com/tierq/tierq/ctl"
)

func main() {
	if err := run(context.Background(), os.Args, os.Environ(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "invoicesctl:", err)
		os.Exit(ctl.ExitCode(err)) // 2 for usage and configuration errors
	}
}

func run(ctx context.Context, args, environ []string, stdout io.Writer) error {
	registry, err := invoices.Registry(invoices.Deps{}) // no mailer: the CLI runs no worker
	if err != nil {
		return err
	}
	cmd := ctl.Command(ctl.Config{Registry: registry, Environ: environ, Stdout: stdout})
	cmd.Use = "invoicesctl"
	cmd.SetArgs(args[1:])
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return cmd.ExecuteContext(ctx) // the command stops when ctx ends
}
