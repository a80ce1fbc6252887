// Command api serves tierq's HTTP API (package api) for the reference app's
// services (jobs.Registry): tier-aware enqueue for producers, operations for
// operators, /healthz, /readyz and /metrics, and River UI at /riverui/ for
// operators (the admin token as the Basic auth password, any user name).
//
// API_TOKEN and API_ADMIN_TOKEN are required: there is no open-by-default
// API. An analysis target outside ANALYSIS_ROOTS is refused (400). SIGINT or
// SIGTERM stops accepting connections and lets requests in flight finish for
// up to 10 seconds. Invalid configuration exits 2 before any connection is
// made. A schema missing a River or tierq migration exits 1 with the
// versions found and needed and "run `tierctl migrate`" (migrate.Check); a
// database that does not answer at start is logged as a warning and the API
// serves anyway (/readyz 503 until it answers). docs/operations.md,
// "Schema version".
//
// The process is api.Run; a team's API of the reference services and its
// own is the same few lines (example in package api).
package main

import (
	"context"
	"io"
	"os"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/internal/refapp"
)

func main() {
	config.Exit("api", run(context.Background(), os.Args, os.Environ(), os.Stdout))
}

func run(ctx context.Context, _ []string, environ []string, stdout io.Writer) error {
	return refapp.RunAPI(ctx, environ, stdout)
}
