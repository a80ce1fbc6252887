package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/api"
	"github.com/tierq/tierq/dlq"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/subscriptions"
	"github.com/tierq/tierq/tiers"
)

const (
	producerToken = "producer-token-0123456789"
	adminToken    = "admin-token-0123456789"
)

type bundle struct {
	db  *testdb.DB
	url string
}

// setup starts the API on a random loopback port against the test's schema.
func setup(t *testing.T) *bundle {
	t.Helper()
	db := testdb.New(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	registry := testdb.Registry(t)
	server := api.New(api.Config{Token: producerToken, AdminToken: adminToken, Schema: db.Schema, MaxAttempts: 5, Registry: registry, Logger: logger},
		db.Pool, db.Producer(t), api.NewMetrics(db.Pool, registry, logger))
	ts := httptest.NewServer(server.Handler())
	t.Cleanup(ts.Close)
	return &bundle{db: db, url: ts.URL}
}

// response is a decoded answer.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var v map[string]any
	require.NoError(t, json.Unmarshal(r.body, &v), string(r.body))
	return v
}

func (b *bundle) do(t *testing.T, method, path, token string, body any) response {
	t.Helper()
	var reader io.Reader
	switch v := body.(type) {
	case nil:
	case string:
		reader = strings.NewReader(v)
	case []byte:
		reader = bytes.NewReader(v)
	default:
		data, err := json.Marshal(v)
		require.NoError(t, err)
		reader = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, b.url+path, reader)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if reader != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	if resp.StatusCode >= 400 {
		requireJSONError(t, resp.Header, data, method, path)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: data}
}

// requireJSONError checks an error answer: JSON with an "error" string, as
// every error of the API is.
func requireJSONError(t *testing.T, header http.Header, body []byte, method, path string) {
	t.Helper()
	require.Equal(t, "application/json", header.Get("Content-Type"), "%s %s: %s", method, path, body)
	var e struct {
		Error string `json:"error"`
	}
	require.NoError(t, json.Unmarshal(body, &e), "%s %s: %s", method, path, body)
	require.NotEmpty(t, e.Error)
}

func (b *bundle) subscribe(t *testing.T, user string, tier tiers.Tier) {
	t.Helper()
	require.NoError(t, subscriptions.Set(context.Background(), b.db.Pool, user, tier))
}

func analysisBody(user, target string) map[string]any {
	return map[string]any{"kind": "analysis", "user_id": user, "args": map[string]any{"target": target}}
}

func TestAuthMatrix(t *testing.T) {
	t.Parallel()
	b := setup(t)

	routes := []struct {
		method, path string
		admin        bool
	}{
		{"POST", "/v1/jobs", false},
		{"GET", "/v1/jobs/1", false},
		{"PATCH", "/v1/jobs/1", true},
		{"GET", "/v1/queues", true},
		{"GET", "/v1/queues/analysis_default/priority-stats", true},
		{"GET", "/v1/dead-letters", true},
		{"GET", "/v1/dead-letters/1", true},
		{"POST", "/v1/dead-letters/1/replay", true},
		{"POST", "/v1/dead-letters/replay", true},
		{"DELETE", "/v1/dead-letters/1", true},
		{"GET", "/v1/escalations", true},
		{"GET", "/v1/limits", true},
		{"GET", "/v1/limits/analyzer/tenant?id=u_1", true},
		{"PATCH", "/v1/limits/analyzer/tenant?id=u_1", true},
		{"DELETE", "/v1/limits/analyzer/tenant?id=u_1", true},
	}
	for _, rt := range routes {
		t.Run(rt.method+" "+rt.path, func(t *testing.T) {
			t.Parallel()
			res := b.do(t, rt.method, rt.path, "", "{}")
			require.Equal(t, http.StatusUnauthorized, res.status, "no token")
			require.Contains(t, res.header.Get("WWW-Authenticate"), "Bearer")
			require.Equal(t, http.StatusUnauthorized, b.do(t, rt.method, rt.path, "wrong-token-0123456789", "{}").status, "wrong token")
			require.Equal(t, http.StatusUnauthorized, b.do(t, rt.method, rt.path, producerToken[:len(producerToken)-1], "{}").status, "a prefix of the token")

			producer := b.do(t, rt.method, rt.path, producerToken, "{}").status
			if rt.admin {
				require.Equal(t, http.StatusForbidden, producer, "producer token on an operator route")
			} else {
				require.NotContains(t, []int{401, 403}, producer)
			}
			require.NotContains(t, []int{401, 403}, b.do(t, rt.method, rt.path, adminToken, "{}").status, "admin may do everything")
		})
	}

	// Basic auth or a token without "Bearer " is not a bearer token.
	req, err := http.NewRequest(http.MethodGet, b.url+"/v1/queues", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", adminToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	// Health, metrics and the OpenAPI document need no token.
	for _, path := range []string{"/healthz", "/metrics", "/openapi.json"} {
		require.Equal(t, http.StatusOK, b.do(t, "GET", path, "", nil).status, path)
	}
}

func TestUnknownRoutesAndMethodsAreJSON(t *testing.T) {
	t.Parallel()
	b := setup(t)

	require.Equal(t, http.StatusNotFound, b.do(t, "GET", "/v2/nothing", adminToken, nil).status)
	res := b.do(t, "PUT", "/v1/jobs", adminToken, "{}")
	require.Equal(t, http.StatusMethodNotAllowed, res.status)
	require.Contains(t, res.header.Get("Allow"), "POST")
}

// drainAll moves discarded jobs into dead_letter_jobs, as the scheduler does.
func drainAll(t *testing.T, b *bundle) {
	t.Helper()
	_, err := dlq.Drain(context.Background(), b.db.Pool, 1000)
	require.NoError(t, err)
}
