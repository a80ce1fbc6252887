package jobs_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/jobs/jobsconfig"
)

func TestAnalysisRoots(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		give []string
		want jobs.AnalysisRoots
	}{
		{name: "default: every directory", want: jobs.AnalysisRoots{"/"}},
		{name: "one root", give: []string{"ANALYSIS_ROOTS=/srv/repos"}, want: jobs.AnalysisRoots{"/srv/repos"}},
		{name: "cleaned", give: []string{"ANALYSIS_ROOTS=/srv/repos/://data//checkouts"}, want: jobs.AnalysisRoots{"/srv/repos", "/data/checkouts"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			analysis, err := config.LoadSection[jobsconfig.AnalysisConfig](tt.give)
			require.NoError(t, err)
			require.Equal(t, tt.want, analysis.Roots)
		})
	}
	require.Equal(t, "/srv/repos:/data", jobs.AnalysisRoots{"/srv/repos", "/data"}.String())
}

func TestAnalysisRootsBadValues(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name, give, wantReason string
	}{
		{name: "relative", give: "srv/repos", wantReason: `"srv/repos" is not an absolute directory`},
		{name: "relative second", give: "/srv/repos:./checkouts", wantReason: `"./checkouts" is not an absolute directory`},
		{name: "empty entry", give: "/srv/repos::/data", wantReason: "has an empty entry"},
		{name: "leading colon", give: ":/srv/repos", wantReason: "has an empty entry"},
		{name: "trailing colon", give: "/srv/repos:", wantReason: "has an empty entry"},
		{name: "empty", give: "", wantReason: "must not be empty"},
		{name: "dot-dot", give: "/srv/repos/../etc", wantReason: "has a . or .. component"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := config.LoadSection[jobsconfig.AnalysisConfig]([]string{"ANALYSIS_ROOTS=" + tt.give})
			require.ErrorIs(t, err, config.ErrInvalid)
			var errs config.Errors
			require.ErrorAs(t, err, &errs)
			require.Len(t, errs, 1, err.Error())
			require.Equal(t, "ANALYSIS_ROOTS", errs[0].Var)
			require.Equal(t, tt.give, errs[0].Value)
			require.Contains(t, errs[0].Reason, tt.wantReason)
		})
	}
}

func TestMaintenanceConfig(t *testing.T) {
	t.Parallel()
	scheduler := &config.Scheduler{SweepBatch: 300}
	scheduler.MaxAttempts = 7

	m, err := jobsconfig.LoadMaintenance(nil, scheduler)
	require.NoError(t, err)
	require.Equal(t, 24*time.Hour, m.ReanalyzeStaleAfter)
	require.Equal(t, 90*24*time.Hour, m.RetentionPeriod)
	require.Equal(t, 7, m.MaxAttempts, "MAX_ATTEMPTS is the scheduler's")
	require.Equal(t, 300, m.Batch, "SWEEP_BATCH is the scheduler's")
	// The cron expressions are parsed in CRON_TZ: "0 */6 * * *" runs at the
	// next multiple of six hours, "30 3 * * *" at 03:30 UTC.
	from := time.Date(2026, 11, 21, 7, 10, 0, 0, time.UTC)
	require.Equal(t, time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC), m.ReanalyzeSchedule.Next(from).UTC())
	require.Equal(t, time.Date(2026, 11, 22, 3, 30, 0, 0, time.UTC), m.RetentionSchedule.Next(from).UTC())

	m, err = jobsconfig.LoadMaintenance([]string{"CRON_TZ=Asia/Tokyo", "RETENTION_CRON=30 3 * * *"}, scheduler)
	require.NoError(t, err)
	from = time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC) // 09:00 in Tokyo
	require.Equal(t, time.Date(2026, 11, 21, 18, 30, 0, 0, time.UTC), m.RetentionSchedule.Next(from).UTC())

	// @every runs on multiples of its period.
	m, err = jobsconfig.LoadMaintenance([]string{"REANALYZE_CRON=@every 6h", "RETENTION_CRON=@every 2s"}, scheduler)
	require.NoError(t, err)
	from = time.Date(2026, 11, 21, 7, 10, 3, 500, time.UTC)
	require.Equal(t, time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC), m.ReanalyzeSchedule.Next(from))
	require.Equal(t, time.Date(2026, 11, 21, 7, 10, 4, 0, time.UTC), m.RetentionSchedule.Next(from))
}

func TestMaintenanceConfigBadValues(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name, give, wantVar, wantValue, wantReason string
	}{
		{name: "bad cron", give: "REANALYZE_CRON=0 */6 * *", wantVar: "REANALYZE_CRON", wantValue: "0 */6 * *", wantReason: "not a cron expression"},
		{name: "cron out of range", give: "RETENTION_CRON=61 3 * * *", wantVar: "RETENTION_CRON", wantValue: "61 3 * * *", wantReason: "not a cron expression"},
		{name: "empty cron", give: "RETENTION_CRON= ", wantVar: "RETENTION_CRON", wantValue: " ", wantReason: "must not be empty"},
		{name: "tz inside cron", give: "REANALYZE_CRON=CRON_TZ=UTC 0 * * * *", wantVar: "REANALYZE_CRON", wantValue: "CRON_TZ=UTC 0 * * * *", wantReason: "CRON_TZ"},
		{name: "retention too short", give: "RETENTION_PERIOD=5m", wantVar: "RETENTION_PERIOD", wantValue: "5m", wantReason: "at least 1h"},
		{name: "stale too short", give: "REANALYZE_STALE_AFTER=1s", wantVar: "REANALYZE_STALE_AFTER", wantValue: "1s", wantReason: "at least 1m"},
		{name: "stale not a duration", give: "REANALYZE_STALE_AFTER=a day", wantVar: "REANALYZE_STALE_AFTER", wantValue: "a day", wantReason: "not a duration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := jobsconfig.LoadMaintenance([]string{tt.give}, &config.Scheduler{})
			require.ErrorIs(t, err, config.ErrInvalid)
			var errs config.Errors
			require.ErrorAs(t, err, &errs)
			require.Len(t, errs, 1, err.Error())
			require.Equal(t, tt.wantVar, errs[0].Var)
			require.Equal(t, tt.wantValue, errs[0].Value)
			require.Contains(t, errs[0].Reason, tt.wantReason)
		})
	}

	// A bad CRON_TZ is reported by the section and by the scheduler's
	// configuration, and once by the two joined, as cmd/scheduler joins
	// them; the cron expressions are not blamed for it.
	environ := []string{"DATABASE_URL=postgres://127.0.0.1/x", "CRON_TZ=Mars/Olympus"}
	scheduler, schedulerErr := config.Load[config.Scheduler](environ)
	_, maintenanceErr := jobsconfig.LoadMaintenance(environ, &scheduler)
	require.EqualError(t, maintenanceErr, `invalid configuration: CRON_TZ="Mars/Olympus": not a time zone name (examples: UTC, Europe/Berlin)`)
	require.EqualError(t, config.Join(schedulerErr, maintenanceErr),
		`invalid configuration: CRON_TZ="Mars/Olympus": not a time zone name (examples: UTC, Europe/Berlin)`)
}
