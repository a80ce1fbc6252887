package waitstats_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/waitstats"
)

func TestBounds(t *testing.T) {
	t.Parallel()
	b := waitstats.Bounds()
	require.Len(t, b, 81)
	require.Equal(t, 82, waitstats.NumBuckets)
	require.Equal(t, []time.Duration{time.Millisecond, 1250 * time.Microsecond, 1500 * time.Microsecond, 2 * time.Millisecond, 2500 * time.Microsecond,
		3 * time.Millisecond, 4 * time.Millisecond, 5 * time.Millisecond, 6 * time.Millisecond, 8 * time.Millisecond, 10 * time.Millisecond}, b[:11])
	require.Equal(t, time.Second, b[30])
	require.Equal(t, 20_000*time.Second, b[73])
	require.Equal(t, []time.Duration{80_000 * time.Second, 100_000 * time.Second}, b[79:])
	b[0] = 0
	require.Equal(t, time.Millisecond, waitstats.Bounds()[0], "a copy")
}

func TestBucket(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		give time.Duration
		want int
	}{
		{"negative", -time.Second, 0},
		{"zero", 0, 0},
		{"first bound, inclusive", time.Millisecond, 0},
		{"just above the first bound", time.Millisecond + 1, 1},
		{"1.25ms", 1250 * time.Microsecond, 1},
		{"5ms", 5 * time.Millisecond, 7},
		{"50ms", 50 * time.Millisecond, 17},
		{"one second", time.Second, 30},
		{"2s", 2 * time.Second, 33},
		{"9s", 9 * time.Second, 40},
		{"last bound", 100_000 * time.Second, 80},
		{"above every bound", 100_000*time.Second + 1, 81},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, waitstats.Bucket(tt.give))
		})
	}
}

// histogram is a Histogram with counts n in bucket i, from pairs i, n.
func histogram(pairs ...int64) *waitstats.Histogram {
	var h waitstats.Histogram
	for i := 0; i < len(pairs); i += 2 {
		h[pairs[i]] = pairs[i+1]
	}
	return &h
}

func TestQuantile(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		give *waitstats.Histogram
		want waitstats.Summary
	}{
		{"empty", histogram(), waitstats.Summary{}},
		{"one bucket, (8s, 10s]", histogram(40, 100), waitstats.Summary{Jobs: 100, P50: 9 * time.Second, P99: 9980 * time.Millisecond}},
		{"two buckets far apart", histogram(30, 90, 60, 10), waitstats.Summary{Jobs: 100, P50: 911_111_111, P99: 980 * time.Second}},
		{"rank at a bucket's top: its upper bound", histogram(30, 100, 40, 100), waitstats.Summary{Jobs: 200, P50: time.Second, P99: 9960 * time.Millisecond}},
		{"first bucket, from 0", histogram(0, 4), waitstats.Summary{Jobs: 4, P50: 500 * time.Microsecond, P99: 990 * time.Microsecond}},
		{"above every bound: the last bound", histogram(81, 1), waitstats.Summary{Jobs: 1, P50: 100_000 * time.Second, P99: 100_000 * time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.give.Summarize())
			_, ok := tt.give.Quantile(0.5)
			require.Equal(t, tt.want.Jobs > 0, ok)
		})
	}
}
