package aging_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/aging"
	"github.com/tierq/tierq/internal/seed"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/jobs"
)

// BenchmarkSweep times one aging sweep that promotes the same 500 jobs with
// 10k and with 1M rows in river_job: mostly completed work, 1% available
// and not yet due, 500 due. Cost should follow the 500, not the table.
//
//	go test -run '^$' -bench Sweep -benchtime 20x ./aging/
//
// With TIERQ_EXPLAIN=DIR it writes EXPLAIN (ANALYZE, BUFFERS) of the sweep
// to DIR/aging-rows=N.txt.
func BenchmarkSweep(b *testing.B) {
	serviceQueues := testdb.Registry(b).Queues()
	for _, total := range []int{10_000, 1_000_000} {
		b.Run(fmt.Sprintf("rows=%d", total), func(b *testing.B) {
			db := testdb.New(b)
			ctx := context.Background()
			const due = 500
			waiting := total / 100
			testdb.SeedFinished(b, db, total-waiting-due)
			require.NoError(b, seed.Available(ctx, db.Pool, jobs.KindLoadTest, "analysis_default", 4, waiting+due, time.Minute, due, 12*time.Minute))
			require.NoError(b, seed.Analyze(ctx, db.Pool))

			settings := aging.Settings{Step: 5 * time.Minute, MaxPriority: 2, Queues: serviceQueues, Batch: 1000}
			reset := func() {
				_, err := db.Pool.Exec(ctx, `UPDATE river_job SET priority = 4, metadata = '{}' WHERE state = 'available' AND priority < 4`)
				require.NoError(b, err)
			}
			testdb.WriteExplain(b, db, fmt.Sprintf("aging-rows=%d.txt", total), aging.SweepSQL,
				settings.Queues, []int16{3, 4}, settings.Step.Seconds(), settings.MaxPriority, settings.Batch)
			// The second range reads the jobs that became available within a
			// step (here the total/100 that waited a minute) and finds none
			// moved: its cost grows with the recent jobs.
			testdb.WriteExplain(b, db, fmt.Sprintf("aging-recent-rows=%d.txt", total), aging.SweepRecentSQL,
				settings.Queues, []int16{3, 4}, settings.Step.Seconds(), settings.MaxPriority, settings.Batch)
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				reset()
				b.StartTimer()
				res, err := aging.Sweep(ctx, db.Pool, settings)
				require.NoError(b, err)
				require.Equal(b, due, res.Total)
			}
		})
	}
}
