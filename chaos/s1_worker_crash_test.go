//go:build chaos

package chaos_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWorkerCrash kills a worker with SIGKILL every 3 s under load and
// starts a new one in its place. The jobs a killed worker was running stay
// `running` until the leading scheduler's rescuer retries them (after
// RESCUE_STUCK_JOBS_AFTER, 61 s here; River's rescuer looks every 30 s), and
// the survivors and the new workers finish everything.
func TestWorkerCrash(t *testing.T) {
	s := newSystem(t, "worker-crash")
	ctx := context.Background()
	s.fullTopology()

	loadCtx, stopLoad := context.WithCancel(ctx)
	stats, waitLoad := s.run(loadCtx, load{
		Every: 100 * time.Millisecond, Batch: 6, MinMS: 20, MaxMS: 300,
		Services: s.registry.Services(), ScheduledPercent: 10, APIEvery: 250 * time.Millisecond,
	})

	r := rand.New(rand.NewPCG(7, uint64(time.Now().UnixNano())))
	killed := map[string]time.Time{}
	for range 8 {
		time.Sleep(3 * time.Second)
		var workers []*proc
		for _, p := range s.processes() {
			if p.binary == "worker" && p.alive() {
				workers = append(workers, p)
			}
		}
		victim := workers[r.IntN(len(workers))]
		victim.kill()
		killed[victim.clientID] = time.Now()
		time.Sleep(500 * time.Millisecond)
		s.worker(s.serviceOf(victim))
	}
	time.Sleep(2 * time.Second)
	stopLoad()
	waitLoad()

	tally, settle := s.settle(ctx, 2*time.Minute)
	s.check(tally)

	// Every delivery cut short was on a killed worker: no live job was
	// rescued. Recovery is how long the last job a kill cut short took to
	// finish elsewhere.
	var recovery time.Duration
	for client, ids := range s.unfinished(ctx) {
		at, ok := killed[client]
		require.True(t, ok, "client %s was never killed but left %d deliveries unfinished (jobs %v)", client, len(ids), ids[:min(5, len(ids))])
		recovery = max(recovery, s.lastFinalized(ctx, ids).Sub(at))
	}
	require.Positive(t, tally.redelivered, "no kill hit a running job: the scenario proved nothing")
	require.Zero(t, stats.insertErrors, "routing-helper inserts failed")
	require.Equal(t, []int{http.StatusCreated}, keys(stats.apiStatus), "API answers")
	s.summary(tally, recovery, settle, fmt.Sprintf("kills=%d", len(killed)))
}

func keys[V any](m map[int]V) []int {
	var out []int
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
