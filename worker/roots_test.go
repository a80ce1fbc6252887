package worker_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/tiers"
)

// TestAnalysisRootsFromConfig: an analyzer deployment loaded with
// ANALYSIS_ROOTS works a target in the root and cancels one outside it,
// with the target and the root in the reason.
func TestAnalysisRootsFromConfig(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	root, err := filepath.EvalSymlinks(b.fixture)
	require.NoError(t, err)
	outside, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(outside, "x_test.go"), []byte("package x\n"), 0o600))

	cfg := b.workerConfig(t, b.analyzer, "ANALYSIS_ROOTS="+root+"/") // cleaned to root
	b.start(t, cfg, nil)

	opts := b.analyzer.InsertOpts(tiers.Pro, "", false)
	in, err := b.producer.Insert(ctx, jobs.AnalysisArgs{Target: filepath.Join(root, "go"), Tier: "pro"}, opts)
	require.NoError(t, err)
	out, err := b.producer.Insert(ctx, jobs.AnalysisArgs{Target: outside, Tier: "pro"}, opts)
	require.NoError(t, err)

	for id, want := range map[int64]string{in.Job.ID: "completed", out.Job.ID: "cancelled"} {
		testdb.WaitFor(t, 30*time.Second, fmt.Sprintf("job %d %s", id, want), func() bool {
			return b.db.Jobs(t, "id = $1", id)[0].State == want
		})
	}
	var lastError string
	require.NoError(t, b.db.Pool.QueryRow(ctx,
		"SELECT errors[array_length(errors, 1)]->>'error' FROM river_job WHERE id = $1", out.Job.ID).Scan(&lastError))
	require.Equal(t, `JobCancelError: invalid target: target "`+outside+`" is outside the analysis roots `+root, lastError)
}
