// Package workertest builds the River configuration of the reference app's
// worker deployments in tests, as cmd/worker builds it: the configuration
// from an environment (config.LoadWorker), the reference app's services
// (jobs.Registry) built on the test's pool, then worker.New and Deployment.RiverConfig.
package workertest

import (
	"io"
	"log/slog"
	"testing"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/jobs/jobsconfig"
	"github.com/tierq/tierq/worker"
)

// RiverConfig is the River configuration of the reference app's worker
// deployment that environ configures (WORKER_SERVICE=analyzer or specgen,
// and any other variable cmd/worker reads), on db: DATABASE_URL and
// DATABASE_SCHEMA are db's unless environ sets them. Its logger discards.
func RiverConfig(t testing.TB, db *testdb.DB, environ ...string) *river.Config {
	t.Helper()
	described, err := jobs.Registry(jobs.Deps{})
	require.NoError(t, err)
	environ = append([]string{"DATABASE_URL=" + db.URL, "DATABASE_SCHEMA=" + db.Schema}, environ...)
	cfg, err := config.LoadWorker(environ, described)
	require.NoError(t, err)
	analysis, err := config.LoadSection[jobsconfig.AnalysisConfig](environ)
	require.NoError(t, err)

	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	services, err := jobs.Registry(jobs.Deps{Pool: db.Pool, Logger: logger, AnalysisRoots: analysis.Roots})
	require.NoError(t, err)
	workerConfig, err := cfg.Config(described, logger)
	require.NoError(t, err)
	deployment, err := worker.New(workerConfig)
	require.NoError(t, err)
	riverConfig, err := deployment.RiverConfig(services, db.Pool)
	require.NoError(t, err)
	return riverConfig
}
