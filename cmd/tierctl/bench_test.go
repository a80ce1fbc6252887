package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/bench"
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
	environ := append(dbEnv(t, db), "WORKER_SERVICE="+jobs.ServiceAnalyzer, "LOAD_TEST_WORKLOAD=true", "LOG_FORMAT=json")
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

// TestTrafficProcessesAreTheApplications: the hidden bench-process command
// that tierctl bench traffic starts (benchApp) runs the thumbnail example's
// worker for WORKER_SERVICE=thumbnailer (working the load-test workload in
// its queues, without directories of its own), and the scheduler and API
// of the reference app's services and the thumbnail example's: the API
// lists the thumbnail queues. Each stops cleanly on SIGTERM.
func TestTrafficProcessesAreTheApplications(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()

	out, err := runTierctl(t, nil, "--help")
	require.NoError(t, err, out)
	require.NotContains(t, out, benchProcessUse)

	start := func(role bench.Role, want string, environ ...string) (*exec.Cmd, *proctest.Buffer, chan error) {
		environ = append(append(dbEnv(t, db), "LOG_FORMAT=json"), environ...)
		cmd := benchApp("/nonexistent/tierctl")(role, environ)
		require.Equal(t, []string{"/nonexistent/tierctl", benchProcessUse, string(role)}, cmd.Args)
		require.Equal(t, environ, cmd.Env)
		child, output := proctest.Command(t, cmd.Env...)
		child.Args = append(child.Args, cmd.Args[1:]...)
		require.NoError(t, child.Start())
		exited := make(chan error, 1)
		go func() { exited <- child.Wait() }()
		t.Cleanup(func() { _ = child.Process.Kill() })
		proctest.WaitOutput(t, output, want, 30*time.Second)
		return child, output, exited
	}
	stop := func(child *exec.Cmd, output *proctest.Buffer, exited chan error) {
		require.NoError(t, child.Process.Signal(syscall.SIGTERM))
		select {
		case err := <-exited:
			require.NoError(t, err, output.String())
		case <-time.After(30 * time.Second):
			t.Fatalf("bench-process did not stop on SIGTERM:\n%s", output)
		}
	}

	worker, workerOut, workerExited := start(bench.RoleWorker, `"msg":"worker started"`, "WORKER_SERVICE=thumbnailer", "LOAD_TEST_WORKLOAD=true")
	res, err := db.Producer(t).Insert(ctx, loadtest.Args{SleepMS: 1}, &river.InsertOpts{Queue: "thumbnails_priority"})
	require.NoError(t, err)
	testdb.WaitFor(t, 20*time.Second, "the load-test job completed", func() bool {
		return db.Count(t, `SELECT count(*) FROM river_job WHERE id = $1 AND state = 'completed'`, res.Job.ID) == 1
	})
	stop(worker, workerOut, workerExited)

	scheduler, schedulerOut, schedulerExited := start(bench.RoleScheduler, `"msg":"scheduler started"`, "RESCUE_STUCK_JOBS_AFTER=61s")
	stop(scheduler, schedulerOut, schedulerExited)

	api, apiOut, apiExited := start(bench.RoleAPI, `"msg":"api listening"`, "API_ADDR=127.0.0.1:0", "API_TOKEN=producer-token-0123456789", "API_ADMIN_TOKEN=admin-token-0123456789")
	var listening struct {
		Addr string `json:"addr"`
	}
	for _, line := range strings.Split(apiOut.String(), "\n") {
		if strings.Contains(line, `"msg":"api listening"`) {
			require.NoError(t, json.Unmarshal([]byte(line), &listening))
		}
	}
	status, body := proctest.CallJSON(t, http.MethodGet, "http://"+listening.Addr+"/v1/queues", "admin-token-0123456789", nil)
	require.Equal(t, http.StatusOK, status, "%v", body)
	require.Contains(t, fmt.Sprint(body["queues"]), "thumbnails_priority")
	stop(api, apiOut, apiExited)

	_, err = runTierctl(t, dbEnv(t, db), benchProcessUse, "sweeper")
	require.ErrorContains(t, err, `unknown role "sweeper"`)
}
