//go:build chaos

package chaos_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/tiers"
)

// operators is what the racing operators did, from the answers they got.
type operators struct {
	mu sync.Mutex
	// deadLetterJob maps a dead letter's id to its job's, from listings.
	deadLetterJob map[int64]int64
	// replays counts successful replays per dead letter: at most 1 each.
	replays map[int64]int
	// patched counts API escalations answered 200 (moved or already there);
	// cliMoved counts tierctl escalations that moved a job.
	patched, cliMoved   int
	deleted, purgedRuns int
	answers             map[string]int // "<action> <status>"
}

func (o *operators) note(action string, status int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.answers[action+" "+strconv.Itoa(status)]++
}

// TestOperatorsRacing runs escalations, replays and deletes of dead letters,
// through the API and tierctl at once, while workers fetch the same jobs.
// Some jobs fail until 10 s into the run: replayed before that they fail
// again, after it they complete. Afterwards every job is accounted for
// (replays followed, deletes known), no dead letter was replayed twice, the
// escalation audit of each job chains from its first queue to its last, and
// every replay recorded in the database is one an operator was told about.
func TestOperatorsRacing(t *testing.T) {
	s := newSystem(t, "operators-racing")
	ctx := context.Background()
	// Aging off: priority then changes only by audited escalations.
	s.scheduler("AGING_INTERVAL=0")
	s.scheduler("AGING_INTERVAL=0")
	few := []string{"ANALYZER_QUEUE_PRIORITY_WORKERS=2", "ANALYZER_QUEUE_DEFAULT_WORKERS=1", "ANALYZER_QUEUE_SCHEDULED_WORKERS=1"}
	s.worker(s.analyzer, few...)
	s.worker(s.analyzer, few...)
	s.worker(s.specGen)
	s.api()

	ops := &operators{deadLetterJob: map[int64]int64{}, replays: map[int64]int{}, answers: map[string]int{}}
	recoversAt := time.Now().Add(10 * time.Second)
	runCtx, stop := context.WithTimeout(ctx, 22*time.Second)
	defer stop()
	// Requests are not cut off when the run ends (opCtx): an answer lost
	// after the server acted would leave an action the ledger never heard
	// of. A transport error (the API hung for 10 s) fails the test.
	opCtx := context.WithoutCancel(runCtx)
	var (
		wg     sync.WaitGroup
		errMu  sync.Mutex
		opErrs []error
	)
	fail := func(err error) {
		errMu.Lock()
		defer errMu.Unlock()
		opErrs = append(opErrs, err)
	}

	// Load: analyzer jobs faster than the few workers take them, so there is
	// always a queue to escalate in; one in five fails until recoversAt.
	wg.Go(func() {
		r := rand.New(rand.NewPCG(5, uint64(time.Now().UnixNano())))
		for i := 0; runCtx.Err() == nil; i++ {
			var batch []loadtestJob
			for k := range 5 {
				job := routedLoadtest(r, s.analyzer, tiers.All()[(i+k)%4], k == 4, 100, 300)
				if k == 0 {
					job = failingLoadtest(job, recoversAt, 1)
					job.want = settled
				}
				batch = append(batch, job)
			}
			_ = s.insert(opCtx, batch)
			time.Sleep(100 * time.Millisecond)
		}
	})

	randomJob := func(r *rand.Rand) int64 {
		all := s.ledger.all()
		if len(all) == 0 {
			return 0
		}
		return all[r.IntN(len(all))].id
	}
	classes := []string{"priority", "default", "scheduled"}

	// Escalations through the API.
	for n := range 3 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(n), uint64(time.Now().UnixNano())))
			for runCtx.Err() == nil {
				time.Sleep(5 * time.Millisecond)
				id := randomJob(r)
				if id == 0 {
					continue
				}
				status, _, err := s.call(opCtx, http.MethodPatch, fmt.Sprintf("/v1/jobs/%d", id), adminToken,
					map[string]any{"queue_class": classes[r.IntN(3)], "actor": "api-op", "reason": "chaos: racing escalation"})
				if err != nil {
					fail(fmt.Errorf("PATCH /v1/jobs/%d: %w", id, err))
				} else {
					ops.note("patch", status)
					if status == http.StatusOK {
						ops.mu.Lock()
						ops.patched++
						ops.mu.Unlock()
					}
				}
			}
		})
	}
	// Escalations through tierctl.
	wg.Go(func() {
		r := rand.New(rand.NewPCG(9, uint64(time.Now().UnixNano())))
		for runCtx.Err() == nil {
			id := randomJob(r)
			if id == 0 {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			out, err := s.tierctlErr("escalate", strconv.FormatInt(id, 10), "--to", classes[r.IntN(3)],
				"--actor", "cli-op", "--reason", "chaos: racing escalation")
			ops.note("tierctl-escalate", exitCode(err))
			if err == nil && strings.Contains(out, " -> ") {
				ops.mu.Lock()
				ops.cliMoved++
				ops.mu.Unlock()
			}
		}
	})
	// Replays through the API and tierctl, of the same dead letters at once.
	pendingDeadLetters := func() []int64 {
		status, body, err := s.call(opCtx, http.MethodGet, "/v1/dead-letters?pending=true&limit=20", adminToken, nil)
		if err != nil || status != http.StatusOK {
			fail(fmt.Errorf("GET /v1/dead-letters: %d %s %v", status, body, err))
			return nil
		}
		var page struct {
			DeadLetters []struct {
				ID    int64 `json:"id"`
				JobID int64 `json:"job_id"`
			} `json:"dead_letters"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			fail(fmt.Errorf("GET /v1/dead-letters: %w: %s", err, body))
			return nil
		}
		ids := make([]int64, len(page.DeadLetters))
		ops.mu.Lock()
		for i, d := range page.DeadLetters {
			ops.deadLetterJob[d.ID] = d.JobID
			ids[i] = d.ID
		}
		ops.mu.Unlock()
		return ids
	}
	replayed := func(deadLetter, newJob int64) {
		ops.mu.Lock()
		ops.replays[deadLetter]++
		job := ops.deadLetterJob[deadLetter]
		ops.mu.Unlock()
		s.ledger.replayed(job, newJob)
	}
	wg.Go(func() {
		for runCtx.Err() == nil {
			for _, id := range pendingDeadLetters() {
				status, body, err := s.call(opCtx, http.MethodPost, fmt.Sprintf("/v1/dead-letters/%d/replay", id), adminToken,
					map[string]any{"actor": "api-op"})
				if err != nil {
					fail(fmt.Errorf("replay dead letter %d: %w", id, err))
					continue
				}
				ops.note("api-replay", status)
				if status == http.StatusOK {
					var outcome struct {
						JobID int64 `json:"job_id"`
					}
					if err := json.Unmarshal(body, &outcome); err != nil || outcome.JobID == 0 {
						fail(fmt.Errorf("replay dead letter %d: %v: %s", id, err, body))
						continue
					}
					replayed(id, outcome.JobID)
				}
			}
			time.Sleep(300 * time.Millisecond)
		}
	})
	wg.Go(func() {
		for runCtx.Err() == nil {
			ids := pendingDeadLetters()
			if len(ids) == 0 {
				time.Sleep(300 * time.Millisecond)
				continue
			}
			args := []string{"dlq", "replay", "--json", "--actor", "cli-op"}
			for _, id := range ids {
				args = append(args, strconv.FormatInt(id, 10))
			}
			out, err := s.tierctlErr(args...)
			ops.note("tierctl-replay", exitCode(err))
			var outcomes []struct {
				ID    int64 `json:"id"`
				JobID int64 `json:"job_id"`
			}
			// stdout is the JSON array; stderr (after it) says why it exited 1.
			if err := json.NewDecoder(strings.NewReader(out)).Decode(&outcomes); err != nil {
				fail(fmt.Errorf("tierctl dlq replay: %w: %s", err, out))
			}
			for _, o := range outcomes {
				if o.JobID != 0 {
					replayed(o.ID, o.JobID)
				}
			}
		}
	})
	// Deletes of single dead letters (API and tierctl), and purges of the
	// replayed ones.
	wg.Go(func() {
		r := rand.New(rand.NewPCG(11, uint64(time.Now().UnixNano())))
		for i := 0; runCtx.Err() == nil; i++ {
			time.Sleep(250 * time.Millisecond)
			ids := pendingDeadLetters()
			if len(ids) == 0 {
				continue
			}
			id := ids[r.IntN(len(ids))]
			ops.mu.Lock()
			job := ops.deadLetterJob[id]
			ops.mu.Unlock()
			var gone bool
			if i%2 == 0 {
				status, _, err := s.call(opCtx, http.MethodDelete, fmt.Sprintf("/v1/dead-letters/%d", id), adminToken, nil)
				if err != nil {
					fail(fmt.Errorf("DELETE dead letter %d: %w", id, err))
				}
				gone = err == nil && status == http.StatusNoContent
				ops.note("api-delete", status)
			} else {
				out, err := s.tierctlErr("dlq", "delete", strconv.FormatInt(id, 10))
				gone = err == nil && strings.Contains(out, "deleted")
				ops.note("tierctl-delete", exitCode(err))
			}
			if gone {
				s.ledger.purge(job)
				ops.mu.Lock()
				ops.deleted++
				ops.mu.Unlock()
			}
			if i%3 == 2 {
				_, err := s.tierctlErr("dlq", "purge", "--older-than", "1s", "--replayed-only")
				ops.note("tierctl-purge", exitCode(err))
				ops.mu.Lock()
				ops.purgedRuns++
				ops.mu.Unlock()
			}
		}
	})
	wg.Wait()
	require.Empty(t, opErrs, "operator requests that failed")

	tally, settle := s.settle(ctx, 2*time.Minute)
	s.check(tally)

	// No dead letter replayed twice.
	for id, n := range ops.replays {
		require.LessOrEqual(t, n, 1, "dead letter %d replayed %d times", id, n)
	}
	// Every replay the database recorded is one an operator was told about.
	replays, _ := s.ledger.operatorActions()
	rows, err := s.pool.Query(ctx, `SELECT job_id, replay_job_id FROM dead_letter_jobs WHERE replay_job_id IS NOT NULL`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var job, replay int64
		require.NoError(t, rows.Scan(&job, &replay))
		require.Equal(t, replays[job], replay, "dead letter of job %d was replayed as job %d, but no operator was told", job, replay)
	}
	require.NoError(t, rows.Err())

	audited := s.checkAuditChains(ctx)
	var apiMoves, cliMoves int
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE actor = 'api-op'), count(*) FILTER (WHERE actor = 'cli-op') FROM job_escalations`).
		Scan(&apiMoves, &cliMoves))
	require.Equal(t, ops.cliMoved, cliMoves, "tierctl escalations that said they moved a job vs audit rows")
	require.LessOrEqual(t, apiMoves, ops.patched, "audit rows by the API's operator vs 200 answers")
	require.Positive(t, apiMoves)
	require.Positive(t, len(ops.replays))
	require.Positive(t, ops.deleted)

	s.summary(tally, 0, settle,
		fmt.Sprintf("escalations_api=%d", apiMoves), fmt.Sprintf("escalations_cli=%d", cliMoves),
		fmt.Sprintf("replays=%d", len(ops.replays)), fmt.Sprintf("deletes=%d", ops.deleted), fmt.Sprintf("purge_runs=%d", ops.purgedRuns),
		fmt.Sprintf("audit_chains=%d", audited))
	t.Logf("operator answers: %v", ops.answers)
}

// checkAuditChains checks, for every inserted job that is still in river_job
// or dead_letter_jobs, that its job_escalations rows chain: the first move
// starts where the job was inserted, each starts where the previous ended,
// and the last ends where the job is. It returns how many jobs had moves.
func (s *system) checkAuditChains(ctx context.Context) int {
	s.t.Helper()
	type place struct {
		Queue    string
		Priority int
	}
	type move struct {
		JobID    int64
		From, To place
		Actor    string
	}
	entries := s.ledger.all()
	ids := make([]int64, len(entries))
	for i, e := range entries {
		ids[i] = e.id
	}
	rows, err := s.pool.Query(ctx, `
		SELECT job_id, from_queue, from_priority, to_queue, to_priority, actor
		FROM job_escalations WHERE job_id = ANY($1) ORDER BY id`, ids)
	require.NoError(s.t, err)
	defer rows.Close()
	moves := map[int64][]move{}
	for rows.Next() {
		var m move
		require.NoError(s.t, rows.Scan(&m.JobID, &m.From.Queue, &m.From.Priority, &m.To.Queue, &m.To.Priority, &m.Actor))
		moves[m.JobID] = append(moves[m.JobID], m)
	}
	require.NoError(s.t, rows.Err())
	rows.Close()

	places, err := s.pool.Query(ctx, `
		SELECT id, queue, priority FROM river_job WHERE id = ANY($1)
		UNION ALL
		SELECT job_id, queue, priority FROM dead_letter_jobs WHERE job_id = ANY($1)`, ids)
	require.NoError(s.t, err)
	defer places.Close()
	now := map[int64]place{}
	for places.Next() {
		var (
			id int64
			p  place
		)
		require.NoError(s.t, places.Scan(&id, &p.Queue, &p.Priority))
		now[id] = p
	}
	require.NoError(s.t, places.Err())
	places.Close()

	for _, e := range entries {
		at := place{e.queue, e.priority}
		for i, m := range moves[e.id] {
			require.Equal(s.t, at, m.From, "job %d: move %d (by %s) starts at %v, but the job was at %v", e.id, i, m.Actor, m.From, at)
			at = m.To
		}
		if p, ok := now[e.id]; ok {
			require.Equal(s.t, at, p, "job %d is at %v, but its audit ends at %v", e.id, p, at)
		}
	}
	return len(moves)
}

// exitCode is a command's exit status (0 for nil, -1 if it did not run).
func exitCode(err error) int {
	var exitErr *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exitErr):
		return exitErr.ExitCode()
	}
	return -1
}
