package bench

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
)

// TestUnflushedPool: only the isolation scenario's diagnostic pool commits
// without waiting for the WAL flush; every other pool of the bench keeps
// the server's setting.
func TestUnflushedPool(t *testing.T) {
	t.Parallel()
	testdb.New(t) // creates the test database if needed
	ctx := context.Background()
	e, err := newEnv(ctx, Options{DatabaseURL: testdb.URL(), schemaPrefix: "tierq_bench_pooltest"})
	require.NoError(t, err)
	t.Cleanup(e.close)

	setting := func(flush bool) string {
		t.Helper()
		open := e.pool
		if !flush {
			open = e.unflushedPool
		}
		pool, err := open(ctx, 1)
		require.NoError(t, err)
		defer pool.Close()
		var v string
		require.NoError(t, pool.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&v))
		return v
	}
	require.Equal(t, "off", setting(false))
	require.Equal(t, "on", setting(true))
}
