package bench

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/tierq/tierq/loadtest"
	"github.com/tierq/tierq/producer"
	"github.com/tierq/tierq/routing"
	"github.com/tierq/tierq/worker"
)

// RealisticResult is the realistic scenario: the isolation scenario with
// work that takes time. Backlog free jobs of realisticJobMs (the load-test
// workload, tiers.Free) are queued before the worker starts, then a paid
// trickle of one enterprise job of trickleJobMs every trickleInterval runs
// for StreamSeconds (PaidJobs) beside them; a job's latency is attempted_at
// − created_at (the database's clock). The free backlog outlasts every
// phase. Phases, each in a fresh table:
//
//   - tierq: tierq's worker deployment of the service under test with its
//     defaults (5/3/2 workers for the reference app's, the admitter beside
//     it), jobs routed by the service's InsertOpts: free jobs in the
//     default queue, paid ones in the priority queue.
//   - Option B: ADR-16's rejected Option B, one queue per service with
//     River's priority by tier: a bare River client with one queue
//     (<base>_all), as many workers as tierq's three queues together
//     (OptionBWorkers), and tierq's priority fetch tuning (its cooldown and
//     poll); free jobs at priority 4 and enterprise at 2 (their tiers'
//     starting priorities), both in that queue.
//   - River defaults: a bare River client with the service's three queues
//     and worker counts and River's default fetch settings (100 ms
//     cooldown, 1 s poll), jobs routed as for tierq, inserted by a client
//     with River's default configuration (the isolation scenario's river
//     defaults phase).
//
// Medians over runs.
type RealisticResult struct {
	PaidP50Ms              float64 `json:"paid_p50_ms"`
	PaidP95Ms              float64 `json:"paid_p95_ms"`
	PaidP99Ms              float64 `json:"paid_p99_ms"`
	OptionBPaidP50Ms       float64 `json:"option_b_paid_p50_ms"`
	OptionBPaidP95Ms       float64 `json:"option_b_paid_p95_ms"`
	OptionBPaidP99Ms       float64 `json:"option_b_paid_p99_ms"`
	RiverDefaultsPaidP50Ms float64 `json:"river_defaults_paid_p50_ms"`
	RiverDefaultsPaidP95Ms float64 `json:"river_defaults_paid_p95_ms"`
	RiverDefaultsPaidP99Ms float64 `json:"river_defaults_paid_p99_ms"`
	// VsOptionB is PaidP99Ms / OptionBPaidP99Ms, VsRiverDefaults
	// PaidP99Ms / RiverDefaultsPaidP99Ms.
	VsOptionB       float64 `json:"vs_option_b"`
	VsRiverDefaults float64 `json:"vs_river_defaults"`
	// *BacklogWorked are the free jobs each phase started while the paid
	// trickle ran (medians): Option B gives free work every worker.
	BacklogWorked              float64 `json:"backlog_worked"`
	OptionBBacklogWorked       float64 `json:"option_b_backlog_worked"`
	RiverDefaultsBacklogWorked float64 `json:"river_defaults_backlog_worked"`

	OptionBQueue   string  `json:"option_b_queue"`
	OptionBWorkers int     `json:"option_b_workers"`
	Backlog        int     `json:"backlog"` // free jobs queued per phase
	FreeJobMs      int     `json:"free_job_ms"`
	PaidJobMs      int     `json:"paid_job_ms"`
	PaidJobs       int     `json:"paid_jobs"` // per phase
	StreamSeconds  float64 `json:"stream_seconds"`
	Runs           int     `json:"runs"`
	// Samples are the paid latencies (ms) of the last run, per phase
	// ("realistic tierq"), for plots.
	Samples map[string][]float64 `json:"-"`
}

// realisticJobMs is how long a free job of the realistic scenario works.
const realisticJobMs = 200

// Realistic runs the realistic scenario.
func Realistic(ctx context.Context, opts Options) (RealisticResult, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return RealisticResult{}, err
	}
	e, err := newEnv(ctx, opts)
	if err != nil {
		return RealisticResult{}, err
	}
	defer e.close()

	sz := opts.sizes()
	res := RealisticResult{
		OptionBQueue: opts.Service.BaseQueue() + "_all",
		Backlog:      sz.realBacklog, FreeJobMs: realisticJobMs, PaidJobMs: trickleJobMs,
		PaidJobs: int(sz.realStream / trickleInterval), StreamSeconds: sz.realStream.Seconds(),
		Runs: opts.runs(), Samples: map[string][]float64{},
	}
	cfg, err := e.workerConfig(opts.WorkerEnv...)
	if err != nil {
		return res, err
	}
	queues, err := workerQueues(cfg, opts)
	if err != nil {
		return res, err
	}
	for _, qc := range queues {
		res.OptionBWorkers += qc.Workers
	}

	tierqProducer := func(schema string) *river.Config { return producer.ClientConfig(schema, opts.logger()) }
	riverProducer := func(schema string) *river.Config { return &river.Config{Schema: schema, Logger: opts.logger()} }
	freeArgs := loadtest.Args{SleepMS: realisticJobMs}
	phases := []trickle{
		{name: "tierq", producer: tierqProducer, free: res.Backlog, freeArgs: freeArgs,
			worker: func(pool *pgxpool.Pool) (*deployment, error) { return tierqDeployment(cfg, pool, opts) }},
		{name: "option b", producer: tierqProducer, free: res.Backlog, freeArgs: freeArgs, queue: res.OptionBQueue,
			worker: func(pool *pgxpool.Pool) (*deployment, error) {
				return riverDeployment(pool, optionB(e.Name, queues, opts, res.OptionBQueue, res.OptionBWorkers))
			}},
		{name: "river defaults", producer: riverProducer, free: res.Backlog, freeArgs: freeArgs,
			worker: func(pool *pgxpool.Pool) (*deployment, error) {
				rc, err := bareRiver(e.Name, cfg, false, opts)
				if err != nil {
					return nil, err
				}
				return riverDeployment(pool, rc)
			}},
	}

	p50, p95, p99 := map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
	worked := map[string][]float64{}
	for run := range res.Runs {
		for _, ph := range phases {
			opts.progress().Stage(fmt.Sprintf("realistic run %d/%d: %s", run+1, res.Runs, ph.name), res.PaidJobs)
			t, err := e.runTrickle(ctx, ph, sz.realStream)
			if err != nil {
				return res, fmt.Errorf("realistic %s: %w", ph.name, err)
			}
			slices.Sort(t.lat)
			p50[ph.name] = append(p50[ph.name], percentile(t.lat, 50))
			p95[ph.name] = append(p95[ph.name], percentile(t.lat, 95))
			p99[ph.name] = append(p99[ph.name], percentile(t.lat, 99))
			worked[ph.name] = append(worked[ph.name], float64(t.worked))
			res.Samples["realistic "+ph.name] = t.lat
		}
	}
	m := func(xs map[string][]float64, name string) float64 { return round(median(xs[name]), 2) }
	res.PaidP50Ms, res.PaidP95Ms, res.PaidP99Ms = m(p50, "tierq"), m(p95, "tierq"), m(p99, "tierq")
	res.OptionBPaidP50Ms, res.OptionBPaidP95Ms, res.OptionBPaidP99Ms = m(p50, "option b"), m(p95, "option b"), m(p99, "option b")
	res.RiverDefaultsPaidP50Ms, res.RiverDefaultsPaidP95Ms, res.RiverDefaultsPaidP99Ms = m(p50, "river defaults"), m(p95, "river defaults"), m(p99, "river defaults")
	res.VsOptionB = round(res.PaidP99Ms/res.OptionBPaidP99Ms, 3)
	res.VsRiverDefaults = round(res.PaidP99Ms/res.RiverDefaultsPaidP99Ms, 3)
	res.BacklogWorked, res.OptionBBacklogWorked = median(worked["tierq"]), median(worked["option b"])
	res.RiverDefaultsBacklogWorked = median(worked["river defaults"])
	return res, nil
}

// optionB is ADR-16's rejected Option B for the service under test: a bare
// River client (nothing of tierq's beside it) with one queue, queue, of
// workers workers and the fetch cooldown and poll of the priority queue of
// queues (the deployment's, workerQueues),
// working the load-test workload. Like tierq's workers it never leads.
func optionB(schema string, queues map[string]worker.Queue, opts Options, queue string, workers int) *river.Config {
	registered := river.NewWorkers()
	river.AddWorker(registered, loadtest.NewWorker(nil))
	priority := queues[opts.Service.Queue(routing.Priority)]
	return &river.Config{
		Schema: schema, Logger: opts.logger(), Workers: registered, LeaderElectionDisabled: true,
		Queues: map[string]river.QueueConfig{queue: {
			MaxWorkers: workers, FetchCooldown: priority.FetchCooldown, FetchPollInterval: priority.FetchPollInterval,
		}},
	}
}
