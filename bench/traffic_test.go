package bench_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/bench"
	"github.com/tierq/tierq/examples/thumbnail"
	"github.com/tierq/tierq/internal/proctest"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/jobs"
)

// appRoleEnv tells this test binary, re-executed as a process of the
// traffic scenario's application, which one to be (TestMain).
const appRoleEnv = "TIERQ_BENCH_APP_ROLE"

// trafficApp is bench.Options.AppCommand for the tests: this test binary
// re-executed as the reference app's worker, the thumbnail example's
// worker (with directories it never reads: the traffic is the load-test
// workload), or the scheduler and API of both.
func trafficApp(t *testing.T) func(bench.Role, []string) *exec.Cmd {
	return func(role bench.Role, environ []string) *exec.Cmd {
		name := string(role)
		for _, kv := range environ {
			if kv == "WORKER_SERVICE="+thumbnail.ServiceName {
				name = thumbnail.ServiceName
				environ = append(environ, "THUMBNAIL_SOURCE_DIR="+os.TempDir(), "THUMBNAIL_OUTPUT_DIR="+os.TempDir())
			}
		}
		cmd, _ := proctest.Command(t, append(environ, appRoleEnv+"="+name)...)
		return cmd
	}
}

// TestTrafficAccountsForEveryJob runs the traffic scenario at tiny sizes
// through real processes (this test binary re-executed): a worker of each
// of the reference app's services and the thumbnail example's, two
// schedulers and the API; a run with fair share on and one off, then a
// worker and the leading scheduler killed once the on run settled. Every
// job of every class ended as planned, none lost or left held, the
// unfetchable rows stayed and were reported, the API and the metrics
// agreed with SQL at every sample, another scheduler took over, and the
// schema and processes are gone. No speed is checked: that is what tierctl
// bench traffic is for.
func TestTrafficAccountsForEveryJob(t *testing.T) {
	db := testdb.New(t)
	prefix := schemaPrefix(t)
	registry, err := thumbnail.WithReference(jobs.Deps{})
	require.NoError(t, err)
	opts := bench.Tiny(bench.Options{DatabaseURL: testdb.URL(), Registry: registry, AppCommand: trafficApp(t)}, prefix)

	var r bench.Report
	require.NoError(t, bench.Run(context.Background(), "traffic", opts, &r))
	require.Zero(t, db.Count(t, `SELECT count(*) FROM pg_namespace WHERE starts_with(nspname, $1)`, prefix+"_"), "the schema is dropped")

	tr := r.Traffic
	require.NotNil(t, tr)
	for _, row := range tr.Table() {
		t.Log(strings.Join(row, " | "))
	}
	for _, row := range r.Rows() {
		t.Log(row.Measure, ": ", row.Value)
	}
	require.Equal(t, 40, tr.Tenants)
	require.Equal(t, 120, tr.LargestTenantJobs)
	require.Equal(t, 3_200, tr.LongTenantBytes)
	require.Equal(t, 4, tr.Unfetchable, "two in the first service's priority and default queues, one in each other's scheduled queue")
	require.Equal(t, map[string]int{"worker analyzer": 1, "worker specgen": 1, "worker thumbnailer": 1, "scheduler": 2, "api": 1}, tr.Processes)
	require.Equal(t, 5, tr.Workers["analysis_priority"])
	require.Equal(t, 1, tr.Workers["thumbnails_default"])
	for _, class := range []string{"plain", "retry_short", "retry_backoff", "fail_short", "snooze", "bad_args"} {
		require.Positive(t, tr.Mix[class], "class %s in the tests' traffic", class)
	}
	require.Zero(t, tr.Mix["fail_backoff"]+tr.Mix["snooze_long"], "no delay of 5 s or more at the tests' sizes")

	require.Len(t, tr.Runs, 3, "the warm-up (on), on, then off; the kills after the second on run")
	require.Equal(t, []string{"warmup", "throughput", "throughput"}, []string{tr.Runs[0].Phase, tr.Runs[1].Phase, tr.Runs[2].Phase})
	// The ratio counts the throughput runs alone.
	require.InDelta(t, tr.Runs[1].JobsPerS/tr.Runs[2].JobsPerS, tr.Ratio, 0.001)
	for i, run := range tr.Runs {
		require.Equal(t, i < 2, run.FairShare)
		require.Equal(t, tr.Jobs, run.Completed+run.Cancelled+run.DeadLettered, "run %d: every job ended: %v", i+1, run.Examples)
		require.Equal(t, tr.Mix["bad_args"], run.Cancelled, "run %d", i+1)
		require.Equal(t, tr.Mix["fail_short"], run.DeadLettered, "run %d", i+1)
		require.Positive(t, run.JobsPerS, "run %d", i+1)
		require.Positive(t, run.Samples, "run %d: the API and the metrics were sampled", i+1)
		require.Zero(t, run.SamplesOutside, "run %d: %v", i+1, run.SampleViolations)
		require.Equal(t, tr.Unfetchable, run.UnfetchableLeft, "run %d", i+1)
		require.Positive(t, run.Small.Tenants, "run %d", i+1)
		require.GreaterOrEqual(t, run.Small.Position, 1.0)
	}
	require.Positive(t, tr.Ratio)
	require.Equal(t, "worker-analyzer-2", tr.Faults.KilledWorker, "the warm-up ran worker-analyzer-1")
	require.True(t, strings.HasPrefix(tr.Faults.KilledScheduler, "scheduler-"))
	require.NotEqual(t, tr.Faults.KilledScheduler, tr.Faults.NewLeader, "another scheduler took over")
	require.Positive(t, tr.Faults.TakeoverSeconds)
	for _, c := range tr.Checks {
		if c.Name == "small_tenants_within_bound" {
			continue // order under a loaded test machine: tierctl bench's
		}
		require.True(t, c.Met, "check %s: %d violations (%s)", c.Name, c.Violations, c.Detail)
	}

	raw, err := json.Marshal(r)
	require.NoError(t, err)
	var doc struct {
		Traffic map[string]any `json:"traffic"`
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	for _, k := range []string{"ratio", "jobs_per_s_on", "small", "small_off", "faults", "checks", "runs", "mix"} {
		require.Contains(t, doc.Traffic, k)
	}
	require.Len(t, tr.Table(), 4, "a header and a row per run")
}

func TestTrafficNeedsAnAppCommand(t *testing.T) {
	registry, err := thumbnail.WithReference(jobs.Deps{})
	require.NoError(t, err)
	_, err = bench.Traffic(context.Background(), bench.Options{DatabaseURL: testdb.URL(), Registry: registry})
	require.ErrorContains(t, err, "needs Options.AppCommand")
}
