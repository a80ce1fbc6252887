package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/proctest"
	"github.com/tierq/tierq/internal/testdb"
)

// The tests start this test binary as the real api process (see
// internal/proctest).
func TestMain(m *testing.M) {
	proctest.RunMain(main)
	os.Exit(m.Run())
}

const (
	producerToken = "producer-secret-token-0123"
	adminToken    = "admin-secret-token-4567"
)

func TestBadEnvironmentExitsTwo(t *testing.T) {
	t.Parallel()

	db := "DATABASE_URL=postgres://127.0.0.1:1/none"
	tokens := []string{"API_TOKEN=" + producerToken, "API_ADMIN_TOKEN=" + adminToken}
	tests := []struct {
		name    string
		environ []string
		want    string
	}{
		{name: "no tokens", environ: []string{db}, want: `API_TOKEN="": required`},
		{name: "no admin token", environ: []string{db, tokens[0]}, want: `API_ADMIN_TOKEN="": required`},
		{name: "short token", environ: []string{db, "API_TOKEN=short", tokens[1]}, want: `API_TOKEN="[redacted]": must be at least 16`},
		{name: "bad address", environ: append([]string{db, "API_ADDR=nowhere"}, tokens...), want: `API_ADDR="nowhere"`},
		{name: "relative analysis root", environ: append([]string{db, "ANALYSIS_ROOTS=srv/repos"}, tokens...),
			want: `ANALYSIS_ROOTS="srv/repos": "srv/repos" is not an absolute directory`},
		{name: "empty analysis root entry", environ: append([]string{db, "ANALYSIS_ROOTS=/srv/repos::/data"}, tokens...),
			want: `ANALYSIS_ROOTS="/srv/repos::/data": has an empty entry`},
		{name: "database password in query", environ: append([]string{"DATABASE_URL=postgres://tierq@db/x?sslmode=nope&password=hunter2"}, tokens...),
			want: `DATABASE_URL="postgres://tierq@db/x?password=xxxxx&sslmode=nope"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out := proctest.RunExit(t, 2, tt.environ...)
			require.Contains(t, out, tt.want)
			for _, secret := range []string{"short", producerToken, adminToken, "hunter2"} {
				require.NotContains(t, out, secret, "tokens are never printed")
			}
		})
	}
}

// TestServesUntilSIGTERM runs the real process on a free loopback port:
// it is ready without a scheduler, answers, inserts, stops cleanly on
// SIGTERM, and never logs a secret.
func TestServesUntilSIGTERM(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)

	// A database URL with a password, to check it never reaches the log.
	u, err := url.Parse(db.URL)
	require.NoError(t, err)
	u.User = url.UserPassword(u.User.Username(), "db-password-9876")
	cmd, out := proctest.Command(t, "DATABASE_URL="+u.String(), "DATABASE_SCHEMA="+db.Schema,
		"API_ADDR=127.0.0.1:0", "API_TOKEN="+producerToken, "API_ADMIN_TOKEN="+adminToken, "LOG_LEVEL=debug")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	proctest.WaitOutput(t, out, "api listening", 20*time.Second)
	addr := regexp.MustCompile(`addr=(127\.0\.0\.1:\d+)`).FindStringSubmatch(out.String())
	require.Len(t, addr, 2, out.String())
	base := "http://" + addr[1]

	resp, err := http.Get(base + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	// No scheduler runs: the API is ready all the same, and says so.
	resp, err = http.Get(base + "/readyz")
	require.NoError(t, err)
	var ready map[string]string
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&ready))
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, ready)
	require.Equal(t, map[string]string{
		"status": "ok", "database": "ok", "migrations": "ok",
		"leader": "absent: no River leader in the last minute: is a scheduler running?",
	}, ready)
	resp, err = http.Get(base + "/metrics")
	require.NoError(t, err)
	metrics, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Contains(t, string(metrics), "\ntierq_leader_present 0\n")

	// River UI, for the admin token as the Basic auth password, on the
	// process's schema (DATABASE_SCHEMA).
	_, err = db.Pool.Exec(context.Background(),
		`INSERT INTO river_queue (name, created_at, metadata, updated_at) VALUES ('analysis_priority', now(), '{}', now())`)
	require.NoError(t, err)
	for _, path := range []string{"/riverui/", "/riverui/api/queues"} {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, base+path, nil)
		require.NoError(t, err)
		resp, err = http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, path)
		require.Equal(t, `Basic realm="tierq River UI"`, resp.Header.Get("WWW-Authenticate"), path)

		req.SetBasicAuth("operator", adminToken)
		resp, err = http.DefaultClient.Do(req)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", path, body)
		if path == "/riverui/" {
			require.Contains(t, string(body), "<title>River</title>")
		} else {
			var queues struct {
				Data []struct {
					Name string `json:"name"`
				} `json:"data"`
			}
			require.NoError(t, json.Unmarshal(body, &queues))
			require.Len(t, queues.Data, 1, string(body))
			require.Equal(t, "analysis_priority", queues.Data[0].Name)
		}
	}

	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, base+"/v1/jobs",
		strings.NewReader(`{"kind":"analysis","user_id":"u_1","args":{"target":"/srv/a"}}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+producerToken)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	var job map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&job))
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	require.Equal(t, "analysis_default", job["queue"])

	// Refused tokens (a producer's on an operator route, a wrong one) are
	// not logged either.
	for token, want := range map[string]int{producerToken: http.StatusForbidden, "wrong-secret-token-000000": http.StatusUnauthorized} {
		req, err = http.NewRequestWithContext(context.Background(), http.MethodGet, base+"/v1/queues", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err = http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, want, resp.StatusCode)
	}

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait(), out.String())
	require.Contains(t, out.String(), "api stopped")
	basicAuth := base64.StdEncoding.EncodeToString([]byte("operator:" + adminToken))
	for _, secret := range []string{producerToken, adminToken, basicAuth, "db-password-9876", "wrong-secret-token"} {
		require.NotContains(t, out.String(), secret)
	}
}
