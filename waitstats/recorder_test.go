package waitstats_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/waitstats"
)

type bundle struct {
	ctx context.Context
	db  *testdb.DB
}

func setup(t *testing.T) *bundle {
	t.Helper()
	return &bundle{ctx: t.Context(), db: testdb.New(t)}
}

// recorder is a Recorder on b's schema whose clock reads *now.
func (b *bundle) recorder(t *testing.T, now *time.Time) *waitstats.Recorder {
	t.Helper()
	r, err := waitstats.NewRecorder(b.db.Pool, nil)
	require.NoError(t, err)
	r.SetNow(func() time.Time { return *now })
	return r
}

// counts is the row's non-zero buckets as bucket (0-based) → count, or nil
// when there is no row.
func (b *bundle) counts(t *testing.T, minute, queue, tier string) map[int]int64 {
	t.Helper()
	var counts []int64
	err := b.db.Pool.QueryRow(b.ctx, `SELECT counts FROM job_wait_stats WHERE minute = $1::timestamptz AND queue = $2 AND tier = $3`,
		minute, queue, tier).Scan(&counts)
	if err != nil {
		require.ErrorContains(t, err, "no rows")
		return nil
	}
	require.Len(t, counts, waitstats.NumBuckets)
	out := map[int]int64{}
	for i, n := range counts {
		if n != 0 {
			out[i] = n
		}
	}
	return out
}

// insert writes a row with counts n in bucket i, from pairs i, n.
func (b *bundle) insert(t *testing.T, minute, queue, tier string, pairs ...int64) {
	t.Helper()
	h := histogram(pairs...)
	_, err := b.db.Pool.Exec(b.ctx, `INSERT INTO job_wait_stats (minute, queue, tier, counts) VALUES ($1::timestamptz, $2, $3, $4)`,
		minute, queue, tier, h[:])
	require.NoError(t, err)
}

func TestRecorder(t *testing.T) {
	t.Parallel()

	t.Run("FlushesWhatItObserved", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		now := time.Date(2026, 3, 1, 10, 0, 30, 0, time.UTC)
		r := b.recorder(t, &now)
		r.ObserveWait("analysis_default", "pro", 5*time.Millisecond)
		r.ObserveWait("analysis_default", "pro", 5*time.Millisecond)
		r.ObserveWait("analysis_default", "pro", 2*time.Second)
		r.ObserveWait("analysis_priority", "enterprise", 50*time.Millisecond)
		now = time.Date(2026, 3, 1, 10, 1, 5, 0, time.UTC)
		r.ObserveWait("analysis_default", "pro", 2*time.Second)
		r.ObserveWait("analysis_default", "unknown", -time.Second) // a due time ahead: counted as 0
		require.NoError(t, r.Flush(b.ctx))

		require.Equal(t, 4, b.db.Count(t, `SELECT count(*) FROM job_wait_stats`))
		require.Equal(t, map[int]int64{7: 2, 33: 1}, b.counts(t, "2026-03-01 10:00Z", "analysis_default", "pro"))
		require.Equal(t, map[int]int64{17: 1}, b.counts(t, "2026-03-01 10:00Z", "analysis_priority", "enterprise"))
		require.Equal(t, map[int]int64{33: 1}, b.counts(t, "2026-03-01 10:01Z", "analysis_default", "pro"))
		require.Equal(t, map[int]int64{0: 1}, b.counts(t, "2026-03-01 10:01Z", "analysis_default", "unknown"))

		// Nothing observed since: a flush adds nothing.
		require.NoError(t, r.Flush(b.ctx))
		require.Equal(t, map[int]int64{7: 2, 33: 1}, b.counts(t, "2026-03-01 10:00Z", "analysis_default", "pro"))
	})

	t.Run("ReplicasSum", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		now := time.Date(2026, 3, 1, 10, 0, 30, 0, time.UTC)
		one, two := b.recorder(t, &now), b.recorder(t, &now)
		one.ObserveWait("analysis_default", "pro", 5*time.Millisecond)
		one.ObserveWait("analysis_default", "pro", 2*time.Second)
		two.ObserveWait("analysis_default", "pro", 5*time.Millisecond)
		two.ObserveWait("analysis_default", "pro", 9*time.Second)
		two.ObserveWait("analysis_default", "free", 9*time.Second)
		require.NoError(t, one.Flush(b.ctx))
		require.NoError(t, two.Flush(b.ctx))
		one.ObserveWait("analysis_default", "pro", 9*time.Second)
		require.NoError(t, one.Flush(b.ctx))

		require.Equal(t, map[int]int64{7: 2, 33: 1, 40: 2}, b.counts(t, "2026-03-01 10:00Z", "analysis_default", "pro"))
		require.Equal(t, map[int]int64{40: 1}, b.counts(t, "2026-03-01 10:00Z", "analysis_default", "free"))
	})

	t.Run("KeepsWhatAFailedFlushHeld", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		now := time.Date(2026, 3, 1, 10, 0, 30, 0, time.UTC)
		r := b.recorder(t, &now)
		r.ObserveWait("analysis_default", "pro", 5*time.Millisecond)
		cancelled, cancel := context.WithCancel(b.ctx)
		cancel()
		require.ErrorIs(t, r.Flush(cancelled), context.Canceled)
		r.ObserveWait("analysis_default", "pro", 5*time.Millisecond)
		require.NoError(t, r.Flush(b.ctx))
		require.Equal(t, map[int]int64{7: 2}, b.counts(t, "2026-03-01 10:00Z", "analysis_default", "pro"))
	})

	t.Run("DeletesRowsPastRetention", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.insert(t, "2026-03-01 07:59Z", "analysis_default", "pro", 7, 1)
		b.insert(t, "2026-03-01 08:00Z", "analysis_default", "pro", 7, 1)
		b.insert(t, "2026-03-01 08:01Z", "analysis_default", "pro", 7, 1)
		now := time.Date(2026, 3, 1, 10, 1, 59, 0, time.UTC) // the cutoff: 08:01, two hours before this minute
		require.NoError(t, b.recorder(t, &now).Flush(b.ctx))
		require.Equal(t, []string{"08:01"}, b.minutes(t))
	})

	t.Run("Run", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		r, err := waitstats.NewRecorder(b.db.Pool, &waitstats.Config{FlushInterval: time.Hour})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(b.ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			r.Run(ctx)
		}()
		r.ObserveWait("analysis_default", "pro", 5*time.Millisecond)
		cancel()
		<-done
		require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM job_wait_stats WHERE counts[8] = 1`), "the last flush, at the stop")
	})

	t.Run("Config", func(t *testing.T) {
		t.Parallel()
		_, err := waitstats.NewRecorder(nil, &waitstats.Config{Retention: 59 * time.Minute})
		require.EqualError(t, err, "waitstats: retention 59m0s must be at least an hour")
		_, err = waitstats.NewRecorder(nil, &waitstats.Config{FlushInterval: -time.Second})
		require.EqualError(t, err, "waitstats: flush interval -1s must be positive")
		require.Equal(t, waitstats.Config{FlushInterval: 10 * time.Second, Retention: 2 * time.Hour, Logger: waitstats.Config{}.WithDefaults().Logger},
			waitstats.Config{}.WithDefaults())
	})
}

// minutes are the rows' minutes, "15:04" in UTC, oldest first.
func (b *bundle) minutes(t *testing.T) []string {
	t.Helper()
	rows, err := b.db.Pool.Query(b.ctx, `SELECT to_char(minute AT TIME ZONE 'UTC', 'HH24:MI') FROM job_wait_stats ORDER BY minute`)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}

func TestRead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.insert(t, "2026-03-01 10:01Z", "analysis_default", "pro", 40, 100)
	b.insert(t, "2026-03-01 09:40Z", "analysis_default", "pro", 30, 100)
	b.insert(t, "2026-03-01 09:01Z", "analysis_default", "pro", 81, 1000) // an hour ago: outside
	b.insert(t, "2026-03-01 10:02Z", "analysis_default", "pro", 81, 1000) // a clock ahead: outside
	b.insert(t, "2026-03-01 09:02Z", "analysis_priority", "enterprise", 0, 1)
	b.insert(t, "2026-03-01 09:57Z", "analysis_default", "free", 60, 3) // 5 minutes: 09:57 to 10:01
	b.insert(t, "2026-03-01 09:56Z", "analysis_default", "free", 60, 1)

	series, err := waitstats.Read(b.ctx, b.db.Pool, time.Date(2026, 3, 1, 10, 1, 30, 0, time.UTC))
	require.NoError(t, err)
	require.Len(t, series, 3)

	pro := series[0]
	require.Equal(t, []string{"analysis_default", "pro"}, []string{pro.Queue, pro.Tier})
	require.Equal(t, waitstats.Summary{Jobs: 100, P50: 9 * time.Second, P99: 9980 * time.Millisecond}, pro.Last5)
	require.Equal(t, waitstats.Summary{Jobs: 200, P50: time.Second, P99: 9960 * time.Millisecond}, pro.Last60)
	require.Equal(t, time.Date(2026, 3, 1, 9, 2, 0, 0, time.UTC), pro.Minutes[0].At)
	require.Equal(t, waitstats.Minute{At: time.Date(2026, 3, 1, 9, 40, 0, 0, time.UTC),
		Summary: waitstats.Summary{Jobs: 100, P50: 900 * time.Millisecond, P99: 998 * time.Millisecond}}, pro.Minutes[38])
	require.Equal(t, waitstats.Minute{At: time.Date(2026, 3, 1, 10, 1, 0, 0, time.UTC), Summary: pro.Last5}, pro.Minutes[59])
	var active int
	for _, m := range pro.Minutes {
		if m.Jobs > 0 {
			active++
		}
	}
	require.Equal(t, 2, active)

	free := series[1]
	require.Equal(t, []string{"analysis_default", "free"}, []string{free.Queue, free.Tier})
	require.Equal(t, waitstats.Summary{Jobs: 3, P50: 900 * time.Second, P99: 998 * time.Second}, free.Last5)
	require.Equal(t, waitstats.Summary{Jobs: 4, P50: 900 * time.Second, P99: 998 * time.Second}, free.Last60)

	ent := series[2]
	require.Equal(t, []string{"analysis_priority", "enterprise"}, []string{ent.Queue, ent.Tier})
	require.Equal(t, waitstats.Summary{}, ent.Last5)
	require.Equal(t, waitstats.Summary{Jobs: 1, P50: 500 * time.Microsecond, P99: 990 * time.Microsecond}, ent.Last60)
	require.Equal(t, int64(1), ent.Minutes[0].Jobs)
}
