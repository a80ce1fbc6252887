package jobmetasql_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/jobmetasql"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/jobmeta"
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
		// A job placed by turns (fairshare.Queue.Turns) is moved back in
		// line, before its due time, by any time.
		{"due after the move", `{"tierq_due_at": 1795428000123457, "tierq_moved_at": ` + moved + `}`, time.Date(2026, 11, 23, 10, 0, 0, 123457000, time.UTC)},
		{"due a year after the move", `{"tierq_due_at": 1826964000123456, "tierq_moved_at": ` + moved + `}`, time.Date(2027, 11, 23, 10, 0, 0, 123456000, time.UTC)},
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
				created  time.Time
			)
			require.NoError(t, tdb.Pool.QueryRow(ctx, `
				INSERT INTO river_job (state, queue, priority, kind, args, metadata, max_attempts, scheduled_at)
				VALUES ('available', 'analysis_default', 4, 'loadtest', '{}', $1::jsonb, 1, $2)
				RETURNING id, scheduled_at, created_at, metadata`, tt.metadata, scheduled).Scan(&id, &schedule, &created, &printed))
			// The same rule in migration 00017's tierq_due_micros, which the
			// turn trigger keeps a due time by.
			var fnDue int64
			require.NoError(t, tdb.Pool.QueryRow(ctx, `SELECT `+jobmetasql.DueAtSQL("j")+`, tierq_due_micros(j.scheduled_at, j.created_at, j.tags, j.metadata)
				FROM river_job AS j WHERE id = $1`, id).Scan(&sqlDue, &fnDue))
			require.Equal(t, tt.want.UnixMicro(), fnDue, "tierq_due_micros")
			goDue := jobmetasql.DueAt(schedule, created, nil, printed)
			require.True(t, tt.want.Equal(sqlDue), fmt.Sprintf("SQL: want %s, got %s", tt.want, sqlDue))
			require.True(t, tt.want.Equal(goDue), fmt.Sprintf("Go: want %s, got %s", tt.want, goDue))
		})
	}
}

// TestMoveSQLIsAJobmetaMove: the JSON object Move.SQL builds is a
// jobmeta.Move, field for field, with nothing jobmeta.Move does not name;
// Actor and Reason are left out when "".
func TestMoveSQLIsAJobmetaMove(t *testing.T) {
	t.Parallel()
	tdb := testdb.New(t)
	ctx := context.Background()

	tests := []struct {
		name string
		give jobmetasql.Move
		want jobmeta.Move
	}{
		{
			name: "escalation",
			give: jobmetasql.Move{
				Kind: "'" + jobmeta.MoveEscalation + "'", FromQueue: "'analysis_default'", ToQueue: "'analysis_priority'",
				FromPriority: "4", ToPriority: "1", Actor: "'alice'", Reason: "left('stuck', 3)",
			},
			want: jobmeta.Move{
				Kind: jobmeta.MoveEscalation, FromQueue: "analysis_default", ToQueue: "analysis_priority",
				FromPriority: 4, ToPriority: 1, Actor: "alice", Reason: "stu",
			},
		},
		{
			name: "aging, no actor nor reason",
			give: jobmetasql.Move{
				Kind: "'" + jobmeta.MoveAging + "'", FromQueue: "'analysis_default'", ToQueue: "'analysis_default'",
				FromPriority: "4", ToPriority: "2",
			},
			want: jobmeta.Move{
				Kind: jobmeta.MoveAging, FromQueue: "analysis_default", ToQueue: "analysis_default",
				FromPriority: 4, ToPriority: 2,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var (
				raw []byte
				now time.Time
			)
			require.NoError(t, tdb.Pool.QueryRow(ctx, `SELECT `+tt.give.SQL()+`, now()`).Scan(&raw, &now))
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			var got jobmeta.Move
			require.NoError(t, dec.Decode(&got), "move %s", raw)
			require.True(t, now.Equal(got.At), "at: want now() %s, got %s", now, got.At)
			got.At = time.Time{}
			require.Equal(t, tt.want, got)
		})
	}
}

// TestKeptDueSQLReadsBack: a due time kept by KeptDueSQL is the one
// DueAtSQL and DueAt read back while scheduled_at is the move's.
func TestKeptDueSQLReadsBack(t *testing.T) {
	t.Parallel()
	tdb := testdb.New(t)
	ctx := context.Background()

	var (
		id        int64
		scheduled time.Time
		metadata  []byte
		sqlDue    time.Time
	)
	due := time.Date(2026, 11, 23, 7, 0, 0, 5000, time.UTC)
	require.NoError(t, tdb.Pool.QueryRow(ctx, `
		INSERT INTO river_job (state, queue, priority, kind, args, metadata, max_attempts, scheduled_at)
		SELECT 'available', 'analysis_default', 4, 'loadtest', '{}',
		       jsonb_build_object(`+jobmetasql.KeptDueSQL("$1::timestamptz", "t.at")+`), 1, t.at
		FROM (SELECT date_trunc('milliseconds', now()) AS at) AS t
		RETURNING id, scheduled_at, metadata`, due).Scan(&id, &scheduled, &metadata))
	require.NoError(t, tdb.Pool.QueryRow(ctx, `SELECT `+jobmetasql.DueAtSQL("j")+` FROM river_job AS j WHERE id = $1`, id).Scan(&sqlDue))
	require.True(t, due.Equal(sqlDue), "SQL: want %s, got %s", due, sqlDue)
	goDue := jobmetasql.DueAt(scheduled, time.Time{}, nil, metadata)
	require.True(t, due.Equal(goDue), "Go: want %s, got %s", due, goDue)
}

// TestHeldSQL: a pending job whose metadata is an object with
// jobmeta.HeldAt is held; without the key, in another state, or with
// metadata that merely is the key's name, it is not.
func TestHeldSQL(t *testing.T) {
	t.Parallel()
	tdb := testdb.New(t)

	tests := []struct {
		name     string
		state    string
		metadata string
		want     bool
	}{
		{"held", "pending", `{"` + jobmeta.HeldAt + `": "2026-11-27T09:00:00Z"}`, true},
		{"pending, not held", "pending", `{}`, false},
		{"available with the key", "available", `{"` + jobmeta.HeldAt + `": "2026-11-27T09:00:00Z"}`, false},
		{"a string, the key's name", "pending", `"` + jobmeta.HeldAt + `"`, false},
		{"an array holding the key's name", "pending", `["` + jobmeta.HeldAt + `"]`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := testdb.InsertRaw(t, tdb, testdb.RawJob{Kind: "loadtest", Queue: "analysis_default", State: tt.state, Metadata: tt.metadata})
			var got bool
			require.NoError(t, tdb.Pool.QueryRow(context.Background(),
				`SELECT `+jobmetasql.HeldSQL("j")+` FROM river_job AS j WHERE id = $1`, id).Scan(&got))
			require.Equal(t, tt.want, got)
		})
	}
}

// TestDueAtOfAJobPlacedByTurns: a job fair share by turns placed at its
// insert (jobmetasql.TurnTag, its turn in scheduled_at before its
// created_at) became due at its created_at; without the tag, or with a
// scheduled_at not before created_at, the rule is scheduled_at's; a kept
// pair still comes first. PostgreSQL and Go agree.
func TestDueAtOfAJobPlacedByTurns(t *testing.T) {
	t.Parallel()
	tdb := testdb.New(t)
	ctx := context.Background()

	created := time.Date(2026, 11, 28, 7, 0, 0, 250000000, time.UTC)
	turn := time.Date(2026, 11, 28, 6, 0, 0, 1000, time.UTC)
	later := time.Date(2026, 11, 28, 7, 0, 1, 0, time.UTC)
	kept := time.Date(2026, 11, 28, 6, 59, 0, 0, time.UTC) // 1795849140000000 µs
	tests := []struct {
		name      string
		scheduled time.Time
		tags      []string
		metadata  string
		want      time.Time
	}{
		{"placed at its insert", turn, []string{"a", jobmetasql.TurnTag}, `{}`, created},
		{"no tag", turn, []string{"a"}, `{}`, turn},
		{"tag, scheduled after its insert", later, []string{jobmetasql.TurnTag}, `{}`, later},
		{"tag, metadata not an object", turn, []string{jobmetasql.TurnTag}, `[1]`, created},
		{"a kept pair comes first", turn, []string{jobmetasql.TurnTag},
			`{"tierq:due_at": 1795849140000000, "tierq:moved_at": 1795845600000001}`, kept},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var (
				id       int64
				printed  []byte
				sqlDue   time.Time
				schedule time.Time
				at       time.Time
				tags     []string
			)
			require.NoError(t, tdb.Pool.QueryRow(ctx, `
				INSERT INTO river_job (state, queue, priority, kind, args, metadata, max_attempts, scheduled_at, created_at, tags)
				VALUES ('available', 'analysis_default', 4, 'loadtest', '{}', $1::jsonb, 1, $2, $3, $4)
				RETURNING id, scheduled_at, created_at, tags, metadata`, tt.metadata, tt.scheduled, created, tt.tags).
				Scan(&id, &schedule, &at, &tags, &printed))
			var fnDue int64
			require.NoError(t, tdb.Pool.QueryRow(ctx, `SELECT `+jobmetasql.DueAtSQL("j")+`, tierq_due_micros(j.scheduled_at, j.created_at, j.tags, j.metadata)
				FROM river_job AS j WHERE id = $1`, id).Scan(&sqlDue, &fnDue))
			require.True(t, tt.want.Equal(sqlDue), "SQL: want %s, got %s", tt.want, sqlDue)
			require.Equal(t, tt.want.UnixMicro(), fnDue, "tierq_due_micros")
			goDue := jobmetasql.DueAt(schedule, at, tags, printed)
			require.True(t, tt.want.Equal(goDue), "Go: want %s, got %s", tt.want, goDue)
		})
	}
}
