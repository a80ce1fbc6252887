package config

import (
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"time"
	_ "time/tzdata" // CRON_TZ must resolve in minimal containers too

	"github.com/tierq/tierq/scheduler"
	"github.com/tierq/tierq/service"
)

// Scheduler is the configuration of the scheduler deployment (cmd/scheduler):
// River's only leader-eligible client, which runs River's maintenance and
// tierq's periodic work (cron jobs, aging, escalation) on the leader.
type Scheduler struct {
	Database
	Logging
	Jobs
	Observability

	// QueueWorkers is how many of the scheduler's own jobs (sweeps, cron
	// jobs) run at once in one process. Default 2.
	QueueWorkers int `env:"SCHEDULER_QUEUE_WORKERS" envDefault:"2"`

	// RescueStuckJobsAfter is how long a job of any kind may stay `running`
	// before the leader's rescuer retries it (its worker crashed). River's
	// rescuer also leaves a job alone until it is older than its kind's own
	// timeout; this must be longer than every kind's timeout (each kind
	// declares its own, service.Timeout; scheduler.Timeouts has them all,
	// checked by CheckKindTimeouts) and than JOB_TIMEOUT, so that a job is rescued only after its worker
	// has given up on it. Default 1h.
	RescueStuckJobsAfter time.Duration `env:"RESCUE_STUCK_JOBS_AFTER" envDefault:"1h"`

	// CronTZ is the time zone the cron expressions of the application's
	// periodic jobs are read in (Checker.Cron, ParseCron). tierq's own
	// periodic work runs on intervals. Default UTC.
	CronTZ string `env:"CRON_TZ" envDefault:"UTC"`

	// AgingInterval is how often the aging sweep runs; 0 turns aging off.
	AgingInterval time.Duration `env:"AGING_INTERVAL" envDefault:"1m"`
	// AgingStep is the wait that improves a job's priority by one level.
	AgingStep time.Duration `env:"AGING_STEP" envDefault:"5m"`
	// AgingMaxPriority is the best priority aging gives (1 is the best River
	// priority; tierq keeps it for operator escalation by default).
	AgingMaxPriority int `env:"AGING_MAX_PRIORITY" envDefault:"2"`

	// EscalationInterval is how often the escalation sweep runs.
	EscalationInterval time.Duration `env:"ESCALATION_INTERVAL" envDefault:"1m"`
	// EscalateScheduledAfter moves a job waiting longer than this in
	// <svc>_scheduled to <svc>_default; 0 turns the rule off. Default 3h.
	EscalateScheduledAfter time.Duration `env:"ESCALATE_SCHEDULED_AFTER" envDefault:"3h"`
	// EscalateDefaultAfter moves a job waiting longer than this in
	// <svc>_default to <svc>_priority; 0 (the default) turns the rule off,
	// because it hands paid capacity to free work.
	EscalateDefaultAfter time.Duration `env:"ESCALATE_DEFAULT_AFTER" envDefault:"0"`

	// SweepBatch is the most rows one statement of a sweep (aging,
	// escalation, retention) touches. Default 1000.
	SweepBatch int `env:"SWEEP_BATCH" envDefault:"1000"`

	// DLQDrainInterval is how often discarded River jobs move into
	// dead_letter_jobs. Default 30s.
	DLQDrainInterval time.Duration `env:"DLQ_DRAIN_INTERVAL" envDefault:"30s"`
	// DLQDrainBatch is the most jobs one drain statement moves. Default 1000.
	DLQDrainBatch int `env:"DLQ_DRAIN_BATCH" envDefault:"1000"`
	// DLQAlertThreshold is the depth (dead letters not replayed) at which
	// the scheduler warns; 0 turns the alert off. Default 1: any dead letter
	// needs a look.
	DLQAlertThreshold int `env:"DLQ_ALERT_THRESHOLD" envDefault:"1"`
	// DLQAlertWebhookURL receives each alert as a JSON POST (http or https);
	// empty logs only. It is a secret: errors show only its host.
	DLQAlertWebhookURL string `env:"DLQ_ALERT_WEBHOOK_URL" secret:"url"`
	// DLQAlertInterval is the least time between two alerts while the depth
	// stays at or above the threshold. Default 15m.
	DLQAlertInterval time.Duration `env:"DLQ_ALERT_INTERVAL" envDefault:"15m"`
	// DLQAlertTimeout bounds one webhook call, at most MaxDLQAlertTimeout.
	// Default 5s.
	DLQAlertTimeout time.Duration `env:"DLQ_ALERT_TIMEOUT" envDefault:"5s"`

	rescueAfterValue string // RESCUE_STUCK_JOBS_AFTER as written
}

// MaxDLQAlertTimeout is the longest DLQ_ALERT_TIMEOUT: the webhook call runs
// inside the dead-letter drain job, after the drain, and must leave it time
// within the drain's own timeout (scheduler.DLQDrainTimeout, 1m).
const MaxDLQAlertTimeout = scheduler.MaxDLQAlertTimeout

// Config is the scheduler.Config of this environment, for scheduler.Run: a
// scheduler of registry's services logging to logger. Every value comes
// from s, translated to scheduler.Config's conventions where they differ
// (an AGING_INTERVAL, ESCALATE_SCHEDULED_AFTER or DLQ_ALERT_THRESHOLD of 0,
// off, is a negative value there, whose 0 is the default; SOFT_STOP_TIMEOUT=0
// a negative SoftStopTimeout); JOB_TIMEOUT set in the environment is
// WarnJobTimeout; CRON_TZ is logged with "scheduler started". Set
// NewServices on the result as needed. scheduler.Run checks the result's
// RescueStuckJobsAfter against every kind's timeout and returns a
// *scheduler.KindTimeoutsError; RunError translates it into an Error naming
// RESCUE_STUCK_JOBS_AFTER (exit 2).
func (s *Scheduler) Config(registry *service.Registry, logger *slog.Logger) (scheduler.Config, error) {
	poolConfig, err := s.PoolConfig()
	if err != nil {
		return scheduler.Config{}, err
	}
	return scheduler.Config{
		Registry:               registry,
		QueueWorkers:           s.QueueWorkers,
		RescueStuckJobsAfter:   s.RescueStuckJobsAfter,
		AgingInterval:          offIfZero(s.AgingInterval),
		AgingStep:              s.AgingStep,
		AgingMaxPriority:       s.AgingMaxPriority,
		EscalationInterval:     s.EscalationInterval,
		EscalateScheduledAfter: offIfZero(s.EscalateScheduledAfter),
		EscalateDefaultAfter:   s.EscalateDefaultAfter,
		SweepBatch:             s.SweepBatch,
		DLQDrainInterval:       s.DLQDrainInterval,
		DLQDrainBatch:          s.DLQDrainBatch,
		DLQAlertThreshold:      offIfZero(s.DLQAlertThreshold),
		DLQAlertWebhookURL:     s.DLQAlertWebhookURL,
		DLQAlertInterval:       s.DLQAlertInterval,
		DLQAlertTimeout:        s.DLQAlertTimeout,
		JobTimeout:             s.JobTimeout,
		WarnJobTimeout:         s.JobTimeoutSet(),
		MaxAttempts:            s.MaxAttempts,
		SoftStopTimeout:        softStop(s.SoftStopTimeout),
		PoolConfig:             poolConfig,
		Schema:                 s.Schema,
		MetricsAddr:            s.MetricsAddr,
		Logger:                 logger,
		LogAttrs:               []slog.Attr{slog.String("cron_tz", s.CronTZ)},
	}, nil
}

// offIfZero is a variable whose 0 turns something off, as the library's
// field whose 0 is the default and whose negative value turns it off.
func offIfZero[T int | time.Duration](v T) T {
	if v == 0 {
		return -1
	}
	return v
}

// CheckKindTimeouts checks RESCUE_STUCK_JOBS_AFTER against timeouts, the
// timeout of every job kind the scheduler registers (scheduler.Timeouts:
// its services' kinds and periodic kinds, service.Registry.Timeouts, the
// extra kinds of scheduler.Config.ExtraKinds, and its own), as each kind
// declares it (service.Timeout): scheduler.CheckKindTimeouts, its error
// translated by RunError. scheduler.Run makes this check itself, before it connects
// (scheduler.Config.Validate, on the Config's Registry and ExtraKinds) and
// again once connected; this is the check for a main that wants it apart.
// River's rescuer retries a running job once it is older than both the
// threshold and its kind's timeout; with the threshold at or under a kind's
// timeout, that kind's jobs are rescued the moment their worker's deadline
// passes, while the worker may still be finishing them. The error matches
// ErrInvalid and names the threshold and every kind it does not exceed.
func (s *Scheduler) CheckKindTimeouts(timeouts map[string]time.Duration) error {
	return s.RunError(scheduler.CheckKindTimeouts(s.RescueStuckJobsAfter, timeouts))
}

// RunError is err, an error of scheduler.Run (or scheduler.CheckKindTimeouts)
// for a Config translated from s, as this environment names it: a
// *scheduler.KindTimeoutsError becomes an Error naming
// RESCUE_STUCK_JOBS_AFTER and its value (as written when the Config kept
// the environment's value, else the value checked), which matches
// ErrInvalid (exit 2); any other error, nil included, is returned as is.
func (s *Scheduler) RunError(err error) error {
	var kinds *scheduler.KindTimeoutsError
	if !errors.As(err, &kinds) {
		return err
	}
	value := kinds.RescueStuckJobsAfter.String()
	if kinds.RescueStuckJobsAfter == s.RescueStuckJobsAfter && s.rescueAfterValue != "" {
		value = s.rescueAfterValue
	}
	return Errors{{
		Var:   "RESCUE_STUCK_JOBS_AFTER",
		Value: value,
		Reason: "must be longer than the timeout of every job kind, or the rescuer retries (and runs twice) jobs " +
			"a worker may still be running; job kind " + strings.Join(kinds.Over, ", job kind "),
	}}
}

// fill records RESCUE_STUCK_JOBS_AFTER as written, for RunError,
// and whether JOB_TIMEOUT was set.
func (s *Scheduler) fill(c *checker) {
	s.rescueAfterValue = c.vars[c.fields["RescueStuckJobsAfter"].key]
	s.Jobs.fill(c)
}

func (s *Scheduler) validate(c *checker) {
	s.Database.validate(c)
	s.Logging.validate(c)
	s.Observability.validate(c)
	s.Jobs.validate(c)

	c.intRange("QueueWorkers", s.QueueWorkers, 1, 100)
	if s.RescueStuckJobsAfter <= s.JobTimeout {
		c.fail("RescueStuckJobsAfter", "must be longer than JOB_TIMEOUT (%s), the timeout of job kinds without their own, or such jobs are rescued while they still run", s.JobTimeout)
	}

	if !validTimeZone(s.CronTZ) {
		c.fail("CronTZ", timeZoneReason)
	}

	if s.AgingInterval != 0 {
		c.durationRange("AgingInterval", s.AgingInterval, time.Second, 24*time.Hour)
	}
	c.durationRange("AgingStep", s.AgingStep, time.Second, 0)
	c.intRange("AgingMaxPriority", s.AgingMaxPriority, 1, 4)

	c.durationRange("EscalationInterval", s.EscalationInterval, time.Second, 24*time.Hour)
	if s.EscalateScheduledAfter != 0 {
		c.durationRange("EscalateScheduledAfter", s.EscalateScheduledAfter, time.Second, 0)
	}
	if s.EscalateDefaultAfter != 0 {
		c.durationRange("EscalateDefaultAfter", s.EscalateDefaultAfter, time.Second, 0)
	}
	c.intRange("SweepBatch", s.SweepBatch, 1, 100_000)

	c.durationRange("DLQDrainInterval", s.DLQDrainInterval, time.Second, time.Hour)
	c.intRange("DLQDrainBatch", s.DLQDrainBatch, 1, 100_000)
	c.intRange("DLQAlertThreshold", s.DLQAlertThreshold, 0, 1_000_000_000)
	if s.DLQAlertWebhookURL != "" {
		if u, err := url.Parse(s.DLQAlertWebhookURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			c.fail("DLQAlertWebhookURL", "must be an absolute http or https URL")
		}
	}
	c.durationRange("DLQAlertInterval", s.DLQAlertInterval, time.Second, 0)
	c.durationRange("DLQAlertTimeout", s.DLQAlertTimeout, 100*time.Millisecond, MaxDLQAlertTimeout)
}

// AlignedEvery is how tierq reads "@every D": runs at every multiple of D
// (counted from the zero time, so "@every 6h" runs at 00, 06, 12 and 18 UTC),
// not D after whenever the scheduler started. Like a cron expression's, its
// run times are the same in every process, so a run is identified by its
// time and a leader hand-over neither repeats nor skips one.
type AlignedEvery time.Duration

// Next returns the first multiple of the period after t.
func (e AlignedEvery) Next(t time.Time) time.Time {
	d := time.Duration(e)
	return t.Truncate(d).Add(d)
}

// durationRange checks lo <= d and, when hi is not 0, d <= hi.
func (c *checker) durationRange(name string, d, lo, hi time.Duration) {
	switch {
	case hi == 0 && d < lo:
		c.fail(name, "must be at least %s", lo)
	case hi != 0 && (d < lo || d > hi):
		c.fail(name, "must be between %s and %s", lo, hi)
	}
}
