//go:build chaos

package chaos_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/jobmeta"
	"github.com/tierq/tierq/jobs"
)

// final is where a job ended, as the accounting finds it.
type final string

const (
	completed    final = "completed"
	cancelled    final = "cancelled"
	deadLettered final = "dead_lettered"
	// purged: an operator deleted the job's dead letter (the scenario knows
	// which, from the API's and tierctl's answers).
	purged final = "purged"
	// lost: the job is nowhere, and no operator removed it. Must never
	// happen.
	lost final = "lost"
	// settled: any of completed, cancelled, dead_lettered or purged is right
	// (a job whose fate depends on racing operators).
	settled final = "settled"
	// pending: not finished yet (queued, running, retrying, discarded but
	// not drained, or an analysis whose chained specview is not done).
	pending final = "pending"
)

// entry is one job a scenario inserted.
type entry struct {
	id       int64
	kind     string
	queue    string
	priority int
	want     final
	recorded bool   // writes load_test_executions
	flaky    bool   // fails on purpose (fail_until): retries are by design
	reason   string // for a cancelled or dead-lettered job: part of its last error
}

// ledger is every job a scenario inserted, and what its operators did to
// them.
type ledger struct {
	mu      sync.Mutex
	entries []entry
	byID    map[int64]int
	// replays maps a dead-lettered job's id to the job its replay inserted,
	// from the replay answers (the dead letter row may be purged since).
	replays map[int64]int64
	// purged holds the ids of jobs whose dead letter an operator deleted.
	purged map[int64]bool
}

func newLedger() *ledger {
	return &ledger{byID: map[int64]int{}, replays: map[int64]int64{}, purged: map[int64]bool{}}
}

func (l *ledger) add(e entry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.byID[e.id]; ok {
		return // a duplicate insert answered with the queued job
	}
	l.byID[e.id] = len(l.entries)
	l.entries = append(l.entries, e)
}

// expect changes what the scenario expects of job id (an operator acted on
// it, such as cancelling it while it was queued).
func (l *ledger) expect(id int64, want final) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if i, ok := l.byID[id]; ok {
		l.entries[i].want = want
	}
}

func (l *ledger) all() []entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.entries)
}

func (l *ledger) replayed(jobID, replayJobID int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.replays[jobID] = replayJobID
}

func (l *ledger) purge(jobID int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.purged[jobID] = true
}

func (l *ledger) operatorActions() (map[int64]int64, map[int64]bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	replays := make(map[int64]int64, len(l.replays))
	for k, v := range l.replays {
		replays[k] = v
	}
	purged := make(map[int64]bool, len(l.purged))
	for k, v := range l.purged {
		purged[k] = v
	}
	return replays, purged
}

// tally is the accounting over every inserted job.
type tally struct {
	inserted, completed, cancelled, deadLettered, purged, lost, pending int
	// redelivered counts executions beyond the first of recorded jobs that
	// do not fail on purpose: what at-least-once delivery cost.
	redelivered int
	// badCompletions counts recorded jobs with more than one completed
	// execution, or completed with none. Must be 0.
	badCompletions int
	// sameAttempt counts attempts of recorded jobs that started more than
	// once (two executions with one attempt number). A stop's soft-stop
	// timeout reruns the attempt it cut short (River resets the attempt
	// since 0.44), but a redelivery after a crash is a new attempt (the
	// rescuer errors the stuck one): without graceful stops, each is a job
	// fetched twice, or moved by fair share or lending while it ran
	// (checkNoAttemptRanTwice).
	sameAttempt int
	// unacknowledged counts load-test and analysis jobs in the database that
	// no answer told the scenario about (an insert or replay whose answer
	// was lost in a fault); strayPending those of them not finished. The
	// promise covers them too: strayPending must be 0.
	unacknowledged, strayPending int
	// held counts the jobs of any kind that fair share still holds back
	// (pending with jobmeta.HeldAt): once the load stops, every held job
	// must be admitted and run, whatever process held it. Must end at 0.
	held int
	// lent counts the inserted jobs that ended lent (jobmeta.LentFrom kept
	// as a record: they ran in their service's priority queue);
	// lentAstray those of them back in the queue they were lent from still
	// marked lent, which returning a job must not leave. Must be 0.
	lent, lentAstray int
	// unexpected lists jobs that ended somewhere else than they should.
	unexpected []string
	// pendingWhy samples why jobs are still pending.
	pendingWhy []string
}

// account finds where every inserted job is now, following replays.
func (s *system) account(ctx context.Context) (tally, error) {
	entries := s.ledger.all()
	replays, purgedJobs := s.ledger.operatorActions()
	t := tally{inserted: len(entries)}

	type place struct {
		state, queue, lentFrom *string
		held                   bool
		deadID                 *int64
		replayTo               *int64
	}
	current := map[int64]int64{}
	unresolved := make([]int64, 0, len(entries))
	visited := make([]int64, 0, len(entries))
	for _, e := range entries {
		current[e.id] = e.id
		unresolved = append(unresolved, e.id)
		visited = append(visited, e.id)
	}
	finals := map[int64]final{}
	why := map[int64]string{}
	for round := 0; len(unresolved) > 0; round++ {
		if round > 50 {
			return t, fmt.Errorf("replay chains longer than 50 jobs")
		}
		ids := make([]int64, len(unresolved))
		for i, id := range unresolved {
			ids[i] = current[id]
		}
		rows, err := s.pool.Query(ctx, `
			SELECT i.id, j.state::text, j.queue, coalesce(j.metadata ? $2, false), j.metadata->>$3, d.id, d.replay_job_id
			FROM unnest($1::bigint[]) AS i(id)
			LEFT JOIN river_job j ON j.id = i.id
			LEFT JOIN dead_letter_jobs d ON d.job_id = i.id`, ids, jobmeta.HeldAt, jobmeta.LentFrom)
		if err != nil {
			return t, err
		}
		places := map[int64]place{}
		for rows.Next() {
			var (
				id int64
				p  place
			)
			if err := rows.Scan(&id, &p.state, &p.queue, &p.held, &p.lentFrom, &p.deadID, &p.replayTo); err != nil {
				rows.Close()
				return t, err
			}
			places[id] = p
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return t, err
		}

		var next []int64
		for _, id := range unresolved {
			at := current[id]
			p := places[at]
			switch {
			case p.state != nil && *p.state == "completed":
				finals[id] = completed
			case p.state != nil && *p.state == "cancelled":
				finals[id] = cancelled
			case p.state != nil:
				finals[id], why[id] = pending, fmt.Sprintf("job %d is %s in %s", at, *p.state, *p.queue)
				if p.held {
					why[id] += " (held by fair share)"
				}
				if p.lentFrom != nil {
					why[id] += " (lent from " + *p.lentFrom + ")"
				}
			case p.deadID != nil && p.replayTo != nil:
				current[id] = *p.replayTo
				next = append(next, id)
				visited = append(visited, *p.replayTo)
			case p.deadID != nil:
				finals[id] = deadLettered
			case replays[at] != 0:
				current[id] = replays[at]
				next = append(next, id)
				visited = append(visited, replays[at])
			case purgedJobs[at]:
				finals[id] = purged
			default:
				finals[id] = lost
			}
		}
		unresolved = next
	}

	// An analysis is done when the specview job it chained has written its
	// document.
	var analyses []int64
	for _, e := range entries {
		if e.kind == jobs.KindAnalysis && finals[e.id] == completed {
			analyses = append(analyses, current[e.id])
		}
	}
	if len(analyses) > 0 {
		rows, err := s.pool.Query(ctx, `
			SELECT r.job_id FROM analysis_results r
			WHERE r.job_id = ANY($1) AND EXISTS (SELECT 1 FROM spec_documents d WHERE d.analysis_result_id = r.id)`, analyses)
		if err != nil {
			return t, err
		}
		documented := map[int64]bool{}
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return t, err
			}
			documented[id] = true
		}
		rows.Close()
		for _, e := range entries {
			if e.kind == jobs.KindAnalysis && finals[e.id] == completed && !documented[current[e.id]] {
				finals[e.id], why[e.id] = pending, fmt.Sprintf("analysis %d has no spec document yet", current[e.id])
			}
		}
	}

	// Deliveries of the recorded load-test jobs, every job of their replay
	// chains included.
	rows, err := s.pool.Query(ctx, `
		SELECT job_id, count(*), count(completed_at) FROM load_test_executions
		WHERE job_id = ANY($1) GROUP BY job_id`, visited)
	if err != nil {
		return t, err
	}
	executions, completions := map[int64]int{}, map[int64]int{}
	for rows.Next() {
		var id int64
		var n, done int
		if err := rows.Scan(&id, &n, &done); err != nil {
			rows.Close()
			return t, err
		}
		executions[id], completions[id] = n, done
		if done > 1 {
			t.badCompletions++
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return t, err
	}
	if err := s.pool.QueryRow(ctx, `
		SELECT count(*) FROM (
			SELECT 1 FROM load_test_executions WHERE job_id = ANY($1)
			GROUP BY job_id, attempt HAVING count(*) > 1) AS twice`, visited).Scan(&t.sameAttempt); err != nil {
		return t, err
	}
	for _, e := range entries {
		if !e.recorded {
			continue
		}
		if !e.flaky {
			t.redelivered += max(0, executions[e.id]-1)
		}
		if finals[e.id] == completed && completions[current[e.id]] != 1 {
			t.badCompletions++
		}
	}

	// Jobs nobody told the scenario about.
	if err := s.pool.QueryRow(ctx, `
		SELECT count(*), count(*) FILTER (WHERE state NOT IN ('completed', 'cancelled'))
		FROM river_job WHERE kind = ANY($1) AND NOT (id = ANY($2))`,
		[]string{jobs.KindLoadTest, jobs.KindAnalysis}, visited).Scan(&t.unacknowledged, &t.strayPending); err != nil {
		return t, err
	}

	// Fair share and lending: nothing held left behind, of any kind; the
	// lent jobs, wherever their chains ended (a lent job that failed every
	// attempt ends in dead_letter_jobs with its metadata).
	if err := s.pool.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM river_job WHERE `+heldSQL+`)::int,
		       count(*) FILTER (WHERE j.metadata ? $1)::int,
		       count(*) FILTER (WHERE j.metadata ? $1 AND j.queue = j.metadata->>$1)::int
		FROM (SELECT queue, metadata FROM river_job WHERE id = ANY($2)
		      UNION ALL
		      SELECT queue, metadata FROM dead_letter_jobs WHERE job_id = ANY($2)) AS j`,
		jobmeta.LentFrom, visited).Scan(&t.held, &t.lent, &t.lentAstray); err != nil {
		return t, err
	}

	for _, e := range entries {
		f := finals[e.id]
		switch f {
		case completed:
			t.completed++
		case cancelled:
			t.cancelled++
		case deadLettered:
			t.deadLettered++
		case purged:
			t.purged++
		case lost:
			t.lost++
		case pending:
			t.pending++
			if len(t.pendingWhy) < 5 {
				t.pendingWhy = append(t.pendingWhy, why[e.id])
			}
		}
		if f != pending && f != lost && f != e.want && e.want != settled && len(t.unexpected) < 10 {
			t.unexpected = append(t.unexpected, fmt.Sprintf("%s job %d (from %s) ended %s, want %s", e.kind, e.id, e.queue, f, e.want))
		}
	}
	return t, nil
}

// settle waits until no inserted job is pending, up to limit, and returns the
// last accounting and how long it took.
func (s *system) settle(ctx context.Context, limit time.Duration) (tally, time.Duration) {
	s.t.Helper()
	start := time.Now()
	var (
		t   tally
		err error
	)
	for {
		t, err = s.account(ctx)
		if err == nil && t.pending == 0 && t.strayPending == 0 && t.held == 0 {
			return t, time.Since(start)
		}
		if time.Since(start) > limit {
			require.NoError(s.t, err, "accounting")
			return t, time.Since(start)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// check fails the test unless the accounting is clean: nothing lost,
// nothing pending, nothing completed twice, everything where it should be.
func (s *system) check(t tally) {
	s.t.Helper()
	require.Positive(s.t, t.inserted, "the scenario inserted nothing")
	require.Zero(s.t, t.lost, "jobs lost")
	require.Zero(s.t, t.pending, "jobs still pending after the settle limit: %v", t.pendingWhy)
	require.Zero(s.t, t.strayPending, "jobs no answer reported (%d) still unfinished", t.unacknowledged)
	require.Zero(s.t, t.badCompletions, "recorded jobs completed more than once, or completed without a completed execution")
	require.Zero(s.t, t.held, "jobs fair share still holds back after the settle limit")
	require.Zero(s.t, t.lentAstray, "lent jobs back in their own queue still marked lent")
	require.Empty(s.t, t.unexpected, "jobs that ended in the wrong place")
}

// checkNoAttemptRanTwice fails the test if an attempt of a recorded job
// started twice, for a scenario that stops no worker gracefully: its
// workers only die by SIGKILL, whose cut-short jobs the rescuer retries as
// new attempts.
func (s *system) checkNoAttemptRanTwice(t tally) {
	s.t.Helper()
	require.Zero(s.t, t.sameAttempt, "attempts of recorded jobs that started twice")
}

// summary prints the scenario's one-line summary.
func (s *system) summary(t tally, recover, settle time.Duration, extra ...string) {
	line := fmt.Sprintf("CHAOS %-18s inserted=%d completed=%d cancelled=%d dead_lettered=%d lost=%d redelivered=%d recover=%s settle=%s",
		s.name, t.inserted, t.completed, t.cancelled, t.deadLettered, t.lost, t.redelivered, round(recover), round(settle))
	if t.unacknowledged > 0 {
		line += fmt.Sprintf(" unacknowledged=%d", t.unacknowledged)
	}
	if t.purged > 0 {
		line += fmt.Sprintf(" purged=%d", t.purged)
	}
	if len(extra) > 0 {
		line += " " + strings.Join(extra, " ")
	}
	fmt.Println(line)
}

func round(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return d.Round(100 * time.Millisecond).String()
}

// unfinished returns, per River client, the recorded executions of jobs not
// failing on purpose that never completed: each is a delivery that a crash
// or a stop cut short.
func (s *system) unfinished(ctx context.Context) map[string][]int64 {
	s.t.Helper()
	var ids []int64
	for _, e := range s.ledger.all() {
		if e.recorded && !e.flaky {
			ids = append(ids, e.id)
		}
	}
	rows, err := s.pool.Query(ctx, `
		SELECT client_id, job_id FROM load_test_executions
		WHERE job_id = ANY($1) AND completed_at IS NULL`, ids)
	require.NoError(s.t, err)
	defer rows.Close()
	out := map[string][]int64{}
	for rows.Next() {
		var (
			client string
			id     int64
		)
		require.NoError(s.t, rows.Scan(&client, &id))
		out[client] = append(out[client], id)
	}
	require.NoError(s.t, rows.Err())
	return out
}

// lastFinalized is the latest finalized_at of the jobs ids.
func (s *system) lastFinalized(ctx context.Context, ids []int64) time.Time {
	s.t.Helper()
	var at *time.Time
	require.NoError(s.t, s.pool.QueryRow(ctx, `SELECT max(finalized_at) FROM river_job WHERE id = ANY($1)`, ids).Scan(&at))
	if at == nil {
		return time.Time{}
	}
	return *at
}
