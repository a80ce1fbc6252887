package jobs_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/jobs/jobsconfig"
)

// TestEveryKindDeclaresItsTimeout: each kind of the reference app declares
// its timeout where it is made (service.Timeout), and the registry, with
// the analyzer's maintenance, has every kind's, periodic kinds included;
// the load-test kind, no service's, declares its own. River applies each,
// in the worker that runs a job and in the leader's rescuer alike.
func TestEveryKindDeclaresItsTimeout(t *testing.T) {
	t.Parallel()

	cfg, err := config.Load[config.Scheduler]([]string{"DATABASE_URL=postgres://127.0.0.1:1/none"})
	require.NoError(t, err)
	maintenance, err := jobsconfig.LoadMaintenance(nil, &cfg)
	require.NoError(t, err)
	registry, err := jobs.Registry(jobs.Deps{Maintenance: maintenance})
	require.NoError(t, err)
	require.Equal(t, map[string]time.Duration{
		"analysis":        time.Minute,
		"specview":        30 * time.Second,
		"reanalyze_stale": time.Minute,
		"retention":       time.Minute,
	}, registry.Timeouts())

	// Without the maintenance (every deployment but the scheduler): the
	// services' kinds only.
	registry, err = jobs.Registry(jobs.Deps{})
	require.NoError(t, err)
	require.Equal(t, map[string]time.Duration{"analysis": time.Minute, "specview": 30 * time.Second}, registry.Timeouts())

	loadTest := jobs.LoadTestKind(nil)
	require.Equal(t, "loadtest", loadTest.Name())
	// Not the job's sleep: the chaos suite's longest job (3.5 s) fits, a
	// job sleeping longer than a minute ends in the timeout.
	require.Equal(t, time.Minute, loadTest.Timeout())
	require.NoError(t, loadTest.Err())
}
