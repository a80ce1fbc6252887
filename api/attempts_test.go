package api_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/api"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/service"
)

// memoArgs are of a kind that declares no attempts; invoiceArgs of one
// that declares 3.
type memoArgs struct {
	Text string `json:"text"`
}

func (memoArgs) Kind() string { return "memo" }

type invoiceArgs struct {
	Order int `json:"order" river:"unique"`
}

func (invoiceArgs) Kind() string { return "invoice" }

type noopWorker[T river.JobArgs] struct{ river.WorkerDefaults[T] }

func (*noopWorker[T]) Work(context.Context, *river.Job[T]) error { return nil }

// TestCreateJobMaxAttempts: POST /v1/jobs inserts a job of a kind that
// declares its attempts (service.MaxAttempts) with them, and one of a kind
// that declares none with the API's MAX_ATTEMPTS (5 here).
func TestCreateJobMaxAttempts(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := service.New(&service.Config{
		Name: "billing",
		Kinds: []service.Kind{
			service.WorkerKind(&noopWorker[memoArgs]{}),
			service.WorkerKind(&noopWorker[invoiceArgs]{}, service.MaxAttempts[invoiceArgs](3)),
		},
	})
	require.NoError(t, err)
	registry, err := service.NewRegistry(svc)
	require.NoError(t, err)
	server := api.New(api.Config{Token: producerToken, AdminToken: adminToken, Schema: db.Schema, MaxAttempts: 5, Registry: registry, Logger: logger},
		db.Pool, db.Producer(t), api.NewMetrics(db.Pool, registry, logger))
	ts := httptest.NewServer(server.Handler())
	t.Cleanup(ts.Close)
	b := &bundle{db: db, url: ts.URL}

	for _, tt := range []struct {
		kind string
		args map[string]any
		want int
	}{
		{kind: "invoice", args: map[string]any{"order": 7}, want: 3},
		{kind: "memo", args: map[string]any{"text": "hi"}, want: 5},
	} {
		res := b.do(t, "POST", "/v1/jobs", producerToken, map[string]any{"kind": tt.kind, "user_id": "u_1", "args": tt.args})
		require.Equal(t, http.StatusCreated, res.status, "%s: %s", tt.kind, res.body)
		require.Equal(t, float64(tt.want), res.json(t)["max_attempts"], tt.kind)
		require.Equal(t, tt.want, db.Count(t, `SELECT max_attempts FROM river_job WHERE kind = $1`, tt.kind), tt.kind)
	}
}
