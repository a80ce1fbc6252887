package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/api"
	"github.com/tierq/tierq/internal/proctest"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/producer"
)

type riverUIBundle struct {
	db     *testdb.DB
	url    string
	client *http.Client
	log    *proctest.Buffer // the server's JSON log
}

// setupRiverUI starts the API with River UI on a random loopback port. River
// UI's River client has a pool whose search_path leads to no schema at all,
// so River UI works only if every query it makes names the test's schema
// (river.Config.Schema), as the API's client is configured with
// DATABASE_SCHEMA. The six service queues are registered in river_queue.
// With tlsServer the API serves HTTPS.
func setupRiverUI(t *testing.T, tlsServer bool) *riverUIBundle {
	t.Helper()
	db := testdb.New(t)
	log := &proctest.Buffer{}
	logger := slog.New(slog.NewJSONHandler(log, nil))

	poolConfig, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	poolConfig.ConnConfig.RuntimeParams["search_path"] = "tierq_no_such_schema"
	pool, err := pgxpool.NewWithConfig(t.Context(), poolConfig)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pool.Exec(t.Context(), `SELECT 1 FROM river_job`)
	require.ErrorContains(t, err, `relation "river_job" does not exist`, "River UI's pool must not find River's tables by itself")
	client, err := river.NewClient(riverpgxv5.New(pool), producer.ClientConfig(db.Schema, logger))
	require.NoError(t, err)
	ui, err := api.StartRiverUI(t.Context(), client, logger)
	require.NoError(t, err)

	registry := testdb.Registry(t)
	server := api.New(api.Config{
		Token: producerToken, AdminToken: adminToken, Schema: db.Schema, MaxAttempts: 5, Registry: registry, RiverUI: ui, Logger: logger,
	}, db.Pool, db.Producer(t), api.NewMetrics(db.Pool, registry, logger))
	ts := httptest.NewUnstartedServer(server.Handler())
	if tlsServer {
		ts.StartTLS()
	} else {
		ts.Start()
	}
	t.Cleanup(ts.Close)

	_, err = db.Pool.Exec(t.Context(), `
		INSERT INTO river_queue (name, created_at, metadata, updated_at)
		SELECT name, now(), '{}', now() FROM unnest($1::text[]) AS name`,
		[]string{"analysis_priority", "analysis_default", "analysis_scheduled", "specview_priority", "specview_default", "specview_scheduled"})
	require.NoError(t, err)
	return &riverUIBundle{db: db, url: ts.URL, client: ts.Client(), log: log}
}

// credential is how a River UI request authenticates: kind "basic" (user
// "alice", password secret), "bearer", or "" (none).
type credential struct {
	kind, secret string
}

func basic(password string) credential { return credential{kind: "basic", secret: password} }
func bearer(token string) credential   { return credential{kind: "bearer", secret: token} }

// do sends a request to River UI with cred,
// headers, and body (JSON, when not empty). A 401 or 403 must be the API's
// JSON error.
func (b *riverUIBundle) do(t *testing.T, method, path string, cred credential, headers map[string]string, body string) response {
	t.Helper()
	var reader io.Reader
	if body != "" {
		reader = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, b.url+path, reader)
	require.NoError(t, err)
	switch cred.kind {
	case "basic":
		req.SetBasicAuth("alice", cred.secret)
	case "bearer":
		req.Header.Set("Authorization", "Bearer "+cred.secret)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := b.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
		requireJSONError(t, resp.Header, data, method, path)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: data}
}

// actions are the "river ui action" lines of the log.
func (b *riverUIBundle) actions(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(b.log.String()))
	for sc.Scan() {
		var line map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &line), sc.Text())
		if line["msg"] == "river ui action" {
			out = append(out, line)
		}
	}
	return out
}

// waitAction waits for the action line of path and returns it.
func (b *riverUIBundle) waitAction(t *testing.T, path string) map[string]any {
	t.Helper()
	var found map[string]any
	testdb.WaitFor(t, 5*time.Second, "the log line of "+path, func() bool {
		for _, line := range b.actions(t) {
			if line["path"] == path {
				found = line
				return true
			}
		}
		return false
	})
	return found
}

func (b *riverUIBundle) insertJob(t *testing.T) int64 {
	t.Helper()
	return testdb.InsertWaiting(t, b.db, jobs.LoadTestArgs{}, &river.InsertOpts{Queue: "analysis_default", Priority: 4}, 0)
}

func (b *riverUIBundle) jobState(t *testing.T, id int64) string {
	t.Helper()
	rows := b.db.Jobs(t, "id = $1", id)
	require.Len(t, rows, 1)
	return rows[0].State
}

func TestRiverUIAuthMatrix(t *testing.T) {
	t.Parallel()
	b := setupRiverUI(t, false)

	for _, path := range []string{"/riverui/", "/riverui/api/queues"} {
		t.Run(path, func(t *testing.T) {
			t.Parallel()
			res := b.do(t, "GET", path, credential{}, nil, "")
			require.Equal(t, http.StatusUnauthorized, res.status, "no credential")
			require.Equal(t, `Basic realm="tierq River UI"`, res.header.Get("WWW-Authenticate"))

			for name, cred := range map[string]credential{
				"wrong bearer":           bearer("wrong-token-0123456789"),
				"wrong basic":            basic("wrong-token-0123456789"),
				"prefix of admin, basic": basic(adminToken[:len(adminToken)-1]),
				"empty basic password":   basic(""),
			} {
				res := b.do(t, "GET", path, cred, nil, "")
				require.Equal(t, http.StatusUnauthorized, res.status, name)
				require.Equal(t, `Basic realm="tierq River UI"`, res.header.Get("WWW-Authenticate"), name)
			}

			require.Equal(t, http.StatusForbidden, b.do(t, "GET", path, bearer(producerToken), nil, "").status, "producer bearer")
			require.Equal(t, http.StatusForbidden, b.do(t, "GET", path, basic(producerToken), nil, "").status, "producer basic")

			require.Equal(t, http.StatusOK, b.do(t, "GET", path, basic(adminToken), nil, "").status, "admin basic")
			require.Equal(t, http.StatusOK, b.do(t, "GET", path, bearer(adminToken), nil, "").status, "admin bearer")
		})
	}

	// The page is River UI's, pointed at its API under the prefix.
	page := b.do(t, "GET", "/riverui/", basic(adminToken), nil, "")
	require.Equal(t, "text/html; charset=utf-8", page.header.Get("Content-Type"))
	require.Contains(t, string(page.body), "<title>River</title>")
	require.Contains(t, string(page.body), `"apiUrl":"/riverui/api"`)

	// River UI's other reads work in the test's schema too.
	id := b.insertJob(t)
	res := b.do(t, "GET", "/riverui/api/jobs?state=available", bearer(adminToken), nil, "")
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	require.Contains(t, string(res.body), `"id":`+strconv.FormatInt(id, 10)+`,`)
	res = b.do(t, "GET", "/riverui/api/states", bearer(adminToken), nil, "")
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	var states map[string]struct {
		Count int `json:"count"`
	}
	require.NoError(t, json.Unmarshal(res.body, &states))
	require.Equal(t, 1, states["available"].Count)

	// The queues River knows, from the test's schema.
	res = b.do(t, "GET", "/riverui/api/queues", basic(adminToken), nil, "")
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	var queues struct {
		Data []struct {
			Name string `json:"name"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal(res.body, &queues))
	var names []string
	for _, q := range queues.Data {
		names = append(names, q.Name)
	}
	require.ElementsMatch(t, []string{"analysis_priority", "analysis_default", "analysis_scheduled",
		"specview_priority", "specview_default", "specview_scheduled"}, names)

	// The JSON API still takes only bearer tokens.
	require.Equal(t, http.StatusUnauthorized, b.do(t, "GET", "/v1/queues", basic(adminToken), nil, "").status)
}

func TestRiverUIRefusesCrossOriginActions(t *testing.T) {
	t.Parallel()
	b := setupRiverUI(t, false)

	tests := []struct {
		name    string
		headers map[string]string
	}{
		{name: "other origin", headers: map[string]string{"Origin": "http://evil.example"}},
		{name: "cross-site fetch", headers: map[string]string{"Sec-Fetch-Site": "cross-site"}},
		{name: "same-site fetch", headers: map[string]string{"Sec-Fetch-Site": "same-site"}},
		{name: "same-origin fetch from another origin", headers: map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://evil.example"}},
		{name: "null origin", headers: map[string]string{"Origin": "null"}},
		{name: "own host, other port", headers: map[string]string{"Origin": b.url + "0"}},
	}
	t.Run("refused", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				id := b.insertJob(t)
				res := b.do(t, "POST", "/riverui/api/jobs/cancel", basic(adminToken), tt.headers, `{"ids":["`+strconv.FormatInt(id, 10)+`"]}`)
				require.Equal(t, http.StatusForbidden, res.status, string(res.body))
				require.Contains(t, string(res.body), "cross-origin request refused")
				require.Equal(t, "available", b.jobState(t, id), "the job is left as it was")
			})
		}

		t.Run("queue pause", func(t *testing.T) {
			t.Parallel()
			res := b.do(t, "PUT", "/riverui/api/queues/specview_scheduled/pause", basic(adminToken),
				map[string]string{"Origin": "http://evil.example"}, "")
			require.Equal(t, http.StatusForbidden, res.status, string(res.body))
			require.Equal(t, 0, b.db.Count(t, `SELECT count(*) FROM river_queue WHERE name = 'specview_scheduled' AND paused_at IS NOT NULL`))
		})
	})

	require.Empty(t, b.actions(t), "a refused request is no action")
	require.Contains(t, b.log.String(), `"msg":"river ui cross-origin request refused"`)
}

func TestRiverUIActions(t *testing.T) {
	t.Parallel()
	b := setupRiverUI(t, false)

	t.Run("same-origin cancel with basic auth", func(t *testing.T) {
		id := b.insertJob(t)
		res := b.do(t, "POST", "/riverui/api/jobs/cancel", basic(adminToken),
			map[string]string{"Origin": b.url, "Sec-Fetch-Site": "same-origin"}, `{"ids":["`+strconv.FormatInt(id, 10)+`"]}`)
		require.Equal(t, http.StatusOK, res.status, string(res.body))
		require.Equal(t, "cancelled", b.jobState(t, id))

		line := b.waitAction(t, "/riverui/api/jobs/cancel")
		require.Equal(t, "INFO", line["level"])
		require.Equal(t, "basic", line["credential"])
		require.Equal(t, "POST", line["method"])
		require.Equal(t, []any{float64(id)}, line["job_ids"])
		require.Equal(t, float64(http.StatusOK), line["status"])
	})

	t.Run("bearer retry without origin", func(t *testing.T) {
		id := b.insertJob(t)
		_, err := b.db.Pool.Exec(t.Context(), `UPDATE river_job SET state = 'discarded', finalized_at = now() WHERE id = $1`, id)
		require.NoError(t, err)
		res := b.do(t, "POST", "/riverui/api/jobs/retry", bearer(adminToken), nil, `{"ids":[`+strconv.FormatInt(id, 10)+`]}`)
		require.Equal(t, http.StatusOK, res.status, string(res.body))
		require.Equal(t, "available", b.jobState(t, id))

		line := b.waitAction(t, "/riverui/api/jobs/retry")
		require.Equal(t, "bearer", line["credential"])
		require.Equal(t, []any{float64(id)}, line["job_ids"])
	})

	t.Run("bearer delete from another origin", func(t *testing.T) {
		// No browser adds a bearer token by itself: scripts are not checked.
		id := b.insertJob(t)
		res := b.do(t, "POST", "/riverui/api/jobs/delete", bearer(adminToken),
			map[string]string{"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}, `{"ids":["`+strconv.FormatInt(id, 10)+`"]}`)
		require.Equal(t, http.StatusOK, res.status, string(res.body))
		require.Empty(t, b.db.Jobs(t, "id = $1", id))
		require.Equal(t, "bearer", b.waitAction(t, "/riverui/api/jobs/delete")["credential"])
	})

	t.Run("basic pause and resume without browser headers", func(t *testing.T) {
		// curl -u: neither Origin nor Sec-Fetch-Site.
		res := b.do(t, "PUT", "/riverui/api/queues/analysis_scheduled/pause", basic(adminToken), nil, "")
		require.Equal(t, http.StatusOK, res.status, string(res.body))
		require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM river_queue WHERE name = 'analysis_scheduled' AND paused_at IS NOT NULL`))
		line := b.waitAction(t, "/riverui/api/queues/analysis_scheduled/pause")
		require.Equal(t, "analysis_scheduled", line["queue"])
		require.Equal(t, "basic", line["credential"])
		require.Equal(t, "PUT", line["method"])
		require.NotContains(t, line, "job_ids")

		res = b.do(t, "PUT", "/riverui/api/queues/analysis_scheduled/resume", basic(adminToken), map[string]string{"Origin": b.url}, "")
		require.Equal(t, http.StatusOK, res.status, string(res.body))
		require.Equal(t, 0, b.db.Count(t, `SELECT count(*) FROM river_queue WHERE name = 'analysis_scheduled' AND paused_at IS NOT NULL`))
		require.Equal(t, "analysis_scheduled", b.waitAction(t, "/riverui/api/queues/analysis_scheduled/resume")["queue"])
	})

	t.Run("a body over the limit", func(t *testing.T) {
		res := b.do(t, "POST", "/riverui/api/jobs/cancel", bearer(adminToken), nil, testdb.Large())
		require.Equal(t, http.StatusRequestEntityTooLarge, res.status)
	})

	// Neither the tokens nor the Basic auth header reach the log.
	require.NotContains(t, b.log.String(), adminToken)
}

// TestRiverUIOwnOrigins: River UI's page is this server's origin, http or
// https with the request's Host on a plain connection (a proxy in front may
// terminate TLS), only https on a TLS connection.
func TestRiverUIOwnOrigins(t *testing.T) {
	t.Parallel()

	cancel := func(t *testing.T, b *riverUIBundle, origin string) (int, string) {
		t.Helper()
		id := b.insertJob(t)
		res := b.do(t, "POST", "/riverui/api/jobs/cancel", basic(adminToken),
			map[string]string{"Origin": origin, "Sec-Fetch-Site": "same-origin"}, `{"ids":["`+strconv.FormatInt(id, 10)+`"]}`)
		return res.status, b.jobState(t, id)
	}

	t.Run("plain", func(t *testing.T) {
		t.Parallel()
		b := setupRiverUI(t, false)
		host := strings.TrimPrefix(b.url, "http://")
		for _, origin := range []string{"http://" + host, "https://" + host} {
			status, state := cancel(t, b, origin)
			require.Equal(t, http.StatusOK, status, origin)
			require.Equal(t, "cancelled", state, origin)
		}
	})

	t.Run("tls", func(t *testing.T) {
		t.Parallel()
		b := setupRiverUI(t, true)
		host := strings.TrimPrefix(b.url, "https://")
		status, state := cancel(t, b, "https://"+host)
		require.Equal(t, http.StatusOK, status)
		require.Equal(t, "cancelled", state)
		status, state = cancel(t, b, "http://"+host)
		require.Equal(t, http.StatusForbidden, status, "a plain-HTTP page of the same host")
		require.Equal(t, "available", state)
	})
}
