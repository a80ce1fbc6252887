package service_test

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/service"
)

// renamedArgs are args with a kind alias, for Record's aliases.
type renamedArgs struct {
	ID    int64 `json:"id"`
	Inner struct {
		X int `json:"x"`
	} `json:"inner"`
}

func (renamedArgs) Kind() string          { return "renamed" }
func (renamedArgs) KindAliases() []string { return []string{"renamed_v1"} }

// mapArgs are args that are not a struct: any JSON object.
type mapArgs map[string]any

func (mapArgs) Kind() string { return "free_form" }

type nopWorker[T river.JobArgs] struct{ river.WorkerDefaults[T] }

func (*nopWorker[T]) Work(context.Context, *river.Job[T]) error { return nil }

// TestRecord: Record writes each service of the registry (name, base
// queue, queues, kinds with aliases, args' fields and declared attempts,
// null fields for args that are not a struct), again idempotently (seen_at moves, first_seen_at
// stays); ReadRecorded reads them back; Forget deletes one.
func TestRecord(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()

	ledger, err := service.New(&service.Config{Name: "ledger", BaseQueue: "books", Kinds: []service.Kind{
		service.WorkerKind[renamedArgs](&nopWorker[renamedArgs]{}, service.MaxAttempts[renamedArgs](3)),
		service.WorkerKind[mapArgs](&nopWorker[mapArgs]{}),
	}})
	require.NoError(t, err)
	registry, err := service.NewRegistry(ledger)
	require.NoError(t, err)
	want := service.Recorded{
		Name: "ledger", BaseQueue: "books", Queues: []string{"books_priority", "books_default", "books_scheduled"},
		Kinds: []service.RecordedKind{
			{Name: "renamed", Aliases: []string{"renamed_v1"}, Fields: []string{"id", "inner"}, MaxAttempts: 3},
			{Name: "free_form", Aliases: []string{}, Fields: nil},
		},
	}
	require.Equal(t, []service.Recorded{want}, registry.Recorded())

	require.NoError(t, registry.Record(ctx, db.Pool, "worker"))
	first, err := service.ReadRecorded(ctx, db.Pool)
	require.NoError(t, err)
	require.Len(t, first, 1)
	require.Equal(t, "worker", first[0].RecordedBy)
	require.Equal(t, first[0].FirstSeenAt, first[0].SeenAt)
	got := first[0]
	got.RecordedBy, got.FirstSeenAt, got.SeenAt = "", time.Time{}, time.Time{}
	require.Equal(t, want, got)

	require.NoError(t, registry.Record(ctx, db.Pool, "api"))
	again, err := service.ReadRecorded(ctx, db.Pool)
	require.NoError(t, err)
	require.Len(t, again, 1)
	require.Equal(t, "api", again[0].RecordedBy)
	require.True(t, first[0].FirstSeenAt.Equal(again[0].FirstSeenAt), "first_seen_at stays")
	require.True(t, again[0].SeenAt.After(first[0].SeenAt), "seen_at moves on")
	require.Equal(t, `[{"name": "renamed", "fields": ["id", "inner"], "aliases": ["renamed_v1"], "max_attempts": 3}, {"name": "free_form", "fields": null, "aliases": []}]`,
		queryString(t, db, `SELECT kinds::text FROM tierq_services WHERE name = 'ledger'`))

	// A record an older build wrote has no max_attempts: none declared.
	_, err = db.Pool.Exec(ctx, `UPDATE tierq_services SET kinds = '[{"name": "renamed", "fields": ["id", "inner"], "aliases": ["renamed_v1"]}]' WHERE name = 'ledger'`)
	require.NoError(t, err)
	old, err := service.ReadRecorded(ctx, db.Pool)
	require.NoError(t, err)
	require.Equal(t, []service.RecordedKind{{Name: "renamed", Aliases: []string{"renamed_v1"}, Fields: []string{"id", "inner"}}}, old[0].Kinds)

	forgot, err := service.Forget(ctx, db.Pool, "ledger")
	require.NoError(t, err)
	require.True(t, forgot)
	forgot, err = service.Forget(ctx, db.Pool, "ledger")
	require.NoError(t, err)
	require.False(t, forgot)
	none, err := service.ReadRecorded(ctx, db.Pool)
	require.NoError(t, err)
	require.Empty(t, none)
}

func queryString(t *testing.T, db *testdb.DB, sql string) string {
	t.Helper()
	var s string
	require.NoError(t, db.Pool.QueryRow(context.Background(), sql).Scan(&s))
	return s
}
