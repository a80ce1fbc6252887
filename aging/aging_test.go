package aging_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/aging"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/jobs"
)

func TestEffective(t *testing.T) {
	t.Parallel()

	const step = 5 * time.Minute
	tests := []struct {
		base    int
		wait    time.Duration
		maxPrio int
		want    int
	}{
		{base: 4, wait: 0, maxPrio: 2, want: 4},
		{base: 4, wait: step - time.Second, maxPrio: 2, want: 4},
		{base: 4, wait: step, maxPrio: 2, want: 3},
		{base: 4, wait: 2*step - time.Nanosecond, maxPrio: 2, want: 3},
		{base: 4, wait: 2 * step, maxPrio: 2, want: 2},
		{base: 4, wait: 10 * step, maxPrio: 2, want: 2},    // capped at the max priority
		{base: 4, wait: 10 * step, maxPrio: 1, want: 1},    // an operator may let aging reach 1
		{base: 3, wait: step, maxPrio: 2, want: 2},         // pro_plus reaches the cap after one step
		{base: 2, wait: 10 * step, maxPrio: 2, want: 2},    // enterprise starts at the cap
		{base: 1, wait: 10 * step, maxPrio: 2, want: 1},    // never made worse (operator's priority 1)
		{base: 4, wait: -time.Minute, maxPrio: 2, want: 4}, // clock skew: scheduled_at in the future
		{base: 4, wait: time.Hour, maxPrio: 4, want: 4},    // cap at 4 turns aging off
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("base%d_wait%s_max%d", tt.base, tt.wait, tt.maxPrio), func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, aging.Effective(tt.base, tt.wait, step, tt.maxPrio))
		})
	}
	require.Equal(t, 4, aging.Effective(4, time.Hour, 0, 2), "a zero step turns aging off")
}

// insertWaiting inserts an available loadtest job into queue at priority
// that became available wait ago.
func insertWaiting(t *testing.T, db *testdb.DB, queue string, priority int, wait time.Duration) int64 {
	t.Helper()
	return testdb.InsertWaiting(t, db, jobs.LoadTestArgs{}, &river.InsertOpts{Queue: queue, Priority: priority}, wait)
}

func TestSweepAppliesTheFormulaOnceAndOnlyToAvailableServiceJobs(t *testing.T) {
	t.Parallel()
	serviceQueues := testdb.Registry(t).Queues()
	db := testdb.New(t)
	ctx := context.Background()
	producer := db.Producer(t)

	const step = time.Minute
	type job struct {
		id       int64
		base     int
		wait     time.Duration
		wantPrio int
	}
	var waiting []job
	for _, base := range []int{1, 2, 3, 4} {
		for _, wait := range []time.Duration{0, 30 * time.Second, 61 * time.Second, 125 * time.Second, 10 * time.Minute} {
			id := insertWaiting(t, db, "analysis_default", base, wait)
			waiting = append(waiting, job{id: id, base: base, wait: wait, wantPrio: aging.Effective(base, wait, step, 2)})
		}
	}
	// Not aged: a job in a queue that is not a service queue, a job
	// scheduled for later, and a running job.
	foreign := insertWaiting(t, db, "scheduler", 4, time.Hour)
	later, err := producer.Insert(ctx, jobs.LoadTestArgs{}, &river.InsertOpts{Queue: "analysis_default", Priority: 4, ScheduledAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	running := insertWaiting(t, db, "specview_priority", 4, time.Hour)
	_, err = db.Pool.Exec(ctx, `UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now() WHERE id = $1`, running)
	require.NoError(t, err)

	// Batch 2 makes the sweep loop over several statements.
	res, err := aging.Sweep(ctx, db.Pool, aging.Settings{Step: step, MaxPriority: 2, Queues: serviceQueues, Batch: 2})
	require.NoError(t, err)

	wantTotal := 0
	for _, j := range waiting {
		got := db.Jobs(t, "id = $1", j.id)[0]
		require.Equal(t, j.wantPrio, got.Priority, "base %d waited %s", j.base, j.wait)
		if j.wantPrio != j.base {
			wantTotal++
			var base int
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT (metadata->>'tierq:base_priority')::int FROM river_job WHERE id = $1`, j.id).Scan(&base))
			require.Equal(t, j.base, base, "base priority kept in metadata")
		}
	}
	require.Equal(t, wantTotal, res.Total)
	require.Equal(t, map[string]int{"analysis_default": wantTotal}, res.Promoted)
	for _, id := range []int64{foreign, later.Job.ID, running} {
		require.Equal(t, 4, db.Jobs(t, "id = $1", id)[0].Priority, "job %d must not be aged", id)
	}

	// Idempotent: the same sweep again changes nothing.
	again, err := aging.Sweep(ctx, db.Pool, aging.Settings{Step: step, MaxPriority: 2, Queues: serviceQueues, Batch: 2})
	require.NoError(t, err)
	require.Zero(t, again.Total)
}

func TestPriorityImprovesWithWaitAndStopsAtTheMax(t *testing.T) {
	t.Parallel()
	serviceQueues := testdb.Registry(t).Queues()
	db := testdb.New(t)
	ctx := context.Background()

	const step = time.Second
	id := insertWaiting(t, db, "analysis_scheduled", 4, 0)
	var scheduledAt time.Time
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT scheduled_at FROM river_job WHERE id = $1`, id).Scan(&scheduledAt))

	// Sweep four times a step, for 3.5 steps, like the scheduler does with
	// AGING_INTERVAL = step/4.
	type observation struct {
		waited   time.Duration
		priority int
	}
	var seen []observation
	for start := time.Now(); time.Since(start) < 3500*time.Millisecond; time.Sleep(step / 4) {
		_, err := aging.Sweep(ctx, db.Pool, aging.Settings{Step: step, MaxPriority: 2, Queues: serviceQueues})
		require.NoError(t, err)
		var priority int
		var waited float64
		require.NoError(t, db.Pool.QueryRow(ctx,
			`SELECT priority, extract(epoch FROM now() - scheduled_at) FROM river_job WHERE id = $1`, id).Scan(&priority, &waited))
		seen = append(seen, observation{waited: time.Duration(waited * float64(time.Second)), priority: priority})
	}

	distinct := []int{seen[0].priority}
	for i, o := range seen {
		// Never better than the formula allows at the time of the sweep,
		// never worse than one sweep interval behind it.
		require.GreaterOrEqual(t, o.priority, aging.Effective(4, o.waited, step, 2), "observation %d: %+v", i, o)
		require.LessOrEqual(t, o.priority, aging.Effective(4, o.waited-step/4-50*time.Millisecond, step, 2), "observation %d: %+v", i, o)
		if i > 0 {
			require.LessOrEqual(t, o.priority, seen[i-1].priority, "priority never gets worse")
			if o.priority != seen[i-1].priority {
				distinct = append(distinct, o.priority)
			}
		}
	}
	require.Equal(t, []int{4, 3, 2}, distinct, "4 → 3 → 2 and no further: %+v", seen)
}

// BenchmarkEffective is the aging formula for a spread of waits
// (go test -run '^$' -bench Effective -benchmem ./aging/).
func BenchmarkEffective(b *testing.B) {
	b.ReportAllocs()
	var i int
	for b.Loop() {
		_ = aging.Effective(4, time.Duration(i%3600)*time.Second, 5*time.Minute, 2)
		i++
	}
}

// TestSweepAgesTheQueuesItIsGiven: aging knows no service by name. It ages
// the queues in Settings.Queues, here a team's own mailer service
// (testdb.MailerRegistry), and leaves every other queue alone, the
// reference app's too; without queues it refuses to run rather than guess.
func TestSweepAgesTheQueuesItIsGiven(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()

	mail := testdb.InsertWaiting(t, db, testdb.SendMailArgs{To: "a@example.com"}, &river.InsertOpts{Queue: "mailer_default", Priority: 4}, 10*time.Minute)
	analysis := insertWaiting(t, db, "analysis_default", 4, 10*time.Minute)

	_, err := aging.Sweep(ctx, db.Pool, aging.Settings{Step: time.Minute, MaxPriority: 2})
	require.ErrorContains(t, err, "queues are required")

	res, err := aging.Sweep(ctx, db.Pool, aging.Settings{Step: time.Minute, MaxPriority: 2, Queues: testdb.MailerRegistry(t).Queues()})
	require.NoError(t, err)
	require.Equal(t, map[string]int{"mailer_default": 1}, res.Promoted)
	require.Equal(t, 2, db.Jobs(t, "id = $1", mail)[0].Priority)
	require.Equal(t, 4, db.Jobs(t, "id = $1", analysis)[0].Priority)
}

// TestSweepsArePlannedForTheirArguments: a sweep's statements (the batches
// of both ranges and the skipped-jobs query) are planned for their
// arguments at every execution, never with a cached generic plan, which
// PostgreSQL picks after five executions of a prepared statement when its
// estimate is no worse: over a large backlog the generic plans read the
// whole table (FindSkipped, sweepRange).
func TestSweepsArePlannedForTheirArguments(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	config := db.Pool.Config().Copy()
	config.MaxConns = 1 // every sweep, and the count, on one connection
	pool := testdb.PoolFor(t, config)
	insertWaiting(t, db, "analysis_default", 4, 10*time.Minute)
	for range 7 {
		_, err := aging.Sweep(ctx, pool, aging.Settings{Step: time.Hour, MaxPriority: 2, Queues: []string{"analysis_default"}})
		require.NoError(t, err)
	}
	rows, err := pool.Query(ctx, `SELECT statement FROM pg_prepared_statements WHERE generic_plans > 0 AND cardinality(parameter_types) > 0`)
	require.NoError(t, err)
	generic, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Empty(t, generic, "statements with parameters and generic plans")
}
