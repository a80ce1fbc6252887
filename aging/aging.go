// Package aging prevents starvation inside a queue. River fetches a queue's
// available jobs by priority (1 first) and then by scheduled_at, so a steady
// flow of better-priority work can hold a worse-priority job back forever.
// Aging improves the priority of waiting jobs with their wait:
//
//	effective = max(maxPriority, base − floor(wait / step))
//
// where wait counts from when the job's current attempt became due: its
// scheduled_at, or, for a job the escalation sweep moved, the due time the
// move kept in its metadata (jobmeta.DueAt), and base is the priority the job had before aging first touched it (kept in
// its metadata under jobmeta.BasePriority). Aging never makes a priority
// worse: a job already better than maxPriority (an operator's priority 1) is
// left as it is.
//
// Sweep applies the formula to every available job it would change, in
// bounded batches, one statement each; it is idempotent and safe to run from
// two processes at once.
package aging

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tierq/tierq/internal/db"
	"github.com/tierq/tierq/internal/jobmetasql"
	"github.com/tierq/tierq/internal/riverschema"
	"github.com/tierq/tierq/jobmeta"
	"github.com/tierq/tierq/routing"
)

// Effective is the priority a job of base priority waiting wait should have.
// A non-positive step turns aging off.
func Effective(base int, wait, step time.Duration, maxPriority int) int {
	if step <= 0 || wait < 0 || base <= maxPriority {
		return base
	}
	return max(maxPriority, base-int(wait/step))
}

// Settings say what a sweep does.
type Settings struct {
	// Step is the wait that improves priority by one level.
	Step time.Duration
	// MaxPriority is the best priority aging gives (1..4).
	MaxPriority int
	// Queues are the queues aged: the service queues
	// (service.Registry.Queues). Required: a sweep without them is an
	// error, never a sweep of some default set.
	Queues []string
	// Batch is the most jobs one statement changes. Default 1000.
	Batch int
}

// Result counts the jobs a sweep promoted, by queue, and the jobs it left
// alone because it could not age them (metadata that is not a JSON object,
// a scheduled_at of -infinity).
type Result struct {
	Promoted map[string]int
	Total    int
	Skipped  []db.Skipped
}

// sweepSQL ages one batch. The due CTE finds, through River's prioritized
// fetching index (state, queue, priority, scheduled_at), the available jobs
// of a worse priority than the cap in a range of scheduled_at (see
// sweepRanges), keeps those whose effective priority is better than their
// current one, and locks them SKIP LOCKED: a job a worker is fetching right
// now is locked by that fetch and skipped, and one fetched a moment ago fails
// the state check when re-read under the lock. Wait counts from when the job
// became due (jobmetasql.DueAtSQL).
//
// A job whose metadata is not a JSON object has no place for its base
// priority, and one whose scheduled_at is infinite has no wait: both are
// left alone (skippedSQL reports them), as are jobs of paused queues.
func sweepSQL(scheduledRange string) string {
	return `
WITH due AS (
    SELECT j.id, b.base, extract(epoch FROM now() - d.at) AS wait_s
    FROM ` + riverschema.JobTable + ` AS j,
         LATERAL (SELECT ` + jobmetasql.DueAtSQL("j") + ` AS at) AS d,
         LATERAL (SELECT ` + jobmetasql.BasePrioritySQL("j") + ` AS base) AS b
    WHERE j.state = '` + riverschema.StateAvailable + `'
      AND j.queue = ANY($1::text[])
      AND j.priority = ANY($2::smallint[])
      AND ` + scheduledRange + `
      AND ` + jobmetasql.IsObjectSQL("j.metadata") + `
      AND NOT ` + db.PausedSQL("j.queue") + `
      AND greatest($4::int, b.base - floor(extract(epoch FROM now() - d.at) / $3)) < j.priority
    LIMIT $5
    FOR UPDATE OF j SKIP LOCKED
)
UPDATE ` + riverschema.JobTable + ` AS j
SET priority = greatest($4::int, due.base - floor(due.wait_s / $3))::smallint,
    metadata = ` + jobmetasql.WithMoveSQL("j.metadata",
		`jsonb_build_object('`+jobmeta.BasePriority+`', due.base)`,
		jobmetasql.Move{
			Kind: `'` + jobmeta.MoveAging + `'`, FromQueue: "j.queue", ToQueue: "j.queue",
			FromPriority: "j.priority", ToPriority: "greatest($4::int, due.base - floor(due.wait_s / $3))::int",
		}.SQL()) + `
FROM due
WHERE j.id = due.id
RETURNING j.queue`
}

// sweepRanges split the jobs a sweep looks at into two index ranges of
// scheduled_at: the jobs available in their queue for at least a step, and
// the recent ones a move carried an earlier due time across
// (jobmeta.MovedAt): an escalated job ages from when it became due, not
// from its move. Each range is one plain index scan; a join of the two (a
// UNION) let the planner re-run it per row (seconds instead of milliseconds
// at 1M rows).
var sweepRanges = []string{
	`j.scheduled_at <= now() - make_interval(secs => $3) AND j.scheduled_at > '-infinity'`,
	`j.scheduled_at > now() - make_interval(secs => $3) AND j.scheduled_at < 'infinity' AND ` + jobmetasql.HasMovedAtSQL("j"),
}

// skippedSQL finds the jobs the sweep would look at but cannot change: their
// metadata is not a JSON object, or their scheduled_at is -infinity.
var skippedSQL = `
SELECT j.id, ` + db.SkipReasonSQL("j") + ` AS reason FROM ` + riverschema.JobTable + ` AS j
WHERE j.state = '` + riverschema.StateAvailable + `' AND j.queue = ANY($1::text[]) AND j.priority = ANY($2::smallint[])
  AND j.scheduled_at <= now() - make_interval(secs => $3)
  AND ` + db.SkipReasonSQL("j") + ` IS NOT NULL
  AND NOT ` + db.PausedSQL("j.queue") + `
ORDER BY j.id
LIMIT $4`

// Sweep runs one aging pass: batches of at most s.Batch jobs until a batch
// comes back short. Each batch commits on its own when q is a pool. Jobs of
// paused queues are left alone; jobs whose metadata is not a JSON object are
// left alone and reported in Result.Skipped.
func Sweep(ctx context.Context, q db.Querier, s Settings) (Result, error) {
	if s.Step <= 0 {
		return Result{}, errors.New("aging: step must be positive")
	}
	if s.MaxPriority < routing.PriorityEscalated || s.MaxPriority > routing.PriorityLowest {
		return Result{}, fmt.Errorf("aging: max priority %d not in 1..4", s.MaxPriority)
	}
	if len(s.Queues) == 0 {
		return Result{}, errors.New("aging: queues are required")
	}
	queues := s.Queues
	batch := s.Batch
	if batch <= 0 {
		batch = 1000
	}
	var priorities []int16
	for p := s.MaxPriority + 1; p <= routing.PriorityLowest; p++ {
		priorities = append(priorities, int16(p)) //nolint:gosec // 2..4
	}

	res := Result{Promoted: map[string]int{}}
	for _, scheduledRange := range sweepRanges {
		if err := sweepRange(ctx, q, sweepSQL(scheduledRange), queues, priorities, s, batch, &res); err != nil {
			return res, err
		}
	}
	skipped, err := db.FindSkipped(ctx, q, skippedSQL, queues, priorities, s.Step.Seconds())
	if err != nil {
		return res, fmt.Errorf("aging sweep: find skipped jobs: %w", err)
	}
	res.Skipped = skipped
	return res, nil
}

// sweepRange runs statement in batches until a batch comes back short,
// adding what each committed batch promoted to res. Each batch is planned
// for its arguments (pgx's unnamed statement), never with a cached generic
// plan: generic, the range of recently moved jobs read the whole backlog
// younger than a step through the fetching index (30–56 ms over 50,000
// jobs and River's retained completed ones), where the plan for the
// arguments reads the moved ones through the metadata index (2.5 ms).
func sweepRange(ctx context.Context, q db.Querier, statement string, queues []string, priorities []int16, s Settings, batch int, res *Result) error {
	for {
		rows, err := q.Query(ctx, statement, pgx.QueryExecModeCacheDescribe, queues, priorities, s.Step.Seconds(), s.MaxPriority, batch)
		if err != nil {
			return fmt.Errorf("aging sweep: %w", err)
		}
		// A batch counts only once its statement succeeded: rows read
		// before an error were rolled back with it.
		batchPromoted := map[string]int{}
		n := 0
		for rows.Next() {
			var queue string
			if err := rows.Scan(&queue); err != nil {
				rows.Close()
				return fmt.Errorf("aging sweep: %w", err)
			}
			batchPromoted[queue]++
			n++
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("aging sweep: %w", err)
		}
		for queue, k := range batchPromoted {
			res.Promoted[queue] += k
		}
		res.Total += n
		if n < batch {
			return nil
		}
	}
}
