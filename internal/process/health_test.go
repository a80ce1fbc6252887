package process_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/process"
	"github.com/tierq/tierq/internal/testdb"
)

// probe calls handler and returns its status code and body.
func probe(t *testing.T, handler http.HandlerFunc) (int, process.Status) {
	t.Helper()
	rec := httptest.NewRecorder()
	handler(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/", nil))
	var body process.Status
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body), rec.Body.String())
	require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	return rec.Code, body
}

func TestProbes(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	// Nothing listens on port 1: every ping fails at once.
	unreachableConfig, err := pgxpool.ParseConfig("postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=1")
	require.NoError(t, err)
	unreachable, err := pgxpool.NewWithConfig(t.Context(), unreachableConfig)
	require.NoError(t, err)
	t.Cleanup(unreachable.Close)

	running, crashed := make(chan struct{}), make(chan struct{})
	close(crashed)

	tests := []struct {
		name        string
		setup       func(h *process.Health)
		wantLive    int
		wantLiveErr string
		wantReady   int
		wantErr     string
	}{
		{name: "starting", setup: func(*process.Health) {},
			wantLive: 200, wantReady: 503, wantErr: "starting: the River client has not started yet"},
		{name: "serving", setup: func(h *process.Health) { h.Started(db.Pool, running) },
			wantLive: 200, wantReady: 200},
		// A database outage makes a replica unready, never restarts it.
		{name: "database unreachable", setup: func(h *process.Health) { h.Started(unreachable, running) },
			wantLive: 200, wantReady: 503, wantErr: "database unreachable"},
		{name: "stopping", setup: func(h *process.Health) { h.Started(db.Pool, running); h.Stopping() },
			wantLive: 200, wantReady: 503, wantErr: "stopping: finishing running jobs"},
		{name: "client stopped on its own", setup: func(h *process.Health) { h.Started(db.Pool, crashed) },
			wantLive: 503, wantLiveErr: "river client stopped without a signal",
			wantReady: 503, wantErr: "river client stopped without a signal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var h process.Health
			tt.setup(&h)

			code, body := probe(t, h.Healthz)
			require.Equal(t, tt.wantLive, code)
			require.Equal(t, tt.wantLiveErr, body.Error)

			code, body = probe(t, h.Readyz)
			require.Equal(t, tt.wantReady, code)
			require.Equal(t, tt.wantErr, body.Error)
			if tt.wantReady == 200 {
				require.Equal(t, "ok", body.Status)
			} else {
				require.Equal(t, "unavailable", body.Status)
			}
		})
	}
}
