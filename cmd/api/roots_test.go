package main

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/proctest"
	"github.com/tierq/tierq/internal/testdb"
)

// TestAnalysisRootsFromEnvironment runs the real process with
// ANALYSIS_ROOTS: it logs the roots, inserts a target inside them and
// refuses one outside with a 400 naming them.
func TestAnalysisRootsFromEnvironment(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)

	cmd, out := proctest.Command(t, "DATABASE_URL="+db.URL, "DATABASE_SCHEMA="+db.Schema,
		"API_ADDR=127.0.0.1:0", "API_TOKEN="+producerToken, "API_ADMIN_TOKEN="+adminToken,
		"ANALYSIS_ROOTS=/srv/repos/:/data/checkouts")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	proctest.WaitOutput(t, out, "api listening", 20*time.Second)
	require.Contains(t, out.String(), "analysis_roots=/srv/repos:/data/checkouts")
	addr := regexp.MustCompile(`addr=(127\.0\.0\.1:\d+)`).FindStringSubmatch(out.String())
	require.Len(t, addr, 2, out.String())

	post := func(target string) (int, map[string]any) {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, "http://"+addr[1]+"/v1/jobs",
			strings.NewReader(`{"kind":"analysis","user_id":"u_1","args":{"target":"`+target+`"}}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+producerToken)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var body map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		return resp.StatusCode, body
	}

	status, body := post("/srv/repos/acme")
	require.Equal(t, http.StatusCreated, status, body)
	status, body = post("/etc")
	require.Equal(t, http.StatusBadRequest, status, body)
	require.Equal(t, `invalid args: args.target "/etc" is outside the analysis roots /srv/repos:/data/checkouts (ANALYSIS_ROOTS)`, body["error"])
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM river_job`))
}
