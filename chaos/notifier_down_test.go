//go:build chaos

package chaos_test

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/api"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/tiers"
)

// What the database-failover scenario sends and checks while the workers'
// LISTEN connections are down: River's notifier reconnects with an
// exponential backoff (0.5, 1, 2, 4, 8 s …), so it is still down for a few
// seconds after the new primary accepts writes, and a pause or a cancel
// notified then reaches no worker.

// Bounds the database-failover scenario checks, from River v0.51.1.
const (
	// leaderLease is River's leadership lease: the elector's ElectInterval
	// (5 s, which the scheduler keeps) plus its TTL padding (10 s).
	leaderLease = 15 * time.Second
	// leaderMargin is what a leader may take beyond the lease once the
	// database takes writes again: the scheduler's leader watch
	// (scheduler.WatchLeader, every second) wakes the followers when the
	// lease it reads has expired.
	leaderMargin = time.Second
	// pauseBound is how long after its commit a pause may take to reach a
	// worker whose notifier was down when it was sent: River's producer
	// reads its queue's settings every NotificationPollInterval as a
	// fallback for lost notifications (a minute, not configurable through
	// river.Config), plus a second for the read itself.
	pauseBound = time.Minute + time.Second
	// pauseRepairBound is how long after the later of a pause's commit and
	// the worker's notifier being healthy again the worker may take to
	// apply the pause: its pause repair checks every 2 s for a job started
	// more than 1 s after the pause and sends the pause again, then every
	// 2 s while the queue stays paused (heard only once the notifier
	// listens), plus a second for the producer.
	pauseRepairBound = 5 * time.Second
	// fetchInFlight is how long after a producer logged its pause a job of
	// the queue may still start: a fetch under way when the pause came.
	fetchInFlight = time.Second
	// failingAttempts is the attempts of the scenario's dead-letter jobs,
	// each of which fails.
	failingAttempts = 2
)

// apiLoad is what the API inserts of a scenario saw: answers by status (0:
// no answer, the client's 10 s timeout included).
type apiLoad struct {
	mu     sync.Mutex
	status map[int]int
}

func (a *apiLoad) count(status int) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.status[status]
}

// errors is every answer but a 201.
func (a *apiLoad) errors() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for status, c := range a.status {
		if status != http.StatusCreated {
			n += c
		}
	}
	return n
}

// insertThroughAPI enqueues an analysis job through the API every interval,
// round-robin over the tiers, until ctx ends (each 201'd job goes into the
// ledger: enqueueAnalysis); the returned wait blocks until it stopped. A
// request under way when ctx ends is finished.
func (s *system) insertThroughAPI(ctx context.Context, interval time.Duration) (*apiLoad, func()) {
	a := &apiLoad{status: map[int]int{}}
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for i := 0; ; i++ {
			status, _ := s.enqueueAnalysis(context.WithoutCancel(ctx), tiers.All()[i%4], false)
			a.mu.Lock()
			a.status[status]++
			a.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	return a, wg.Wait
}

// leaderRenewed sends the first time, after the new primary came, that a
// scheduler holds a lease taken or renewed after killedAt: one that
// expires after killedAt plus the lease (a lease written before the kill,
// replicated to the standby, expires before that; nothing was written
// between the kill and the new primary).
func (s *system) leaderRenewed(ctx context.Context, killedAt time.Time) <-chan string {
	at := make(chan string, 1)
	go func() {
		for ctx.Err() == nil {
			var id string
			qctx, cancel := context.WithTimeout(ctx, time.Second)
			err := s.pool.QueryRow(qctx, `SELECT leader_id FROM river_leader WHERE expires_at > $1`, killedAt.Add(leaderLease)).Scan(&id)
			cancel()
			if err == nil {
				at <- id
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	return at
}

// pauseQueue pauses queue with `tierctl queues pause`, tried until it
// succeeds (a pool's first connections after the failover may still be to
// the dead primary; a try whose answer was lost but committed makes the
// next one say "already paused"), and returns when the pause was committed
// (river_queue.paused_at).
func (s *system) pauseQueue(ctx context.Context, queue string) time.Time {
	s.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := s.tierctlErr("queues", "pause", queue)
		if err == nil {
			break
		}
		require.True(s.t, time.Now().Before(deadline), "tierctl queues pause %s kept failing for 30s: %v\n%s", queue, err, out)
		time.Sleep(100 * time.Millisecond)
	}
	var at *time.Time
	require.NoError(s.t, retryQuery(ctx, func(ctx context.Context) error {
		return s.pool.QueryRow(ctx, `SELECT paused_at FROM river_queue WHERE name = $1`, queue).Scan(&at)
	}))
	require.NotNil(s.t, at, "queue %s not paused after tierctl said it was", queue)
	return *at
}

// cancelQueued cancels up to n queued load-test jobs of the ledger in
// queues (waiting or held by fair share, never attempted) through the
// API's River UI (POST /riverui/api/jobs/cancel: River's JobCancelTx), tried
// until it answers 200, and returns the jobs it asked for and those River
// cancelled at once (those not running: the rest are left to end either
// way). Each cancelled one is expected cancelled in the ledger.
func (s *system) cancelQueued(ctx context.Context, queues []string, n int) (asked, done []int64) {
	s.t.Helper()
	var ids []int64
	for _, e := range s.ledger.all() {
		if e.kind == jobs.KindLoadTest && e.want == completed {
			ids = append(ids, e.id)
		}
	}
	require.NoError(s.t, retryQuery(ctx, func(ctx context.Context) error {
		return s.pool.QueryRow(ctx, `
			SELECT coalesce(array_agg(id), '{}') FROM (
				SELECT id FROM river_job
				WHERE id = ANY($1) AND queue = ANY($2) AND state IN ('available', 'pending') AND attempt = 0
				ORDER BY id DESC LIMIT $3) AS q`, ids, queues, n).Scan(&asked)
	}))
	require.NotEmpty(s.t, asked, "no queued job to cancel in %v", queues)
	body := map[string]any{"ids": asked}
	deadline := time.Now().Add(30 * time.Second)
	for {
		status, answer, err := s.call(ctx, http.MethodPost, api.RiverUIPrefix+"/api/jobs/cancel", adminToken, body)
		if err == nil && status == http.StatusOK {
			break
		}
		require.True(s.t, time.Now().Before(deadline), "River UI's cancel kept failing for 30s: %d %v %s", status, err, answer)
		time.Sleep(100 * time.Millisecond)
	}
	require.NoError(s.t, retryQuery(ctx, func(ctx context.Context) error {
		return s.pool.QueryRow(ctx, `SELECT coalesce(array_agg(id), '{}') FROM river_job WHERE id = ANY($1) AND state = 'cancelled'`, asked).Scan(&done)
	}))
	for _, id := range done {
		s.ledger.expect(id, cancelled)
	}
	return asked, done
}

// retryQuery runs query until it succeeds, for up to 10 s: right after a
// failover a pool may hand out a connection to the dead primary once.
func retryQuery(ctx context.Context, query func(context.Context) error) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := query(qctx)
		cancel()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

var logTime = regexp.MustCompile(`^time=(\S+) `)

// logged returns the time of the first line of p's output at or after since
// with msg="<msg>" and every one of attrs (key=value, as slog's text handler
// writes them).
func (p *proc) logged(since time.Time, msg string, attrs ...string) (time.Time, bool) {
	want := `msg="` + msg + `"`
lines:
	for _, line := range strings.Split(p.out.String(), "\n") {
		if !strings.Contains(line, want) {
			continue
		}
		fields := strings.Fields(line)
		for _, attr := range attrs {
			if !slices.Contains(fields, attr) {
				continue lines
			}
		}
		m := logTime.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err == nil && !at.Before(since.Truncate(time.Millisecond)) {
			return at, true
		}
	}
	return time.Time{}, false
}

// pausing is one queue paused during the failover and the worker that
// serves it.
type pausing struct {
	queue    string
	worker   *proc
	at       time.Time // committed
	notifier time.Time // the worker's notifier healthy again (zero: not yet at the pause)
	seen     time.Time // the worker's producer logged the pause
	started  int       // jobs of the queue the worker started between at and seen+fetchInFlight
	late     int       // jobs of the queue the worker started after seen+fetchInFlight: must be 0
}

// waitPaused waits until each worker logged its queue's pause (River's
// producer, at debug level: "producer: Paused" queue=…), at most until
// pauseBound after the pause, and counts the jobs of the queue the worker
// started meanwhile and after.
func (s *system) waitPaused(ctx context.Context, ps []*pausing) {
	s.t.Helper()
	for _, p := range ps {
		for {
			if at, ok := p.worker.logged(p.at.Add(-time.Second), "producer: Paused", "queue="+p.queue); ok {
				p.seen = at
				break
			}
			require.Less(s.t, time.Since(p.at), pauseBound+5*time.Second, "%s did not pause %s within %s of the pause", p.worker.name, p.queue, pauseBound+5*time.Second)
			time.Sleep(100 * time.Millisecond)
		}
		// The queue a job ran in is where it is now (or was when drained):
		// lending and fair share leave a paused queue alone, and nothing
		// else moves a job that ran.
		require.NoError(s.t, s.pool.QueryRow(ctx, `
			SELECT count(*) FILTER (WHERE e.started_at > $3 AND e.started_at <= $4),
			       count(*) FILTER (WHERE e.started_at > $4)
			FROM load_test_executions e
			JOIN (SELECT id, queue FROM river_job UNION ALL SELECT job_id, queue FROM dead_letter_jobs) AS j ON j.id = e.job_id
			WHERE e.client_id = $1 AND j.queue = $2`,
			p.worker.clientID, p.queue, p.at, p.seen.Add(fetchInFlight)).Scan(&p.started, &p.late))
	}
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// pauseFigures are the summary's figures of the pauses.
func pauseFigures(ps []*pausing) []string {
	var ok, down, started int
	var lag time.Duration
	for _, p := range ps {
		if p.late == 0 && p.seen.Sub(p.at) <= pauseBound {
			ok++
		}
		if p.notifier.IsZero() || p.notifier.After(p.at) {
			down++
		}
		started += p.started
		lag = max(lag, p.seen.Sub(p.at))
	}
	return []string{
		fmt.Sprintf("paused_ok=%d/%d", ok, len(ps)), fmt.Sprintf("pause_lag=%.1fs", lag.Seconds()),
		fmt.Sprintf("notifier_down_at_pause=%d/%d", down, len(ps)), fmt.Sprintf("started_while_pausing=%d", started),
	}
}

// resumeQueue resumes a queue paused by pauseQueue.
func (s *system) resumeQueue(queue string) {
	s.t.Helper()
	out := s.tierctl("queues", "resume", queue)
	require.Contains(s.t, out, "resumed", "tierctl queues resume %s", queue)
}
