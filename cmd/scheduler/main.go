// Command scheduler runs tierq's scheduler deployment for the reference
// app's services (jobs.Registry): the only River client allowed to lead. On
// the leader it runs River's maintenance (retries, scheduled-job promotion,
// rescue of stuck jobs of every kind, cleanup) and the periodic jobs: the
// aging and escalation sweeps, the dead-letter drain, and the analyzer's
// re-analysis and retention cron jobs. Run two replicas; one leads, the
// other takes over when it goes away. See docs/scheduling.md.
//
// Invalid configuration exits 2 before any database connection is made; so
// does a RESCUE_STUCK_JOBS_AFTER that is not longer than the timeout of
// every job kind (scheduler.Timeouts: each kind declares its own), since the rescuer
// would then retry jobs a worker may still be running. A schema missing a
// River or tierq migration exits 1 with the versions found and needed and
// "run `tierctl migrate`" (migrate.Check); one a newer tierq migrated is
// accepted and logged. docs/operations.md, "Schema version".
//
// The process is scheduler.Run; a team's scheduler of its own services is
// the same few lines (example in package scheduler).
package main

import (
	"context"
	"io"
	"os"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/internal/refapp"
)

func main() {
	config.Exit("scheduler", run(context.Background(), os.Args, os.Environ(), os.Stdout))
}

func run(ctx context.Context, _ []string, environ []string, stdout io.Writer) error {
	return refapp.RunScheduler(ctx, environ, stdout)
}
