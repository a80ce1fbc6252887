package escalation_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/escalation"
	"github.com/tierq/tierq/internal/seed"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/jobs"
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
	serviceQueues := testdb.Registry(b).Queues()
	for _, total := range []int{10_000, 1_000_000} {
		b.Run(fmt.Sprintf("rows=%d", total), func(b *testing.B) {
			db := testdb.New(b)
			ctx := context.Background()
			const due = 500
			waiting := total / 100
			testdb.SeedFinished(b, db, total-waiting-due)
			require.NoError(b, seed.Available(ctx, db.Pool, jobs.KindLoadTest, "analysis_scheduled", 0, waiting+due, time.Hour, due, 4*time.Hour))
			require.NoError(b, seed.Analyze(ctx, db.Pool))

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
				res, err := escalation.Sweep(ctx, db.Pool, serviceQueues, rules, 1000)
				require.NoError(b, err)
				require.Equal(b, due, res.Total)
			}
		})
	}
}
