// Package metrics holds the Prometheus metrics that River clients observe
// themselves (workers and the scheduler), and the /metrics endpoint those
// processes serve on METRICS_ADDR. The API's database gauges live in package
// api.
package metrics

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/tierq/tierq/internal/jobmetasql"
	"github.com/tierq/tierq/jobmeta"
)

// WaitBuckets are the job wait histogram's buckets, in seconds: from a
// priority queue's sub-second pickup to background work's hours.
var WaitBuckets = []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600}

// Jobs is a River hook that observes every job its client works:
// tierq_job_wait_seconds{tier,queue}, from when the job's attempt became due
// (its insert, or the end of a retry's backoff or a snooze; tierq's own moves
// between queues do not reset it, see jobmetasql.DueAt) to when a worker started it,
// and tierq_jobs_total{queue,kind,outcome} when it ends. Metadata or args of
// any shape are read without failing: the wait then counts from scheduled_at
// and the tier is "unknown".
type Jobs struct {
	river.HookDefaults

	wait  *prometheus.HistogramVec
	total *prometheus.CounterVec
	waits WaitObserver // nil: none
}

// WaitObserver is told every job's wait, as tierq_job_wait_seconds
// observes it (waitstats.Recorder records them for the operator console).
type WaitObserver interface {
	ObserveWait(queue, tier string, wait time.Duration)
}

var (
	_ rivertype.HookWorkBegin = (*Jobs)(nil)
	_ rivertype.HookWorkEnd   = (*Jobs)(nil)
)

// NewJobs registers the job metrics on reg.
func NewJobs(reg prometheus.Registerer) *Jobs {
	j := &Jobs{
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tierq_job_wait_seconds",
			Help:    "Time from when a job's attempt became due (inserted, or retried; escalation does not reset it) to when a worker started it, by tier and queue.",
			Buckets: WaitBuckets,
		}, []string{"tier", "queue"}),
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tierq_jobs_total",
			Help: "Jobs worked by this process, by queue, kind and outcome (completed, error, cancelled, snoozed).",
		}, []string{"queue", "kind", "outcome"}),
	}
	reg.MustRegister(j.wait, j.total)
	return j
}

// WithWaits has j tell w every job's wait too, and returns j. Call it
// before the client starts.
func (j *Jobs) WithWaits(w WaitObserver) *Jobs {
	j.waits = w
	return j
}

// WorkBegin observes the job's wait.
func (j *Jobs) WorkBegin(_ context.Context, job *rivertype.JobRow) error {
	due := jobmetasql.DueAt(job.ScheduledAt, job.CreatedAt, job.Tags, job.Metadata)
	wait, tier := max(time.Since(due), 0), tierLabel(job.Metadata, job.EncodedArgs)
	j.wait.WithLabelValues(tier, job.Queue).Observe(wait.Seconds())
	if j.waits != nil {
		j.waits.ObserveWait(job.Queue, tier, wait)
	}
	return nil
}

// WorkEnd counts the job's outcome and passes its error through unchanged.
func (j *Jobs) WorkEnd(_ context.Context, job *rivertype.JobRow, err error) error {
	j.total.WithLabelValues(job.Queue, job.Kind, Outcome(err)).Inc()
	return err
}

// Outcome names a work result: completed, cancelled (river.JobCancel),
// snoozed (river.JobSnooze) or error (retried, or discarded after the last
// attempt).
func Outcome(err error) string {
	var (
		cancel *river.JobCancelError
		snooze *river.JobSnoozeError
	)
	switch {
	case err == nil:
		return "completed"
	case errors.As(err, &cancel):
		return "cancelled"
	case errors.As(err, &snooze):
		return "snoozed"
	}
	return "error"
}

// tierLabel is the tier recorded in a job's metadata or args
// (jobmeta.TierOf), or "unknown": only the four tier names become label
// values.
func tierLabel(metadata, args []byte) string {
	if t, ok := jobmeta.TierOf(metadata, args); ok {
		return t.String()
	}
	return "unknown"
}

// Escalations is tierq_escalations_total{from,to,actor_kind}: jobs moved to
// another queue or priority by this process. The API counts operator and
// dedup moves, the scheduler its rule sweeps.
type Escalations struct {
	vec *prometheus.CounterVec
}

// NewEscalations registers tierq_escalations_total on reg.
func NewEscalations(reg prometheus.Registerer) *Escalations {
	e := &Escalations{vec: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tierq_escalations_total",
		Help: "Jobs this process moved to another queue or priority, by from and to queue and actor kind (operator, dedup, scheduler).",
	}, []string{"from", "to", "actor_kind"})}
	reg.MustRegister(e)
	return e
}

// Describe sends the counter's description.
func (e *Escalations) Describe(ch chan<- *prometheus.Desc) { e.vec.Describe(ch) }

// Collect sends the counter's samples.
func (e *Escalations) Collect(ch chan<- prometheus.Metric) { e.vec.Collect(ch) }

// Add counts n moves of jobs from one queue to another.
func (e *Escalations) Add(from, to, actorKind string, n int) {
	e.vec.WithLabelValues(from, to, actorKind).Add(float64(n))
}

// Scheduler holds the metrics of the scheduler deployment: what its sweeps
// changed and whether this replica leads.
type Scheduler struct {
	promotions  *prometheus.CounterVec
	skipped     *prometheus.CounterVec
	Escalations *Escalations
	leader      prometheus.Gauge
}

// Sweeps that report rows they skipped, and the reasons they skip one.
var (
	SkippingSweeps = []string{"aging", "escalation"}
	SkipReasons    = []string{"metadata_not_object", "scheduled_at_not_finite"}
)

// NewScheduler registers the scheduler's metrics on reg. Every queue in
// queues starts at zero promotions, so that rate() over a quiet queue is a
// zero rather than a missing series.
func NewScheduler(reg prometheus.Registerer, queues []string) *Scheduler {
	s := &Scheduler{
		promotions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tierq_aging_promotions_total",
			Help: "Available jobs whose priority the aging sweep raised, by queue.",
		}, []string{"queue"}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tierq_sweep_skipped_rows_total",
			Help: "Jobs a sweep found due but left alone because it cannot change them (reason: metadata_not_object, scheduled_at_not_finite), counted once per sweep that saw them, by sweep and reason.",
		}, []string{"sweep", "reason"}),
		Escalations: NewEscalations(reg),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tierq_leader",
			Help: "1 while this scheduler holds River's leadership (read from river_leader every second), else 0.",
		}),
	}
	for _, q := range queues {
		s.promotions.WithLabelValues(q)
	}
	for _, sweep := range SkippingSweeps {
		for _, reason := range SkipReasons {
			s.skipped.WithLabelValues(sweep, reason)
		}
	}
	reg.MustRegister(s.promotions, s.skipped, s.leader)
	return s
}

// Promoted counts n jobs of queue whose priority aging raised.
func (s *Scheduler) Promoted(queue string, n int) {
	s.promotions.WithLabelValues(queue).Add(float64(n))
}

// Skipped counts n jobs sweep left alone for reason.
func (s *Scheduler) Skipped(sweep, reason string, n int) {
	s.skipped.WithLabelValues(sweep, reason).Add(float64(n))
}

// SetLeader records whether this replica leads.
func (s *Scheduler) SetLeader(leads bool) {
	if leads {
		s.leader.Set(1)
	} else {
		s.leader.Set(0)
	}
}

// NewRegistry is a registry with the Go runtime and process collectors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Handler serves reg in Prometheus' text format (a process's /metrics).
func Handler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}

// FairShare holds a worker process's fair-share metrics (package
// fairshare), per queue, never per tenant (tenants are unbounded): what its
// passes held back and admitted, and what the last pass saw.
type FairShare struct {
	held, admitted, passes *prometheus.CounterVec
	lent, returned         *prometheus.CounterVec
	tenants, heldTenants   *prometheus.GaugeVec
	capacity               *prometheus.GaugeVec
	atCap                  *prometheus.GaugeVec
}

// NewFairShare registers the fair-share metrics on reg, every queue of
// queues at zero.
func NewFairShare(reg prometheus.Registerer, queues []string) *FairShare {
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"queue"})
	}
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{"queue"})
	}
	f := &FairShare{
		held:        counter("tierq_fair_share_held_total", "Available jobs this process's fair-share passes held back (to pending) because their tenant was over its window, by queue."),
		admitted:    counter("tierq_fair_share_admitted_total", "Held jobs this process's fair-share passes admitted (back to available) as their tenant's window had room, by queue."),
		passes:      counter("tierq_fair_share_passes_total", "Fair-share passes this process ran, by queue."),
		lent:        counter("tierq_lent_total", "Free jobs this process's lending passes moved into an idle priority queue, by that queue (only with <NAME>_LEND_IDLE_PRIORITY)."),
		returned:    counter("tierq_lent_returned_total", "Lent jobs this process's lending passes moved back unstarted because paid work arrived, by the priority queue."),
		tenants:     gauge("tierq_fair_share_active_tenants", "Tenants with available or held jobs in the queue, at this process's last pass."),
		heldTenants: gauge("tierq_fair_share_held_tenants", "Tenants with held jobs in the queue, at this process's last pass."),
		capacity:    gauge("tierq_fair_share_capacity", "The queue's workers across every live worker process (their heartbeats), at this process's last pass: the base of the tenants' windows."),
		atCap:       gauge("tierq_fair_share_tenants_at_cap", "Tenants with held jobs in the queue that are at their concurrency cap (<NAME>_<TIER>_TENANT_MAX_RUNNING or an override), at this process's last pass."),
	}
	for _, q := range queues {
		for _, c := range []*prometheus.CounterVec{f.held, f.admitted, f.passes, f.lent, f.returned} {
			c.WithLabelValues(q)
		}
		for _, g := range []*prometheus.GaugeVec{f.tenants, f.heldTenants, f.capacity, f.atCap} {
			g.WithLabelValues(q)
		}
	}
	reg.MustRegister(f.held, f.admitted, f.passes, f.lent, f.returned, f.tenants, f.heldTenants, f.capacity, f.atCap)
	return f
}

// Pass records one fair-share pass over queue (fairshare.Observer).
func (f *FairShare) Pass(queue string, held, admitted, tenants, heldTenants, capacity int) {
	f.passes.WithLabelValues(queue).Inc()
	f.held.WithLabelValues(queue).Add(float64(held))
	f.admitted.WithLabelValues(queue).Add(float64(admitted))
	f.tenants.WithLabelValues(queue).Set(float64(tenants))
	f.heldTenants.WithLabelValues(queue).Set(float64(heldTenants))
	f.capacity.WithLabelValues(queue).Set(float64(capacity))
}

// Caps records how many tenants with held jobs were at their concurrency
// cap at a pass over queue (fairshare.CapObserver).
func (f *FairShare) Caps(queue string, atCap int) {
	f.atCap.WithLabelValues(queue).Set(float64(atCap))
}

// Lend records one lending pass over the priority queue queue
// (fairshare.Observer).
func (f *FairShare) Lend(queue string, lent, returned int) {
	f.lent.WithLabelValues(queue).Add(float64(lent))
	f.returned.WithLabelValues(queue).Add(float64(returned))
}
