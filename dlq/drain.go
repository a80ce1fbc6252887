package dlq

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tierq/tierq/internal/db"
	"github.com/tierq/tierq/internal/riverschema"
)

// drainSQL moves at most $1 discarded jobs in one statement. The claim takes
// row locks and skips rows another drain (or anyone) holds; a row that
// stopped being discarded before the lock (River UI's retry) is rechecked and
// left alone. The delete and the insert commit together or not at all, and
// job_id is unique, so a job is never in both tables, in neither, or twice in
// dead_letter_jobs. Rows are copied as they are, whatever the shape of their
// args or metadata (an array, a scalar, megabytes), with the unique key and
// states River's uniqueness needs on replay. The claim walks River's (state, queue, priority, ...)
// index from state 'discarded'.
//
// A discarded job whose id is already in dead_letter_jobs (possible only if
// river_job ids were reused: a restore, a sequence reset) is left in
// river_job, never claimed: inserting it would fail the whole batch on
// job_id's unique index and stop every later drain. Drain counts such jobs in
// Conflicts. The OFFSET 0 keeps that check a per-row probe of job_id's index:
// without it the planner may turn it into a hash anti-join that reads all of
// dead_letter_jobs on every batch (measured: 100k jobs drained at about 26k
// rows/s instead of 60k, the table growing under stale statistics).
const drainSQL = `
WITH claimed AS (
    SELECT j.id FROM ` + riverschema.JobTable + ` AS j
    WHERE j.state = '` + riverschema.StateDiscarded + `'
      AND NOT EXISTS (SELECT 1 FROM dead_letter_jobs AS d WHERE d.job_id = j.id OFFSET 0)
    LIMIT $1
    FOR UPDATE OF j SKIP LOCKED
),
removed AS (
    DELETE FROM ` + riverschema.JobTable + ` AS j
    USING claimed
    WHERE j.id = claimed.id
    RETURNING j.id, j.kind, j.queue, j.priority, j.args, j.metadata, j.tags, j.errors,
              j.attempt, j.max_attempts, j.created_at, j.finalized_at, j.unique_key, j.unique_states
),
moved AS (
    INSERT INTO dead_letter_jobs (job_id, kind, queue, priority, args, metadata, tags, errors,
                                  attempt, max_attempts, created_at, finalized_at, unique_key, unique_states)
    SELECT id, kind, queue, priority, args, coalesce(metadata, '{}'), coalesce(tags::text[], '{}'),
           coalesce(to_jsonb(errors), '[]'), attempt, max_attempts, created_at, finalized_at,
           unique_key, unique_states
    FROM removed
    RETURNING queue
)
SELECT queue, count(*) FROM moved GROUP BY queue`

// conflictsSQL counts discarded jobs the drain cannot move because their id
// is already in dead_letter_jobs. It reads only the discarded rows left.
const conflictsSQL = `
SELECT count(*) FROM ` + riverschema.JobTable + ` AS j
WHERE j.state = '` + riverschema.StateDiscarded + `' AND EXISTS (SELECT 1 FROM dead_letter_jobs AS d WHERE d.job_id = j.id)`

// DrainResult counts the jobs one Drain moved.
type DrainResult struct {
	Moved   int
	ByQueue map[string]int
	Batches int
	// Conflicts are discarded jobs left in river_job because a dead letter
	// with the same job id exists (see drainSQL); an operator must look.
	Conflicts int
}

// Drain moves every discarded River job into dead_letter_jobs, at most batch
// per statement, each statement its own transaction. It stops when a batch
// comes back short (what is left, if anything, is locked by a concurrent
// drain or a retry, or conflicts) or ctx ends; what it moved before an error
// stays moved.
func Drain(ctx context.Context, q db.Querier, batch int) (DrainResult, error) {
	if batch < 1 {
		return DrainResult{}, fmt.Errorf("drain dead letters: batch %d must be positive", batch)
	}
	res := DrainResult{ByQueue: map[string]int{}}
	for {
		n, err := DrainBatch(ctx, q, batch, res.ByQueue)
		if err != nil {
			return res, err
		}
		res.Batches++
		res.Moved += n
		if n < batch {
			break
		}
	}
	if err := q.QueryRow(ctx, conflictsSQL).Scan(&res.Conflicts); err != nil {
		return res, fmt.Errorf("drain dead letters: count conflicts: %w", err)
	}
	return res, nil
}

// DrainBatch runs the drain statement once, adding what it moved to byQueue
// (when not nil) once the statement has committed, and returns how many jobs
// it moved.
func DrainBatch(ctx context.Context, q db.Querier, batch int, byQueue map[string]int) (int, error) {
	rows, err := q.Query(ctx, drainSQL, batch)
	if err != nil {
		return 0, fmt.Errorf("drain dead letters: %w", err)
	}
	type queueCount struct {
		Queue string
		N     int
	}
	counts, err := pgx.CollectRows(rows, pgx.RowToStructByPos[queueCount])
	if err != nil {
		return 0, fmt.Errorf("drain dead letters: %w", err)
	}
	moved := 0
	for _, c := range counts {
		moved += c.N
		if byQueue != nil {
			byQueue[c.Queue] += c.N
		}
	}
	return moved, nil
}
