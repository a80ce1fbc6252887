package escalation_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/escalation"
	"github.com/tierq/tierq/internal/testdb"
)

// BenchmarkList times escalation.List (GET /v1/escalations, tierctl
// escalations list) over an audit of 1M rows spread over 100 days: 90% by
// the sweep, 9% dedup, 1% by ten operators. It fails when a page's plan
// reads job_escalations sequentially, but for the worst case: a queue or
// actor filter that matches nothing, with no time range, reads the whole
// audit (no index covers actor or queue). With TIERQ_EXPLAIN set it logs
// the plans.
//
//	go test -run '^$' -bench List -benchtime 20x ./escalation/
func BenchmarkList(b *testing.B) {
	db := testdb.New(b)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `
		INSERT INTO job_escalations (job_id, from_queue, to_queue, from_priority, to_priority, actor, reason, escalated_at)
		SELECT i, q.from_queue, q.to_queue, 4, 4,
		       CASE WHEN i % 100 = 0 THEN 'operator' || (i / 100) % 10 WHEN i % 10 = 0 THEN 'dedup' ELSE 'scheduler' END,
		       'benchmark', now() - make_interval(secs => (1000000 - i) * 8.64)
		FROM generate_series(1, 1000000) AS i,
		     LATERAL (SELECT (ARRAY['analysis_scheduled', 'analysis_default', 'specview_scheduled', 'specview_default'])[1 + i % 4] AS from_queue,
		                     (ARRAY['analysis_default', 'analysis_priority', 'specview_default', 'specview_priority'])[1 + i % 4] AS to_queue) AS q`)
	require.NoError(b, err)
	_, err = db.Pool.Exec(ctx, `VACUUM ANALYZE job_escalations`)
	require.NoError(b, err)

	now := time.Now()
	for _, tc := range []struct {
		name string
		p    escalation.ListParams
		rows int
		scan bool // a sequential scan is expected
	}{
		{"newest", escalation.ListParams{}, 50, false},
		{"next_page", escalation.ListParams{BeforeID: 500_000}, 50, false},
		{"last_hour", escalation.ListParams{Since: now.Add(-time.Hour)}, 50, false},
		{"one_day_last_week", escalation.ListParams{Since: now.Add(-7 * 24 * time.Hour), Until: now.Add(-6 * 24 * time.Hour), Limit: 1000}, 1000, false},
		{"operator_last_day", escalation.ListParams{Actor: "operator3", Since: now.Add(-24 * time.Hour)}, 10, false},
		{"queue", escalation.ListParams{Queue: "analysis_priority"}, 50, false},
		{"operator_all_time", escalation.ListParams{Actor: "operator3"}, 50, false},
		{"no_such_actor", escalation.ListParams{Actor: "nobody"}, 0, true}, // the worst case: every row read
	} {
		b.Run(tc.name, func(b *testing.B) {
			sql, args := escalation.ListQuery(tc.p)
			rows, err := db.Pool.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+sql, args...)
			require.NoError(b, err)
			plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
			require.NoError(b, err)
			if !tc.scan {
				require.NotContains(b, strings.Join(plan, "\n"), "Seq Scan", strings.Join(plan, "\n"))
			}
			if os.Getenv("TIERQ_EXPLAIN") != "" {
				b.Log("\n" + strings.Join(plan, "\n"))
			}
			b.ResetTimer()
			for range b.N {
				got, err := escalation.List(ctx, db.Pool, tc.p)
				require.NoError(b, err)
				require.Len(b, got, tc.rows)
			}
		})
	}
}
