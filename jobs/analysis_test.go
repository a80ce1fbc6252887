package jobs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/jobs"
)

type analysisBundle struct {
	db       *testdb.DB
	producer *river.Client[pgx.Tx]
	root     string // the analysis root
	inside   string // a checkout in it, with two Go tests
	outside  string // a checkout outside it, with two Go tests
}

// setupAnalysis makes a root with a checkout in it and one outside it, and
// starts a real River client working analysis_default with an
// AnalysisWorker confined to the root.
func setupAnalysis(t *testing.T) *analysisBundle {
	t.Helper()
	base, err := filepath.EvalSymlinks(t.TempDir()) // the reasons quote resolved paths
	require.NoError(t, err)
	b := &analysisBundle{
		db:      testdb.New(t),
		root:    filepath.Join(base, "repos"),
		inside:  filepath.Join(base, "repos", "acme"),
		outside: filepath.Join(base, "elsewhere"),
	}
	for _, dir := range []string{b.inside, b.outside} {
		require.NoError(t, os.MkdirAll(dir, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "demo_test.go"),
			[]byte("package demo\n\nimport \"testing\"\n\nfunc TestOne(t *testing.T) {}\n\nfunc TestTwo(t *testing.T) {}\n"), 0o600))
	}
	b.producer = b.db.Producer(t)

	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	workers := river.NewWorkers()
	river.AddWorker(workers, jobs.NewAnalysisWorker(b.db.Pool, logger, b.root))
	b.db.Start(t, &river.Config{
		// River's own insert notification of the chained specview job once
		// an hour: the analyses' own notify each (TestAnalysisRunsForTheTierInItsMetadata).
		FetchCooldown:       time.Hour,
		FetchPollInterval:   time.Hour,
		Logger:              logger,
		Queues:              map[string]river.QueueConfig{"analysis_default": {MaxWorkers: 2, FetchCooldown: 10 * time.Millisecond, FetchPollInterval: 50 * time.Millisecond}},
		Schema:              b.db.Schema,
		SkipUnknownJobCheck: true, // the chained specview job: nobody works it here
		Workers:             workers,
	})
	return b
}

// finished waits for job id to be completed or cancelled and returns its
// state, attempt and last error ("" when none).
func (b *analysisBundle) finished(t *testing.T, id int64) (state string, attempt int, lastError string) {
	t.Helper()
	testdb.WaitFor(t, 30*time.Second, fmt.Sprintf("job %d finished", id), func() bool {
		s := b.db.Jobs(t, "id = $1", id)[0].State
		return s == "completed" || s == "cancelled"
	})
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `
		SELECT state::text, attempt, coalesce(errors[array_length(errors, 1)]->>'error', '')
		FROM river_job WHERE id = $1`, id).Scan(&state, &attempt, &lastError))
	return state, attempt, lastError
}

func TestAnalysisTargetConfinedToRoots(t *testing.T) {
	t.Parallel()
	b := setupAnalysis(t)
	ctx := context.Background()
	require.NoError(t, os.Symlink(b.outside, filepath.Join(b.root, "escape")))

	insert := func(target string) int64 {
		res, err := b.producer.Insert(ctx, jobs.AnalysisArgs{Target: target, UserID: "u_1", Tier: "free"},
			&river.InsertOpts{Queue: "analysis_default"})
		require.NoError(t, err)
		return res.Job.ID
	}
	// A producer that bypasses the API inserts the row itself: nothing
	// cleans its target.
	insertRaw := func(target string) int64 {
		var id int64
		require.NoError(t, b.db.Pool.QueryRow(ctx, `
			INSERT INTO river_job (kind, queue, args, priority, max_attempts, state)
			VALUES ('analysis', 'analysis_default', jsonb_build_object('target', $1::text, 'tier', 'free'), 4, 25, 'available')
			RETURNING id`, target).Scan(&id))
		return id
	}

	tests := []struct {
		name      string
		id        int64
		wantState string
		wantError string
	}{
		{"inside", insert(b.inside), "completed", ""},
		{"outside", insert(b.outside), "cancelled",
			`invalid target: target "` + b.outside + `" is outside the analysis roots ` + b.root},
		{"a symlink in the root leading out", insert(filepath.Join(b.root, "escape")), "cancelled",
			`invalid target: target "` + b.root + `/escape" (it resolves to "` + b.outside + `") is outside the analysis roots ` + b.root},
		{"dot-dot inserted straight into river_job", insertRaw(b.root + "/../elsewhere"), "cancelled",
			`invalid target: target "` + b.root + `/../elsewhere" (it resolves to "` + b.outside + `") is outside the analysis roots ` + b.root},
		{"dot-dot to the file system root", insertRaw(b.root + "/../../../../../../../../etc"), "cancelled",
			`(it resolves to "/etc") is outside the analysis roots ` + b.root},
		{"missing, as before roots", insert(filepath.Join(b.root, "gone")), "cancelled",
			`invalid target: target "` + b.root + `/gone" does not exist`},
	}
	for _, tt := range tests {
		state, attempt, lastError := b.finished(t, tt.id)
		require.Equal(t, tt.wantState, state, "%s: %s", tt.name, lastError)
		require.Equal(t, 1, attempt, "%s: one attempt, never retried", tt.name)
		if tt.wantError == "" {
			require.Empty(t, lastError, tt.name)
			continue
		}
		require.Contains(t, lastError, tt.wantError, tt.name)
	}

	// Only the target inside was analysed.
	rows, err := b.db.Pool.Query(ctx, `SELECT target FROM analysis_results ORDER BY id`)
	require.NoError(t, err)
	targets, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{b.inside}, targets)
	var total int
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT total_tests FROM analysis_results`).Scan(&total))
	require.Equal(t, 2, total)
}

// TestAnalysisRunsForTheTierInItsMetadata: an analysis whose tier is in its
// metadata only (args without "tier", as a producer that follows the
// metadata contract inserts it) stores that tier with its result and chains
// the spec for it and the same tenant; the metadata's tier wins over args'.
func TestAnalysisRunsForTheTierInItsMetadata(t *testing.T) {
	t.Parallel()
	b := setupAnalysis(t)
	ctx := context.Background()
	conn, err := b.db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `LISTEN `+pgx.Identifier{b.db.Schema + ".river_insert"}.Sanitize())
	require.NoError(t, err)
	for _, args := range []jobs.AnalysisArgs{
		{Target: b.inside, UserID: "u_meta"},
		{Target: b.inside + "/.", UserID: "u_meta", Tier: "free"},
	} {
		res, err := b.producer.Insert(ctx, args, &river.InsertOpts{
			Queue: "analysis_default", Metadata: []byte(`{"tierq:tier": "enterprise", "tierq:tenant": "u_meta"}`),
		})
		require.NoError(t, err)
		state, _, lastError := b.finished(t, res.Job.ID)
		require.Equal(t, "completed", state, lastError)

		var tier string
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT tier FROM analysis_results WHERE job_id = $1`, res.Job.ID).Scan(&tier))
		require.Equal(t, "enterprise", tier)
		var specArgs, specMeta []byte
		var specQueue string
		var specPriority int
		require.NoError(t, b.db.Pool.QueryRow(ctx, `
			SELECT s.queue, s.priority, s.args, s.metadata FROM river_job AS s
			JOIN analysis_results AS r ON (s.args->>'analysis_result_id')::bigint = r.id
			WHERE s.kind = 'specview' AND r.job_id = $1`, res.Job.ID).Scan(&specQueue, &specPriority, &specArgs, &specMeta))
		require.Equal(t, "specview_default", specQueue, "the class of the analysis' queue")
		require.Equal(t, 2, specPriority, "enterprise's starting priority")
		require.JSONEq(t, `{"tierq:tier": "enterprise", "tierq:tenant": "u_meta", "tierq:original_queue": "specview_default", "tierq:original_priority": 2}`, string(specMeta))
		var spec struct {
			Tier string `json:"tier"`
		}
		require.NoError(t, json.Unmarshal(specArgs, &spec))
		require.Equal(t, "enterprise", spec.Tier)
	}

	// Each chained spec woke its queue's workers, though River's limit let
	// through only the first of its own notifications.
	_, err = b.db.Pool.Exec(ctx, `SELECT pg_notify(current_schema() || '.river_insert', 'end')`)
	require.NoError(t, err)
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	specs := 0
	for {
		n, err := conn.Conn().WaitForNotification(waitCtx)
		require.NoError(t, err)
		if n.Payload == "end" {
			break
		}
		if n.Payload == `{"queue": "specview_default"}` {
			specs++
		}
	}
	require.Equal(t, 2, specs)
}
