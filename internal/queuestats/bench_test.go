package queuestats

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
)

// BenchmarkSummaries times one Summaries (GET /v1/queues' read, the
// metrics' uncached read and one refresh of tierctl watch) beside 100,000
// finished jobs, with `available` due available jobs in analysis_default,
// `moved` of them with a kept due time (admitted by fair share, or
// escalated), and `held` held jobs over 1,000 tenants, and fails if
// waitingSQL's plan reads river_job sequentially. With TIERQ_EXPLAIN set it
// writes the plans there.
//
//	go test -run '^$' -bench Summaries -benchtime 20x ./internal/queuestats/
func BenchmarkSummaries(b *testing.B) {
	serviceQueues := testdb.Registry(b).Queues()
	for _, tc := range []struct{ available, moved, held int }{
		{1_000, 0, 0}, {50_000, 0, 0}, {50_000, 50_000, 0}, // River's defaults; an escalated backlog
		{1_000, 1_000, 10_000}, {1_000, 1_000, 50_000}, // fair share holding a flood
	} {
		b.Run(fmt.Sprintf("available=%d/moved=%d/held=%d", tc.available, tc.moved, tc.held), func(b *testing.B) {
			db := testdb.New(b)
			ctx := context.Background()
			testdb.SeedFinished(b, db, 100_000)
			_, err := db.Pool.Exec(ctx, `
				INSERT INTO river_job (state, queue, priority, kind, args, metadata, max_attempts, scheduled_at)
				SELECT 'available', 'analysis_default', 1 + i % 4, 'loadtest', '{}',
				       CASE WHEN i <= $2 THEN jsonb_build_object(
				           'tierq:tenant', 't' || i % 1000,
				           'tierq:due_at', (extract(epoch FROM s - make_interval(secs => i % 60)) * 1000000)::bigint,
				           'tierq:moved_at', (extract(epoch FROM s) * 1000000)::bigint)
				       ELSE jsonb_build_object('tierq:tenant', 't' || i % 1000) END,
				       10, s
				FROM generate_series(1, $1) AS i, LATERAL (SELECT now() - make_interval(secs => i % 600) AS s) AS t`, tc.available, tc.moved)
			require.NoError(b, err)
			_, err = db.Pool.Exec(ctx, `
				INSERT INTO river_job (state, queue, priority, kind, args, metadata, max_attempts, scheduled_at)
				SELECT 'pending', 'analysis_default', 4, 'loadtest', '{}',
				       jsonb_build_object('tierq:tenant', 't' || i % 1000, 'tierq:held_at', now()),
				       10, now() - make_interval(secs => i % 600)
				FROM generate_series(1, $1) AS i`, tc.held)
			require.NoError(b, err)
			_, err = db.Pool.Exec(ctx, `VACUUM ANALYZE river_job`)
			require.NoError(b, err)

			rows, err := db.Pool.Query(ctx, "EXPLAIN "+waitingSQL, serviceQueues)
			require.NoError(b, err)
			plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
			require.NoError(b, err)
			require.NotContains(b, strings.Join(plan, "\n"), "Seq Scan on river_job", strings.Join(plan, "\n"))
			testdb.WriteExplain(b, db, fmt.Sprintf("waiting_%d_%d_%d.txt", tc.available, tc.moved, tc.held), waitingSQL, serviceQueues)
			if os.Getenv("TIERQ_EXPLAIN") != "" {
				b.Log(strings.Join(plan, "\n"))
			}

			b.ResetTimer()
			for range b.N {
				queues, err := Summaries(ctx, db.Pool, serviceQueues)
				require.NoError(b, err)
				require.Equal(b, tc.held, queues[1].Held)
			}
		})
	}
}
