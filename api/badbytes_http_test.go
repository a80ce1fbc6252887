package api_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
)

// TestBadBytesAreBadRequests sends NUL and bytes that are not UTF-8 in every
// kind of field, through the real server and database: each is a 400 whose
// JSON error names the field (never a 500 from PostgreSQL's "invalid byte
// sequence for encoding UTF8", never a value silently changed to U+FFFD),
// and nothing is inserted, escalated or replayed. Valid non-ASCII text still
// passes.
func TestBadBytesAreBadRequests(t *testing.T) {
	t.Parallel()
	b := setup(t)
	testdb.SeedDiscarded(t, b.db, 12)
	drainAll(t, b)
	created := b.do(t, "POST", "/v1/jobs", producerToken, analysisBody("u", "/srv/a")).json(t)
	job := fmt.Sprintf("/v1/jobs/%v", created["id"])
	var deadLetter int64
	require.NoError(t, b.db.Pool.QueryRow(t.Context(), `SELECT min(id) FROM dead_letter_jobs`).Scan(&deadLetter))
	replay := fmt.Sprintf("/v1/dead-letters/%d/replay", deadLetter)
	jobsBefore := b.db.Count(t, `SELECT count(*) FROM river_job`)

	tests := []struct {
		name   string
		method string
		path   string
		token  string
		body   string
		want   string
	}{
		{"patch actor NUL", "PATCH", job, adminToken, `{"queue_class":"priority","actor":"al\u0000ice","reason":"r"}`, "actor: NUL (U+0000) at byte 2"},
		{"patch reason NUL", "PATCH", job, adminToken, `{"queue_class":"priority","actor":"a","reason":"call\u0000"}`, "reason: NUL (U+0000) at byte 4"},
		{"patch actor not UTF-8", "PATCH", job, adminToken, "{\"queue_class\":\"priority\",\"actor\":\"a\xffb\",\"reason\":\"r\"}", "actor: invalid UTF-8 at byte 1"},
		{"patch reason not UTF-8", "PATCH", job, adminToken, "{\"queue_class\":\"priority\",\"actor\":\"a\",\"reason\":\"\xc3\"}", "reason: invalid UTF-8 at byte 0"},
		{"patch queue_class NUL", "PATCH", job, adminToken, `{"queue_class":"priority\u0000","actor":"a","reason":"r"}`, "queue_class: NUL (U+0000) at byte 8"},
		{"replay actor NUL", "POST", replay, adminToken, `{"actor":"\u0000"}`, "actor: NUL (U+0000) at byte 0"},
		{"replay actor not UTF-8", "POST", replay, adminToken, "{\"actor\":\"\xfe\"}", "actor: invalid UTF-8 at byte 0"},
		{"replay to_queue NUL", "POST", replay, adminToken, `{"actor":"a","to_queue":"analysis_priority\u0000"}`, "to_queue: NUL (U+0000) at byte 17"},
		{"bulk replay actor NUL", "POST", "/v1/dead-letters/replay", adminToken, `{"actor":"a\u0000","all":true}`, "actor: NUL (U+0000) at byte 1"},
		{"bulk replay queue NUL", "POST", "/v1/dead-letters/replay", adminToken, `{"actor":"a","queue":"analysis_default\u0000"}`, "queue: NUL (U+0000) at byte 16"},
		{"bulk replay kind NUL", "POST", "/v1/dead-letters/replay", adminToken, `{"actor":"a","kind":"\u0000analysis"}`, "kind: NUL (U+0000) at byte 0"},
		{"bulk replay queue not UTF-8", "POST", "/v1/dead-letters/replay", adminToken, "{\"actor\":\"a\",\"queue\":\"q\xff\"}", "queue: invalid UTF-8 at byte 1"},
		{"bulk replay kind not UTF-8", "POST", "/v1/dead-letters/replay", adminToken, "{\"actor\":\"a\",\"kind\":\"\xff\"}", "kind: invalid UTF-8 at byte 0"},
		{"list queue NUL", "GET", "/v1/dead-letters?queue=%00", adminToken, "", "query parameter queue: NUL (U+0000) at byte 0"},
		{"list kind NUL", "GET", "/v1/dead-letters?kind=analysis%00", adminToken, "", "query parameter kind: NUL (U+0000) at byte 8"},
		{"list queue not UTF-8", "GET", "/v1/dead-letters?queue=%FF", adminToken, "", "query parameter queue: invalid UTF-8 at byte 0"},
		{"list kind not UTF-8", "GET", "/v1/dead-letters?kind=a%C3", adminToken, "", "query parameter kind: invalid UTF-8 at byte 1"},
		{"query name not UTF-8", "GET", "/v1/queues?%FF=1", adminToken, "", `query parameter "\xff": invalid UTF-8 at byte 0`},
		{"path queue NUL", "GET", "/v1/queues/analysis%00/priority-stats", adminToken, "", "path parameter queue: NUL (U+0000) at byte 8"},
		{"path queue not UTF-8", "GET", "/v1/queues/%FF/priority-stats", adminToken, "", "path parameter queue: invalid UTF-8 at byte 0"},
		{"path id NUL", "GET", "/v1/dead-letters/1%00", adminToken, "", "path parameter id: NUL (U+0000) at byte 1"},
		{"enqueue args.target not UTF-8", "POST", "/v1/jobs", producerToken, "{\"kind\":\"analysis\",\"user_id\":\"u\",\"args\":{\"target\":\"/srv/\xff\"}}", "args.target: invalid UTF-8 at byte 5"},
		{"enqueue args.target NUL", "POST", "/v1/jobs", producerToken, `{"kind":"analysis","user_id":"u","args":{"target":"/srv/\u0000"}}`, "args.target: NUL (U+0000) at byte 5"},
		{"enqueue kind NUL", "POST", "/v1/jobs", producerToken, `{"kind":"analysis\u0000","user_id":"u","args":{"target":"/srv/a"}}`, "kind: NUL (U+0000) at byte 8"},
		// docs/api.md's input rules for POST /v1/jobs.
		{"user_id C1 control", "POST", "/v1/jobs", producerToken, `{"kind":"analysis","user_id":"u\u0085","args":{"target":"/srv/a"}}`, "user_id: invalid user id: control character U+0085 at byte 1"},
		{"user_id CSI", "POST", "/v1/jobs", producerToken, `{"kind":"analysis","user_id":"\u009b2J","args":{"target":"/srv/a"}}`, "user_id: invalid user id: control character U+009B at byte 0"},
		{"user_id not UTF-8", "POST", "/v1/jobs", producerToken, "{\"kind\":\"analysis\",\"user_id\":\"u\xff\",\"args\":{\"target\":\"/srv/a\"}}", "user_id: invalid user id: invalid UTF-8 at byte 1"},
		{"args key twice", "POST", "/v1/jobs", producerToken, `{"kind":"analysis","user_id":"u","args":{"target":"/srv/a","target":"/srv/b"}}`, "field args.target given twice"},
		{"args.tier empty", "POST", "/v1/jobs", producerToken, `{"kind":"analysis","user_id":"u","args":{"target":"/srv/a","tier":""}}`, "args may not set tier or user_id, not even empty (args.tier given): the server sets both"},
		{"args.user_id empty", "POST", "/v1/jobs", producerToken, `{"kind":"specview","user_id":"u","args":{"analysis_result_id":1,"user_id":""}}`, "args may not set tier or user_id, not even empty (args.user_id given): the server sets both"},
		{"args.tier set", "POST", "/v1/jobs", producerToken, `{"kind":"specview","user_id":"u","args":{"analysis_result_id":1,"tier":"enterprise"}}`, "args may not set tier or user_id, not even empty (args.tier given): the server sets both"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body any
			if tt.body != "" {
				body = tt.body
			}
			res := b.do(t, tt.method, tt.path, tt.token, body)
			require.Equal(t, http.StatusBadRequest, res.status, "%s", res.body)
			require.Equal(t, tt.want, res.json(t)["error"])
		})
	}
	require.Equal(t, jobsBefore, b.db.Count(t, `SELECT count(*) FROM river_job`), "nothing inserted or replayed")
	require.Zero(t, b.db.Count(t, `SELECT count(*) FROM job_escalations`), "nothing escalated")
	require.Zero(t, b.db.Count(t, `SELECT count(*) FROM dead_letter_jobs WHERE replayed_at IS NOT NULL`), "nothing replayed")

	// The 403 names the route once.
	res := b.do(t, "GET", "/v1/queues", producerToken, nil)
	require.Equal(t, http.StatusForbidden, res.status)
	require.Equal(t, "this token may not use GET /v1/queues", res.json(t)["error"])

	// Text that is UTF-8 without NUL passes, whatever its script.
	res = b.do(t, "PATCH", job, adminToken, `{"queue_class":"priority","actor":"zoë","reason":"客户 \u00e9 ☎"}`)
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	res = b.do(t, "GET", "/v1/dead-letters?queue=analysis_d%C3%A9faut", adminToken, nil)
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	res = b.do(t, "POST", replay, adminToken, `{"actor":"zoë"}`)
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
}
