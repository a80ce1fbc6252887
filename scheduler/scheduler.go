// Package scheduler builds the River client of the scheduler deployment, the
// only leader-eligible client in a tierq installation (docs/scheduling.md).
//
// It serves the services of a service.Registry without naming any of them.
// It registers every job kind of every service, so that River's rescuer,
// which runs on the leader, retries a stuck job of any kind instead of
// discarding it as unknown; it works only its own queue, "scheduler". Its
// periodic jobs run on the leader only, each unique by period so that a
// leader hand-over never doubles one: the aging and escalation sweeps over
// the services' queues on fixed intervals, the dead-letter drain (package
// dlq) with its depth alert, and every service's own periodic jobs
// (service.Config.PeriodicJobs; CronJob makes a cron job of the scheduler's
// queue, as the reference app's maintenance jobs are).
//
// RiverConfig is the River client configuration of the deployment, for a
// main that runs its own River client; Run is the whole process (connect,
// lead, watch the leadership, metrics, stop on a signal), with the check of
// Config.RescueStuckJobsAfter against every kind's timeout (Timeouts: each
// kind declares its own, service.Timeout). A team's scheduler is a few
// lines of its main:
//
//	return scheduler.Run(ctx, scheduler.Config{
//		Registry:   registry, // the team's service.Registry
//		PoolConfig: poolConfig,
//		Logger:     logger,
//	})
//
// A Config is built in Go from the registry and plain values (see the
// example), or from the environment by package config
// (config.Scheduler.Config), which this package does not import.
package scheduler

import (
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/tierq/tierq/metrics"
	"github.com/tierq/tierq/service"
)

// Queue is the scheduler's own queue: its periodic jobs run there.
const Queue = "scheduler"

// periodicMaxAttempts bounds retries of a periodic job: the next period runs
// it again anyway, so a failure is retried a little and then shows up as a
// discarded job.
const periodicMaxAttempts = 3

// RiverConfig is the River client configuration of the scheduler of
// services, the application's registry (Config.Registry, or one of the
// same services built on pool): its sweeps age and escalate the jobs of
// the services' queues and count what they change in m (made with
// services.Queues()). cfg takes its defaults (Config.WithDefaults) and is
// validated (Config.Validate), except that cfg.Registry is not required
// (services is the registry RiverConfig uses; when nil, cfg.Registry) and
// that neither cfg.ExtraKinds' kinds nor the kinds' timeouts are checked
// (see below).
//
// It registers the worker of every kind of services (Registry.AddWorkers:
// the services' kinds, never worked here since their queues are not served,
// so that the rescuer on this leader knows them, and their periodic kinds,
// worked here), of the scheduler's own kinds and of cfg.ExtraKinds(pool),
// each with the timeout its kind declares, and fails when two of them
// clash. A caller may register more kinds in the returned config's Workers
// (service.Kind.AddWorker) before making the client. RescueStuckJobsAfter
// must be longer than Timeouts(services, the extra kinds...), which Run
// checks and a caller of RiverConfig checks itself (CheckKindTimeouts).
func RiverConfig(cfg Config, pool *pgxpool.Pool, services *service.Registry, m *metrics.Scheduler) (*river.Config, error) {
	var extra []service.Kind
	if cfg.ExtraKinds != nil {
		extra = cfg.ExtraKinds(pool)
	}
	return riverConfig(cfg, pool, services, m, extra)
}

// riverConfig is RiverConfig with extra, the kinds cfg.ExtraKinds returned
// for pool.
func riverConfig(cfg Config, pool *pgxpool.Pool, services *service.Registry, m *metrics.Scheduler, extra []service.Kind) (*river.Config, error) {
	if err := cfg.validate(services == nil, false); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	if services == nil {
		services = cfg.Registry
	}
	workers := river.NewWorkers()
	if err := services.AddWorkers(workers); err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	id := clientID()
	// Kind.AddWorker is River's AddWorkerSafely: a service may not take one
	// of the scheduler's kinds.
	for _, k := range ownKinds(&cfg, pool, m, id, services.Queues()) {
		if err := k.AddWorker(workers); err != nil {
			return nil, fmt.Errorf("scheduler: %w", err)
		}
	}
	for _, k := range extra {
		if err := k.AddWorker(workers); err != nil {
			return nil, fmt.Errorf("scheduler: add kinds: %w", err)
		}
	}

	return &river.Config{
		// Never: discarded jobs leave river_job only through the
		// dead-letter drain (package dlq), never through River's cleaner.
		DiscardedJobRetentionPeriod: -1,
		FetchOnlyKnownKinds:         true,
		ID:                          id,
		JobTimeout:                  cfg.JobTimeout,
		Logger:                      cfg.Logger,
		MaxAttempts:                 cfg.MaxAttempts,
		PeriodicJobs:                PeriodicJobs(cfg, services),
		Queues:                      map[string]river.QueueConfig{Queue: {MaxWorkers: cfg.QueueWorkers}},
		RescueStuckJobsAfter:        cfg.RescueStuckJobsAfter,
		Schema:                      cfg.Schema,
		// River waits for running jobs however long without one.
		SoftStopTimeout: max(cfg.SoftStopTimeout, 0),
		Workers:         workers,
	}, nil
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

// PeriodicJobs are the scheduler's own periodic jobs for cfg (with its
// defaults), then every service's (services.PeriodicJobs). Aging turned off
// (a negative AgingInterval), or escalation with both rules off, is left
// out.
//
// Each periodic job of the scheduler is unique by period, so that no period
// runs twice: the sweeps use their interval as the period. They run when a
// leadership term starts too (RunOnStart). River keys such a job by the
// time it is built, up to 100ms before its run time, so a hand-over can on
// rare occasions skip one sweep; sweeps are idempotent and the next one
// comes an interval later. A service's cron jobs made with CronJob are
// unique by their slot.
func PeriodicJobs(cfg Config, services *service.Registry) []*river.PeriodicJob {
	cfg = cfg.WithDefaults()
	var periodic []*river.PeriodicJob
	interval := func(id string, every time.Duration, args river.JobArgs) {
		periodic = append(periodic, river.NewPeriodicJob(river.PeriodicInterval(every), func() (river.JobArgs, *river.InsertOpts) {
			return args, &river.InsertOpts{
				MaxAttempts: periodicMaxAttempts,
				Queue:       Queue,
				UniqueOpts:  river.UniqueOpts{ByPeriod: every},
			}
		}, &river.PeriodicJobOpts{ID: id, RunOnStart: true}))
	}
	if cfg.agingInterval() > 0 {
		interval(KindAgingSweep, cfg.AgingInterval, AgingSweepArgs{})
	}
	if cfg.escalateScheduledAfter() > 0 || cfg.EscalateDefaultAfter > 0 {
		interval(KindEscalationSweep, cfg.EscalationInterval, EscalationSweepArgs{})
	}
	interval(KindDLQDrain, cfg.DLQDrainInterval, DLQDrainArgs{})
	return append(periodic, services.PeriodicJobs()...)
}

// CronJob is a periodic job with ID id that inserts args into the
// scheduler's own queue once per run of schedule (a robfig/cron schedule,
// or any river.PeriodicSchedule): a service's maintenance, whose kind is
// one of the service's PeriodicKinds so that the scheduler works it. It
// runs when a leadership term starts too (RunOnStart), with at most
// periodicMaxAttempts attempts: the next run comes anyway.
//
// The job is keyed by its slot: the run time of the schedule it belongs to
// (CronSlot), set as the job's scheduled_at, with the shortest gap between
// two slots as its unique period. Both replicas compute the same slot for
// the same run, so a slot runs once; a new leader runs the latest slot if it
// is at most CronCatchUp old and has not run (a slot that fell into the
// hand-over).
func CronJob(id string, schedule river.PeriodicSchedule, args river.JobArgs) *river.PeriodicJob {
	period := ShortestGap(schedule, time.Now())
	return river.NewPeriodicJob(schedule, func() (river.JobArgs, *river.InsertOpts) {
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
	}, &river.PeriodicJobOpts{ID: id, RunOnStart: true})
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
