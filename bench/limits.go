package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/internal/riverschema"
	"github.com/tierq/tierq/jobmeta"
	"github.com/tierq/tierq/limits"
	"github.com/tierq/tierq/loadtest"
	"github.com/tierq/tierq/routing"
	"github.com/tierq/tierq/tiers"
)

// LimitsResult is the limits scenario: per-tenant concurrency caps and
// rate limits (package limits, migration 00013's trigger, fair share's
// admission of the jobs a cap holds), issue 33's benchmarks. Every job is
// the load-test workload of fairnessJobMs (20 ms), recording its execution
// (load_test_executions: its start, and its completion in the transaction
// that completes the River job), an enterprise job routed with its tenant
// by the service under test's InsertOpts into its priority queue, where
// fair share is on. Every figure is read from the jobs' own start and
// finish times (the database's clock). Each run, in fresh tables:
//
//   - Exactness: two worker processes of the service under test (real
//     processes, Options.WorkerCommand), ExactWorkers priority workers in
//     all, enterprise tenants capped at ExactCap (the tier's default, as the
//     scheduler records it: limits.Record); ExactTenants tenants queue
//     ExactJobsPerTenant jobs each, tenant after tenant (FIFO's worst
//     case), and every job runs. MaxRunningPerTenant is the most jobs of one
//     tenant running at any instant; the workers are enough for every
//     tenant to run ExactCap at once, and fair share's windows would let
//     it run more without the cap.
//   - Reaction, in the same processes: ReactionTenants tenants capped at
//     ExactCap queue ReactionJobsPerTenant jobs each, far fewer than the
//     free workers. Each start of a tenant's job beyond its first ExactCap
//     is paired with the end that made room for it (the i-th start with the
//     (i − cap)-th end, both in time order): ReactionP50Ms and ReactionP99Ms
//     are those gaps.
//   - Rate accuracy, in the same processes: RateTenants tenants queue
//     enough jobs for RateWindowSeconds, two of them under the tier's
//     default rate (RateDefault), the others under an override
//     (RateOverride, limits.SetOverride); RateMaxOver is the most starts of
//     one tenant in any sliding interval of its limit (1 s) less its count:
//     at most 1 once rates are enforced.
//   - Work conservation, the comparator and the cost of no limit: two
//     worker deployments of the service under test in this process (two
//     River clients on pools of their own, each with fair share's admitter,
//     as worker.Run builds them; the comparator is a River middleware, which
//     the worker processes cannot take), ConserveWorkers priority workers in
//     all. ConserveCapped tenants capped at 1 (an override each) and
//     ConserveUncapped tenants not capped queue ConserveBacklog jobs each,
//     and the deployments run WarmSeconds, then WindowSeconds are measured:
//     every tenant still has work at the window's end. Four variants, in
//     turn and in a different order each run: "caps" (tierq's caps),
//     "no_limits" (no limit set: the cap trigger present and doing its one
//     lookup), "trigger_off" (the cap trigger disabled: ALTER TABLE river_job
//     DISABLE TRIGGER tierq_tenant_cap), and "snooze_cap", the comparator:
//     no limit set, and each deployment keeps in memory the running jobs of
//     each capped tenant and snoozes one over 1 for 30 s ± 10 s (River's
//     JobSnooze: tenantCap), per process as the system tierq's design
//     comes from did.
//
// Medians over runs; MaxRunningPerTenant and the variants' max running are
// the most of every run.
type LimitsResult struct {
	JobMs int `json:"job_ms"`
	Runs  int `json:"runs"`

	// Exactness. ExactWorkers are the priority workers of both processes,
	// ExactJobsPerS the rate at which the ExactTenants × ExactJobsPerTenant
	// jobs ran. MaxRunningPerTenant is the most jobs of one tenant running
	// at once (the most of every run; MaxRunningPerTenantRuns each run's),
	// ExactPass whether it stayed at or under ExactCap. ExactRanTwice counts
	// jobs with more than one execution, ExactJobs the jobs that ran.
	ExactTenants            int     `json:"exact_tenants"`
	ExactCap                int     `json:"exact_cap"`
	ExactJobsPerTenant      int     `json:"exact_jobs_per_tenant"`
	ExactWorkers            int     `json:"exact_workers"`
	ExactJobs               int     `json:"exact_jobs"`
	ExactRanTwice           int     `json:"exact_ran_twice"`
	ExactJobsPerS           float64 `json:"exact_jobs_per_s"`
	MaxRunningPerTenant     int     `json:"max_running_per_tenant"`
	MaxRunningPerTenantRuns []int   `json:"max_running_per_tenant_runs"`
	ExactPass               bool    `json:"exact_pass"`
	// ExactAtCapShare is the share of the time the tenants had a job
	// running in which they had ExactCap running (over every tenant; the
	// median of runs): near 1, the cap, not the workers or fair share,
	// bounded them, and MaxRunningPerTenant measured it.
	ExactAtCapShare float64 `json:"exact_at_cap_share"`

	// Reaction: the time from one of a capped tenant's jobs ending to its
	// next starting, with workers free (ReactionSamples gaps of the last
	// run; p50 and p99 medians over runs, ReactionMaxMs the worst).
	ReactionTenants       int     `json:"reaction_tenants"`
	ReactionJobsPerTenant int     `json:"reaction_jobs_per_tenant"`
	ReactionSamples       int     `json:"reaction_samples"`
	ReactionP50Ms         float64 `json:"reaction_p50_ms"`
	ReactionP99Ms         float64 `json:"reaction_p99_ms"`
	ReactionMaxMs         float64 `json:"reaction_max_ms"`
	// ReactionAdmitP50Ms and ReactionAdmitP99Ms are the part of each gap
	// until fair share's pass admitted the job (its scheduled_at, the
	// start of the pass's transaction), ReactionFetchP50Ms and
	// ReactionFetchP99Ms until River's fetch took it (attempted_at, the
	// start of the fetch's); the rest is the worker process starting the
	// job (its execution recorded: the job's first statement).
	ReactionAdmitP50Ms float64 `json:"reaction_admit_p50_ms"`
	ReactionAdmitP99Ms float64 `json:"reaction_admit_p99_ms"`
	ReactionFetchP50Ms float64 `json:"reaction_fetch_p50_ms"`
	ReactionFetchP99Ms float64 `json:"reaction_fetch_p99_ms"`

	// Rate accuracy. RateTenants are each tenant's limit and starts;
	// RateMaxOver the most starts in any interval of a tenant's limit over
	// its count, of every tenant and run (≤ 1 is the target).
	RateDefault       string       `json:"rate_default"`
	RateOverride      string       `json:"rate_override"`
	RateWindowSeconds float64      `json:"rate_window_seconds"`
	RateTenants       []RateTenant `json:"rate_tenants"`
	RateMaxOver       int          `json:"rate_max_over"`
	// RateBucketExcess is the most of the tenants' BucketExcess.
	RateBucketExcess float64 `json:"rate_bucket_excess"`

	// Work conservation, comparator, cost: the variants' figures by name
	// ("caps", "no_limits", "trigger_off", "snooze_cap").
	ConserveWorkers  int                      `json:"conserve_workers"`
	ConserveCapped   int                      `json:"conserve_capped"`
	ConserveUncapped int                      `json:"conserve_uncapped"`
	ConserveBacklog  int                      `json:"conserve_backlog"`
	WarmSeconds      float64                  `json:"warm_seconds"`
	WindowSeconds    float64                  `json:"window_seconds"`
	Variants         map[string]LimitsVariant `json:"variants"`
	variantRuns      map[string][]limitsVariantRun
	// WorkConservingRatio is caps' jobs/s over no_limits' (target ≥ 0.95),
	// NoLimitsRatio no_limits' over trigger_off's: what the trigger costs
	// when no limit is set (target ≥ 0.95), SnoozeThroughputRatio
	// snooze_cap's over no_limits'. Each is the median over runs of the
	// run's own ratio (its variants measured one after the other, minutes
	// apart at most), listed per run in the …Runs fields: a ratio of the
	// variants' medians paired one run's slow window with another run's
	// fast one.
	WorkConservingRatio       float64   `json:"work_conserving_ratio"`
	NoLimitsRatio             float64   `json:"no_limits_ratio"`
	SnoozeThroughputRatio     float64   `json:"snooze_throughput_ratio"`
	WorkConservingRatioRuns   []float64 `json:"work_conserving_ratio_runs"`
	NoLimitsRatioRuns         []float64 `json:"no_limits_ratio_runs"`
	SnoozeThroughputRatioRuns []float64 `json:"snooze_throughput_ratio_runs"`

	// Alone is the capped-alone phase of the caps and snooze_cap variants:
	// the capped tenants' jobs alone, every worker free, as the seed
	// system's snooze cap met them ("a capped job waits 30 s even when
	// workers idle").
	AloneJobsPerTenant int                    `json:"alone_jobs_per_tenant"`
	AloneWindowSeconds float64                `json:"alone_window_seconds"`
	Alone              map[string]LimitsAlone `json:"alone"`
	aloneRuns          map[string][]limitsVariantRun
}

// LimitsAlone is one variant of the capped-alone phase, medians over runs.
type LimitsAlone struct {
	// Done is how many of the capped tenants' jobs completed by the
	// window's end, of Jobs (the fewest of every run); Seconds how long
	// all took (the window when some were left; the median of runs).
	Done    int     `json:"done"`
	Jobs    int     `json:"jobs"`
	Seconds float64 `json:"seconds"`
	// IdleP50Ms and IdleP99Ms are the stretches in which a capped tenant
	// had work left and no job running, workers free.
	IdleP50Ms float64 `json:"idle_p50_ms"`
	IdleP99Ms float64 `json:"idle_p99_ms"`
	// MaxRunning is the most jobs of one capped tenant running at once.
	MaxRunning int `json:"max_running"`
}

// RateTenant is one tenant of the rate phase.
type RateTenant struct {
	Tenant string `json:"tenant"`
	Limit  string `json:"limit"`
	// MaxStarts is the most of its jobs started in any interval of its
	// limit (1 s) once its bucket's burst is spent (its first Count starts
	// left out: a token bucket whose burst is the count lets a tenant that
	// idled start that many at once, on top of the refill), the most of
	// every run; WithBurst the same over every start; MeanPerS its starts
	// per second over the window (median).
	MaxStarts int     `json:"max_starts"`
	WithBurst int     `json:"max_starts_with_burst"`
	MeanPerS  float64 `json:"mean_per_s"`
	// BucketExcess is the most starts beyond what the tenant's token
	// bucket allowed: its starts replayed through a bucket of Count
	// tokens, full when its jobs were inserted and refilled at its rate,
	// each start taking one; the deepest the bucket went below 0 (the
	// most of every run). The design allows 1: the job admitted with the
	// last token starts after the next is admitted.
	BucketExcess float64 `json:"bucket_excess"`
}

// LimitsVariant is one variant of the work-conservation phase, medians
// over runs.
type LimitsVariant struct {
	// JobsPerS are every tenant's jobs completed per second in the window,
	// CappedJobsPerS and UncappedJobsPerS those of the capped and uncapped
	// tenants (in the variants without caps, the tenants capped in the
	// others).
	JobsPerS         float64 `json:"jobs_per_s"`
	CappedJobsPerS   float64 `json:"capped_jobs_per_s"`
	UncappedJobsPerS float64 `json:"uncapped_jobs_per_s"`
	// CappedWaitP50Ms and CappedWaitP99Ms are the capped tenants' waits:
	// every stretch of the window in which one of them had no job running
	// (each has work throughout), and CappedIdleShare the share of the
	// window they spent so.
	CappedWaitP50Ms float64 `json:"capped_wait_p50_ms"`
	CappedWaitP99Ms float64 `json:"capped_wait_p99_ms"`
	CappedIdleShare float64 `json:"capped_idle_share"`
	// CappedMaxRunning is the most jobs of one capped tenant running at
	// once (the most of every run): 1 under caps.
	CappedMaxRunning int `json:"capped_max_running"`
	// UncappedLeft is the fewest jobs an uncapped tenant had left at the
	// window's end (the least of every run): above 0, uncapped work waited
	// throughout. Snoozes are the comparator's snoozes in the run.
	UncappedLeft int     `json:"uncapped_left"`
	Snoozes      float64 `json:"snoozes"`
	// JobsPerSRuns are each run's JobsPerS, in run order.
	JobsPerSRuns []float64 `json:"jobs_per_s_runs"`
}

// limitsVariantRun is one run of one variant.
type limitsVariantRun struct {
	jobsPerS, cappedPerS, uncappedPerS float64
	waitP50, waitP99, idleShare        float64
	maxRunning, uncappedLeft           int
	snoozes                            float64
	aloneDone                          int     // the capped-alone phase
	aloneSeconds                       float64 // likewise
}

// The limits scenario's variants of the work-conservation phase.
const (
	variantCaps       = "caps"
	variantNoLimits   = "no_limits"
	variantTriggerOff = "trigger_off"
	variantSnooze     = "snooze_cap"
)

var limitsVariants = []string{variantCaps, variantNoLimits, variantTriggerOff, variantSnooze}

// capTrigger is migration 00013's trigger on river_job.
const capTrigger = "tierq_tenant_cap"

// limitsSizes are the limits scenario's dimensions.
type limitsSizes struct {
	exactTenants, exactJobs int // per tenant
	exactWorkers            int // priority workers per process
	reactTenants, reactJobs int
	rateWindow              time.Duration
	warm, window            time.Duration
	snooze, snoozeJitter    time.Duration
	aloneJobs               int // per capped tenant, in the capped-alone phase
	aloneWindow             time.Duration
}

func (o Options) limitsSizes() limitsSizes {
	switch {
	case o.tiny:
		return limitsSizes{exactTenants: 10, exactJobs: 8, exactWorkers: 10, reactTenants: 2, reactJobs: 10,
			rateWindow: time.Second, warm: 300 * time.Millisecond, window: time.Second, snooze: 3 * time.Second, snoozeJitter: 500 * time.Millisecond,
			aloneJobs: 5, aloneWindow: 2 * time.Second}
	case o.Quick:
		return limitsSizes{exactTenants: 50, exactJobs: 20, exactWorkers: 50, reactTenants: 4, reactJobs: 20,
			rateWindow: 2 * time.Second, warm: 500 * time.Millisecond, window: 1500 * time.Millisecond, snooze: 30 * time.Second, snoozeJitter: 10 * time.Second,
			aloneJobs: 10, aloneWindow: 3 * time.Second}
	}
	return limitsSizes{exactTenants: 50, exactJobs: 200, exactWorkers: 50, reactTenants: 4, reactJobs: 200,
		rateWindow: 10 * time.Second, warm: 2 * time.Second, window: 8 * time.Second, snooze: 30 * time.Second, snoozeJitter: 10 * time.Second,
		aloneJobs: 10, aloneWindow: 5 * time.Second}
}

// The limits scenario's fixed dimensions.
const (
	limitsCap          = 2 // exactness and reaction
	conserveCapped     = 4
	conserveUncapped   = 2
	rateTenants        = 4 // the first half under the tier's default
	limitsProcessConns = 10
	limitsDeployConns  = 8
)

// The rate phase's limits: the enterprise tier's default, and the
// override of half its tenants.
var (
	rateDefault  = limits.Rate{Count: 20, Per: time.Second}
	rateOverride = limits.Rate{Count: 10, Per: time.Second}
)

// limitsArgs are the limits scenario's jobs: recorded, for their start and
// finish times.
var limitsArgs = loadtest.Args{SleepMS: fairnessJobMs, Record: true}

// Limits runs the limits scenario.
func Limits(ctx context.Context, opts Options) (LimitsResult, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return LimitsResult{}, err
	}
	if opts.WorkerCommand == nil {
		return LimitsResult{}, errors.New("bench: the limits scenario needs Options.WorkerCommand")
	}
	e, err := newEnv(ctx, opts)
	if err != nil {
		return LimitsResult{}, err
	}
	defer e.close()
	// The cap trigger finds a job's service by its queue in tierq_services,
	// which the worker processes record when they start; the in-process
	// deployments do not.
	if err := opts.Registry.Record(ctx, e.Pool, "bench"); err != nil {
		return LimitsResult{}, err
	}

	sz := opts.limitsSizes()
	cfg, err := e.workerConfig(append(slices.Clone(opts.WorkerEnv), "QUEUE_PRIORITY_FAIR_SHARE=true")...)
	if err != nil {
		return LimitsResult{}, err
	}
	backlog := conserveBacklog(cfg.Workers.Of(routing.Priority)*2, sz)
	res := LimitsResult{
		JobMs: fairnessJobMs, Runs: opts.runs(),
		ExactTenants: sz.exactTenants, ExactCap: limitsCap, ExactJobsPerTenant: sz.exactJobs, ExactWorkers: 2 * sz.exactWorkers,
		ReactionTenants: sz.reactTenants, ReactionJobsPerTenant: sz.reactJobs,
		RateDefault: rateDefault.String(), RateOverride: rateOverride.String(), RateWindowSeconds: sz.rateWindow.Seconds(),
		ConserveWorkers: 2 * cfg.Workers.Of(routing.Priority), ConserveCapped: conserveCapped, ConserveUncapped: conserveUncapped,
		ConserveBacklog: backlog, WarmSeconds: sz.warm.Seconds(), WindowSeconds: sz.window.Seconds(),
		Variants: map[string]LimitsVariant{}, variantRuns: map[string][]limitsVariantRun{},
		AloneJobsPerTenant: sz.aloneJobs, AloneWindowSeconds: sz.aloneWindow.Seconds(),
		Alone: map[string]LimitsAlone{}, aloneRuns: map[string][]limitsVariantRun{},
	}
	var (
		exactRates, p50s, p99s []float64
		atCapShares            []float64
		admitP50s, admitP99s   []float64
		fetchP50s, fetchP99s   []float64
		rateMax                = map[string]int{}
		rateBurst              = map[string]int{}
		rateExcess             = map[string]float64{}
		rateMeans              = map[string][]float64{}
	)
	for run := range res.Runs {
		stage := func(name string) {
			opts.progress().Stage(fmt.Sprintf("limits run %d/%d: %s", run+1, res.Runs, name), 0)
		}
		stage("two worker processes")
		pr, err := e.limitsProcesses(ctx, sz, stage)
		if err != nil {
			return res, err
		}
		res.MaxRunningPerTenantRuns = append(res.MaxRunningPerTenantRuns, pr.maxRunning)
		res.MaxRunningPerTenant = max(res.MaxRunningPerTenant, pr.maxRunning)
		res.ExactJobs, res.ExactRanTwice = pr.jobs, max(res.ExactRanTwice, pr.ranTwice)
		exactRates = append(exactRates, pr.jobsPerS)
		atCapShares = append(atCapShares, pr.atCapShare)
		p50s, p99s = append(p50s, percentile(pr.reaction, 50)), append(p99s, percentile(pr.reaction, 99))
		admitP50s, admitP99s = append(admitP50s, percentile(pr.admit, 50)), append(admitP99s, percentile(pr.admit, 99))
		fetchP50s, fetchP99s = append(fetchP50s, percentile(pr.fetch, 50)), append(fetchP99s, percentile(pr.fetch, 99))
		res.ReactionSamples = len(pr.reaction)
		if len(pr.reaction) > 0 {
			res.ReactionMaxMs = max(res.ReactionMaxMs, round(pr.reaction[len(pr.reaction)-1], 2))
		}
		for _, rt := range pr.rates {
			rateMax[rt.Tenant] = max(rateMax[rt.Tenant], rt.MaxStarts)
			rateBurst[rt.Tenant] = max(rateBurst[rt.Tenant], rt.WithBurst)
			rateExcess[rt.Tenant] = max(rateExcess[rt.Tenant], rt.BucketExcess)
			rateMeans[rt.Tenant] = append(rateMeans[rt.Tenant], rt.MeanPerS)
			if run == 0 {
				res.RateTenants = append(res.RateTenants, RateTenant{Tenant: rt.Tenant, Limit: rt.Limit})
			}
		}

		// A different order each run: no variant always follows another.
		order := slices.Clone(limitsVariants)
		for range run % len(order) {
			order = append(order[1:], order[0])
		}
		for _, v := range order {
			stage("work conservation, " + v)
			vr, err := e.limitsVariant(ctx, cfg, v, backlog, sz, false)
			if err != nil {
				return res, fmt.Errorf("limits %s: %w", v, err)
			}
			res.variantRuns[v] = append(res.variantRuns[v], vr)
		}
		for _, v := range []string{variantCaps, variantSnooze} {
			stage("capped tenants alone, " + v)
			vr, err := e.limitsVariant(ctx, cfg, v, backlog, sz, true)
			if err != nil {
				return res, fmt.Errorf("limits %s alone: %w", v, err)
			}
			res.aloneRuns[v] = append(res.aloneRuns[v], vr)
		}
	}
	res.ExactPass = res.MaxRunningPerTenant <= limitsCap && res.ExactJobs == sz.exactTenants*sz.exactJobs && res.ExactRanTwice == 0
	res.ExactJobsPerS = round(median(exactRates), 1)
	res.ExactAtCapShare = orZero(atCapShares, 3)
	res.ReactionP50Ms, res.ReactionP99Ms = orZero(p50s, 2), orZero(p99s, 2)
	res.ReactionAdmitP50Ms, res.ReactionAdmitP99Ms = orZero(admitP50s, 2), orZero(admitP99s, 2)
	res.ReactionFetchP50Ms, res.ReactionFetchP99Ms = orZero(fetchP50s, 2), orZero(fetchP99s, 2)
	for i, rt := range res.RateTenants {
		rt.MaxStarts = rateMax[rt.Tenant]
		rt.WithBurst = rateBurst[rt.Tenant]
		rt.BucketExcess = round(rateExcess[rt.Tenant], 2)
		res.RateBucketExcess = max(res.RateBucketExcess, rt.BucketExcess)
		rt.MeanPerS = round(median(rateMeans[rt.Tenant]), 2)
		res.RateTenants[i] = rt
		limit, err := limits.ParseRate(rt.Limit)
		if err != nil {
			return res, err
		}
		over := rt.MaxStarts - limit.Count
		if i == 0 || over > res.RateMaxOver {
			res.RateMaxOver = over
		}
	}
	for _, v := range limitsVariants {
		res.Variants[v] = summarizeVariant(res.variantRuns[v])
	}
	for v, runs := range res.aloneRuns {
		a := LimitsAlone{Jobs: conserveCapped * sz.aloneJobs, Done: conserveCapped * sz.aloneJobs}
		var secs, p50, p99 []float64
		for _, r := range runs {
			a.Done = min(a.Done, r.aloneDone)
			secs = append(secs, r.aloneSeconds)
			p50, p99 = append(p50, r.waitP50), append(p99, r.waitP99)
			a.MaxRunning = max(a.MaxRunning, r.maxRunning)
		}
		a.Seconds = orZero(secs, 2)
		a.IdleP50Ms, a.IdleP99Ms = orZero(p50, 2), orZero(p99, 2)
		res.Alone[v] = a
	}
	res.summarizeRatios()
	return res, nil
}

// summarizeRatios sets the throughput ratios from the variants' runs.
func (res *LimitsResult) summarizeRatios() {
	res.WorkConservingRatioRuns = res.ratioRuns(variantCaps, variantNoLimits)
	res.NoLimitsRatioRuns = res.ratioRuns(variantNoLimits, variantTriggerOff)
	res.SnoozeThroughputRatioRuns = res.ratioRuns(variantSnooze, variantNoLimits)
	res.WorkConservingRatio = orZero(res.WorkConservingRatioRuns, 3)
	res.NoLimitsRatio = orZero(res.NoLimitsRatioRuns, 3)
	res.SnoozeThroughputRatio = orZero(res.SnoozeThroughputRatioRuns, 3)
}

// ratioRuns is, for each run, variant a's jobs/s over variant b's in that
// run; a run in which b completed nothing has no ratio and is left out
// (one in which a completed nothing is 0, and counts).
func (res *LimitsResult) ratioRuns(a, b string) []float64 {
	as, bs := res.variantRuns[a], res.variantRuns[b]
	out := make([]float64, 0, min(len(as), len(bs)))
	for i := range min(len(as), len(bs)) {
		if bs[i].jobsPerS > 0 {
			out = append(out, round(as[i].jobsPerS/bs[i].jobsPerS, 3))
		}
	}
	return out
}

// orZero is the median of xs rounded to d decimals, 0 for none (JSON
// cannot carry NaN).
func orZero(xs []float64, d int) float64 {
	xs = slices.DeleteFunc(slices.Clone(xs), math.IsNaN)
	if len(xs) == 0 {
		return 0
	}
	return round(median(xs), d)
}

func summarizeVariant(runs []limitsVariantRun) LimitsVariant {
	var v LimitsVariant
	var jobs, capped, uncapped, p50, p99, idle, snoozes []float64
	v.UncappedLeft = math.MaxInt
	for _, r := range runs {
		jobs, capped, uncapped = append(jobs, r.jobsPerS), append(capped, r.cappedPerS), append(uncapped, r.uncappedPerS)
		v.JobsPerSRuns = append(v.JobsPerSRuns, r.jobsPerS)
		p50, p99, idle = append(p50, r.waitP50), append(p99, r.waitP99), append(idle, r.idleShare)
		snoozes = append(snoozes, r.snoozes)
		v.CappedMaxRunning = max(v.CappedMaxRunning, r.maxRunning)
		v.UncappedLeft = min(v.UncappedLeft, r.uncappedLeft)
	}
	if len(runs) == 0 {
		v.UncappedLeft = 0
	}
	v.JobsPerS, v.CappedJobsPerS, v.UncappedJobsPerS = orZero(jobs, 1), orZero(capped, 1), orZero(uncapped, 1)
	v.CappedWaitP50Ms, v.CappedWaitP99Ms, v.CappedIdleShare = orZero(p50, 2), orZero(p99, 2), orZero(idle, 3)
	v.Snoozes = orZero(snoozes, 0)
	return v
}

// conserveBacklog is how many jobs each tenant of the work-conservation
// phase queues: half as much again as the nominal capacity (workers of 20
// ms) can run in the warm-up and the window, shared by the uncapped
// tenants alone, so that every tenant still has work at the window's end.
func conserveBacklog(workers int, sz limitsSizes) int {
	capacity := float64(workers) * 1000 / fairnessJobMs
	return int(math.Ceil(1.5 * capacity * (sz.warm + sz.window).Seconds() / conserveUncapped))
}

// limitsProcessRun is what one run measured through the worker processes.
type limitsProcessRun struct {
	maxRunning, jobs, ranTwice int
	jobsPerS, atCapShare       float64
	reaction, admit, fetch     []float64 // ms, sorted
	rates                      []RateTenant
}

// limitsProcesses starts two worker processes, runs the exactness,
// reaction and rate phases in them, and stops them.
func (e *env) limitsProcesses(ctx context.Context, sz limitsSizes, stage func(string)) (r limitsProcessRun, err error) {
	if err := e.resetLimits(ctx); err != nil {
		return r, err
	}
	pe := &env{Schema: e.Schema, opts: e.opts}
	pe.opts.WorkerEnv = append(slices.Clone(e.opts.WorkerEnv),
		fmt.Sprintf("%sQUEUE_PRIORITY_WORKERS=%d", e.opts.Service.EnvPrefix(), sz.exactWorkers),
		fmt.Sprintf("DATABASE_MAX_CONNS=%d", limitsProcessConns), "QUEUE_PRIORITY_FAIR_SHARE=true")
	_, stop, err := pe.startWorkers(ctx, 2, false)
	if err != nil {
		return r, err
	}
	defer func() {
		if stopErr := stop(); err == nil {
			err = stopErr
		}
	}()
	client, err := e.producerClient(e.Pool)
	if err != nil {
		return r, err
	}

	stage("exactness")
	if err := e.recordLimits(ctx, limits.Values{MaxRunning: limitsCap}); err != nil {
		return r, err
	}
	tenants := tenantNames("t", sz.exactTenants)
	start := time.Now()
	if err := e.insertLimited(ctx, client, tenants, sz.exactJobs); err != nil {
		return r, err
	}
	total := sz.exactTenants * sz.exactJobs
	if err := e.waitAllDone(ctx, 2*time.Minute+time.Duration(total)*fairnessJobMs*time.Millisecond); err != nil {
		return r, fmt.Errorf("exactness: %w", err)
	}
	elapsed := time.Since(start)
	execs, err := e.tenantRuns(ctx)
	if err != nil {
		return r, err
	}
	for _, m := range maxRunning(execs) {
		r.maxRunning = max(r.maxRunning, m)
	}
	r.atCapShare = atLevelShare(execs, limitsCap)
	byJob := map[int64]int{}
	for _, x := range execs {
		byJob[x.jobID]++
	}
	r.jobs = len(byJob)
	for _, n := range byJob {
		if n > 1 {
			r.ranTwice++
		}
	}
	r.jobsPerS = round(float64(len(execs))/elapsed.Seconds(), 1)

	stage("reaction")
	if err := e.clearJobs(ctx); err != nil {
		return r, err
	}
	if err := e.insertLimited(ctx, client, tenantNames("r", sz.reactTenants), sz.reactJobs); err != nil {
		return r, err
	}
	if err := e.waitAllDone(ctx, 2*time.Minute); err != nil {
		return r, fmt.Errorf("reaction: %w", err)
	}
	if execs, err = e.tenantRuns(ctx); err != nil {
		return r, err
	}
	r.reaction, r.admit, r.fetch = reactionGaps(execs, limitsCap)

	stage("rate accuracy")
	if err := e.clearJobs(ctx); err != nil {
		return r, err
	}
	if err := e.recordLimits(ctx, limits.Values{Rate: rateDefault}); err != nil {
		return r, err
	}
	rateNames := tenantNames("q", rateTenants)
	for _, tenant := range rateNames[rateTenants/2:] {
		over := rateOverride
		if _, err := limits.SetOverride(ctx, e.Pool, e.opts.Service.Name(), tenant, limits.Override{Rate: &over}); err != nil {
			return r, err
		}
	}
	// Enough for the window at the limit, and the burst.
	perTenant := rateDefault.Count*int(math.Ceil(sz.rateWindow.Seconds())) + 2*rateDefault.Count
	from, err := e.dbNow(ctx)
	if err != nil {
		return r, err
	}
	if err := e.insertLimited(ctx, client, rateNames, perTenant); err != nil {
		return r, err
	}
	if err := sleep(ctx, sz.rateWindow); err != nil {
		return r, err
	}
	to, err := e.dbNow(ctx)
	if err != nil {
		return r, err
	}
	if execs, err = e.tenantRuns(ctx); err != nil {
		return r, err
	}
	starts := map[string][]time.Time{}
	for _, x := range execs {
		if !x.start.Before(from) && x.start.Before(to) {
			starts[x.tenant] = append(starts[x.tenant], x.start)
		}
	}
	for i, tenant := range rateNames {
		limit := rateDefault
		if i >= rateTenants/2 {
			limit = rateOverride
		}
		sorted := slices.SortedFunc(slices.Values(starts[tenant]), time.Time.Compare)
		r.rates = append(r.rates, RateTenant{Tenant: tenant, Limit: limit.String(),
			MaxStarts: maxInWindow(sorted[min(limit.Count, len(sorted)):], limit.Per), WithBurst: maxInWindow(sorted, limit.Per),
			BucketExcess: bucketExcess(sorted, from, limit),
			MeanPerS:     round(float64(len(starts[tenant]))/to.Sub(from).Seconds(), 2)})
	}
	if err := e.clearJobs(ctx); err != nil {
		return r, err
	}
	return r, nil
}

// limitsVariant runs one variant of the work-conservation phase: fresh
// tables, the variant's limits, the backlog queued, two deployments
// started, the window measured.
func (e *env) limitsVariant(ctx context.Context, cfg config.Worker, variant string, backlog int, sz limitsSizes, alone bool) (r limitsVariantRun, err error) {
	if err := e.resetLimits(ctx); err != nil {
		return r, err
	}
	cappedNames, uncappedNames := tenantNames("c", conserveCapped), tenantNames("u", conserveUncapped)
	switch variant {
	case variantCaps:
		one := 1
		for _, tenant := range cappedNames {
			if _, err := limits.SetOverride(ctx, e.Pool, e.opts.Service.Name(), tenant, limits.Override{MaxRunning: &one}); err != nil {
				return r, err
			}
		}
	case variantTriggerOff:
		if _, err := e.Pool.Exec(ctx, `ALTER TABLE `+riverschema.JobTable+` DISABLE TRIGGER `+capTrigger); err != nil {
			return r, fmt.Errorf("disable the cap trigger: %w", err)
		}
		defer func() {
			if _, enableErr := e.Pool.Exec(context.WithoutCancel(ctx), `ALTER TABLE `+riverschema.JobTable+` ENABLE TRIGGER `+capTrigger); enableErr != nil && err == nil {
				err = fmt.Errorf("enable the cap trigger: %w", enableErr)
			}
		}()
	}
	client, err := e.producerClient(e.Pool)
	if err != nil {
		return r, err
	}
	names, perTenant := append(slices.Clone(cappedNames), uncappedNames...), backlog
	if alone {
		names, perTenant = cappedNames, sz.aloneJobs
	}
	if err := e.insertLimited(ctx, client, names, perTenant); err != nil {
		return r, err
	}
	if _, err := e.Pool.Exec(ctx, `ANALYZE `+riverschema.JobTable); err != nil {
		return r, fmt.Errorf("analyze river_job: %w", err)
	}

	var (
		caps  []*tenantCap
		stops []func()
		pools []*pgxpool.Pool
	)
	defer func() {
		for _, stop := range stops {
			stop()
		}
		for _, pool := range pools {
			pool.Close()
		}
	}()
	var aloneFrom time.Time // the capped-alone phase starts with its deployments
	if alone {
		if aloneFrom, err = e.dbNow(ctx); err != nil {
			return r, err
		}
	}
	for range 2 {
		pool, err := e.pool(ctx, limitsDeployConns)
		if err != nil {
			return r, err
		}
		pools = append(pools, pool)
		var adjust []func(*river.Config)
		if variant == variantSnooze {
			c := newTenantCap(1, sz.snooze, sz.snoozeJitter)
			c.only = map[string]bool{}
			for _, tenant := range cappedNames {
				c.only[tenant] = true
			}
			caps = append(caps, c)
			adjust = append(adjust, c.install)
		}
		dep, err := tierqDeployment(cfg, pool, e.opts, adjust...)
		if err != nil {
			return r, err
		}
		stop, err := dep.start(ctx)
		if err != nil {
			return r, err
		}
		stops = append(stops, stop)
	}
	if alone {
		return e.limitsAloneMeasure(ctx, cappedNames, sz, aloneFrom)
	}
	if err := sleep(ctx, sz.warm); err != nil {
		return r, err
	}
	from, err := e.dbNow(ctx)
	if err != nil {
		return r, err
	}
	if err := sleep(ctx, sz.window); err != nil {
		return r, err
	}
	to, err := e.dbNow(ctx)
	if err != nil {
		return r, err
	}
	left := map[string]int{}
	rows, err := e.Pool.Query(ctx, `SELECT metadata->>'`+jobmeta.Tenant+`', count(*) FROM `+riverschema.JobTable+`
		WHERE state <> '`+riverschema.StateCompleted+`' GROUP BY 1`)
	if err != nil {
		return r, fmt.Errorf("count the jobs left: %w", err)
	}
	for rows.Next() {
		var tenant string
		var n int
		if err := rows.Scan(&tenant, &n); err != nil {
			return r, fmt.Errorf("count the jobs left: %w", err)
		}
		left[tenant] = n
	}
	if err := rows.Err(); err != nil {
		return r, fmt.Errorf("count the jobs left: %w", err)
	}
	for _, stop := range stops {
		stop()
	}
	stops = nil
	for _, c := range caps {
		r.snoozes += float64(c.snoozed.Load())
	}

	for _, tenant := range cappedNames {
		if left[tenant] == 0 {
			return r, fmt.Errorf("capped tenant %s ran out of work in the window: queue more", tenant)
		}
	}
	r.uncappedLeft = math.MaxInt
	for _, tenant := range uncappedNames {
		r.uncappedLeft = min(r.uncappedLeft, left[tenant])
	}

	execs, err := e.tenantRuns(ctx)
	if err != nil {
		return r, err
	}
	secs := to.Sub(from).Seconds()
	isCapped := func(tenant string) bool { return slices.Contains(cappedNames, tenant) }
	var done, cappedDone int
	for _, x := range execs {
		if x.done && !x.end.Before(from) && x.end.Before(to) {
			done++
			if isCapped(x.tenant) {
				cappedDone++
			}
		}
	}
	r.jobsPerS = round(float64(done)/secs, 1)
	r.cappedPerS = round(float64(cappedDone)/secs, 1)
	r.uncappedPerS = round(float64(done-cappedDone)/secs, 1)
	byTenant := map[string][]tenantRun{}
	for _, x := range execs {
		if isCapped(x.tenant) {
			byTenant[x.tenant] = append(byTenant[x.tenant], x)
		}
	}
	var waits []float64
	var idle time.Duration
	for _, tenant := range cappedNames {
		gaps := idleGaps(byTenant[tenant], from, to)
		for _, g := range gaps {
			waits = append(waits, float64(g.Microseconds())/1000)
			idle += g
		}
		for _, m := range maxRunning(byTenant[tenant]) {
			r.maxRunning = max(r.maxRunning, m)
		}
	}
	slices.Sort(waits)
	r.waitP50, r.waitP99 = percentile(waits, 50), percentile(waits, 99)
	if len(waits) == 0 {
		r.waitP50, r.waitP99 = 0, 0
	}
	r.idleShare = idle.Seconds() / (secs * float64(conserveCapped))
	return r, nil
}

// limitsAloneMeasure measures the capped-alone phase once the deployments
// run: until every capped tenant's job has completed or sz.aloneWindow
// has passed, how many completed, and each tenant's stretches with work
// left and no job running.
func (e *env) limitsAloneMeasure(ctx context.Context, cappedNames []string, sz limitsSizes, from time.Time) (r limitsVariantRun, err error) {
	// Jobs left when the window ends are the comparator's point, not an
	// error; a failing read or a cancelled run is.
	if err := e.waitJobsWhere(ctx, `state <> '`+riverschema.StateCompleted+`'`, time.Until(from.Add(sz.aloneWindow))); err != nil &&
		!errors.Is(err, errJobsLeft) {
		return r, err
	}
	to, err := e.dbNow(ctx)
	if err != nil {
		return r, err
	}
	execs, err := e.tenantRuns(ctx)
	if err != nil {
		return r, err
	}
	byTenant := map[string][]tenantRun{}
	for _, x := range execs {
		byTenant[x.tenant] = append(byTenant[x.tenant], x)
	}
	last := from
	var gaps []float64
	for _, tenant := range cappedNames {
		runs, done := byTenant[tenant], map[int64]bool{}
		end := from
		for _, x := range runs {
			if x.done && x.end.Before(to) {
				done[x.jobID] = true // a job that ran twice is one job done
				end = maxTime(end, x.end)
			}
		}
		r.aloneDone += len(done)
		if len(done) < sz.aloneJobs {
			end = to // work left until the window's end
		}
		last = maxTime(last, end)
		for _, g := range idleGaps(runs, from, end) {
			gaps = append(gaps, float64(g.Microseconds())/1000)
		}
		for _, m := range maxRunning(runs) {
			r.maxRunning = max(r.maxRunning, m)
		}
	}
	slices.Sort(gaps)
	if len(gaps) > 0 {
		r.waitP50, r.waitP99 = percentile(gaps, 50), percentile(gaps, 99)
	}
	r.aloneSeconds = round(last.Sub(from).Seconds(), 2)
	return r, nil
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// tenantNames are n tenant ids: prefix0, prefix1, ….
func tenantNames(prefix string, n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return names
}

// insertLimited inserts n of the limits scenario's jobs for each tenant,
// tenant after tenant, in batches of tenantsInsertBatch (the cap trigger
// decides at the insert which land held).
func (e *env) insertLimited(ctx context.Context, client *river.Client[pgx.Tx], tenants []string, n int) error {
	var params []river.InsertManyParams
	flush := func() error {
		if len(params) == 0 {
			return nil
		}
		if _, err := client.InsertMany(ctx, params); err != nil {
			return fmt.Errorf("insert %d jobs: %w", len(params), err)
		}
		params = params[:0]
		return nil
	}
	for _, tenant := range tenants {
		for range n {
			params = append(params, river.InsertManyParams{Args: limitsArgs, InsertOpts: e.opts.Service.InsertOpts(tiers.Enterprise, tenant, false)})
			if len(params) == tenantsInsertBatch {
				if err := flush(); err != nil {
					return err
				}
			}
		}
	}
	return flush()
}

// resetLimits empties the job tables, the executions, the fair-share
// heartbeats and every limit: only while no worker runs.
func (e *env) resetLimits(ctx context.Context) error {
	if _, err := e.Pool.Exec(ctx, `TRUNCATE `+riverschema.JobTable+`, dead_letter_jobs, job_escalations, fair_share_slots, load_test_executions, tenant_limits`); err != nil {
		return fmt.Errorf("reset tables: %w", err)
	}
	return e.recordLimits(ctx, limits.Values{})
}

// recordLimits records v as the enterprise tier's limits of the service
// under test (the scheduler's part, limits.Record), no others.
func (e *env) recordLimits(ctx context.Context, v limits.Values) error {
	name := e.opts.Service.Name()
	return limits.Record(ctx, e.Pool, limits.Config{Services: map[string]limits.Tiers{name: {tiers.Enterprise: v}}}, []string{name}, "bench")
}

// clearJobs deletes every job not started, waits for the running ones to
// end, and empties the job tables, the executions and the overrides, while
// the worker processes run: their heartbeats stay.
func (e *env) clearJobs(ctx context.Context) error {
	if _, err := e.Pool.Exec(ctx, `DELETE FROM `+riverschema.JobTable+` WHERE state IN ('available', 'pending', 'scheduled', 'retryable')`); err != nil {
		return fmt.Errorf("delete the jobs left: %w", err)
	}
	if err := e.waitJobsWhere(ctx, `state = '`+riverschema.StateRunning+`'`, time.Minute); err != nil {
		return err
	}
	if _, err := e.Pool.Exec(ctx, `TRUNCATE `+riverschema.JobTable+`, load_test_executions, tenant_limits`); err != nil {
		return fmt.Errorf("clear tables: %w", err)
	}
	return nil
}

// waitAllDone waits until every job has completed.
func (e *env) waitAllDone(ctx context.Context, timeout time.Duration) error {
	return e.waitJobsWhere(ctx, `state <> '`+riverschema.StateCompleted+`'`, timeout)
}

// waitJobsWhere polls every 20 ms until no job matches where.
// errJobsLeft is waitJobsWhere's error when jobs are still left at the
// timeout.
var errJobsLeft = errors.New("jobs left")

func (e *env) waitJobsWhere(ctx context.Context, where string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var n int
		if err := e.Pool.QueryRow(ctx, `SELECT count(*) FROM `+riverschema.JobTable+` WHERE `+where).Scan(&n); err != nil {
			return fmt.Errorf("count jobs: %w", err)
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %d jobs still %s after %s", errJobsLeft, n, strings.TrimSpace(where), timeout)
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
}

// dbNow is the database's clock now, the clock of the executions' times.
func (e *env) dbNow(ctx context.Context) (time.Time, error) {
	var now time.Time
	if err := e.Pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
		return now, fmt.Errorf("read the database's clock: %w", err)
	}
	return now, nil
}

// tenantRun is one recorded execution of a load-test job: its tenant and
// its start and end (end is zero while done is false: still running).
type tenantRun struct {
	jobID      int64
	tenant     string
	start, end time.Time
	done       bool
	// scheduled is the job's scheduled_at: for a job fair share's pass
	// admitted, when it was admitted (the pass sets it to its now()).
	// attempted is River's attempted_at: when its fetch took the job (the
	// fetch's now()).
	scheduled, attempted time.Time
}

// tenantRuns reads every recorded execution with its job's tenant.
func (e *env) tenantRuns(ctx context.Context) ([]tenantRun, error) {
	rows, err := e.Pool.Query(ctx, `
		SELECT x.job_id, coalesce(j.metadata->>'`+jobmeta.Tenant+`', ''), x.started_at, x.completed_at, j.scheduled_at,
		       coalesce(j.attempted_at, x.started_at)
		FROM load_test_executions AS x JOIN `+riverschema.JobTable+` AS j ON j.id = x.job_id`)
	if err != nil {
		return nil, fmt.Errorf("read executions: %w", err)
	}
	var out []tenantRun
	for rows.Next() {
		var x tenantRun
		var end *time.Time
		if err := rows.Scan(&x.jobID, &x.tenant, &x.start, &end, &x.scheduled, &x.attempted); err != nil {
			return nil, fmt.Errorf("read executions: %w", err)
		}
		if end != nil {
			x.end, x.done = *end, true
		}
		out = append(out, x)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read executions: %w", err)
	}
	return out, nil
}

// maxRunning is, by tenant, the most executions running at any instant
// (an execution not done runs on; one that ends at the instant another
// starts is not counted with it).
func maxRunning(execs []tenantRun) map[string]int {
	type event struct {
		at    time.Time
		delta int
	}
	events := map[string][]event{}
	for _, x := range execs {
		events[x.tenant] = append(events[x.tenant], event{x.start, 1})
		if x.done {
			events[x.tenant] = append(events[x.tenant], event{x.end, -1})
		}
	}
	out := map[string]int{}
	for tenant, evs := range events {
		slices.SortFunc(evs, func(a, b event) int {
			if c := a.at.Compare(b.at); c != 0 {
				return c
			}
			return a.delta - b.delta // ends first
		})
		running, most := 0, 0
		for _, ev := range evs {
			running += ev.delta
			most = max(most, running)
		}
		out[tenant] = most
	}
	return out
}

// atLevelShare is, over every tenant of execs (all done), the time it had
// level or more executions running over the time it had at least one.
func atLevelShare(execs []tenantRun, level int) float64 {
	type event struct {
		at    time.Time
		delta int
	}
	events := map[string][]event{}
	for _, x := range execs {
		if x.done {
			events[x.tenant] = append(events[x.tenant], event{x.start, 1}, event{x.end, -1})
		}
	}
	var busy, atLevel time.Duration
	for _, evs := range events {
		slices.SortFunc(evs, func(a, b event) int {
			if c := a.at.Compare(b.at); c != 0 {
				return c
			}
			return a.delta - b.delta
		})
		running := 0
		for i, ev := range evs {
			if i > 0 {
				d := ev.at.Sub(evs[i-1].at)
				if running >= 1 {
					busy += d
				}
				if running >= level {
					atLevel += d
				}
			}
			running += ev.delta
		}
	}
	if busy == 0 {
		return 0
	}
	return atLevel.Seconds() / busy.Seconds()
}

// reactionGaps pairs, per tenant, each start beyond the tenant's first cap
// with the end that made room for it (the i-th start, in time order, with
// the (i − cap)-th end), and returns the gaps in ms and, for each, the
// time from the end until the job was admitted (its scheduled_at: the
// pass's) and until River's fetch took it (attempted_at), each sorted.
func reactionGaps(execs []tenantRun, limit int) (gaps, admit, fetch []float64) {
	starts, ends := map[string][]tenantRun{}, map[string][]time.Time{}
	for _, x := range execs {
		starts[x.tenant] = append(starts[x.tenant], x)
		if x.done {
			ends[x.tenant] = append(ends[x.tenant], x.end)
		}
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	for tenant, ss := range starts {
		es := ends[tenant]
		slices.SortFunc(ss, func(a, b tenantRun) int { return a.start.Compare(b.start) })
		slices.SortFunc(es, time.Time.Compare)
		for i := limit; i < len(ss) && i-limit < len(es); i++ {
			end := es[i-limit]
			gaps = append(gaps, ms(ss[i].start.Sub(end)))
			admit = append(admit, ms(ss[i].scheduled.Sub(end)))
			fetch = append(fetch, ms(ss[i].attempted.Sub(end)))
		}
	}
	slices.Sort(gaps)
	slices.Sort(admit)
	slices.Sort(fetch)
	return gaps, admit, fetch
}

// idleGaps are the stretches of [from, to) in which none of execs (one
// tenant's) was running.
func idleGaps(execs []tenantRun, from, to time.Time) []time.Duration {
	slices.SortFunc(execs, func(a, b tenantRun) int { return a.start.Compare(b.start) })
	var gaps []time.Duration
	busyUntil := from
	for _, x := range execs {
		end := x.end
		if !x.done || end.After(to) {
			end = to
		}
		if !end.After(from) {
			continue
		}
		if x.start.After(busyUntil) {
			start := x.start
			if start.After(to) {
				start = to
			}
			gaps = append(gaps, start.Sub(busyUntil))
		}
		if end.After(busyUntil) {
			busyUntil = end
		}
		if !busyUntil.Before(to) {
			break
		}
	}
	if busyUntil.Before(to) {
		gaps = append(gaps, to.Sub(busyUntil))
	}
	return slices.DeleteFunc(gaps, func(d time.Duration) bool { return d <= 0 })
}

// bucketExcess replays starts (sorted) through limit's token bucket, full
// at from: each start takes a token, refilled at Count per Per up to Count.
// It returns how far below 0 the tokens went, 0 when never.
func bucketExcess(starts []time.Time, from time.Time, limit limits.Rate) float64 {
	tokens, at, deepest := float64(limit.Count), from, 0.0
	for _, s := range starts {
		if s.After(at) {
			tokens = min(float64(limit.Count), tokens+float64(limit.Count)*s.Sub(at).Seconds()/limit.Per.Seconds())
			at = s
		}
		tokens--
		deepest = min(deepest, tokens)
	}
	return -deepest
}

// maxInWindow is the most of starts (unsorted) within any interval of
// length per: [s, s+per).
func maxInWindow(starts []time.Time, per time.Duration) int {
	s := slices.SortedFunc(slices.Values(starts), time.Time.Compare)
	most, j := 0, 0
	for i := range s {
		for s[i].Sub(s[j]) >= per {
			j++
		}
		most = max(most, i-j+1)
	}
	return most
}
