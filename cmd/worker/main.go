// Command worker runs one worker deployment of tierq's reference app: the
// three River queues of the service named by WORKER_SERVICE (analyzer or
// specgen, jobs.Registry), with worker counts named after the service
// (ANALYZER_QUEUE_PRIORITY_WORKERS, …) and fetch tuning from the environment
// (see .env.example). An analyzer deployment analyses only targets that
// resolve into ANALYSIS_ROOTS and cancels the other jobs (docs/jobs.md).
//
// SIGINT or SIGTERM stops fetching and lets running jobs finish for up to
// SOFT_STOP_TIMEOUT; jobs still running then are cancelled (River records
// them as errored and retries them), and the process exits 0. A second signal
// kills the process at once. Invalid configuration exits 2 before any
// database connection is made. A schema missing a River or tierq migration
// exits 1 with the versions found and needed and "run `tierctl migrate`"
// (migrate.Check); one a newer tierq migrated is accepted and logged.
// docs/operations.md, "Schema version".
//
// Each job kind has its own timeout (service.Timeout, declared in package
// jobs); JOB_TIMEOUT bounds only workers registered with River directly,
// none of the reference app's, and setting it logs a warning.
package main

import (
	"context"
	"io"
	"os"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/internal/refapp"
)

func main() {
	config.Exit("worker", run(context.Background(), os.Args, os.Environ(), os.Stdout))
}

func run(ctx context.Context, _ []string, environ []string, stdout io.Writer) error {
	return refapp.RunWorker(ctx, environ, stdout)
}
