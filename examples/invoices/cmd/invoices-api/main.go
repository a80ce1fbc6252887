// Command invoices-api is the invoices service's HTTP API: POST /v1/jobs
// takes kinds invoice_render and invoice_send (and no other), routed by the
// user's tier; the operators' endpoints, /metrics and River UI serve the
// invoices queues. It reads a tierq API's variables (.env.example); a bad
// one exits 2 naming it.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/invoices"
	"github.com/tierq/tierq/api"
	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/service"
)

func main() {
	if err := run(context.Background(), os.Environ(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "invoices-api:", err)
		if errors.Is(err, config.ErrInvalid) {
			os.Exit(config.ExitCodeInvalid)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, environ []string, stdout io.Writer) error {
	cfg, err := config.Load[config.API](environ)
	if err != nil {
		return err
	}
	return api.Run(ctx, cfg, cfg.NewLogger(stdout), func(*pgxpool.Pool) (*service.Registry, error) {
		return invoices.Registry(invoices.Deps{})
	})
}
