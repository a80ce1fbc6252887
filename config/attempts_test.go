package config_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/producer"
	"github.com/tierq/tierq/service"
)

// TestMaxAttemptsDefaultIsTheProducers: MAX_ATTEMPTS defaults to
// producer.DefaultMaxAttempts (10) in the API, the worker and the
// scheduler alike, the attempts of a client made with
// producer.ClientConfig: one default for every insert tierq makes. Its
// range is the one a kind may declare (service.MaxAttempts).
func TestMaxAttemptsDefaultIsTheProducers(t *testing.T) {
	t.Parallel()

	api, err := config.Load[config.API](baseAPIEnv())
	require.NoError(t, err)
	worker, err := loadWorker(t, baseWorkerEnv())
	require.NoError(t, err)
	scheduler, err := config.Load[config.Scheduler](baseSchedulerEnv())
	require.NoError(t, err)

	require.Equal(t, 10, producer.DefaultMaxAttempts)
	require.Equal(t, producer.DefaultMaxAttempts, producer.ClientConfig("", nil).MaxAttempts)
	require.Equal(t, producer.DefaultMaxAttempts, api.MaxAttempts, "API")
	require.Equal(t, producer.DefaultMaxAttempts, worker.MaxAttempts, "worker")
	require.Equal(t, producer.DefaultMaxAttempts, scheduler.MaxAttempts, "scheduler")

	_, err = config.Load[config.API](append(baseAPIEnv(), "MAX_ATTEMPTS=1000"))
	require.NoError(t, err)
	require.Equal(t, 1000, service.MaxMaxAttempts)
}
