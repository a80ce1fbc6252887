//go:build chaos

package chaos_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/tiers"
)

// TestRollingDeploy replaces every worker under load the way an orchestrator
// does: start the new one, send SIGTERM to the old one. Some jobs run longer
// than the soft-stop timeout (2 s); the stopping worker cancels them, and
// River makes them available again with their attempt as before (a stop is
// not the job's failure) for another worker to run. When the old process
// has exited, none of its jobs is left `running`.
func TestRollingDeploy(t *testing.T) {
	s := newSystem(t, "rolling-deploy")
	ctx := context.Background()
	s.fullTopology()

	loadCtx, stopLoad := context.WithCancel(ctx)
	stats, waitLoad := s.run(loadCtx, load{
		Every: 100 * time.Millisecond, Batch: 5, MinMS: 20, MaxMS: 300, LongPercent: 6,
		Services: s.registry.Services(), ScheduledPercent: 10, APIEvery: 250 * time.Millisecond,
	})
	time.Sleep(4 * time.Second)

	stopped := map[string]bool{}
	var slowestStop time.Duration
	for _, old := range s.processes() {
		if old.binary != "worker" {
			continue
		}
		s.worker(s.serviceOf(old))
		s.waitLongJob(ctx, old)
		took := old.terminate(t, 10*time.Second)
		slowestStop = max(slowestStop, took)
		stopped[old.clientID] = true
		var running int
		require.NoError(t, s.pool.QueryRow(ctx, `
			SELECT count(*) FROM river_job
			WHERE state = 'running' AND attempted_by[array_length(attempted_by, 1)] = $1`, old.clientID).Scan(&running))
		require.Zero(t, running, "%s exited after %s leaving jobs running", old.name, took)
		require.Contains(t, old.out.String(), "worker stopped")
		time.Sleep(2 * time.Second)
	}
	time.Sleep(2 * time.Second)
	stopLoad()
	waitLoad()

	tally, settle := s.settle(ctx, 2*time.Minute)
	s.check(tally)
	// A delivery cut short was a stopping worker's (its soft-stop timeout
	// cancelled a long job), never a running worker's.
	cut := 0
	for client, ids := range s.unfinished(ctx) {
		require.True(t, stopped[client], "client %s was never stopped but left %d deliveries unfinished", client, len(ids))
		cut += len(ids)
	}
	require.Positive(t, cut, "no stop cut a job short: the soft-stop path was not exercised")
	require.Zero(t, stats.insertErrors)
	require.Equal(t, []int{http.StatusCreated}, keys(stats.apiStatus))
	s.summary(tally, slowestStop, settle, fmt.Sprintf("workers_replaced=%d", len(stopped)), fmt.Sprintf("cut_by_soft_stop=%d", cut))
}

// waitLongJob waits (up to 10 s) until p runs a job that will outlast the
// soft-stop timeout, adding long jobs for p's service each second, so that
// the stop that follows has a job to cut short.
func (s *system) waitLongJob(ctx context.Context, p *proc) {
	s.t.Helper()
	r := rand.New(rand.NewPCG(3, uint64(time.Now().UnixNano())))
	var added time.Time
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(100 * time.Millisecond) {
		var n int
		require.NoError(s.t, s.pool.QueryRow(ctx, `
			SELECT count(*) FROM river_job
			WHERE state = 'running' AND attempted_by[array_length(attempted_by, 1)] = $1
			  AND (args->>'sleep_ms')::int >= 3000 AND attempted_at > now() - interval '500 milliseconds'`, p.clientID).Scan(&n))
		if n > 0 {
			return
		}
		if time.Since(added) >= time.Second {
			batch := make([]loadtestJob, 4)
			for i := range batch {
				batch[i] = routedLoadtest(r, s.serviceOf(p), tiers.Enterprise, false, 3500, 3500)
			}
			require.NoError(s.t, s.insert(ctx, batch))
			added = time.Now()
		}
	}
}
