package worker_test

import (
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/service"
	"github.com/tierq/tierq/worker"
)

// riverConfig is the River configuration of the deployment that cfg, loaded
// with described, configures, running services on pool: cfg translated
// (config.Worker.Config), worker.New, Deployment.RiverConfig.
func riverConfig(cfg config.Worker, described, services *service.Registry, pool *pgxpool.Pool, logger *slog.Logger) (*river.Config, error) {
	workerConfig, err := cfg.Config(described, logger)
	if err != nil {
		return nil, err
	}
	deployment, err := worker.New(workerConfig)
	if err != nil {
		return nil, err
	}
	return deployment.RiverConfig(services, pool)
}

// runConfig is cfg, loaded with described, translated for worker.Run, its
// services built on Run's pool by newServices.
func runConfig(t testing.TB, cfg config.Worker, described *service.Registry, logger *slog.Logger, newServices func(*pgxpool.Pool) (*service.Registry, error)) worker.Config {
	t.Helper()
	workerConfig, err := cfg.Config(described, logger)
	require.NoError(t, err)
	workerConfig.NewServices = newServices
	return workerConfig
}
