package migrate

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFiniteTimestampsRepairsAlike: migration 00010 repairs twice, before
// and after adding its check, with one statement written out twice (goose
// runs SQL only); the two must stay the same.
func TestFiniteTimestampsRepairsAlike(t *testing.T) {
	t.Parallel()
	src, err := migrationFiles.ReadFile("migrations/00010_river_job_finite_timestamps.sql")
	require.NoError(t, err)
	repairs := regexp.MustCompile(`(?ms)^UPDATE river_job SET$.*?;$`).FindAll(src, -1)
	require.Len(t, repairs, 2)
	require.Equal(t, string(repairs[0]), string(repairs[1]))
}
