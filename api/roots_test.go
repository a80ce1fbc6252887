package api_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/api"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/service"
)

// TestParseCreateJobAnalysisRoots checks the lexical rule on clean paths: a
// target is a root or below it, a sibling that shares a root's prefix is
// not, "/" holds everything, and no roots means no restriction.
func TestParseCreateJobAnalysisRoots(t *testing.T) {
	t.Parallel()

	two := []string{"/srv/repos", "/data/checkouts"}
	tests := []struct {
		name    string
		roots   []string
		give    string
		wantErr string
	}{
		{name: "a root itself", roots: two, give: "/srv/repos"},
		{name: "below a root", roots: two, give: "/srv/repos/acme/api"},
		{name: "below the second root", roots: two, give: "/data/checkouts/b"},
		{name: "outside", roots: two, give: "/etc",
			wantErr: `args.target "/etc" is outside the analysis roots /srv/repos:/data/checkouts (ANALYSIS_ROOTS)`},
		{name: "a root's parent", roots: two, give: "/srv",
			wantErr: `args.target "/srv" is outside the analysis roots /srv/repos:/data/checkouts`},
		{name: "a sibling sharing a root's prefix", roots: two, give: "/srv/reposX",
			wantErr: `args.target "/srv/reposX" is outside the analysis roots`},
		{name: "below a sibling sharing a root's prefix", roots: two, give: "/srv/repos-old/a",
			wantErr: `args.target "/srv/repos-old/a" is outside the analysis roots`},
		{name: "dot-dot out of a root is refused before the roots", roots: two, give: "/srv/repos/../../etc",
			wantErr: "must be a clean absolute path"},
		{name: "root / holds everything", roots: []string{"/"}, give: "/etc"},
		{name: "root / holds itself", roots: []string{"/"}, give: "/"},
		{name: "no roots: anywhere", roots: nil, give: "/etc"},
		{name: "a root given with a trailing slash", roots: []string{"/srv/repos/"}, give: "/srv/repos/a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			body, err := json.Marshal(map[string]any{"kind": "analysis", "user_id": "u", "args": map[string]any{"target": tt.give}})
			require.NoError(t, err)
			_, job, err := api.ParseCreateJob(body, rootsRegistry(t, tt.roots))
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.give, job.Args.(jobs.AnalysisArgs).Target)
		})
	}
}

// TestCreateJobOutsideAnalysisRootsIs400 runs POST /v1/jobs against a real
// server configured with two roots: a target outside them is a 400 whose
// JSON error names the roots, and nothing is inserted for it.
func TestCreateJobOutsideAnalysisRootsIs400(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	registry := rootsRegistry(t, []string{"/srv/repos", "/data/checkouts"})
	server := api.New(api.Config{
		Token: producerToken, AdminToken: adminToken, Schema: db.Schema, MaxAttempts: 5,
		Registry: registry, Logger: logger,
	}, db.Pool, db.Producer(t), api.NewMetrics(db.Pool, registry, logger))
	ts := httptest.NewServer(server.Handler())
	t.Cleanup(ts.Close)
	b := &bundle{db: db, url: ts.URL}

	tests := []struct {
		name    string
		target  string
		status  int
		wantErr string
	}{
		{"inside", "/srv/repos/acme", http.StatusCreated, ""},
		{"a root itself", "/data/checkouts", http.StatusCreated, ""},
		{"outside", "/etc", http.StatusBadRequest,
			`args.target "/etc" is outside the analysis roots /srv/repos:/data/checkouts (ANALYSIS_ROOTS)`},
		{"sibling sharing the prefix", "/srv/reposX", http.StatusBadRequest,
			`args.target "/srv/reposX" is outside the analysis roots /srv/repos:/data/checkouts (ANALYSIS_ROOTS)`},
		{"dot-dot", "/srv/repos/../../etc", http.StatusBadRequest, "clean absolute path"},
	}
	for _, tt := range tests {
		res := b.do(t, "POST", "/v1/jobs", producerToken, analysisBody("u", tt.target))
		require.Equal(t, tt.status, res.status, "%s: %s", tt.name, res.body)
		if tt.wantErr != "" {
			require.Equal(t, "application/json", res.header.Get("Content-Type"), tt.name)
			require.Contains(t, res.json(t)["error"], tt.wantErr, tt.name)
		}
	}
	require.Equal(t, 2, b.db.Count(t, `SELECT count(*) FROM river_job`), "only the two targets inside the roots inserted")
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM river_job WHERE args->>'target' = '/srv/repos/acme'`))
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM river_job WHERE args->>'target' = '/data/checkouts'`))
}

// rootsRegistry is the reference app's registry with analysis roots (none:
// any directory), as cmd/api builds it from ANALYSIS_ROOTS.
func rootsRegistry(t testing.TB, roots []string) *service.Registry {
	t.Helper()
	registry, err := jobs.Registry(jobs.Deps{AnalysisRoots: roots})
	require.NoError(t, err)
	return registry
}
