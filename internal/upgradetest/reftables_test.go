package upgradetest_test

import (
	"context"
	_ "embed"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/proctest"
	"github.com/tierq/tierq/internal/refapp"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/migrate"
)

// resultsBefore is tierq's migration 00001 as every release before issue
// 30 had it (git show de49ab9:migrate/migrations/00001_results.sql): it
// created the reference app's tables in every database.
//
//go:embed testdata/00001_results_before_issue30.sql
var resultsBefore string

// TestReferenceTablesMoveToTheirOwnLine is issue 30's upgrade: a database
// migrated by the releases before it (River's and tierq's migrations, whose
// 00001 created analysis_results and spec_documents), with reference-app
// jobs in every River state, results and a spec, and a dead letter, is
// migrated by today's tierq and started by today's reference app. tierq's
// migrations find nothing to apply (00001 stays recorded); the reference
// app's worker applies its own line when it starts, which takes the tables
// over without recreating them: every row, column, constraint and index is
// as it was, the line records version 1, and the next spec the worker
// writes continues the tables (its id follows the old ones). Both schema
// checks pass: tierq's (migrate.Check) and the reference line's (nothing
// pending the second time).
func TestReferenceTablesMoveToTheirOwnLine(t *testing.T) {
	t.Parallel()
	// tierq's migrations as they are today, then the old 00001's Up: the
	// schema of a database the earlier releases migrated (00001 is a no-op
	// today, 00002 and later are unchanged).
	db := testdb.NewCore(t)
	ctx := t.Context()
	up, _, ok := strings.Cut(strings.SplitN(resultsBefore, "-- +goose Up\n", 2)[1], "-- +goose Down\n")
	require.True(t, ok)
	_, err := db.Pool.Exec(ctx, up)
	require.NoError(t, err)

	// --- What the earlier release left. ---

	// A reference-app job in each of River's states, in analysis_scheduled
	// (the only deployment started below serves specview_* queues).
	var ids []int64
	for _, state := range []string{"available", "scheduled", "pending", "running", "retryable", "completed", "cancelled", "discarded"} {
		var id int64
		require.NoError(t, db.Pool.QueryRow(ctx, `
			INSERT INTO river_job (state, queue, priority, kind, args, metadata, max_attempts, attempt, attempted_at, finalized_at, scheduled_at)
			VALUES ($1::river_job_state, 'analysis_scheduled', 4, 'analysis', jsonb_build_object('target', '/srv/' || $1),
			        '{"tierq:tier": "pro", "tierq:tenant": "u_pro"}', 10,
			        CASE WHEN $1 IN ('available', 'scheduled', 'pending') THEN 0 ELSE 1 END,
			        CASE WHEN $1 IN ('available', 'scheduled', 'pending') THEN NULL ELSE now() - interval '1 minute' END,
			        CASE WHEN $1 IN ('completed', 'cancelled', 'discarded') THEN now() END,
			        CASE WHEN $1 = 'scheduled' THEN now() + interval '1 hour' ELSE now() END)
			RETURNING id`, state).Scan(&id))
		ids = append(ids, id)
	}
	completed := ids[5]
	// The completed analysis's result and an earlier one, and the spec of
	// the first.
	var first, result int64 // 1 and 2
	for _, target := range []string{"/srv/old", "/srv/completed"} {
		require.NoError(t, db.Pool.QueryRow(ctx, `
			INSERT INTO analysis_results (job_id, target, user_id, tier, total_tests, go_tests, python_tests, js_tests,
			                              files_scanned, files_skipped, tests, created_at)
			VALUES ($1, $2, 'u_pro', 'pro', 1, 1, 0, 0, 1, 0,
			        '[{"file": "x_test.go", "name": "TestIt", "framework": "go", "line": 3}]', now() - interval '1 hour')
			RETURNING id`, completed+int64(len(target)), target).Scan(&result))
		if first == 0 {
			first = result
		}
	}
	_, err = db.Pool.Exec(ctx, `INSERT INTO spec_documents (job_id, analysis_result_id, title, content, test_count)
		VALUES ($1, $2, 'old', '# old', 1)`, completed+100, first)
	require.NoError(t, err)
	// A dead letter, drained from river_job as the scheduler drains.
	_, err = db.Pool.Exec(ctx, `
		INSERT INTO dead_letter_jobs (job_id, kind, queue, priority, args, attempt, max_attempts, created_at)
		VALUES ($1 + 1000, 'analysis', 'analysis_default', 4, '{"target": "/srv/dead"}', 10, 10, now() - interval '1 day')`, completed)
	require.NoError(t, err)
	before := referenceSchema(t, db)
	require.Equal(t, 0, db.Count(t, `SELECT count(*) FROM pg_catalog.pg_tables WHERE schemaname = $1 AND tablename = $2`, db.Schema, jobs.MigrationTable))

	// --- Today's tierq: `tierctl migrate`, then the reference app. ---

	res, err := migrate.Up(ctx, db.Pool, db.Schema, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.Empty(t, res.RiverApplied)
	require.Empty(t, res.TierqApplied)
	require.NoError(t, migrate.Check(ctx, db.Pool, db.Schema))

	logs := proctest.Start(t, []string{"DATABASE_URL=" + db.URL, "DATABASE_SCHEMA=" + db.Schema, "DATABASE_MAX_CONNS=4", "SOFT_STOP_TIMEOUT=5s"},
		proctest.Deployment{Name: "specgen", Run: refapp.RunWorker, Env: []string{"WORKER_SERVICE=specgen"}})
	proctest.WaitOutput(t, logs["specgen"], "worker started", 20*time.Second)
	require.Contains(t, logs["specgen"].String(), `level=INFO msg="reference app migrations applied" schema=`+db.Schema+` applied=[1] version=1`+"\n")

	// Taken over, not recreated: the same rows, columns, constraints and
	// indexes, and the line's version recorded.
	require.Equal(t, before, referenceSchema(t, db))
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM `+jobs.MigrationTable+` WHERE version_id = 1 AND is_applied`))
	require.Equal(t, 1, db.Count(t, `SELECT max(version_id) FROM `+jobs.MigrationTable))
	line, err := jobs.Migrations().Up(ctx, db.Pool, db.Schema, nil)
	require.NoError(t, err)
	require.Equal(t, &migrate.LineResult{Version: 1}, line)
	require.NoError(t, migrate.Check(ctx, db.Pool, db.Schema))

	// The reference app works on them: a spec of the completed analysis's
	// result is written after the old one.
	spec, err := db.Producer(t).Insert(ctx, jobs.SpecViewArgs{AnalysisResultID: result, Tier: "pro"},
		&river.InsertOpts{Queue: "specview_priority", Priority: 4})
	require.NoError(t, err)
	testdb.WaitFor(t, 20*time.Second, "the spec job completed", func() bool {
		return db.Jobs(t, "id = $1", spec.Job.ID)[0].State == "completed"
	})
	var specs string
	require.NoError(t, db.Pool.QueryRow(ctx,
		`SELECT jsonb_agg(jsonb_build_array(id, analysis_result_id, title) ORDER BY id)::text FROM spec_documents`).Scan(&specs))
	require.JSONEq(t, `[[1, 1, "old"], [2, 2, "Spec: /srv/completed"]]`, specs)
	// Every old job is where it was.
	require.Equal(t, len(ids), db.Count(t, `SELECT count(*) FROM river_job WHERE id = ANY($1) AND queue = 'analysis_scheduled'`, ids))
}

// referenceSchema is what issue 30's upgrade must leave as it was: every
// row of the reference app's tables and of the jobs, dead letters and
// tierq's versions beside them, and the reference tables' columns,
// constraints and indexes, as JSON by name.
func referenceSchema(t *testing.T, db *testdb.DB) map[string]string {
	t.Helper()
	out := snapshot(t, db)
	queries := map[string]string{
		"columns": `SELECT jsonb_agg(jsonb_build_array(table_name, column_name, ordinal_position, data_type, is_nullable, column_default, is_identity)
			ORDER BY table_name, ordinal_position) FROM information_schema.columns
			WHERE table_schema = $1 AND table_name IN ('analysis_results', 'spec_documents')`,
		"constraints": `SELECT jsonb_agg(jsonb_build_array(conrelid::regclass::text, conname, pg_get_constraintdef(oid)) ORDER BY conname)
			FROM pg_catalog.pg_constraint WHERE connamespace = $1::regnamespace
			AND conrelid::regclass::text IN ('analysis_results', 'spec_documents')`,
		"indexes": `SELECT jsonb_agg(jsonb_build_array(tablename, indexname, indexdef) ORDER BY indexname) FROM pg_catalog.pg_indexes
			WHERE schemaname = $1 AND tablename IN ('analysis_results', 'spec_documents')`,
		"identity": `SELECT jsonb_build_array(
			(SELECT last_value FROM pg_catalog.pg_sequences WHERE schemaname = $1 AND sequencename = 'analysis_results_id_seq'),
			(SELECT last_value FROM pg_catalog.pg_sequences WHERE schemaname = $1 AND sequencename = 'spec_documents_id_seq'))`,
	}
	for name, q := range queries {
		var v string
		require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT (`+q+`)::text`, db.Schema).Scan(&v), name)
		out[name] = v
	}
	return out
}
