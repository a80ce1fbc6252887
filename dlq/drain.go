package dlq

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tierq/tierq/internal/db"
)

// drainSQL moves at most $1 discarded jobs in one statement. The claim takes
// row locks and skips rows another drain (or anyone) holds; a row that
// stopped being discarded before the lock (River UI's retry) is rechecked and
// left alone. The delete and the insert commit together or not at all, and
// job_id is unique, so a job is never in both tables, in neither, or twice in
// dead_letter_jobs. The claim walks River's (state, queue, priority, ...)
// index from state 'discarded'.
const drainSQL = `
WITH claimed AS (
    SELECT id FROM river_job
    WHERE state = 'discarded'
    LIMIT $1
    FOR UPDATE SKIP LOCKED
),
removed AS (
    DELETE FROM river_job AS j
    USING claimed
    WHERE j.id = claimed.id
    RETURNING j.id, j.kind, j.queue, j.priority, j.args, j.metadata, j.tags, j.errors,
              j.attempt, j.max_attempts, j.created_at, j.finalized_at
),
moved AS (
    INSERT INTO dead_letter_jobs (job_id, kind, queue, priority, args, metadata, tags, errors,
                                  attempt, max_attempts, created_at, finalized_at)
    SELECT id, kind, queue, priority, args, coalesce(metadata, '{}'), coalesce(tags::text[], '{}'),
           coalesce(to_jsonb(errors), '[]'), attempt, max_attempts, created_at, finalized_at
    FROM removed
    RETURNING queue
)
SELECT queue, count(*) FROM moved GROUP BY queue`

// DrainResult counts the jobs one Drain moved.
type DrainResult struct {
	Moved   int
	ByQueue map[string]int
	Batches int
}

// Drain moves every discarded River job into dead_letter_jobs, at most batch
// per statement, each statement its own transaction. It stops when a batch
// comes back short (the rest, if any, is locked by a concurrent drain) or ctx
// ends; what it moved before an error stays moved.
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
			return res, nil
		}
	}
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
