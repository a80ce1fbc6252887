// Package seed fills river_job with the rows benchmarks and tests need:
// finished history, discarded jobs, and jobs waiting in a queue, written in
// one INSERT ... SELECT each, far faster than inserting through River.
package seed

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tierq/tierq/internal/db"
	"github.com/tierq/tierq/internal/riverschema"
	"github.com/tierq/tierq/jobmeta"
	"github.com/tierq/tierq/loadtest"
)

// Queue is a queue the seeds fill, with the kind and args of the discarded
// jobs Discarded puts there.
type Queue struct {
	// Name is the queue's name.
	Name string
	// Kind is the kind of Discarded's jobs in the queue.
	Kind string
	// Args are their args: a JSON object in which every {i} stands for the
	// job's number (1 to n), so that no two jobs' args are equal, e.g.
	// {"target": "/srv/t{i}", "tier": "pro"}.
	Args string
}

// errNoQueues is returned when a seed is given no queue to fill.
var errNoQueues = errors.New("no queues to seed")

// Finished inserts n completed load-test jobs (kind loadtest.Kind) spread
// over queues, the i-th in queues[i % len(queues)] (as a busy installation's
// table is mostly completed work), then ANALYZEs river_job.
func Finished(ctx context.Context, q db.Querier, queues []string, n int) error {
	if len(queues) == 0 {
		return fmt.Errorf("seed finished jobs: %w", errNoQueues)
	}
	_, err := q.Exec(ctx, `
		INSERT INTO `+riverschema.JobTable+` (state, queue, priority, kind, args, max_attempts, attempt, attempted_at,
		                       created_at, scheduled_at, finalized_at)
		SELECT '`+riverschema.StateCompleted+`', ($2::text[])[1 + i % cardinality($2::text[])],
		       1 + i % 4, $3, '{}', 10, 1, now() - interval '1 hour',
		       now() - interval '2 hours', now() - interval '2 hours', now() - interval '1 hour'
		FROM generate_series(1, $1) AS i`, n, queues, loadtest.Kind)
	if err != nil {
		return fmt.Errorf("seed finished jobs: %w", err)
	}
	return Analyze(ctx, q)
}

// Discarded inserts n jobs as River leaves a job whose last attempt failed:
// state discarded, attempt = max_attempts = 2, two attempt errors ("attempt
// 1 of job <i>", "attempt 2 of job <i>"), finalized now, created an hour
// (plus i seconds) ago. The i-th (from 1) goes to queues[i % len(queues)],
// with that Queue's kind and args. It returns their ids.
func Discarded(ctx context.Context, q db.Querier, queues []Queue, n int) ([]int64, error) {
	if len(queues) == 0 {
		return nil, fmt.Errorf("seed discarded jobs: %w", errNoQueues)
	}
	names, kinds, args := make([]string, len(queues)), make([]string, len(queues)), make([]string, len(queues))
	for k, queue := range queues {
		names[k], kinds[k], args[k] = queue.Name, queue.Kind, queue.Args
	}
	rows, err := q.Query(ctx, `
		INSERT INTO `+riverschema.JobTable+` (state, queue, priority, kind, args, metadata, max_attempts, attempt, attempted_at,
		                       created_at, scheduled_at, finalized_at, errors)
		SELECT '`+riverschema.StateDiscarded+`', ($2::text[])[q.k], 1 + i % 4, ($3::text[])[q.k],
		       replace(($4::text[])[q.k], '{i}', i::text)::jsonb,
		       jsonb_build_object('`+jobmeta.BasePriority+`', 4), 2, 2, now() - interval '1 minute',
		       now() - interval '1 hour' - make_interval(secs => i), now() - interval '1 hour', now(),
		       ARRAY[jsonb_build_object('at', now() - interval '2 minutes', 'attempt', 1, 'error', 'attempt 1 of job ' || i, 'trace', ''),
		             jsonb_build_object('at', now() - interval '1 minute', 'attempt', 2, 'error', 'attempt 2 of job ' || i, 'trace', '')]
		FROM generate_series(1, $1) AS i,
		     LATERAL (SELECT 1 + i % cardinality($2::text[]) AS k) AS q
		RETURNING id`, n, names, kinds, args)
	if err != nil {
		return nil, fmt.Errorf("seed discarded jobs: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("seed discarded jobs: %w", err)
	}
	return ids, nil
}

// Available inserts n available jobs of kind into queue at priority (0:
// cycling through 1..4), due since waited ago, with args {}; the first due of
// them waited dueWaited instead. It is how the sweep benchmarks lay out jobs that a sweep
// must and must not touch.
func Available(ctx context.Context, q db.Querier, kind, queue string, priority, n int, waited time.Duration, due int, dueWaited time.Duration) error {
	return available(ctx, q, kind, queue, "{}", priority, n, waited, due, dueWaited)
}

// AvailableArgs inserts n available jobs of kind into queue at priority (0:
// cycling through 1..4), due now, each with args (a JSON object): work
// that does something when worked, such as load-test jobs that sleep
// ({"sleep_ms": 20}).
func AvailableArgs(ctx context.Context, q db.Querier, kind, queue, args string, priority, n int) error {
	return available(ctx, q, kind, queue, args, priority, n, 0, 0, 0)
}

func available(ctx context.Context, q db.Querier, kind, queue, args string, priority, n int, waited time.Duration, due int, dueWaited time.Duration) error {
	_, err := q.Exec(ctx, `
		INSERT INTO `+riverschema.JobTable+` (state, queue, priority, kind, args, max_attempts, scheduled_at)
		SELECT '`+riverschema.StateAvailable+`', $1, CASE WHEN $2 = 0 THEN 1 + i % 4 ELSE $2 END, $3, $8::jsonb, 10,
		       CASE WHEN i <= $5 THEN now() - make_interval(secs => $6) ELSE now() - make_interval(secs => $4) END
		FROM generate_series(1, $7) AS i`,
		queue, priority, kind, waited.Seconds(), due, dueWaited.Seconds(), n, args)
	if err != nil {
		return fmt.Errorf("seed available jobs: %w", err)
	}
	return nil
}

// Analyze refreshes river_job's planner statistics, as autovacuum would
// after a bulk load.
func Analyze(ctx context.Context, q db.Querier) error {
	if _, err := q.Exec(ctx, `ANALYZE `+riverschema.JobTable); err != nil {
		return fmt.Errorf("analyze river_job: %w", err)
	}
	return nil
}
