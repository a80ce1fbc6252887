package main

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/proctest"
	"github.com/tierq/tierq/internal/testdb"
)

// TestRescueNotAboveAKindsTimeoutExitsTwo: the real scheduler refuses a
// RESCUE_STUCK_JOBS_AFTER that is not longer than every job kind's timeout
// (analysis, loadtest and the scheduler's own kinds 1m, specview 30s), with
// exit status 2 and a message naming the variable, its value and each kind
// with its timeout, before it connects to the database.
func TestRescueNotAboveAKindsTimeoutExitsTwo(t *testing.T) {
	t.Parallel()

	const (
		db     = "DATABASE_URL=postgres://127.0.0.1:1/none" // never reached
		prefix = "must be longer than the timeout of every job kind, or the rescuer retries (and runs twice) jobs a worker may still be running; "
		oneMin = "job kind aging_sweep has 1m0s, job kind analysis has 1m0s, job kind dlq_drain has 1m0s, job kind escalation_sweep has 1m0s, " +
			"job kind loadtest has 1m0s, job kind reanalyze_stale has 1m0s, job kind retention has 1m0s"
	)
	tests := []struct {
		name    string
		environ []string
		want    string
	}{
		{
			name:    "equal to the longest",
			environ: []string{db, "RESCUE_STUCK_JOBS_AFTER=1m", "JOB_TIMEOUT=30s"},
			want:    `RESCUE_STUCK_JOBS_AFTER="1m": ` + prefix + oneMin,
		},
		{
			name:    "between two kinds",
			environ: []string{db, "RESCUE_STUCK_JOBS_AFTER=45s", "JOB_TIMEOUT=30s"},
			want:    `RESCUE_STUCK_JOBS_AFTER="45s": ` + prefix + oneMin,
		},
		{
			name:    "equal to the shortest",
			environ: []string{db, "RESCUE_STUCK_JOBS_AFTER=30s", "JOB_TIMEOUT=10s"},
			want:    `RESCUE_STUCK_JOBS_AFTER="30s": ` + prefix + oneMin + ", job kind specview has 30s",
		},
		{
			name:    "the old chaos settings",
			environ: []string{db, "RESCUE_STUCK_JOBS_AFTER=5s", "JOB_TIMEOUT=4s"},
			want:    `RESCUE_STUCK_JOBS_AFTER="5s": ` + prefix + oneMin + ", job kind specview has 30s",
		},
		{
			name:    "written in seconds",
			environ: []string{db, "RESCUE_STUCK_JOBS_AFTER=60s", "JOB_TIMEOUT=30s"},
			want:    `RESCUE_STUCK_JOBS_AFTER="60s": ` + prefix + oneMin,
		},
		{
			name:    "not above JOB_TIMEOUT either",
			environ: []string{db, "RESCUE_STUCK_JOBS_AFTER=30s"},
			want:    `RESCUE_STUCK_JOBS_AFTER="30s": must be longer than JOB_TIMEOUT (1m0s)`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out := proctest.RunExit(t, 2, tt.environ...)
			require.Contains(t, out, "scheduler: invalid configuration: "+tt.want)
		})
	}
}

// TestRescueJustAboveEveryKindStarts: one second above the longest kind's
// timeout is accepted, and a JOB_TIMEOUT that is set is warned about, since
// it no longer bounds tierq's jobs.
func TestRescueJustAboveEveryKindStarts(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)

	cmd, out := proctest.Command(t,
		"DATABASE_URL="+db.URL, "DATABASE_SCHEMA="+db.Schema, "DATABASE_MAX_CONNS=5",
		"RESCUE_STUCK_JOBS_AFTER=61s", "JOB_TIMEOUT=30s", "SOFT_STOP_TIMEOUT=1s")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	proctest.WaitOutput(t, out, "scheduler started", 20*time.Second)
	require.Contains(t, out.String(), "rescue_stuck_jobs_after=1m1s")
	// config's CRON_TZ, then the maintenance's settings (Config.LogAttrs).
	require.Regexp(t, `msg="scheduler started" .* cron_tz=UTC reanalyze_next=\S+ reanalyze_stale_after=\S+ retention_next=\S+ retention_period=\S+`, out.String())
	require.Contains(t, out.String(), `level=WARN msg="JobTimeout no longer bounds tierq's jobs`)
	require.Contains(t, out.String(), "job_timeout=30s")
	require.Contains(t, out.String(), "kind_timeouts=\"map[aging_sweep:1m0s analysis:1m0s dlq_drain:1m0s escalation_sweep:1m0s loadtest:1m0s reanalyze_stale:1m0s retention:1m0s specview:30s]\"")

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait(), out.String())
}
