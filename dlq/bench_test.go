package dlq_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/dlq"
	"github.com/tierq/tierq/internal/testdb"
)

// BenchmarkDrain moves 100,000 discarded jobs (next to 100,000 completed
// ones) into dead_letter_jobs with the scheduler's default batch, and reports
// rows/s. Each iteration seeds a fresh set first, untimed.
//
//	go test -run '^$' -bench 'Drain|Replay' -benchtime 3x ./dlq/
func BenchmarkDrain(b *testing.B) {
	for _, batch := range []int{1000, 5000} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			db := testdb.New(b)
			ctx := context.Background()
			const n = 100_000
			testdb.SeedFinished(b, db, n)
			var elapsed time.Duration
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				_, err := db.Pool.Exec(ctx, `TRUNCATE dead_letter_jobs`)
				require.NoError(b, err)
				testdb.SeedDiscarded(b, db, n)
				_, err = db.Pool.Exec(ctx, `ANALYZE river_job`)
				require.NoError(b, err)
				b.StartTimer()
				start := time.Now()
				res, err := dlq.Drain(ctx, db.Pool, batch)
				elapsed += time.Since(start)
				require.NoError(b, err)
				require.Equal(b, n, res.Moved)
			}
			b.ReportMetric(float64(n*b.N)/elapsed.Seconds(), "rows/s")
		})
	}
}

// BenchmarkReplayAll replays 100,000 dead letters through River's
// InsertManyTx, in batches of 500 and 2000 (tierctl's default), and reports
// rows/s.
func BenchmarkReplayAll(b *testing.B) {
	serviceQueues := testdb.Registry(b).Queues()
	for _, batch := range []int{500, 2000} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			db := testdb.New(b)
			ctx := context.Background()
			client := db.Producer(b)
			const n = 100_000
			testdb.SeedDiscarded(b, db, n)
			_, err := dlq.Drain(ctx, db.Pool, 5000)
			require.NoError(b, err)
			var elapsed time.Duration
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				for _, sql := range []string{
					`TRUNCATE river_job`,
					`UPDATE dead_letter_jobs SET replayed_at = NULL, replay_job_id = NULL, replayed_by = NULL`,
					`VACUUM ANALYZE dead_letter_jobs`,
				} {
					_, err := db.Pool.Exec(ctx, sql)
					require.NoError(b, err)
				}
				b.StartTimer()
				start := time.Now()
				res, err := dlq.ReplayAll(ctx, client, db.Pool, serviceQueues, dlq.Filter{}, dlq.ReplayOptions{Actor: "bench"}, batch, nil)
				elapsed += time.Since(start)
				require.NoError(b, err)
				require.Equal(b, n, res.Replayed)
			}
			b.ReportMetric(float64(n*b.N)/elapsed.Seconds(), "rows/s")
		})
	}
}
