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

	"example.com/invoices"
	"github.com/tierq/tierq/api"
	"github.com/tierq/tierq/config"
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
	registry, err := invoices.Registry(invoices.Deps{})
	if err != nil {
		return err
	}
	apiConfig, err := cfg.Config(registry, cfg.NewLogger(stdout)) // an api.Config
	if err != nil {
		return err
	}
	return api.Run(ctx, apiConfig)
}
