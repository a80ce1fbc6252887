//go:build chaos

package chaos_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/scheduler"
	"github.com/tierq/tierq/tiers"
)

// TestDatabaseRestart stops PostgreSQL (fast shutdown) for 7 s under load and
// starts it again. No tierq process is restarted: each must reconnect on its
// own. While the database is away the API answers 503 quickly, never hangs.
func TestDatabaseRestart(t *testing.T) {
	s := newSystem(t, "database-restart")
	ctx := context.Background()
	t.Cleanup(func() {
		if !suite.cluster.running() {
			require.NoError(t, suite.cluster.start())
		}
	})
	// The error paths of a lost database are where a connection string is
	// most likely to be printed: every level is logged here.
	s.env = append(s.env, "LOG_LEVEL=debug")
	s.fullTopology()
	s.waitLeader(ctx, s.processes()...)

	loadCtx, stopLoad := context.WithCancel(ctx)
	stats, waitLoad := s.run(loadCtx, load{
		Every: 100 * time.Millisecond, Batch: 5, MinMS: 20, MaxMS: 300,
		Services: s.registry.Services(), ScheduledPercent: 10, APIEvery: 250 * time.Millisecond,
	})
	time.Sleep(5 * time.Second)

	require.NoError(t, suite.cluster.stop())
	stoppedAt := time.Now()

	// While it is down: the API answers every request with 503, quickly.
	var probes, slowest time.Duration
	for n := 0; time.Since(stoppedAt) < 7*time.Second; n++ {
		status, took := s.enqueueAnalysis(ctx, tiers.Enterprise, false)
		require.Equal(t, http.StatusServiceUnavailable, status, "POST /v1/jobs with the database down")
		slowest = max(slowest, took)
		start := time.Now()
		status, _, err := s.call(ctx, http.MethodGet, "/readyz", "", nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusServiceUnavailable, status, "GET /readyz with the database down")
		slowest = max(slowest, time.Since(start))
		probes++
		time.Sleep(200 * time.Millisecond)
	}
	require.Less(t, slowest, 5*time.Second, "an API request took that long with the database down")

	require.NoError(t, suite.cluster.start())
	startedAt := time.Now()
	require.Greater(t, startedAt.Sub(stoppedAt), 5*time.Second)

	// Recovered: the API enqueues again, and every worker and the leading
	// scheduler work again, without a restart.
	var apiBack time.Duration
	for {
		if status, _ := s.enqueueAnalysis(ctx, tiers.Pro, false); status == http.StatusCreated {
			apiBack = time.Since(startedAt)
			break
		}
		require.Less(t, time.Since(startedAt), 60*time.Second, "the API did not enqueue again within 60s")
		time.Sleep(100 * time.Millisecond)
	}
	workBack := map[string]time.Duration{}
	var workers []*proc
	for _, p := range s.processes() {
		if p.binary == "worker" {
			workers = append(workers, p)
		}
	}
	deadline := time.Now().Add(90 * time.Second)
	for len(workBack) < len(workers) {
		require.True(t, time.Now().Before(deadline), "workers that did not complete a job after the restart: %d of %d", len(workers)-len(workBack), len(workers))
		for _, p := range workers {
			if _, ok := workBack[p.clientID]; ok {
				continue
			}
			var at *time.Time
			_ = s.pool.QueryRow(ctx, `SELECT min(completed_at) FROM load_test_executions WHERE client_id = $1 AND completed_at > $2`,
				p.clientID, startedAt).Scan(&at)
			if at != nil {
				workBack[p.clientID] = at.Sub(startedAt)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	var sweepBack *time.Time
	for sweepBack == nil {
		require.True(t, time.Now().Before(deadline), "no aging sweep completed after the restart")
		_ = s.pool.QueryRow(ctx, `SELECT min(finalized_at) FROM river_job WHERE kind = $1 AND state = 'completed' AND finalized_at > $2`,
			scheduler.KindAgingSweep, startedAt).Scan(&sweepBack)
		time.Sleep(200 * time.Millisecond)
	}

	time.Sleep(5 * time.Second)
	stopLoad()
	waitLoad()
	for _, p := range s.processes() {
		require.True(t, p.alive(), "%s exited during the database restart", p.name)
	}

	tally, settle := s.settle(ctx, 2*time.Minute)
	s.check(tally)
	for status := range stats.apiStatus {
		require.Contains(t, []int{http.StatusCreated, http.StatusServiceUnavailable}, status, "API answer during the load")
	}

	recovery := max(apiBack, sweepBack.Sub(startedAt))
	for _, d := range workBack {
		recovery = max(recovery, d)
	}
	s.summary(tally, recovery, settle,
		fmt.Sprintf("down=%s", round(startedAt.Sub(stoppedAt))), fmt.Sprintf("api_probes=%d", probes),
		fmt.Sprintf("api_slowest_while_down=%s", slowest.Round(time.Millisecond)),
		fmt.Sprintf("api_503=%d", stats.apiStatus[http.StatusServiceUnavailable]), fmt.Sprintf("insert_errors=%d", stats.insertErrors))
}
