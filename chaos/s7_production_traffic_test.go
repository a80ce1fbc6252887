//go:build chaos

package chaos_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/bench"
	"github.com/tierq/tierq/examples/thumbnail"
	"github.com/tierq/tierq/jobs"
)

// TestProductionTraffic is tierctl bench traffic's short version
// (bench.Options.TrafficShort) on the suite's cluster, through the real
// binaries: the reference app's workers (cmd/worker) and the thumbnail
// example's (thumbnail-worker), two per service, two replicas of the
// scheduler of both (thumbnail-scheduler-with-reference) and their API
// (thumbnail-api-with-reference),
// fair share and lending on. 1,000 tenants of Zipf sizes, no tenant, a
// 200-byte tenant and a 3,200-byte one written with SQL, retries after
// River's backoff and a short NextRetry, jobs failing every attempt,
// snoozes, bad args and rows of a kind no worker runs; midway a worker
// running jobs and the leading scheduler are killed with SIGKILL. Every
// check of the scenario must hold: every job ended as planned (completed,
// cancelled with its reason, or dead-lettered), none lost, none stranded or
// left held, none ran twice; the unfetchable rows stayed and were reported;
// the API's and the metrics' held counts and oldest waits between SQL reads
// at every sample; the killed worker's jobs rescued under a new leader. The
// small tenants' first starts against the bound of docs/fairness.md are
// measured and printed, not judged: that is the benchmark's.
func TestProductionTraffic(t *testing.T) {
	require.True(t, suite.cluster.running(), "the cluster is down (an earlier scenario left it stopped)")
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, suite.cluster.url("postgres"))
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "CREATE DATABASE chaos_production_traffic")
	require.NoError(t, err)
	require.NoError(t, admin.Close(ctx))
	url := strings.Replace(suite.cluster.url("chaos_production_traffic"), "postgres@", "postgres:"+dbPassword+"@", 1)

	registry, err := thumbnail.WithReference(jobs.Deps{})
	require.NoError(t, err)
	started := time.Now()
	var r bench.Report
	require.NoError(t, bench.Run(ctx, "traffic", bench.Options{
		DatabaseURL: url, Registry: registry, TrafficShort: true, AppCommand: suiteApp,
	}, &r))
	took := time.Since(started)

	tr := r.Traffic
	require.NotNil(t, tr)
	require.Len(t, tr.Runs, 1, "the faults phase")
	run := tr.Runs[0]
	for _, c := range tr.Checks {
		if c.Name == "small_tenants_within_bound" {
			// A measurement of fair share's bound, reported in the line
			// below and judged by tierctl bench traffic: a newcomer held
			// behind a better priority can wait behind later and worse
			// work (docs/benchmarks.md, traffic). This suite proves
			// nothing is lost.
			continue
		}
		require.True(t, c.Met, "check %s: %d violations (%s); runs: %+v", c.Name, c.Violations, c.Detail, tr.Runs)
	}
	require.Positive(t, tr.Faults.KilledRunning, "the kill hit no running job: the scenario proved nothing")
	// Fair share acted: by turns (the default) it holds nothing, but the
	// small tenants start within about their bound (p99 of position over
	// bound 1 in tierctl bench traffic's on runs), where first in first
	// out puts them 40 times past it (its off runs, 2026-11-28).
	require.Less(t, run.Small.OverBound, 10.0, "the small tenants waited as without fair share")
	fmt.Printf("CHAOS %-18s inserted=%d completed=%d cancelled=%d dead_lettered=%d lost=%d redelivered=%d recover=%s settle=%s"+
		" tenants=%d unfetchable=%d held_peak=%d lent=%d samples=%d outside=%d small_over_bound_p99=%g inverted_tenants=%d killed_running=%d takeover=%gs took=%s\n",
		"production-traffic", run.Jobs, run.Completed, run.Cancelled, run.DeadLettered, run.Lost, tr.Faults.Rescued,
		round(time.Duration(tr.Faults.RecoverySeconds*float64(time.Second))), round(time.Duration(run.SettleSeconds*float64(time.Second))),
		tr.Tenants+3, run.UnfetchableLeft, run.HeldPeak, run.Lent, run.Samples, run.SamplesOutside, run.Small.OverBound,
		run.Small.InvertedTenants, tr.Faults.KilledRunning, tr.Faults.TakeoverSeconds, round(took))
}

// suiteApp is bench.Options.AppCommand on the suite's binaries, run as the
// unprivileged user: cmd/worker for the reference app's services,
// thumbnail-worker for the thumbnail example's (its directories are never
// read: the traffic is the load-test workload), and the example's
// scheduler and API, which serve both.
func suiteApp(role bench.Role, environ []string) *exec.Cmd {
	binary := map[bench.Role]string{bench.RoleWorker: "worker", bench.RoleScheduler: "thumbnail-scheduler-with-reference", bench.RoleAPI: "thumbnail-api-with-reference"}[role]
	if role == bench.RoleWorker && slices.Contains(environ, "WORKER_SERVICE="+thumbnail.ServiceName) {
		binary = "thumbnail-worker"
		environ = append(environ, "THUMBNAIL_SOURCE_DIR="+suite.base, "THUMBNAIL_OUTPUT_DIR="+suite.base)
	}
	cmd := exec.Command(filepath.Join(suite.bin, binary)) //nolint:gosec // the suite's own binaries
	cmd.Env = environ
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: suite.cred, Pdeathsig: syscall.SIGKILL}
	return cmd
}
