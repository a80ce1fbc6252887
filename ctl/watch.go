package ctl

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/charmbracelet/x/ansi"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/tierq/tierq/dlq"
	"github.com/tierq/tierq/internal/db"
	"github.com/tierq/tierq/internal/jobmetasql"
	"github.com/tierq/tierq/internal/queuestats"
	"github.com/tierq/tierq/internal/riverschema"
	"github.com/tierq/tierq/routing"
	"github.com/tierq/tierq/scheduler"
	"github.com/tierq/tierq/tiers"
)

// watchStates are the queued states (queuestats.Summaries' counts) shown per
// queue, in lifecycle order; HELD (the pending jobs fair share holds back)
// follows PENDING. Finished jobs are River's history and not counted: that
// would read the whole table.
var watchStates = []string{
	riverschema.StateScheduled, riverschema.StatePending, riverschema.StateAvailable,
	riverschema.StateRetryable, riverschema.StateRunning,
}

// waitWindow is how far back watch looks for started jobs.
const waitWindow = 5 * time.Minute

// startedWaitsSQL gives, per queue and tier, how many jobs were started (attempted_at)
// in the last $1 seconds and the p50 and p99 of their waits: attempted_at
// minus when the attempt became due (jobmetasql.DueAtSQL). For a job on its second
// or later attempt that is the retry's due time, not its insert. Retryable
// jobs are left out: River has already set their scheduled_at to the next
// retry, so the due time of the attempt that ran is gone.
//
// The tier is jobmetasql.TierSQL's (the job's metadata (jobmeta.Tier), else its
// args' "tier", else "unknown") in the queues $2 lists, the services'
// priority and default queues, where the tier decided the queue and the
// starting priority; elsewhere it is empty and the queue's jobs make one row:
// a service's scheduled queue holds background work of any tier, the
// scheduler's queue tierq's own periodic jobs, which have none.
//
// Indexes: attempted_at has none. Running jobs are found through River's
// (state, queue, priority, scheduled_at, id) index (they are few: one per
// busy worker). Finished jobs (completed, cancelled, discarded) through
// River's (state, finalized_at) index, bounded by finalized_at in the window:
// a finished job was finalized after it was attempted. No sequential scan:
// its cost follows the jobs started in the window, not the table. Measured
// (BenchmarkStartedWaits, PostgreSQL 15) with 1M completed jobs finalized
// an hour ago, 2,000 finished in the window and 100 running: an Index Scan
// on river_job_prioritized_fetching_index (state = 'running') and one on
// river_job_state_and_finalized_at_index, 3.8 ms to execute, 6.8 ms per
// call from Go.
var startedWaitsSQL = `
WITH started AS (
    SELECT j.* FROM ` + riverschema.JobTable + ` AS j
    WHERE j.state = '` + riverschema.StateRunning + `' AND j.attempted_at > now() - make_interval(secs => $1)
    UNION ALL
    SELECT j.* FROM ` + riverschema.JobTable + ` AS j
    WHERE j.state IN ('` + riverschema.StateCompleted + `', '` + riverschema.StateCancelled + `', '` + riverschema.StateDiscarded + `')
      AND j.finalized_at > now() - make_interval(secs => $1)
      AND j.attempted_at > now() - make_interval(secs => $1)
)
SELECT j.queue, t.tier, count(*),
       percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY extract(epoch FROM j.attempted_at - d.at))::float8[]
FROM started AS j,
     LATERAL (SELECT ` + jobmetasql.DueAtSQL("j") + ` AS at) AS d,
     LATERAL (SELECT CASE WHEN j.queue = ANY($2::text[]) THEN ` + jobmetasql.TierSQL("j") + ` ELSE '' END AS tier) AS t
WHERE ` + db.FiniteSQL("j.scheduled_at") + ` AND ` + db.FiniteSQL("j.attempted_at") + `
GROUP BY j.queue, t.tier`

// tierWait is one row of startedWaitsSQL: the jobs of one tier started in
// one queue.
type tierWait struct {
	Queue    string
	Tier     string // "" outside the tiered queues: all the queue's jobs
	Started  int
	P50, P99 float64 // seconds
}

// dashboard is one frame of watch.
type dashboard struct {
	At     time.Time
	Queues []queuestats.Summary
	Paused map[string]time.Time // river_queue.paused_at of the paused queues
	Dead   dlq.Depth
	Waits  []tierWait // the queue and tier pairs that started jobs, in queue order then tier order
	Leader string     // "" when none
}

// watchQueues are the known services' queues (the catalog's) as watch
// groups them.
type watchQueues struct {
	// Service are every known service's queues (catalog.queues), listed
	// first.
	Service []string
	// Tiered are the services' priority and default queues, where a job's
	// tier chose the queue: their waits are shown per tier.
	Tiered []string
}

// queueSource gives the queues of one refresh: watch reads the catalog at
// every refresh, so that a service whose first process starts while watch
// runs appears, and a forgotten one goes.
type queueSource func(ctx context.Context, q db.Querier) (watchQueues, error)

// fixedQueues is a queueSource of queues, always.
func fixedQueues(queues watchQueues) queueSource {
	return func(context.Context, db.Querier) (watchQueues, error) { return queues, nil }
}

// catalogQueues is the queueSource of the services tierctl knows.
func (a *app) catalogQueues(ctx context.Context, q db.Querier) (watchQueues, error) {
	c, err := a.catalog(ctx, q)
	if err != nil {
		return watchQueues{}, err
	}
	return watchQueues{Service: c.queues(), Tiered: c.tiered()}, nil
}

// pausedSQL lists the queues River has paused (River's QueuePause, tierctl
// queues pause, River UI's button): a handful of rows at most.
const pausedSQL = `SELECT name, paused_at FROM ` + riverschema.QueueTable + ` WHERE paused_at IS NOT NULL`

// watchReadTimeout bounds one refresh's reads: a database that stops
// answering (a partition, a hung connect) shows as unreachable instead of
// freezing the view.
const watchReadTimeout = 10 * time.Second

func (a *app) watchCommand() *cobra.Command {
	var (
		interval time.Duration
		once     bool
	)
	cmd := &cobra.Command{
		Use:   "watch",
		Short: "Show a live dashboard of queues, waits by tier, dead letters and the leader until interrupted",
		Long: `Show, per queue, jobs by River state, the jobs fair share holds back
(HELD, part of PENDING), the oldest wait (OLDEST: the longest-waiting job,
available or held, from when it became due; a job scheduled ahead is not
waiting yet) and the dead letters pending, with "(paused)" after a queue
River has paused; the p50 and p99 wait of the jobs started in the last 5
minutes, by tier in the priority and default queues (where the tier chose
the queue) and as one row for a background (_scheduled) queue or the
scheduler's periodic jobs; and which scheduler leads River. The services
are those known in the database (tierctl services list), read at every
refresh; other queues River has follow theirs. On a terminal
the view is redrawn in place; otherwise each refresh is appended with a
timestamp. docs/operations.md ("Watching") explains every row and column.

When the database stops answering, watch keeps running: it says "database
unreachable since TIME: ERROR" (with the last view below it on a terminal),
retries at every refresh and shows the live view again once the database
answers. With --once an error exits 1.

Each refresh reads every waiting job of each queue for OLDEST (about 20 ms
for 50,000 waiting jobs; several times that when all of them were moved by
escalation or fair share): with large backlogs, a longer --interval spares
the database.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if interval < 100*time.Millisecond {
				return &UsageError{fmt.Errorf("--interval must be at least 100ms, not %s", interval)}
			}
			queues := a.catalogQueues
			ctx := cmd.Context()
			_, pool, err := a.connect(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()

			out := newScreen(a.stdout, !once)
			defer out.close()
			if once {
				d, err := readDashboard(ctx, pool, queues)
				if err != nil {
					return err
				}
				out.draw(renderDashboard(d))
				return nil
			}
			return watchLoop(ctx, pool, queues, out, interval, time.Now)
		},
	}
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "refresh interval")
	cmd.Flags().BoolVar(&once, "once", false, "print the dashboard once and exit (an error exits 1)")
	return cmd
}

// watchLoop draws a frame every interval until ctx ends, and returns nil
// then. A refresh that fails does not end it: the frame says since when the
// database has been unreachable and why (on a terminal, above the last
// view, which stays on screen), and the next refresh tries again; the pool
// replaces connections that broke. Once a refresh succeeds the live view is
// back.
func watchLoop(ctx context.Context, q db.Querier, queues queueSource, out *screen, interval time.Duration, now func() time.Time) error {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	var (
		last string    // the last good frame
		down time.Time // when the refreshes started failing; zero while they succeed
	)
	for {
		readCtx, cancel := context.WithTimeout(ctx, watchReadTimeout)
		d, err := readDashboard(readCtx, q, queues)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil // interrupted
		case err != nil:
			if down.IsZero() {
				down = now()
			}
			frame := renderDown(now(), down, interval, err, out.width())
			if out.live() && last != "" {
				frame += "the last view, from before:\n\n" + last
			}
			out.draw(frame)
		default:
			down = time.Time{}
			last = renderDashboard(d)
			out.draw(last)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// renderDown is the line watch shows while refreshes fail: "database
// unreachable" when no connection could be made or kept (a network error,
// a refused or failed login, a connection the server ended), "database
// error" when the server answered with an SQL error (a missing table, a
// permission). The error's own line breaks (pgx puts "\n\t" before each
// address it tried) become spaces. With width > 0 (a terminal's, which cuts
// longer lines) the line is folded to fit it, the rest indented, so that
// the reason at the error's end stays on screen.
func renderDown(at, since time.Time, interval time.Duration, err error, width int) string {
	what := "unreachable"
	var pgErr *pgconn.PgError
	var connectErr *pgconn.ConnectError
	if !errors.As(err, &connectErr) && errors.As(err, &pgErr) {
		switch sqlStateClass(pgErr.Code) {
		case "08", "53", "57": // connection exception, insufficient resources, operator intervention
		default:
			what = "error"
		}
	}
	line := fmt.Sprintf("%s  database %s since %s (%s): %s",
		at.Format("15:04:05"), what, since.Format("15:04:05"), at.Sub(since).Round(time.Second),
		oneLine(strings.Join(strings.Fields(err.Error()), " "), 300))
	if width > 0 {
		// Cut at width-1 like every line of a frame (screen.draw); folded
		// lines carry a two-space indent.
		line = strings.ReplaceAll(ansi.Wrap(line, max(width-3, 20), ""), "\n", "\n  ")
	}
	return fmt.Sprintf("%s\n  retrying every %s; Ctrl-C stops\n\n", line, interval)
}

// sqlStateClass is an SQLSTATE's class, its first two characters.
func sqlStateClass(code string) string { return code[:min(2, len(code))] }

// readDashboard reads one frame, reusing the API's queue summaries and
// leader query (queuestats) and the dead-letter depth; the service queues
// (source's) are listed first.
func readDashboard(ctx context.Context, q db.Querier, source queueSource) (dashboard, error) {
	d := dashboard{At: time.Now(), Paused: map[string]time.Time{}}
	queues, err := source(ctx, q)
	if err != nil {
		return d, err
	}
	if d.Queues, err = queuestats.Summaries(ctx, q, queues.Service); err != nil {
		return d, fmt.Errorf("summarize queues: %w", err)
	}
	rows, err := q.Query(ctx, pausedSQL)
	if err != nil {
		return d, fmt.Errorf("read paused queues: %w", err)
	}
	var (
		name string
		at   time.Time
	)
	if _, err := pgx.ForEachRow(rows, []any{&name, &at}, func() error {
		d.Paused[name] = at
		return nil
	}); err != nil {
		return d, fmt.Errorf("read paused queues: %w", err)
	}
	if d.Dead, err = dlq.PendingDepth(ctx, q); err != nil {
		return d, err
	}
	queueOrder := make([]string, 0, len(d.Queues))
	tiered := slices.Clone(queues.Tiered)
	for _, s := range d.Queues {
		queueOrder = append(queueOrder, s.Name)
		// Another service's priority and default queues (registered in
		// River by its workers) are tiered too: a team's own service.
		if _, class, ok := routing.ClassOf(s.Name); ok && (class == routing.Priority || class == routing.Default) && !slices.Contains(tiered, s.Name) {
			tiered = append(tiered, s.Name)
		}
	}
	if d.Waits, err = startedWaits(ctx, q, waitWindow, tiered, queueOrder); err != nil {
		return d, err
	}
	if d.Leader, err = queuestats.RecentLeader(ctx, q); err != nil {
		return d, err
	}
	return d, nil
}

// startedWaits runs startedWaitsSQL: a row for each queue and tier that
// started jobs (tiers only in the tiered queues), ordered by queue as
// queueOrder lists them (others after, by name), then by tier (tiers.All()
// order, "unknown" last).
func startedWaits(ctx context.Context, q db.Querier, window time.Duration, tiered, queueOrder []string) ([]tierWait, error) {
	rows, err := q.Query(ctx, startedWaitsSQL, window.Seconds(), tiered)
	if err != nil {
		return nil, fmt.Errorf("read waits: %w", err)
	}
	var (
		out []tierWait
		w   tierWait
		pct []float64
	)
	if _, err := pgx.ForEachRow(rows, []any{&w.Queue, &w.Tier, &w.Started, &pct}, func() error {
		if len(pct) == 2 {
			w.P50, w.P99 = pct[0], pct[1]
		}
		out = append(out, w)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read waits: %w", err)
	}
	rank := func(list []string, s string) int {
		if i := slices.Index(list, s); i >= 0 {
			return i
		}
		return len(list)
	}
	tierOrder := make([]string, 0, len(tiers.All()))
	for _, tier := range tiers.All() {
		tierOrder = append(tierOrder, tier.String())
	}
	slices.SortFunc(out, func(a, b tierWait) int {
		return cmp.Or(
			cmp.Compare(rank(queueOrder, a.Queue), rank(queueOrder, b.Queue)),
			strings.Compare(a.Queue, b.Queue),
			cmp.Compare(rank(tierOrder, a.Tier), rank(tierOrder, b.Tier)),
		)
	})
	return out, nil
}

// renderDashboard lays out a frame in fewer than 100 columns (a few more
// while a queue is paused: its name is marked).
func renderDashboard(d dashboard) string {
	var b strings.Builder
	leader := d.Leader
	if leader == "" {
		leader = "none"
	}
	fmt.Fprintf(&b, "%s  leader: %s  dead letters pending: %d\n\n", d.At.Format("15:04:05"), leader, d.Dead.Total)

	// Numbers align right; names are padded to one width so that they
	// read left-aligned. Queue names come from jobs' rows: termSafe.
	names := make([]string, len(d.Queues))
	var paused []string
	nameWidth := len("QUEUE")
	for i, q := range d.Queues {
		names[i] = termSafe(q.Name)
		if at, ok := d.Paused[q.Name]; ok {
			paused = append(paused, fmt.Sprintf("%s since %s", names[i], clockOrDate(at, d.At)))
			names[i] += " (paused)"
		}
		nameWidth = max(nameWidth, len(names[i]))
	}
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-*s\t", nameWidth, "QUEUE")
	for _, state := range watchStates {
		fmt.Fprintf(tw, "%s\t", strings.ToUpper(state))
		if state == riverschema.StatePending {
			fmt.Fprint(tw, "HELD\t")
		}
	}
	fmt.Fprint(tw, "OLDEST\tDEAD\t\n")
	for i, q := range d.Queues {
		fmt.Fprintf(tw, "%-*s\t", nameWidth, names[i])
		for _, state := range watchStates {
			fmt.Fprintf(tw, "%d\t", q.Counts[state])
			if state == riverschema.StatePending {
				fmt.Fprintf(tw, "%d\t", q.Held)
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t\n", formatSeconds(q.OldestWaitingSeconds), d.Dead.ByQueue[q.Name])
	}
	_ = tw.Flush()
	if len(paused) > 0 {
		fmt.Fprintf(&b, "paused (River's pause: no worker fetches from it until `tierctl queues resume QUEUE`):\n  %s\n",
			strings.Join(paused, ", "))
	}

	fmt.Fprintf(&b, "\nwait from due to start, jobs started in the last %.0f minutes\n", waitWindow.Minutes())
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	nameWidth = len("QUEUE")
	for _, q := range d.Queues {
		nameWidth = max(nameWidth, len(termSafe(q.Name)))
	}
	tierWidth := len(waitGroupLabel("x_scheduled")) // "(background)", the widest
	fmt.Fprintf(tw, "%-*s\t%-*s\tSTARTED\tP50\tP99\t\n", nameWidth, "QUEUE", tierWidth, "TIER")
	if len(d.Waits) == 0 {
		fmt.Fprintf(tw, "%-*s\t%-*s\t0\t-\t-\t\n", nameWidth, "(none)", tierWidth, "")
	}
	for _, w := range d.Waits {
		tier := termSafe(w.Tier)
		if w.Tier == "" {
			tier = waitGroupLabel(w.Queue)
		}
		fmt.Fprintf(tw, "%-*s\t%-*s\t%d\t%s\t%s\t\n", nameWidth, termSafe(w.Queue), tierWidth, tier, w.Started, formatSeconds(w.P50), formatSeconds(w.P99))
	}
	_ = tw.Flush()
	b.WriteString(watchLegend)
	return b.String()
}

// clockOrDate shows t in local time: the time of day when it is on the
// same day as now, else the date too.
func clockOrDate(t, now time.Time) string {
	t, now = t.Local(), now.Local()
	if y, m, d := t.Date(); now.Year() == y && now.Month() == m && now.Day() == d {
		return t.Format("15:04:05")
	}
	return t.Format("2006-01-02 15:04:05")
}

// waitGroupLabel is the TIER cell of a queue whose waits are not split by
// tier: "(background)" for a _scheduled queue (background work the
// scheduler makes, of any tier), "(periodic)" for the scheduler's own
// queue (tierq's sweeps and drain: no tier), "(any)" for another queue.
func waitGroupLabel(queue string) string {
	if queue == scheduler.Queue {
		return "(periodic)"
	}
	if _, class, ok := routing.ClassOf(queue); ok && class == routing.Scheduled {
		return "(background)"
	}
	return "(any)"
}

// watchLegend closes every frame: what the queue names and the state
// columns mean, for whoever reads the view for the first time. A _priority
// queue holds free jobs too: escalated there (an operator's or a rule's
// move) or lent its idle workers (fair share's lending), so the wait table
// may show a free row in it.
const watchLegend = `
_priority: paid tiers' jobs, and free jobs escalated or lent there
_default: free and unknown tiers'; _scheduled: background jobs of any tier
scheduler: tierq's periodic jobs; SCHEDULED is River's state (due later), not a queue
`

// formatSeconds shows a wait or an age: whole milliseconds under a second
// ("3ms"), so that paid waits read as what they are, tenths of a second
// under a minute ("4.9s"), whole seconds above ("3m12s");
// time.ParseDuration reads all three.
func formatSeconds(s float64) string {
	switch {
	case s < 1:
		return fmt.Sprintf("%.0fms", s*1000)
	case s < 60:
		return fmt.Sprintf("%.1fs", s)
	}
	return time.Duration(s * float64(time.Second)).Round(time.Second).String()
}

// screen writes frames: on a terminal (and when live) each frame replaces
// the last in place, with the cursor hidden meanwhile; elsewhere frames
// are appended. No raw mode is entered, so Ctrl-C reaches tierctl's signal
// handling as SIGINT, and close leaves the cursor shown after the last
// frame.
type screen struct {
	w     io.Writer
	fd    int // the terminal's descriptor, or -1 when appending
	lines int // lines of the frame on screen
}

func newScreen(w io.Writer, live bool) *screen {
	s := &screen{w: w, fd: -1}
	if f, ok := w.(*os.File); ok && live && term.IsTerminal(int(f.Fd())) { //nolint:gosec // file descriptors fit in int
		s.fd = int(f.Fd()) //nolint:gosec // as above
		fmt.Fprint(w, ansi.HideCursor)
	}
	return s
}

// live is whether frames replace each other in place (a terminal).
func (s *screen) live() bool { return s.fd >= 0 }

// width is the terminal's width in columns, or 0 when appending or when it
// cannot be read.
func (s *screen) width() int {
	if s.fd < 0 {
		return 0
	}
	if width, _, err := term.GetSize(s.fd); err == nil && width > 0 {
		return width
	}
	return 0
}

func (s *screen) draw(frame string) {
	if s.fd < 0 {
		fmt.Fprint(s.w, frame)
		return
	}
	// Lines wider than the terminal would wrap and throw off the count
	// of lines to move back over: cut them.
	if width := s.width(); width > 0 {
		lines := strings.Split(strings.TrimSuffix(frame, "\n"), "\n")
		for i, l := range lines {
			lines[i] = ansi.Truncate(l, width-1, "")
		}
		frame = strings.Join(lines, "\n") + "\n"
	}
	if s.lines > 0 {
		fmt.Fprint(s.w, ansi.CursorUp(s.lines)+ansi.EraseScreenBelow)
	}
	fmt.Fprint(s.w, frame)
	s.lines = strings.Count(frame, "\n")
}

// close shows the cursor again and ends on a fresh line (after the ^C the
// terminal echoed).
func (s *screen) close() {
	if s.fd >= 0 {
		fmt.Fprint(s.w, ansi.ShowCursor+"\n")
	}
}
