package waitstats

import (
	"math"
	"slices"
	"sort"
	"time"
)

// NumBuckets is how many counts a histogram has: one per bound, and one
// for the waits above the last bound. The table's check refuses any other
// length.
const NumBuckets = len(bounds) + 1

// bounds are the buckets' upper bounds (inclusive), in ascending order: 10
// per decade from 1 ms to 100,000 s.
var bounds = makeBounds()

func makeBounds() [81]time.Duration {
	mantissas := []time.Duration{1000, 1250, 1500, 2000, 2500, 3000, 4000, 5000, 6000, 8000} // µs of the first decade
	var out [81]time.Duration
	scale := time.Microsecond
	for decade := range 8 {
		for i, m := range mantissas {
			out[decade*len(mantissas)+i] = m * scale
		}
		scale *= 10
	}
	out[80] = 100_000 * time.Second
	return out
}

// Bounds are the buckets' upper bounds, inclusive, ascending: bucket i
// counts the waits above Bounds()[i-1] (0 for the first) and at most
// Bounds()[i]; bucket len(Bounds()) counts the longer ones.
func Bounds() []time.Duration { return slices.Clone(bounds[:]) }

// Bucket is the bucket that counts wait: the first whose bound is at least
// wait, or the last (NumBuckets-1) for a wait above every bound. A negative
// wait counts as 0.
func Bucket(wait time.Duration) int {
	return sort.Search(len(bounds), func(i int) bool { return bounds[i] >= wait })
}

// Histogram is a wait histogram: counts per bucket, not cumulative.
type Histogram [NumBuckets]int64

// Add adds other's counts to h.
func (h *Histogram) Add(other *Histogram) {
	for i, n := range other {
		h[i] += n
	}
}

// Total is how many waits h counts.
func (h *Histogram) Total() int64 {
	var n int64
	for _, c := range h {
		n += c
	}
	return n
}

// Quantile is the q-quantile (0 < q ≤ 1) of h's waits, interpolated
// linearly inside its bucket (from the bucket's lower bound, 0 for the
// first, to its upper bound; rounded to the nanosecond), and false when h counts nothing. A quantile
// among the waits above the last bound is that bound, a floor.
func (h *Histogram) Quantile(q float64) (time.Duration, bool) {
	total := h.Total()
	if total == 0 {
		return 0, false
	}
	rank := q * float64(total)
	var below int64
	for i, n := range h {
		if n == 0 || float64(below+n) < rank {
			below += n
			continue
		}
		if i == len(bounds) {
			return bounds[len(bounds)-1], true
		}
		var lo time.Duration
		if i > 0 {
			lo = bounds[i-1]
		}
		frac := (rank - float64(below)) / float64(n)
		return lo + time.Duration(math.Round(frac*float64(bounds[i]-lo))), true
	}
	return bounds[len(bounds)-1], true // q > 1: never reached for q ≤ 1
}

// Summary is the waits of a window: how many jobs started, and their p50
// and p99 (zero when none started).
type Summary struct {
	Jobs     int64
	P50, P99 time.Duration
}

// Summarize is h's Summary.
func (h *Histogram) Summarize() Summary {
	p50, _ := h.Quantile(0.5)
	p99, _ := h.Quantile(0.99)
	return Summary{Jobs: h.Total(), P50: p50, P99: p99}
}
