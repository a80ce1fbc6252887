// Package scheduler builds the River client of the scheduler deployment, the
// only leader-eligible client in a tierq installation (docs/scheduling.md).
//
// It registers every job kind, so that River's rescuer, which runs on the
// leader, retries a stuck job of any kind instead of discarding it as unknown;
// it works only its own queue, "scheduler". Its periodic jobs run on the
// leader only, each unique by period so that a leader hand-over never doubles
// one: the aging and escalation sweeps on fixed intervals, and the cron jobs
// (re-analysis of stale targets, retention) on robfig/cron schedules, and
// the dead-letter drain (package dlq) with its depth alert.
package scheduler

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/tierq/tierq/aging"
	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/dlq"
	"github.com/tierq/tierq/escalation"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/metrics"
	"github.com/tierq/tierq/routing"
)

// Queue is the scheduler's own queue: its periodic jobs run there.
const Queue = "scheduler"

// periodicMaxAttempts bounds retries of a periodic job: the next period runs
// it again anyway, so a failure is retried a little and then shows up as a
// discarded job.
const periodicMaxAttempts = 3

// RiverConfig is the River client configuration of the scheduler; its sweeps
// count what they change in m.
func RiverConfig(cfg config.Scheduler, pool *pgxpool.Pool, logger *slog.Logger, m *metrics.Scheduler) *river.Config {
	workers := river.NewWorkers()
	// Every service's kinds, never worked here (their queues are not served),
	// so that the rescuer on this leader knows them.
	river.AddWorker(workers, jobs.NewAnalysisWorker(pool, logger))
	river.AddWorker(workers, jobs.NewSpecViewWorker(pool, logger))
	river.AddWorker(workers, jobs.NewLoadTestWorker(pool))

	river.AddWorker(workers, &AgingSweepWorker{pool: pool, logger: logger, metrics: m, settings: aging.Settings{
		Step: cfg.AgingStep, MaxPriority: cfg.AgingMaxPriority, Queues: routing.Queues(), Batch: cfg.SweepBatch,
	}})
	river.AddWorker(workers, &EscalationSweepWorker{pool: pool, logger: logger, metrics: m,
		rules: escalation.Rules(cfg.EscalateScheduledAfter, cfg.EscalateDefaultAfter), batch: cfg.SweepBatch})
	river.AddWorker(workers, &ReanalyzeStaleWorker{pool: pool, logger: logger,
		staleAfter: cfg.ReanalyzeStaleAfter, maxAttempts: cfg.MaxAttempts})
	river.AddWorker(workers, &RetentionWorker{pool: pool, logger: logger, period: cfg.RetentionPeriod, batch: cfg.SweepBatch})
	id := clientID()
	river.AddWorker(workers, &DLQDrainWorker{pool: pool, logger: logger, batch: cfg.DLQDrainBatch,
		alerter: dlq.NewAlerter(dlq.AlertConfig{
			Threshold:  cfg.DLQAlertThreshold,
			WebhookURL: cfg.DLQAlertWebhookURL,
			Interval:   cfg.DLQAlertInterval,
			Timeout:    cfg.DLQAlertTimeout,
			Source:     id,
		}, logger)})

	return &river.Config{
		// Never: discarded jobs leave river_job only through the
		// dead-letter drain (package dlq), never through River's cleaner.
		DiscardedJobRetentionPeriod: -1,
		FetchOnlyKnownKinds:         true,
		ID:                          id,
		JobTimeout:                  cfg.JobTimeout,
		Logger:                      logger,
		MaxAttempts:                 cfg.MaxAttempts,
		PeriodicJobs:                PeriodicJobs(cfg),
		Queues:                      map[string]river.QueueConfig{Queue: {MaxWorkers: cfg.QueueWorkers}},
		RescueStuckJobsAfter:        cfg.RescueStuckJobsAfter,
		Schema:                      cfg.Schema,
		SoftStopTimeout:             cfg.SoftStopTimeout,
		Workers:                     workers,
	}
}

// clientID names this process in river_leader
// ("scheduler_<host>_<pid>_<start unix time>"), so an operator, or a test,
// can tell which replica leads. The start time keeps a container restarted
// in place (same host name, pid 1) from reusing a dead leader's name.
func clientID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	id := fmt.Sprintf("scheduler_%s_%d_%d", host, os.Getpid(), time.Now().Unix())
	if len(id) > 100 { // River's limit
		id = id[len(id)-100:]
	}
	return id
}

// PeriodicJobs are the scheduler's periodic jobs for cfg. A sweep whose
// interval is 0, or escalation with both rules off, is left out.
//
// Each periodic job is unique by period, so that no period runs twice:
//
//   - the sweeps use their interval as the period. They run when a
//     leadership term starts too (RunOnStart). River keys such a job by the
//     time it is built, up to 100ms before its run time, so a hand-over can
//     on rare occasions skip one sweep; sweeps are idempotent and the next
//     one comes an interval later.
//   - the cron jobs are keyed by their slot: the run time of the schedule
//     they belong to (CronSlot), set as the job's scheduled_at, with the
//     shortest gap between two slots as the period. Both replicas compute the
//     same slot for the same run, so a slot runs once; a new leader runs the
//     latest slot if it is at most CronCatchUp old and has not run (a slot
//     that fell into the hand-over).
func PeriodicJobs(cfg config.Scheduler) []*river.PeriodicJob {
	var periodic []*river.PeriodicJob
	add := func(id string, schedule river.PeriodicSchedule, constructor river.PeriodicJobConstructor) {
		periodic = append(periodic, river.NewPeriodicJob(schedule, constructor, &river.PeriodicJobOpts{ID: id, RunOnStart: true}))
	}
	interval := func(id string, every time.Duration, args river.JobArgs) {
		add(id, river.PeriodicInterval(every), func() (river.JobArgs, *river.InsertOpts) {
			return args, &river.InsertOpts{
				MaxAttempts: periodicMaxAttempts,
				Queue:       Queue,
				UniqueOpts:  river.UniqueOpts{ByPeriod: every},
			}
		})
	}
	cronJob := func(id string, schedule river.PeriodicSchedule, args river.JobArgs) {
		period := ShortestGap(schedule, time.Now())
		add(id, schedule, func() (river.JobArgs, *river.InsertOpts) {
			slot, ok := CronSlot(schedule, time.Now())
			if !ok {
				return nil, nil // no slot recent enough: nothing to catch up
			}
			return args, &river.InsertOpts{
				MaxAttempts: periodicMaxAttempts,
				Queue:       Queue,
				ScheduledAt: slot,
				UniqueOpts:  river.UniqueOpts{ByPeriod: period},
			}
		})
	}
	if cfg.AgingInterval > 0 {
		interval(KindAgingSweep, cfg.AgingInterval, AgingSweepArgs{})
	}
	if cfg.EscalateScheduledAfter > 0 || cfg.EscalateDefaultAfter > 0 {
		interval(KindEscalationSweep, cfg.EscalationInterval, EscalationSweepArgs{})
	}
	interval(KindDLQDrain, cfg.DLQDrainInterval, DLQDrainArgs{})
	cronJob(KindReanalyzeStale, cfg.ReanalyzeSchedule(), ReanalyzeStaleArgs{})
	cronJob(KindRetention, cfg.RetentionSchedule(), RetentionArgs{})
	return periodic
}

// CronCatchUp is how old a cron slot may be and still be run by a scheduler
// that becomes leader after it: long enough for any hand-over, short enough
// that a scheduler starting after a long outage does not run old slots.
const CronCatchUp = 15 * time.Minute

// CronSlot is the cron slot a run at now belongs to: the latest run time of
// schedule at or before now (River builds a periodic job up to 100ms before
// its run time, hence a small allowance), and false when that is more than
// CronCatchUp ago or the schedule has no run in the last 400 days.
func CronSlot(schedule river.PeriodicSchedule, now time.Time) (time.Time, bool) {
	at := now.Add(200 * time.Millisecond)
	for lookback := time.Minute; lookback <= 400*24*time.Hour; lookback *= 2 {
		slot := schedule.Next(at.Add(-lookback))
		if slot.After(at) {
			continue // no run in this window; look further back
		}
		for next := schedule.Next(slot); !next.After(at); next = schedule.Next(slot) {
			slot = next
		}
		return slot, now.Sub(slot) <= CronCatchUp
	}
	return time.Time{}, false
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
