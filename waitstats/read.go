package waitstats

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tierq/tierq/internal/db"
)

// Window is how many minutes Read returns, the current one included.
const Window = 60

// ShortWindow is the minutes of Series.Last5, the current one included.
const ShortWindow = 5

// Series is one queue and tier's recorded waits over the last Window
// minutes.
type Series struct {
	Queue string
	Tier  string
	// Last5 and Last60 are the waits of the jobs started in the last
	// ShortWindow and Window minutes (the current minute included).
	Last5, Last60 Summary
	// Minutes are the Window minutes ending with the current one, oldest
	// first: each minute's jobs and their p50 and p99.
	Minutes [Window]Minute
}

// Minute is one minute of a Series.
type Minute struct {
	At time.Time // the minute's start, UTC
	Summary
}

// readSQL reads the rows of minutes $1 to $2, at most Window rows per
// queue and tier: a range of the primary key (minute, queue, tier), or,
// as the table holds only Retention (2 h) of rows and this is about half
// of them, a scan of the small table when the planner prefers it.
const readSQL = `
SELECT minute, queue, tier, counts FROM job_wait_stats
WHERE minute >= $1 AND minute <= $2`

// Read is the recorded waits of the Window minutes ending with now's,
// per queue and tier that has any, ordered by queue then tier (tier names
// in the order of tierOrder, any other after them).
func Read(ctx context.Context, q db.Querier, now time.Time) ([]Series, error) {
	last := now.UTC().Truncate(time.Minute)
	first := last.Add(-(Window - 1) * time.Minute)
	rows, err := q.Query(ctx, readSQL, first, last)
	if err != nil {
		return nil, fmt.Errorf("read job waits: %w", err)
	}
	type acc struct {
		series      *Series
		short, long Histogram
		minutes     [Window]Histogram
	}
	byKey := map[[2]string]*acc{}
	var (
		minute      time.Time
		queue, tier string
		counts      []int64
	)
	if _, err := pgx.ForEachRow(rows, []any{&minute, &queue, &tier, &counts}, func() error {
		if len(counts) != NumBuckets {
			return fmt.Errorf("row of %s, %s, %s has %d buckets, want %d", minute, queue, tier, len(counts), NumBuckets)
		}
		a := byKey[[2]string{queue, tier}]
		if a == nil {
			a = &acc{series: &Series{Queue: queue, Tier: tier}}
			byKey[[2]string{queue, tier}] = a
		}
		var h Histogram
		copy(h[:], counts)
		i := int(minute.Sub(first) / time.Minute)
		a.minutes[i].Add(&h)
		a.long.Add(&h)
		if i >= Window-ShortWindow {
			a.short.Add(&h)
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read job waits: %w", err)
	}
	out := make([]Series, 0, len(byKey))
	for _, a := range byKey {
		s := a.series
		s.Last5, s.Last60 = a.short.Summarize(), a.long.Summarize()
		for i := range s.Minutes {
			s.Minutes[i] = Minute{At: first.Add(time.Duration(i) * time.Minute), Summary: a.minutes[i].Summarize()}
		}
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b Series) int {
		return cmp.Or(cmp.Compare(a.Queue, b.Queue), cmp.Compare(tierRank(a.Tier), tierRank(b.Tier)), cmp.Compare(a.Tier, b.Tier))
	})
	return out, nil
}

// tierOrder is the order of a queue's tiers in Read: paid first.
var tierOrder = [...]string{"enterprise", "pro_plus", "pro", "free", "unknown"}

func tierRank(tier string) int {
	if i := slices.Index(tierOrder[:], tier); i >= 0 {
		return i
	}
	return len(tierOrder)
}
