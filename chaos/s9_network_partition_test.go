//go:build chaos

package chaos_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/service"
	"github.com/tierq/tierq/tiers"
)

// The network-partition scenario's durations.
const (
	// shortSilence is the short case's silence: well under
	// RESCUE_STUCK_JOBS_AFTER (61 s).
	shortSilence = 15 * time.Second
	// shortCaseJob and longCaseJob are the sleeps of the jobs placed on the
	// partitioned workers: each finishes while its worker's path is
	// silent. longCaseJob is also how long a rescued one runs again
	// elsewhere, which must outlast the partitioned worker's late writes
	// (they land within about 5 s of the path coming back).
	shortCaseJob = 4 * time.Second
	longCaseJob  = 8 * time.Second
	// schedulersAfter is when the schedulers start, counted from the
	// silence: River's rescuer passes every 30 s from its first, a few
	// seconds after the leader starts, so its third pass comes just past
	// RESCUE_STUCK_JOBS_AFTER for the jobs the worker had started before
	// the silence.
	schedulersAfter = 2 * time.Second
	// rescueText is the error River's rescuer records on a job it rescues.
	rescueText = "Stuck job rescued by JobRescuer"
)

// TestNetworkPartition cuts the network path between one worker and the
// database, without closing it: each of two workers connects through a
// pathProxy that goes silent (nothing forwarded either way, nothing
// closed), then forwards again. The other worker of each service and the
// schedulers connect directly. The two cases run at once, one per service:
//
//   - short (analyzer): silent for 15 s, well inside
//     RESCUE_STUCK_JOBS_AFTER (61 s). The jobs the worker was running are
//     finished by it once the path is back (their statements were only
//     late): none is rescued or run again.
//   - long (spec-gen): silent until the rescuer has rescued every job the
//     worker was running and the long ones run again on the other
//     worker. Then the path comes back, and the partitioned worker's late
//     writes reach the server: River's completion statement
//     (JobSetStateIfRunningMany) checks only that the job is `running`,
//     not which attempt, so a late completion that lands while the job's
//     newer attempt runs completes the job then (stale_completions,
//     expected for every long job whose rerun was running when the path
//     came back); the rerun's own completion later changes nothing. A
//     late failure would likewise mark a running newer attempt retryable
//     (stale_failures, counted).
//
// A statement the worker gave up on still reaches the server when the path
// comes back (TCP would retransmit it; the proxy delivers what waited): a
// fetch River's 10 s timeout abandoned then takes jobs in the worker's name
// that no one works, until the rescuer retries them (late_fetched, counted;
// the accounting then waits up to RESCUE_STUCK_JOBS_AFTER and River's 30 s
// more, and the jobs late are logged).
//
// Both workers must complete new jobs again with no restart (`recover`
// is how long after the path came back), and the accounting must be clean:
// nothing lost or stranded, no recorded job completed twice, no attempt
// started twice (a rerun is a new attempt).
//
// The schedulers start 2 s into the silence (schedulersAfter), so that the
// rescuer's passes (every 30 s from its first, a few seconds after the
// leader starts) put one just past RESCUE_STUCK_JOBS_AFTER: the jobs are
// rescued about 65 s into the silence, not up to 30 s later.
//
// The rescue relies on the worker's idle_in_transaction_session_timeout
// (worker.Deployment.SessionPoolConfig): a worker cut off in the middle of
// a job's completing transaction holds that job's row lock, and River's
// rescuer, which updates all the stuck jobs it found in one statement,
// waited on it for the whole silence (the scenario's first run: nothing
// rescued after 100 s).
func TestNetworkPartition(t *testing.T) {
	s := newSystem(t, "network-partition")
	ctx := context.Background()
	upstream := fmt.Sprintf("127.0.0.1:%d", suite.cluster.port)
	shortPath, longPath := newPathProxy(t, upstream), newPathProxy(t, upstream)

	// One partitioned and one direct worker per service; no scheduler yet.
	short := s.worker(s.analyzer, "DATABASE_URL="+shortPath.url(t, s.url))
	s.worker(s.analyzer)
	long := s.worker(s.specGen, "DATABASE_URL="+longPath.url(t, s.url))
	s.worker(s.specGen)

	loadCtx, stopLoad := context.WithCancel(ctx)
	// Light enough that each service's direct worker alone keeps up
	// with it (a rescued job then runs again within seconds), from its
	// default worker counts.
	stats, waitLoad := s.run(loadCtx, load{
		Every: 100 * time.Millisecond, Batch: 2, MinMS: 20, MaxMS: 300, Services: s.registry.Services(),
	})
	time.Sleep(2 * time.Second)

	// Both partitioned workers run long jobs when their paths go silent:
	// the long case an unrecorded one (completed through River's
	// completer), the short case one of each.
	placed := s.placeLong(ctx, []placement{
		{p: long, svc: s.specGen, sleep: longCaseJob, recorded: []bool{false}},
		{p: short, svc: s.analyzer, sleep: shortCaseJob, recorded: []bool{true, false}},
	})
	silencedAt := time.Now()
	shortPath.silence()
	longPath.silence()
	// What the workers sent just before is answered by now (its answer
	// waits in the proxy).
	time.Sleep(300 * time.Millisecond)
	cutShort, cutLong := s.runningOn(ctx, short, placed), s.runningOn(ctx, long, placed)
	t.Logf("silent at %s: %s running %d jobs, %s %d", silencedAt.Format("15:04:05.000"), short.name, len(cutShort), long.name, len(cutLong))

	time.Sleep(time.Until(silencedAt.Add(schedulersAfter)))
	schedulers := []*proc{s.scheduler(), s.scheduler()}
	s.waitLeader(ctx, schedulers...)

	time.Sleep(time.Until(silencedAt.Add(shortSilence)))
	shortPath.resume()
	shortBack := time.Now()

	// The long case: silent until every job the worker was running is
	// rescued and the long ones run again elsewhere (or, after 15 s,
	// regardless).
	s.waitRescued(ctx, long, cutLong, silencedAt.Add(100*time.Second))
	rescuedSeen := time.Now()
	for {
		var waiting int
		require.NoError(t, s.pool.QueryRow(ctx, `
			SELECT count(*) FROM river_job WHERE id = ANY($1) AND state IN ('retryable', 'available', 'scheduled', 'pending')`,
			cutLong.longIDs()).Scan(&waiting))
		if waiting == 0 || time.Since(rescuedSeen) > 15*time.Second {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	rerunning := s.rerunning(ctx, long, cutLong.longIDs())
	longPath.resume()
	longBack := time.Now()
	t.Logf("long case: rescued seen %.1fs into the silence, path back at %.1fs, %d long jobs running again elsewhere",
		rescuedSeen.Sub(silencedAt).Seconds(), longBack.Sub(silencedAt).Seconds(), len(rerunning))

	// Each partitioned worker completes a job it started after its path
	// came back; the reruns of the long jobs run to their end.
	shortRecover := s.waitNewCompletion(ctx, short, shortBack, 30*time.Second)
	longRecover := s.waitNewCompletion(ctx, long, longBack, 30*time.Second)
	time.Sleep(time.Until(s.lastAttempt(ctx, cutLong.longIDs()).Add(longCaseJob + time.Second)))
	stopLoad()
	waitLoad()

	stoppedAt := time.Now()
	tally, settle := s.settle(ctx, 2*time.Minute)
	s.logLate(ctx, stoppedAt.Add(10*time.Second))
	for _, p := range s.processes() {
		require.True(t, p.alive(), "%s exited", p.name)
	}
	s.check(tally)
	s.checkNoAttemptRanTwice(tally)
	require.Zero(t, stats.insertErrors, "routing-helper inserts failed")

	shortOut := s.partitionOutcome(ctx, short, cutShort)
	longOut := s.partitionOutcome(ctx, long, cutLong)
	for _, o := range []partitionOutcome{shortOut, longOut} {
		require.Empty(t, o.problems, "%s's jobs", o.name)
	}
	// Short: every job the worker was running finished there, late.
	require.Equal(t, len(cutShort), shortOut.finishedByIt, "short case: jobs the partitioned worker finished itself")
	require.Zero(t, shortOut.rescued, "short case: jobs rescued")
	require.Zero(t, shortOut.ranTwice, "short case: jobs run again")
	require.Zero(t, shortOut.staleCompletions+shortOut.staleFailures, "short case: late writes over a newer attempt")
	// Long: every job it was running was rescued and ran again; each
	// late completion that found its rerun running completed the job.
	require.Equal(t, len(cutLong), longOut.rescued, "long case: jobs rescued")
	require.Equal(t, len(cutLong), longOut.ranTwice, "long case: jobs run again")
	require.NotEmpty(t, rerunning, "long case: no long job ran again elsewhere when the path came back: the scenario proved nothing")
	// River's JobSetStateIfRunningMany compares only state = 'running':
	// each late completion that found its rerun running completed it.
	require.Subset(t, longOut.staleIDs, rerunning, "long case: jobs running again when the path came back that the late completion did not complete")

	for _, c := range []struct {
		name    string
		out     partitionOutcome
		cut     cutJobs
		silence time.Duration
		recover time.Duration
		extra   []string
	}{
		{"short", shortOut, cutShort, shortBack.Sub(silencedAt), shortRecover, nil},
		{"long", longOut, cutLong, longBack.Sub(silencedAt), longRecover, []string{
			fmt.Sprintf("rescued_after=%.1fs", longOut.rescuedAt.Sub(silencedAt).Seconds()),
			fmt.Sprintf("rerunning_at_back=%d", len(rerunning)),
		}},
	} {
		extra := append([]string{
			"case=" + c.name, fmt.Sprintf("silence=%.1fs", c.silence.Seconds()), fmt.Sprintf("running=%d", len(c.cut)),
			fmt.Sprintf("finished_by_it=%d", c.out.finishedByIt), fmt.Sprintf("rescued=%d", c.out.rescued),
			fmt.Sprintf("ran_twice=%d", c.out.ranTwice), fmt.Sprintf("stale_completions=%d", c.out.staleCompletions),
			fmt.Sprintf("stale_failures=%d", c.out.staleFailures), fmt.Sprintf("late_fetched=%d", c.out.lateFetched),
		}, c.extra...)
		s.summary(tally, c.recover, settle, append(extra, fmt.Sprintf("same_attempt=%d", tally.sameAttempt))...)
	}
}

// placement asks placeLong for jobs on worker p: one job of svc's
// priority queue sleeping sleep per entry of recorded (recorded or not).
type placement struct {
	p        *proc
	svc      *service.Service
	sleep    time.Duration
	recorded []bool
}

// placeLong inserts the placements' jobs every 300 ms until each worker
// runs at least one of each of its kinds (recorded and not) at once, and
// returns the ids of every job it inserted (in the ledger, to complete).
// The services' other workers take some too, and finish them.
func (s *system) placeLong(ctx context.Context, ps []placement) map[int64]bool {
	s.t.Helper()
	placed := map[int64]bool{}
	deadline := time.Now().Add(20 * time.Second)
	for {
		for _, pl := range ps {
			batch := make([]loadtestJob, len(pl.recorded))
			for i, rec := range pl.recorded {
				batch[i] = loadtestJob{
					args: jobs.LoadTestArgs{SleepMS: int(pl.sleep / time.Millisecond), Record: rec},
					opts: pl.svc.InsertOpts(tiers.Pro, "", false),
					want: completed,
				}
			}
			ids, err := s.insertIDs(ctx, batch)
			require.NoError(s.t, err)
			for _, id := range ids {
				placed[id] = true
			}
		}
		time.Sleep(300 * time.Millisecond)
		ready := true
		for _, pl := range ps {
			var kinds []bool
			require.NoError(s.t, s.pool.QueryRow(ctx, `
				SELECT coalesce(array_agg(DISTINCT coalesce((args->>'record')::boolean, false)), '{}')
				FROM river_job WHERE id = ANY($1) AND state = 'running' AND attempted_by[cardinality(attempted_by)] = $2`,
				keysOf(placed), pl.p.clientID).Scan(&kinds))
			for _, rec := range pl.recorded {
				ready = ready && slices.Contains(kinds, rec)
			}
		}
		if ready {
			return placed
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("the partitioned workers ran no long job of each kind within 20s")
		}
	}
}

// cutJob is a job a worker was running when its path went silent.
type cutJob struct {
	id       int64
	attempt  int
	recorded bool
	long     bool // placed by placeLong
}

type cutJobs []cutJob

func (c cutJobs) ids() []int64 {
	out := make([]int64, len(c))
	for i, j := range c {
		out[i] = j.id
	}
	return out
}

// longIDs are the ids of the unrecorded long jobs placed on the worker.
func (c cutJobs) longIDs() []int64 {
	var out []int64
	for _, j := range c {
		if j.long && !j.recorded {
			out = append(out, j.id)
		}
	}
	return out
}

// runningOn is the load-test jobs the database says p is running: its
// client ID last in attempted_by. placed marks the long ones.
func (s *system) runningOn(ctx context.Context, p *proc, placed map[int64]bool) cutJobs {
	s.t.Helper()
	rows, err := s.pool.Query(ctx, `
		SELECT id, attempt, coalesce((args->>'record')::boolean, false) FROM river_job
		WHERE kind = $1 AND state = 'running' AND attempted_by[cardinality(attempted_by)] = $2 ORDER BY id`,
		jobs.KindLoadTest, p.clientID)
	require.NoError(s.t, err)
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (cutJob, error) {
		var j cutJob
		err := row.Scan(&j.id, &j.attempt, &j.recorded)
		j.long = placed[j.id]
		return j, err
	})
	require.NoError(s.t, err)
	return out
}

// waitRescued waits until none of the jobs cut is running on p any more
// (the rescuer made them retryable, or they ran again elsewhere), failing
// the test at deadline.
func (s *system) waitRescued(ctx context.Context, p *proc, cut cutJobs, deadline time.Time) {
	s.t.Helper()
	for {
		var n int
		require.NoError(s.t, s.pool.QueryRow(ctx, `
			SELECT count(*) FROM river_job
			WHERE id = ANY($1) AND state = 'running' AND attempted_by[cardinality(attempted_by)] = $2`,
			cut.ids(), p.clientID).Scan(&n))
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%d of the %d jobs %s was running still running there at %s", n, len(cut), p.name, deadline.Format("15:04:05"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// rerunning is those of ids running now on another worker than p.
func (s *system) rerunning(ctx context.Context, p *proc, ids []int64) []int64 {
	s.t.Helper()
	var out []int64
	require.NoError(s.t, s.pool.QueryRow(ctx, `
		SELECT coalesce(array_agg(id), '{}') FROM river_job
		WHERE id = ANY($1) AND state = 'running' AND attempted_by[cardinality(attempted_by)] <> $2`,
		ids, p.clientID).Scan(&out))
	return out
}

// lastAttempt is the latest attempted_at of ids.
func (s *system) lastAttempt(ctx context.Context, ids []int64) time.Time {
	s.t.Helper()
	var at *time.Time
	require.NoError(s.t, s.pool.QueryRow(ctx, `SELECT max(attempted_at) FROM river_job WHERE id = ANY($1)`, ids).Scan(&at))
	if at == nil {
		return time.Time{}
	}
	return *at
}

// waitNewCompletion waits until p completes a recorded job it started
// after since and returns how long after since that was, failing the test
// after limit.
func (s *system) waitNewCompletion(ctx context.Context, p *proc, since time.Time, limit time.Duration) time.Duration {
	s.t.Helper()
	for {
		var at *time.Time
		require.NoError(s.t, s.pool.QueryRow(ctx, `
			SELECT min(completed_at) FROM load_test_executions WHERE client_id = $1 AND started_at > $2`,
			p.clientID, since).Scan(&at))
		if at != nil {
			return at.Sub(since)
		}
		if time.Since(since) > limit {
			s.t.Fatalf("%s completed no job started after its path came back within %s", p.name, limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// partitionOutcome is what became of the jobs a partitioned worker was
// running when its path went silent.
type partitionOutcome struct {
	name string
	// finishedByIt: completed in the attempt it was running, by it (for a
	// recorded job, its execution completed it), never rescued.
	finishedByIt int
	// rescued: the rescuer's error is among the job's errors; rescuedAt
	// the latest such rescue.
	rescued   int
	rescuedAt time.Time
	// ranTwice: the job ran again in a later attempt.
	ranTwice int
	// staleCompletions: completed by the partitioned worker's late
	// completion over a later attempt: the job is completed with a
	// finalized_at before its last attempt started.
	staleCompletions int
	staleIDs         []int64
	// staleFailures: an error of the partitioned worker's attempt (or an
	// earlier one) recorded after the rescue's: River records an error
	// only on a running job, so its late failure landed on a running
	// later attempt and made it retryable.
	staleFailures int
	// lateFetched: jobs the worker's late fetch took, a fetch it had given
	// up on (River's 10 s timeout) that reached the server when the path
	// came back: running in its name with no worker, until the rescuer
	// retried them.
	lateFetched int
	// problems: jobs not where the scenario's rules put them.
	problems []string
}

// partitionOutcome reads what became of cut, the jobs p was running.
func (s *system) partitionOutcome(ctx context.Context, p *proc, cut cutJobs) partitionOutcome {
	s.t.Helper()
	out := partitionOutcome{name: p.name}
	type row struct {
		state       string
		attempt     int
		attemptedAt time.Time
		finalizedAt *time.Time
		errors      []map[string]any
	}
	rows, err := s.pool.Query(ctx, `SELECT id, state::text, attempt, attempted_at, finalized_at, errors FROM river_job WHERE id = ANY($1)`, cut.ids())
	require.NoError(s.t, err)
	found := map[int64]row{}
	for rows.Next() {
		var (
			id int64
			r  row
		)
		require.NoError(s.t, rows.Scan(&id, &r.state, &r.attempt, &r.attemptedAt, &r.finalizedAt, &r.errors))
		found[id] = r
	}
	require.NoError(s.t, rows.Err())
	// The recorded jobs' completed executions: client and attempt.
	type execution struct {
		client  string
		attempt int
	}
	completedBy := map[int64][]execution{}
	execRows, err := s.pool.Query(ctx, `SELECT job_id, client_id, attempt FROM load_test_executions WHERE job_id = ANY($1) AND completed_at IS NOT NULL`, cut.ids())
	require.NoError(s.t, err)
	for execRows.Next() {
		var (
			id int64
			e  execution
		)
		require.NoError(s.t, execRows.Scan(&id, &e.client, &e.attempt))
		completedBy[id] = append(completedBy[id], e)
	}
	require.NoError(s.t, execRows.Err())

	require.NoError(s.t, s.pool.QueryRow(ctx, `
		SELECT count(*) FROM river_job
		WHERE kind = $1 AND $2 = ANY(attempted_by) AND NOT (id = ANY($3))
		  AND EXISTS (SELECT 1 FROM unnest(errors) AS e WHERE e->>'error' = $4)`,
		jobs.KindLoadTest, p.clientID, cut.ids(), rescueText).Scan(&out.lateFetched))

	for _, j := range cut {
		r, ok := found[j.id]
		if !ok {
			out.problems = append(out.problems, fmt.Sprintf("job %d is not in river_job", j.id))
			continue
		}
		s.t.Logf("%s was running job %d (attempt %d, recorded %t, long %t): now %s, attempt %d started %s, finalized %v, errors %v",
			p.name, j.id, j.attempt, j.recorded, j.long, r.state, r.attempt, r.attemptedAt.Format("15:04:05.000"), r.finalizedAt, r.errors)
		rescueAt := -1
		for i, e := range r.errors {
			if e["error"] == rescueText && rescueAt < 0 {
				rescueAt = i
				if at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(e["at"])); err == nil && at.After(out.rescuedAt) {
					out.rescuedAt = at
				}
			}
		}
		rescued := rescueAt >= 0
		if rescued {
			out.rescued++
			for _, e := range r.errors[rescueAt+1:] {
				if attempt, _ := e["attempt"].(float64); int(attempt) <= j.attempt && e["error"] != rescueText {
					out.staleFailures++
					break
				}
			}
		}
		if r.attempt > j.attempt {
			out.ranTwice++
		}
		if r.state == "completed" && r.attempt > j.attempt && r.finalizedAt != nil && r.finalizedAt.Before(r.attemptedAt) {
			out.staleCompletions++
			out.staleIDs = append(out.staleIDs, j.id)
		}
		execs := completedBy[j.id]
		if j.recorded && r.state == "completed" && (len(execs) != 1 || execs[0].attempt != r.attempt) {
			out.problems = append(out.problems, fmt.Sprintf("recorded job %d completed in attempt %d, its completed executions %v", j.id, r.attempt, execs))
		}
		if r.state == "completed" && r.attempt == j.attempt && !rescued &&
			(!j.recorded || len(execs) == 1 && execs[0].client == p.clientID) {
			out.finishedByIt++
		}
	}
	return out
}

func keysOf(m map[int64]bool) []int64 {
	out := make([]int64, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
