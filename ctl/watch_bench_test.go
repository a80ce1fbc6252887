package ctl

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
)

// BenchmarkStartedWaits times startedWaitsSQL over 1M completed jobs
// finalized an hour ago (seed.Finished), 2,000 jobs finished in the last
// five minutes and 100 running, and fails if the plan reads river_job
// sequentially. With TIERQ_EXPLAIN set it writes the plan there.
//
//	go test -run '^$' -bench StartedWaits -benchtime 20x ./ctl/
func BenchmarkStartedWaits(b *testing.B) {
	db := testdb.New(b)
	ctx := context.Background()
	testdb.SeedFinished(b, db, 1_000_000)
	_, err := db.Pool.Exec(ctx, `
		INSERT INTO river_job (state, queue, priority, kind, args, max_attempts, attempt, scheduled_at, attempted_at, finalized_at)
		SELECT CASE WHEN i <= 100 THEN 'running'::river_job_state ELSE 'completed' END,
		       'analysis_priority', 1, 'loadtest',
		       jsonb_build_object('tier', (ARRAY['free','pro','pro_plus','enterprise'])[1 + i % 4]), 10, 1,
		       now() - make_interval(secs => i % 240 + 10), now() - make_interval(secs => i % 240),
		       CASE WHEN i > 100 THEN now() - make_interval(secs => i % 240) END
		FROM generate_series(1, 2100) AS i`)
	require.NoError(b, err)
	tiered := []string{"analysis_priority", "analysis_default"}
	_, err = db.Pool.Exec(ctx, `VACUUM ANALYZE river_job`)
	require.NoError(b, err)

	rows, err := db.Pool.Query(ctx, "EXPLAIN "+startedWaitsSQL, waitWindow.Seconds(), tiered)
	require.NoError(b, err)
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(b, err)
	require.NotContains(b, strings.Join(plan, "\n"), "Seq Scan on river_job", strings.Join(plan, "\n"))
	testdb.WriteExplain(b, db, "started_waits.txt", startedWaitsSQL, waitWindow.Seconds(), tiered)
	if os.Getenv("TIERQ_EXPLAIN") != "" {
		b.Log(strings.Join(plan, "\n"))
	}

	b.ResetTimer()
	for range b.N {
		waits, err := startedWaits(ctx, db.Pool, waitWindow, tiered, nil)
		require.NoError(b, err)
		require.Len(b, waits, 4)
	}
}
