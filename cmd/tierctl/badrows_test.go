package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
)

// TestWatchCountsRowsOfAnyShape: rows whose args or metadata are not JSON
// objects, or are very large or deep, are counted like any other.
func TestWatchCountsRowsOfAnyShape(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	shapes := []string{testdb.Large(), testdb.Deep(300)}
	for _, shape := range testdb.NotObjects {
		shapes = append(shapes, shape)
	}
	for _, shape := range shapes {
		testdb.InsertRaw(t, db, testdb.RawJob{Kind: "analysis", Queue: "analysis_default", Args: shape, Metadata: shape})
	}
	out, err := runTierctl(t, dbEnv(db), "watch", "--once")
	require.NoError(t, err, out)
	require.Regexp(t, `analysis_default\s+0\s+7\s+0\s+0\s+0\s+0\s+0\s+\[\.+\] 0/7`, out)
}
