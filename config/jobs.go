package config

import "time"

// Jobs is how a process runs and inserts River jobs; the worker and the
// scheduler deployments share it.
type Jobs struct {
	// JobTimeout is how long one job may run before its context is cancelled.
	// Default 5m.
	JobTimeout time.Duration `env:"JOB_TIMEOUT" envDefault:"5m"`

	// MaxAttempts is how many times a job this process inserts (the chained
	// specview job, the scheduler's re-analysis jobs) is tried before River
	// discards it. Default 10: with River's backoff (attempt^4 seconds) the
	// last retry comes about 7 hours after the first failure.
	MaxAttempts int `env:"MAX_ATTEMPTS" envDefault:"10"`

	// SoftStopTimeout is how long a stopping process lets running jobs finish
	// before it cancels them. Keep it under the orchestrator's grace period
	// (Kubernetes: 30s). Default 25s.
	SoftStopTimeout time.Duration `env:"SOFT_STOP_TIMEOUT" envDefault:"25s"`
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
