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
	"github.com/tierq/tierq/jobmeta"
	"github.com/tierq/tierq/loadtest"
	"github.com/tierq/tierq/producer"
	"github.com/tierq/tierq/routing"
)

// LendingResult is the lending scenario: the service under test's idle
// priority workers lent to its free jobs (package fairshare, Lend), at its
// default worker counts (the reference app's 5/3/2) and a floor of
// lendingFloor, against lending off (the default: ADR-16's idle paid
// workers). tierq's worker deployment with its admitter in every phase.
// Free jobs are the load-test workload of lendingJobMs, tiers.Free, routed
// by the service's InsertOpts into its default queue; Backlog of them are
// queued before the worker starts, more than it can finish in a phase.
// Phases, each in a fresh table:
//
//   - drain: the free jobs completed per second over WindowSeconds, from
//     WarmSeconds after the worker started: those completed in the default
//     queue and those lent to the priority queue (jobmeta.LentFrom) and
//     completed there; lending on, and off.
//   - paid: the same backlog, and a paid trickle beside it, one enterprise
//     job of trickleJobMs every trickleInterval for StreamSeconds (PaidJobs
//     in all); lending on, and off. A job's latency is attempted_at −
//     created_at (the database's clock).
//
// Medians over runs, but the most lent jobs running at once, the largest
// of any run.
type LendingResult struct {
	// FreeJobsPerS is the free jobs completed per second with lending on,
	// LentJobsPerS those of them lent to the priority queue, and
	// FreeJobsPerSOff the free jobs completed per second with lending off.
	FreeJobsPerS    float64 `json:"free_jobs_per_s"`
	LentJobsPerS    float64 `json:"lent_jobs_per_s"`
	FreeJobsPerSOff float64 `json:"free_jobs_per_s_off"`
	// FreeDrainRatio is FreeJobsPerS / FreeJobsPerSOff. IdealRatio is what
	// the worker counts allow when slots bound the rate: (default workers +
	// priority workers − floor) / default workers.
	FreeDrainRatio float64 `json:"free_drain_ratio"`
	IdealRatio     float64 `json:"ideal_ratio"`
	// LentJobs is how many free jobs were lent during a drain phase with
	// lending on (median), MaxLentRunning the most of them running at once
	// (of any run), which lending bounds by MaxLent, the priority workers
	// less the floor.
	LentJobs       float64 `json:"lent_jobs"`
	MaxLentRunning int     `json:"max_lent_running"`
	MaxLent        int     `json:"max_lent"`
	// Paid* are the paid trickle's latencies beside the backlog, with
	// lending on and (Off) off; PaidLentJobs and PaidMaxLentRunning what
	// was lent meanwhile, as LentJobs and MaxLentRunning.
	PaidP50Ms          float64 `json:"paid_p50_ms"`
	PaidP95Ms          float64 `json:"paid_p95_ms"`
	PaidP99Ms          float64 `json:"paid_p99_ms"`
	PaidP50OffMs       float64 `json:"paid_p50_off_ms"`
	PaidP95OffMs       float64 `json:"paid_p95_off_ms"`
	PaidP99OffMs       float64 `json:"paid_p99_off_ms"`
	PaidLentJobs       float64 `json:"paid_lent_jobs"`
	PaidMaxLentRunning int     `json:"paid_max_lent_running"`
	// PaidBacklogWorked is the free jobs started during a paid phase with
	// lending on, PaidBacklogWorkedOff with it off (medians).
	PaidBacklogWorked    float64 `json:"paid_backlog_worked"`
	PaidBacklogWorkedOff float64 `json:"paid_backlog_worked_off"`

	PriorityWorkers int     `json:"priority_workers"`
	DefaultWorkers  int     `json:"default_workers"`
	Floor           int     `json:"floor"`
	Backlog         int     `json:"backlog"` // free jobs queued per phase
	FreeJobMs       int     `json:"free_job_ms"`
	PaidJobMs       int     `json:"paid_job_ms"`
	PaidJobs        int     `json:"paid_jobs"` // per paid phase
	StreamSeconds   float64 `json:"stream_seconds"`
	WarmSeconds     float64 `json:"warm_seconds"`
	WindowSeconds   float64 `json:"window_seconds"`
	Runs            int     `json:"runs"`
	// Samples are the paid latencies (ms) of the last run, per phase
	// ("lending paid (lending on)"), for plots.
	Samples map[string][]float64 `json:"-"`
}

// lendingJobMs is how long a free job of the lending scenario works.
const lendingJobMs = 50

// lendingFloor is the lending scenario's <NAME>_LEND_FLOOR.
const lendingFloor = 1

// Lending runs the lending scenario.
func Lending(ctx context.Context, opts Options) (LendingResult, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return LendingResult{}, err
	}
	e, err := newEnv(ctx, opts)
	if err != nil {
		return LendingResult{}, err
	}
	defer e.close()

	sz := opts.sizes()
	res := LendingResult{
		Floor: lendingFloor, Backlog: sz.lendBacklog, FreeJobMs: lendingJobMs, PaidJobMs: trickleJobMs,
		PaidJobs: int(sz.lendStream / trickleInterval), StreamSeconds: sz.lendStream.Seconds(),
		WarmSeconds: sz.lendWarm.Seconds(), WindowSeconds: sz.lendWindow.Seconds(),
		Runs: opts.runs(), Samples: map[string][]float64{},
	}
	// The phases set lending themselves, after whatever --set says (which
	// cannot name it: CheckWorkerEnv).
	prefix := opts.Service.EnvPrefix()
	lendOn, err := e.workerConfig(append(slices.Clone(opts.WorkerEnv),
		prefix+"LEND_IDLE_PRIORITY=true", fmt.Sprintf("%sLEND_FLOOR=%d", prefix, lendingFloor))...)
	if err != nil {
		return res, err
	}
	lendOff, err := e.workerConfig(append(slices.Clone(opts.WorkerEnv), prefix+"LEND_IDLE_PRIORITY=false")...)
	if err != nil {
		return res, err
	}
	if !lendOn.Lend || lendOn.LendFloor != lendingFloor || lendOff.Lend {
		return res, fmt.Errorf("lending: %sLEND_IDLE_PRIORITY did not turn lending on and off", prefix)
	}
	res.PriorityWorkers, res.DefaultWorkers = lendOn.Workers.Of(routing.Priority), lendOn.Workers.Of(routing.Default)
	if res.DefaultWorkers == 0 || res.PriorityWorkers <= lendingFloor {
		return res, fmt.Errorf("lending: service %s needs default workers and more priority workers than the floor (%d); it has %d and %d",
			opts.Service.Name(), lendingFloor, res.DefaultWorkers, res.PriorityWorkers)
	}
	res.MaxLent = res.PriorityWorkers - lendingFloor
	res.IdealRatio = round(float64(res.DefaultWorkers+res.MaxLent)/float64(res.DefaultWorkers), 3)

	deploy := func(cfg config.Worker) func(*pgxpool.Pool) (*deployment, error) {
		return func(pool *pgxpool.Pool) (*deployment, error) { return tierqDeployment(cfg, pool, opts) }
	}
	tierqProducer := func(schema string) *river.Config { return producer.ClientConfig(schema, opts.logger()) }
	freeArgs := loadtest.Args{SleepMS: lendingJobMs}
	drains := []struct {
		name string
		cfg  config.Worker
	}{
		{"free drain (lending on)", lendOn},
		{"free drain (lending off)", lendOff},
	}
	paid := []trickle{
		{name: "paid (lending on)", worker: deploy(lendOn), producer: tierqProducer, free: res.Backlog, freeArgs: freeArgs},
		{name: "paid (lending off)", worker: deploy(lendOff), producer: tierqProducer, free: res.Backlog, freeArgs: freeArgs},
	}

	perSecond := map[string][]float64{}
	p50, p95, p99 := map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
	var lentPerS, lent, paidLent []float64
	worked := map[string][]float64{}
	for run := range res.Runs {
		for _, ph := range drains {
			opts.progress().Stage(fmt.Sprintf("lending run %d/%d: %s, %s window", run+1, res.Runs, ph.name, sz.lendWindow), 0)
			d, err := e.lendDrain(ctx, ph.cfg, res.Backlog, freeArgs, sz.lendWarm, sz.lendWindow)
			if err != nil {
				return res, fmt.Errorf("lending %s: %w", ph.name, err)
			}
			perSecond[ph.name] = append(perSecond[ph.name], float64(d.free+d.lent)/sz.lendWindow.Seconds())
			if ph.cfg.Lend {
				lentPerS = append(lentPerS, float64(d.lent)/sz.lendWindow.Seconds())
				lent = append(lent, float64(d.lentTotal))
				res.MaxLentRunning = max(res.MaxLentRunning, d.maxLent)
			}
		}
		for _, ph := range paid {
			opts.progress().Stage(fmt.Sprintf("lending run %d/%d: %s", run+1, res.Runs, ph.name), res.PaidJobs)
			t, err := e.runTrickle(ctx, ph, sz.lendStream)
			if err != nil {
				return res, fmt.Errorf("lending %s: %w", ph.name, err)
			}
			slices.Sort(t.lat)
			p50[ph.name] = append(p50[ph.name], percentile(t.lat, 50))
			p95[ph.name] = append(p95[ph.name], percentile(t.lat, 95))
			p99[ph.name] = append(p99[ph.name], percentile(t.lat, 99))
			worked[ph.name] = append(worked[ph.name], float64(t.worked))
			res.Samples["lending "+ph.name] = t.lat
			if ph.name == paid[0].name {
				paidLent = append(paidLent, float64(t.lent))
				res.PaidMaxLentRunning = max(res.PaidMaxLentRunning, t.maxLent)
			}
		}
	}

	m := func(xs map[string][]float64, name string, d int) float64 { return round(median(xs[name]), d) }
	res.FreeJobsPerS, res.FreeJobsPerSOff = m(perSecond, drains[0].name, 1), m(perSecond, drains[1].name, 1)
	res.LentJobsPerS = round(median(lentPerS), 1)
	res.FreeDrainRatio = round(median(perSecond[drains[0].name])/median(perSecond[drains[1].name]), 3)
	res.LentJobs = median(lent)
	res.PaidP50Ms, res.PaidP95Ms, res.PaidP99Ms = m(p50, paid[0].name, 2), m(p95, paid[0].name, 2), m(p99, paid[0].name, 2)
	res.PaidP50OffMs, res.PaidP95OffMs, res.PaidP99OffMs = m(p50, paid[1].name, 2), m(p95, paid[1].name, 2), m(p99, paid[1].name, 2)
	res.PaidLentJobs = median(paidLent)
	res.PaidBacklogWorked, res.PaidBacklogWorkedOff = median(worked[paid[0].name]), median(worked[paid[1].name])
	return res, nil
}

// lendDrainResult is what one drain phase of the lending scenario counted:
// the free jobs completed in the window in the default queue (free) and
// lent to the priority queue (lent), and what was lent over the whole phase
// (lentStats).
type lendDrainResult struct {
	free, lent         int
	lentTotal, maxLent int
}

// lendDrain runs one drain phase of the lending scenario: a fresh table with
// jobs free jobs of args queued (one InsertMany, routed by the InsertOpts of
// the service under test), tierq's worker deployment of cfg started, and
// the free jobs it completed (River's finalized_at, this process's clock)
// over window, from warm after the start, in the default queue and lent to
// the priority queue. Free work must still be queued at the window's end,
// or the window measured a backlog that ran out.
func (e *env) lendDrain(ctx context.Context, cfg config.Worker, jobs int, args loadtest.Args, warm, window time.Duration) (lendDrainResult, error) {
	var res lendDrainResult
	if err := e.reset(ctx); err != nil {
		return res, err
	}
	client, err := e.producerClient(e.Pool)
	if err != nil {
		return res, err
	}
	ids, stop, err := e.backlogged(ctx, client, "", jobs, args, func(pool *pgxpool.Pool) (*deployment, error) {
		return tierqDeployment(cfg, pool, e.opts)
	})
	if err != nil {
		return res, err
	}
	defer stop()
	if err := sleep(ctx, warm); err != nil {
		return res, err
	}
	t0 := time.Now()
	if err := sleep(ctx, window); err != nil {
		return res, err
	}
	t1 := time.Now()
	var left int
	if err := e.Pool.QueryRow(ctx, `SELECT count(*) FROM `+riverschema.JobTable+` WHERE id = ANY($1) AND state IN ('`+riverschema.StateAvailable+`', '`+riverschema.StatePending+`')`, ids).Scan(&left); err != nil {
		return res, fmt.Errorf("count backlog: %w", err)
	}
	if left == 0 {
		return res, fmt.Errorf("the free backlog (%d jobs) ran out before the window ended: queue more", jobs)
	}
	// River's completer records completions in batches, shortly after.
	if err := sleep(ctx, 500*time.Millisecond); err != nil {
		return res, err
	}
	if res.lentTotal, res.maxLent, err = e.lentStats(ctx); err != nil {
		return res, err
	}
	if err := e.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE queue = $2),
			count(*) FILTER (WHERE queue = $3 AND metadata ? '`+jobmeta.LentFrom+`')
		FROM `+riverschema.JobTable+` WHERE state = '`+riverschema.StateCompleted+`' AND finalized_at >= $4 AND finalized_at < $5 AND id = ANY($1)`,
		ids, e.opts.Service.Queue(routing.Default), e.opts.Service.Queue(routing.Priority), t0, t1).Scan(&res.free, &res.lent); err != nil {
		return res, fmt.Errorf("count completed free jobs: %w", err)
	}
	return res, nil
}
