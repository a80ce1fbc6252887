// Package scheduler builds the River client of the scheduler deployment, the
// only leader-eligible client in a tierq installation (docs/scheduling.md).
//
// It registers every job kind, so that River's rescuer, which runs on the
// leader, retries a stuck job of any kind instead of discarding it as unknown;
// it works only its own queue, "scheduler". Its periodic jobs run on the
// leader only, each unique by period so that a leader hand-over never doubles
// one: the aging and escalation sweeps on fixed intervals, and the cron jobs
// (re-analysis of stale targets, retention) on robfig/cron schedules.
package scheduler

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/tierq/tierq/aging"
	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/escalation"
	"github.com/tierq/tierq/jobs"
)

// Queue is the scheduler's own queue: its periodic jobs run there.
const Queue = "scheduler"

// periodicMaxAttempts bounds retries of a periodic job: the next period runs
// it again anyway, so a failure is retried a little and then shows up as a
// discarded job.
const periodicMaxAttempts = 3

// RiverConfig is the River client configuration of the scheduler.
func RiverConfig(cfg config.Scheduler, pool *pgxpool.Pool, logger *slog.Logger) *river.Config {
	workers := river.NewWorkers()
	// Every service's kinds, never worked here (their queues are not served),
	// so that the rescuer on this leader knows them.
	river.AddWorker(workers, jobs.NewAnalysisWorker(pool, logger))
	river.AddWorker(workers, jobs.NewSpecViewWorker(pool, logger))
	river.AddWorker(workers, &jobs.LoadTestWorker{})

	river.AddWorker(workers, &AgingSweepWorker{pool: pool, logger: logger, settings: aging.Settings{
		Step: cfg.AgingStep, MaxPriority: cfg.AgingMaxPriority, Batch: cfg.SweepBatch,
	}})
	river.AddWorker(workers, &EscalationSweepWorker{pool: pool, logger: logger,
		rules: escalation.Rules(cfg.EscalateScheduledAfter, cfg.EscalateDefaultAfter), batch: cfg.SweepBatch})
	river.AddWorker(workers, &ReanalyzeStaleWorker{pool: pool, logger: logger,
		staleAfter: cfg.ReanalyzeStaleAfter, maxAttempts: cfg.MaxAttempts})
	river.AddWorker(workers, &RetentionWorker{pool: pool, logger: logger, period: cfg.RetentionPeriod, batch: cfg.SweepBatch})

	return &river.Config{
		FetchOnlyKnownKinds:  true,
		ID:                   clientID(),
		JobTimeout:           cfg.JobTimeout,
		Logger:               logger,
		MaxAttempts:          cfg.MaxAttempts,
		PeriodicJobs:         PeriodicJobs(cfg),
		Queues:               map[string]river.QueueConfig{Queue: {MaxWorkers: cfg.QueueWorkers}},
		RescueStuckJobsAfter: cfg.RescueStuckJobsAfter,
		Schema:               cfg.Schema,
		SoftStopTimeout:      cfg.SoftStopTimeout,
		Workers:              workers,
	}
}

// NewClient returns the scheduler's River client.
func NewClient(cfg config.Scheduler, pool *pgxpool.Pool, logger *slog.Logger) (*river.Client[pgx.Tx], error) {
	client, err := river.NewClient(riverpgxv5.New(pool), RiverConfig(cfg, pool, logger))
	if err != nil {
		return nil, fmt.Errorf("new river client: %w", err)
	}
	return client, nil
}

// clientID names this process in river_leader ("scheduler_<host>_<pid>"), so
// an operator, or a test, can tell which replica leads.
func clientID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	id := fmt.Sprintf("scheduler_%s_%d", host, os.Getpid())
	if len(id) > 100 { // River's limit
		id = id[len(id)-100:]
	}
	return id
}

// PeriodicJobs are the scheduler's periodic jobs for cfg. A sweep whose
// interval is 0, or escalation with both rules off, is left out. Each also
// runs when a leadership term starts: unique by period, that inserts nothing
// when the period already had its run, and catches up a run that fell into
// the hand-over otherwise.
func PeriodicJobs(cfg config.Scheduler) []*river.PeriodicJob {
	var periodic []*river.PeriodicJob
	add := func(id string, schedule river.PeriodicSchedule, period time.Duration, args river.JobArgs) {
		opts := &river.InsertOpts{
			MaxAttempts: periodicMaxAttempts,
			Queue:       Queue,
			UniqueOpts:  river.UniqueOpts{ByPeriod: period},
		}
		periodic = append(periodic, river.NewPeriodicJob(schedule,
			func() (river.JobArgs, *river.InsertOpts) { return args, opts },
			&river.PeriodicJobOpts{ID: id, RunOnStart: true}))
	}
	if cfg.AgingInterval > 0 {
		add(KindAgingSweep, river.PeriodicInterval(cfg.AgingInterval), cfg.AgingInterval, AgingSweepArgs{})
	}
	if cfg.EscalateScheduledAfter > 0 || cfg.EscalateDefaultAfter > 0 {
		add(KindEscalationSweep, river.PeriodicInterval(cfg.EscalationInterval), cfg.EscalationInterval, EscalationSweepArgs{})
	}
	reanalyze, retention := cfg.ReanalyzeSchedule(), cfg.RetentionSchedule()
	add(KindReanalyzeStale, reanalyze, ShortestGap(reanalyze, time.Now()), ReanalyzeStaleArgs{})
	add(KindRetention, retention, ShortestGap(retention, time.Now()), RetentionArgs{})
	return periodic
}

// ShortestGap is the shortest time between two runs of schedule among its
// next 1000 runs after from (at least one second, River's smallest unique
// period). As the ByPeriod of a cron job it makes two runs of one cron slot
// collide, while two different slots never do: slots at least one period
// apart never share a period bucket.
func ShortestGap(schedule river.PeriodicSchedule, from time.Time) time.Duration {
	shortest := time.Duration(0)
	prev := schedule.Next(from)
	for range 1000 {
		next := schedule.Next(prev)
		if gap := next.Sub(prev); gap > 0 && (shortest == 0 || gap < shortest) {
			shortest = gap
		}
		prev = next
	}
	return max(shortest, time.Second)
}
