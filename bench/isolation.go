package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"golang.org/x/sync/errgroup"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/internal/riverschema"
	"github.com/tierq/tierq/internal/seed"
	"github.com/tierq/tierq/loadtest"
	"github.com/tierq/tierq/producer"
	"github.com/tierq/tierq/routing"
	"github.com/tierq/tierq/service"
	"github.com/tierq/tierq/tiers"
)

// IsolationResult is the isolation scenario: insert→start latency of a
// steady stream of enterprise jobs (one per 50ms into the priority queue of
// the service under test), without and with a free-tier backlog in its
// default queue being worked, on tierq's worker of that service; and the
// same stream on a River client with River's default fetch settings.
// Medians over runs.
type IsolationResult struct {
	P50Ms     float64 `json:"p50_ms"`
	P95Ms     float64 `json:"p95_ms"`
	P99Ms     float64 `json:"p99_ms"`
	P50IdleMs float64 `json:"p50_idle_ms"`
	P95IdleMs float64 `json:"p95_idle_ms"`
	P99IdleMs float64 `json:"p99_idle_ms"`
	// Ratio is P99Ms / P99IdleMs: what the backlog costs paying work, and
	// GapMs their difference (P99Ms − P99IdleMs), for p99s so small that
	// noise moves their ratio. RatioP95 is P95Ms / P95IdleMs, the ratio a
	// quick run is judged by.
	Ratio    float64 `json:"ratio"`
	GapMs    float64 `json:"gap_ms"`
	RatioP95 float64 `json:"ratio_p95"`
	// RiverDefaults* are the same stream (with the backlog) on River's
	// default fetch settings, producer and worker.
	RiverDefaultsP50Ms float64 `json:"river_defaults_p50_ms"`
	RiverDefaultsP99Ms float64 `json:"river_defaults_p99_ms"`
	// RiverProducer* are the same stream (with the backlog) on tierq's
	// worker, inserted by a producer client with River's default
	// configuration instead of producer.ClientConfig: what a producer that
	// keeps River's 100ms insert-notification limit gets.
	RiverProducerP50Ms float64 `json:"river_producer_p50_ms"`
	RiverProducerP99Ms float64 `json:"river_producer_p99_ms"`
	// VsRiverDefaults is P99Ms / RiverDefaultsP99Ms.
	VsRiverDefaults float64 `json:"vs_river_defaults"`
	// Jobs is the stream's length per phase; Backlog the free jobs queued
	// at the start of a backlog phase, BacklogWorked how many of them the
	// worker took during it (median), BacklogLeft how many were still
	// queued at its end, available or held back by fair share (never 0:
	// the backlog lasted the whole stream).
	Jobs          int     `json:"jobs"`
	Backlog       int     `json:"backlog"`
	BacklogWorked float64 `json:"backlog_worked"`
	BacklogLeft   float64 `json:"backlog_left"`
	Runs          int     `json:"runs"`
	// P99HeavyMs is the stream's p99 while the backlog is drained as hard
	// as the machine allows (50 free workers fetching every 10ms, about
	// HeavyBacklogWorked jobs during the phase): isolation when the
	// database itself is busy. HeavyRatio is P99HeavyMs / P99IdleMs.
	P99HeavyMs         float64 `json:"p99_heavy_ms"`
	HeavyRatio         float64 `json:"heavy_ratio"`
	HeavyBacklogWorked float64 `json:"heavy_backlog_worked"`
	// Floor* are the same stream's latency without River (floorStream): a
	// row inserted and notified in one transaction, a listener, one UPDATE
	// claiming it. It is what this machine and database charge any
	// LISTEN/NOTIFY-driven queue; tierq's p50s and p99s are read against it.
	FloorP50Ms float64 `json:"floor_p50_ms"`
	FloorP95Ms float64 `json:"floor_p95_ms"`
	FloorP99Ms float64 `json:"floor_p99_ms"`
	// FloorConcurrent* are the floor of the concurrent phase:
	// ConcurrentProducers producers at once, the same chain.
	FloorConcurrentP50Ms float64 `json:"floor_concurrent_p50_ms"`
	FloorConcurrentP95Ms float64 `json:"floor_concurrent_p95_ms"`
	FloorConcurrentP99Ms float64 `json:"floor_concurrent_p99_ms"`
	// Unflushed* are diagnostics, not targets: the floor and the idle
	// phase again, their producer committing without waiting for the WAL
	// flush (synchronous_commit off on the producer's connections only;
	// nothing tierq deploys commits that way). Their difference to the
	// flushed phases is the disk's share of the latency, commit included.
	FloorUnflushedP50Ms float64 `json:"floor_unflushed_p50_ms"`
	FloorUnflushedP99Ms float64 `json:"floor_unflushed_p99_ms"`
	IdleUnflushedP50Ms  float64 `json:"idle_unflushed_p50_ms"`
	IdleUnflushedP95Ms  float64 `json:"idle_unflushed_p95_ms"`
	IdleUnflushedP99Ms  float64 `json:"idle_unflushed_p99_ms"`
	// IdleNoAdmitter* are the idle phase again on tierq's worker without
	// fair share's admitter beside its River client (its passes, looks and
	// heartbeats): a diagnostic of what the admitter costs paid pickup.
	IdleNoAdmitterP50Ms float64 `json:"idle_no_admitter_p50_ms"`
	IdleNoAdmitterP95Ms float64 `json:"idle_no_admitter_p95_ms"`
	IdleNoAdmitterP99Ms float64 `json:"idle_no_admitter_p99_ms"`
	// Concurrent* are the stream from ConcurrentProducers producers at once
	// (each one job per streamInterval, sharing one producer client as an
	// API replica's request handlers do) on tierq's worker with the
	// backlog: where a client's insert-notification limit and the worker's
	// fetch cooldown meet more than one insert per cooldown.
	ConcurrentP50Ms float64 `json:"concurrent_p50_ms"`
	ConcurrentP95Ms float64 `json:"concurrent_p95_ms"`
	ConcurrentP99Ms float64 `json:"concurrent_p99_ms"`
	// ConcurrentP999Ms and ConcurrentMaxMs are its 99.9th percentile and
	// its slowest job (medians over runs): a job whose insert notification
	// went missing waits for a later insert's or for the queue's poll, which
	// the tail shows before p99 does.
	ConcurrentP999Ms float64 `json:"concurrent_p999_ms"`
	ConcurrentMaxMs  float64 `json:"concurrent_max_ms"`
	// ConcurrentRiverInsert* are the concurrent phase again, its jobs
	// inserted with River's Client.Insert on producer.ClientConfig instead
	// of producer.Insert: River's insert notification alone, rate-limited
	// per client and queue, without producer.NotifyInsert's for the inserts
	// it silences. A diagnostic, side by side with the concurrent phase.
	ConcurrentRiverInsertP50Ms  float64 `json:"concurrent_river_insert_p50_ms"`
	ConcurrentRiverInsertP99Ms  float64 `json:"concurrent_river_insert_p99_ms"`
	ConcurrentRiverInsertP999Ms float64 `json:"concurrent_river_insert_p999_ms"`
	ConcurrentRiverInsertMaxMs  float64 `json:"concurrent_river_insert_max_ms"`
	// Saturated* are paid jobs of SaturatedJobMs each from the same
	// producers, more than the priority queue's workers can do
	// (SaturatedArrivalPerS against SaturatedCapacityPerS, for a third of
	// the stream's duration): the latency is the queue growing, and is
	// stated, not a target.
	SaturatedP50Ms        float64 `json:"saturated_p50_ms"`
	SaturatedP99Ms        float64 `json:"saturated_p99_ms"`
	SaturatedJobMs        int     `json:"saturated_job_ms"`
	SaturatedArrivalPerS  float64 `json:"saturated_arrival_per_s"`
	SaturatedCapacityPerS float64 `json:"saturated_capacity_per_s"`
	// IdleQueriesPerS is the statements per second an idle worker of the
	// service under test (tierq's defaults, nothing queued) sends to
	// PostgreSQL, counted on its connections, and IdleFetchesPerS the
	// fetches (River's JobGetAvailable) among them;
	// RiverDefaultsIdleQueriesPerS the statements for a River client with
	// River's defaults and the same queues.
	IdleQueriesPerS              float64 `json:"idle_queries_per_s"`
	IdleFetchesPerS              float64 `json:"idle_fetches_per_s"`
	RiverDefaultsIdleQueriesPerS float64 `json:"river_defaults_idle_queries_per_s"`
	// BusyFetchesPerS is the fetches per second of the worker while its
	// priority queue is saturated with no-op jobs (more queued than it can
	// work), BusyJobsPerS the jobs it worked per second meanwhile, and
	// BusyJobsPerFetch their ratio: what a busy paid queue costs the
	// database in fetch statements.
	BusyFetchesPerS  float64 `json:"busy_fetches_per_s"`
	BusyJobsPerS     float64 `json:"busy_jobs_per_s"`
	BusyJobsPerFetch float64 `json:"busy_jobs_per_fetch"`
	// Splits are each River phase's LatencySplit, by phase name: where
	// its latency and its tail are spent, before or after the commit.
	Splits map[string]LatencySplit `json:"splits"`
	// Quick is true for a --quick run: its phases are too short for a
	// stable p99 (160 jobs: the 99th percentile is the second slowest
	// job), so its targets are read at p95 and its p99s are shown for what
	// they are.
	Quick bool `json:"quick"`
	// Samples are the latencies (ms) of the last run, per phase, for plots.
	Samples map[string][]float64 `json:"-"`
}

// streamInterval is the gap between two jobs of the measured stream.
const streamInterval = 50 * time.Millisecond

// ConcurrentProducers is how many producers insert at once in the
// concurrent and saturated phases, each one job per streamInterval.
const ConcurrentProducers = 16

// saturatedJobMs is how long a job of the saturated phase works: with
// ConcurrentProducers producers at one job per streamInterval each (320
// jobs/s) and the priority queue's 5 workers by default (250 jobs/s at
// 20ms), paid work arrives faster than it can be done.
const saturatedJobMs = 20

// isolationPhase is one measured stream.
type isolationPhase struct {
	name      string
	backlog   bool
	unflushed bool          // the producer commits without waiting for the WAL flush
	producers int           // concurrent producers; 0 means 1
	raw       bool          // the producer inserts with River's Client.Insert, not producer.Insert
	args      loadtest.Args // the stream's jobs
	share     int           // the phase streams for duration/share; 0 means 1
	producer  func(schema string) *river.Config
	worker    func(pool *pgxpool.Pool) (*deployment, error)
}

// Isolation runs the isolation scenario.
func Isolation(ctx context.Context, opts Options) (IsolationResult, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return IsolationResult{}, err
	}
	e, err := newEnv(ctx, opts)
	if err != nil {
		return IsolationResult{}, err
	}
	defer e.close()

	duration, backlog := opts.sizes().stream, opts.sizes().backlog
	res := IsolationResult{
		Jobs: int(duration / streamInterval), Backlog: backlog, Runs: opts.runs(), Samples: map[string][]float64{},
		Quick: opts.Quick, SaturatedJobMs: saturatedJobMs,
	}

	tierq := func(pool *pgxpool.Pool) (*deployment, error) {
		cfg, err := e.workerConfig(opts.WorkerEnv...)
		if err != nil {
			return nil, err
		}
		return tierqDeployment(cfg, pool, opts)
	}
	// The same worker without fair share's admitter beside its client (the
	// hook stays, idle): a diagnostic of what the admitter costs pickup.
	tierqNoAdmitter := func(pool *pgxpool.Pool) (*deployment, error) {
		d, err := tierq(pool)
		if err != nil {
			return nil, err
		}
		d.admitter = nil
		return d, nil
	}
	// The same worker, but the free queue drained as hard as the machine
	// allows: 50 workers fetching every 10ms.
	tierqHeavy := func(pool *pgxpool.Pool) (*deployment, error) {
		cfg, err := e.workerConfig(append(slices.Clone(opts.WorkerEnv),
			opts.Service.EnvPrefix()+"QUEUE_DEFAULT_WORKERS=50", "QUEUE_DEFAULT_FETCH_COOLDOWN=10ms")...)
		if err != nil {
			return nil, err
		}
		return tierqDeployment(cfg, pool, opts)
	}
	// River's defaults: a bare client, nothing of tierq's beside it.
	riverWorker := func(pool *pgxpool.Pool) (*deployment, error) {
		cfg, err := e.workerConfig(opts.WorkerEnv...)
		if err != nil {
			return nil, err
		}
		rc, err := bareRiver(e.Name, cfg, false, opts)
		if err != nil {
			return nil, err
		}
		return riverDeployment(pool, rc)
	}
	tierqProducer := func(schema string) *river.Config { return producer.ClientConfig(schema, opts.logger()) }
	riverProducer := func(schema string) *river.Config { return &river.Config{Schema: schema, Logger: opts.logger()} }
	phases := []isolationPhase{
		{name: "tierq idle", producer: tierqProducer, worker: tierq},
		{name: "tierq idle without WAL flush", unflushed: true, producer: tierqProducer, worker: tierq},
		{name: "tierq idle without the admitter", producer: tierqProducer, worker: tierqNoAdmitter},
		{name: "tierq backlog", backlog: true, producer: tierqProducer, worker: tierq},
		{name: "river defaults backlog", backlog: true, raw: true, producer: riverProducer, worker: riverWorker},
		{name: "tierq with a river-default producer", backlog: true, raw: true, producer: riverProducer, worker: tierq},
		{name: "tierq heavy backlog", backlog: true, producer: tierqProducer, worker: tierqHeavy},
		{name: "tierq concurrent producers", backlog: true, producers: ConcurrentProducers, producer: tierqProducer, worker: tierq},
		{name: "tierq concurrent producers via Client.Insert", backlog: true, raw: true, producers: ConcurrentProducers, producer: tierqProducer, worker: tierq},
		{name: "tierq paid saturated", producers: ConcurrentProducers, args: loadtest.Args{SleepMS: saturatedJobMs}, share: 3,
			producer: tierqProducer, worker: tierq},
	}

	p99 := map[string][]float64{}
	p95 := map[string][]float64{}
	p50 := map[string][]float64{}
	p999 := map[string][]float64{}
	slowest := map[string][]float64{}
	splits := map[string][]LatencySplit{}
	var worked, left, heavyWorked []float64
	for run := range res.Runs {
		for _, floor := range []struct {
			name      string
			flush     bool
			producers int
		}{{"floor (no River)", true, 1}, {"floor without WAL flush", false, 1}, {"floor concurrent producers", true, ConcurrentProducers}} {
			opts.progress().Stage(fmt.Sprintf("isolation run %d/%d: %s", run+1, res.Runs, floor.name), res.Jobs*floor.producers)
			lat, err := e.floorStream(ctx, duration, floor.flush, floor.producers)
			if err != nil {
				return res, fmt.Errorf("isolation %s: %w", floor.name, err)
			}
			slices.Sort(lat)
			p50[floor.name] = append(p50[floor.name], percentile(lat, 50))
			p95[floor.name] = append(p95[floor.name], percentile(lat, 95))
			p99[floor.name] = append(p99[floor.name], percentile(lat, 99))
			res.Samples[floor.name] = lat
		}
		for _, ph := range phases {
			opts.progress().Stage(fmt.Sprintf("isolation run %d/%d: %s", run+1, res.Runs, ph.name), res.Jobs*max(ph.producers, 1)/max(ph.share, 1))
			n := 0
			if ph.backlog {
				n = backlog
			}
			lat, split, done, remaining, err := e.stream(ctx, ph, n, duration/time.Duration(max(ph.share, 1)))
			if err != nil {
				return res, fmt.Errorf("isolation %s: %w", ph.name, err)
			}
			slices.Sort(lat)
			p50[ph.name] = append(p50[ph.name], percentile(lat, 50))
			p95[ph.name] = append(p95[ph.name], percentile(lat, 95))
			p99[ph.name] = append(p99[ph.name], percentile(lat, 99))
			res.Samples[ph.name] = lat
			p999[ph.name] = append(p999[ph.name], percentile(lat, 99.9))
			slowest[ph.name] = append(slowest[ph.name], lat[len(lat)-1])
			splits[ph.name] = append(splits[ph.name], split)
			switch ph.name {
			case "tierq backlog":
				worked = append(worked, float64(done))
				left = append(left, float64(remaining))
			case "tierq heavy backlog":
				heavyWorked = append(heavyWorked, float64(done))
			}
		}
	}
	res.P50Ms, res.P95Ms, res.P99Ms = round(median(p50["tierq backlog"]), 2), round(median(p95["tierq backlog"]), 2), round(median(p99["tierq backlog"]), 2)
	res.P50IdleMs, res.P95IdleMs, res.P99IdleMs = round(median(p50["tierq idle"]), 2), round(median(p95["tierq idle"]), 2), round(median(p99["tierq idle"]), 2)
	res.RiverProducerP50Ms = round(median(p50["tierq with a river-default producer"]), 2)
	res.RiverProducerP99Ms = round(median(p99["tierq with a river-default producer"]), 2)
	res.RiverDefaultsP50Ms, res.RiverDefaultsP99Ms = round(median(p50["river defaults backlog"]), 2), round(median(p99["river defaults backlog"]), 2)
	res.Ratio = round(res.P99Ms/res.P99IdleMs, 3)
	res.GapMs = round(res.P99Ms-res.P99IdleMs, 2)
	res.RatioP95 = round(res.P95Ms/res.P95IdleMs, 3)
	res.VsRiverDefaults = round(res.P99Ms/res.RiverDefaultsP99Ms, 3)
	res.BacklogWorked, res.BacklogLeft = median(worked), median(left)
	res.P99HeavyMs = round(median(p99["tierq heavy backlog"]), 2)
	res.HeavyRatio = round(res.P99HeavyMs/res.P99IdleMs, 3)
	res.HeavyBacklogWorked = median(heavyWorked)
	res.FloorP50Ms, res.FloorP95Ms, res.FloorP99Ms = round(median(p50["floor (no River)"]), 2), round(median(p95["floor (no River)"]), 2), round(median(p99["floor (no River)"]), 2)
	res.FloorConcurrentP50Ms = round(median(p50["floor concurrent producers"]), 2)
	res.FloorConcurrentP95Ms = round(median(p95["floor concurrent producers"]), 2)
	res.FloorConcurrentP99Ms = round(median(p99["floor concurrent producers"]), 2)
	res.FloorUnflushedP50Ms, res.FloorUnflushedP99Ms = round(median(p50["floor without WAL flush"]), 2), round(median(p99["floor without WAL flush"]), 2)
	res.IdleUnflushedP50Ms = round(median(p50["tierq idle without WAL flush"]), 2)
	res.IdleUnflushedP95Ms = round(median(p95["tierq idle without WAL flush"]), 2)
	res.IdleUnflushedP99Ms = round(median(p99["tierq idle without WAL flush"]), 2)
	res.IdleNoAdmitterP50Ms = round(median(p50["tierq idle without the admitter"]), 2)
	res.IdleNoAdmitterP95Ms = round(median(p95["tierq idle without the admitter"]), 2)
	res.IdleNoAdmitterP99Ms = round(median(p99["tierq idle without the admitter"]), 2)
	res.ConcurrentP50Ms = round(median(p50["tierq concurrent producers"]), 2)
	res.ConcurrentP95Ms = round(median(p95["tierq concurrent producers"]), 2)
	res.ConcurrentP99Ms = round(median(p99["tierq concurrent producers"]), 2)
	res.ConcurrentP999Ms = round(median(p999["tierq concurrent producers"]), 2)
	res.ConcurrentMaxMs = round(median(slowest["tierq concurrent producers"]), 2)
	const riverInsert = "tierq concurrent producers via Client.Insert"
	res.ConcurrentRiverInsertP50Ms = round(median(p50[riverInsert]), 2)
	res.ConcurrentRiverInsertP99Ms = round(median(p99[riverInsert]), 2)
	res.ConcurrentRiverInsertP999Ms = round(median(p999[riverInsert]), 2)
	res.ConcurrentRiverInsertMaxMs = round(median(slowest[riverInsert]), 2)
	res.Splits = map[string]LatencySplit{}
	for name, runs := range splits {
		of := func(f func(LatencySplit) float64) float64 {
			v := make([]float64, len(runs))
			for i, r := range runs {
				v[i] = f(r)
			}
			return round(median(v), 2)
		}
		res.Splits[name] = LatencySplit{
			CommitP99Ms:  of(func(s LatencySplit) float64 { return s.CommitP99Ms }),
			WakeP99Ms:    of(func(s LatencySplit) float64 { return s.WakeP99Ms }),
			TailCommitMs: of(func(s LatencySplit) float64 { return s.TailCommitMs }),
			TailWakeMs:   of(func(s LatencySplit) float64 { return s.TailWakeMs }),
		}
	}
	res.SaturatedP50Ms = round(median(p50["tierq paid saturated"]), 2)
	res.SaturatedP99Ms = round(median(p99["tierq paid saturated"]), 2)
	res.SaturatedArrivalPerS = float64(ConcurrentProducers) * float64(time.Second/streamInterval)
	cfg, err := e.workerConfig(opts.WorkerEnv...)
	if err != nil {
		return res, err
	}
	res.SaturatedCapacityPerS = round(float64(cfg.Workers.Of(routing.Priority))*1000/saturatedJobMs, 1)

	idleFor := opts.sizes().idle
	idle, riverDefaults := phases[0], phases[slices.IndexFunc(phases, func(ph isolationPhase) bool { return ph.name == "river defaults backlog" })]
	for _, ph := range []isolationPhase{idle, riverDefaults} {
		opts.progress().Stage(fmt.Sprintf("isolation: idle %s for %s", ph.name, idleFor), 0)
		count, err := e.countQueries(ctx, ph, 0, idleFor)
		if err != nil {
			return res, fmt.Errorf("isolation idle %s: %w", ph.name, err)
		}
		if ph.name == idle.name {
			res.IdleQueriesPerS, res.IdleFetchesPerS = round(count.queriesPerS, 2), round(count.fetchesPerS, 2)
		} else {
			res.RiverDefaultsIdleQueriesPerS = round(count.queriesPerS, 2)
		}
	}
	opts.progress().Stage(fmt.Sprintf("isolation: busy priority queue for %s", idleFor), 0)
	count, err := e.countQueries(ctx, idle, busyJobs(opts), idleFor)
	if err != nil {
		return res, fmt.Errorf("isolation busy: %w", err)
	}
	res.BusyFetchesPerS, res.BusyJobsPerS = round(count.fetchesPerS, 1), round(count.jobsPerS, 1)
	if count.fetchesPerS > 0 {
		res.BusyJobsPerFetch = round(count.jobsPerS/count.fetchesPerS, 2)
	}
	return res, nil
}

// busyJobs is how many no-op jobs the busy count queues in the priority
// queue: more than the worker can work while it counts.
func busyJobs(opts Options) int {
	if opts.tiny {
		return 5_000
	}
	return 200_000
}

// queryCounter counts the statements sent on a pool's connections, alone
// or in batches (fair share's pass is a batch), and the fetches (River's
// JobGetAvailable) among them.
type queryCounter struct{ n, fetches atomic.Int64 }

var _ pgx.BatchTracer = (*queryCounter)(nil)

func (c *queryCounter) count(sql string) {
	c.n.Add(1)
	if isFetch(sql) {
		c.fetches.Add(1)
	}
}

func (c *queryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	c.count(data.SQL)
	return ctx
}

func (c *queryCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *queryCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (c *queryCounter) TraceBatchQuery(_ context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	c.count(data.SQL)
}

func (c *queryCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// queryCount is what countQueries counted.
type queryCount struct {
	queriesPerS, fetchesPerS, jobsPerS float64
}

// countQueries starts the phase's worker, with busy no-op enterprise jobs
// queued in the priority queue of the service under test (0: nothing
// queued), and counts the statements and fetches it sends per second over
// d, after a warm-up, and the jobs it finishes.
func (e *env) countQueries(ctx context.Context, ph isolationPhase, busy int, d time.Duration) (queryCount, error) {
	if err := e.reset(ctx); err != nil {
		return queryCount{}, err
	}
	queue := e.opts.Service.Queue(routing.Priority)
	if busy > 0 {
		if err := seed.Available(ctx, e.Pool, loadtest.Kind, queue, routing.StartingPriority(tiers.Enterprise), busy, 0, 0, 0); err != nil {
			return queryCount{}, err
		}
		if err := seed.Analyze(ctx, e.Pool); err != nil {
			return queryCount{}, err
		}
	}
	finished := func() (int64, error) {
		var n int64
		err := e.Pool.QueryRow(ctx, `SELECT count(*) FROM `+riverschema.JobTable+` WHERE queue = $1 AND state = '`+riverschema.StateCompleted+`'`, queue).Scan(&n)
		return n, err
	}
	counter := &queryCounter{}
	cfg := e.PoolConfig.Copy()
	cfg.MaxConns = 10
	cfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return queryCount{}, fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()
	dep, err := ph.worker(pool)
	if err != nil {
		return queryCount{}, err
	}
	stop, err := dep.start(ctx)
	if err != nil {
		return queryCount{}, err
	}
	defer stop()
	if err := sleep(ctx, 2*e.opts.sizes().warmup); err != nil {
		return queryCount{}, err
	}
	before, fetchesBefore := counter.n.Load(), counter.fetches.Load()
	doneBefore, err := finished()
	if err != nil {
		return queryCount{}, err
	}
	if err := sleep(ctx, d); err != nil {
		return queryCount{}, err
	}
	queries, fetches := counter.n.Load()-before, counter.fetches.Load()-fetchesBefore
	done, err := finished()
	if err != nil {
		return queryCount{}, err
	}
	if busy > 0 && done >= int64(busy) {
		return queryCount{}, fmt.Errorf("the busy queue ran dry (%d jobs): queue more", busy)
	}
	return queryCount{
		queriesPerS: float64(queries) / d.Seconds(),
		fetchesPerS: float64(fetches) / d.Seconds(),
		jobsPerS:    float64(done-doneBefore) / d.Seconds(),
	}, nil
}

// workerConfig is the configuration of the worker of the service under
// test as the worker process loads it (defaults, then env), with the
// load-test workload registered. The bench's own settings come last, so that
// nothing in env can point the worker at another schema or service
// (CheckWorkerEnv refuses them anyway).
func (e *env) workerConfig(env ...string) (config.Worker, error) {
	return config.LoadWorker(append(slices.Clone(env),
		"DATABASE_URL="+e.opts.DatabaseURL, "DATABASE_SCHEMA="+e.Name,
		"WORKER_SERVICE="+e.opts.Service.Name(), "LOAD_TEST_WORKLOAD=true",
	), e.opts.Registry)
}

// stream runs one phase: a fresh table (with backlog free jobs queued in
// the default queue of the service under test if asked), the phase's worker
// started, then one enterprise job every streamInterval for duration through
// the phase's producer. It returns the stream's insert→start latencies in ms (created_at
// to attempted_at, both the database's clock), their split at the commit,
// and how many backlog jobs were worked during the phase and how many were
// left.
func (e *env) stream(ctx context.Context, ph isolationPhase, backlog int, duration time.Duration) (lat []float64, split LatencySplit, worked, left int, err error) {
	if err := e.reset(ctx); err != nil {
		return nil, LatencySplit{}, 0, 0, err
	}
	if backlog > 0 {
		if err := seed.Available(ctx, e.Pool, loadtest.Kind, e.opts.Service.Queue(routing.Default), routing.StartingPriority(tiers.Free), backlog, 0, 0, 0); err != nil {
			return nil, LatencySplit{}, 0, 0, err
		}
		if err := seed.Analyze(ctx, e.Pool); err != nil {
			return nil, LatencySplit{}, 0, 0, err
		}
	}

	workerPool, err := e.pool(ctx, 10)
	if err != nil {
		return nil, LatencySplit{}, 0, 0, err
	}
	defer workerPool.Close()
	d, err := ph.worker(workerPool)
	if err != nil {
		return nil, LatencySplit{}, 0, 0, err
	}
	stop, err := d.start(ctx)
	if err != nil {
		return nil, LatencySplit{}, 0, 0, err
	}
	defer stop()

	producerPool, err := e.pool(ctx, 4)
	if ph.unflushed {
		producerPool, err = e.unflushedPool(ctx, 4)
	}
	if err != nil {
		return nil, LatencySplit{}, 0, 0, err
	}
	defer producerPool.Close()
	producerClient, err := river.NewClient(riverpgxv5.New(producerPool), ph.producer(e.Name))
	if err != nil {
		return nil, LatencySplit{}, 0, 0, fmt.Errorf("producer client: %w", err)
	}

	if err := sleep(ctx, e.opts.sizes().warmup); err != nil { // the worker's producers and listener are up
		return nil, LatencySplit{}, 0, 0, err
	}
	ins := streamInserter{client: producerClient, acks: &commitAcks{}}
	if !ph.raw {
		ins.pool = producerPool
	}
	ids, err := e.insertStream(ctx, ins, max(ph.producers, 1), ph.args, duration)
	if err != nil {
		return nil, LatencySplit{}, 0, 0, err
	}
	if err := waitStarted(ctx, e.Pool, ids, 60*time.Second); err != nil {
		return nil, LatencySplit{}, 0, 0, err
	}
	if backlog > 0 {
		// A job fair share holds back (pending) is still queued, not worked.
		if err := e.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state NOT IN ('`+riverschema.StateAvailable+`', '`+riverschema.StatePending+`')),
				count(*) FILTER (WHERE state IN ('`+riverschema.StateAvailable+`', '`+riverschema.StatePending+`'))
			FROM `+riverschema.JobTable+` WHERE queue = $1`, e.opts.Service.Queue(routing.Default)).Scan(&worked, &left); err != nil {
			return nil, LatencySplit{}, 0, 0, fmt.Errorf("count backlog: %w", err)
		}
	}
	if lat, split, err = splitLatencies(ctx, e.Pool, ins.acks); err != nil {
		return nil, LatencySplit{}, 0, 0, err
	}
	return lat, split, worked, left, nil
}

// LatencySplit divides a phase's insert→start latency where the producer
// saw the insert committed (its clock; the database runs on the same
// machine, so the two clocks are one): Commit is from the transaction's
// start (created_at) to then, the insert, its notification and the commit
// with its WAL flush; Wake from then to the fetch that started the job
// (attempted_at): the notification's delivery, the worker's wake-up and
// its fetch. The commit acknowledgement and the notification leave the
// server together, so a wake can be slightly negative. A diagnostic of
// where a phase's tail is, not a target. Medians over runs.
type LatencySplit struct {
	// CommitP99Ms and WakeP99Ms are each part's own 99th percentile.
	CommitP99Ms float64 `json:"commit_p99_ms"`
	WakeP99Ms   float64 `json:"wake_p99_ms"`
	// TailCommitMs and TailWakeMs are the parts' means over the phase's
	// slowest 1% of jobs (at least one): which part made them slow.
	TailCommitMs float64 `json:"tail_commit_ms"`
	TailWakeMs   float64 `json:"tail_wake_ms"`
}

// splitLatencies reads the jobs acks recorded, started, in one query: their
// insert→start latencies in ms (as pickupLatencies) and their LatencySplit.
func splitLatencies(ctx context.Context, pool *pgxpool.Pool, acks *commitAcks) ([]float64, LatencySplit, error) {
	ids := make([]int64, 0, len(acks.at))
	for id := range acks.at {
		ids = append(ids, id)
	}
	rows, err := pool.Query(ctx, `SELECT id, extract(epoch FROM attempted_at - created_at)::float8 * 1000,
			extract(epoch FROM created_at)::float8 * 1000, extract(epoch FROM attempted_at)::float8 * 1000
		FROM `+riverschema.JobTable+` WHERE id = ANY($1)`, ids)
	if err != nil {
		return nil, LatencySplit{}, fmt.Errorf("read latencies: %w", err)
	}
	type job struct{ commit, wake float64 }
	var (
		jobs                      []job
		lat                       []float64
		id                        int64
		total, created, attempted float64
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &total, &created, &attempted}, func() error {
		ack := float64(acks.at[id].UnixMicro()) / 1000
		lat = append(lat, total)
		jobs = append(jobs, job{commit: ack - created, wake: attempted - ack})
		return nil
	})
	if err != nil {
		return nil, LatencySplit{}, fmt.Errorf("read latencies: %w", err)
	}
	if len(jobs) == 0 {
		return lat, LatencySplit{}, nil
	}
	part := func(f func(job) float64) []float64 {
		v := make([]float64, len(jobs))
		for i, j := range jobs {
			v[i] = f(j)
		}
		slices.Sort(v)
		return v
	}
	split := LatencySplit{
		CommitP99Ms: percentile(part(func(j job) float64 { return j.commit }), 99),
		WakeP99Ms:   percentile(part(func(j job) float64 { return j.wake }), 99),
	}
	slices.SortFunc(jobs, func(a, b job) int { return cmp.Compare(b.commit+b.wake, a.commit+a.wake) })
	tail := jobs[:max(1, len(jobs)/100)]
	for _, j := range tail {
		split.TailCommitMs += j.commit / float64(len(tail))
		split.TailWakeMs += j.wake / float64(len(tail))
	}
	return lat, split, nil
}

// pickupLatencies are the insert→start latencies in ms of the jobs of ids,
// started: attempted_at − created_at, both the database's clock.
func pickupLatencies(ctx context.Context, pool *pgxpool.Pool, ids []int64) ([]float64, error) {
	rows, err := pool.Query(ctx, `SELECT extract(epoch FROM attempted_at - created_at)::float8 * 1000
		FROM `+riverschema.JobTable+` WHERE id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("read latencies: %w", err)
	}
	lat, err := pgx.CollectRows(rows, pgx.RowTo[float64])
	if err != nil {
		return nil, fmt.Errorf("read latencies: %w", err)
	}
	return lat, nil
}

// streamInserter inserts the jobs of a stream.
type streamInserter struct {
	client *river.Client[pgx.Tx]
	// pool is where each job's transaction runs when it is inserted through
	// producer.Insert, as an API replica's request does (the tier in the
	// job's metadata, unique options, River's insert notification sent for
	// every job). Nil: with River's Client.Insert, as a producer that does
	// not use package producer does.
	pool *pgxpool.Pool
	// acks, when not nil, records when each job's insert came back
	// committed, by the producer's clock (splitLatencies).
	acks *commitAcks
}

// commitAcks are the times the producer saw each job's insert committed.
type commitAcks struct {
	mu sync.Mutex
	at map[int64]time.Time
}

func (a *commitAcks) record(id int64, at time.Time) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.at == nil {
		a.at = map[int64]time.Time{}
	}
	a.at[id] = at
}

// insert inserts one enterprise job of args for tenant ("": none), routed by
// svc's InsertOpts, or into queue when not "" (raw only).
func (s streamInserter) insert(ctx context.Context, svc *service.Service, args loadtest.Args, tenant, queue string) (int64, error) {
	if s.pool == nil {
		opts := svc.InsertOpts(tiers.Enterprise, tenant, false)
		if queue != "" {
			opts.Queue = queue
		}
		res, err := s.client.Insert(ctx, args, opts)
		if err != nil {
			return 0, fmt.Errorf("insert: %w", err)
		}
		s.acks.record(res.Job.ID, time.Now())
		return res.Job.ID, nil
	}
	if queue != "" {
		return 0, errors.New("insert: producer.Insert routes by tier, not to a queue")
	}
	var id int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		res, err := producer.Insert(ctx, s.client, tx, producer.Job{Args: args, Service: svc, Tier: tiers.Enterprise, Tenant: tenant})
		if err != nil {
			return err
		}
		if res.Duplicate {
			return fmt.Errorf("insert: job %d has the same args (ref %q)", res.Job.ID, args.Ref)
		}
		id = res.Job.ID
		return nil
	})
	if err == nil {
		s.acks.record(id, time.Now())
	}
	return id, err
}

// insertStream inserts duration/streamInterval enterprise load-test jobs
// (args) from each of producers goroutines sharing ins, each one job per
// streamInterval, their starts spread over the first interval, routed by
// the InsertOpts of the service under test.
func (e *env) insertStream(ctx context.Context, ins streamInserter, producers int, args loadtest.Args, duration time.Duration) ([]int64, error) {
	ids, err := e.insertStreams(ctx, ins, make([]string, producers), streamInterval, args, duration)
	return ids[""], err
}

// insertStreams inserts duration/interval enterprise load-test jobs (args)
// from one goroutine per entry of tenants, sharing ins, each one job per
// interval on behalf of its tenant ("": none), their starts spread over the
// first interval, routed by the InsertOpts of the service under test. It
// returns the jobs' ids by tenant.
func (e *env) insertStreams(ctx context.Context, ins streamInserter, tenants []string, interval time.Duration, args loadtest.Args, duration time.Duration) (map[string][]int64, error) {
	return e.insertStreamsTo(ctx, ins, "", tenants, interval, args, duration)
}

// insertStreamsTo is insertStreams, with every job in queue instead of the
// queue InsertOpts routes it to ("": that one; ins must be raw): the one
// queue of a deployment that does not split work by tier (the realistic
// scenario's Option B). The priority stays InsertOpts'.
func (e *env) insertStreamsTo(ctx context.Context, ins streamInserter, queue string, tenants []string, interval time.Duration, args loadtest.Args, duration time.Duration) (map[string][]int64, error) {
	var (
		mu  sync.Mutex
		ids = map[string][]int64{}
	)
	err := e.paced(ctx, len(tenants), interval, int(duration/interval), func(ctx context.Context, p, i int) error {
		args := args
		args.Ref = fmt.Sprintf("%d.%d", p, i)
		id, err := ins.insert(ctx, e.opts.Service, args, tenants[p], queue)
		if err != nil {
			return err
		}
		mu.Lock()
		ids[tenants[p]] = append(ids[tenants[p]], id)
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ids, nil
}

// paced calls each(ctx, p, i) for i from 0 to n−1, once per interval, from
// each of producers goroutines p, their starts spread evenly over the first
// interval, counting each call in the progress bar. It returns the first
// error, having stopped the others.
func (e *env) paced(ctx context.Context, producers int, interval time.Duration, n int, each func(ctx context.Context, p, i int) error) error {
	g, ctx := errgroup.WithContext(ctx)
	for p := range producers {
		g.Go(func() error {
			if err := sleep(ctx, interval*time.Duration(p)/time.Duration(producers)); err != nil {
				return err
			}
			ticker := time.NewTicker(interval)
			defer ticker.Stop()
			for i := range n {
				if err := each(ctx, p, i); err != nil {
					return err
				}
				e.opts.progress().Add(1)
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-ticker.C:
				}
			}
			return nil
		})
	}
	return g.Wait()
}

// waitStarted waits until every job of ids has started.
func waitStarted(ctx context.Context, pool *pgxpool.Pool, ids []int64, timeout time.Duration) error {
	return waitJobs(ctx, pool, ids, timeout, "attempted_at IS NULL", "started")
}

// waitJobs waits until no job of ids meets the SQL condition waiting (the
// jobs that have not done what the caller waits for, named done).
func waitJobs(ctx context.Context, pool *pgxpool.Pool, ids []int64, timeout time.Duration, waiting, done string) error {
	deadline := time.Now().Add(timeout)
	for {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+riverschema.JobTable+` WHERE id = ANY($1) AND `+waiting, ids).Scan(&n); err != nil {
			return fmt.Errorf("wait for jobs: %w", err)
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d jobs not %s after %s", n, len(ids), done, timeout)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}
