package ctl

import (
	"bytes"
	"context"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/x/ansi"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/dlq"
	"github.com/tierq/tierq/internal/testdb"
)

// TestWatchDashboard lays out a known mix with SQL and checks that every
// figure `watch --once` prints is the database's: state counts, the oldest
// available job's age, dead letters, the leader, and the wait percentiles
// by tier, computed here from the literal waits inserted.
func TestWatchDashboard(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := db.Pool.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}

	// Three dead letters, one each in analysis_default, analysis_scheduled
	// and specview_priority; drained before anything else is discarded.
	testdb.SeedDiscarded(t, db, 3)
	_, err := dlq.Drain(ctx, db.Pool, 100)
	require.NoError(t, err)

	// Queued jobs: n in state, scheduled_at secsAgo seconds ago.
	queued := func(state, queue string, secsAgo, n int) {
		exec(`INSERT INTO river_job (state, queue, priority, kind, args, max_attempts, scheduled_at)
		      SELECT $1::river_job_state, $2, 2, 'loadtest', '{}', 10, now() - make_interval(secs => $3)
		      FROM generate_series(1, $4)`, state, queue, secsAgo, n)
	}
	queued("available", "analysis_priority", 30, 1)
	queued("available", "analysis_priority", 10, 2)
	queued("scheduled", "analysis_priority", -600, 4)
	queued("retryable", "analysis_priority", -60, 1)
	queued("pending", "analysis_default", 0, 3)
	queued("available", "analysis_default", 90, 2)
	for name, v := range testdb.NotObjects {
		testdb.InsertRaw(t, db, testdb.RawJob{Kind: "raw_" + name, Queue: "analysis_scheduled", Args: v, Metadata: v, Wait: 40 * time.Second})
	}

	// Started jobs: due dueAgo seconds ago, attempted wait seconds later.
	started := func(state, queue, args, metadata string, dueAgo, wait float64) {
		exec(`INSERT INTO river_job (state, queue, priority, kind, args, metadata, max_attempts, attempt,
		                             scheduled_at, attempted_at, finalized_at)
		      SELECT $1::river_job_state, $2, 1, 'loadtest', $3::jsonb, $4::jsonb, 10, 1,
		             now() - make_interval(secs => $5), now() - make_interval(secs => $5 - $6),
		             CASE WHEN $1 IN ('completed', 'cancelled', 'discarded') THEN now() - make_interval(secs => $5 - $6 - 0.5) END`,
			state, queue, args, metadata, dueAgo, wait)
	}
	enterprise := []float64{1, 2, 3, 4, 5}
	for i, wait := range enterprise {
		state := map[int]string{3: "running", 4: "cancelled"}[i]
		if state == "" {
			state = "completed"
		}
		started(state, "analysis_priority", `{"tier": "enterprise"}`, `{}`, 120, wait)
	}
	free := []float64{10, 20, 30, 40, 50}
	for _, wait := range free {
		started("completed", "analysis_default", `{"tier": "free", "target": "/srv"}`, `{}`, 200, wait)
	}
	started("discarded", "analysis_priority", `{"tier": "pro"}`, `[]`, 60, 7)
	// A free job an operator escalated (or lending moved) into the priority
	// queue: a free row there, which the legend explains.
	started("completed", "analysis_priority", `{"tier": "free"}`,
		`{"tierq:tier": "free", "tierq:moves": [{"kind": "escalation", "from_queue": "analysis_default", "to_queue": "analysis_priority"}]}`, 45, 0.2)
	// The tier recorded in metadata counts before args' (none here, and
	// "free" in the second).
	started("completed", "specview_priority", `{}`, `{"tierq:tier": "pro_plus"}`, 30, 0.004)
	started("completed", "specview_priority", `{"tier": "free"}`, `{"tierq:tier": "pro_plus"}`, 30, 0.008)
	unknownArgs := []string{`{"tier": "gold"}`, `{"tier": 3}`, `{}`}
	for _, v := range testdb.NotObjects {
		unknownArgs = append(unknownArgs, v)
	}
	for _, args := range unknownArgs {
		started("completed", "specview_default", args, `"x"`, 150, 100)
	}
	// Background work in a _scheduled queue, of any tier, and the
	// scheduler's periodic jobs (no tier): one row per queue.
	started("completed", "analysis_scheduled", `{"tier": "pro"}`, `{"tierq:tier": "pro"}`, 100, 2)
	started("completed", "analysis_scheduled", `{"tier": "free"}`, `{}`, 100, 4)
	started("completed", "scheduler", `{}`, `{}`, 50, 0.5)
	// Not counted: started before the window, and retryable (its
	// scheduled_at is already the next retry's).
	started("completed", "analysis_priority", `{"tier": "enterprise"}`, `{}`, 900, 1)
	started("retryable", "analysis_priority", `{"tier": "enterprise"}`, `{}`, 60, 2)
	exec(`UPDATE river_job SET scheduled_at = now() + interval '1 minute' WHERE state = 'retryable' AND attempted_at IS NOT NULL`)

	exec(`INSERT INTO river_leader (elected_at, expires_at, leader_id) VALUES (now(), now() + interval '15 seconds', 'scheduler-a')`)

	out, err := runTierctl(t, dbEnv(t, db), "watch", "--once")
	require.NoError(t, err, out)
	t.Log("\n" + out)
	require.Regexp(t, `^\d\d:\d\d:\d\d  leader: scheduler-a  dead letters pending: 3\n`, out)

	// QUEUE SCHEDULED PENDING HELD AVAILABLE RETRYABLE RUNNING OLDEST DEAD
	queueRow := func(queue, counts string, oldest float64, dead string) {
		t.Helper()
		m := regexp.MustCompile(`(?m)^\s*` + queue + `\s+` + counts + `\s+(\S+)\s+` + dead + `$`).FindStringSubmatch(out)
		require.NotNil(t, m, "row %s %s ... %s", queue, counts, dead)
		age, err := time.ParseDuration(m[1])
		require.NoError(t, err)
		require.InDelta(t, oldest, age.Seconds(), 5, queue)
	}
	queueRow("analysis_priority", `4\s+0\s+0\s+3\s+2\s+1`, 30, "0")
	queueRow("analysis_default", `0\s+3\s+0\s+2\s+0\s+0`, 90, "1") // pending, not held
	queueRow("analysis_scheduled", `0\s+0\s+0\s+5\s+0\s+0`, 40, "1")
	queueRow("specview_priority", `0\s+0\s+0\s+0\s+0\s+0`, 0, "1")
	queueRow("specview_default", `0\s+0\s+0\s+0\s+0\s+0`, 0, "0")

	// QUEUE TIER STARTED P50 P99, in the queues' order, then the tiers'.
	waitRows := regexp.MustCompile(`(?m)^\s*(\S+)\s+(free|pro|pro_plus|enterprise|unknown|\(background\)|\(periodic\))\s+(\d+)\s+(\S+)\s+(\S+)$`).FindAllStringSubmatch(out, -1)
	want := []struct {
		queue, tier string
		waits       []float64
	}{
		{"analysis_priority", "free", []float64{0.2}},
		{"analysis_priority", "pro", []float64{7}},
		{"analysis_priority", "enterprise", enterprise},
		{"analysis_default", "free", free},
		{"analysis_scheduled", "(background)", []float64{2, 4}},
		{"specview_priority", "pro_plus", []float64{0.004, 0.008}},
		{"specview_default", "unknown", slices.Repeat([]float64{100}, len(unknownArgs))},
		{"scheduler", "(periodic)", []float64{0.5}},
	}
	require.Len(t, waitRows, len(want), out)
	for i, w := range want {
		m := waitRows[i]
		require.Equal(t, []string{w.queue, w.tier, strconv.Itoa(len(w.waits))}, m[1:4], "row %d", i)
		for k, p := range []float64{0.5, 0.99} {
			got, err := time.ParseDuration(m[4+k])
			require.NoError(t, err)
			require.InDelta(t, linearPercentile(w.waits, p), got.Seconds(), 0.051, "%s %s p%v", w.queue, w.tier, p*100)
		}
	}
	require.Regexp(t, `(?m)^\s*specview_priority\s+pro_plus\s+2\s+6ms\s+8ms$`, out, "waits under a second in milliseconds")
	require.Contains(t, out, "\n"+watchLegend[1:], "the legend closes the frame")
	// The legend says what each queue holds, the free jobs moved into a
	// _priority queue included (the free row above).
	require.True(t, strings.HasSuffix(out, "\n\n"+
		"_priority: paid tiers' jobs, and free jobs escalated or lent there\n"+
		"_default: free and unknown tiers'; _scheduled: background jobs of any tier\n"+
		"scheduler: tierq's periodic jobs; SCHEDULED is River's state (due later), not a queue\n"),
		"the legend closes the frame:\n%s", out)
	require.NotContains(t, out, "(paused)")

	// Without a leader lease in the last minute: "none".
	exec(`UPDATE river_leader SET expires_at = now() - interval '2 minutes'`)
	out, err = runTierctl(t, dbEnv(t, db), "watch", "--once")
	require.NoError(t, err, out)
	require.Regexp(t, `^\d\d:\d\d:\d\d  leader: none  dead letters pending: 3\n`, out)
}

// linearPercentile is PostgreSQL's percentile_cont: linear interpolation
// between the two closest ranks.
func linearPercentile(values []float64, p float64) float64 {
	v := slices.Sorted(slices.Values(values))
	pos := p * float64(len(v)-1)
	lo := int(math.Floor(pos))
	if lo+1 >= len(v) {
		return v[lo]
	}
	return v[lo] + (pos-float64(lo))*(v[lo+1]-v[lo])
}

func TestLinearPercentile(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		give []float64
		p    float64
		want float64
	}{
		{name: "median of odd", give: []float64{3, 1, 2}, p: 0.5, want: 2},
		{name: "median of even", give: []float64{1, 2, 3, 4}, p: 0.5, want: 2.5},
		{name: "p99 of five", give: []float64{1, 2, 3, 4, 5}, p: 0.99, want: 4.96},
		{name: "one value", give: []float64{7}, p: 0.99, want: 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.InDelta(t, tt.want, linearPercentile(tt.give, tt.p), 1e-9)
		})
	}
}

// TestWatchStopsCleanlyWhenInterrupted cancels watch's context, as SIGINT
// does through run's signal handling: watch returns nil after appending
// frames (stdout is not a terminal here), with no escape sequences.
func TestWatchStopsCleanlyWhenInterrupted(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	var out bytes.Buffer
	err := Main(ctx, []string{"tierctl", "watch", "--interval", "100ms"}, dbEnv(t, db), &out)
	require.NoError(t, err)
	require.GreaterOrEqual(t, strings.Count(out.String(), "leader: none"), 2, out.String())
	require.NotContains(t, out.String(), "\x1b")
}

// TestScreenRedrawsInPlace: on a terminal each frame moves back over the
// last one and erases below it, and close shows the cursor and ends the
// line.
func TestScreenRedrawsInPlace(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	s := &screen{w: &out, fd: math.MaxInt32} // no such descriptor: no width to cut to
	s.draw("a\nb\n")
	s.draw("c\n")
	s.close()
	require.Equal(t, "a\nb\n"+ansi.CursorUp(2)+ansi.EraseScreenBelow+"c\n"+ansi.ShowCursor+"\n", out.String())

	out.Reset()
	s = newScreen(&out, true) // not a terminal: frames are appended
	s.draw("a\n")
	s.draw("b\n")
	s.close()
	require.Equal(t, "a\nb\n", out.String())
}
