package worker_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/fairshare"
	"github.com/tierq/tierq/producer"
	"github.com/tierq/tierq/service"
	"github.com/tierq/tierq/worker"
)

func TestConfigWithDefaults(t *testing.T) {
	t.Parallel()
	registry := newRegistry(t, newMailer(t, nil, "mail"))

	cfg := worker.Config{Registry: registry, Service: "mailer"}.WithDefaults()
	require.Equal(t, &service.ClassWorkers{Priority: 2, Default: 1, Scheduled: 1}, cfg.Workers, "the service's own")
	require.Equal(t, worker.DefaultLendFloor, cfg.LendFloor)
	require.Equal(t, worker.Tuning{FetchCooldown: time.Millisecond, FetchPollInterval: 250 * time.Millisecond, FairShare: worker.FairShareOn}, cfg.Priority)
	require.Equal(t, worker.Tuning{FetchCooldown: 100 * time.Millisecond, FetchPollInterval: time.Second, FairShare: worker.FairShareOn}, cfg.Default)
	require.Equal(t, worker.Tuning{FetchCooldown: 250 * time.Millisecond, FetchPollInterval: 2 * time.Second, FairShare: worker.FairShareOff}, cfg.Scheduled)
	require.Equal(t, fairshare.DefaultPassInterval, cfg.FairSharePassInterval)
	require.Equal(t, worker.DefaultJobTimeout, cfg.JobTimeout)
	require.Equal(t, producer.DefaultMaxAttempts, cfg.MaxAttempts)
	require.Equal(t, worker.DefaultSoftStopTimeout, cfg.SoftStopTimeout)
	require.NotNil(t, cfg.Logger)
	require.Equal(t, cfg, cfg.WithDefaults(), "applied once")

	set := worker.Config{Registry: registry, Service: "mailer", LendFloor: worker.NoLendFloor, Scheduled: worker.Tuning{FairShare: worker.FairShareOn}}.WithDefaults()
	require.Equal(t, worker.NoLendFloor, set.LendFloor, "a set value is kept")
	require.Equal(t, worker.FairShareOn, set.Scheduled.FairShare)
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	registry := newRegistry(t, newMailer(t, nil, "mail"))

	tests := []struct {
		name string
		give worker.Config
		want []string // each a line of the error; none: valid
	}{
		{name: "defaults", give: worker.Config{Registry: registry, Service: "mailer"}},
		{name: "no registry", give: worker.Config{Service: "mailer"}, want: []string{"worker: Registry is required"}},
		{name: "no service", give: worker.Config{Registry: registry}, want: []string{"worker: Service is required (one of mailer)"}},
		{name: "no queue served", give: worker.Config{Registry: registry, Service: "mailer", Workers: &service.ClassWorkers{}},
			want: []string{"worker: service mailer serves no queue: at least one of Workers.Priority, Workers.Default and Workers.Scheduled must be above 0"}},
		{name: "every problem at once", give: worker.Config{
			Registry: registry, Service: "mailer", Workers: &service.ClassWorkers{Priority: -1, Default: 20_000},
			LendFloor: -2, Scheduled: worker.Tuning{FetchCooldown: 2 * time.Minute, FairShare: 7},
			FairSharePassInterval: 2 * time.Second, JobTimeout: -time.Second, MaxAttempts: 1001,
		}, want: []string{
			"worker: Workers.Priority is -1: must be between 0 and 10000",
			"worker: Workers.Default is 20000: must be between 0 and 10000",
			"worker: LendFloor is -2: must be NoLendFloor (-1) or between 0 and 10000",
			"worker: Scheduled.FetchCooldown is 2m0s: must be between 1ms and 1m",
			"worker: Scheduled.FetchPollInterval is 2s: must not be shorter than the fetch cooldown (2m0s)",
			"worker: Scheduled.FairShare is 7: not a FairShare value",
			"worker: FairSharePassInterval is 2s: must be between 0 and 1s",
			"worker: JobTimeout is -1s: must not be negative",
			"worker: MaxAttempts is 1001: must be between 1 and 1000",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			before := tt.give
			err := tt.give.Validate()
			require.Equal(t, before, tt.give, "Validate changes nothing")
			if len(tt.want) == 0 {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, strings.Join(tt.want, "\n"))
			_, err = worker.New(tt.give)
			require.EqualError(t, err, strings.Join(tt.want, "\n"), "New validates")
		})
	}
}

// TestNewKeepsCopies: what the caller's Config points to (Workers,
// LogAttrs) may change after New without changing the deployment.
func TestNewKeepsCopies(t *testing.T) {
	t.Parallel()
	registry := newRegistry(t, newMailer(t, nil, "mail"))
	workers := &service.ClassWorkers{Priority: 3, Default: 2}
	attrs := []slog.Attr{slog.String("team", "billing")}
	d, err := worker.New(worker.Config{Registry: registry, Service: "mailer", Workers: workers, LogAttrs: attrs})
	require.NoError(t, err)

	workers.Priority = 50
	attrs[0] = slog.String("team", "other")
	require.Equal(t, 3, d.Config().Workers.Priority)
	require.Equal(t, []slog.Attr{slog.String("team", "billing")}, d.Config().LogAttrs)
	require.Equal(t, 3, d.Queues()[0].Workers)

	d.Config().Workers.Priority = 60
	require.Equal(t, 3, d.Config().Workers.Priority, "Config is a copy too")
}
