package config

import "time"

// Jobs is how a process runs and inserts River jobs; the worker and the
// scheduler deployments share it.
type Jobs struct {
	// JobTimeout is River's JobTimeout: the timeout of a job kind whose
	// worker has no Timeout method of its own. Every kind made with
	// service.WorkerKind has one (the kind's service.Timeout, or
	// service.DefaultTimeout: the same in every process), so it applies to
	// none of them; only to a worker an application embedding tierq
	// registers in River directly, and then it must be the same in every
	// deployment. Before, it was every job's timeout,
	// read by each process on its own: a leader with a shorter one rescued,
	// and ran twice, long jobs still running on a worker with a longer one.
	// Setting it logs a warning at start (JobTimeoutSet). Default 1m
	// (River's default, and the longest timeout of tierq's kinds).
	JobTimeout time.Duration `env:"JOB_TIMEOUT" envDefault:"1m"`

	// MaxAttempts is how many times a job this process inserts (work a job
	// chains, the jobs a periodic job inserts) is tried before River
	// discards it, unless the insert sets its own (the kind's
	// service.MaxAttempts through Service.KindInsertOpts, say). Default 10,
	// producer.DefaultMaxAttempts: with River's backoff (attempt^4 seconds,
	// ±10%) the last retry comes about 4 hours 15 minutes after the first
	// failure (docs/library.md, "Attempts and retries").
	MaxAttempts int `env:"MAX_ATTEMPTS" envDefault:"10"`

	// SoftStopTimeout is how long a stopping process lets running jobs finish
	// before it cancels them. Keep it under the orchestrator's grace period
	// (Kubernetes: 30s). Default 25s.
	SoftStopTimeout time.Duration `env:"SOFT_STOP_TIMEOUT" envDefault:"25s"`

	jobTimeoutSet bool
}

// JobTimeoutSet reports whether JOB_TIMEOUT was set in the environment: an
// operator who set it may expect it to bound tierq's jobs, which it no
// longer does, so the commands warn.
func (j *Jobs) JobTimeoutSet() bool { return j.jobTimeoutSet }

// fill records whether JOB_TIMEOUT was set.
func (j *Jobs) fill(c *checker) {
	_, j.jobTimeoutSet = c.vars[c.fields["JobTimeout"].key]
}

func (j *Jobs) validate(c *checker) {
	if j.JobTimeout <= 0 {
		c.fail("JobTimeout", "must be positive")
	}
	c.intRange("MaxAttempts", j.MaxAttempts, 1, 1000)
	if j.SoftStopTimeout < 0 {
		c.fail("SoftStopTimeout", "must not be negative")
	}
}
