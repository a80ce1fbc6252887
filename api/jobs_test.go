package api_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/api"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/tiers"
)

func TestCreateJobRoutesByTheSubscription(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.subscribe(t, "u_ent", tiers.Enterprise)
	b.subscribe(t, "u_pro", tiers.Pro)

	tests := []struct {
		name                 string
		body                 map[string]any
		wantQueue, wantTier  string
		wantPriority, status int
	}{
		{"no subscription: free", analysisBody("u_new", "/srv/a"), "analysis_default", "free", 4, 201},
		{"enterprise", analysisBody("u_ent", "/srv/b"), "analysis_priority", "enterprise", 2, 201},
		{"pro, background", map[string]any{"kind": "analysis", "user_id": "u_pro", "scheduled": true, "args": map[string]any{"target": "/srv/c"}},
			"analysis_scheduled", "pro", 4, 201},
		{"specview for enterprise", map[string]any{"kind": "specview", "user_id": "u_ent", "args": map[string]any{"analysis_result_id": 7}},
			"specview_priority", "enterprise", 2, 201},
		{"SQL metacharacters in a user id are just a user id", analysisBody("u'; DROP TABLE river_job; --", "/srv/d"), "analysis_default", "free", 4, 201},
	}
	for _, tt := range tests {
		res := b.do(t, "POST", "/v1/jobs", producerToken, tt.body)
		require.Equal(t, tt.status, res.status, "%s: %s", tt.name, res.body)
		job := res.json(t)
		require.Equal(t, tt.wantQueue, job["queue"], tt.name)
		require.Equal(t, tt.wantTier, job["tier"], tt.name)
		require.EqualValues(t, tt.wantPriority, job["priority"], tt.name)
		require.Equal(t, fmt.Sprintf("/v1/jobs/%v", job["id"]), res.header.Get("Location"))
		require.Contains(t, []any{"available", "scheduled"}, job["state"])
	}

	// The server wrote the tier and user into the args; max_attempts is the API's.
	var args string
	var maxAttempts int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(),
		`SELECT args::text, max_attempts FROM river_job WHERE args->>'target' = '/srv/b'`).Scan(&args, &maxAttempts))
	require.JSONEq(t, `{"target": "/srv/b", "user_id": "u_ent", "tier": "enterprise"}`, args)
	require.Equal(t, 5, maxAttempts)
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM river_job WHERE args->>'user_id' = $1`, "u'; DROP TABLE river_job; --"))
}

func TestDuplicateFromAHigherTierUpgradesTheQueuedJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.subscribe(t, "u_ent", tiers.Enterprise)

	first := b.do(t, "POST", "/v1/jobs", producerToken, analysisBody("u_free", "/srv/shared"))
	require.Equal(t, http.StatusCreated, first.status)
	again := b.do(t, "POST", "/v1/jobs", producerToken, analysisBody("u_free2", "/srv/shared"))
	require.Equal(t, http.StatusOK, again.status, "a duplicate is not created")
	require.Equal(t, true, again.json(t)["duplicate"])
	require.Nil(t, again.json(t)["upgraded"])

	upgraded := b.do(t, "POST", "/v1/jobs", producerToken, analysisBody("u_ent", "/srv/shared"))
	require.Equal(t, http.StatusOK, upgraded.status)
	job := upgraded.json(t)
	require.Equal(t, first.json(t)["id"], job["id"])
	require.Equal(t, true, job["upgraded"])
	require.Equal(t, "analysis_priority", job["queue"])
	require.Equal(t, "enterprise", job["tier"], "the job now runs for the enterprise tier")
	require.Equal(t, "enterprise", b.do(t, "GET", fmt.Sprintf("/v1/jobs/%v", job["id"]), producerToken, nil).json(t)["tier"])

	// A later free duplicate shows the job as it is: enterprise, priority queue.
	later := b.do(t, "POST", "/v1/jobs", producerToken, analysisBody("u_free3", "/srv/shared")).json(t)
	require.Equal(t, "enterprise", later["tier"])
	require.Equal(t, "analysis_priority", later["queue"])
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM river_job`))
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM job_escalations WHERE actor = 'dedup'`))

	metrics := string(b.do(t, "GET", "/metrics", "", nil).body)
	require.Contains(t, metrics, `tierq_escalations_total{actor_kind="dedup",from="analysis_default",to="analysis_priority"} 1`)
}

func TestCreateJobRejectsBadInputAndInsertsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)

	tests := []struct {
		name   string
		body   string
		status int
		want   string
	}{
		{"malformed JSON", `{"kind": "analysis",`, 400, "invalid JSON"},
		{"not an object", `[1, 2]`, 400, "invalid JSON"},
		{"empty body", ``, 400, "empty body"},
		{"two values", `{"kind":"analysis","user_id":"u","args":{"target":"/a"}} {}`, 400, "more than one"},
		{"unknown field", `{"kind":"analysis","user_id":"u","args":{"target":"/a"},"queue":"analysis_priority"}`, 400, `unknown field "queue"`},
		{"tier field", `{"kind":"analysis","user_id":"u","tier":"enterprise","args":{"target":"/a"}}`, 400, "tier is not accepted"},
		{"tier in args", `{"kind":"analysis","user_id":"u","args":{"target":"/a","tier":"enterprise"}}`, 400, "may not set tier"},
		{"user id in args", `{"kind":"analysis","user_id":"u","args":{"target":"/a","user_id":"v"}}`, 400, "may not set tier or user_id"},
		{"unknown kind", `{"kind":"loadtest","user_id":"u","args":{}}`, 400, `unknown kind "loadtest"`},
		{"no kind", `{"user_id":"u","args":{"target":"/a"}}`, 400, "kind is required"},
		{"no user", `{"kind":"analysis","args":{"target":"/a"}}`, 400, "user_id"},
		{"user id too long", `{"kind":"analysis","user_id":"` + strings.Repeat("u", 201) + `","args":{"target":"/a"}}`, 400, "longer than 200"},
		{"control characters in user id", `{"kind":"analysis","user_id":"u\u0000x","args":{"target":"/a"}}`, 400, "control character U+0000 at byte 1"},
		{"wrong type", `{"kind":"analysis","user_id":42,"args":{"target":"/a"}}`, 400, `"user_id" must be string`},
		{"wrong arg type", `{"kind":"specview","user_id":"u","args":{"analysis_result_id":"7"}}`, 400, "invalid args"},
		{"huge arg number", `{"kind":"specview","user_id":"u","args":{"analysis_result_id":99999999999999999999}}`, 400, "invalid args"},
		{"no args", `{"kind":"analysis","user_id":"u"}`, 400, "args is required"},
		{"relative target", `{"kind":"analysis","user_id":"u","args":{"target":"srv/a"}}`, 400, "clean absolute path"},
		{"dot-dot target", `{"kind":"analysis","user_id":"u","args":{"target":"/srv/../etc"}}`, 400, "clean absolute path"},
		{"zero result id", `{"kind":"specview","user_id":"u","args":{"analysis_result_id":0}}`, 400, "positive"},
		{"key in another case", `{"KIND":"analysis","user_id":"u","args":{"target":"/a"}}`, 400, `unknown field "KIND"`},
		{"key given twice", `{"kind":"analysis","user_id":"u1","user_id":"u2","args":{"target":"/a"}}`, 400, "given twice"},
		{"Tier in another case", `{"kind":"analysis","user_id":"u","Tier":"enterprise","args":{"target":"/a"}}`, 400, "tier is not accepted"},
		{"TARGET in another case", `{"kind":"analysis","user_id":"u","args":{"TARGET":"/a"}}`, 400, "invalid args"},
		{"oversized body", `{"kind":"analysis","user_id":"u","args":{"target":"/` + strings.Repeat("a", 1<<20) + `"}}`, 413, "larger than"},
	}
	for _, tt := range tests {
		res := b.do(t, "POST", "/v1/jobs", producerToken, tt.body)
		require.Equal(t, tt.status, res.status, "%s: %s", tt.name, res.body)
		require.Contains(t, res.json(t)["error"], tt.want, tt.name)
	}

	req, err := http.NewRequest(http.MethodPost, b.url+"/v1/jobs", strings.NewReader(`kind=analysis`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+producerToken)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnsupportedMediaType, resp.StatusCode)

	for ct, want := range map[string]int{"application/jsonx": 415, "text/plain": 415, "Application/JSON; charset=utf-8": 201} {
		req, err := http.NewRequest(http.MethodPost, b.url+"/v1/jobs", strings.NewReader(`{"kind":"analysis","user_id":"u","args":{"target":"/ct"}}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "bearer "+producerToken) // the scheme is case-insensitive
		req.Header.Set("Content-Type", ct)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, want, resp.StatusCode, ct)
	}
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM river_job`), "only the well-formed request inserted")
}

// TestCreateJobRefusesBadUserIDs: a user id is a tenant id, and the API
// applies tierq's rule for them (jobmeta.CheckTenant): at most 200 bytes of
// UTF-8 without control characters. Anything else is a 400 whose JSON
// names the field and the problem, and nothing is inserted; bytes that are
// not UTF-8 are refused, not replaced with U+FFFD as encoding/json would.
func TestCreateJobRefusesBadUserIDs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := func(userID string) string {
		return `{"kind":"analysis","user_id":"` + userID + `","args":{"target":"/srv/u"}}`
	}

	tests := []struct {
		name     string
		body     string
		wantBody string
	}{
		{"escape (JSON escape)", body(`a\u001bb`), `{"error":"user_id: invalid user id: control character U+001B at byte 1"}`},
		{"DEL", body("ab\x7f"), `{"error":"user_id: invalid user id: control character U+007F at byte 2"}`},
		{"C1 (JSON escape)", body(`ab\u0085`), `{"error":"user_id: invalid user id: control character U+0085 at byte 2"}`},
		{"C1 (UTF-8 bytes)", body("\xc2\x9b1"), `{"error":"user_id: invalid user id: control character U+009B at byte 0"}`},
		{"invalid UTF-8", body("u\xff1"), `{"error":"user_id: invalid user id: invalid UTF-8 at byte 1"}`},
		{"invalid UTF-8 after an escape", body("\\\"u\xfe"), `{"error":"user_id: invalid user id: invalid UTF-8 at byte 2"}`},
		{"201 bytes", body(strings.Repeat("u", 201)), `{"error":"user_id: invalid user id: 201 bytes, longer than 200"}`},
		{"201 bytes of two-byte characters", body(strings.Repeat("é", 100) + "u"), `{"error":"user_id: invalid user id: 201 bytes, longer than 200"}`},
		{"empty", body(""), `{"error":"user_id: invalid user id: empty"}`},
	}
	for _, tt := range tests {
		res := b.do(t, "POST", "/v1/jobs", producerToken, tt.body)
		require.Equal(t, 400, res.status, tt.name)
		require.JSONEq(t, tt.wantBody, string(res.body), tt.name)
	}
	require.Zero(t, b.db.Count(t, `SELECT count(*) FROM river_job`), "nothing inserted")

	// At the limit: inserted, the tenant in the job's metadata as sent.
	for i, userID := range []string{strings.Repeat("u", 200), strings.Repeat("é", 100), "u\u00a0v"} {
		res := b.do(t, "POST", "/v1/jobs", producerToken,
			fmt.Sprintf(`{"kind":"analysis","user_id":%q,"args":{"target":"/srv/ok/%d"}}`, userID, i))
		require.Equal(t, 201, res.status, "%s", res.body)
	}
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM river_job WHERE metadata->>'tierq:tenant' = $1`, strings.Repeat("u", 200)))
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM river_job WHERE metadata->>'tierq:tenant' = $1`, strings.Repeat("é", 100)))
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM river_job WHERE metadata->>'tierq:tenant' = $1`, "u\u00a0v"))
}

func TestSubscriptionLookupFailureRoutesToDefaultCounted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.subscribe(t, "u_ent", tiers.Enterprise)
	// The lookup now fails (not because the database is away).
	_, err := b.db.Pool.Exec(context.Background(), `ALTER TABLE subscriptions RENAME TO subscriptions_gone`)
	require.NoError(t, err)

	res := b.do(t, "POST", "/v1/jobs", producerToken, analysisBody("u_ent", "/srv/a"))
	require.Equal(t, http.StatusCreated, res.status, string(res.body))
	require.Equal(t, "analysis_default", res.json(t)["queue"])
	require.Equal(t, "free", res.json(t)["tier"])
	require.Contains(t, string(b.do(t, "GET", "/metrics", "", nil).body), `tierq_tier_fallbacks_total{reason="lookup_error"} 1`)
}

func TestUnreachableDatabaseIs503(t *testing.T) {
	t.Parallel()
	b, _ := setupUnreachable(t)

	require.Equal(t, http.StatusServiceUnavailable, b.do(t, "POST", "/v1/jobs", producerToken, analysisBody("u", "/srv/a")).status)
	require.Equal(t, http.StatusServiceUnavailable, b.do(t, "GET", "/v1/queues", adminToken, nil).status)
	res := b.do(t, "GET", "/readyz", "", nil)
	require.Equal(t, http.StatusServiceUnavailable, res.status)
	require.Equal(t, "unreachable", res.json(t)["database"])
	require.Contains(t, string(b.do(t, "GET", "/metrics", "", nil).body), "tierq_metrics_database_up 0")
	require.Contains(t, string(b.do(t, "GET", "/metrics", "", nil).body), `tierq_tier_fallbacks_total{reason="lookup_error"} 0`,
		"an insert that failed is not a fallback")
}

func TestGetJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	created := b.do(t, "POST", "/v1/jobs", producerToken, analysisBody("u", "/srv/a")).json(t)

	for _, token := range []string{producerToken, adminToken} {
		res := b.do(t, "GET", fmt.Sprintf("/v1/jobs/%v", created["id"]), token, nil)
		require.Equal(t, http.StatusOK, res.status)
		job := res.json(t)
		require.Equal(t, "analysis_default", job["queue"])
		require.Equal(t, "available", job["state"])
		require.EqualValues(t, 0, job["attempt"])
		require.Equal(t, []any{}, job["errors"])
		require.Equal(t, "free", job["tier"])
		require.Equal(t, "u", job["tenant"], "the user id, from the job's metadata")
		require.NotContains(t, job, "moves", "not moved yet")
	}
	require.Equal(t, http.StatusNotFound, b.do(t, "GET", "/v1/jobs/424242", producerToken, nil).status)
	for _, bad := range []string{"abc", "-1", "0", "99999999999999999999", "1%20OR%201=1"} {
		require.Equal(t, http.StatusBadRequest, b.do(t, "GET", "/v1/jobs/"+bad, producerToken, nil).status, bad)
	}

	// A drained job is found in the dead-letter table.
	_, err := b.db.Pool.Exec(context.Background(), `
		UPDATE river_job SET state = 'discarded', finalized_at = now(), attempt = 1,
		       errors = ARRAY['{"at":"2026-11-21T00:00:00Z","attempt":1,"error":"boom","trace":""}'::jsonb]`)
	require.NoError(t, err)
	drainAll(t, b)
	job := b.do(t, "GET", fmt.Sprintf("/v1/jobs/%v", created["id"]), producerToken, nil).json(t)
	require.Equal(t, "dead_letter", job["state"])
	require.NotNil(t, job["dead_letter_id"])
	require.Equal(t, "u", job["tenant"], "read from the dead letter's metadata")
	require.Equal(t, "boom", job["errors"].([]any)[0].(map[string]any)["error"])
}

func TestPatchJobEscalates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	created := b.do(t, "POST", "/v1/jobs", producerToken, analysisBody("u", "/srv/a")).json(t)
	path := fmt.Sprintf("/v1/jobs/%v", created["id"])

	res := b.do(t, "PATCH", path, adminToken, map[string]any{"queue_class": "priority", "actor": "alice", "reason": "customer escalation #812"})
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	require.Equal(t, "analysis_priority", res.json(t)["queue"])
	require.EqualValues(t, 1, res.json(t)["priority"])
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM job_escalations WHERE actor = 'alice'`))
	moves := b.do(t, "GET", path, producerToken, nil).json(t)["moves"].([]any)
	require.Len(t, moves, 1)
	move := moves[0].(map[string]any)
	require.NotEmpty(t, move["at"])
	delete(move, "at")
	require.Equal(t, map[string]any{
		"kind": "escalation", "actor": "alice", "reason": "customer escalation #812",
		"from_queue": "analysis_default", "to_queue": "analysis_priority", "from_priority": 4.0, "to_priority": 1.0,
	}, move)
	require.Contains(t, string(b.do(t, "GET", "/metrics", "", nil).body),
		`tierq_escalations_total{actor_kind="operator",from="analysis_default",to="analysis_priority"} 1`)

	bad := []struct {
		name   string
		path   string
		body   any
		status int
	}{
		{"missing job", "/v1/jobs/424242", map[string]any{"queue_class": "priority", "actor": "a", "reason": "r"}, 404},
		{"bad class", path, map[string]any{"queue_class": "urgent", "actor": "a", "reason": "r"}, 400},
		{"no actor", path, map[string]any{"queue_class": "default", "reason": "r"}, 400},
		{"bad priority", path, map[string]any{"queue_class": "default", "priority": 9, "actor": "a", "reason": "r"}, 400},
		{"unknown field", path, map[string]any{"queue_class": "default", "actor": "a", "reason": "r", "queue": "x"}, 400},
		{"bad id", "/v1/jobs/x", map[string]any{"queue_class": "default", "actor": "a", "reason": "r"}, 400},
	}
	for _, tt := range bad {
		require.Equal(t, tt.status, b.do(t, "PATCH", tt.path, adminToken, tt.body).status, tt.name)
	}

	_, err := b.db.Pool.Exec(context.Background(), `UPDATE river_job SET state = 'completed', finalized_at = now()`)
	require.NoError(t, err)
	res = b.do(t, "PATCH", path, adminToken, map[string]any{"queue_class": "default", "actor": "a", "reason": "r"})
	require.Equal(t, http.StatusConflict, res.status)
	require.Contains(t, res.json(t)["error"], "completed")
}

// setupUnreachable starts the API with a pool whose database never answers
// (the River client still has the test's schema).
func setupUnreachable(t *testing.T) (*bundle, *pgxpool.Pool) {
	t.Helper()
	db := testdb.New(t)
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=2")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	registry := testdb.Registry(t)
	server := api.New(api.Config{Token: producerToken, AdminToken: adminToken, Registry: registry, Logger: logger}, pool, db.Producer(t), api.NewMetrics(pool, registry, logger))
	ts := httptest.NewServer(server.Handler())
	t.Cleanup(ts.Close)
	return &bundle{db: db, url: ts.URL}, pool
}
