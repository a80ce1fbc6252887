package ctl

import (
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
)

// TestWatchShowsHeldJobs: HELD counts the jobs fair share holds back and
// OLDEST is the longest wait over available and held jobs from their due
// time: 90 s for a tenant held since then (one of its jobs escalated 20 s
// ago), where the oldest available job is 5 s old; a job River scheduled
// 3 s ahead is not waiting yet (0ms, not -3s).
func TestWatchShowsHeldJobs(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	for _, j := range []testdb.WaitingJob{
		{Queue: "analysis_default", Held: true, Tenant: "starving", Scheduled: 90 * time.Second},
		{Queue: "analysis_default", Held: true, Tenant: "starving", Scheduled: 20 * time.Second, Due: 90 * time.Second},
		{Queue: "analysis_default", Held: true, Tenant: "starving", Scheduled: -time.Minute}, // held, not due yet
		{Queue: "analysis_default", Tenant: "busy", Scheduled: 5 * time.Second, Due: 6 * time.Second},
		{Queue: "specview_default", Held: true, Tenant: "starving", Scheduled: 20 * time.Second, Due: 90 * time.Second},
		{Queue: "analysis_priority", Scheduled: -3 * time.Second},
	} {
		testdb.InsertWaitingJob(t, db, j)
	}

	out, err := runTierctl(t, dbEnv(t, db), "watch", "--once")
	require.NoError(t, err, out)
	t.Log("\n" + out)
	require.Regexp(t, `(?m)^\s*QUEUE\s+SCHEDULED\s+PENDING\s+HELD\s+AVAILABLE\s+RETRYABLE\s+RUNNING\s+OLDEST\s+DEAD$`, out)
	// QUEUE SCHEDULED PENDING HELD AVAILABLE RETRYABLE RUNNING OLDEST DEAD
	queueRow := func(queue, counts string) time.Duration {
		t.Helper()
		m := regexp.MustCompile(`(?m)^\s*` + queue + `\s+` + counts + `\s+(\S+)\s+0$`).FindStringSubmatch(out)
		require.NotNil(t, m, "row %s %s", queue, counts)
		age, err := time.ParseDuration(m[1])
		require.NoError(t, err)
		return age
	}
	require.InDelta(t, 90, queueRow("analysis_default", `0\s+3\s+3\s+1\s+0\s+0`).Seconds(), 1.5)
	require.InDelta(t, 90, queueRow("specview_default", `0\s+1\s+1\s+0\s+0\s+0`).Seconds(), 1.5)
	require.Regexp(t, `(?m)^\s*analysis_priority\s+0\s+0\s+0\s+1\s+0\s+0\s+0ms\s+0$`, out, "scheduled 3 s ahead: 0ms, not -3s")
}
