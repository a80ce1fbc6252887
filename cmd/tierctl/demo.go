package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/spf13/cobra"

	"github.com/tierq/tierq/ctl"
	"github.com/tierq/tierq/internal/jobmetasql"
	"github.com/tierq/tierq/internal/riverschema"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/service"
	"github.com/tierq/tierq/tiers"
)

// demoSettings are tierctl demo's flags.
type demoSettings struct {
	free        int
	burst       time.Duration
	paidEvery   time.Duration
	duration    time.Duration
	background  int
	sleepMS     int
	reportEvery time.Duration
	timeout     time.Duration
}

func (s demoSettings) check() error {
	switch {
	case s.free < 0 || s.free > 1_000_000:
		return fmt.Errorf("--free must be between 0 and 1000000, not %d", s.free)
	case s.background < 0 || s.background > 10_000:
		return fmt.Errorf("--background must be between 0 and 10000, not %d", s.background)
	case s.sleepMS < 1 || s.sleepMS > 60_000:
		return fmt.Errorf("--sleep-ms must be between 1 and 60000, not %d", s.sleepMS)
	case s.paidEvery < 10*time.Millisecond:
		return fmt.Errorf("--paid-every must be at least 10ms, not %s", s.paidEvery)
	case s.duration < s.paidEvery:
		return fmt.Errorf("--duration (%s) must be at least --paid-every (%s)", s.duration, s.paidEvery)
	case s.burst < 0 || s.burst > s.duration:
		return fmt.Errorf("--burst must be between 0 and --duration (%s), not %s", s.duration, s.burst)
	case s.reportEvery < 100*time.Millisecond:
		return fmt.Errorf("--report-every must be at least 100ms, not %s", s.reportEvery)
	case s.timeout <= 0:
		return fmt.Errorf("--timeout must be positive, not %s", s.timeout)
	}
	return nil
}

// sleep is a job's sleep: uniform in [sleepMS/2, 3*sleepMS/2].
func (s demoSettings) sleep(rng *rand.Rand) int {
	lo := s.sleepMS / 2
	return lo + rng.IntN(s.sleepMS+1)
}

func (a *app) demoCommand() *cobra.Command {
	var s demoSettings
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Flood the free queues, trickle paid work, and show that paid waits stay low",
		Long: `Run a demo of tierq's claim: a free-tier flood does not slow paying users.

The demo inserts load-test jobs (kind loadtest: each sleeps for a time in
[SLEEP_MS/2, 3*SLEEP_MS/2] and does nothing else), into both services'
queues, routed by each service's InsertOpts exactly as a producer does:

  free        --free jobs inserted over --burst, far more than the default
              queues' workers (3 analyzer, 2 specgen by default) can take:
              they go to analysis_default and specview_default (3:2).
  paid        one job every --paid-every for --duration (--duration /
              --paid-every jobs, the first at once), cycling pro,
              pro_plus and enterprise and the two services: they go to
              analysis_priority and specview_priority.
  background  --background scheduled-class jobs at the start, into
              analysis_scheduled and specview_scheduled.

Every --report-every it prints the free backlog (the demo's jobs waiting in
*_default: available, or held back by fair share, which holds a tenant's
jobs beyond its share in River state pending), the waits (attempted_at minus
when the job became due, p50 and p99 in SQL) of the paid and free jobs
started so far, and the completed counts. A job's due time is its insert:
fair share's admission moves scheduled_at to the admission and keeps the due
time (internal/jobmetasql.DueAtSQL), so a held job's wait counts its time held. After
--duration it waits (at most --timeout) for every job it inserted to finish,
prints a summary, and fails unless every one of them completed.

The workers must run the load-test workload (LOAD_TEST_WORKLOAD=true), as
make run's do; otherwise nothing is worked and the demo times out.`,
		Example: `  tierctl demo                                   # about 2 minutes on a laptop
  tierctl demo --free 300 --burst 5s --duration 15s --sleep-ms 50`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := s.check(); err != nil {
				return &ctl.UsageError{Err: err}
			}
			registry, err := jobs.Registry(jobs.Deps{}) // no workers: tierctl runs none
			if err != nil {
				return err
			}
			analyzer, err := registry.Parse(jobs.ServiceAnalyzer)
			if err != nil {
				return err
			}
			specGen, err := registry.Parse(jobs.ServiceSpecGen)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			pool, client, err := a.connectProducer(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			d := &demo{
				settings: s, client: client, pool: pool, app: a,
				services: []*service.Service{analyzer, specGen}, queues: registry.Queues(),
				byTier: map[tiers.Tier]int{}, byQueue: map[string]int{},
			}
			start := time.Now()
			err = d.run(ctx)
			if err != nil && ctx.Err() != nil {
				// Ctrl-C: not a failure. What was inserted stays queued and
				// is worked.
				fmt.Fprintf(a.stdout, "demo interrupted after %s: %d jobs inserted stay queued\n", time.Since(start).Round(time.Second), len(d.ids))
				return nil
			}
			return err
		},
	}
	f := cmd.Flags()
	f.IntVar(&s.free, "free", 4000, "free-tier jobs in the flood")
	f.DurationVar(&s.burst, "burst", 30*time.Second, "time over which the free flood is inserted (0: all at once)")
	f.DurationVar(&s.paidEvery, "paid-every", 150*time.Millisecond, "gap between two paid jobs")
	f.DurationVar(&s.duration, "duration", 90*time.Second, "how long paid jobs keep coming")
	f.IntVar(&s.background, "background", 6, "background (scheduled-class) jobs")
	f.IntVar(&s.sleepMS, "sleep-ms", 100, "mean sleep of a job in ms (each sleeps between half and one and a half times this)")
	f.DurationVar(&s.reportEvery, "report-every", 5*time.Second, "interval between two progress lines")
	f.DurationVar(&s.timeout, "timeout", 10*time.Minute, "how long to wait after --duration for every job to finish")
	return cmd
}

// demo is one run of tierctl demo: what it inserted and how to read it back.
type demo struct {
	settings demoSettings
	client   *river.Client[pgx.Tx]
	pool     *pgxpool.Pool
	app      *app
	rng      *rand.Rand
	// services are the analyzer, then the spec generator: paid and
	// background jobs alternate between them, free ones go 3:2.
	services []*service.Service
	queues   []string // the service queues, in the summary's order

	ids     []int64
	byTier  map[tiers.Tier]int
	byQueue map[string]int
	free    int // free jobs inserted so far
	paid    int // paid jobs inserted so far
}

// demoFreeBatchEvery is how often the flood inserts a batch of free jobs.
const demoFreeBatchEvery = 250 * time.Millisecond

var demoPaidTiers = []tiers.Tier{tiers.Pro, tiers.ProPlus, tiers.Enterprise}

func (d *demo) run(ctx context.Context) error {
	s := d.settings
	// A fixed seed: the same command line sleeps the same way.
	d.rng = rand.New(rand.NewPCG(3, 4)) //nolint:gosec // demo data, not secrets
	out := d.app.stdout
	fmt.Fprintf(out, "demo: load-test jobs (kind loadtest) that sleep %d-%d ms and do nothing else, routed by each service's InsertOpts:\n",
		s.sleepMS/2, s.sleepMS/2+s.sleepMS)
	fmt.Fprintf(out, "  free:       %d jobs over %s into analysis_default and specview_default (3:2)\n", s.free, s.burst)
	fmt.Fprintf(out, "  paid:       one every %s for %s (pro, pro_plus, enterprise) into analysis_priority and specview_priority\n", s.paidEvery, s.duration)
	fmt.Fprintf(out, "  background: %d scheduled-class jobs into analysis_scheduled and specview_scheduled\n", s.background)
	fmt.Fprintf(out, "  waits are attempted_at - due time (the insert, kept across fair share's hold) of the jobs started so far;\n")
	fmt.Fprintf(out, "  the free backlog is the demo's jobs waiting in *_default: available, or held back by fair share\n")

	start := time.Now()
	if err := d.insertBackground(ctx); err != nil {
		return err
	}
	if s.burst == 0 {
		if err := d.insertFree(ctx, s.free); err != nil {
			return err
		}
	}
	freeTicker := time.NewTicker(demoFreeBatchEvery)
	defer freeTicker.Stop()
	paidTicker := time.NewTicker(s.paidEvery)
	defer paidTicker.Stop()
	report := time.NewTicker(s.reportEvery)
	defer report.Stop()
	end := time.NewTimer(s.duration)
	defer end.Stop()

	// One paid job now and one per tick: --duration / --paid-every in all.
	paidJobs := int(s.duration / s.paidEvery)
	if err := d.insertPaid(ctx); err != nil {
		return err
	}
insert:
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-freeTicker.C:
			// The share of the flood due by now, so it is spread evenly over --burst.
			due := s.free
			if elapsed := time.Since(start); elapsed < s.burst {
				due = int(float64(s.free) * float64(elapsed) / float64(s.burst))
			}
			if err := d.insertFree(ctx, due-d.free); err != nil {
				return err
			}
		case <-paidTicker.C:
			if d.paid < paidJobs {
				if err := d.insertPaid(ctx); err != nil {
					return err
				}
			}
		case <-report.C:
			if err := d.report(ctx, start); err != nil {
				return err
			}
		case <-end.C:
			break insert
		}
	}
	if err := d.insertFree(ctx, s.free-d.free); err != nil {
		return err
	}
	for d.paid < paidJobs { // ticks a busy machine dropped
		if err := d.insertPaid(ctx); err != nil {
			return err
		}
	}

	fmt.Fprintf(out, "demo: all %d jobs inserted; waiting (at most %s) for them to finish\n", len(d.ids), s.timeout)
	deadline := time.NewTimer(s.timeout)
	defer deadline.Stop()
	poll := time.NewTicker(200 * time.Millisecond)
	defer poll.Stop()
	for {
		stats, err := d.stats(ctx)
		if err != nil {
			return err
		}
		if stats.total().unfinished == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("demo: %d of %d jobs still unfinished after %s: are the workers running with LOAD_TEST_WORKLOAD=true?",
				stats.total().unfinished, len(d.ids), s.timeout)
		case <-report.C:
			if err := d.report(ctx, start); err != nil {
				return err
			}
		case <-poll.C:
		}
	}
	return d.summary(ctx, start)
}

func (d *demo) insertBackground(ctx context.Context) error {
	params := make([]river.InsertManyParams, 0, d.settings.background)
	for i := range d.settings.background {
		tier := []tiers.Tier{tiers.Free, tiers.Pro}[i%2]
		svc := d.services[i/2%2]
		params = append(params, d.params(svc, tier, true))
	}
	return d.insertMany(ctx, params)
}

func (d *demo) insertFree(ctx context.Context, n int) error {
	if n <= 0 {
		return nil
	}
	params := make([]river.InsertManyParams, 0, min(n, 1000))
	for range n {
		svc := d.services[0]
		if d.free%5 >= 3 { // 3:2, as the default queues' default workers
			svc = d.services[1]
		}
		params = append(params, d.params(svc, tiers.Free, false))
		d.free++
		if len(params) == cap(params) {
			if err := d.insertMany(ctx, params); err != nil {
				return err
			}
			params = params[:0]
		}
	}
	return d.insertMany(ctx, params)
}

// insertPaid inserts one paid job: one Insert, as a producer serving one
// request does (it notifies the queue's workers at once).
func (d *demo) insertPaid(ctx context.Context) error {
	tier := demoPaidTiers[d.paid%len(demoPaidTiers)]
	svc := d.services[d.paid%2]
	p := d.params(svc, tier, false)
	ictx, cancel := insertContext(ctx)
	defer cancel()
	res, err := d.client.Insert(ictx, p.Args, p.InsertOpts)
	if err != nil {
		return fmt.Errorf("insert paid job: %w", err)
	}
	d.paid++
	d.ids = append(d.ids, res.Job.ID)
	return nil
}

// insertContext is ctx for one insert, which Ctrl-C does not cut short:
// an insert cancelled in flight may commit all the same, and the demo's
// count of what it inserted would miss it (TestDemoInterrupted saw 51
// said, 52 queued). The demo stops between inserts instead.
func insertContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
}

func (d *demo) params(svc *service.Service, tier tiers.Tier, scheduled bool) river.InsertManyParams {
	// Each job runs for one of seven tenants of its tier (as tierctl
	// enqueue's users), recorded in its metadata.
	opts := svc.InsertOpts(tier, demoUserID("demo", tier, d.byTier[tier]), scheduled)
	d.byTier[tier]++
	d.byQueue[opts.Queue]++
	return river.InsertManyParams{Args: jobs.LoadTestArgs{SleepMS: d.settings.sleep(d.rng), Tier: tier.String()}, InsertOpts: opts}
}

func (d *demo) insertMany(ctx context.Context, params []river.InsertManyParams) error {
	if len(params) == 0 {
		return nil
	}
	ictx, cancel := insertContext(ctx)
	defer cancel()
	res, err := d.client.InsertMany(ictx, params)
	if err != nil {
		return fmt.Errorf("insert demo jobs: %w", err)
	}
	for _, r := range res {
		d.ids = append(d.ids, r.Job.ID)
	}
	return nil
}

// demoStatsQuery reads the demo's jobs back by id (the primary key), per
// class of queue: counts by state, the waiting ones (available, or held
// back by fair share: pending with jobmeta.HeldAt), the held ones, and the
// waits of those started: attempted_at minus when the attempt became due
// (jobmetasql.DueAtSQL: the insert, kept when fair share admits a held job and
// moves its scheduled_at), in ms.
var demoStatsQuery = `
WITH demo AS (
	SELECT CASE WHEN j.queue LIKE '%\_priority' THEN 'paid'
	            WHEN j.queue LIKE '%\_scheduled' THEN 'background'
	            ELSE 'free' END AS class,
	       j.state,
	       ` + jobmetasql.HeldSQL("j") + ` AS held,
	       extract(epoch FROM j.attempted_at - ` + jobmetasql.DueAtSQL("j") + `) * 1000 AS wait_ms
	FROM ` + riverschema.JobTable + ` AS j WHERE j.id = ANY($1)
)
SELECT class,
       count(*),
       count(*) FILTER (WHERE state = '` + riverschema.StateAvailable + `' OR held),
       count(*) FILTER (WHERE held),
       count(*) FILTER (WHERE state = '` + riverschema.StateCompleted + `'),
       count(*) FILTER (WHERE state NOT IN ('` + riverschema.StateCompleted + `', '` + riverschema.StateCancelled + `', '` + riverschema.StateDiscarded + `')),
       count(wait_ms),
       coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY wait_ms), 0),
       coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY wait_ms), 0)
FROM demo GROUP BY class`

// demoClass is the demo's jobs of one class of queue.
type demoClass struct {
	jobs, completed, unfinished, started int
	waiting, held                        int     // waiting: available or held
	p50, p99                             float64 // ms
}

type demoStats map[string]demoClass

func (s demoStats) total() demoClass {
	var t demoClass
	for _, c := range s {
		t.jobs += c.jobs
		t.waiting += c.waiting
		t.held += c.held
		t.completed += c.completed
		t.unfinished += c.unfinished
	}
	return t
}

func (d *demo) stats(ctx context.Context) (demoStats, error) {
	rows, err := d.pool.Query(ctx, demoStatsQuery, d.ids)
	if err != nil {
		return nil, fmt.Errorf("read demo jobs: %w", err)
	}
	stats := demoStats{}
	var (
		class string
		c     demoClass
	)
	_, err = pgx.ForEachRow(rows, []any{&class, &c.jobs, &c.waiting, &c.held, &c.completed, &c.unfinished, &c.started, &c.p50, &c.p99}, func() error {
		stats[class] = c
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read demo jobs: %w", err)
	}
	return stats, nil
}

func (d *demo) report(ctx context.Context, start time.Time) error {
	stats, err := d.stats(ctx)
	if err != nil {
		return err
	}
	free, paid, bg := stats["free"], stats["paid"], stats["background"]
	fmt.Fprintf(d.app.stdout, "[%4s] free backlog %5d (%d held) | paid wait p50 %s p99 %s (%d started) | free wait p50 %s p99 %s | completed: free %d/%d, paid %d/%d, background %d/%d\n",
		time.Since(start).Round(time.Second), free.waiting, free.held,
		ms(paid.p50), ms(paid.p99), paid.started, ms(free.p50), ms(free.p99),
		free.completed, free.jobs, paid.completed, paid.jobs, bg.completed, bg.jobs)
	return nil
}

// ErrDemoIncomplete is a demo whose jobs did not all complete.
var ErrDemoIncomplete = errors.New("demo: not every job completed")

func (d *demo) summary(ctx context.Context, start time.Time) error {
	stats, err := d.stats(ctx)
	if err != nil {
		return err
	}
	out := d.app.stdout
	total := stats.total()
	fmt.Fprintf(out, "demo finished in %s: %d jobs, %d completed\n", time.Since(start).Round(time.Second), total.jobs, total.completed)
	var byTier []string
	for _, tier := range tiers.All() {
		byTier = append(byTier, fmt.Sprintf("%s %d", tier, d.byTier[tier]))
	}
	fmt.Fprintf(out, "  by tier:  %s (%d background jobs included)\n", strings.Join(byTier, ", "), stats["background"].jobs)
	var byQueue []string
	for _, queue := range d.queues {
		if n := d.byQueue[queue]; n > 0 {
			byQueue = append(byQueue, fmt.Sprintf("%s %d", queue, n))
		}
	}
	fmt.Fprintf(out, "  by queue: %s\n", strings.Join(byQueue, ", "))
	for _, class := range []string{"paid", "free", "background"} {
		c := stats[class]
		fmt.Fprintf(out, "  %-10s completed %d/%d, wait p50 %s, p99 %s\n", class, c.completed, c.jobs, ms(c.p50), ms(c.p99))
	}
	fmt.Fprintf(out, "  the claim: paid p99 wait %s while free work waited up to %s (p99)\n", ms(stats["paid"].p99), ms(stats["free"].p99))
	if total.completed != total.jobs {
		return fmt.Errorf("%w: %d of %d jobs ended in another state (cancelled or discarded)", ErrDemoIncomplete, total.jobs-total.completed, total.jobs)
	}
	return nil
}

// ms formats milliseconds readably: 4ms, 12.3s.
func ms(v float64) string {
	if v >= 1000 {
		return fmt.Sprintf("%.1fs", v/1000)
	}
	return fmt.Sprintf("%.0fms", v)
}
