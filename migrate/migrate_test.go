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
	require.EqualValues(t, 7, res.TierqVersion) // 00001_results … 00007_fair_share

	for _, table := range []string{"river_job", "river_leader", "analysis_results", "spec_documents"} {
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
	require.ElementsMatch(t, []int{0, 7}, applied, "one run applies every tierq migration, the other none")

	pending, err := migrate.Pending(ctx, pool, schema, logger)
	require.NoError(t, err)
	require.False(t, pending)
}
