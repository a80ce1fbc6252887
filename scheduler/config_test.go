package scheduler_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/limits"
	"github.com/tierq/tierq/scheduler"
	"github.com/tierq/tierq/service"
	"github.com/tierq/tierq/tiers"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	registry, err := service.NewRegistry()
	require.NoError(t, err)
	// The mailer (services_test.go), described without a pool: send_mail
	// declares 2m, purge_bounces (periodic) the default 1m.
	mailer, err := service.New(&service.Config{
		Name:          "mailer",
		Kinds:         []service.Kind{service.WorkerKind(&sendWorker{}, service.Timeout[sendArgs](2*time.Minute))},
		PeriodicKinds: []service.Kind{service.WorkerKind(&purgeWorker{})},
	})
	require.NoError(t, err)
	mailers, err := service.NewRegistry(mailer)
	require.NoError(t, err)
	// extraKinds are ExtraKinds returning kinds, built without a pool.
	extraKinds := func(kinds ...service.Kind) func(*pgxpool.Pool) []service.Kind {
		return func(pool *pgxpool.Pool) []service.Kind {
			if pool != nil {
				panic("Validate calls ExtraKinds with a nil pool")
			}
			return kinds
		}
	}
	export := service.WorkerKind(&exportWorker{}, service.Timeout[exportArgs](3*time.Minute))

	tests := []struct {
		name string
		give scheduler.Config
		want []string // each a line of the error; none: valid
	}{
		{name: "defaults", give: scheduler.Config{Registry: registry}},
		{name: "turned off", give: scheduler.Config{Registry: registry, AgingInterval: -1, EscalateScheduledAfter: -1, DLQAlertThreshold: -1}},
		{name: "every problem at once", give: scheduler.Config{
			QueueWorkers: 101, RescueStuckJobsAfter: time.Minute, AgingInterval: 25 * time.Hour, AgingStep: time.Millisecond,
			AgingMaxPriority: 5, EscalationInterval: time.Millisecond, EscalateDefaultAfter: -time.Second, SweepBatch: -1,
			DLQDrainInterval: 2 * time.Hour, DLQDrainBatch: 100_001, DLQAlertWebhookURL: "ftp://hooks", DLQAlertInterval: time.Millisecond,
			DLQAlertTimeout: time.Minute, MaxAttempts: -1,
		}, want: []string{
			"scheduler: Registry is required",
			"scheduler: QueueWorkers is 101: must be between 1 and 100",
			"scheduler: RescueStuckJobsAfter is 1m0s: must be longer than JobTimeout (1m0s), the timeout of job kinds without their own, or such jobs are rescued while they still run",
			"scheduler: AgingInterval is 25h0m0s: must be between 1s and 24h0m0s",
			"scheduler: AgingStep is 1ms: must be at least 1s",
			"scheduler: AgingMaxPriority is 5: must be between 1 and 4",
			"scheduler: EscalationInterval is 1ms: must be between 1s and 24h0m0s",
			"scheduler: EscalateDefaultAfter is -1s: must be at least 1s",
			"scheduler: SweepBatch is -1: must be between 1 and 100000",
			"scheduler: DLQDrainInterval is 2h0m0s: must be between 1s and 1h0m0s",
			"scheduler: DLQDrainBatch is 100001: must be between 1 and 100000",
			"scheduler: DLQAlertWebhookURL must be an absolute http or https URL",
			"scheduler: DLQAlertInterval is 1ms: must be at least 1s",
			"scheduler: DLQAlertTimeout is 1m0s: must be between 100ms and 30s",
			"scheduler: MaxAttempts is -1: must be between 1 and 1000",
		}},
		{name: "kinds' timeouts", give: scheduler.Config{Registry: mailers, RescueStuckJobsAfter: 3 * time.Minute}},
		// RescueStuckJobsAfter not longer than a kind's timeout is one of
		// the problems, after JobTimeout's, as Run reports it.
		{name: "kinds' timeouts with other problems", give: scheduler.Config{
			Registry: mailers, QueueWorkers: 101, RescueStuckJobsAfter: 90 * time.Second, MaxAttempts: -1,
		}, want: []string{
			"scheduler: QueueWorkers is 101: must be between 1 and 100",
			"scheduler: RescueStuckJobsAfter (1m30s) must be longer than the timeout of every job kind, or the rescuer retries (and runs twice) jobs a worker may still be running; job kind send_mail has 2m0s",
			"scheduler: MaxAttempts is -1: must be between 1 and 1000",
		}},
		{name: "own kinds' timeouts", give: scheduler.Config{Registry: registry, RescueStuckJobsAfter: time.Minute, JobTimeout: 30 * time.Second}, want: []string{
			"scheduler: RescueStuckJobsAfter (1m0s) must be longer than the timeout of every job kind, or the rescuer retries (and runs twice) jobs a worker may still be running; job kind aging_sweep has 1m0s, job kind dlq_drain has 1m0s, job kind escalation_sweep has 1m0s",
		}},
		{name: "an extra kind", give: scheduler.Config{Registry: mailers, ExtraKinds: extraKinds(export)}},
		{name: "tenant limits", give: scheduler.Config{Registry: mailers, Limits: limits.Config{Services: map[string]limits.Tiers{
			"mailer": {tiers.Free: {MaxRunning: 1, Rate: limits.Rate{Count: 10, Per: time.Second}, DailyQuota: 100}},
		}}}},
		{name: "tenant limits' problems", give: scheduler.Config{Registry: mailers, Limits: limits.Config{Services: map[string]limits.Tiers{
			"mailer": {tiers.Free: {MaxRunning: -1}, tiers.Pro: {DailyQuota: -2}},
			"ghost":  {tiers.Pro: {DailyQuota: 5}},
		}}}, want: []string{
			"scheduler: Limits: service mailer, tier free: max_running is -1: must be between 0 and 1000000 (0: no cap)",
			"scheduler: Limits: service mailer, tier pro: daily_quota is -2: must be between 0 and 1000000000 (0: no quota)",
			"scheduler: Limits: service ghost is not a service of Registry (mailer)",
		}},
		{name: "an extra kind's timeout", give: scheduler.Config{Registry: mailers, ExtraKinds: extraKinds(export), RescueStuckJobsAfter: 3 * time.Minute}, want: []string{
			"scheduler: RescueStuckJobsAfter (3m0s) must be longer than the timeout of every job kind, or the rescuer retries (and runs twice) jobs a worker may still be running; job kind audit_export has 3m0s",
		}},
		{name: "extra kinds' problems", give: scheduler.Config{
			Registry:   mailers,
			ExtraKinds: extraKinds(export, service.Kind{}, service.WorkerKind(&sendWorker{}), export, service.WorkerKind(&scheduler.AgingSweepWorker{})),
		}, want: []string{
			`scheduler: ExtraKinds: kind 1 (""): invalid service: kind not made by WorkerKind`,
			"scheduler: ExtraKinds: kind send_mail is registered twice (returned twice, a kind of Registry's or the scheduler's own)",
			"scheduler: ExtraKinds: kind audit_export is registered twice (returned twice, a kind of Registry's or the scheduler's own)",
			"scheduler: ExtraKinds: kind aging_sweep is registered twice (returned twice, a kind of Registry's or the scheduler's own)",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			before := tt.give
			err := tt.give.Validate()
			// Funcs compare equal only when nil: ExtraKinds is compared
			// by its pointer.
			require.Equal(t, reflect.ValueOf(before.ExtraKinds).Pointer(), reflect.ValueOf(tt.give.ExtraKinds).Pointer())
			before.ExtraKinds, tt.give.ExtraKinds = nil, nil
			require.Equal(t, before, tt.give, "Validate changes nothing")
			if len(tt.want) == 0 {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, strings.Join(tt.want, "\n"))
			if strings.Contains(err.Error(), "must be longer than the timeout of every job kind") {
				var kinds *scheduler.KindTimeoutsError
				require.ErrorAs(t, err, &kinds, "Run's error, among the others")
			}
		})
	}
}

func TestCheckKindTimeouts(t *testing.T) {
	t.Parallel()
	timeouts := map[string]time.Duration{"render": 30 * time.Second, "scan": time.Minute, "sweep": time.Minute}
	require.NoError(t, scheduler.CheckKindTimeouts(61*time.Second, timeouts))

	err := scheduler.CheckKindTimeouts(time.Minute, timeouts)
	var e *scheduler.KindTimeoutsError
	require.True(t, errors.As(err, &e))
	require.Equal(t, []string{"scan has 1m0s", "sweep has 1m0s"}, e.Over)
	require.EqualError(t, err, "scheduler: RescueStuckJobsAfter (1m0s) must be longer than the timeout of every job kind, "+
		"or the rescuer retries (and runs twice) jobs a worker may still be running; job kind scan has 1m0s, job kind sweep has 1m0s")
}

// TestRiverConfigTakesServices: RiverConfig uses the registry it is given,
// so Config.Registry is not required then; without one, it is.
func TestRiverConfigTakesServices(t *testing.T) {
	t.Parallel()
	services := testdb.Registry(t)

	rc, err := scheduler.RiverConfig(scheduler.Config{}, nil, services, newMetrics(t, prometheus.NewRegistry()))
	require.NoError(t, err)
	require.Equal(t, time.Hour, rc.RescueStuckJobsAfter)

	_, err = scheduler.RiverConfig(scheduler.Config{}, nil, nil, newMetrics(t, prometheus.NewRegistry()))
	require.EqualError(t, err, "scheduler: Registry is required")

	rc, err = scheduler.RiverConfig(scheduler.Config{Registry: services}, nil, nil, newMetrics(t, prometheus.NewRegistry()))
	require.NoError(t, err, "Config.Registry when services is nil")
	require.Len(t, rc.PeriodicJobs, 3+len(services.PeriodicJobs()))
}
