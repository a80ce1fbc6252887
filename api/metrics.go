package api

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tierq/tierq/dlq"
	"github.com/tierq/tierq/internal/db"
	"github.com/tierq/tierq/internal/queuestats"
	"github.com/tierq/tierq/metrics"
	"github.com/tierq/tierq/routing"
	"github.com/tierq/tierq/service"
)

// Metrics is the API's Prometheus registry: the tier fallbacks and
// escalations it performs itself, and gauges of the database (queue depth,
// held jobs and those held by a cap or a rate, oldest available and oldest waiting job, dead letters, whether
// a River leader is present)
// read by a cached collector, so that scrapes never load the database.
type Metrics struct {
	registry      *prometheus.Registry
	tierFallbacks *prometheus.CounterVec
	escalations   *metrics.Escalations
	own           []prometheus.Collector // tierq's, without the runtime collectors
	db            *dbCollector
}

// MetricsCacheFor is how long one read of the database serves scrapes.
const MetricsCacheFor = 5 * time.Second

// NewMetrics registers tierq's API metrics and a database collector on q,
// whose gauges list the queues of services (Config.Registry) first.
// services may be nil only for a Metrics that is never collected (one made
// to Describe the metrics).
func NewMetrics(q db.Querier, services *service.Registry, logger *slog.Logger) *Metrics {
	registry := metrics.NewRegistry()
	m := &Metrics{
		registry: registry,
		tierFallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tierq_tier_fallbacks_total",
			Help: "Inserts routed as the free tier (to <svc>_default) because the tier could not be determined, by reason.",
		}, []string{"reason"}),
		escalations: metrics.NewEscalations(registry),
	}
	// The reason label exists before the first fallback, so alerts on
	// rate() see a zero, not a missing series.
	m.tierFallbacks.WithLabelValues("lookup_error")
	m.db = newDBCollector(q, services, logger, MetricsCacheFor)
	m.own = []prometheus.Collector{m.tierFallbacks, m.db}
	m.registry.MustRegister(m.own...)
	m.own = append(m.own, m.escalations)
	return m
}

// Describe sends the descriptions of the tierq_* metrics the API exports
// (the ones dashboards and alerts may use), without touching the database.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.own {
		c.Describe(ch)
	}
}

// Handler serves the registry in Prometheus' text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

// TierFallback counts one insert routed as free because of reason.
func (m *Metrics) TierFallback(reason string) { m.tierFallbacks.WithLabelValues(reason).Inc() }

// Escalation counts one move of a job.
func (m *Metrics) Escalation(from, to, actorKind string) {
	m.escalations.Add(from, to, actorKind, 1)
}

// dbCollector reads queue depth, held jobs, the oldest available and
// oldest waiting job, dead-letter depth and whether a River leader held a
// lease recently from PostgreSQL at most once per cacheFor, with indexed
// queries (see queuestats.Summaries, whose oldest wait reads every waiting
// job of a queue through its indexes, dlq.PendingDepth,
// queuestats.RecentLeader, which reads river_leader's one row, and, for the
// console's overview alone, queuestats.LentNow, the priority queues'
// available and running jobs through River's index).
type dbCollector struct {
	q        db.Querier
	services *service.Registry
	logger   *slog.Logger
	cacheFor time.Duration

	mu   sync.Mutex
	last *dbSnapshot // nil before the first read
	// reading serializes the reads of the database: one at a time, and a
	// caller that waited for another's uses its result.
	reading sync.Mutex
	// refreshing is true while recent's read in the background runs.
	refreshing atomic.Bool

	depth, held, heldByCap, heldByRate, oldest, oldestWaiting, unfetchable, dlqDepth, leaderPresent, dbUp *prometheus.Desc
}

func newDBCollector(q db.Querier, services *service.Registry, logger *slog.Logger, cacheFor time.Duration) *dbCollector {
	return &dbCollector{
		q: q, services: services, logger: logger, cacheFor: cacheFor,
		depth: prometheus.NewDesc("tierq_queue_depth",
			"Jobs per queue and state (available, scheduled, retryable, pending, running).", []string{"queue", "state"}, nil),
		held: prometheus.NewDesc("tierq_held_jobs",
			"Jobs of the queue fair share holds back (state pending, metadata tierq:held_at; part of tierq_queue_depth's pending), due or not.", []string{"queue"}, nil),
		heldByCap: prometheus.NewDesc("tierq_jobs_held_by_cap",
			"Jobs of the queue held by their tenant's concurrency cap (metadata tierq:cap_held_at; part of tierq_held_jobs): they wait for one of the tenant's jobs to end, not for a worker.", []string{"queue"}, nil),
		heldByRate: prometheus.NewDesc("tierq_jobs_held_by_rate",
			"Jobs of the queue held by their tenant's rate limit (metadata tierq:rate_held_at; part of tierq_held_jobs): they wait for the tenant's next token, not for a worker.", []string{"queue"}, nil),
		oldest: prometheus.NewDesc("tierq_oldest_available_seconds",
			"How long the longest-waiting available job of the queue has been available, since its scheduled_at (0: none available and due). Held jobs are not counted: see tierq_oldest_waiting_seconds.", []string{"queue"}, nil),
		oldestWaiting: prometheus.NewDesc("tierq_oldest_waiting_seconds",
			"How long the longest-waiting job of the queue has waited, over available and held jobs whose scheduled_at has come, from each one's due time (0: none waiting).", []string{"queue"}, nil),
		unfetchable: prometheus.NewDesc("tierq_unfetchable_jobs",
			"Due available jobs of the queue of a kind no worker serving it fetches: no worker will take them (0 for a queue whose workers fetch every kind or that none serves).", []string{"queue"}, nil),
		dlqDepth: prometheus.NewDesc("tierq_dlq_depth",
			"Dead letters not yet replayed, per original queue.", []string{"queue"}, nil),
		leaderPresent: prometheus.NewDesc("tierq_leader_present",
			"1 when some River leader (a scheduler) held a lease within the last minute, read from river_leader; 0 otherwise. The same on every API replica: combine with max.", nil, nil),
		dbUp: prometheus.NewDesc("tierq_metrics_database_up",
			"1 when the last read of the database for metrics succeeded, 0 when it failed.", nil, nil),
	}
}

func (c *dbCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.depth
	ch <- c.held
	ch <- c.heldByCap
	ch <- c.heldByRate
	ch <- c.oldest
	ch <- c.oldestWaiting
	ch <- c.unfetchable
	ch <- c.dlqDepth
	ch <- c.leaderPresent
	ch <- c.dbUp
}

// dbSnapshot is one read of the database: what the gauges and the
// console's overview show, at most cacheFor old.
type dbSnapshot struct {
	readAt      time.Time
	err         error // the read failed: nothing else is set
	queues      []QueueSummary
	depth       dlq.Depth
	leader      string
	unfetchable map[string]int
	lent        map[string]queuestats.Lent // per priority queue holding lent jobs
}

// current is the last read, or a new one when it is cacheFor old: what
// /metrics' scrapes get, never older than cacheFor.
func (c *dbCollector) current() *dbSnapshot {
	if snap := c.lastRead(); snap != nil && time.Since(snap.readAt) < c.cacheFor {
		return snap
	}
	c.reading.Lock()
	defer c.reading.Unlock()
	if snap := c.lastRead(); snap != nil && time.Since(snap.readAt) < c.cacheFor {
		return snap // read by the caller we waited for
	}
	snap := c.read()
	snap.readAt = time.Now()
	c.mu.Lock()
	c.last = snap
	c.mu.Unlock()
	return snap
}

// recent is the last read when it succeeded and is less than maxAge old,
// at once, and then, when it is cacheFor old, a new read starts in the
// background for the next caller; otherwise it is current(). The console's
// overview uses it: the read counts and ranks every waiting job (about 0.8
// s beside 300,000 of them, tierctl bench console), and a page that says
// when its figures were read need not wait for that on each load.
func (c *dbCollector) recent(maxAge time.Duration) *dbSnapshot {
	snap := c.lastRead()
	if snap == nil || snap.err != nil || time.Since(snap.readAt) >= maxAge {
		return c.current()
	}
	if time.Since(snap.readAt) >= c.cacheFor && c.refreshing.CompareAndSwap(false, true) {
		go func() {
			defer c.refreshing.Store(false)
			c.current()
		}()
	}
	return snap
}

// lastRead is the last read, nil before the first.
func (c *dbCollector) lastRead() *dbSnapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

func (c *dbCollector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.metrics(c.current()) {
		ch <- m
	}
}

// read queries the database once.
func (c *dbCollector) read() *dbSnapshot {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var (
		snap dbSnapshot
		err  error
	)
	if snap.queues, err = queuestats.Summaries(ctx, c.q, c.services.Queues()); err != nil {
		c.logger.WarnContext(ctx, "metrics: read queues", slog.String("error", err.Error()))
		return &dbSnapshot{err: err}
	}
	if snap.depth, err = dlq.PendingDepth(ctx, c.q); err != nil {
		c.logger.WarnContext(ctx, "metrics: read dead-letter depth", slog.String("error", err.Error()))
		return &dbSnapshot{err: err}
	}
	if snap.leader, err = queuestats.RecentLeader(ctx, c.q); err != nil {
		c.logger.WarnContext(ctx, "metrics: read leader", slog.String("error", err.Error()))
		return &dbSnapshot{err: err}
	}
	if snap.unfetchable, err = queuestats.Unfetchable(ctx, c.q); err != nil {
		c.logger.WarnContext(ctx, "metrics: read unfetchable jobs", slog.String("error", err.Error()))
		return &dbSnapshot{err: err}
	}
	if snap.lent, err = queuestats.LentNow(ctx, c.q, c.services.QueuesOf(routing.Priority)); err != nil {
		c.logger.WarnContext(ctx, "metrics: read lent jobs", slog.String("error", err.Error()))
		return &dbSnapshot{err: err}
	}
	return &snap
}

// metrics are the gauges of snap; of a failed read only
// tierq_metrics_database_up 0 (no tierq_leader_present: unknown is not
// absent).
func (c *dbCollector) metrics(snap *dbSnapshot) []prometheus.Metric {
	if snap.err != nil {
		return []prometheus.Metric{prometheus.MustNewConstMetric(c.dbUp, prometheus.GaugeValue, 0)}
	}
	queues, depth, leader, unfetchable := snap.queues, snap.depth, snap.leader, snap.unfetchable
	var out []prometheus.Metric
	for _, q := range queues {
		for state, n := range q.Counts {
			out = append(out, prometheus.MustNewConstMetric(c.depth, prometheus.GaugeValue, float64(n), q.Name, state))
		}
		out = append(out, prometheus.MustNewConstMetric(c.held, prometheus.GaugeValue, float64(q.Held), q.Name))
		out = append(out, prometheus.MustNewConstMetric(c.heldByCap, prometheus.GaugeValue, float64(q.HeldByCap), q.Name))
		out = append(out, prometheus.MustNewConstMetric(c.heldByRate, prometheus.GaugeValue, float64(q.HeldByRate), q.Name))
		out = append(out, prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, q.OldestAvailableSeconds, q.Name))
		out = append(out, prometheus.MustNewConstMetric(c.oldestWaiting, prometheus.GaugeValue, q.OldestWaitingSeconds, q.Name))
		out = append(out, prometheus.MustNewConstMetric(c.unfetchable, prometheus.GaugeValue, float64(unfetchable[q.Name]), q.Name))
		out = append(out, prometheus.MustNewConstMetric(c.dlqDepth, prometheus.GaugeValue, float64(depth.ByQueue[q.Name]), q.Name))
	}
	for queue, n := range depth.ByQueue { // dead letters of queues no longer known
		if !slices.ContainsFunc(queues, func(q QueueSummary) bool { return q.Name == queue }) {
			out = append(out, prometheus.MustNewConstMetric(c.dlqDepth, prometheus.GaugeValue, float64(n), queue))
		}
	}
	present := 0.0
	if leader != "" {
		present = 1
	}
	return append(out,
		prometheus.MustNewConstMetric(c.leaderPresent, prometheus.GaugeValue, present),
		prometheus.MustNewConstMetric(c.dbUp, prometheus.GaugeValue, 1))
}
