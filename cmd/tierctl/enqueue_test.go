package main

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/internal/testdb"
)

// TestEnqueueChecksAnalysisRoots: tierctl enqueue checks its targets
// against ANALYSIS_ROOTS as the API does, before it inserts anything; a
// target outside them, or a bad ANALYSIS_ROOTS, exits 2.
func TestEnqueueChecksAnalysisRoots(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	fixture, err := filepath.Abs("../../jobs/scan/testdata/fixture")
	require.NoError(t, err)
	cmdDir, err := filepath.Abs(".")
	require.NoError(t, err)

	// Outside the roots: a usage error naming the target and the roots.
	_, err = runTierctl(t, append(dbEnv(db), "ANALYSIS_ROOTS="+fixture+":/nonexistent/root"),
		"enqueue", "--count", "4", "--target", "../../jobs/scan/testdata/fixture/go", "--target", ".")
	var usage *usageError
	require.True(t, errors.As(err, &usage), "%v", err)
	require.EqualError(t, err, `--target "." (`+cmdDir+`) is outside the analysis roots `+fixture+`:/nonexistent/root (ANALYSIS_ROOTS)`)

	// A sibling sharing the root's prefix is outside too.
	_, err = runTierctl(t, append(dbEnv(db), "ANALYSIS_ROOTS="+filepath.Join(fixture, "go", "pk")),
		"enqueue", "--count", "4", "--target", "../../jobs/scan/testdata/fixture/go/pkg")
	require.ErrorContains(t, err, `is outside the analysis roots `+fixture+`/go/pk (ANALYSIS_ROOTS)`)

	// A bad ANALYSIS_ROOTS is a configuration error (exit 2).
	_, err = runTierctl(t, append(dbEnv(db), "ANALYSIS_ROOTS=jobs"), "enqueue", "--count", "4")
	require.ErrorIs(t, err, config.ErrInvalid)
	require.ErrorContains(t, err, `ANALYSIS_ROOTS="jobs": "jobs" is not an absolute directory`)
	require.Zero(t, db.Count(t, `SELECT count(*) FROM river_job`), "nothing inserted")

	// Inside the roots (the root itself, a directory below it): inserted.
	out, err := runTierctl(t, append(dbEnv(db), "ANALYSIS_ROOTS="+fixture+"/"),
		"enqueue", "--count", "4", "--target", "../../jobs/scan/testdata/fixture", "--target", "../../jobs/scan/testdata/fixture/go")
	require.NoError(t, err, out)
	require.Equal(t, 2, db.Count(t, `SELECT count(*) FROM river_job WHERE args->>'target' = $1`, fixture))
	require.Equal(t, 2, db.Count(t, `SELECT count(*) FROM river_job WHERE args->>'target' = $1`, fixture+"/go"))
}
