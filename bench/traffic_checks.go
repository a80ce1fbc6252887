package bench

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// account fills r from what the run left: where each job ended against
// where it planned to, the executions, the throughput and the small
// tenants. hits are the jobs a killed worker was running: each may end
// completed or dead-lettered (the rescue is an attempt).
func (t *trafficRunner) account(r *TrafficRun, c collected, start time.Time, hits []int64, capa capacity) {
	hit := map[int64]bool{}
	for _, id := range hits {
		hit[id] = true
	}
	var ends []float64 // the prompt jobs' ends, seconds from start
	queueEnds := map[string][]float64{}
	for i, j := range t.plan.jobs {
		end := c.jobs[i]
		if end.lent {
			r.Lent++
		}
		var got outcome
		switch end.state {
		case "completed":
			r.Completed++
			got = outcomeCompleted
		case "cancelled":
			r.Cancelled++
			got = outcomeCancelled
			if !strings.Contains(end.lastError, badArgsReason) {
				r.CancelledNoReason++
			}
		case "dead_lettered":
			r.DeadLettered++
			got = outcomeDeadLettered
		case "":
			r.Lost++
			t.example(r, "job %d (%s) is in neither river_job nor dead_letter_jobs", end.id, j.class)
			continue
		default:
			r.Stranded++
			if end.held {
				r.StrandedHeld++
			}
			t.example(r, "job %d (%s) still %s (held: %t)", end.id, j.class, end.state, end.held)
			continue
		}
		switch {
		case got == j.want:
		case hit[end.id] && (got == outcomeCompleted || got == outcomeDeadLettered):
		default:
			r.Unexpected++
			t.example(r, "job %d (%s) ended %s, not %s: %s", end.id, j.class, got, j.want, end.lastError)
		}
		if j.prompt && end.finalized != nil {
			ends = append(ends, end.finalized.Sub(start).Seconds())
			queue := j.queue(t.services)
			queueEnds[queue] = append(queueEnds[queue], end.finalized.Sub(start).Seconds())
		}
	}
	// A snooze gives the job its attempt back (River 0.44 and later): a job
	// snoozing n times runs its attempt n + 1 times. Any other attempt
	// starts once; a job completes once.
	for i, j := range t.plan.jobs {
		xs := c.executions[c.jobs[i].id]
		r.Executions += len(xs)
		done := 0
		attempts := map[int]int{}
		for _, x := range xs {
			if x.completed != nil {
				done++
			}
			attempts[x.attempt]++
		}
		twice := done > 1
		for _, n := range attempts {
			twice = twice || n > 1+j.args.Snoozes
		}
		if twice {
			r.RanTwice++
			t.example(r, "job %d (%s) ran twice: %d completed executions, starts per attempt %v", c.jobs[i].id, j.class, done, attempts)
		}
	}
	slices.Sort(ends)
	r.QueueSeconds = map[string]float64{}
	for queue, xs := range queueEnds {
		slices.Sort(xs)
		r.QueueSeconds[queue] = round(percentile(xs, 99), 2)
	}
	for _, j := range t.plan.jobs {
		if j.prompt {
			r.Prompt++
		}
	}
	if k := int(math.Ceil(0.99 * float64(r.Prompt))); k > 0 && k <= len(ends) {
		r.Seconds = round(ends[k-1], 2)
		r.JobsPerS = round(float64(k)/ends[k-1], 1)
	}
	r.Small = t.smallTenants(c, capa)
}

// example keeps the first few descriptions of a run's failed checks.
func (t *trafficRunner) example(r *TrafficRun, format string, args ...any) {
	if len(r.Examples) < 10 {
		r.Examples = append(r.Examples, fmt.Sprintf(format, args...))
	}
}

// recovery fills f with what became of the killed worker's jobs.
func (t *trafficRunner) recovery(f *TrafficFaults, c collected, killedAt time.Time, hits []int64) {
	hit := map[int64]bool{}
	for _, id := range hits {
		hit[id] = true
	}
	var last time.Time
	for _, end := range c.jobs {
		if !hit[end.id] || end.finalized == nil || (end.state != "completed" && end.state != "cancelled" && end.state != "dead_lettered") {
			continue
		}
		f.Rescued++
		if end.finalized.After(last) {
			last = *end.finalized
		}
	}
	if !last.IsZero() {
		f.RecoverySeconds = round(last.Sub(killedAt).Seconds(), 2)
	}
}

// start is one start of a job of a queue: a recorded execution, or the
// attempt of a job cancelled before it recorded (bad args).
type start struct {
	at    time.Time
	level int
	job   int // index into the plan's jobs
}

// span is a time a job waited to run: from when a run became due to its
// start.
type span struct{ from, to time.Time }

// delayAfter is how long after its n-th run (from 1) a job of the plan is
// due again: its snooze or its retry delay (River's backoff: n⁴ seconds,
// ±10%), 0 once it asks for none.
func (j trafficJob) delayAfter(n int) time.Duration {
	switch {
	case n <= j.args.Snoozes:
		return time.Duration(j.args.SnoozeMS) * time.Millisecond
	case n <= j.args.FailAttempts && j.args.RetryMS > 0:
		return time.Duration(j.args.RetryMS) * time.Millisecond
	case n <= j.args.FailAttempts:
		return time.Duration(n*n*n*n) * time.Second
	}
	return 0
}

// capacity is a queue's workers as fair share counted them at: the worker
// processes' own, and, for 15 s after a kill (the dead process's heartbeat
// lease), the killed worker's too.
type capacity struct {
	workers  map[string]int
	killedAt time.Time
	killed   map[string]int // the killed process's workers per queue
}

func (c capacity) at(queue string, t time.Time) int {
	n := c.workers[queue]
	if !c.killedAt.IsZero() && !t.Before(c.killedAt) && t.Before(c.killedAt.Add(15*time.Second)) {
		n += c.killed[queue]
	}
	return n
}

// smallTenants measures the small tenants' first starts in their home
// queue (SmallTenants says how). Another tenant is active while one of its
// jobs of the queue at that priority waits: due (inserted, or its snooze
// or retry delay after its previous run passed) and not started again
// yet.
func (t *trafficRunner) smallTenants(c collected, capa capacity) SmallTenants {
	lines := map[string][]start{}
	spans := make([][]span, len(t.plan.jobs))
	firstStart := make([]*time.Time, len(t.plan.jobs))
	for i, j := range t.plan.jobs {
		queue := j.queue(t.services)
		runs := slices.Clone(c.executions[c.jobs[i].id])
		if len(runs) == 0 && c.jobs[i].attempted != nil {
			runs = []execution{{started: *c.jobs[i].attempted}}
		}
		slices.SortFunc(runs, func(a, b execution) int { return a.started.Compare(b.started) })
		due := c.jobs[i].created
		for n, x := range runs {
			lines[queue] = append(lines[queue], start{at: x.started, level: j.level(), job: i})
			spans[i] = append(spans[i], span{from: due, to: x.started})
			due = x.started.Add(j.delayAfter(n + 1))
		}
		if len(runs) > 0 {
			firstStart[i] = &runs[0].started
		}
	}
	for _, l := range lines {
		slices.SortFunc(l, func(a, b start) int { return a.at.Compare(b.at) })
	}
	// The jobs of each queue, for the active tenants at an arrival.
	byQueue := map[string][]int{}
	for i, j := range t.plan.jobs {
		byQueue[j.queue(t.services)] = append(byQueue[j.queue(t.services)], i)
	}

	var waits, positions, bounds, ratios, overtaken, inversions []float64
	worst, worstRatio := "", -1.0
	for ti, tenant := range t.plan.tenants {
		if !tenant.small || tenant.rank == 0 {
			continue
		}
		var home string
		var own []int
		for _, ji := range t.plan.byTenant[ti] {
			j := t.plan.jobs[ji]
			if j.service == tenant.service && !j.scheduled {
				home = j.queue(t.services)
				own = append(own, ji)
			}
		}
		if len(own) == 0 {
			continue
		}
		level := t.plan.jobs[own[0]].level()
		var arrival, first time.Time
		for _, ji := range own {
			if created := c.jobs[ji].created; arrival.IsZero() || created.Before(arrival) {
				arrival = created
			}
			if s := firstStart[ji]; s != nil && (first.IsZero() || s.Before(first)) {
				first = *s
			}
		}
		if arrival.IsZero() || first.IsZero() {
			continue // lost or never started: the accounting reports it
		}
		position, later, inverted := 1, 0, 0
		ahead := map[int]int{}
		for _, s := range lines[home] {
			if !s.at.After(arrival) {
				continue
			}
			if !s.at.Before(first) {
				break
			}
			if s.level >= level && t.plan.jobs[s.job].tenant != ti {
				position++
				ahead[t.plan.jobs[s.job].tenant]++
				if c.jobs[s.job].created.After(arrival) {
					later++
				}
				if s.level > level {
					inverted++
				}
			}
		}
		active := map[int]bool{}
		for _, ji := range byQueue[home] {
			j := t.plan.jobs[ji]
			if j.tenant == ti || j.level() != level || active[j.tenant] {
				continue
			}
			for _, w := range spans[ji] {
				if w.from.Before(first) && w.to.After(arrival) {
					active[j.tenant] = true
					break
				}
			}
		}
		workers := capa.at(home, arrival)
		bound := workers + len(active)
		ratio := float64(position) / float64(bound)
		waits = append(waits, float64(first.Sub(arrival).Microseconds())/1000)
		positions = append(positions, float64(position))
		bounds = append(bounds, float64(bound))
		ratios = append(ratios, ratio)
		overtaken = append(overtaken, float64(later))
		inversions = append(inversions, float64(inverted))
		if ratio > worstRatio {
			worstRatio = ratio
			most, mostN := -1, 0
			for u, n := range ahead {
				if n > mostN {
					most, mostN = u, n
				}
			}
			worst = fmt.Sprintf("%s (%s) in %s: position %d, bound %d (%d workers + %d tenants active while it waited), wait %s; ahead: %d tenants, %d starts of jobs inserted after it, %d at a worse priority",
				tenant.id, tenant.tier, home, position, bound, workers, len(active), first.Sub(arrival).Round(time.Millisecond), len(ahead), later, inverted)
			if most >= 0 {
				worst += fmt.Sprintf(", %d of %q (%s, %d jobs)", mostN, shortID(t.plan.tenants[most].id), t.plan.tenants[most].tier, t.plan.tenants[most].jobs)
			}
		}
	}
	s := SmallTenants{Tenants: len(waits), Worst: worst}
	if len(waits) == 0 {
		return s
	}
	for _, x := range inversions {
		if x > 0 {
			s.InvertedTenants++
		}
	}
	for _, xs := range [][]float64{waits, positions, bounds, ratios, overtaken, inversions} {
		slices.Sort(xs)
	}
	s.Overtaken, s.Inverted = percentile(overtaken, 99), percentile(inversions, 99)
	s.WaitP50, s.WaitP99 = round(percentile(waits, 50), 2), round(percentile(waits, 99), 2)
	s.Position, s.Bound = percentile(positions, 99), percentile(bounds, 99)
	s.OverBound = round(percentile(ratios, 99), 3)
	return s
}

// medianSmall is the median of each figure over runs (the worst tenant of
// the run with the largest OverBound).
func medianSmall(runs []SmallTenants) SmallTenants {
	if len(runs) == 0 {
		return SmallTenants{}
	}
	pick := func(f func(SmallTenants) float64) float64 {
		xs := make([]float64, len(runs))
		for i, r := range runs {
			xs[i] = f(r)
		}
		return median(xs)
	}
	worst := slices.MaxFunc(runs, func(a, b SmallTenants) int { return cmp.Compare(a.OverBound, b.OverBound) })
	return SmallTenants{
		Tenants:         int(pick(func(s SmallTenants) float64 { return float64(s.Tenants) })),
		WaitP50:         round(pick(func(s SmallTenants) float64 { return s.WaitP50 }), 2),
		WaitP99:         round(pick(func(s SmallTenants) float64 { return s.WaitP99 }), 2),
		Position:        pick(func(s SmallTenants) float64 { return s.Position }),
		Bound:           pick(func(s SmallTenants) float64 { return s.Bound }),
		OverBound:       round(pick(func(s SmallTenants) float64 { return s.OverBound }), 3),
		Overtaken:       pick(func(s SmallTenants) float64 { return s.Overtaken }),
		Inverted:        pick(func(s SmallTenants) float64 { return s.Inverted }),
		InvertedTenants: int(pick(func(s SmallTenants) float64 { return float64(s.InvertedTenants) })),
		Worst:           worst.Worst,
	}
}

// trafficChecks are the end checks over every run.
func trafficChecks(res TrafficResult) []TrafficCheck {
	sum := func(f func(TrafficRun) int) int {
		n := 0
		for _, r := range res.Runs {
			n += f(r)
		}
		return n
	}
	check := func(name string, violations int, detail string) TrafficCheck {
		return TrafficCheck{Name: name, Violations: violations, Met: violations == 0, Detail: detail}
	}
	var checks []TrafficCheck
	checks = append(checks,
		check("nothing_lost", sum(func(r TrafficRun) int { return r.Lost }), "every job in river_job or dead_letter_jobs"),
		check("nothing_stranded", sum(func(r TrafficRun) int { return r.Stranded }),
			fmt.Sprintf("every job completed, cancelled or dead-lettered at the settle limit; %d of them held", sum(func(r TrafficRun) int { return r.StrandedHeld }))),
		check("ended_as_planned", sum(func(r TrafficRun) int { return r.Unexpected }),
			"completed, cancelled or dead-lettered as its class says (a job the kill cut short: completed or dead-lettered)"),
		check("cancelled_with_reason", sum(func(r TrafficRun) int { return r.CancelledNoReason }), "each cancelled job's last error: "+badArgsReason+" …"),
		check("ran_once", sum(func(r TrafficRun) int { return r.RanTwice }), "no job completed twice, no attempt started twice"),
	)
	unfetchable, detail := 0, []string{}
	for i, r := range res.Runs {
		if r.UnfetchableLeft != res.Unfetchable || r.UnfetchableAPI != res.Unfetchable || r.UnfetchableMetric != res.Unfetchable {
			unfetchable++
			detail = append(detail, fmt.Sprintf("run %d: %d left, API %d, metric %d of %d", i+1, r.UnfetchableLeft, r.UnfetchableAPI, r.UnfetchableMetric, res.Unfetchable))
		}
	}
	if len(detail) == 0 {
		detail = append(detail, fmt.Sprintf("%d rows kept, reported by GET /v1/queues and tierq_unfetchable_jobs in every run", res.Unfetchable))
	}
	checks = append(checks, check("unfetchable_kept_and_reported", unfetchable, strings.Join(detail, "; ")))
	samples := sum(func(r TrafficRun) int { return r.Samples })
	violations := sum(func(r TrafficRun) int { return r.SamplesOutside })
	if samples == 0 {
		violations++
	}
	checks = append(checks, check("api_and_metrics_between_sql_reads", violations,
		fmt.Sprintf("%d samples of held and oldest wait per queue (GET /v1/queues, /metrics)", samples)))
	over := 0
	if res.Small.Tenants == 0 || res.Small.OverBound > 1 {
		over = 1
	}
	checks = append(checks, check("small_tenants_within_bound", over,
		fmt.Sprintf("p99 of position / (capacity + active tenants) %g with fair share on (%g off)", res.Small.OverBound, res.SmallOff.OverBound)))
	recovered := 0
	if res.Faults.NewLeader == "" || res.Faults.Rescued != res.Faults.KilledRunning {
		recovered = 1
	}
	checks = append(checks, check("faults_recovered", recovered,
		fmt.Sprintf("%d of the killed worker's %d jobs ended; %s took over from %s after %gs",
			res.Faults.Rescued, res.Faults.KilledRunning, res.Faults.NewLeader, res.Faults.KilledScheduler, res.Faults.TakeoverSeconds)))
	return checks
}

// shortID is a tenant id for a message: at most 24 bytes of it.
func shortID(id string) string {
	if len(id) > 24 {
		return id[:24] + "…"
	}
	return id
}
