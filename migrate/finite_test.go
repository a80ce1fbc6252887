package migrate_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/loadtest"
	"github.com/tierq/tierq/migrate"
)

// finiteBundle is a test schema back at tierq's version before migration
// 00010 (testdb.BeforeFiniteTimestamps), where rows with infinite
// timestamps can be written and migrate.Up applies 00010 again.
type finiteBundle struct {
	db     *testdb.DB
	logger *slog.Logger
}

func setupFinite(t *testing.T) *finiteBundle {
	t.Helper()
	db := testdb.New(t)
	testdb.BeforeFiniteTimestamps(t, db)
	return &finiteBundle{db: db, logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// insert writes one load-test row with SQL, as a producer inserting straight
// into river_job would: state, then its four timestamps as SQL expressions
// (attempted and finalized may be "NULL"), attempt, metadata and errors (a
// jsonb[] literal, or "NULL").
func (b *finiteBundle) insert(t *testing.T, state, created, scheduled, attempted, finalized string, attempt int, metadata, errs string) int64 {
	t.Helper()
	var id int64
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `
		INSERT INTO river_job (state, queue, priority, kind, args, metadata, max_attempts, attempt,
		                       created_at, scheduled_at, attempted_at, finalized_at, errors)
		VALUES ($1::river_job_state, 'analysis_priority', 4, $2, '{}', $3::jsonb, 5, $4,
		        `+created+`, `+scheduled+`, `+attempted+`, `+finalized+`, `+errs+`)
		RETURNING id`, state, loadtest.Kind, metadata, attempt).Scan(&id))
	return id
}

// rows is every river_job row as JSON, by id.
func (b *finiteBundle) rows(t *testing.T) map[int64]string {
	t.Helper()
	rows, err := b.db.Pool.Query(context.Background(), `SELECT id, to_jsonb(j)::text FROM river_job AS j`)
	require.NoError(t, err)
	out := map[int64]string{}
	for rows.Next() {
		var (
			id  int64
			row string
		)
		require.NoError(t, rows.Scan(&id, &row))
		out[id] = row
	}
	require.NoError(t, rows.Err())
	return out
}

// up runs migrate.Up and returns the tierq migrations it applied.
func (b *finiteBundle) up(t *testing.T) []int64 {
	t.Helper()
	res, err := migrate.Up(context.Background(), b.db.Pool, b.db.Schema, b.logger)
	require.NoError(t, err)
	return res.TierqApplied
}

// checkValidated requires that river_job has the check, validated.
func (b *finiteBundle) checkValidated(t *testing.T) {
	t.Helper()
	var validated bool
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `
		SELECT convalidated FROM pg_constraint WHERE conrelid = 'river_job'::regclass AND conname = $1`,
		migrate.FiniteTimestampsCheck).Scan(&validated))
	require.True(t, validated)
}

// repaired is what a test reads of a row after the repair.
type repaired struct {
	State     string
	Finite    bool // all four timestamps finite or NULL
	Recent    bool // scheduled_at within the last minute
	Finalized bool
	Metadata  string
	LastError string
	NumErrors int
	Repaired  map[string]any // metadata's tierq:repaired, nil when none
}

func (b *finiteBundle) read(t *testing.T, id int64) repaired {
	t.Helper()
	var (
		r   repaired
		rec []byte
	)
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `
		SELECT state::text,
		       isfinite(created_at) AND isfinite(scheduled_at) AND coalesce(isfinite(attempted_at), true)
		           AND coalesce(isfinite(finalized_at), true),
		       scheduled_at > now() - interval '1 minute',
		       finalized_at IS NOT NULL, metadata::text,
		       coalesce(errors[cardinality(errors)]->>'error', ''), coalesce(cardinality(errors), 0),
		       CASE WHEN jsonb_typeof(metadata) = 'object' THEN metadata->'tierq:repaired' END
		FROM river_job WHERE id = $1`, id).Scan(&r.State, &r.Finite, &r.Recent, &r.Finalized, &r.Metadata,
		&r.LastError, &r.NumErrors, &rec))
	if rec != nil {
		require.NoError(t, json.Unmarshal(rec, &r.Repaired))
	}
	return r
}

// TestFiniteTimestampsRepair: migration 00010 over rows that a producer
// inserting straight into river_job wrote with infinite timestamps, in
// every state and column, beside good rows. Each is repaired as the
// migration says (a -infinity scheduled_at due now, an infinity one of a
// job not yet run cancelled with the reason in its errors, every other
// infinite value now(), the original values in tierq:repaired when
// metadata is an object), the good rows are untouched, and the check is
// valid. Run again, from either state a crash could leave it in (the check
// added but the version not recorded; neither), it changes nothing.
func TestFiniteTimestampsRepair(t *testing.T) {
	t.Parallel()
	b := setupFinite(t)

	const old = `now() - interval '1 hour'`
	oneError := `ARRAY[jsonb_build_object('at', now() - interval '1 hour', 'attempt', 1, 'error', 'boom', 'trace', '')]`
	good := []int64{
		b.insert(t, "available", old, old, "NULL", "NULL", 0, `{}`, "NULL"),
		b.insert(t, "completed", old, old, old, "now()", 1, `{"tierq:tenant": "u1"}`, "NULL"),
		b.insert(t, "retryable", old, "now() + interval '1 hour'", old, "NULL", 1, `{}`, oneError),
	}
	type want struct {
		state     string
		cancelled bool              // with the reason as its last error
		repaired  map[string]string // the original values recorded; nil: metadata not an object
	}
	cases := map[int64]want{
		// Due at once, which is what -infinity said.
		b.insert(t, "available", old, "'-infinity'", "NULL", "NULL", 0, `{"tierq:tenant": "u1"}`, "NULL"): {
			state: "available", repaired: map[string]string{"scheduled_at": "-infinity"}},
		b.insert(t, "retryable", old, "'-infinity'", old, "NULL", 1, `{}`, oneError): {
			state: "retryable", repaired: map[string]string{"scheduled_at": "-infinity"}},
		b.insert(t, "scheduled", old, "'-infinity'", "NULL", "NULL", 0, `{}`, "NULL"): {
			state: "scheduled", repaired: map[string]string{"scheduled_at": "-infinity"}},
		// Never due: cancelled.
		b.insert(t, "available", old, "'infinity'", "NULL", "NULL", 0, `{}`, "NULL"): {
			state: "cancelled", cancelled: true, repaired: map[string]string{"scheduled_at": "infinity", "cancelled_from": "available"}},
		b.insert(t, "scheduled", old, "'infinity'", "NULL", "NULL", 0, `{}`, "NULL"): {
			state: "cancelled", cancelled: true, repaired: map[string]string{"scheduled_at": "infinity", "cancelled_from": "scheduled"}},
		b.insert(t, "retryable", old, "'infinity'", old, "NULL", 1, `{}`, oneError): {
			state: "cancelled", cancelled: true, repaired: map[string]string{"scheduled_at": "infinity", "cancelled_from": "retryable"}},
		b.insert(t, "pending", old, "'infinity'", "NULL", "NULL", 0, `{"tierq:held_at": "2026-11-26T00:00:00Z"}`, "NULL"): {
			state: "cancelled", cancelled: true, repaired: map[string]string{"scheduled_at": "infinity", "cancelled_from": "pending"}},
		// A running job is in a worker's hands: its times become now(),
		// it is not cancelled under the worker.
		b.insert(t, "running", old, "'infinity'", "'-infinity'", "NULL", 1, `{}`, "NULL"): {
			state: "running", repaired: map[string]string{"scheduled_at": "infinity", "attempted_at": "-infinity"}},
		// A finished job keeps its state.
		b.insert(t, "completed", "'infinity'", old, old, "'-infinity'", 1, `{}`, "NULL"): {
			state: "completed", repaired: map[string]string{"created_at": "infinity", "finalized_at": "-infinity"}},
		b.insert(t, "discarded", old, "'infinity'", old, "'infinity'", 5, `{}`, oneError): {
			state: "discarded", repaired: map[string]string{"scheduled_at": "infinity", "finalized_at": "infinity"}},
		// Metadata that is not an object stays as it is.
		b.insert(t, "available", old, "'-infinity'", "NULL", "NULL", 0, `[]`, "NULL"): {state: "available"},
		b.insert(t, "scheduled", old, "'infinity'", "NULL", "NULL", 0, `"s"`, "NULL"): {state: "cancelled", cancelled: true},
	}
	before := b.rows(t)

	require.Equal(t, []int64{10, 11, 12, 13, 14, 15, 16, 17, 18, 19}, b.up(t))
	b.checkValidated(t)

	for id, w := range cases {
		got := b.read(t, id)
		require.Equal(t, w.state, got.State, "job %d", id)
		require.True(t, got.Finite, "job %d", id)
		if w.cancelled {
			require.True(t, got.Finalized, "job %d", id)
			require.Contains(t, got.LastError, "cancelled: scheduled_at was infinity", "job %d", id)
			require.True(t, got.Recent, "job %d", id)
		}
		if w.repaired == nil {
			require.Nil(t, got.Repaired, "job %d", id)
			require.Equal(t, mustField(t, before[id], "metadata"), got.Metadata, "job %d: metadata changed", id)
			continue
		}
		require.Equal(t, "tierq migration 00010", got.Repaired["by"], "job %d", id)
		at, err := time.Parse(time.RFC3339Nano, got.Repaired["at"].(string))
		require.NoError(t, err)
		require.WithinDuration(t, time.Now(), at, time.Minute)
		delete(got.Repaired, "by")
		delete(got.Repaired, "at")
		wantRepaired := map[string]any{}
		for k, v := range w.repaired {
			wantRepaired[k] = v
		}
		require.Equal(t, wantRepaired, got.Repaired, "job %d", id)
	}
	// A -infinity scheduled_at is now: due at once.
	for id, w := range cases {
		if w.repaired["scheduled_at"] == "-infinity" {
			require.True(t, b.read(t, id).Recent, "job %d", id)
		}
	}
	// The cancelled retryable job keeps its error and gains the reason.
	for id, w := range cases {
		if w.repaired["cancelled_from"] == "retryable" {
			require.Equal(t, 2, b.read(t, id).NumErrors)
		}
	}
	after := b.rows(t)
	for _, id := range good {
		require.Equal(t, before[id], after[id], "good job %d changed", id)
	}

	// Again: the check is there but the version was not recorded (a crash
	// between the two, before 00011), then neither is there.
	_, err := b.db.Pool.Exec(context.Background(), `DROP TABLE tierq_services, tier_limits, tenant_limits, tenant_quota_usage, job_wait_stats; DELETE FROM tierq_schema_version WHERE version_id >= 10`)
	require.NoError(t, err)
	require.Equal(t, []int64{10, 11, 12, 13, 14, 15, 16, 17, 18, 19}, b.up(t))
	require.Equal(t, after, b.rows(t))
	testdb.BeforeFiniteTimestamps(t, b.db)
	require.Equal(t, []int64{10, 11, 12, 13, 14, 15, 16, 17, 18, 19}, b.up(t))
	require.Equal(t, after, b.rows(t))
	b.checkValidated(t)
	require.Empty(t, b.up(t))
}

// mustField is one top-level field of a row's JSON, as JSON text.
func mustField(t *testing.T, row, field string) string {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(row), &m))
	var v any
	require.NoError(t, json.Unmarshal(m[field], &v))
	out, err := json.Marshal(v)
	require.NoError(t, err)
	return string(out)
}

// TestFiniteTimestampsRefused: after migration 00010 an insert or update
// that writes an infinite timestamp into river_job fails with a check
// violation naming the constraint, and River's own inserts, which never
// write one, pass. (River's Insert cannot write infinity: a ScheduledAt is
// a time.Time; a producer writing SQL can.)
func TestFiniteTimestampsRefused(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()

	// River's inserts pass; the updates below change a finished job, which
	// may have a finalized_at.
	res, err := db.Producer(t).Insert(ctx, loadtest.Args{}, &river.InsertOpts{ScheduledAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `UPDATE river_job SET state = 'discarded', finalized_at = now() WHERE id = $1`, res.Job.ID)
	require.NoError(t, err)

	refused := func(t *testing.T, err error) {
		t.Helper()
		var pgErr *pgconn.PgError
		require.True(t, errors.As(err, &pgErr), "%v", err)
		require.Equal(t, "23514", pgErr.Code) // check_violation
		require.Equal(t, migrate.FiniteTimestampsCheck, pgErr.ConstraintName)
		require.Contains(t, pgErr.Message, `violates check constraint "river_job_tierq_finite_timestamps"`)
	}
	tests := []struct {
		name   string
		column string
		value  string
	}{
		{name: "scheduled_at -infinity", column: "scheduled_at", value: "-infinity"},
		{name: "scheduled_at infinity", column: "scheduled_at", value: "infinity"},
		{name: "created_at -infinity", column: "created_at", value: "-infinity"},
		{name: "created_at infinity", column: "created_at", value: "infinity"},
		{name: "attempted_at -infinity", column: "attempted_at", value: "-infinity"},
		{name: "attempted_at infinity", column: "attempted_at", value: "infinity"},
		{name: "finalized_at -infinity", column: "finalized_at", value: "-infinity"},
		{name: "finalized_at infinity", column: "finalized_at", value: "infinity"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// A discarded job, so that it may have a finalized_at.
			values := map[string]string{"created_at": "now()", "scheduled_at": "now()", "attempted_at": "now()", "finalized_at": "now()"}
			values[tt.column] = "$1::timestamptz"
			_, err := db.Pool.Exec(ctx, `
				INSERT INTO river_job (state, queue, kind, args, max_attempts, attempt,
				                       created_at, scheduled_at, attempted_at, finalized_at)
				VALUES ('discarded', 'analysis_priority', 'loadtest', '{}', 1, 1, `+
				values["created_at"]+`, `+values["scheduled_at"]+`, `+values["attempted_at"]+`, `+values["finalized_at"]+`)`, tt.value)
			refused(t, err)
			_, err = db.Pool.Exec(ctx, `UPDATE river_job SET `+pgx.Identifier{tt.column}.Sanitize()+` = $2::timestamptz WHERE id = $1`,
				res.Job.ID, tt.value)
			refused(t, err)
		})
	}
}

// TestFiniteTimestampsWaitsForItsLockInTurns: while a transaction holds a
// lock on river_job (a long read here; a long-running report would do),
// migration 00010's ADD CONSTRAINT waits at most 2 s for its lock, so that
// River's statements queue behind it no longer, lets go, waits a second
// holding no lock and tries again; it applies once the lock is free.
func TestFiniteTimestampsWaitsForItsLockInTurns(t *testing.T) {
	t.Parallel()
	b := setupFinite(t)
	ctx := context.Background()

	tx, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	var holder int
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_backend_pid() FROM (SELECT count(*) FROM river_job) AS n`).Scan(&holder))

	done := make(chan error, 1)
	go func() {
		res, err := migrate.Up(ctx, b.db.Pool, b.db.Schema, b.logger)
		if err == nil && !slices.Equal(res.TierqApplied, []int64{10, 11, 12, 13, 14, 15, 16, 17, 18, 19}) {
			err = fmt.Errorf("applied %v, want [10 11 12 13 14 15 16 17 18 19]", res.TierqApplied)
		}
		done <- err
	}()
	var migrating int
	testdb.WaitFor(t, 10*time.Second, "the migration waiting for the lock", func() bool {
		err := b.db.Pool.QueryRow(ctx, `
			SELECT pid FROM pg_stat_activity
			WHERE $1 = ANY (pg_blocking_pids(pid)) AND query LIKE '%ADD CONSTRAINT river_job_tierq_finite_timestamps%'`,
			holder).Scan(&migrating)
		return err == nil
	})
	testdb.WaitFor(t, 10*time.Second, "the migration between two tries", func() bool {
		return b.db.Count(t, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event = 'PgSleep'`, migrating) == 1
	})
	require.Empty(t, done, "the migration gave up")
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, <-done)
	b.checkValidated(t)
}
