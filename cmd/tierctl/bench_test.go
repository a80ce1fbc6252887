package main

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/proctest"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/loadtest"
)

// TestScaleoutWorkerIsTheReferenceAppsWorker: the hidden bench-worker
// command that tierctl bench scaleout starts (benchWorker) is a real worker
// process of the reference app, configured by its environment alone: it
// works the load-test workload in the service's queues, and stops cleanly
// on SIGTERM. It stays out of tierctl's help.
func TestScaleoutWorkerIsTheReferenceAppsWorker(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()

	out, err := runTierctl(t, nil, "--help")
	require.NoError(t, err, out)
	require.NotContains(t, out, benchWorkerUse)

	// benchWorker's command, run as this test binary (proctest): the same
	// arguments and exactly the environment given.
	environ := append(dbEnv(db), "WORKER_SERVICE="+jobs.ServiceAnalyzer, "LOAD_TEST_WORKLOAD=true", "LOG_FORMAT=json")
	cmd := benchWorker("/nonexistent/tierctl")(environ)
	require.Equal(t, []string{"/nonexistent/tierctl", benchWorkerUse}, cmd.Args)
	require.Equal(t, environ, cmd.Env)
	child, output := proctest.Command(t, cmd.Env...)
	child.Args = append(child.Args, cmd.Args[1:]...)
	require.NoError(t, child.Start())
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()
	t.Cleanup(func() {
		_ = child.Process.Kill()
	})
	proctest.WaitOutput(t, output, `"msg":"worker started"`, 30*time.Second)

	res, err := db.Producer(t).Insert(ctx, loadtest.Args{SleepMS: 1}, &river.InsertOpts{Queue: "analysis_priority"})
	require.NoError(t, err)
	testdb.WaitFor(t, 20*time.Second, "the load-test job completed", func() bool {
		return db.Count(t, `SELECT count(*) FROM river_job WHERE id = $1 AND state = 'completed'`, res.Job.ID) == 1
	})

	require.NoError(t, child.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-exited:
		require.NoError(t, err, output.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("bench-worker did not stop on SIGTERM:\n%s", output)
	}
	require.Contains(t, output.String(), "worker stopped")
}
