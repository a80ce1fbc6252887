package dlq_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/dlq"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/jobs"
)

// snapshotDiscarded copies the discarded jobs as they are now, to compare
// dead_letter_jobs against after a drain.
func snapshotDiscarded(t *testing.T, db *testdb.DB) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), `CREATE TABLE discarded_before AS SELECT * FROM river_job WHERE state = 'discarded'`)
	require.NoError(t, err)
}

// requireExactlyOnePlace checks that each job of discarded_before is either
// still a discarded river_job or one dead_letter_jobs row (never both, never
// neither), and returns how many were moved.
func requireExactlyOnePlace(t *testing.T, db *testdb.DB) int {
	t.Helper()
	require.Zero(t, db.Count(t, `
		SELECT count(*) FROM discarded_before AS b
		WHERE (SELECT count(*) FROM river_job WHERE id = b.id) + (SELECT count(*) FROM dead_letter_jobs WHERE job_id = b.id) <> 1`),
		"every job in exactly one place")
	return db.Count(t, `SELECT count(*) FROM dead_letter_jobs`)
}

func TestConcurrentDrainsMoveEveryDiscardedJobExactlyOnce(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()

	const n = 600
	testdb.SeedDiscarded(t, db, n)
	// Jobs in every other state stay where they are.
	producer := db.Producer(t)
	for _, state := range []string{"available", "completed", "retryable", "cancelled", "running"} {
		res, err := producer.Insert(ctx, jobs.LoadTestArgs{}, &river.InsertOpts{Queue: "analysis_default"})
		require.NoError(t, err)
		_, err = db.Pool.Exec(ctx, `
			UPDATE river_job SET state = $2::text::river_job_state,
			       finalized_at = CASE WHEN $2 IN ('completed', 'cancelled') THEN now() END
			WHERE id = $1`, res.Job.ID, state)
		require.NoError(t, err)
	}
	snapshotDiscarded(t, db)

	// Two drains at once, in small batches, racing for the same rows.
	var (
		wg      sync.WaitGroup
		results [2]dlq.DrainResult
		errs    [2]error
		start   = make(chan struct{})
	)
	for i := range 2 {
		wg.Go(func() {
			<-start
			results[i], errs[i] = dlq.Drain(ctx, db.Pool, 7)
		})
	}
	close(start)
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.Equal(t, n, results[0].Moved+results[1].Moved)
	byQueue := 0
	for _, r := range results {
		for _, c := range r.ByQueue {
			byQueue += c
		}
	}
	require.Equal(t, n, byQueue)

	require.Equal(t, n, requireExactlyOnePlace(t, db))
	require.Zero(t, db.Count(t, `SELECT count(*) FROM river_job WHERE state = 'discarded'`))
	require.Equal(t, 5, db.Count(t, `SELECT count(*) FROM river_job`), "other states untouched")

	// Every row carries the job as River had it: kind, queue, priority,
	// args, metadata, every attempt's error, attempts, enqueue and discard
	// times.
	require.Zero(t, db.Count(t, `
		SELECT count(*) FROM discarded_before AS b JOIN dead_letter_jobs AS d ON d.job_id = b.id
		WHERE (d.kind, d.queue, d.priority, d.args, d.metadata, d.errors, d.attempt, d.max_attempts, d.created_at, d.finalized_at)
		      IS DISTINCT FROM
		      (b.kind, b.queue, b.priority, b.args, b.metadata, to_jsonb(b.errors), b.attempt, b.max_attempts, b.created_at, b.finalized_at)`))

	// And a drain with nothing to do moves nothing.
	again, err := dlq.Drain(ctx, db.Pool, 7)
	require.NoError(t, err)
	require.Zero(t, again.Moved)
	require.Equal(t, 1, again.Batches)
}

func TestDrainedRowReadsBackWithItsErrors(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()

	ids := testdb.SeedDiscarded(t, db, 3)
	_, err := dlq.Drain(ctx, db.Pool, 1000)
	require.NoError(t, err)

	list, err := dlq.List(ctx, db.Pool, dlq.Filter{}, dlq.Page{Limit: 10})
	require.NoError(t, err)
	require.Len(t, list, 3)
	d, err := dlq.Get(ctx, db.Pool, list[0].ID)
	require.NoError(t, err)
	require.Contains(t, ids, d.JobID)
	require.Len(t, d.Errors, 2)
	require.Equal(t, 1, d.Errors[0].Attempt)
	require.Equal(t, 2, d.Errors[1].Attempt)
	require.Regexp(t, `^attempt 2 of job \d+$`, d.LastError())
	require.Equal(t, 2, d.Attempt)
	require.Equal(t, 2, d.MaxAttempts)
	require.WithinDuration(t, time.Now().Add(-time.Hour), d.CreatedAt, 15*time.Minute)
	require.NotNil(t, d.FinalizedAt)
	require.Nil(t, d.ReplayedAt)
	require.JSONEq(t, `{"tierq:base_priority": 4}`, string(d.Metadata))

	_, err = dlq.Get(ctx, db.Pool, 999_999)
	require.ErrorIs(t, err, dlq.ErrNotFound)

	// The same row, by the id the job had in river_job.
	byJob, err := dlq.GetByJobID(ctx, db.Pool, d.JobID)
	require.NoError(t, err)
	require.Equal(t, d, byJob)
	_, err = dlq.GetByJobID(ctx, db.Pool, 999_999)
	require.ErrorIs(t, err, dlq.ErrNotFound)
}

func TestDrainRolledBackMidBatchLeavesEveryJobInOnePlace(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()

	const n = 200
	testdb.SeedDiscarded(t, db, n)
	snapshotDiscarded(t, db)

	// A drain batch runs inside a transaction that has not committed.
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	moved, err := dlq.DrainBatch(ctx, tx, 50, nil)
	require.NoError(t, err)
	require.Equal(t, 50, moved)

	// Meanwhile everyone else still sees the 50 in river_job, and a second
	// drain skips them (they are locked) and moves the rest.
	require.Equal(t, n, db.Count(t, `SELECT count(*) FROM river_job WHERE state = 'discarded'`))
	other, err := dlq.Drain(ctx, db.Pool, 30)
	require.NoError(t, err)
	require.Equal(t, n-50, other.Moved)
	require.Equal(t, n-50, requireExactlyOnePlace(t, db))

	// The first drain dies (rolled back): its 50 are discarded jobs again.
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, 50, db.Count(t, `SELECT count(*) FROM river_job WHERE state = 'discarded'`))
	require.Equal(t, n-50, requireExactlyOnePlace(t, db))

	rest, err := dlq.Drain(ctx, db.Pool, 30)
	require.NoError(t, err)
	require.Equal(t, 50, rest.Moved)
	require.Equal(t, n, requireExactlyOnePlace(t, db))
}

func TestDrainKilledMidStatementLeavesEveryJobInOnePlace(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()

	const n = 300
	testdb.SeedDiscarded(t, db, n)
	snapshotDiscarded(t, db)

	// A test-only trigger holds the drain statement after its delete and
	// insert have run, so the backend can be killed mid-statement.
	_, err := db.Pool.Exec(ctx, `
		CREATE FUNCTION stall() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(30); RETURN NULL; END $$;
		CREATE TRIGGER stall AFTER INSERT ON dead_letter_jobs FOR EACH STATEMENT EXECUTE FUNCTION stall();`)
	require.NoError(t, err)

	conn, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	pid := conn.Conn().PgConn().PID()
	done := make(chan error, 1)
	go func() {
		_, err := dlq.Drain(ctx, conn, 100)
		done <- err
	}()
	testdb.WaitFor(t, 10*time.Second, "the drain to stall in its statement", func() bool {
		return db.Count(t, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event = 'PgSleep'`, pid) == 1
	})
	var killed bool
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&killed))
	require.True(t, killed)
	require.Error(t, <-done)
	conn.Conn().Close(ctx) //nolint:errcheck // the server closed it
	testdb.WaitFor(t, 10*time.Second, "the killed backend to exit", func() bool {
		return db.Count(t, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, pid) == 0
	})

	require.Zero(t, requireExactlyOnePlace(t, db), "the killed statement moved nothing")
	require.Equal(t, n, db.Count(t, `SELECT count(*) FROM river_job WHERE state = 'discarded'`))

	_, err = db.Pool.Exec(ctx, `DROP TRIGGER stall ON dead_letter_jobs`)
	require.NoError(t, err)
	res, err := dlq.Drain(ctx, db.Pool, 100)
	require.NoError(t, err)
	require.Equal(t, n, res.Moved)
	require.Equal(t, n, requireExactlyOnePlace(t, db))
}

func TestDrainSkipsAJobBeingRetried(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()

	ids := testdb.SeedDiscarded(t, db, 2)
	// An operator retries one discarded job (as River UI does) in a
	// transaction the drain has to wait for.
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `UPDATE river_job SET state = 'available', attempt = 0, finalized_at = NULL WHERE id = $1`, ids[0])
	require.NoError(t, err)

	// The drain skips the locked row; after the retry commits the job is
	// available and no drain takes it.
	res, err := dlq.Drain(ctx, db.Pool, 10)
	require.NoError(t, err)
	require.Equal(t, 1, res.Moved)
	require.NoError(t, tx.Commit(ctx))
	res, err = dlq.Drain(ctx, db.Pool, 10)
	require.NoError(t, err)
	require.Zero(t, res.Moved)
	require.Equal(t, "available", db.Jobs(t, "id = $1", ids[0])[0].State)
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM dead_letter_jobs WHERE job_id = $1`, ids[1]))
}

func TestDrainLeavesAJobWhoseIDIsAlreadyADeadLetter(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()

	ids := testdb.SeedDiscarded(t, db, 3)
	// A dead letter with the id of a job still in river_job: river_job ids
	// were reused (a restore, a sequence reset).
	_, err := db.Pool.Exec(ctx, `
		INSERT INTO dead_letter_jobs (job_id, kind, queue, priority, args, attempt, max_attempts, created_at)
		VALUES ($1, 'analysis', 'analysis_default', 4, '{}', 1, 1, now() - interval '1 year')`, ids[0])
	require.NoError(t, err)

	// The others still drain; the conflicting one stays where it is, counted.
	res, err := dlq.Drain(ctx, db.Pool, 1)
	require.NoError(t, err)
	require.Equal(t, 2, res.Moved)
	require.Equal(t, 1, res.Conflicts)
	require.Equal(t, "discarded", db.Jobs(t, "id = $1", ids[0])[0].State)
	require.Equal(t, 3, db.Count(t, `SELECT count(*) FROM dead_letter_jobs`))
}

// TestDrainUsesAnIndex checks the plan of the drain's claim with a realistic
// river_job (mostly finished work) and writes it to $TIERQ_EXPLAIN.
func TestDrainUsesAnIndex(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	testdb.SeedFinished(t, db, 50_000)
	testdb.SeedDiscarded(t, db, 100)
	// A dead-letter table much bigger than a batch: the claim must probe
	// its job_id index per row, never hash the whole table.
	_, err := db.Pool.Exec(context.Background(), `
		INSERT INTO dead_letter_jobs (job_id, kind, queue, priority, args, attempt, max_attempts, created_at)
		SELECT -i, 'loadtest', 'analysis_default', 4, '{}', 1, 1, now() FROM generate_series(1, 200000) AS i`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(context.Background(), `ANALYZE river_job`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(context.Background(), `ANALYZE dead_letter_jobs`)
	require.NoError(t, err)

	plan := explainDrain(t, db)
	require.NotContains(t, plan, "Seq Scan", plan)
	testdb.WriteExplain(t, db, "dlq_drain.txt", dlq.DrainSQL, 1000)
}

func explainDrain(t *testing.T, db *testdb.DB) string {
	t.Helper()
	ctx := context.Background()
	var plan string
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, "EXPLAIN "+dlq.DrainSQL, 1000)
		if err != nil {
			return err
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		for _, l := range lines {
			plan += l + "\n"
		}
		return err
	})
	require.NoError(t, err)
	return plan
}
