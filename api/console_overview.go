package api

// The console's overview: per queue, jobs by state with the held ones
// apart, the workers serving it, the jobs lent to it, the oldest waiting
// job, paused, the dead letters pending; per queue and tier, the waits
// from the due time over the last 5 and 60 minutes, with a chart of each
// minute's p99; and the River leader.
//
// A page load runs these queries, none over river_job:
//   - the API's metrics snapshot (queuestats.Summaries, dlq.PendingDepth,
//     queuestats.RecentLeader, queuestats.LentNow), read at most every
//     MetricsCacheFor and shared with /metrics' scrapes; the overview shows
//     one up to overviewMaxAge old at once and reads the next in the
//     background;
//   - River's pauses: one row per paused queue (queuestats.Paused);
//   - the workers: the unexpired rows of fair_share_slots, one per worker
//     process and queue (queuestats.LiveWorkers);
//   - the waits: the last 60 minutes of job_wait_stats (waitstats.Read),
//     which the worker processes fill with the waits they observe
//     (waitstats.Recorder): half of a table its retention bounds to 120
//     minutes, so the planner may scan it whole rather than its primary
//     key's range; 30 queues with 3 tiers each make 5,400 rows read.

import (
	"cmp"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tierq/tierq/internal/queuestats"
	"github.com/tierq/tierq/internal/riverschema"
	"github.com/tierq/tierq/routing"
	"github.com/tierq/tierq/waitstats"
)

// overviewMaxAge is how old the metrics snapshot the overview shows may
// be: a load within it shows the last read at once (the page says when it
// was read) and, when that is MetricsCacheFor old, starts the next read for
// the next load; a load after it waits for a new read.
const overviewMaxAge = 30 * time.Second

// overviewQueue is one queue's row.
type overviewQueue struct {
	queuestats.Summary
	// Pending is pending jobs not held: waiting for a job they depend on
	// (River's pending state), not for fair share.
	Pending     int
	Paused      bool
	PausedAt    time.Time
	DeadLetters int
	// Service is true for a service's queue, whose worker processes send
	// heartbeats; Workers is their workers (none: no live process).
	Service bool
	Workers queuestats.Workers
	// Lends is true for a service's priority queue, the one fair share
	// lends free jobs to; Lent is its lent jobs now.
	Lends bool
	Lent  queuestats.Lent
}

// overviewWaits is one queue and tier's row of waits.
type overviewWaits struct {
	waitstats.Series
	Chart waitChart
}

func (s *Server) consoleOverview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	snap := s.metrics.db.recent(overviewMaxAge)
	if snap.err != nil {
		s.consoleInternal(w, r, snap.err)
		return
	}
	paused, err := queuestats.Paused(ctx, s.pool)
	if err != nil {
		s.consoleInternal(w, r, err)
		return
	}
	workers, err := queuestats.LiveWorkers(ctx, s.pool)
	if err != nil {
		s.consoleInternal(w, r, err)
		return
	}
	series, err := waitstats.Read(ctx, s.pool, time.Now())
	if err != nil {
		s.consoleInternal(w, r, err)
		return
	}
	summaries, depth, leader := snap.queues, snap.depth, snap.leader
	data := struct {
		Queues      []overviewQueue
		Waits       []overviewWaits
		Leader      string
		DeadLetters int
		ReadAt      time.Time // when the snapshot was read
	}{Leader: leader, DeadLetters: depth.Total, ReadAt: snap.readAt}
	order := map[string]int{}
	for i, sum := range summaries {
		order[sum.Name] = i
		at, isPaused := paused[sum.Name]
		_, class, isService := s.cfg.Registry.ForQueue(sum.Name)
		data.Queues = append(data.Queues, overviewQueue{
			Summary: sum, Pending: sum.Counts[riverschema.StatePending] - sum.Held,
			Paused: isPaused, PausedAt: at, DeadLetters: depth.ByQueue[sum.Name],
			Service: isService, Workers: workers[sum.Name], Lends: isService && class == routing.Priority, Lent: snap.lent[sum.Name],
		})
	}
	// The waits in the table's order of queues (any other queue after
	// them, by name: Read's order), each queue's tiers paid first.
	rank := func(queue string) int {
		if i, ok := order[queue]; ok {
			return i
		}
		return len(order)
	}
	slices.SortStableFunc(series, func(a, b waitstats.Series) int { return cmp.Compare(rank(a.Queue), rank(b.Queue)) })
	for _, ser := range series {
		data.Waits = append(data.Waits, overviewWaits{Series: ser, Chart: newWaitChart(&ser)})
	}
	s.render(w, r, http.StatusOK, "overview", consolePage{Title: "Overview", Nav: "overview", Data: &data})
}

// Size of a wait chart, in pixels: two per minute.
const (
	waitChartWidth  = 2 * waitstats.Window
	waitChartHeight = 24
)

// waitChart is a small chart of a Series' p99 per minute, drawn as inline
// SVG by the page (no script): one polyline per run of minutes that
// started jobs (a minute without jobs is a gap), on a linear scale from 0
// at the bottom to the highest minute's p99 at the top.
type waitChart struct {
	Width, Height int
	// Lines are the polylines' points attributes: "x,y x,y ...".
	Lines []string
	// Max is the highest minute's p99, the top of the scale.
	Max time.Duration
}

// newWaitChart draws ser's p99 per minute. Minute i is at x = 2i+1; a run
// of one minute is a short horizontal stroke around it.
func newWaitChart(ser *waitstats.Series) waitChart {
	c := waitChart{Width: waitChartWidth, Height: waitChartHeight}
	for _, m := range ser.Minutes {
		if m.Jobs > 0 {
			c.Max = max(c.Max, m.P99)
		}
	}
	y := func(d time.Duration) string {
		v := float64(waitChartHeight - 1) // 1 px margins
		if c.Max > 0 {
			v -= float64(d) / float64(c.Max) * (waitChartHeight - 2)
		}
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	var run []string
	flush := func(last int) {
		switch len(run) {
		case 0:
			return
		case 1: // one minute: a stroke from x-1 to x+1
			x := 2*last + 1
			yv := run[0][strings.IndexByte(run[0], ',')+1:]
			run = []string{strconv.Itoa(x-1) + "," + yv, strconv.Itoa(x+1) + "," + yv}
		}
		c.Lines = append(c.Lines, strings.Join(run, " "))
		run = nil
	}
	for i, m := range ser.Minutes {
		if m.Jobs == 0 {
			flush(i - 1)
			continue
		}
		run = append(run, strconv.Itoa(2*i+1)+","+y(m.P99))
	}
	flush(len(ser.Minutes) - 1)
	return c
}

// formatWait is a recorded wait for the console, to about three digits:
// "0.5ms", "12.5ms", "911ms", "9.98s", "16m20s", "2h3m".
func formatWait(d time.Duration) string {
	short := func(v float64, unit string) string {
		decimals := 0
		switch {
		case v < 10:
			decimals = 2
		case v < 100:
			decimals = 1
		}
		s := strconv.FormatFloat(v, 'f', decimals, 64)
		if strings.Contains(s, ".") {
			s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
		}
		return s + unit
	}
	switch {
	case d < time.Second:
		return short(float64(d)/float64(time.Millisecond), "ms")
	case d < time.Minute:
		return short(d.Seconds(), "s")
	}
	return formatSeconds(d.Seconds())
}
