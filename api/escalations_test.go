package api_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/tiers"
)

// TestListEscalations makes two escalations through the API itself (an
// operator's PATCH, and a duplicate insert of a higher tier: actor dedup),
// pins their times to 10:00 and 11:00 UTC, and reads them back through GET
// /v1/escalations: whole, filtered, paged, and refused with a 400 JSON
// error for every bad parameter.
func TestListEscalations(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()

	patched := b.do(t, "POST", "/v1/jobs", producerToken, analysisBody("u_free", "/srv/a")).json(t)["id"]
	res := b.do(t, "PATCH", fmt.Sprintf("/v1/jobs/%v", patched), adminToken, map[string]any{"queue_class": "priority", "actor": "alice", "reason": "ticket 812"})
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	b.subscribe(t, "u_ent", tiers.Enterprise)
	upgraded := b.do(t, "POST", "/v1/jobs", producerToken, analysisBody("u_free", "/srv/shared")).json(t)["id"]
	res = b.do(t, "POST", "/v1/jobs", producerToken, analysisBody("u_ent", "/srv/shared"))
	require.Equal(t, true, res.json(t)["upgraded"], string(res.body))
	_, err := b.db.Pool.Exec(ctx, `UPDATE job_escalations SET escalated_at = '2026-11-27T09:00:00Z'::timestamptz + make_interval(hours => id::int)`)
	require.NoError(t, err)

	first := fmt.Sprintf(`{"id": 1, "job_id": %v, "from_queue": "analysis_default", "to_queue": "analysis_priority",
		"from_priority": 4, "to_priority": 1, "actor": "alice", "reason": "ticket 812", "escalated_at": "2026-11-27T10:00:00Z"}`, patched)
	second := fmt.Sprintf(`{"id": 2, "job_id": %v, "from_queue": "analysis_default", "to_queue": "analysis_priority",
		"from_priority": 4, "to_priority": 2, "actor": "dedup", "reason": "duplicate inserted for tier enterprise", "escalated_at": "2026-11-27T11:00:00Z"}`, upgraded)
	page := func(cursor string, rows ...string) string {
		next := "null"
		if cursor != "" {
			next = `"` + cursor + `"`
		}
		return `{"escalations": [` + strings.Join(rows, ", ") + `], "next_cursor": ` + next + `}`
	}
	tests := []struct {
		query string
		want  string
	}{
		{"", page("", second, first)},
		{"?actor=alice", page("", first)},
		{"?actor=dedup&queue=analysis_default", page("", second)},
		{"?queue=analysis_scheduled", page("")},
		{"?since=2026-11-27T11:00:00Z", page("", second)},
		{"?since=" + url.QueryEscape("2026-11-27T06:00:00-05:00"), page("", second)},
		{"?until=2026-11-27T11:00:00Z", page("", first)},
		{"?since=2026-11-27T10:00:00Z&until=2026-11-27T10:00:00.000001Z", page("", first)},
		{"?limit=1", page("2", second)},
		{"?limit=1&cursor=2", page("1", first)},
		{"?limit=1&cursor=1", page("")},
		{"?limit=2", page("1", second, first)},
	}
	for _, tt := range tests {
		res := b.do(t, "GET", "/v1/escalations"+tt.query, adminToken, nil)
		require.Equal(t, http.StatusOK, res.status, tt.query)
		require.JSONEq(t, tt.want, string(res.body), tt.query)
	}

	bad := []struct {
		query string
		want  string
	}{
		{"?since=yesterday", `since must be an RFC 3339 time such as 2026-11-27T10:00:00Z, not "yesterday"`},
		{"?until=2026-11-27", `until must be an RFC 3339 time such as 2026-11-27T10:00:00Z, not "2026-11-27"`},
		{"?since=2026-11-27T11:00:00Z&until=2026-11-27T10:00:00Z", "invalid escalation request: since must be before until"},
		{"?limit=0", `limit must be 1 to 1000, not "0"`},
		{"?limit=1001", `limit must be 1 to 1000, not "1001"`},
		{"?limit=ten", `limit must be 1 to 1000, not "ten"`},
		{"?cursor=-1", `cursor must be a next_cursor from a previous page, not "-1"`},
		{"?cursor=abc", `cursor must be a next_cursor from a previous page, not "abc"`},
		{"?actor=a%00", "query parameter actor: NUL (U+0000) at byte 1"},
		{"?queue=%FFq", "query parameter queue: invalid UTF-8 at byte 0"},
		{"?queue=" + strings.Repeat("q", 129), "invalid escalation request: queue is at most 128 bytes"},
		{"?actor=" + strings.Repeat("a", 201), "invalid escalation request: actor is at most 200 bytes"},
	}
	for _, tt := range bad {
		res := b.do(t, "GET", "/v1/escalations"+tt.query, adminToken, nil) // do checks the JSON error
		require.Equal(t, http.StatusBadRequest, res.status, tt.query)
		require.Equal(t, tt.want, res.json(t)["error"], tt.query)
	}

	// An operator endpoint: the admin token only.
	require.Equal(t, http.StatusUnauthorized, b.do(t, "GET", "/v1/escalations", "", nil).status)
	require.Equal(t, http.StatusForbidden, b.do(t, "GET", "/v1/escalations", producerToken, nil).status)
}

// FuzzEscalationQuery: GET /v1/escalations with any query string, on the
// fuzz targets' handler (see fuzz_http_test.go): never a 5xx, always JSON.
func FuzzEscalationQuery(f *testing.F) {
	f.Add("queue=analysis_default&actor=alice&since=2026-11-27T10:00:00Z&until=2026-11-27T11:00:00%2B01:00&limit=5")
	f.Add("cursor=3&limit=1")
	f.Add("actor=%00")
	f.Add("queue=%FF&actor=a%C3")
	f.Add("since=yesterday&until=0000-01-01T00:00:00Z&limit=0&cursor=-1")
	f.Add("since=9999-12-31T23:59:59Z&until=0001-01-01T00:00:00Z")
	fuzzQuery(f, "/v1/escalations")
}
