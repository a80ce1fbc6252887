package jobmetasql_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/jobmetasql"
	"github.com/tierq/tierq/internal/testdb"
)

// TestDueAtAgreesWithDueAtSQL: for one river_job row whose scheduled_at is
// 2026-11-23T10:00:00.123456Z (1795428000123456 µs) and kept due times of
// every form, PostgreSQL (DueAtSQL) and Go (DueAt, on the metadata as
// PostgreSQL prints it) give the same answer, the one stated here.
func TestDueAtAgreesWithDueAtSQL(t *testing.T) {
	t.Parallel()
	tdb := testdb.New(t)
	ctx := context.Background()

	scheduled := time.Date(2026, 11, 23, 10, 0, 0, 123456000, time.UTC)
	const moved = `1795428000123456`
	earlier := time.Date(2026, 11, 23, 7, 0, 0, 5000000, time.UTC) // 1795417200005000 µs
	tests := []struct {
		name     string
		metadata string
		want     time.Time
	}{
		{"kept", `{"tierq_due_at": 1795417200005000, "tierq_moved_at": ` + moved + `}`, earlier},
		{"kept, written with an exponent", `{"tierq_due_at": 1.795417200005e15, "tierq_moved_at": ` + moved + `}`, earlier},
		{"due equals the move", `{"tierq_due_at": ` + moved + `, "tierq_moved_at": ` + moved + `}`, scheduled},
		{"due after the move", `{"tierq_due_at": 1795428000123457, "tierq_moved_at": ` + moved + `}`, scheduled},
		{"due zero", `{"tierq_due_at": 0, "tierq_moved_at": ` + moved + `}`, time.Unix(0, 0)},
		{"due negative", `{"tierq_due_at": -5, "tierq_moved_at": ` + moved + `}`, scheduled},
		{"due a fraction", `{"tierq_due_at": 1795417200005000.5, "tierq_moved_at": ` + moved + `}`, scheduled},
		{"due a string", `{"tierq_due_at": "1795417200005000", "tierq_moved_at": ` + moved + `}`, scheduled},
		{"due huge", `{"tierq_due_at": 1e300, "tierq_moved_at": ` + moved + `}`, scheduled},
		{"keys in another case", `{"TIERQ_DUE_AT": 1795417200005000, "TIERQ_MOVED_AT": ` + moved + `}`, scheduled},
		{"moved another time (a retry since)", `{"tierq_due_at": 1795417200005000, "tierq_moved_at": 1795428000123455}`, scheduled},
		{"moved a string", `{"tierq_due_at": 1795417200005000, "tierq_moved_at": "` + moved + `"}`, scheduled},
		{"no due", `{"tierq_moved_at": ` + moved + `}`, scheduled},
		{"empty", `{}`, scheduled},
		{"array", `[1795417200005000]`, scheduled},
		{"string", `"tierq_due_at"`, scheduled},
		{"null", `null`, scheduled},
		{"deep", `{"a": {"a": {"tierq_due_at": 1}}}`, scheduled},
	}
	// The same cases under the "tierq:" keys (jobmeta.DueAt and
	// jobmeta.MovedAt); the legacy "tierq_" ones above are still read.
	for _, tt := range tests[:len(tests):len(tests)] {
		r := strings.NewReplacer("tierq_", "tierq:", "TIERQ_", "TIERQ:")
		tests = append(tests, struct {
			name     string
			metadata string
			want     time.Time
		}{"prefixed, " + tt.name, r.Replace(tt.metadata), tt.want})
	}
	tests = append(tests, []struct {
		name     string
		metadata string
		want     time.Time
	}{
		{"both, the prefixed pair counts", `{"tierq:due_at": 1795417200005000, "tierq:moved_at": ` + moved + `, "tierq_due_at": 1, "tierq_moved_at": ` + moved + `}`, earlier},
		{"a prefixed move hides a legacy pair", `{"tierq:moved_at": ` + moved + `, "tierq_due_at": 1795417200005000, "tierq_moved_at": ` + moved + `}`, scheduled},
		{"a prefixed due alone does not", `{"tierq:due_at": 1, "tierq_due_at": 1795417200005000, "tierq_moved_at": ` + moved + `}`, earlier},
	}...)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var (
				sqlDue   time.Time
				printed  []byte
				id       int64
				schedule time.Time
			)
			require.NoError(t, tdb.Pool.QueryRow(ctx, `
				INSERT INTO river_job (state, queue, priority, kind, args, metadata, max_attempts, scheduled_at)
				VALUES ('available', 'analysis_default', 4, 'loadtest', '{}', $1::jsonb, 1, $2)
				RETURNING id, scheduled_at, metadata`, tt.metadata, scheduled).Scan(&id, &schedule, &printed))
			require.NoError(t, tdb.Pool.QueryRow(ctx, `SELECT `+jobmetasql.DueAtSQL("j")+` FROM river_job AS j WHERE id = $1`, id).Scan(&sqlDue))
			goDue := jobmetasql.DueAt(schedule, printed)
			require.True(t, tt.want.Equal(sqlDue), fmt.Sprintf("SQL: want %s, got %s", tt.want, sqlDue))
			require.True(t, tt.want.Equal(goDue), fmt.Sprintf("Go: want %s, got %s", tt.want, goDue))
		})
	}
}
