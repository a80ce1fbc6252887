package escalation_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/escalation"
	"github.com/tierq/tierq/internal/testdb"
)

// BenchmarkSweep times one escalation sweep that moves the same 500 jobs
// from analysis_scheduled to analysis_default with 10k and with 1M rows in
// river_job: mostly completed work, 1% waiting but not yet due, 500 due.
//
//	go test -run '^$' -bench Sweep -benchtime 20x ./escalation/
//
// With TIERQ_EXPLAIN=DIR it writes EXPLAIN (ANALYZE, BUFFERS) of the sweep
// to DIR/escalation-rows=N.txt.
func BenchmarkSweep(b *testing.B) {
	for _, total := range []int{10_000, 1_000_000} {
		b.Run(fmt.Sprintf("rows=%d", total), func(b *testing.B) {
			db := testdb.New(b)
			ctx := context.Background()
			const due = 500
			waiting := total / 100
			testdb.SeedFinished(b, db, total-waiting-due)
			_, err := db.Pool.Exec(ctx, `
				INSERT INTO river_job (state, queue, priority, kind, args, max_attempts, scheduled_at)
				SELECT 'available', 'analysis_scheduled', 1 + i % 4, 'loadtest', '{}', 10,
				       CASE WHEN i <= $2 THEN now() - interval '4 hours' ELSE now() - interval '1 hour' END
				FROM generate_series(1, $1) AS i`, waiting+due, due)
			require.NoError(b, err)
			_, err = db.Pool.Exec(ctx, `ANALYZE river_job`)
			require.NoError(b, err)

			rules := escalation.Rules(3*time.Hour, 0)
			reset := func() {
				_, err := db.Pool.Exec(ctx, `
					UPDATE river_job SET queue = 'analysis_scheduled', scheduled_at = now() - interval '4 hours'
					WHERE state = 'available' AND queue = 'analysis_default'`)
				require.NoError(b, err)
			}
			testdb.WriteExplain(b, db, fmt.Sprintf("escalation-rows=%d.txt", total), escalation.SweepSQL,
				[]string{"analysis_scheduled", "specview_scheduled"}, []string{"analysis_default", "specview_default"},
				(3 * time.Hour).Seconds(), 1000, escalation.ActorScheduler, "benchmark")
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				reset()
				b.StartTimer()
				res, err := escalation.Sweep(ctx, db.Pool, rules, 1000)
				require.NoError(b, err)
				require.Equal(b, due, res.Total)
			}
		})
	}
}
