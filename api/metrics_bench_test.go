package api_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/dlq"
	"github.com/tierq/tierq/internal/queuestats"
	"github.com/tierq/tierq/internal/testdb"
)

// BenchmarkScrapeQueries times what one uncached /metrics scrape (and GET
// /v1/queues) reads from PostgreSQL: queue depth per state, the oldest
// available job per queue, dead-letter depth. river_job holds 10k or 1M
// rows, 99% completed and 1% available, plus 1,000 dead letters.
//
//	go test -run '^$' -bench ScrapeQueries -benchtime 20x ./api/
func BenchmarkScrapeQueries(b *testing.B) {
	serviceQueues := testdb.Registry(b).Queues()
	for _, tc := range []struct{ total, availablePct int }{{10_000, 1}, {1_000_000, 1}, {1_000_000, 10}} {
		b.Run(fmt.Sprintf("rows=%d/available=%d%%", tc.total, tc.availablePct), func(b *testing.B) {
			db := testdb.New(b)
			ctx := context.Background()
			available := tc.total * tc.availablePct / 100
			testdb.SeedFinished(b, db, tc.total-available)
			_, err := db.Pool.Exec(ctx, `
				INSERT INTO river_job (state, queue, priority, kind, args, max_attempts, scheduled_at)
				SELECT 'available', (ARRAY['analysis_priority','analysis_default','analysis_scheduled'])[1 + i % 3],
				       1 + i % 4, 'loadtest', '{}', 10, now() - make_interval(secs => i % 600)
				FROM generate_series(1, $1) AS i`, available)
			require.NoError(b, err)
			testdb.SeedDiscarded(b, db, 1000)
			_, err = dlq.Drain(ctx, db.Pool, 1000)
			require.NoError(b, err)
			for _, sql := range []string{`VACUUM ANALYZE river_job`, `VACUUM ANALYZE dead_letter_jobs`} {
				_, err = db.Pool.Exec(ctx, sql)
				require.NoError(b, err)
			}
			b.ResetTimer()
			for range b.N {
				queues, err := queuestats.Summaries(ctx, db.Pool, serviceQueues)
				require.NoError(b, err)
				require.NotEmpty(b, queues)
				_, err = dlq.PendingDepth(ctx, db.Pool)
				require.NoError(b, err)
			}
		})
	}
}
