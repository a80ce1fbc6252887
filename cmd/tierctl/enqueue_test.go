package main

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/ctl"
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
	_, err = runTierctl(t, append(dbEnv(t, db), "ANALYSIS_ROOTS="+fixture+":/nonexistent/root"),
		"enqueue", "--count", "4", "--target", "../../jobs/scan/testdata/fixture/go", "--target", ".")
	var usage *ctl.UsageError
	require.True(t, errors.As(err, &usage), "%v", err)
	require.EqualError(t, err, `--target "." (`+cmdDir+`) is outside the analysis roots `+fixture+`:/nonexistent/root (ANALYSIS_ROOTS)`)

	// A sibling sharing the root's prefix is outside too.
	_, err = runTierctl(t, append(dbEnv(t, db), "ANALYSIS_ROOTS="+filepath.Join(fixture, "go", "pk")),
		"enqueue", "--count", "4", "--target", "../../jobs/scan/testdata/fixture/go/pkg")
	require.ErrorContains(t, err, `is outside the analysis roots `+fixture+`/go/pk (ANALYSIS_ROOTS)`)

	// A bad ANALYSIS_ROOTS is a configuration error (exit 2).
	_, err = runTierctl(t, append(dbEnv(t, db), "ANALYSIS_ROOTS=jobs"), "enqueue", "--count", "4")
	require.ErrorIs(t, err, config.ErrInvalid)
	require.ErrorContains(t, err, `ANALYSIS_ROOTS="jobs": "jobs" is not an absolute directory`)
	require.Zero(t, db.Count(t, `SELECT count(*) FROM river_job`), "nothing inserted")

	// Inside the roots (the root itself, a directory below it): inserted.
	out, err := runTierctl(t, append(dbEnv(t, db), "ANALYSIS_ROOTS="+fixture+"/"),
		"enqueue", "--count", "4", "--target", "../../jobs/scan/testdata/fixture", "--target", "../../jobs/scan/testdata/fixture/go")
	require.NoError(t, err, out)
	require.Equal(t, 2, db.Count(t, `SELECT count(*) FROM river_job WHERE args->>'target' = $1`, fixture))
	require.Equal(t, 2, db.Count(t, `SELECT count(*) FROM river_job WHERE args->>'target' = $1`, fixture+"/go"))
}

// TestEnqueueChecksUserIDs: the user ids tierctl enqueue makes from
// --user-prefix are tenant ids, held to jobmeta.CheckTenant as the API
// holds user_id: a prefix that makes a bad one is a usage error (exit 2)
// naming the flag and the problem, before anything is inserted.
func TestEnqueueChecksUserIDs(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	env := append(dbEnv(t, db), "ANALYSIS_ROOTS=/")

	for prefix, want := range map[string]string{
		strings.Repeat("u", 188): `--user-prefix: invalid user id: 201 bytes, longer than 200 (the prefix is 188 bytes of it, then "_enterprise_6")`,
		"a\x1bb":                 "--user-prefix: invalid user id: control character U+001B at byte 1",
		"a\u009bb":               "--user-prefix: invalid user id: control character U+009B at byte 1",
		"a\xffb":                 "--user-prefix: invalid user id: invalid UTF-8 at byte 1",
	} {
		_, err := runTierctl(t, env, "enqueue", "--count", "4", "--mix", "enterprise=1", "--user-prefix", prefix)
		var usage *ctl.UsageError
		require.True(t, errors.As(err, &usage), "%v", err)
		require.EqualError(t, err, want)
	}
	require.Zero(t, db.Count(t, `SELECT count(*) FROM river_job`), "nothing inserted")

	// 187 bytes and "_enterprise_6": 200, the limit.
	out, err := runTierctl(t, env, "enqueue", "--count", "7", "--mix", "enterprise=1", "--scheduled", "0", "--user-prefix", strings.Repeat("u", 187))
	require.NoError(t, err, out)
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM river_job WHERE metadata->>'tierq:tenant' = $1`, strings.Repeat("u", 187)+"_enterprise_6"))
}
