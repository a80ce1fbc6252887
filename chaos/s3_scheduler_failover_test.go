//go:build chaos

package chaos_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/escalation"
	"github.com/tierq/tierq/internal/proctest"
	"github.com/tierq/tierq/jobs"
)

// TestSchedulerFailover kills the leading scheduler with SIGKILL under load.
// The other replica takes over when the lease runs out; cron slots, aging,
// escalation and dead-letter drains carry on under it, no cron slot runs
// twice and no job is drained twice. The analyzer serves no scheduled
// queue here, so background analyzer work only runs once the escalation
// sweep moves it to the default queue, and it ages while it waits.
//
// Fair share is on (the default) and lending too; the load runs for several
// tenants, and just before the kill a flood tenant inserts a burst that fair
// share holds back nearly whole. Admission and lending are the workers'
// own, so they carry on while no scheduler leads: fewer jobs are held at
// the take-over than at the kill. No worker dies, so no job may run twice.
//
// Concurrency caps are on (capTenants) in every service, recorded by both
// schedulers (the analyzer's scheduled class has no workers: its cap-held
// jobs leave it by the escalation sweep, still held): from the jobs' own
// execution records, no tenant ever ran more than its cap, before, across
// and after the failover.
func TestSchedulerFailover(t *testing.T) {
	s := newSystem(t, "scheduler-failover")
	s.fairShareByWindows()
	ctx := context.Background()
	s.lendIdlePriority()
	// Caps in every service: a job held by a cap in a queue no worker
	// serves, as analyzer's scheduled queue is here, is not admitted there
	// (no process passes over the queue); the escalation sweep moves it,
	// still held, to the default queue, whose workers admit it.
	s.capTenants(s.registry.Services()...)
	a, b := s.scheduler(), s.scheduler()
	for range 2 {
		s.worker(s.analyzer, "ANALYZER_QUEUE_SCHEDULED_WORKERS=0")
		s.worker(s.specGen)
	}
	s.api()
	s.setOverrides(ctx)
	leader := s.waitLeader(ctx, a, b)
	follower := a
	if leader == a {
		follower = b
	}

	watch, stopWatch := s.watchFairShare(ctx)
	defer stopWatch()
	loadCtx, stopLoad := context.WithCancel(ctx)
	_, waitLoad := s.run(loadCtx, load{
		Every: 100 * time.Millisecond, Batch: 4, MinMS: 20, MaxMS: 200,
		Services: s.registry.Services(), ScheduledPercent: 25, FailPercent: 5, Tenants: loadTenants,
		APIEvery: 500 * time.Millisecond,
	})
	time.Sleep(8 * time.Second)

	flooded, err := s.flood(ctx, floodTenant, 150)
	require.NoError(t, err, "flood")
	heldAtKill := s.waitHeld(ctx, flooded)
	leader.kill()
	killedAt := time.Now()
	s.waitLeader(ctx, follower)
	tookOver := time.Now()
	heldAtTakeOver := s.held(ctx)
	time.Sleep(12 * time.Second)
	stopLoad()
	waitLoad()

	tally, settle := s.settle(ctx, 2*time.Minute)
	stopWatch()
	s.check(tally)
	s.checkNoAttemptRanTwice(tally)
	require.Positive(t, tally.deadLettered)
	// No worker died and no job outlasted its timeout: any second execution
	// would be a job run twice.
	require.Zero(t, tally.redelivered, "load-test jobs executed more than once")
	// Fair share held the flood back across the kill and admitted it
	// without a leader; lending lent.
	require.Zero(t, watch.errs, "fair-share samples that failed")
	require.Positive(t, watch.heldPeak, "fair share never held a job back")
	require.Positive(t, heldAtKill, "nothing held back at the kill")
	require.Less(t, heldAtTakeOver, heldAtKill, "held jobs admitted while no scheduler led")
	require.Positive(t, tally.lent, "no job was lent")

	count := func(sql string, args ...any) int {
		t.Helper()
		var n int
		require.NoError(t, s.pool.QueryRow(ctx, sql, args...).Scan(&n))
		return n
	}
	// Cron: every slot ran once, under both leaders. A run is keyed by its
	// slot (scheduled_at); counting runs per period bucket also catches two
	// runs of one period under different keys.
	for kind, period := range map[string]int{jobs.KindReanalyzeStale: 2, jobs.KindRetention: 3} {
		require.Zero(t, count(`
			SELECT count(*) FROM (
				SELECT floor(extract(epoch FROM scheduled_at) / $2) FROM river_job WHERE kind = $1
				GROUP BY 1 HAVING count(*) > 1) twice`, kind, period),
			"%s periods that ran twice", kind)
		require.Positive(t, count(`SELECT count(*) FROM river_job WHERE kind = $1 AND state = 'completed' AND scheduled_at < $2`, kind, killedAt),
			"%s slots before the kill", kind)
		require.Positive(t, count(`SELECT count(*) FROM river_job WHERE kind = $1 AND state = 'completed' AND scheduled_at > $2`, kind, tookOver),
			"%s slots after the take-over", kind)
	}
	// Escalation and drains, under both leaders.
	require.Positive(t, count(`SELECT count(*) FROM job_escalations WHERE actor = $1 AND escalated_at < $2`, escalation.ActorScheduler, killedAt))
	require.Positive(t, count(`SELECT count(*) FROM job_escalations WHERE actor = $1 AND escalated_at > $2`, escalation.ActorScheduler, tookOver),
		"escalations after the take-over")
	require.Positive(t, count(`SELECT count(*) FROM dead_letter_jobs WHERE moved_at < $1`, killedAt))
	require.Positive(t, count(`SELECT count(*) FROM dead_letter_jobs WHERE moved_at > $1`, tookOver), "drains after the take-over")
	// No job drained twice, none drained that should not have been: the
	// dead letters are exactly the jobs that fail every attempt, one row
	// each (the accounting found each of those in dead_letter_jobs).
	var failing []int64
	for _, e := range s.ledger.all() {
		if e.want == deadLettered {
			failing = append(failing, e.id)
		}
	}
	require.Equal(t, len(failing), count(`SELECT count(*) FROM dead_letter_jobs`), "dead letters vs jobs failing on purpose")
	require.Equal(t, len(failing), count(`SELECT count(DISTINCT job_id) FROM dead_letter_jobs WHERE job_id = ANY($1)`, failing))
	// Aging, counted by the new leader itself.
	promotions := scrapeSum(t, follower.metricsURL, "tierq_aging_promotions_total")
	require.Positive(t, promotions, "aging promotions by the new leader")

	// The caps held across the failover: they are the database's, and
	// admission the workers'.
	caps := s.checkCaps(ctx, nil)
	s.requireCapsKept(caps, watch)

	s.summary(tally, tookOver.Sub(killedAt), settle, append([]string{
		fmt.Sprintf("cron_slots=%d", count(`SELECT count(*) FROM river_job WHERE kind = ANY($1)`, []string{jobs.KindReanalyzeStale, jobs.KindRetention})),
		fmt.Sprintf("escalations=%d", count(`SELECT count(*) FROM job_escalations WHERE actor = $1`, escalation.ActorScheduler)),
		fmt.Sprintf("new_leader_promotions=%.0f", promotions),
		fmt.Sprintf("flood=%d", len(flooded)), fmt.Sprintf("held_peak=%d", watch.heldPeak),
		fmt.Sprintf("held_at_kill=%d", heldAtKill), fmt.Sprintf("held_at_takeover=%d", heldAtTakeOver),
		fmt.Sprintf("lent=%d", tally.lent), fmt.Sprintf("returned=%d", s.returned(ctx, watch)),
		fmt.Sprintf("ran_twice=%d", tally.sameAttempt)}, caps.figures(watch)...)...)
}

// scrapeSum adds up every sample of metric at url.
func scrapeSum(t *testing.T, url, metric string) float64 {
	t.Helper()
	var sum float64
	for _, line := range strings.Split(proctest.Scrape(t, url), "\n") {
		if !strings.HasPrefix(line, metric+"{") && !strings.HasPrefix(line, metric+" ") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		require.NoError(t, err, line)
		sum += v
	}
	return sum
}
