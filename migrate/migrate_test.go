package migrate_test

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/migrate"
)

func TestUpIsIdempotent(t *testing.T) {
	t.Parallel()

	db := testdb.New(t) // already migrated once
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := t.Context()

	pending, err := migrate.Pending(ctx, db.Pool, db.Schema, logger)
	require.NoError(t, err)
	require.False(t, pending)

	res, err := migrate.Up(ctx, db.Pool, db.Schema, logger)
	require.NoError(t, err)
	require.Empty(t, res.RiverApplied)
	require.Empty(t, res.TierqApplied)
	require.EqualValues(t, 19, res.TierqVersion) // 00001_results (a no-op since issue 30) … 00018_turns_generic_plans, 00019_turns_cheaper_trigger

	for _, table := range []string{"river_job", "river_leader", "dead_letter_jobs", "job_escalations", "load_test_executions"} {
		var schema string
		require.NoError(t, db.Pool.QueryRow(ctx,
			"SELECT table_schema FROM information_schema.tables WHERE table_name = $1 AND table_schema = $2",
			table, db.Schema).Scan(&schema), table)
	}
}

func TestUpFreshSchemaConcurrently(t *testing.T) {
	t.Parallel()

	db := testdb.New(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := t.Context()

	// A second schema, migrated by two runs at once: one applies, the other
	// waits on the lock and finds nothing to do.
	schema := db.Schema + "_b"
	t.Cleanup(func() { _, _ = db.Pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
	poolConfig := db.Pool.Config().Copy()
	poolConfig.ConnConfig.RuntimeParams["search_path"] = schema
	pool := testdb.PoolFor(t, poolConfig)

	results := make(chan *migrate.Result, 2)
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			res, err := migrate.Up(ctx, pool, schema, logger)
			results <- res
			errs <- err
		}()
	}
	var applied []int
	for range 2 {
		require.NoError(t, <-errs)
		applied = append(applied, len((<-results).TierqApplied))
	}
	require.ElementsMatch(t, []int{0, 19}, applied, "one run applies every tierq migration, the other none")

	pending, err := migrate.Pending(ctx, pool, schema, logger)
	require.NoError(t, err)
	require.False(t, pending)

	// tierq's migrations alone, as `tierctl migrate` applies them to a
	// team's database: none of the reference app's tables (its own line,
	// jobs.Migrations), the bench's load_test_executions kept, and the
	// schema passes the check every process makes.
	var tables []string
	require.NoError(t, pool.QueryRow(ctx, `
		SELECT coalesce(array_agg(tablename::text ORDER BY tablename), '{}') FROM pg_catalog.pg_tables
		WHERE schemaname = $1 AND tablename IN ('analysis_results', 'spec_documents', 'load_test_executions', 'dead_letter_jobs')`,
		schema).Scan(&tables))
	require.Equal(t, []string{"dead_letter_jobs", "load_test_executions"}, tables)
	require.NoError(t, migrate.Check(ctx, pool, schema))
}

// TestStateQueueEstimates: with the statistics of migration 00008,
// PostgreSQL estimates the available jobs of a queue from their joint
// distribution: 10 available jobs in a paid queue, beside 5,000 available
// in a free queue and 10,000 completed across five queues, are estimated
// at no more than 100, where multiplying the two columns' shares estimated
// about 670 (and, at 50,000 available and 100,000 completed, 6,736: a scan
// of the table for every look for one of them).
func TestStateQueueEstimates(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := t.Context()
	_, err := db.Pool.Exec(ctx, `
		INSERT INTO river_job (state, queue, priority, kind, args, max_attempts)
		SELECT 'available', 'analysis_default', 4, 'loadtest', '{}', 10 FROM generate_series(1, 5000);
		INSERT INTO river_job (state, queue, priority, kind, args, max_attempts)
		SELECT 'available', 'analysis_priority', 2, 'loadtest', '{}', 10 FROM generate_series(1, 10);
		INSERT INTO river_job (state, queue, priority, kind, args, max_attempts, finalized_at)
		SELECT 'completed', (ARRAY['analysis_default', 'analysis_priority', 'analysis_scheduled', 'specgen_priority', 'specgen_default'])[1 + i % 5],
		       2, 'loadtest', '{}', 10, now()
		FROM generate_series(1, 10000) AS i`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `ANALYZE river_job`)
	require.NoError(t, err)
	var plan []map[string]map[string]any
	require.NoError(t, db.Pool.QueryRow(ctx,
		`EXPLAIN (FORMAT JSON) SELECT 1 FROM river_job WHERE state = 'available' AND queue = 'analysis_priority'`).Scan(&plan))
	require.LessOrEqual(t, plan[0]["Plan"]["Plan Rows"], 100.0)
}
