// Package jobsconfig is the reference app's own configuration sections
// (config.Section): where analysis jobs may look (AnalysisConfig,
// ANALYSIS_ROOTS) and the schedule of the analyzer's maintenance
// (MaintenanceConfig, LoadMaintenance). They live apart from package jobs
// so that jobs, which the library's tests use through internal/testdb,
// does not import package config, which imports the library.
package jobsconfig

import (
	"fmt"
	"time"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/jobs"
)

// AnalysisConfig is where analysis jobs may look, a configuration section
// of the reference app (config.LoadSection). The API (cmd/api) checks a
// target against it lexically, since it cannot see the workers' file
// system; the analyzer workers check it again after resolving symlinks and
// `..` on their host; tierctl enqueue checks it as the API does.
type AnalysisConfig struct {
	// Roots are the directories an analysis target must be (or be below):
	// ANALYSIS_ROOTS, colon-separated absolute directories, e.g.
	// /srv/repos:/data/checkouts. Each is cleaned (/srv/repos/ is
	// /srv/repos); an empty list, an empty entry, a relative entry or one
	// with a . or .. component is refused. Default "/": every directory
	// the analyzer can read.
	Roots jobs.AnalysisRoots `env:"ANALYSIS_ROOTS" envDefault:"/"`
}

// Validate implements config.Section.
func (a *AnalysisConfig) Validate(c *config.Checker) {
	// caarlos0/env gives a variable that is set but empty its default; an
	// ANALYSIS_ROOTS that an unset shell variable emptied must not quietly
	// become "/".
	if value, ok := c.Value("Roots"); ok && value == "" {
		c.Fail("Roots", "must not be empty: %s", jobs.AnalysisRootsHelp)
	}
}

// MaintenanceConfig is the schedule and reach of the analyzer's periodic
// jobs (Maintenance), a configuration section of the reference app's
// scheduler deployment (config.LoadSection; LoadMaintenance loads it).
type MaintenanceConfig struct {
	// CronTZ is the time zone the cron expressions are read in: the
	// scheduler's CRON_TZ (config.Scheduler.CronTZ). Default UTC.
	CronTZ string `env:"CRON_TZ" envDefault:"UTC"`

	// ReanalyzeCron is when stale targets are re-analysed (standard 5-field
	// cron, or a descriptor such as @hourly or @every 30m; @every runs at
	// multiples of its period, see config.AlignedEvery).
	ReanalyzeCron string `env:"REANALYZE_CRON" envDefault:"0 */6 * * *"`
	// ReanalyzeStaleAfter is the age of a target's latest result that makes
	// it stale; at least 1m. Default 24h.
	ReanalyzeStaleAfter time.Duration `env:"REANALYZE_STALE_AFTER" envDefault:"24h"`

	// RetentionCron is when old results and spec documents are deleted.
	RetentionCron string `env:"RETENTION_CRON" envDefault:"30 3 * * *"`
	// RetentionPeriod is how long results and spec documents are kept; at
	// least 1h. Default 2160h (90 days).
	RetentionPeriod time.Duration `env:"RETENTION_PERIOD" envDefault:"2160h"`
}

// Validate implements config.Section.
func (m *MaintenanceConfig) Validate(c *config.Checker) {
	c.TimeZone("CronTZ", m.CronTZ)
	c.Cron("ReanalyzeCron", m.ReanalyzeCron, m.CronTZ)
	c.Cron("RetentionCron", m.RetentionCron, m.CronTZ)
	if m.ReanalyzeStaleAfter < time.Minute {
		c.Fail("ReanalyzeStaleAfter", "must be at least 1m0s")
	}
	if m.RetentionPeriod < time.Hour {
		c.Fail("RetentionPeriod", "must be at least 1h0m0s")
	}
}

// LoadMaintenance is the jobs.Maintenance the scheduler deployment runs: its
// schedules and ages from environ (MaintenanceConfig), its attempts and
// batch size from the scheduler's own configuration (MAX_ATTEMPTS,
// SWEEP_BATCH). A bad variable is a config.Errors, which config.Join
// reports with the scheduler's own.
func LoadMaintenance(environ []string, scheduler *config.Scheduler) (*jobs.Maintenance, error) {
	cfg, err := config.LoadSection[MaintenanceConfig](environ)
	if err != nil {
		return nil, err
	}
	reanalyze, err := config.ParseCron(cfg.ReanalyzeCron, cfg.CronTZ)
	if err != nil {
		return nil, fmt.Errorf("REANALYZE_CRON: %w", err)
	}
	retention, err := config.ParseCron(cfg.RetentionCron, cfg.CronTZ)
	if err != nil {
		return nil, fmt.Errorf("RETENTION_CRON: %w", err)
	}
	return &jobs.Maintenance{
		ReanalyzeSchedule:   reanalyze,
		ReanalyzeStaleAfter: cfg.ReanalyzeStaleAfter,
		MaxAttempts:         scheduler.MaxAttempts,
		RetentionSchedule:   retention,
		RetentionPeriod:     cfg.RetentionPeriod,
		Batch:               scheduler.SweepBatch,
	}, nil
}
