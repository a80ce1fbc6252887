package bench

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/tierq/tierq/loadtest"
	"github.com/tierq/tierq/routing"
	"github.com/tierq/tierq/service"
	"github.com/tierq/tierq/tiers"
)

// The traffic scenario's jobs, by what they do. Every job is the load-test
// kind (package loadtest), recorded, with MaxAttempts trafficMaxAttempts; a
// class is what its args ask of it.
const (
	classPlain        = "plain"         // sleeps and completes
	classRetryShort   = "retry_short"   // fails its first 1–2 attempts, retried after its own NextRetry (0.2–1 s), completes
	classRetryBackoff = "retry_backoff" // fails its first attempt, retried after River's backoff (1 s), completes
	classFailShort    = "fail_short"    // fails every attempt, NextRetry 0.3 s: discarded, dead-lettered
	classFailBackoff  = "fail_backoff"  // fails every attempt, River's backoff (1 s, 16 s): dead-lettered
	classSnooze       = "snooze"        // snoozes 1–2 times for 0.2–2 s (River writes it available ahead), completes
	classSnoozeLong   = "snooze_long"   // snoozes once for 6 s (River writes it scheduled), completes
	classBadArgs      = "bad_args"      // sleep_ms out of range: cancelled with the reason
)

// trafficClasses are the classes in the order the plan draws them, each with
// its share of the jobs (per mille); plain takes the rest.
var trafficClasses = []struct {
	name     string
	perMille int
}{
	{classBadArgs, 20},
	{classFailShort, 10},
	{classFailBackoff, 5},
	{classRetryShort, 40},
	{classRetryBackoff, 20},
	{classSnooze, 40},
	{classSnoozeLong, 5},
}

// trafficMaxAttempts is every traffic job's MaxAttempts.
const trafficMaxAttempts = 3

// badArgsReason is the start of the last error of a job cancelled for bad
// args (loadtest's cancelBadArgs).
const badArgsReason = "bad loadtest args"

// outcome is where a traffic job must end.
type outcome string

const (
	outcomeCompleted    outcome = "completed"
	outcomeCancelled    outcome = "cancelled"
	outcomeDeadLettered outcome = "dead_lettered"
)

// trafficTenant is one tenant of the traffic.
type trafficTenant struct {
	id      string
	rank    int // 1 for the largest Zipf tenant; 0 for the odd ids
	jobs    int
	tier    tiers.Tier
	service int // index into the plan's services: the tenant's home service
	// small tenants (1–3 jobs) arrive during the stream, all their jobs in
	// one insert at offset at; the others are queued at the start.
	small bool
	at    time.Duration
	// direct tenants are written with SQL, as a producer that bypasses
	// tierq would: their id breaks jobmeta.CheckTenant.
	direct bool
}

// trafficJob is one job of the traffic.
type trafficJob struct {
	tenant    int // index into the plan's tenants
	service   int
	tier      tiers.Tier
	scheduled bool
	class     string
	args      loadtest.Args
	want      outcome
	// prompt jobs plan no delay of 5 s or more (River's 16 s backoff, a
	// 6 s snooze): the throughput's makespan counts them.
	prompt bool
}

// queue is the queue the job is routed to.
func (j trafficJob) queue(services []*service.Service) string {
	return routing.SelectQueue(services[j.service].BaseQueue(), j.tier, j.scheduled)
}

// level is the River priority the job starts at.
func (j trafficJob) level() int { return routing.StartingPriority(j.tier) }

// trafficPlan is the traffic of one run: the same for every run of a
// scenario (a fixed seed).
type trafficPlan struct {
	tenants []trafficTenant
	jobs    []trafficJob
	// byTenant are each tenant's jobs, indexes into jobs.
	byTenant [][]int
	// unfetchable are the queues of the rows of a kind no worker runs, one
	// row each.
	unfetchable []string
}

// trafficShape is what a plan is drawn from.
type trafficShape struct {
	tenants  int           // Zipf tenants
	head     int           // the largest tenant's jobs
	exponent float64       // Zipf exponent: tenant r has head / r^exponent jobs, at least 1
	stream   time.Duration // the small tenants arrive over this
	seed     uint64
	// noLongDelays leaves out the classes that wait 5 s or more (River's
	// 16 s backoff, the 6 s snooze): the tests' sizes.
	noLongDelays bool
}

// Odd tenant ids beside the Zipf tenants.
const (
	// emptyTenant is no tenant: jobs inserted without one.
	emptyTenant = ""
	// longTenantBytes is the over-long tenant's id, written with SQL
	// (jobmeta.MaxTenantBytes is 200).
	longTenantBytes = 3_200
)

// tenantOf200 is a tenant id of exactly jobmeta.MaxTenantBytes bytes, the
// longest producers accept.
func tenantOf200() string { return "t200-" + strings.Repeat("x", 195) }

// longTenant is the over-long tenant's id.
func longTenant() string { return "long-" + strings.Repeat("y", longTenantBytes-5) }

// zipfJobs is the number of jobs of the Zipf tenant of rank r.
func zipfJobs(head int, exponent float64, r int) int {
	return max(1, int(math.Round(float64(head)/math.Pow(float64(r), exponent))))
}

// newTrafficPlan draws the traffic over services (at least one): the Zipf
// tenants (the four largest given a tier and service each, so that the
// largest flood is an enterprise tenant's in the first service's priority
// queue and the others spread; the rest drawn), the odd ids (no tenant,
// 200 bytes, and an over-long one written directly), every job's class,
// sleep and whether it is background work, the small tenants' arrivals,
// and a few unfetchable rows (one per service, two in the first).
func newTrafficPlan(shape trafficShape, services []*service.Service) trafficPlan {
	r := rand.New(rand.NewPCG(shape.seed, 0x7e41f1c))
	var p trafficPlan
	n := len(services)
	drawTier := func() tiers.Tier {
		switch x := r.IntN(100); {
		case x < 40:
			return tiers.Free
		case x < 70:
			return tiers.Pro
		case x < 85:
			return tiers.ProPlus
		default:
			return tiers.Enterprise
		}
	}
	drawService := func() int {
		// Half the traffic is the first service's, the rest shared.
		if n == 1 || r.IntN(2) == 0 {
			return 0
		}
		return 1 + r.IntN(n-1)
	}
	fixed := []struct {
		tier    tiers.Tier
		service int
	}{{tiers.Enterprise, 0}, {tiers.Pro, 1 % n}, {tiers.ProPlus, 2 % n}, {tiers.Free, 0}}
	for rank := 1; rank <= shape.tenants; rank++ {
		t := trafficTenant{id: fmt.Sprintf("t%04d", rank), rank: rank, jobs: zipfJobs(shape.head, shape.exponent, rank)}
		if rank <= len(fixed) {
			t.tier, t.service = fixed[rank-1].tier, fixed[rank-1].service
		} else {
			t.tier, t.service = drawTier(), drawService()
		}
		t.small = t.jobs <= 3
		p.tenants = append(p.tenants, t)
	}
	odd := max(3, shape.head/250)
	p.tenants = append(p.tenants,
		trafficTenant{id: emptyTenant, jobs: max(3, shape.head/100), tier: tiers.Free, service: 0},
		trafficTenant{id: tenantOf200(), jobs: odd, tier: tiers.ProPlus, service: 1 % n},
		trafficTenant{id: longTenant(), jobs: odd, tier: tiers.Enterprise, service: 0, direct: true},
	)
	for i := range p.tenants {
		if p.tenants[i].small {
			p.tenants[i].at = time.Duration(r.Int64N(int64(shape.stream) + 1))
		}
	}

	p.byTenant = make([][]int, len(p.tenants))
	for ti, t := range p.tenants {
		for range t.jobs {
			j := trafficJob{tenant: ti, service: t.service, tier: t.tier, scheduled: r.IntN(100) < 3}
			// One job in ten of a tenant with several services' work goes
			// to another service.
			if n > 1 && r.IntN(10) == 0 {
				j.service = r.IntN(n)
			}
			j.class = classPlain
			x := r.IntN(1000)
			for _, c := range trafficClasses {
				if shape.noLongDelays && (c.name == classFailBackoff || c.name == classSnoozeLong) {
					continue
				}
				if x < c.perMille {
					j.class = c.name
					break
				}
				x -= c.perMille
			}
			j.args, j.want, j.prompt = trafficArgs(r, j.class)
			p.byTenant[ti] = append(p.byTenant[ti], len(p.jobs))
			p.jobs = append(p.jobs, j)
		}
	}
	// In the first service's fair-share queues, where the flood is: such a
	// row must hold no tenant's places and, in the priority queue, must not
	// read as paid work waiting (which would stop lending); and in the
	// others' background queues. The other services' priority and default
	// queues keep none, so that their oldest wait is their tenants'.
	p.unfetchable = append(p.unfetchable, services[0].Queue(routing.Priority), services[0].Queue(routing.Default))
	for _, svc := range services[1:] {
		p.unfetchable = append(p.unfetchable, svc.Queue(routing.Scheduled))
	}
	return p
}

// trafficArgs are the args of a job of class, what it must end as, and
// whether it is prompt.
func trafficArgs(r *rand.Rand, class string) (loadtest.Args, outcome, bool) {
	a := loadtest.Args{SleepMS: trafficSleep(r), Record: true}
	switch class {
	case classRetryShort:
		a.FailAttempts, a.RetryMS = 1+r.IntN(2), 200+r.IntN(801)
	case classRetryBackoff:
		a.FailAttempts = 1
	case classFailShort:
		a.FailAttempts, a.RetryMS = trafficMaxAttempts, 300
		return a, outcomeDeadLettered, true
	case classFailBackoff:
		a.FailAttempts = trafficMaxAttempts
		return a, outcomeDeadLettered, false
	case classSnooze:
		a.Snoozes, a.SnoozeMS = 1+r.IntN(2), 200+r.IntN(1801)
	case classSnoozeLong:
		a.Snoozes, a.SnoozeMS = 1, 6_000
		return a, outcomeCompleted, false
	case classBadArgs:
		a.SleepMS = -1
		return a, outcomeCancelled, true
	}
	return a, outcomeCompleted, true
}

// trafficSleep is how long a job works: mostly short, some longer, a few
// long (ms).
func trafficSleep(r *rand.Rand) int {
	switch x := r.IntN(100); {
	case x < 70:
		return 5 + r.IntN(16)
	case x < 95:
		return 20 + r.IntN(61)
	default:
		return 100 + r.IntN(301)
	}
}

// mix counts the plan's jobs per class.
func (p trafficPlan) mix() map[string]int {
	m := map[string]int{}
	for _, j := range p.jobs {
		m[j.class]++
	}
	return m
}

// backlog are the tenants queued at the start (not small), in rank order
// with the odd ids last; stream the small ones in order of arrival.
func (p trafficPlan) split() (backlog, stream []int) {
	for i, t := range p.tenants {
		if t.small {
			stream = append(stream, i)
		} else {
			backlog = append(backlog, i)
		}
	}
	slices.SortStableFunc(stream, func(a, b int) int { return cmp.Compare(p.tenants[a].at, p.tenants[b].at) })
	return backlog, stream
}
