package api_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/api"
	"github.com/tierq/tierq/internal/testdb"
)

// clock is a settable time for the server's readyz cache, safe to read from
// the server's goroutines.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type healthBundle struct {
	*bundle
	clock *clock
}

// setupHealth starts the API like setup, with the readyz cache on a clock
// the test moves.
func setupHealth(t *testing.T) *healthBundle {
	t.Helper()
	db := testdb.New(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	registry := testdb.Registry(t)
	server := api.New(api.Config{Token: producerToken, AdminToken: adminToken, Schema: db.Schema, MaxAttempts: 5, Registry: registry, Logger: logger},
		db.Pool, db.Producer(t), api.NewMetrics(db.Pool, registry, logger))
	c := &clock{now: time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)}
	api.SetNowFunc(server, c.Now)
	ts := httptest.NewServer(server.Handler())
	t.Cleanup(ts.Close)
	return &healthBundle{bundle: &bundle{db: db, url: ts.URL}, clock: c}
}

// readyz is one GET /readyz: its status and body.
func (b *bundle) readyz(t *testing.T) (int, map[string]any) {
	t.Helper()
	res := b.do(t, "GET", "/readyz", "", nil)
	return res.status, res.json(t)
}

// leaderPresent is the tierq_leader_present sample of one scrape of a new
// Metrics on pool (its cache empty, so it reads the database now), or ""
// when the scrape has none.
func leaderPresent(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	rec := httptest.NewRecorder()
	api.NewMetrics(pool, testdb.Registry(t), slog.New(slog.NewTextHandler(io.Discard, nil))).Handler().
		ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	for line := range strings.Lines(rec.Body.String()) {
		if v, ok := strings.CutPrefix(line, "tierq_leader_present "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

type readyzNoopArgs struct{}

func (readyzNoopArgs) Kind() string { return "readyz_noop" }

// startLeader starts a River client that may lead, as a scheduler is, and
// waits until it holds river_leader.
func startLeader(t *testing.T, db *testdb.DB, id string) {
	t.Helper()
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(context.Context, *river.Job[readyzNoopArgs]) error { return nil }))
	db.Start(t, &river.Config{
		ID:      id,
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		Queues:  map[string]river.QueueConfig{"scheduler": {MaxWorkers: 1}},
		Schema:  db.Schema,
		Workers: workers,
	})
	testdb.WaitFor(t, 20*time.Second, "the River client to lead", func() bool {
		return db.Count(t, `SELECT count(*) FROM river_leader WHERE leader_id = $1 AND expires_at > now()`, id) == 1
	})
}

// TestReadyzWithoutLeader: with no scheduler running the API is ready (it
// can insert); the body says the leader is absent, and
// tierq_leader_present is 0.
func TestReadyzWithoutLeader(t *testing.T) {
	t.Parallel()
	b := setup(t)

	require.Equal(t, "ok", b.do(t, "GET", "/healthz", "", nil).json(t)["status"])
	status, body := b.readyz(t)
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, map[string]any{
		"status":     "ok",
		"database":   "ok",
		"migrations": "ok",
		"leader":     "absent: no River leader in the last minute: is a scheduler running?",
	}, body)
	require.Equal(t, http.StatusCreated, b.do(t, "POST", "/v1/jobs", producerToken, analysisBody("u_1", "/srv/a")).status,
		"inserts work without a scheduler")
	require.Equal(t, "0", leaderPresent(t, b.db.Pool))
	require.Contains(t, string(b.do(t, "GET", "/metrics", "", nil).body), "\ntierq_leader_present 0\n")
}

// TestReadyzNamesLeader: a River client that leads (as a scheduler does) is
// named in readyz's body and makes tierq_leader_present 1; a lease that
// ended within the last minute still counts, an older one does not.
func TestReadyzNamesLeader(t *testing.T) {
	t.Parallel()

	t.Run("running leader", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.Equal(t, "0", leaderPresent(t, b.db.Pool), "before the leader starts")

		startLeader(t, b.db, "scheduler_readyz_test")
		status, body := b.readyz(t)
		require.Equal(t, http.StatusOK, status, body)
		require.Equal(t, "scheduler_readyz_test", body["leader"])
		require.Equal(t, "ok", body["status"])
		require.Equal(t, "1", leaderPresent(t, b.db.Pool))
	})

	tests := []struct {
		name       string
		expiredAgo string
		wantLeader string
		wantGauge  string
	}{
		{name: "lease ended 30s ago", expiredAgo: "30 seconds", wantLeader: "scheduler_gone", wantGauge: "1"},
		{name: "lease ended 2m ago", expiredAgo: "2 minutes",
			wantLeader: "absent: no River leader in the last minute: is a scheduler running?", wantGauge: "0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			_, err := b.db.Pool.Exec(context.Background(), `
				INSERT INTO river_leader (leader_id, elected_at, expires_at)
				VALUES ('scheduler_gone', now() - interval '10 minutes', now() - $1::interval)`, tt.expiredAgo)
			require.NoError(t, err)
			status, body := b.readyz(t)
			require.Equal(t, http.StatusOK, status, body)
			require.Equal(t, tt.wantLeader, body["leader"])
			require.Equal(t, tt.wantGauge, leaderPresent(t, b.db.Pool))
		})
	}
}

// TestReadyzCachesMigrationCheck: a check that found every migration
// applied serves readyz for 10s, so a migration that goes missing shows
// only after that (503); a check that found one pending is not kept, so
// readyz is 200 again as soon as it is applied.
func TestReadyzCachesMigrationCheck(t *testing.T) {
	t.Parallel()
	b := setupHealth(t)
	ctx := context.Background()

	status, body := b.readyz(t)
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, "ok", body["migrations"])

	// tierq's newest migration "un-applied": the schema is no longer current.
	var version int64
	require.NoError(t, b.db.Pool.QueryRow(ctx, `
		DELETE FROM tierq_schema_version WHERE version_id = (SELECT max(version_id) FROM tierq_schema_version)
		RETURNING version_id`).Scan(&version))

	status, body = b.readyz(t)
	require.Equal(t, http.StatusOK, status, "checked 0s ago: %v", body)
	b.clock.Add(10*time.Second - time.Millisecond)
	status, body = b.readyz(t)
	require.Equal(t, http.StatusOK, status, "checked 9.999s ago: %v", body)

	b.clock.Add(time.Millisecond)
	status, body = b.readyz(t)
	require.Equal(t, http.StatusServiceUnavailable, status, "checked 10s ago: %v", body)
	require.Equal(t, map[string]any{
		"status":     "unavailable",
		"error":      "not ready: migrations: pending: run tierctl migrate",
		"database":   "ok",
		"migrations": "pending: run tierctl migrate",
		"leader":     "absent: no River leader in the last minute: is a scheduler running?",
	}, body)

	status, body = b.readyz(t)
	require.Equal(t, http.StatusServiceUnavailable, status, "a pending result is not cached as current: %v", body)

	// Applied again: the next probe checks again, at the same instant.
	_, err := b.db.Pool.Exec(ctx, `INSERT INTO tierq_schema_version (version_id, is_applied) VALUES ($1, true)`, version)
	require.NoError(t, err)
	status, body = b.readyz(t)
	require.Equal(t, http.StatusOK, status, "a pending result is not cached: %v", body)
	require.Equal(t, "ok", body["migrations"])
}

// TestReadyzDoesNotCacheAFailedCheck: a migration check that fails (here:
// it cannot read tierq_schema_version within readyz's 3s) makes readyz 503
// "could not check", and the next probe checks again rather than trusting
// it; once the check succeeds readyz is 200 again.
func TestReadyzDoesNotCacheAFailedCheck(t *testing.T) {
	t.Parallel()
	b := setupHealth(t)
	ctx := context.Background()

	status, body := b.readyz(t)
	require.Equal(t, http.StatusOK, status, body)
	b.clock.Add(10 * time.Second) // the next probe checks again

	tx, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	_, err = tx.Exec(ctx, `LOCK TABLE tierq_schema_version IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	for _, probe := range []string{"first probe", "second probe"} {
		status, body = b.readyz(t)
		require.Equal(t, http.StatusServiceUnavailable, status, "%s: %v", probe, body)
		require.Equal(t, "could not check", body["migrations"], probe)
		require.Equal(t, "not ready: migrations: could not check", body["error"], probe)
	}

	require.NoError(t, tx.Rollback(ctx))
	status, body = b.readyz(t)
	require.Equal(t, http.StatusOK, status, body)
}

// TestReadyzDatabaseUnreachable: without the database the API is not
// ready, and its metrics say the read failed rather than that no leader is
// present.
func TestReadyzDatabaseUnreachable(t *testing.T) {
	t.Parallel()
	b, pool := setupUnreachable(t)

	status, body := b.readyz(t)
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.Equal(t, map[string]any{
		"status":     "unavailable",
		"error":      "database unreachable",
		"database":   "unreachable",
		"migrations": "unknown",
		"leader":     "unknown: database unreachable",
	}, body)
	require.Empty(t, leaderPresent(t, pool), "no tierq_leader_present when the database cannot be read")
}
