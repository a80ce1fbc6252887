package bench

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/internal/riverschema"
	"github.com/tierq/tierq/internal/seed"
	"github.com/tierq/tierq/loadtest"
)

// ThroughputResult is the throughput scenario: no-op jobs drained through
// tierq's worker of the service under test (its River configuration, hooks
// and all, with fair share's admitter beside it as worker.Run runs it) and through a bare River client with the same queues, worker
// counts and fetch settings, alternating in one run; and the jobs/s the
// service's default worker counts (the ADR's 5/3/2 for the reference app's)
// reach against the fetch-cadence bound, Σ workers/cooldown over the three
// queues: each queue fetches at most once per cooldown, at most its worker
// count each time. Medians over runs.
type ThroughputResult struct {
	TierqJobsPerS float64 `json:"tierq_jobs_per_s"`
	BareJobsPerS  float64 `json:"bare_jobs_per_s"`
	// Ratio is TierqJobsPerS / BareJobsPerS.
	Ratio           float64 `json:"ratio"`
	Jobs            int     `json:"jobs"`
	WorkersPerQueue int     `json:"workers_per_queue"`
	// DrainBoundJobsPerS is the drains' fetch-cadence bound; the drains
	// must stay well below it (the scenario fails above half).
	DrainBoundJobsPerS float64 `json:"drain_bound_jobs_per_s"`

	// ADRJobsPerS is the jobs/s of the queues whose fetch timer binds
	// (cooldown at least timerBound) at the service's default worker
	// counts, ADRBoundJobsPerS their fetch-cadence bound, and
	// ADRBoundRatio the one over the other. A queue with a shorter
	// cooldown is bound by its fetch round trips, not its timer: its jobs/s
	// are ADRFastJobsPerS, stated against its nominal bound
	// ADRFastBoundJobsPerS but not judged by it.
	ADRJobsPerS          float64 `json:"adr_jobs_per_s"`
	ADRBoundJobsPerS     float64 `json:"adr_bound_jobs_per_s"`
	ADRBoundRatio        float64 `json:"adr_bound_ratio"`
	ADRFastJobsPerS      float64 `json:"adr_fast_jobs_per_s"`
	ADRFastBoundJobsPerS float64 `json:"adr_fast_bound_jobs_per_s"`
	ADRSeconds           float64 `json:"adr_seconds"`
	Runs                 int     `json:"runs"` // of the ADR measurement; the drains alternate max(Runs, 3) pairs
}

// drainWorkers is the worker count per queue of the drain comparison.
const drainWorkers = 100

// Throughput runs the throughput scenario.
func Throughput(ctx context.Context, opts Options) (ThroughputResult, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return ThroughputResult{}, err
	}
	e, err := newEnv(ctx, opts)
	if err != nil {
		return ThroughputResult{}, err
	}
	defer e.close()

	res := ThroughputResult{Jobs: opts.sizes().drainJobs, WorkersPerQueue: drainWorkers, Runs: opts.runs(), ADRSeconds: opts.sizes().adr.Seconds()}
	// Every queue at River's smallest fetch cooldown (1ms), so that the
	// fetch cadence (100 workers per 1ms per queue) is far above what the
	// database can do and the drain measures the job loop, not River's
	// fetch timer (at 10ms the drains reached 23k jobs/s, over half of
	// that cadence).
	big, prefix := fmt.Sprint(drainWorkers), opts.Service.EnvPrefix()
	cfg, err := e.workerConfig(append(slices.Clone(opts.WorkerEnv),
		prefix+"QUEUE_PRIORITY_WORKERS="+big, prefix+"QUEUE_DEFAULT_WORKERS="+big, prefix+"QUEUE_SCHEDULED_WORKERS="+big,
		"QUEUE_PRIORITY_FETCH_COOLDOWN=1ms", "QUEUE_DEFAULT_FETCH_COOLDOWN=1ms", "QUEUE_SCHEDULED_FETCH_COOLDOWN=1ms")...)
	if err != nil {
		return res, err
	}
	queues, err := workerQueues(cfg, opts)
	if err != nil {
		return res, err
	}
	for _, qc := range queues {
		res.DrainBoundJobsPerS += float64(qc.Workers) / qc.FetchCooldown.Seconds()
	}
	variants := map[string]func(*pgxpool.Pool) (*deployment, error){
		"tierq": func(pool *pgxpool.Pool) (*deployment, error) { return tierqDeployment(cfg, pool, opts) },
		"bare": func(pool *pgxpool.Pool) (*deployment, error) {
			rc, err := bareRiver(e.Name, cfg, true, opts)
			if err != nil {
				return nil, err
			}
			return riverDeployment(pool, rc)
		},
	}
	// The drains are short (seconds) and noisy: at least three alternating
	// pairs even with --quick.
	pairs := max(res.Runs, 3)
	rates := map[string][]float64{}
	for run := range pairs {
		order := []string{"tierq", "bare"}
		if run%2 == 1 {
			order = []string{"bare", "tierq"}
		}
		for _, name := range order {
			opts.progress().Stage(fmt.Sprintf("throughput pair %d/%d: %s drains %d jobs", run+1, pairs, name, res.Jobs), res.Jobs)
			rate, err := e.drain(ctx, cfg, variants[name], res.Jobs)
			if err != nil {
				return res, fmt.Errorf("throughput %s: %w", name, err)
			}
			rates[name] = append(rates[name], rate)
		}
	}
	res.TierqJobsPerS, res.BareJobsPerS = round(median(rates["tierq"]), 0), round(median(rates["bare"]), 0)
	res.Ratio = round(median(rates["tierq"])/median(rates["bare"]), 3)
	if res.TierqJobsPerS > res.DrainBoundJobsPerS/2 || res.BareJobsPerS > res.DrainBoundJobsPerS/2 {
		return res, fmt.Errorf("throughput: drains reached %g and %g jobs/s, over half the fetch-cadence bound %g: the comparison would measure River's fetch timer",
			res.TierqJobsPerS, res.BareJobsPerS, res.DrainBoundJobsPerS)
	}

	adr, err := e.workerConfig(opts.WorkerEnv...)
	if err != nil {
		return res, err
	}
	var adrRates, fastRates []float64
	for run := range res.Runs {
		opts.progress().Stage(fmt.Sprintf("throughput run %d/%d: ADR worker counts for %gs", run+1, res.Runs, res.ADRSeconds), 0)
		c, err := e.cadence(ctx, adr, time.Duration(res.ADRSeconds*float64(time.Second)))
		if err != nil {
			return res, fmt.Errorf("throughput ADR counts: %w", err)
		}
		adrRates, fastRates = append(adrRates, c.rate), append(fastRates, c.fastRate)
		res.ADRBoundJobsPerS, res.ADRFastBoundJobsPerS = round(c.bound, 1), round(c.fastBound, 1)
	}
	res.ADRJobsPerS, res.ADRFastJobsPerS = round(median(adrRates), 1), round(median(fastRates), 1)
	if res.ADRBoundJobsPerS > 0 {
		res.ADRBoundRatio = round(median(adrRates)/res.ADRBoundJobsPerS, 3)
	}
	return res, nil
}

// bareRiver is a River client with cfg's queues and worker counts and
// nothing else of tierq's (no hooks, every other setting at River's
// default), working the load-test workload; with fetch, also cfg's fetch
// cooldowns and poll intervals, else River's (100ms, 1s). Like tierq's
// workers it never leads, so that neither side runs River's maintenance.
func bareRiver(schema string, cfg config.Worker, fetch bool, opts Options) (*river.Config, error) {
	served, err := workerQueues(cfg, opts)
	if err != nil {
		return nil, err
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, loadtest.NewWorker(nil))
	queues := map[string]river.QueueConfig{}
	for name, qc := range served {
		q := river.QueueConfig{MaxWorkers: qc.Workers}
		if fetch {
			q.FetchCooldown, q.FetchPollInterval = qc.FetchCooldown, qc.FetchPollInterval
		}
		queues[name] = q
	}
	return &river.Config{Schema: schema, Logger: opts.logger(), Queues: queues, Workers: workers, LeaderElectionDisabled: true}, nil
}

// drain seeds n no-op jobs spread over cfg's queues, starts the deployment
// newDeployment builds, and returns jobs/s from its start to its n-th
// completion.
func (e *env) drain(ctx context.Context, cfg config.Worker, newDeployment func(*pgxpool.Pool) (*deployment, error), n int) (float64, error) {
	if err := e.reset(ctx); err != nil {
		return 0, err
	}
	queues, err := workerQueues(cfg, e.opts)
	if err != nil {
		return 0, err
	}
	per := n / len(queues)
	total := 0
	for name := range queues {
		if err := seed.Available(ctx, e.Pool, loadtest.Kind, name, 0, per, 0, 0, 0); err != nil {
			return 0, err
		}
		total += per
	}
	if err := seed.Analyze(ctx, e.Pool); err != nil {
		return 0, err
	}
	pool, err := e.pool(ctx, 20)
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	d, err := newDeployment(pool)
	if err != nil {
		return 0, err
	}
	events, cancel := d.client.SubscribeConfig(&river.SubscribeConfig{ChanSize: total + 100, Kinds: []river.EventKind{river.EventKindJobCompleted}})
	defer cancel()
	start := time.Now()
	stop, err := d.start(ctx)
	if err != nil {
		return 0, err
	}
	defer stop()
	timeout := time.After(5 * time.Minute)
	for done := 0; done < total; {
		select {
		case <-events:
			done++
			if done%1000 == 0 {
				e.opts.progress().Add(1000)
			}
		case <-timeout:
			return 0, fmt.Errorf("%d of %d jobs completed after 5 minutes", done, total)
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return float64(total) / time.Since(start).Seconds(), nil
}

// timerBound is the shortest fetch cooldown that bounds a queue's rate: a
// fetch cycle (the statement's round trip and River's job loop) takes about
// 2ms here, so a queue fetching more often than every 10ms is bound by its
// round trips, not its timer.
const timerBound = 10 * time.Millisecond

// cadenceResult is what cadence measured: the jobs/s started in the queues
// whose cooldown is at least timerBound and their fetch-cadence bound
// Σ workers/cooldown, and the same for the faster queues.
type cadenceResult struct {
	rate, bound, fastRate, fastBound float64
}

// cadence runs tierq's worker deployment of cfg over queues seeded with more no-op
// jobs than it can fetch in d, and returns the jobs/s it started during d
// (after a second of warm-up, by the database's attempted_at) against the
// fetch-cadence bound Σ workers/cooldown, for the timer-bound queues and
// the fast ones apart.
func (e *env) cadence(ctx context.Context, cfg config.Worker, d time.Duration) (cadenceResult, error) {
	var res cadenceResult
	if err := e.reset(ctx); err != nil {
		return res, err
	}
	queues, err := workerQueues(cfg, e.opts)
	if err != nil {
		return res, err
	}
	var fast []string
	for name, qc := range queues {
		perSecond := float64(qc.Workers) / qc.FetchCooldown.Seconds()
		if qc.FetchCooldown < timerBound {
			res.fastBound += perSecond
			fast = append(fast, name)
		} else {
			res.bound += perSecond
		}
		n := int(perSecond*(d.Seconds()+5)*1.5) + 100
		if err := seed.Available(ctx, e.Pool, loadtest.Kind, name, 0, n, 0, 0, 0); err != nil {
			return res, err
		}
	}
	if err := seed.Analyze(ctx, e.Pool); err != nil {
		return res, err
	}
	pool, err := e.pool(ctx, 10)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	dep, err := tierqDeployment(cfg, pool, e.opts)
	if err != nil {
		return res, err
	}
	stop, err := dep.start(ctx)
	if err != nil {
		return res, err
	}
	defer stop()
	if err := sleep(ctx, e.opts.sizes().warmup); err != nil {
		return res, err
	}
	var t0, t1 time.Time
	if err := e.Pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&t0); err != nil {
		return res, fmt.Errorf("read clock: %w", err)
	}
	if err := sleep(ctx, d); err != nil {
		return res, err
	}
	var started, fastStarted int
	if err := e.Pool.QueryRow(ctx, `SELECT clock_timestamp(),
			(SELECT count(*) FILTER (WHERE NOT queue = ANY($2)) FROM `+riverschema.JobTable+` WHERE attempted_at >= $1 AND attempted_at < clock_timestamp()),
			(SELECT count(*) FILTER (WHERE queue = ANY($2)) FROM `+riverschema.JobTable+` WHERE attempted_at >= $1 AND attempted_at < clock_timestamp())`,
		t0, fast).Scan(&t1, &started, &fastStarted); err != nil {
		return res, fmt.Errorf("count started jobs: %w", err)
	}
	res.rate = float64(started) / t1.Sub(t0).Seconds()
	res.fastRate = float64(fastStarted) / t1.Sub(t0).Seconds()
	return res, nil
}
