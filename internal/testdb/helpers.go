package testdb

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/riverschema"
	"github.com/tierq/tierq/internal/seed"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/producer"
)

// Producer returns an insert-only River client on the test's schema, as an
// API service would hold: no workers, no queues, never a leader.
func (db *DB) Producer(t testing.TB) *river.Client[pgx.Tx] {
	t.Helper()
	client, err := river.NewClient(riverpgxv5.New(db.Pool), producer.ClientConfig(db.Schema, nil))
	require.NoError(t, err)
	return client
}

// InsertWaiting inserts a job that has been available for wait: River
// inserts a job with a scheduled_at as `scheduled` and leaves it to the
// leader to make it available, so this does that step itself.
func InsertWaiting(t testing.TB, db *DB, args river.JobArgs, opts *river.InsertOpts, wait time.Duration) int64 {
	t.Helper()
	ctx := context.Background()
	o := *opts
	o.ScheduledAt = time.Now().Add(-wait)
	res, err := db.Producer(t).Insert(ctx, args, &o)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `UPDATE `+riverschema.JobTable+` SET state = '`+riverschema.StateAvailable+`' WHERE id = $1 AND state = '`+riverschema.StateScheduled+`'`,
		res.Job.ID)
	require.NoError(t, err)
	return res.Job.ID
}

// Job is the part of a river_job row tests look at.
type Job struct {
	ID       int64
	Kind     string
	Queue    string
	State    string
	Priority int
	Attempt  int
}

// Jobs returns the river_job rows matching where (SQL, with args), by id.
func (db *DB) Jobs(t testing.TB, where string, args ...any) []Job {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(),
		"SELECT id, kind, queue, state::text, priority, attempt FROM "+riverschema.JobTable+" WHERE "+where+" ORDER BY id", args...)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Job])
	require.NoError(t, err)
	return out
}

// Count runs a SELECT count(*) (or any single-integer query).
func (db *DB) Count(t testing.TB, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// WaitFor polls cond until it holds, failing t after timeout.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// SeedFinished fills river_job with n finished jobs spread over the
// reference app's six service queues (seed.Finished).
func SeedFinished(t testing.TB, db *DB, n int) {
	t.Helper()
	require.NoError(t, seed.Finished(context.Background(), db.Pool, Registry(t).Queues(), n))
}

// SeedDiscarded inserts n discarded jobs and returns their ids
// (seed.Discarded: attempt = max_attempts = 2, errors "attempt 1 of job
// <i>" and "attempt 2 of job <i>", cycling through the reference app's six
// service queues from i = 1: analysis_default, analysis_scheduled,
// specview_priority, ..., analysis_priority). Each has its service's kind
// and real args: analysis {"target": "/srv/t<i>", "tier": "pro"}, specview
// {"analysis_result_id": <i>, "tier": "pro"}.
func SeedDiscarded(t testing.TB, db *DB, n int) []int64 {
	t.Helper()
	ids, err := seed.Discarded(context.Background(), db.Pool, discardedQueues(t), n)
	require.NoError(t, err)
	return ids
}

// discardedQueues are SeedDiscarded's queues, kinds and args.
func discardedQueues(t testing.TB) []seed.Queue {
	t.Helper()
	args := map[string]string{
		jobs.KindAnalysis: `{"target": "/srv/t{i}", "tier": "pro"}`,
		jobs.KindSpecView: `{"analysis_result_id": {i}, "tier": "pro"}`,
	}
	var queues []seed.Queue
	for _, svc := range Registry(t).Services() {
		kind := svc.Kinds()[0].Name()
		require.Contains(t, args, kind, "SeedDiscarded knows no args of kind %s", kind)
		for _, queue := range svc.Queues() {
			queues = append(queues, seed.Queue{Name: queue, Kind: kind, Args: args[kind]})
		}
	}
	return queues
}

// WriteExplain writes EXPLAIN (ANALYZE, BUFFERS) of sql with args, run in a
// transaction that is rolled back, to $TIERQ_EXPLAIN/name when that
// variable names a directory; it does nothing otherwise.
func WriteExplain(t testing.TB, db *DB, name, sql string, args ...any) {
	t.Helper()
	dir := os.Getenv("TIERQ_EXPLAIN")
	if dir == "" {
		return
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(explain(t, db, sql, args...)), 0o600))
}

func explain(t testing.TB, db *DB, sql string, args ...any) string {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+sql, args...)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	out := ""
	for _, l := range lines {
		out += l + "\n"
	}
	return out
}

// Start starts a River client with riverConfig on the test's pool and stops
// it when the test ends.
func (db *DB) Start(t testing.TB, riverConfig *river.Config) *river.Client[pgx.Tx] {
	t.Helper()
	client, err := river.NewClient(riverpgxv5.New(db.Pool), riverConfig)
	require.NoError(t, err)
	require.NoError(t, client.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, client.Stop(ctx))
	})
	return client
}
