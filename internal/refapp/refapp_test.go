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
		proctest.Deployment{Name: "scheduler", Run: refapp.RunScheduler},
		proctest.Deployment{Name: "analyzer", Run: refapp.RunWorker, Env: []string{"WORKER_SERVICE=analyzer", "ANALYSIS_ROOTS=" + t.TempDir()}},
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
}
