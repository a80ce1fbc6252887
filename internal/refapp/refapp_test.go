package refapp_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/proctest"
	"github.com/tierq/tierq/internal/refapp"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/limits"
	"github.com/tierq/tierq/tiers"
)

// TestProcessesApplyTheReferenceLine: on a database that only tierq's
// migrations made (`tierctl migrate`: no reference app's table), the
// reference app's scheduler and its two worker deployments, started at
// once, apply the reference app's migration line before they start: its
// tables exist, its version is recorded, and exactly one of the three
// applied it (the others waited on its lock and found nothing to do).
func TestProcessesApplyTheReferenceLine(t *testing.T) {
	t.Parallel()
	db := testdb.NewCore(t)
	tables := func() int {
		return db.Count(t, `SELECT count(*) FROM pg_catalog.pg_tables
			WHERE schemaname = $1 AND tablename IN ('analysis_results', 'spec_documents', '`+jobs.MigrationTable+`')`, db.Schema)
	}
	require.Zero(t, tables())

	logs := proctest.Start(t, []string{"DATABASE_URL=" + db.URL, "DATABASE_SCHEMA=" + db.Schema, "DATABASE_MAX_CONNS=4", "SOFT_STOP_TIMEOUT=5s"},
		proctest.Deployment{Name: "scheduler", Run: refapp.RunScheduler, Env: []string{"ANALYZER_FREE_TENANT_DAILY_QUOTA=100", "SPECGEN_PRO_TENANT_RATE=10/s"}},
		// A worker given other limits reads the table, never its own
		// environment, and records nothing.
		proctest.Deployment{Name: "analyzer", Run: refapp.RunWorker, Env: []string{"WORKER_SERVICE=analyzer", "ANALYSIS_ROOTS=" + t.TempDir(), "ANALYZER_FREE_TENANT_DAILY_QUOTA=5"}},
		proctest.Deployment{Name: "specgen", Run: refapp.RunWorker, Env: []string{"WORKER_SERVICE=specgen"}},
	)
	proctest.WaitOutput(t, logs["scheduler"], "scheduler started", 20*time.Second)
	proctest.WaitOutput(t, logs["analyzer"], "worker started", 20*time.Second)
	proctest.WaitOutput(t, logs["specgen"], "worker started", 20*time.Second)

	require.Equal(t, 3, tables())
	require.Equal(t, 1, db.Count(t, `SELECT max(version_id) FROM `+jobs.MigrationTable))
	applied := 0
	for _, out := range logs {
		applied += strings.Count(out.String(), `msg="reference app migrations applied" schema=`+db.Schema+` applied=[1] version=1`)
	}
	require.Equal(t, 1, applied)

	// The scheduler recorded its environment's tenant limits at start
	// (issue 33), every tier of both services, zeros where unset.
	recorded, err := limits.ReadTiers(t.Context(), db.Pool)
	require.NoError(t, err)
	require.Len(t, recorded, 2)
	require.Equal(t, limits.Tiers{tiers.Free: {DailyQuota: 100}, tiers.Pro: {}, tiers.ProPlus: {}, tiers.Enterprise: {}}, recorded[0].Tiers, recorded[0].Service)
	require.Equal(t, limits.Tiers{tiers.Free: {}, tiers.Pro: {Rate: limits.Rate{Count: 10, Per: time.Second}}, tiers.ProPlus: {}, tiers.Enterprise: {}}, recorded[1].Tiers, recorded[1].Service)
	require.Contains(t, logs["scheduler"].String(), `tenant_limits="analyzer free daily_quota=100; specgen pro rate=10/s"`)
}
