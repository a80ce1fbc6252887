package scheduler

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tierq/tierq/limits"
	"github.com/tierq/tierq/producer"
	"github.com/tierq/tierq/service"
)

// Defaults of Config, applied by WithDefaults. A negative value turns off
// the fields that say so (River's convention), since their zero value is
// the default.
const (
	DefaultQueueWorkers           = 2
	DefaultRescueStuckJobsAfter   = time.Hour
	DefaultAgingInterval          = time.Minute
	DefaultAgingStep              = 5 * time.Minute
	DefaultAgingMaxPriority       = 2
	DefaultEscalationInterval     = time.Minute
	DefaultEscalateScheduledAfter = 3 * time.Hour
	DefaultSweepBatch             = 1000
	DefaultDLQDrainInterval       = 30 * time.Second
	DefaultDLQDrainBatch          = 1000
	DefaultDLQAlertThreshold      = 1
	DefaultDLQAlertInterval       = 15 * time.Minute
	DefaultDLQAlertTimeout        = 5 * time.Second
	DefaultJobTimeout             = time.Minute
	DefaultSoftStopTimeout        = 25 * time.Second

	// MaxDLQAlertTimeout is the longest DLQAlertTimeout: the webhook call
	// runs inside the dead-letter drain job, after the drain, and must
	// leave it time within the drain's own timeout (DLQDrainTimeout, 1m).
	MaxDLQAlertTimeout = 30 * time.Second
)

// Config is the configuration of a scheduler deployment: River's only
// leader-eligible client, which runs River's maintenance and tierq's
// periodic work (aging, escalation, the dead-letter drain, the services'
// periodic jobs) on the leader. Build it in Go, or from the environment
// with package config (config.Scheduler.Config). Every field but Registry
// has a default, which WithDefaults applies; Validate checks it without
// changing it.
type Config struct {
	// Registry is every service of the application (package service): the
	// scheduler registers all their kinds, so that the leader's rescuer
	// retries a stuck job of any kind, runs their periodic jobs, and ages
	// and escalates their queues. Required. It may be a registry built
	// without a database pool when NewServices builds the one Run runs.
	Registry *service.Registry

	// NewServices builds, on the pool Run opens, the registry Run runs:
	// for periodic workers that need the pool. It must have Registry's
	// services, by name: Run fails, naming both, when it has not. Default:
	// nil, Run runs Registry.
	NewServices func(pool *pgxpool.Pool) (*service.Registry, error)

	// ExtraKinds returns the kinds of no service that the scheduler
	// registers besides Registry's and its own, given the deployment's
	// pool (Run's, or RiverConfig's): kinds whose stuck jobs the leader's
	// rescuer must retry rather than discard as unknown, such as the
	// reference app's load-test kind (jobs.LoadTestKind). Each declares its
	// timeout as every kind does (service.Timeout), which
	// RescueStuckJobsAfter must exceed. Validate calls it with a nil pool,
	// to check the kinds before anything connects: it must build them
	// without using the pool, as a Registry described without one is
	// built. An invalid kind (service.Kind.Err), or a kind returned twice,
	// of Registry's or of the scheduler's own, is a problem Validate
	// reports (and RiverConfig's registration refuses). Default: nil, no
	// extra kinds.
	ExtraKinds func(pool *pgxpool.Pool) []service.Kind

	// QueueWorkers is how many of the scheduler's own jobs (sweeps,
	// periodic jobs) run at once in one process, between 1 and 100.
	// Default 2.
	QueueWorkers int

	// RescueStuckJobsAfter is how long a job of any kind may stay running
	// before the leader's rescuer retries it (its worker crashed). It must
	// be longer than JobTimeout and than every kind's timeout (Timeouts;
	// Validate checks it on Registry and ExtraKinds, Run again on the
	// services it runs, both with CheckKindTimeouts), so that a job is
	// rescued only after its worker has given up on it. Default 1h.
	RescueStuckJobsAfter time.Duration

	// AgingInterval is how often the aging sweep runs, between 1s and 24h.
	// Default 1m; negative turns aging off.
	AgingInterval time.Duration
	// AgingStep is the wait that improves a job's priority by one level, at
	// least 1s. Default 5m.
	AgingStep time.Duration
	// AgingMaxPriority is the best priority aging gives, 1 to 4 (1 is
	// River's best; tierq keeps it for operator escalation by default).
	// Default 2.
	AgingMaxPriority int

	// EscalationInterval is how often the escalation sweep runs, between
	// 1s and 24h. Default 1m.
	EscalationInterval time.Duration
	// EscalateScheduledAfter moves a job waiting longer than this (at least
	// 1s) in <base>_scheduled to <base>_default. Default 3h; negative turns
	// the rule off.
	EscalateScheduledAfter time.Duration
	// EscalateDefaultAfter moves a job waiting longer than this (at least
	// 1s) in <base>_default to <base>_priority. Default 0: off, because it
	// hands paid capacity to free work.
	EscalateDefaultAfter time.Duration

	// SweepBatch is the most rows one statement of a sweep (aging,
	// escalation) touches, between 1 and 100,000. Default 1000.
	SweepBatch int

	// DLQDrainInterval is how often discarded River jobs move into
	// dead_letter_jobs, between 1s and 1h. Default 30s.
	DLQDrainInterval time.Duration
	// DLQDrainBatch is the most jobs one drain statement moves, between 1
	// and 100,000. Default 1000.
	DLQDrainBatch int
	// DLQAlertThreshold is the depth (dead letters not replayed) at which
	// the scheduler warns. Default 1: any dead letter needs a look;
	// negative turns the alert off.
	DLQAlertThreshold int
	// DLQAlertWebhookURL, when set, receives each alert as a JSON POST (an
	// absolute http or https URL). Default "": alerts are logged only.
	DLQAlertWebhookURL string
	// DLQAlertInterval is the least time between two alerts while the depth
	// stays at or above the threshold, at least 1s. Default 15m.
	DLQAlertInterval time.Duration
	// DLQAlertTimeout bounds one webhook call, between 100ms and
	// MaxDLQAlertTimeout. Default 5s.
	DLQAlertTimeout time.Duration

	// JobTimeout is River's JobTimeout: the timeout of a job kind whose
	// worker has no Timeout method of its own, which no kind made with
	// service.WorkerKind is. Default 1m.
	JobTimeout time.Duration
	// WarnJobTimeout has Run log a warning at start, listing the kinds'
	// timeouts, that JobTimeout bounds none of them: for an operator who
	// set JobTimeout expecting it to (package config sets it when the
	// environment sets the job timeout). Default false.
	WarnJobTimeout bool
	// MaxAttempts is how many times a job this process inserts (a periodic
	// job's) is tried before River discards it, unless it sets its own;
	// between 1 and 1000. Default producer.DefaultMaxAttempts, 10.
	MaxAttempts int
	// SoftStopTimeout is how long a stopping process lets running jobs
	// finish before it cancels them. Default 25s; negative waits however
	// long they take.
	SoftStopTimeout time.Duration

	// PoolConfig is the database's pgxpool configuration. Required by Run,
	// which opens the pool; RiverConfig takes a pool instead.
	PoolConfig *pgxpool.Config
	// Schema is the PostgreSQL schema holding River's and tierq's tables.
	// Default "": the connection's search_path.
	Schema string
	// MetricsAddr, when set, is where Run serves Prometheus metrics at
	// /metrics (host:port). Default "": no metrics server.
	MetricsAddr string
	// Logger is where the scheduler logs. Default slog.Default().
	Logger *slog.Logger
	// LogAttrs are logged with "scheduler started", after its own settings:
	// the settings of the application's own periodic jobs, say (the
	// reference app logs its cron jobs' next runs). Default none.
	LogAttrs []slog.Attr

	// Limits are the tenant limits by tier of Registry's services (package
	// limits: concurrency caps, rates, daily quotas), which Run records in
	// the database when it starts (limits.Record, table tier_limits), for
	// every service of the registry it runs, replacing what was recorded
	// before: the API, producers and workers read them there, never their
	// own environment. A service or tier Limits does not name has no
	// limits. Validate checks its values and that every service it names is
	// Registry's. package config builds it from the variables
	// <NAME>_<TIER>_TENANT_{MAX_RUNNING,RATE,DAILY_QUOTA}
	// (config.LoadLimits). A main that runs its own River client from
	// RiverConfig calls limits.Record itself. Default: zero, no limits.
	Limits limits.Config
}

// WithDefaults returns a copy of c with every unset field at its default.
// Fields whose default is their zero value (NewServices, ExtraKinds,
// EscalateDefaultAfter, DLQAlertWebhookURL, WarnJobTimeout, Schema,
// MetricsAddr, LogAttrs, Limits) are left as they are.
func (c Config) WithDefaults() Config {
	setDefault(&c.QueueWorkers, DefaultQueueWorkers)
	setDefault(&c.RescueStuckJobsAfter, DefaultRescueStuckJobsAfter)
	setDefault(&c.AgingInterval, DefaultAgingInterval)
	setDefault(&c.AgingStep, DefaultAgingStep)
	setDefault(&c.AgingMaxPriority, DefaultAgingMaxPriority)
	setDefault(&c.EscalationInterval, DefaultEscalationInterval)
	setDefault(&c.EscalateScheduledAfter, DefaultEscalateScheduledAfter)
	setDefault(&c.SweepBatch, DefaultSweepBatch)
	setDefault(&c.DLQDrainInterval, DefaultDLQDrainInterval)
	setDefault(&c.DLQDrainBatch, DefaultDLQDrainBatch)
	setDefault(&c.DLQAlertThreshold, DefaultDLQAlertThreshold)
	setDefault(&c.DLQAlertInterval, DefaultDLQAlertInterval)
	setDefault(&c.DLQAlertTimeout, DefaultDLQAlertTimeout)
	setDefault(&c.JobTimeout, DefaultJobTimeout)
	setDefault(&c.MaxAttempts, producer.DefaultMaxAttempts)
	setDefault(&c.SoftStopTimeout, DefaultSoftStopTimeout)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func setDefault[T int | time.Duration](v *T, def T) {
	if *v == 0 {
		*v = def
	}
}

// Validate checks c as WithDefaults leaves it (a zero field that has a
// default is not an error) and reports every problem at once
// (errors.Join). It changes nothing; it calls ExtraKinds with a nil pool.
//
// With Registry set, it also checks RescueStuckJobsAfter against the
// timeout of every kind the scheduler registers (Timeouts of Registry and
// ExtraKinds' kinds: the services' kinds and periodic kinds, the extra
// kinds and the scheduler's own) with CheckKindTimeouts, whose
// *KindTimeoutsError is then one of the problems (errors.As finds it).
// Run validates first, so it makes this check before it connects, and
// makes it again once it has built the services it runs (NewServices).
// Without Registry, which is then the problem reported, the kinds are not
// known and their timeouts are not checked.
func (c Config) Validate() error { return c.validate(true, true) }

// validate is Validate, with Registry required only when requireRegistry,
// and ExtraKinds and the kinds' timeouts checked only when checkKinds.
func (c Config) validate(requireRegistry, checkKinds bool) error {
	c = c.WithDefaults()
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf("scheduler: "+format, args...)) }
	intRange := func(name string, v, lo, hi int) {
		if v < lo || v > hi {
			fail("%s is %d: must be between %d and %d", name, v, lo, hi)
		}
	}
	durationRange := func(name string, d, lo, hi time.Duration) {
		switch {
		case hi == 0 && d < lo:
			fail("%s is %s: must be at least %s", name, d, lo)
		case hi != 0 && (d < lo || d > hi):
			fail("%s is %s: must be between %s and %s", name, d, lo, hi)
		}
	}

	if requireRegistry && c.Registry == nil {
		fail("Registry is required")
	}
	var extra []service.Kind
	if checkKinds && c.ExtraKinds != nil {
		extra = c.ExtraKinds(nil)
		errs = append(errs, extraKindProblems(c.Registry, extra)...)
	}
	intRange("QueueWorkers", c.QueueWorkers, 1, 100)
	if c.RescueStuckJobsAfter <= c.JobTimeout {
		fail("RescueStuckJobsAfter is %s: must be longer than JobTimeout (%s), the timeout of job kinds without their own, or such jobs are rescued while they still run", c.RescueStuckJobsAfter, c.JobTimeout)
	}
	if checkKinds && c.Registry != nil {
		if err := CheckKindTimeouts(c.RescueStuckJobsAfter, Timeouts(c.Registry, extra...)); err != nil {
			errs = append(errs, err)
		}
	}
	if c.AgingInterval > 0 {
		durationRange("AgingInterval", c.AgingInterval, time.Second, 24*time.Hour)
	}
	durationRange("AgingStep", c.AgingStep, time.Second, 0)
	intRange("AgingMaxPriority", c.AgingMaxPriority, 1, 4)
	durationRange("EscalationInterval", c.EscalationInterval, time.Second, 24*time.Hour)
	if c.EscalateScheduledAfter > 0 {
		durationRange("EscalateScheduledAfter", c.EscalateScheduledAfter, time.Second, 0)
	}
	if c.EscalateDefaultAfter != 0 {
		durationRange("EscalateDefaultAfter", c.EscalateDefaultAfter, time.Second, 0)
	}
	intRange("SweepBatch", c.SweepBatch, 1, 100_000)
	durationRange("DLQDrainInterval", c.DLQDrainInterval, time.Second, time.Hour)
	intRange("DLQDrainBatch", c.DLQDrainBatch, 1, 100_000)
	if c.DLQAlertThreshold > 1_000_000_000 {
		fail("DLQAlertThreshold is %d: must be at most 1000000000", c.DLQAlertThreshold)
	}
	if c.DLQAlertWebhookURL != "" {
		if u, err := url.Parse(c.DLQAlertWebhookURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			fail("DLQAlertWebhookURL must be an absolute http or https URL")
		}
	}
	durationRange("DLQAlertInterval", c.DLQAlertInterval, time.Second, 0)
	durationRange("DLQAlertTimeout", c.DLQAlertTimeout, 100*time.Millisecond, MaxDLQAlertTimeout)
	if c.JobTimeout < 0 {
		fail("JobTimeout is %s: must not be negative", c.JobTimeout)
	}
	intRange("MaxAttempts", c.MaxAttempts, 1, 1000)
	if err := c.Limits.Validate(); err != nil {
		for _, e := range unjoin(err) {
			fail("Limits: %w", e)
		}
	}
	if c.Registry != nil {
		for _, name := range slices.Sorted(maps.Keys(c.Limits.Services)) {
			if _, ok := c.Registry.Lookup(name); !ok {
				fail("Limits: service %s is not a service of Registry (%s)", name, strings.Join(c.Registry.Names(), ", "))
			}
		}
	}
	return errors.Join(errs...)
}

// unjoin is the errors errors.Join joined into err, or err alone.
func unjoin(err error) []error {
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		return joined.Unwrap()
	}
	return []error{err}
}

// extraKindProblems are the problems of kinds, ExtraKinds' kinds, beside
// those of registry (nil: none): an invalid kind, or one that is returned
// twice, is a kind of registry's or is the scheduler's own. River refuses
// those when the kinds are registered (Kind.AddWorker); Validate reports
// them before.
func extraKindProblems(registry *service.Registry, kinds []service.Kind) []error {
	var errs []error
	registered := Timeouts(registry) // the kinds of registry and the scheduler's own
	for i, k := range kinds {
		switch _, twice := registered[k.Name()]; {
		case k.Err() != nil:
			errs = append(errs, fmt.Errorf("scheduler: ExtraKinds: kind %d (%q): %w", i, k.Name(), k.Err()))
		case twice:
			errs = append(errs, fmt.Errorf("scheduler: ExtraKinds: kind %s is registered twice (returned twice, a kind of Registry's or the scheduler's own)", k.Name()))
		}
		registered[k.Name()] = k.Timeout()
	}
	return errs
}

// agingInterval, escalateScheduledAfter and dlqAlertThreshold are the
// values the sweeps take: 0 for off.
func (c *Config) agingInterval() time.Duration          { return max(c.AgingInterval, 0) }
func (c *Config) escalateScheduledAfter() time.Duration { return max(c.EscalateScheduledAfter, 0) }
func (c *Config) dlqAlertThreshold() int                { return max(c.DLQAlertThreshold, 0) }

// KindTimeoutsError is CheckKindTimeouts' error: RescueStuckJobsAfter is
// not longer than the timeout of the kinds in Over.
type KindTimeoutsError struct {
	RescueStuckJobsAfter time.Duration
	// Over are "<kind> has <timeout>", the longest timeout first.
	Over []string
}

func (e *KindTimeoutsError) Error() string {
	return fmt.Sprintf("scheduler: RescueStuckJobsAfter (%s) must be longer than the timeout of every job kind, or the rescuer retries (and runs twice) jobs a worker may still be running; job kind %s",
		e.RescueStuckJobsAfter, strings.Join(e.Over, ", job kind "))
}

// CheckKindTimeouts checks rescueStuckJobsAfter against timeouts, the
// timeout of every job kind the scheduler registers (Timeouts). River's
// rescuer retries a running job once it is older than both the threshold
// and its kind's timeout; with the threshold at or under a kind's timeout,
// that kind's jobs are rescued the moment their worker's deadline passes,
// while the worker may still be finishing them. The error is a
// *KindTimeoutsError naming every kind the threshold does not exceed.
func CheckKindTimeouts(rescueStuckJobsAfter time.Duration, timeouts map[string]time.Duration) error {
	if over := kindsOver(rescueStuckJobsAfter, timeouts); len(over) > 0 {
		return &KindTimeoutsError{RescueStuckJobsAfter: rescueStuckJobsAfter, Over: over}
	}
	return nil
}

// kindsOver are the kinds of timeouts whose timeout is at least rescue, as
// "<kind> has <timeout>", the longest timeout first (then by kind).
func kindsOver(rescue time.Duration, timeouts map[string]time.Duration) []string {
	kinds := slices.SortedFunc(maps.Keys(timeouts), func(a, b string) int {
		return cmp.Or(cmp.Compare(timeouts[b], timeouts[a]), cmp.Compare(a, b))
	})
	var over []string
	for _, kind := range kinds {
		if timeouts[kind] >= rescue {
			over = append(over, fmt.Sprintf("%s has %s", kind, timeouts[kind]))
		}
	}
	return over
}
