package config_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/config"
)

func TestCheckKindTimeouts(t *testing.T) {
	t.Parallel()

	kinds := map[string]time.Duration{"render": 30 * time.Second, "scan": time.Minute, "sweep": time.Minute}
	tests := []struct {
		name       string
		give       []string
		wantValue  string
		wantReason string // "" means accepted
	}{
		{name: "default", give: nil},
		{name: "one second above the longest", give: []string{"RESCUE_STUCK_JOBS_AFTER=61s"}},
		{name: "equal to the longest", give: []string{"RESCUE_STUCK_JOBS_AFTER=1m", "JOB_TIMEOUT=30s"}, wantValue: "1m",
			wantReason: "must be longer than the timeout of every job kind, or the rescuer retries (and runs twice) jobs a worker may still be running; job kind scan has 1m0s, job kind sweep has 1m0s"},
		{name: "under every kind", give: []string{"RESCUE_STUCK_JOBS_AFTER=20s", "JOB_TIMEOUT=10s"}, wantValue: "20s",
			wantReason: "must be longer than the timeout of every job kind, or the rescuer retries (and runs twice) jobs a worker may still be running; job kind scan has 1m0s, job kind sweep has 1m0s, job kind render has 30s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := config.Load[config.Scheduler](append(baseSchedulerEnv(), tt.give...))
			require.NoError(t, err)
			err = cfg.CheckKindTimeouts(kinds)
			if tt.wantReason == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, config.ErrInvalid, "exits 2")
			var e *config.Error
			require.True(t, errors.As(err, &e))
			require.Equal(t, config.Error{Var: "RESCUE_STUCK_JOBS_AFTER", Value: tt.wantValue, Reason: tt.wantReason}, *e)
		})
	}
}

func TestJobTimeoutSet(t *testing.T) {
	t.Parallel()

	cfg, err := config.Load[config.Scheduler](baseSchedulerEnv())
	require.NoError(t, err)
	require.False(t, cfg.JobTimeoutSet(), "left at its default")
	require.Equal(t, time.Minute, cfg.JobTimeout)

	cfg, err = config.Load[config.Scheduler](append(baseSchedulerEnv(), "JOB_TIMEOUT=1m"))
	require.NoError(t, err)
	require.True(t, cfg.JobTimeoutSet(), "set, even to its default")

	worker, err := loadWorker(t, append(baseWorkerEnv(), "JOB_TIMEOUT=2h"))
	require.NoError(t, err)
	require.True(t, worker.JobTimeoutSet())
	require.Equal(t, 2*time.Hour, worker.JobTimeout)
}
