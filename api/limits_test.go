package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/api"
	"github.com/tierq/tierq/jobs"
)

// TestParseCreateJobTargetLimits checks the analysis target at its bounds:
// a clean absolute path of at most 4096 bytes, without NUL.
func TestParseCreateJobTargetLimits(t *testing.T) {
	t.Parallel()

	long := "/" + strings.Repeat("a", 4095) // 4096 bytes
	tests := []struct {
		name    string
		give    string
		wantErr string
	}{
		{name: "at the length limit", give: long},
		{name: "over the length limit", give: long + "a", wantErr: "longer than 4096"},
		{name: "NUL", give: "/srv/a\x00b", wantErr: "NUL"},
		{name: "dot-dot", give: "/srv/../etc", wantErr: "clean absolute path"},
		{name: "dot-dot at the top", give: "/..", wantErr: "clean absolute path"},
		{name: "dot", give: "/srv/./a", wantErr: "clean absolute path"},
		{name: "double slash", give: "//srv/a", wantErr: "clean absolute path"},
		{name: "trailing slash", give: "/srv/a/", wantErr: "clean absolute path"},
		{name: "relative", give: "srv/a", wantErr: "clean absolute path"},
		{name: "empty", give: "", wantErr: "required"},
		// The root is a clean absolute path; the scan's MaxFiles bounds it.
		{name: "root", give: "/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			body, err := json.Marshal(map[string]any{"kind": "analysis", "user_id": "u", "args": map[string]any{"target": tt.give}})
			require.NoError(t, err)
			_, job, err := api.ParseCreateJob(body, rootsRegistry(t, nil))
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.give, job.Args.(jobs.AnalysisArgs).Target)
		})
	}
}

// TestOperatorInputsBounded checks the sizes the operator endpoints accept:
// every JSON body is at most 1 MiB (413), actors and reasons are bounded
// (400), ids are positive 64-bit integers, and an unknown queue name of any
// length is a 404 whose message quotes only its first bytes.
func TestOperatorInputsBounded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	created := b.do(t, "POST", "/v1/jobs", producerToken, analysisBody("u", "/srv/a")).json(t)
	job := fmt.Sprintf("/v1/jobs/%v", created["id"])

	huge := `{"actor":"` + strings.Repeat("a", api.MaxBodyBytes) + `"}`
	tests := []struct {
		name   string
		method string
		path   string
		body   any
		status int
	}{
		{"patch body over 1 MiB", "PATCH", job, huge, http.StatusRequestEntityTooLarge},
		{"replay body over 1 MiB", "POST", "/v1/dead-letters/1/replay", huge, http.StatusRequestEntityTooLarge},
		{"bulk replay body over 1 MiB", "POST", "/v1/dead-letters/replay", huge, http.StatusRequestEntityTooLarge},
		{"patch actor over 200 bytes", "PATCH", job, map[string]any{"queue_class": "priority", "actor": strings.Repeat("a", 201), "reason": "r"}, http.StatusBadRequest},
		{"patch reason over 2000 bytes", "PATCH", job, map[string]any{"queue_class": "priority", "actor": "a", "reason": strings.Repeat("r", 2001)}, http.StatusBadRequest},
		{"replay actor over 200 bytes", "POST", "/v1/dead-letters/1/replay", map[string]any{"actor": strings.Repeat("a", 201)}, http.StatusBadRequest},
		{"bulk replay actor over 200 bytes", "POST", "/v1/dead-letters/replay", map[string]any{"actor": strings.Repeat("a", 201), "all": true}, http.StatusBadRequest},
		{"bulk replay kind over 128 bytes", "POST", "/v1/dead-letters/replay", map[string]any{"actor": "a", "kind": strings.Repeat("k", 129)}, http.StatusBadRequest},
		{"bulk replay negative limit", "POST", "/v1/dead-letters/replay", map[string]any{"actor": "a", "all": true, "limit": -1}, http.StatusBadRequest},
		{"id over 64 bits", "GET", "/v1/jobs/99999999999999999999", nil, http.StatusBadRequest},
		{"negative id", "GET", "/v1/dead-letters/-1", nil, http.StatusBadRequest},
	}
	for _, tt := range tests {
		res := b.do(t, tt.method, tt.path, adminToken, tt.body)
		require.Equal(t, tt.status, res.status, "%s: %.300s", tt.name, res.body)
	}
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM river_job`), "nothing inserted")
	require.Zero(t, b.db.Count(t, `SELECT count(*) FROM job_escalations`), "nothing escalated")

	res := b.do(t, "GET", "/v1/queues/"+strings.Repeat("q", 10_000)+"/priority-stats", adminToken, nil)
	require.Equal(t, http.StatusNotFound, res.status)
	require.Less(t, len(res.body), 500, "the error quotes a bounded prefix of the name")
}
