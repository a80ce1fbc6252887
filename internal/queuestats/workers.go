package queuestats

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tierq/tierq/internal/db"
	"github.com/tierq/tierq/internal/riverschema"
	"github.com/tierq/tierq/jobmeta"
)

// Workers is a queue's workers across the live worker processes.
type Workers struct {
	// Slots is the sum of the processes' workers for the queue: the
	// queue's capacity, as fair share counts it.
	Slots int
	// Processes is how many live processes serve the queue.
	Processes int
}

// workersSQL sums the unexpired fair-share heartbeats (fair_share_slots:
// one row per worker process and queue, renewed every 5 s and counting for
// 15 s) per queue: a small table, read whole.
const workersSQL = `
SELECT queue, sum(slots)::int, count(*)::int FROM fair_share_slots
WHERE expires_at > now() AND slots > 0
GROUP BY queue`

// LiveWorkers maps each queue some live worker process serves to its
// workers, from the processes' heartbeats (every tierq worker process
// sends them, with fair share on or off). A queue no live process serves
// is absent.
func LiveWorkers(ctx context.Context, q db.Querier) (map[string]Workers, error) {
	rows, err := q.Query(ctx, workersSQL)
	if err != nil {
		return nil, fmt.Errorf("read workers: %w", err)
	}
	out := map[string]Workers{}
	var (
		queue string
		w     Workers
	)
	if _, err := pgx.ForEachRow(rows, []any{&queue, &w.Slots, &w.Processes}, func() error {
		out[queue] = w
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read workers: %w", err)
	}
	return out, nil
}

// Lent is the jobs lent to a priority queue now (package fairshare's
// lending: free jobs of the service's default queue moved there to use its
// idle workers, marked jobmeta.LentFrom).
type Lent struct {
	Waiting int // available in the priority queue
	Running int
}

// lentSQL counts the lent jobs waiting or running in the priority queues
// $1, over River's (state, queue, priority, scheduled_at, id) index: the
// queues' available and running jobs, few while lending happens (it lends
// only to an idle queue, at most its workers), and the same rows the
// metrics' queue counts read.
const lentSQL = `
SELECT queue,
       count(*) FILTER (WHERE state = '` + riverschema.StateAvailable + `')::int,
       count(*) FILTER (WHERE state = '` + riverschema.StateRunning + `')::int
FROM ` + riverschema.JobTable + `
WHERE state IN ('` + riverschema.StateAvailable + `', '` + riverschema.StateRunning + `') AND queue = ANY($1::text[])
  AND metadata ? '` + jobmeta.LentFrom + `'
GROUP BY queue`

// LentNow maps each of priorityQueues that holds lent jobs now to them.
func LentNow(ctx context.Context, q db.Querier, priorityQueues []string) (map[string]Lent, error) {
	rows, err := q.Query(ctx, lentSQL, priorityQueues)
	if err != nil {
		return nil, fmt.Errorf("count lent jobs: %w", err)
	}
	out := map[string]Lent{}
	var (
		queue string
		l     Lent
	)
	if _, err := pgx.ForEachRow(rows, []any{&queue, &l.Waiting, &l.Running}, func() error {
		out[queue] = l
		return nil
	}); err != nil {
		return nil, fmt.Errorf("count lent jobs: %w", err)
	}
	return out, nil
}
