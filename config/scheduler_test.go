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
		{name: "bad time zone", give: []string{"CRON_TZ=Mars/Olympus"}, wantVar: "CRON_TZ", wantValue: "Mars/Olympus", wantReason: "time zone"},
		{name: "queue workers zero", give: []string{"SCHEDULER_QUEUE_WORKERS=0"}, wantVar: "SCHEDULER_QUEUE_WORKERS", wantValue: "0", wantReason: "between 1 and 100"},
		{name: "rescue before timeout", give: []string{"JOB_TIMEOUT=10m", "RESCUE_STUCK_JOBS_AFTER=5m"}, wantVar: "RESCUE_STUCK_JOBS_AFTER", wantValue: "5m", wantReason: "longer than JOB_TIMEOUT"},
		{name: "aging step too short", give: []string{"AGING_STEP=10ms"}, wantVar: "AGING_STEP", wantValue: "10ms", wantReason: "at least 1s"},
		{name: "aging max priority", give: []string{"AGING_MAX_PRIORITY=5"}, wantVar: "AGING_MAX_PRIORITY", wantValue: "5", wantReason: "between 1 and 4"},
		{name: "aging interval negative", give: []string{"AGING_INTERVAL=-1m"}, wantVar: "AGING_INTERVAL", wantValue: "-1m", wantReason: "between 1s and 24h"},
		{name: "escalation after negative", give: []string{"ESCALATE_DEFAULT_AFTER=-5m"}, wantVar: "ESCALATE_DEFAULT_AFTER", wantValue: "-5m", wantReason: "at least 1s"},
		{name: "escalation after not a duration", give: []string{"ESCALATE_SCHEDULED_AFTER=3 hours"}, wantVar: "ESCALATE_SCHEDULED_AFTER", wantValue: "3 hours", wantReason: "not a duration"},
		{name: "escalation interval zero", give: []string{"ESCALATION_INTERVAL=0"}, wantVar: "ESCALATION_INTERVAL", wantValue: "0", wantReason: "between 1s and 24h"},
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
