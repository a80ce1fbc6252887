package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/proctest"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/scheduler"
)

// The tests start this test binary as the real scheduler process (see
// internal/proctest).
func TestMain(m *testing.M) {
	proctest.RunMain(main)
	os.Exit(m.Run())
}

func TestBadEnvironmentExitsTwo(t *testing.T) {
	t.Parallel()

	const db = "DATABASE_URL=postgres://127.0.0.1:1/none"
	tests := []struct {
		name    string
		environ []string
		want    string
	}{
		{name: "nothing set", want: `DATABASE_URL=""`},
		{name: "bad cron", environ: []string{db, "REANALYZE_CRON=0 */6 * *"}, want: `REANALYZE_CRON="0 */6 * *": not a cron expression`},
		{name: "bad time zone", environ: []string{db, "CRON_TZ=Nowhere/City"}, want: `CRON_TZ="Nowhere/City"`},
		{name: "bad duration", environ: []string{db, "AGING_STEP=5 minutes"}, want: `AGING_STEP="5 minutes": not a duration`},
		{name: "bad tenant rate", environ: []string{db, "ANALYZER_FREE_TENANT_RATE=10/d"},
			want: `scheduler: invalid configuration: ANALYZER_FREE_TENANT_RATE="10/d": not a rate (jobs per second, minute or hour, such as 10/s, 100/m or 1000/h; 0 for no limit)`},
		{name: "bad tenant quota, with another", environ: []string{db, "AGING_STEP=5 minutes", "SPECGEN_PRO_TENANT_DAILY_QUOTA=-1"},
			want: `scheduler: invalid configuration: AGING_STEP="5 minutes": not a duration (examples: 250ms, 30s, 5m, 1h); SPECGEN_PRO_TENANT_DAILY_QUOTA="-1": must be between 0 and 1000000000 (0: no quota)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Contains(t, proctest.RunExit(t, 2, tt.environ...), tt.want)
		})
	}
}

type schedulerProcess struct {
	cmd     *exec.Cmd
	out     *proctest.Buffer
	id      string // its River client ID, as river_leader names it
	metrics string // its /metrics URL
}

var clientID = regexp.MustCompile(`scheduler started.* client_id=(\S+)`)

func startScheduler(t *testing.T, db *testdb.DB) *schedulerProcess {
	t.Helper()
	cmd, out := proctest.Command(t,
		"DATABASE_URL="+db.URL, "DATABASE_SCHEMA="+db.Schema, "DATABASE_MAX_CONNS=5",
		"REANALYZE_CRON=@every 2s", "RETENTION_CRON=@every 1h",
		"AGING_INTERVAL=1s", "ESCALATION_INTERVAL=1s", "SOFT_STOP_TIMEOUT=2s", "METRICS_ADDR=127.0.0.1:0")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	proctest.WaitOutput(t, out, "scheduler started", 20*time.Second)
	id := clientID.FindStringSubmatch(out.String())
	require.Len(t, id, 2, out.String())
	return &schedulerProcess{cmd: cmd, out: out, id: id[1], metrics: proctest.MetricsURL(t, out)}
}

// waitLeaderGauge waits until p's tierq_leader gauge reads want (it is
// refreshed once a second).
func waitLeaderGauge(t *testing.T, p *schedulerProcess, want int) {
	t.Helper()
	line := fmt.Sprintf("\ntierq_leader %d\n", want)
	testdb.WaitFor(t, 5*time.Second, "tierq_leader "+fmt.Sprint(want)+" on pid "+fmt.Sprint(p.cmd.Process.Pid), func() bool {
		return strings.Contains(proctest.Scrape(t, p.metrics), line)
	})
}

// leader returns the scheduler process that River elected, if any.
func leader(t *testing.T, db *testdb.DB, procs ...*schedulerProcess) *schedulerProcess {
	t.Helper()
	var id string
	err := db.Pool.QueryRow(context.Background(), `SELECT leader_id FROM river_leader WHERE expires_at > now()`).Scan(&id)
	if err != nil {
		return nil
	}
	for _, p := range procs {
		if p != nil && id == p.id {
			return p
		}
	}
	return nil
}

// cronRunsSQL counts the runs of the re-analysis cron, its distinct slots
// and its runs off a slot ("@every 2s" runs on even seconds; each run is
// keyed by its slot), in one statement: one snapshot, so a run the leader
// inserts meanwhile is in all three counts or in none.
const cronRunsSQL = `
SELECT count(*),
       count(DISTINCT scheduled_at),
       count(*) FILTER (WHERE extract(epoch FROM scheduled_at)::numeric % 2 <> 0)
FROM river_job WHERE kind = $1`

// cronRuns checks that no cron slot ran twice and returns how many ran.
func cronRuns(t *testing.T, db *testdb.DB) int {
	t.Helper()
	var runs, slots, offSlot int
	require.NoError(t, db.Pool.QueryRow(context.Background(), cronRunsSQL, jobs.KindReanalyzeStale).Scan(&runs, &slots, &offSlot))
	require.Equal(t, slots, runs, "a cron slot ran twice")
	require.Zero(t, offSlot, "a run not on its slot")
	return runs
}

// missedSlots counts the 2s slots between the first and the last run that
// did not run.
func missedSlots(t *testing.T, db *testdb.DB) int {
	t.Helper()
	return db.Count(t, `
		SELECT (extract(epoch FROM max(scheduled_at) - min(scheduled_at)) / 2)::int + 1 - count(*)
		FROM river_job WHERE kind = $1`, jobs.KindReanalyzeStale)
}

// TestTwoSchedulersFailOver runs two scheduler processes: one leads and runs
// each cron slot once; kill -9 the leader and the other takes over and
// continues the cron and the sweeps within 20s (River's leadership lease is
// 15s; scheduler.WatchLeader wakes the follower when it expires); SIGTERM a leader and it resigns, so a
// follower takes over at once.
func TestTwoSchedulersFailOver(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()

	a, b := startScheduler(t, db), startScheduler(t, db)
	var first *schedulerProcess
	testdb.WaitFor(t, 20*time.Second, "a leader", func() bool { first = leader(t, db, a, b); return first != nil })
	follower := a
	if first == a {
		follower = b
	}
	waitLeaderGauge(t, first, 1)

	// River staggers the start of its maintenance services by up to a few
	// seconds after an election, so wait for runs rather than for time.
	testdb.WaitFor(t, 20*time.Second, "three runs of the 2s cron", func() bool { return cronRuns(t, db) >= 3 })
	before := cronRuns(t, db)
	require.Same(t, first, leader(t, db, a, b), "leadership stayed put")
	require.Zero(t, missedSlots(t, db), "a steady leader runs every slot")

	// killedAt is read once the leader is dead: a job created after it
	// comes from a transaction that began after the kill, so from the
	// follower (the dead leader's last insert may still commit after the
	// kill, but its created_at is its transaction's start).
	require.NoError(t, first.cmd.Process.Signal(syscall.SIGKILL))
	_ = first.cmd.Wait() // "signal: killed"
	var killedAt time.Time
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT now()`).Scan(&killedAt))

	testdb.WaitFor(t, 30*time.Second, "the cron to run again after the kill", func() bool {
		return db.Count(t, `SELECT count(*) FROM river_job WHERE kind = $1 AND created_at > $2`, jobs.KindReanalyzeStale, killedAt) > 0
	})
	var resumedAfter time.Duration
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT min(created_at) - $2 FROM river_job WHERE kind = $1 AND created_at > $2`,
		jobs.KindReanalyzeStale, killedAt).Scan(&resumedAfter))
	require.Same(t, follower, leader(t, db, a, b), "the follower leads now")
	waitLeaderGauge(t, follower, 1)
	t.Logf("kill -9 of the leader: cron resumed on the other scheduler after %s", resumedAfter)
	require.LessOrEqual(t, resumedAfter, 20*time.Second)

	testdb.WaitFor(t, 10*time.Second, "an aging sweep on the new leader", func() bool {
		return db.Count(t, `SELECT count(*) FROM river_job WHERE kind = $1 AND state = 'completed' AND created_at > $2`,
			scheduler.KindAgingSweep, killedAt) > 0
	})
	testdb.WaitFor(t, 10*time.Second, "more cron runs than before the kill", func() bool { return cronRuns(t, db) > before })

	// A graceful stop resigns leadership: a new replica takes over at once.
	c := startScheduler(t, db)
	var stoppedAt time.Time
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT now()`).Scan(&stoppedAt))
	require.NoError(t, follower.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, follower.cmd.Wait(), follower.out.String())
	testdb.WaitFor(t, 10*time.Second, "the new replica to lead after a graceful stop", func() bool {
		return leader(t, db, c) == c
	})
	t.Logf("SIGTERM of the leader: the new replica led after %s", time.Since(stoppedAt))
	waitLeaderGauge(t, c, 1)
	// Two runs after the stop, so at least one on the new leader, after the
	// run it makes when it starts leading: that is when it would run again
	// a slot the old leader ran, if a hand-over could double one.
	testdb.WaitFor(t, 10*time.Second, "two cron runs after the graceful stop", func() bool {
		return db.Count(t, `SELECT count(*) FROM river_job WHERE kind = $1 AND created_at > $2`, jobs.KindReanalyzeStale, stoppedAt) >= 2
	})
	cronRuns(t, db)
}

// TestBadEnvironmentHidesSecrets: a refused DATABASE_URL or webhook URL is
// named in the exit-2 message without its password, path or query.
func TestBadEnvironmentHidesSecrets(t *testing.T) {
	t.Parallel()

	out := proctest.RunExit(t, 2,
		"DATABASE_URL=postgres://tierq:hunter2@db/x?sslmode=nope&sslpassword=hunter3",
		"DLQ_ALERT_WEBHOOK_URL=ftp://hooks.example.com/services/T0/B1/hook-secret?token=hook-token")
	require.Contains(t, out, `DATABASE_URL="postgres://tierq:xxxxx@db/x?sslmode=nope&sslpassword=xxxxx"`)
	require.Contains(t, out, `DLQ_ALERT_WEBHOOK_URL="ftp://hooks.example.com/[redacted]"`)
	for _, secret := range []string{"hunter2", "hunter3", "hook-secret", "hook-token"} {
		require.NotContains(t, out, secret)
	}
}

// TestNeverLogsSecrets runs the real scheduler at LOG_LEVEL=debug with a
// password in DATABASE_URL and a webhook URL whose path and query hold
// secrets. It leads, drains dead letters, calls the webhook (which fails,
// so the failure is logged too), runs the sweeps and stops on SIGTERM: no
// secret appears in its output.
func TestNeverLogsSecrets(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)

	const (
		password  = "db-password-9876"
		hookPath  = "/services/T0/B1/hook-secret-path"
		hookToken = "hook-secret-token"
	)
	var calls atomic.Int64
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == hookPath && r.URL.Query().Get("token") == hookToken {
			calls.Add(1)
		}
		http.Error(w, "no", http.StatusInternalServerError)
	}))
	t.Cleanup(hook.Close)

	u, err := url.Parse(db.URL)
	require.NoError(t, err)
	u.User = url.UserPassword(u.User.Username(), password)
	testdb.SeedDiscarded(t, db, 3)
	cmd, out := proctest.Command(t,
		"DATABASE_URL="+u.String(), "DATABASE_SCHEMA="+db.Schema, "DATABASE_MAX_CONNS=5", "LOG_LEVEL=debug",
		"DLQ_ALERT_WEBHOOK_URL="+hook.URL+hookPath+"?token="+hookToken, "DLQ_DRAIN_INTERVAL=1s",
		"DLQ_ALERT_INTERVAL=1s", "DLQ_ALERT_TIMEOUT=500ms",
		"AGING_INTERVAL=1s", "ESCALATION_INTERVAL=1s", "SOFT_STOP_TIMEOUT=2s")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	proctest.WaitOutput(t, out, "scheduler started", 20*time.Second)

	testdb.WaitFor(t, 30*time.Second, "the dead letters to drain", func() bool {
		return db.Count(t, `SELECT count(*) FROM dead_letter_jobs`) == 3
	})
	testdb.WaitFor(t, 15*time.Second, "the webhook to be called", func() bool { return calls.Load() >= 1 })
	testdb.WaitFor(t, 15*time.Second, "an aging sweep", func() bool {
		return db.Count(t, `SELECT count(*) FROM river_job WHERE kind = $1 AND state = 'completed'`, scheduler.KindAgingSweep) > 0
	})
	proctest.WaitOutput(t, out, "webhook failed", 10*time.Second)

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait(), out.String())
	require.Contains(t, out.String(), "level=DEBUG", "debug logging was on")
	for _, secret := range []string{password, "hook-secret"} {
		require.NotContains(t, out.String(), secret)
	}
}

// TestServesProbes: the real scheduler serves /healthz and /readyz next to
// /metrics, both 200 once it started.
func TestServesProbes(t *testing.T) {
	t.Parallel()
	p := startScheduler(t, testdb.New(t))
	base := strings.TrimSuffix(p.metrics, "/metrics")
	for _, path := range []string{"/healthz", "/readyz"} {
		code, body := proctest.CallJSON(t, http.MethodGet, base+path, "", nil)
		require.Equal(t, http.StatusOK, code, path)
		require.Equal(t, map[string]any{"status": "ok"}, body, path)
	}
}
