package ctl

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
)

// TestWatchCountsRowsOfAnyShape: rows whose args or metadata are not JSON
// objects, or are very large or deep, are counted like any other, and
// started ones count as tier "unknown" in the waits.
func TestWatchCountsRowsOfAnyShape(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	for _, shape := range testdb.BadShapes() {
		testdb.InsertRaw(t, db, testdb.RawJob{Kind: "analysis", Queue: "analysis_default", Args: shape, Metadata: shape})
		// Discarded by InsertRaw: attempted now, due 20s ago.
		testdb.InsertRaw(t, db, testdb.RawJob{Kind: "analysis", Queue: "analysis_priority", State: "discarded",
			Args: shape, Metadata: shape, Wait: 20 * time.Second})
	}
	out, err := runTierctl(t, dbEnv(t, db), "watch", "--once")
	require.NoError(t, err, out)
	// SCHEDULED PENDING HELD AVAILABLE RETRYABLE RUNNING OLDEST DEAD
	require.Regexp(t, `(?m)^\s*analysis_default\s+0\s+0\s+0\s+7\s+0\s+0\s+(\d+ms|\d+\.\ds)\s+0$`, out)
	require.Regexp(t, `(?m)^\s*analysis_priority\s+unknown\s+7\s+20\.0s\s+20\.0s$`, out)
}
