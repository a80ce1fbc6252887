package ctl

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/producer"
	"github.com/tierq/tierq/service"
)

// retryArgs are the args of a kind that declares two attempts.
type retryArgs struct {
	ID int64 `json:"id"`
}

func (retryArgs) Kind() string { return "payment_retry" }

// plainArgs are the args of a kind that declares none.
type plainArgs struct {
	ID int64 `json:"id"`
}

func (plainArgs) Kind() string { return "payment_plain" }

type nopWorker[T river.JobArgs] struct{ river.WorkerDefaults[T] }

func (*nopWorker[T]) Work(context.Context, *river.Job[T]) error { return nil }

// paymentsRegistry is a service "payments" with payment_retry (two
// attempts) and payment_plain (none declared).
func paymentsRegistry(t *testing.T) *service.Registry {
	t.Helper()
	payments, err := service.New(&service.Config{Name: "payments", Kinds: []service.Kind{
		service.WorkerKind[retryArgs](&nopWorker[retryArgs]{}, service.MaxAttempts[retryArgs](2)),
		service.WorkerKind[plainArgs](&nopWorker[plainArgs]{}),
	}})
	require.NoError(t, err)
	registry, err := service.NewRegistry(payments)
	require.NoError(t, err)
	return registry
}

// TestEnqueueKindAppliesItsAttempts: enqueue --kind inserts a kind that
// declares service.MaxAttempts(2) with max_attempts 2, and one that
// declares none with producer.DefaultMaxAttempts, both in the stock
// tierctl (the kind as its worker recorded it) and in a tierctl embedded
// with the registry; either way the queue's workers are notified.
func TestEnqueueKindAppliesItsAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	maxAttempts := func(t *testing.T, db *testdb.DB, kind string, id int) int {
		t.Helper()
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT max_attempts FROM river_job WHERE kind = $1 AND (args->>'id')::int = $2`, kind, id).Scan(&n))
		return n
	}
	listen := func(t *testing.T, db *testdb.DB) func() string {
		t.Helper()
		conn, err := db.Pool.Acquire(ctx)
		require.NoError(t, err)
		t.Cleanup(conn.Release)
		_, err = conn.Exec(ctx, `LISTEN "`+db.Schema+`.river_insert"`)
		require.NoError(t, err)
		return func() string {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			n, err := conn.Conn().WaitForNotification(wctx)
			require.NoError(t, err, "no insert notification")
			return n.Payload
		}
	}

	t.Run("Stock", func(t *testing.T) {
		t.Parallel()
		db := testdb.New(t)
		require.NoError(t, paymentsRegistry(t).Record(ctx, db.Pool, "worker"))
		notified := listen(t, db)

		out, err := runTierctl(t, bareEnv(db), "enqueue", "--kind", "payment_retry", "--args", `{"id": 1}`, "--mix", "pro=1")
		require.NoError(t, err, out)
		require.Equal(t, "enqueued 1 payment_retry jobs:\n  payments_priority    1\n", out)
		require.Equal(t, 2, maxAttempts(t, db, "payment_retry", 1))
		require.JSONEq(t, `{"queue": "payments_priority"}`, notified())

		out, err = runTierctl(t, bareEnv(db), "enqueue", "--kind", "payment_plain", "--args", `{"id": 1}`)
		require.NoError(t, err, out)
		require.Equal(t, producer.DefaultMaxAttempts, maxAttempts(t, db, "payment_plain", 1))

		// A record an older build wrote has no attempts: the default.
		_, err = db.Pool.Exec(ctx, `UPDATE tierq_services SET kinds = '[{"name": "payment_retry", "fields": ["id"], "aliases": []}]'`)
		require.NoError(t, err)
		out, err = runTierctl(t, bareEnv(db), "enqueue", "--kind", "payment_retry", "--args", `{"id": 2}`)
		require.NoError(t, err, out)
		require.Equal(t, producer.DefaultMaxAttempts, maxAttempts(t, db, "payment_retry", 2))
	})

	t.Run("Embedded", func(t *testing.T) {
		t.Parallel()
		db := testdb.New(t) // nothing recorded: the registry alone
		notified := listen(t, db)
		embedded := func(args ...string) (string, error) {
			var out bytes.Buffer
			cmd := Command(Config{Registry: paymentsRegistry(t), Environ: bareEnv(db), Stdout: &out})
			cmd.SetArgs(args)
			err := cmd.ExecuteContext(ctx)
			return out.String(), err
		}

		out, err := embedded("enqueue", "--kind", "payment_retry", "--args", `{"id": 1}`, "--mix", "pro=1")
		require.NoError(t, err, out)
		require.Equal(t, "enqueued 1 payment_retry jobs:\n  payments_priority    1\n", out)
		require.Equal(t, 2, maxAttempts(t, db, "payment_retry", 1))
		require.JSONEq(t, `{"queue": "payments_priority"}`, notified())

		out, err = embedded("enqueue", "--kind", "payment_plain", "--args", `{"id": 1}`)
		require.NoError(t, err, out)
		require.Equal(t, producer.DefaultMaxAttempts, maxAttempts(t, db, "payment_plain", 1))

		// As the API inserts: the same args again are a duplicate of the
		// queued job, moved up by a better tier.
		out, err = embedded("enqueue", "--kind", "payment_plain", "--args", `{"id": 2}`, "--count", "3", "--mix", "free=1,pro=1", "--scheduled", "0")
		require.NoError(t, err, out)
		require.Equal(t, "enqueued 1 payment_plain jobs:\n  payments_priority    1\n"+
			"2 more were duplicates of a job already queued or running, not inserted (1 of them moved it to a better place)\n", out)
		require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'payment_plain' AND args->>'id' = '2'`))
	})
}
