package main

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/proctest"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/jobs"
)

// The tests start this test binary as the real worker process (see
// internal/proctest).
func TestMain(m *testing.M) {
	proctest.RunMain(main)
	os.Exit(m.Run())
}

func TestBadEnvironmentExitsTwo(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		environ []string
		want    []string
	}{
		{name: "nothing set", want: []string{`DATABASE_URL=""`, "required", `WORKER_SERVICE=""`}},
		{name: "typo in worker count", environ: []string{
			"DATABASE_URL=postgres://127.0.0.1:1/none", "WORKER_SERVICE=analyzer", "ANALYZER_QUEUE_PRIORITY_WORKERS=fiv",
		}, want: []string{`ANALYZER_QUEUE_PRIORITY_WORKERS="fiv"`, "not an integer"}},
		{name: "unknown service", environ: []string{
			"DATABASE_URL=postgres://127.0.0.1:1/none", "WORKER_SERVICE=billing",
		}, want: []string{`WORKER_SERVICE="billing": unknown service (want analyzer or specgen)`}},
		{name: "other service's count", environ: []string{
			"DATABASE_URL=postgres://127.0.0.1:1/none", "WORKER_SERVICE=analyzer", "SPECGEN_QUEUE_SCHEDULED_WORKERS=-1",
		}, want: []string{`SPECGEN_QUEUE_SCHEDULED_WORKERS="-1": must be between 0 and 10000`}},
		{name: "serves no queue", environ: []string{
			"DATABASE_URL=postgres://127.0.0.1:1/none", "WORKER_SERVICE=specgen",
			"SPECGEN_QUEUE_PRIORITY_WORKERS=0", "SPECGEN_QUEUE_DEFAULT_WORKERS=0", "SPECGEN_QUEUE_SCHEDULED_WORKERS=0",
		}, want: []string{`WORKER_SERVICE="specgen": serves no queue: set at least one of SPECGEN_QUEUE_{PRIORITY,DEFAULT,SCHEDULED}_WORKERS above 0`}},
		{name: "password not echoed", environ: []string{
			"DATABASE_URL=postgres://tierq:hunter2@db/x?sslmode=nope", "WORKER_SERVICE=analyzer",
		}, want: []string{"DATABASE_URL="}},
		{name: "relative analysis root", environ: []string{
			"DATABASE_URL=postgres://127.0.0.1:1/none", "WORKER_SERVICE=analyzer", "ANALYSIS_ROOTS=/srv/repos:checkouts",
		}, want: []string{`ANALYSIS_ROOTS="/srv/repos:checkouts"`, `"checkouts" is not an absolute directory`}},
		{name: "empty analysis roots", environ: []string{
			"DATABASE_URL=postgres://127.0.0.1:1/none", "WORKER_SERVICE=analyzer", "ANALYSIS_ROOTS=",
		}, want: []string{`ANALYSIS_ROOTS=""`, "must not be empty"}},
		{name: "password in query not echoed", environ: []string{
			"DATABASE_URL=postgres://tierq@db/x?sslmode=nope&password=hunter2", "WORKER_SERVICE=analyzer",
		}, want: []string{`DATABASE_URL="postgres://tierq@db/x?password=xxxxx&sslmode=nope"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out := proctest.RunExit(t, 2, tt.environ...)
			for _, want := range tt.want {
				require.Contains(t, out, want)
			}
			require.NotContains(t, out, "hunter2")
		})
	}
}

func TestSIGTERMLetsRunningJobFinishOrCancelsIt(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name        string
		softStop    string
		sleep       time.Duration
		wantState   string
		maxStopTime time.Duration
	}{
		{name: "job finishes inside soft stop", softStop: "20s", sleep: 1500 * time.Millisecond, wantState: "completed", maxStopTime: 15 * time.Second},
		// River hands a job cancelled by shutdown straight back to its
		// queue (state available) for the next worker.
		{name: "job cancelled after soft stop", softStop: "500ms", sleep: time.Hour, wantState: "available", maxStopTime: 15 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			db := testdb.New(t)
			ctx := context.Background()

			cmd, out := proctest.Command(t,
				"DATABASE_URL="+db.URL, "DATABASE_SCHEMA="+db.Schema, "WORKER_SERVICE=analyzer",
				"LOAD_TEST_WORKLOAD=true", "SOFT_STOP_TIMEOUT="+tt.softStop,
				"QUEUE_PRIORITY_FETCH_COOLDOWN=10ms", "QUEUE_PRIORITY_FETCH_POLL_INTERVAL=100ms")
			require.NoError(t, cmd.Start())
			t.Cleanup(func() { _ = cmd.Process.Kill() })

			res, err := db.Producer(t).Insert(ctx, jobs.LoadTestArgs{SleepMS: int(tt.sleep / time.Millisecond)},
				&river.InsertOpts{Queue: "analysis_priority"})
			require.NoError(t, err)

			state := func() string {
				var s string
				require.NoError(t, db.Pool.QueryRow(ctx, "SELECT state::text FROM river_job WHERE id = $1", res.Job.ID).Scan(&s))
				return s
			}
			deadline := time.Now().Add(30 * time.Second)
			for state() != "running" {
				require.True(t, time.Now().Before(deadline), "job never started; worker output:\n%s", out.String())
				time.Sleep(20 * time.Millisecond)
			}

			require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
			stopped := time.Now()
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				require.NoError(t, err, "exit status; output:\n%s", out.String())
			case <-time.After(tt.maxStopTime):
				t.Fatalf("worker did not exit within %s; output:\n%s", tt.maxStopTime, out.String())
			}
			t.Logf("stopped in %s", time.Since(stopped))

			require.Equal(t, tt.wantState, state(), out.String())
			var running int
			require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE state = 'running'").Scan(&running))
			require.Zero(t, running)
			require.Contains(t, out.String(), "worker stopped")
		})
	}
}

// TestServesMetrics runs the real worker with METRICS_ADDR and reads the
// wait histogram and outcome counter of a job it worked.
func TestServesMetrics(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()

	cmd, out := proctest.Command(t,
		"DATABASE_URL="+db.URL, "DATABASE_SCHEMA="+db.Schema, "WORKER_SERVICE=analyzer",
		"LOAD_TEST_WORKLOAD=true", "METRICS_ADDR=127.0.0.1:0",
		"QUEUE_PRIORITY_FETCH_COOLDOWN=10ms", "QUEUE_PRIORITY_FETCH_POLL_INTERVAL=100ms")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	proctest.WaitOutput(t, out, "worker started", 20*time.Second)
	require.Contains(t, out.String(), "service=analyzer analysis_roots=/ ")
	require.Contains(t, out.String(), "analysis_priority=5")
	url := proctest.MetricsURL(t, out)

	res, err := db.Producer(t).Insert(ctx, jobs.LoadTestArgs{}, &river.InsertOpts{Queue: "analysis_priority"})
	require.NoError(t, err)
	testdb.WaitFor(t, 20*time.Second, "the job to complete", func() bool {
		return db.Jobs(t, "id = $1", res.Job.ID)[0].State == "completed"
	})

	// Fair share's first pass at start may still be running on a loaded
	// machine when the job completes: wait for it to be counted.
	passes := regexp.MustCompile(`tierq_fair_share_passes_total\{queue="analysis_priority"\} [1-9]`)
	var body string
	testdb.WaitFor(t, 20*time.Second, "fair share's first pass to be counted", func() bool {
		body = proctest.Scrape(t, url)
		return passes.MatchString(body)
	})
	require.Contains(t, body, `tierq_jobs_total{kind="loadtest",outcome="completed",queue="analysis_priority"} 1`)
	require.Contains(t, body, `tierq_job_wait_seconds_count{queue="analysis_priority",tier="unknown"} 1`)
	// Fair share runs (at least its first pass at start) and reports the
	// capacity its heartbeat sees: the 5 priority workers of this process.
	require.Regexp(t, `tierq_fair_share_passes_total\{queue="analysis_priority"\} [1-9]`, body)
	require.Contains(t, body, `tierq_fair_share_capacity{queue="analysis_priority"} 5`)
	require.Contains(t, body, `tierq_lent_total{queue="analysis_priority"} 0`)
}

// TestNeverLogsTheDatabasePassword runs the real worker at LOG_LEVEL=debug
// with a password in DATABASE_URL (the test server trusts any), through a
// job and a SIGTERM: the password appears nowhere in its output.
func TestNeverLogsTheDatabasePassword(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()

	const password = "db-password-9876"
	u, err := url.Parse(db.URL)
	require.NoError(t, err)
	u.User = url.UserPassword(u.User.Username(), password)
	cmd, out := proctest.Command(t,
		"DATABASE_URL="+u.String(), "DATABASE_SCHEMA="+db.Schema, "WORKER_SERVICE=analyzer",
		"LOAD_TEST_WORKLOAD=true", "LOG_LEVEL=debug", "METRICS_ADDR=127.0.0.1:0",
		"QUEUE_PRIORITY_FETCH_COOLDOWN=10ms", "QUEUE_PRIORITY_FETCH_POLL_INTERVAL=100ms")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	proctest.WaitOutput(t, out, "worker started", 20*time.Second)

	res, err := db.Producer(t).Insert(ctx, jobs.LoadTestArgs{}, &river.InsertOpts{Queue: "analysis_priority"})
	require.NoError(t, err)
	testdb.WaitFor(t, 20*time.Second, "the job to complete", func() bool {
		return db.Jobs(t, "id = $1", res.Job.ID)[0].State == "completed"
	})

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait(), out.String())
	require.Contains(t, out.String(), "worker stopped")
	require.Contains(t, out.String(), "level=DEBUG", "debug logging was on")
	require.NotContains(t, out.String(), password)
}

// TestProbesThroughAStop runs the real worker with METRICS_ADDR: /healthz
// and /readyz answer 200 once it started; after SIGTERM, while a job
// finishes inside the soft stop, /readyz answers 503 and /healthz and
// /metrics still answer (so Kubernetes neither restarts the pod nor loses
// the last scrape); then the process exits 0.
func TestProbesThroughAStop(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()

	cmd, out := proctest.Command(t,
		"DATABASE_URL="+db.URL, "DATABASE_SCHEMA="+db.Schema, "WORKER_SERVICE=analyzer",
		"LOAD_TEST_WORKLOAD=true", "METRICS_ADDR=127.0.0.1:0", "SOFT_STOP_TIMEOUT=20s",
		"QUEUE_PRIORITY_FETCH_COOLDOWN=10ms", "QUEUE_PRIORITY_FETCH_POLL_INTERVAL=100ms")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	proctest.WaitOutput(t, out, "worker started", 20*time.Second)
	metricsURL := proctest.MetricsURL(t, out)
	base := strings.TrimSuffix(metricsURL, "/metrics")

	code, body := proctest.CallJSON(t, http.MethodGet, base+"/healthz", "", nil)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, map[string]any{"status": "ok"}, body)
	code, body = proctest.CallJSON(t, http.MethodGet, base+"/readyz", "", nil)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, map[string]any{"status": "ok"}, body)

	// A job of 3 s keeps the stopping process alive.
	res, err := db.Producer(t).Insert(ctx, jobs.LoadTestArgs{SleepMS: 3000}, &river.InsertOpts{Queue: "analysis_priority"})
	require.NoError(t, err)
	testdb.WaitFor(t, 20*time.Second, "the job to start", func() bool {
		return db.Jobs(t, "id = $1", res.Job.ID)[0].State == "running"
	})
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	proctest.WaitOutput(t, out, "worker stopping", 10*time.Second)

	code, body = proctest.CallJSON(t, http.MethodGet, base+"/readyz", "", nil)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, map[string]any{"status": "unavailable", "error": "stopping: finishing running jobs"}, body)
	code, _ = proctest.CallJSON(t, http.MethodGet, base+"/healthz", "", nil)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, proctest.Scrape(t, metricsURL), "tierq_fair_share_capacity")
	require.Equal(t, "running", db.Jobs(t, "id = $1", res.Job.ID)[0].State, "the probes were read during the soft stop")

	require.NoError(t, cmd.Wait(), out.String())
	require.Equal(t, "completed", db.Jobs(t, "id = $1", res.Job.ID)[0].State)
}
