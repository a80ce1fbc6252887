package config_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/config"
)

func baseSchedulerEnv() []string {
	return []string{"DATABASE_URL=postgres://tierq:s3cret@127.0.0.1:5432/tierq"}
}

func TestSchedulerDefaults(t *testing.T) {
	t.Parallel()

	cfg, err := config.Load[config.Scheduler](baseSchedulerEnv())
	require.NoError(t, err)
	require.Equal(t, 2, cfg.QueueWorkers)
	require.Equal(t, time.Hour, cfg.RescueStuckJobsAfter)
	require.Equal(t, "UTC", cfg.CronTZ)
	require.Equal(t, 24*time.Hour, cfg.ReanalyzeStaleAfter)
	require.Equal(t, 90*24*time.Hour, cfg.RetentionPeriod)
	require.Equal(t, time.Minute, cfg.AgingInterval)
	require.Equal(t, 5*time.Minute, cfg.AgingStep)
	require.Equal(t, 2, cfg.AgingMaxPriority)
	require.Equal(t, 3*time.Hour, cfg.EscalateScheduledAfter)
	require.Zero(t, cfg.EscalateDefaultAfter)
	require.Equal(t, 30*time.Second, cfg.DLQDrainInterval)
	require.Equal(t, 1000, cfg.DLQDrainBatch)
	require.Equal(t, 1, cfg.DLQAlertThreshold)
	require.Empty(t, cfg.DLQAlertWebhookURL)
	require.Equal(t, 15*time.Minute, cfg.DLQAlertInterval)
	require.Equal(t, 5*time.Second, cfg.DLQAlertTimeout)

	// The cron expressions are parsed in CRON_TZ: "0 */6 * * *" runs at the
	// next multiple of six hours, "30 3 * * *" at 03:30 UTC.
	from := time.Date(2026, 11, 21, 7, 10, 0, 0, time.UTC)
	require.Equal(t, time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC), cfg.ReanalyzeSchedule().Next(from).UTC())
	require.Equal(t, time.Date(2026, 11, 22, 3, 30, 0, 0, time.UTC), cfg.RetentionSchedule().Next(from).UTC())
}

func TestSchedulerCronTimeZone(t *testing.T) {
	t.Parallel()

	cfg, err := config.Load[config.Scheduler](append(baseSchedulerEnv(), "CRON_TZ=Asia/Tokyo", "RETENTION_CRON=30 3 * * *"))
	require.NoError(t, err)
	from := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC) // 09:00 in Tokyo
	require.Equal(t, time.Date(2026, 11, 21, 18, 30, 0, 0, time.UTC), cfg.RetentionSchedule().Next(from).UTC())
}

func TestEveryRunsOnMultiplesOfItsPeriod(t *testing.T) {
	t.Parallel()

	cfg, err := config.Load[config.Scheduler](append(baseSchedulerEnv(), "REANALYZE_CRON=@every 6h", "RETENTION_CRON=@every 2s"))
	require.NoError(t, err)
	from := time.Date(2026, 11, 21, 7, 10, 3, 500, time.UTC)
	require.Equal(t, time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC), cfg.ReanalyzeSchedule().Next(from))
	require.Equal(t, time.Date(2026, 11, 21, 7, 10, 4, 0, time.UTC), cfg.RetentionSchedule().Next(from))
}

func TestSchedulerAgingAndEscalationCanBeTurnedOff(t *testing.T) {
	t.Parallel()

	cfg, err := config.Load[config.Scheduler](append(baseSchedulerEnv(), "AGING_INTERVAL=0", "ESCALATE_SCHEDULED_AFTER=0"))
	require.NoError(t, err)
	require.Zero(t, cfg.AgingInterval)
	require.Zero(t, cfg.EscalateScheduledAfter)
}

func TestWebhookURLIsAccepted(t *testing.T) {
	t.Parallel()

	cfg, err := config.Load[config.Scheduler](append(baseSchedulerEnv(), "DLQ_ALERT_WEBHOOK_URL=https://hooks.example.com/services/T0/B1/secret", "DLQ_ALERT_THRESHOLD=0"))
	require.NoError(t, err)
	require.Equal(t, "https://hooks.example.com/services/T0/B1/secret", cfg.DLQAlertWebhookURL)
	require.Zero(t, cfg.DLQAlertThreshold, "0 turns the alert off")
}

func TestSchedulerBadValues(t *testing.T) {
	t.Parallel()

	runBadValues[config.Scheduler](t, baseSchedulerEnv(), []badValue{
		{name: "missing database url", omit: "DATABASE_URL", wantVar: "DATABASE_URL", wantReason: "required"},
		{name: "bad cron", give: []string{"REANALYZE_CRON=0 */6 * *"}, wantVar: "REANALYZE_CRON", wantValue: "0 */6 * *", wantReason: "not a cron expression"},
		{name: "cron out of range", give: []string{"RETENTION_CRON=61 3 * * *"}, wantVar: "RETENTION_CRON", wantValue: "61 3 * * *", wantReason: "not a cron expression"},
		{name: "empty cron", give: []string{"RETENTION_CRON= "}, wantVar: "RETENTION_CRON", wantValue: " ", wantReason: "must not be empty"},
		{name: "tz inside cron", give: []string{"REANALYZE_CRON=CRON_TZ=UTC 0 * * * *"}, wantVar: "REANALYZE_CRON", wantValue: "CRON_TZ=UTC 0 * * * *", wantReason: "CRON_TZ"},
		{name: "bad time zone", give: []string{"CRON_TZ=Mars/Olympus"}, wantVar: "CRON_TZ", wantValue: "Mars/Olympus", wantReason: "time zone"},
		{name: "queue workers zero", give: []string{"SCHEDULER_QUEUE_WORKERS=0"}, wantVar: "SCHEDULER_QUEUE_WORKERS", wantValue: "0", wantReason: "between 1 and 100"},
		{name: "rescue before timeout", give: []string{"JOB_TIMEOUT=10m", "RESCUE_STUCK_JOBS_AFTER=5m"}, wantVar: "RESCUE_STUCK_JOBS_AFTER", wantValue: "5m", wantReason: "longer than JOB_TIMEOUT"},
		{name: "aging step too short", give: []string{"AGING_STEP=10ms"}, wantVar: "AGING_STEP", wantValue: "10ms", wantReason: "at least 1s"},
		{name: "aging max priority", give: []string{"AGING_MAX_PRIORITY=5"}, wantVar: "AGING_MAX_PRIORITY", wantValue: "5", wantReason: "between 1 and 4"},
		{name: "aging interval negative", give: []string{"AGING_INTERVAL=-1m"}, wantVar: "AGING_INTERVAL", wantValue: "-1m", wantReason: "between 1s and 24h"},
		{name: "escalation after negative", give: []string{"ESCALATE_DEFAULT_AFTER=-5m"}, wantVar: "ESCALATE_DEFAULT_AFTER", wantValue: "-5m", wantReason: "at least 1s"},
		{name: "escalation after not a duration", give: []string{"ESCALATE_SCHEDULED_AFTER=3 hours"}, wantVar: "ESCALATE_SCHEDULED_AFTER", wantValue: "3 hours", wantReason: "not a duration"},
		{name: "escalation interval zero", give: []string{"ESCALATION_INTERVAL=0"}, wantVar: "ESCALATION_INTERVAL", wantValue: "0", wantReason: "between 1s and 24h"},
		{name: "retention too short", give: []string{"RETENTION_PERIOD=5m"}, wantVar: "RETENTION_PERIOD", wantValue: "5m", wantReason: "at least 1h"},
		{name: "stale too short", give: []string{"REANALYZE_STALE_AFTER=1s"}, wantVar: "REANALYZE_STALE_AFTER", wantValue: "1s", wantReason: "at least 1m"},
		{name: "sweep batch", give: []string{"SWEEP_BATCH=0"}, wantVar: "SWEEP_BATCH", wantValue: "0", wantReason: "between 1 and 100000"},
		{name: "bad metrics address", give: []string{"METRICS_ADDR=host:port"}, wantVar: "METRICS_ADDR", wantValue: "host:port", wantReason: "listen address"},
		{name: "drain interval zero", give: []string{"DLQ_DRAIN_INTERVAL=0"}, wantVar: "DLQ_DRAIN_INTERVAL", wantValue: "0", wantReason: "between 1s and 1h"},
		{name: "drain batch too big", give: []string{"DLQ_DRAIN_BATCH=1000000"}, wantVar: "DLQ_DRAIN_BATCH", wantValue: "1000000", wantReason: "between 1 and 100000"},
		{name: "alert threshold negative", give: []string{"DLQ_ALERT_THRESHOLD=-1"}, wantVar: "DLQ_ALERT_THRESHOLD", wantValue: "-1", wantReason: "between 0 and"},
		{name: "alert threshold not a number", give: []string{"DLQ_ALERT_THRESHOLD=many"}, wantVar: "DLQ_ALERT_THRESHOLD", wantValue: "many", wantReason: "not an integer"},
		{name: "webhook not http", give: []string{"DLQ_ALERT_WEBHOOK_URL=ftp://hooks.example.com/T0/B1/secret"}, wantVar: "DLQ_ALERT_WEBHOOK_URL", wantValue: "ftp://hooks.example.com/[redacted]", wantReason: "http or https"},
		{name: "webhook relative", give: []string{"DLQ_ALERT_WEBHOOK_URL=/hooks/secret"}, wantVar: "DLQ_ALERT_WEBHOOK_URL", wantValue: "[redacted]", wantReason: "absolute http or https URL"},
		{name: "alert interval too short", give: []string{"DLQ_ALERT_INTERVAL=10ms"}, wantVar: "DLQ_ALERT_INTERVAL", wantValue: "10ms", wantReason: "at least 1s"},
		{name: "alert timeout too long", give: []string{"DLQ_ALERT_TIMEOUT=5m"}, wantVar: "DLQ_ALERT_TIMEOUT", wantValue: "5m", wantReason: "between 100ms and 30s"},
		{name: "alert timeout over the drain's share", give: []string{"DLQ_ALERT_TIMEOUT=31s"}, wantVar: "DLQ_ALERT_TIMEOUT", wantValue: "31s", wantReason: "between 100ms and 30s"},
	})
}
