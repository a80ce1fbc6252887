package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/api"
	"github.com/tierq/tierq/escalation"
	"github.com/tierq/tierq/internal/proctest"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/limits"
	"github.com/tierq/tierq/producer"
	"github.com/tierq/tierq/routing"
	"github.com/tierq/tierq/subscriptions"
	"github.com/tierq/tierq/tiers"
	"github.com/tierq/tierq/waitstats"
)

// consoleCSP is what every console answer must carry.
const consoleCSP = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

type consoleBundle struct {
	*bundle
	log    *proctest.Buffer // the server's JSON log
	client *http.Client     // follows no redirect
}

// setupConsole starts the API, with a stand-in River UI (so that job ids
// link to it), on a random loopback port against the test's schema.
func setupConsole(t *testing.T) *consoleBundle {
	t.Helper()
	db := testdb.New(t)
	log := &proctest.Buffer{}
	logger := slog.New(slog.NewJSONHandler(log, nil))
	registry := testdb.Registry(t)
	server := api.New(api.Config{
		Token: producerToken, AdminToken: adminToken, Schema: db.Schema, MaxAttempts: 5, Registry: registry, Logger: logger,
		RiverUI: http.NotFoundHandler(),
	}, db.Pool, db.Producer(t), api.NewMetrics(db.Pool, registry, slog.New(slog.NewTextHandler(io.Discard, nil))))
	ts := httptest.NewServer(server.Handler())
	t.Cleanup(ts.Close)
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &consoleBundle{bundle: &bundle{db: db, url: ts.URL}, log: log, client: client}
}

// consoleReq is one console request: Basic auth as user with password
// (none when both are empty), or a bearer token; headers; a form (POST).
type consoleReq struct {
	user, password, bearer string
	headers                map[string]string
	form                   url.Values
}

// asOperator is alice with the admin token, posting from the console's
// own page.
func (b *consoleBundle) asOperator() consoleReq {
	return consoleReq{user: "alice", password: adminToken, headers: map[string]string{"Origin": b.url, "Sec-Fetch-Site": "same-origin"}}
}

func (b *consoleBundle) send(t *testing.T, method, path string, req consoleReq) response {
	t.Helper()
	var body io.Reader
	if req.form != nil {
		body = strings.NewReader(req.form.Encode())
	}
	r, err := http.NewRequestWithContext(context.Background(), method, b.url+path, body)
	require.NoError(t, err)
	if req.user != "" || req.password != "" {
		r.SetBasicAuth(req.user, req.password)
	}
	if req.bearer != "" {
		r.Header.Set("Authorization", "Bearer "+req.bearer)
	}
	if req.form != nil {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range req.headers {
		r.Header.Set(k, v)
	}
	resp, err := b.client.Do(r)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, consoleCSP, resp.Header.Get("Content-Security-Policy"), "%s %s", method, path)
	require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"), "%s %s", method, path)
	require.Equal(t, "DENY", resp.Header.Get("X-Frame-Options"), "%s %s", method, path)
	return response{status: resp.StatusCode, header: resp.Header, body: data}
}

// get is a GET as the operator, which must answer 200 with HTML.
func (b *consoleBundle) get(t *testing.T, path string) string {
	t.Helper()
	res := b.send(t, "GET", path, b.asOperator())
	require.Equal(t, http.StatusOK, res.status, "GET %s: %s", path, res.body)
	require.Equal(t, "text/html; charset=utf-8", res.header.Get("Content-Type"))
	return string(res.body)
}

// post is a form POST as the operator.
func (b *consoleBundle) post(t *testing.T, path string, form url.Values) response {
	t.Helper()
	req := b.asOperator()
	req.form = form
	return b.send(t, "POST", path, req)
}

var (
	rowRE  = regexp.MustCompile(`(?s)<tr>(.*?)</tr>`)
	cellRE = regexp.MustCompile(`(?s)<t[dh][^>]*>(.*?)</t[dh]>`)
	tagRE  = regexp.MustCompile(`<[^>]*>`)
)

// rows are the text of each table row's cells (tags removed, entities
// decoded, spaces collapsed), header rows included.
func rows(page string) [][]string {
	var out [][]string
	for _, m := range rowRE.FindAllStringSubmatch(page, -1) {
		var cells []string
		for _, c := range cellRE.FindAllStringSubmatch(m[1], -1) {
			cells = append(cells, strings.Join(strings.Fields(html.UnescapeString(tagRE.ReplaceAllString(c[1], ""))), " "))
		}
		out = append(out, cells)
	}
	return out
}

// row is the row whose first cell is first.
func row(t *testing.T, page, first string) []string {
	t.Helper()
	for _, r := range rows(page) {
		if len(r) > 0 && r[0] == first {
			return r
		}
	}
	t.Fatalf("no row %q in:\n%s", first, page)
	return nil
}

// firstCells are the first cells of the page's rows, headers left out.
func firstCells(page string) []string {
	var out []string
	for _, r := range rows(page) {
		if len(r) > 0 && !strings.Contains(page, "<th>"+r[0]+"</th>") {
			out = append(out, r[0])
		}
	}
	return out
}

// seedBulk drains 12 discarded jobs into dead letters, 2 per service queue,
// and returns the ids of analysis_default's 2, newest first: what the bulk
// replay tests confirm.
func (b *consoleBundle) seedBulk(t *testing.T) []string {
	t.Helper()
	testdb.SeedDiscarded(t, b.db, 12)
	drainAll(t, b.bundle)
	ids := b.deadLetterIDs(t, "queue = 'analysis_default'")
	require.Len(t, ids, 2)
	return ids
}

// deadLetterIDs are the dead letters' ids, newest first.
func (b *consoleBundle) deadLetterIDs(t *testing.T, where string) []string {
	t.Helper()
	rows, err := b.db.Pool.Query(context.Background(), `SELECT id::text AS s FROM dead_letter_jobs WHERE `+where+` ORDER BY dead_letter_jobs.id DESC`)
	require.NoError(t, err)
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	return ids
}

func TestConsoleAuth(t *testing.T) {
	t.Parallel()
	b := setupConsole(t)
	for _, path := range []string{"/console/", "/console/dead-letters", "/console/dead-letters/1", "/console/escalations", "/console/queues/analysis_default", "/console/jobs/1", "/console/subscriptions", "/console/static/console.css", "/console/nope"} {
		res := b.send(t, "GET", path, consoleReq{})
		require.Equal(t, http.StatusUnauthorized, res.status, path)
		require.Equal(t, `Basic realm="tierq River UI"`, res.header.Get("WWW-Authenticate"), "River UI's realm: one login for both")
		require.Contains(t, string(res.body), "needs the admin token")

		res = b.send(t, "GET", path, consoleReq{user: "alice", password: "wrong-token-0123456789"})
		require.Equal(t, http.StatusUnauthorized, res.status, path)
		res = b.send(t, "GET", path, consoleReq{user: "alice", password: producerToken})
		require.Equal(t, http.StatusForbidden, res.status, path)
		res = b.send(t, "GET", path, consoleReq{bearer: producerToken})
		require.Equal(t, http.StatusForbidden, res.status, path)
	}
	res := b.send(t, "POST", "/console/dead-letters/1/purge", consoleReq{headers: map[string]string{"Origin": b.url}, form: url.Values{"confirm": {"1"}}})
	require.Equal(t, http.StatusUnauthorized, res.status)

	require.Contains(t, b.get(t, "/console/"), "Signed in as <span class=\"value\">alice</span>")
	res = b.send(t, "GET", "/console/", consoleReq{bearer: adminToken})
	require.Equal(t, http.StatusOK, res.status, "a bearer token reads")
	res = b.send(t, "GET", "/console/static/console.css", b.asOperator())
	require.Equal(t, http.StatusOK, res.status)
	require.Contains(t, res.header.Get("Content-Type"), "text/css")
	res = b.send(t, "GET", "/console/nope", b.asOperator())
	require.Equal(t, http.StatusNotFound, res.status)
	require.Contains(t, string(res.body), "No such console page")
	res = b.send(t, "GET", "/console/static/", b.asOperator())
	require.Equal(t, http.StatusNotFound, res.status, "no directory listing")
	require.Contains(t, string(res.body), "No such console page")
	// An action records its actor: a blank or over-long user name is
	// refused before anything is done.
	for _, user := range []string{"", "   ", strings.Repeat("a", 201)} {
		req := b.asOperator()
		req.user, req.form = user, url.Values{"confirm": {"1"}}
		res = b.send(t, "POST", "/console/dead-letters/1/purge", req)
		require.Equal(t, http.StatusForbidden, res.status, "user %q", user)
		require.Contains(t, string(res.body), "Console actions need a user name of 1 to 200 bytes at login")
	}
	res = b.send(t, "DELETE", "/console/dead-letters/1", b.asOperator())
	require.Equal(t, http.StatusMethodNotAllowed, res.status)
	res = b.send(t, "GET", "/console/dead-letters?queue=%00", b.asOperator())
	require.Equal(t, http.StatusBadRequest, res.status)
	require.Contains(t, html.UnescapeString(string(res.body)), "Field queue: NUL (U+0000) at byte 0.")
}

// TestConsoleCrossOrigin: a POST with Basic auth acts only when it comes
// from the console's own page; one carrying neither Sec-Fetch-Site nor
// Origin is refused too, and so is a bearer POST (no actor).
func TestConsoleCrossOrigin(t *testing.T) {
	t.Parallel()
	b := setupConsole(t)
	testdb.SeedDiscarded(t, b.db, 1)
	drainAll(t, b.bundle)
	id := b.deadLetterIDs(t, "true")[0]
	path := "/console/dead-letters/" + id + "/replay"
	form := url.Values{"reason": {"retry after fix"}}

	for name, headers := range map[string]map[string]string{
		"cross-site Sec-Fetch-Site":         {"Sec-Fetch-Site": "cross-site", "Origin": "http://evil.example"},
		"same-site Sec-Fetch-Site":          {"Sec-Fetch-Site": "same-site"},
		"another Origin":                    {"Origin": "http://evil.example"},
		"neither Sec-Fetch-Site nor Origin": {},
	} {
		res := b.send(t, "POST", path, consoleReq{user: "mallory", password: adminToken, headers: headers, form: form})
		require.Equal(t, http.StatusForbidden, res.status, name)
		require.Contains(t, string(res.body), "Cross-origin request refused", name)
	}
	res := b.send(t, "POST", path, consoleReq{bearer: adminToken, headers: map[string]string{"Sec-Fetch-Site": "same-origin"}, form: form})
	require.Equal(t, http.StatusForbidden, res.status)
	require.Contains(t, string(res.body), "need Basic auth")
	require.Equal(t, 0, b.db.Count(t, `SELECT count(*) FROM dead_letter_jobs WHERE replayed_at IS NOT NULL`), "nothing replayed")
	require.Equal(t, 0, b.db.Count(t, `SELECT count(*) FROM river_job`))

	// Same origin, by either header alone.
	res = b.send(t, "POST", path, consoleReq{user: "alice", password: adminToken, headers: map[string]string{"Origin": b.url}, form: form})
	require.Equal(t, http.StatusSeeOther, res.status, string(res.body))
	require.Equal(t, "/console/dead-letters/"+id, res.header.Get("Location"))
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM dead_letter_jobs WHERE replayed_by = 'alice'`))
	require.Contains(t, b.log.String(), `"msg":"console cross-origin request refused"`)
}

// TestConsoleDeadLetters: the list with each filter and its pages, a dead
// letter's page, replay, purge, and their effect in the database.
func TestConsoleDeadLetters(t *testing.T) {
	t.Parallel()
	b := setupConsole(t)
	ctx := context.Background()
	testdb.SeedDiscarded(t, b.db, 60) // 10 per service queue
	drainAll(t, b.bundle)
	all := b.deadLetterIDs(t, "true")
	require.Len(t, all, 60)

	// The first page: the 50 newest, and a link to the next.
	page := b.get(t, "/console/dead-letters")
	require.Equal(t, all[:50], firstCells(page))
	next := regexp.MustCompile(`<a href="([^"]+)">Next page</a>`).FindStringSubmatch(page)
	require.Len(t, next, 2)
	require.Equal(t, "/console/dead-letters?before="+all[49], html.UnescapeString(next[1]))
	page = b.get(t, html.UnescapeString(next[1]))
	require.Equal(t, all[50:], firstCells(page))
	require.NotContains(t, page, "Next page")

	// A row: seed.Discarded's i = 3 is specview_priority's first, job 3.
	id3 := b.deadLetterIDs(t, `job_id = (SELECT min(job_id) + 2 FROM dead_letter_jobs)`)[0]
	page = b.get(t, "/console/dead-letters?error=ATTEMPT+2+OF+JOB+3")
	r := row(t, page, id3)
	found := firstCells(page)
	require.Len(t, found, 11, "jobs 3 and 30 to 39")
	require.Equal(t, id3, found[10], "job 3 is the oldest")
	require.Equal(t, "specview", r[2])
	require.Equal(t, "specview_priority", r[3])
	require.Equal(t, "pro", r[4], "seed.Discarded's args name the tier")
	require.Equal(t, "attempt 2 of job 3", r[6])
	require.Equal(t, "2/2", r[7])
	require.Equal(t, "no", r[9])
	var job3 string
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT job_id::text FROM dead_letter_jobs WHERE id = $1`, id3).Scan(&job3))
	require.Equal(t, job3, r[1])
	require.Contains(t, page, `<td class="num"><a href="/console/jobs/`+job3+`">`+job3+`</a></td>`, "the job links to its story")

	// Filters.
	require.Equal(t, b.deadLetterIDs(t, "queue = 'analysis_default'"), firstCells(b.get(t, "/console/dead-letters?queue=analysis_default")))
	require.Len(t, firstCells(b.get(t, "/console/dead-letters?kind=analysis")), 30)
	require.Empty(t, firstCells(b.get(t, "/console/dead-letters?kind=analysis&queue=specview_default")))
	require.Contains(t, b.get(t, "/console/dead-letters?queue=nope"), "No dead letter matches.")
	res := b.send(t, "GET", "/console/dead-letters?state=maybe", b.asOperator())
	require.Equal(t, http.StatusBadRequest, res.status)
	require.Contains(t, string(res.body), "State must be empty (any), pending or replayed.")

	// The dead letter's page: every attempt's error, the args.
	page = b.get(t, "/console/dead-letters/"+id3)
	for _, want := range []string{"Attempt 1 at", "attempt 1 of job 3", "Attempt 2 at", "attempt 2 of job 3", `&#34;analysis_result_id&#34;: 3`, "specview_priority (priority"} {
		require.Contains(t, page, want)
	}
	require.Equal(t, http.StatusNotFound, b.send(t, "GET", "/console/dead-letters/999999", b.asOperator()).status)
	require.Equal(t, http.StatusBadRequest, b.send(t, "GET", "/console/dead-letters/x", b.asOperator()).status)

	// Replay needs a reason.
	res = b.post(t, "/console/dead-letters/"+id3+"/replay", url.Values{"reason": {"  "}})
	require.Equal(t, http.StatusBadRequest, res.status)
	require.Contains(t, string(res.body), "Give a reason for the replay.")
	// Replayed into the service's other queue, by alice, with her reason.
	res = b.post(t, "/console/dead-letters/"+id3+"/replay", url.Values{"reason": {"vendor fixed"}, "to_queue": {"specview_default"}})
	require.Equal(t, http.StatusSeeOther, res.status, string(res.body))
	var (
		by         string
		jobID      int64
		queue      string
		kind       string
		attempt    int
		metadataRe []byte
	)
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT replayed_by, replay_job_id FROM dead_letter_jobs WHERE id = $1`, id3).Scan(&by, &jobID))
	require.Equal(t, "alice", by)
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT queue, kind, attempt, metadata FROM river_job WHERE id = $1`, jobID).Scan(&queue, &kind, &attempt, &metadataRe))
	require.Equal(t, "specview_default", queue)
	require.Equal(t, "specview", kind)
	require.Equal(t, 0, attempt)
	require.Contains(t, string(metadataRe), `"actor": "alice"`)
	require.Contains(t, string(metadataRe), `"reason": "vendor fixed"`)
	page = b.get(t, "/console/dead-letters/"+id3)
	replayed := strconv.FormatInt(jobID, 10)
	require.Contains(t, page, `<dt>Job in River</dt><dd><a href="/console/jobs/`+job3+`">`+job3+`</a>: drained out of River`)
	require.Contains(t, page, `by <span class="value">alice</span> as job <a href="/console/jobs/`+replayed+`">`+replayed+`</a> (<a href="/riverui/jobs/`+replayed+`">River UI's page</a>)`)
	require.Contains(t, page, "Replay again")
	require.Contains(t, row(t, b.get(t, "/console/dead-letters?state=replayed"), id3)[9], `as job `+replayed+` River UI`)
	require.Equal(t, "yes", map[bool]string{true: "yes"}[strings.Contains(row(t, b.get(t, "/console/dead-letters?state=replayed"), id3)[9], "by alice")])
	require.Equal(t, []string{id3}, firstCells(b.get(t, "/console/dead-letters?state=replayed")))
	require.Len(t, firstCells(b.get(t, "/console/dead-letters?state=pending&kind=specview")), 29)

	// Once: a second replay without force is refused, 409.
	res = b.post(t, "/console/dead-letters/"+id3+"/replay", url.Values{"reason": {"again"}})
	require.Equal(t, http.StatusConflict, res.status)
	require.Contains(t, string(res.body), "Not replayed: dead letter already replayed")
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM river_job`))
	// To another service's queue: refused, 400.
	res = b.post(t, "/console/dead-letters/"+all[0]+"/replay", url.Values{"reason": {"x"}, "to_queue": {"scheduler"}})
	require.Equal(t, http.StatusBadRequest, res.status)
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM river_job`))

	// Purge: only confirmed.
	res = b.post(t, "/console/dead-letters/"+all[0]+"/purge", url.Values{})
	require.Equal(t, http.StatusBadRequest, res.status)
	require.Equal(t, 60, b.db.Count(t, `SELECT count(*) FROM dead_letter_jobs`))
	res = b.post(t, "/console/dead-letters/"+all[0]+"/purge", url.Values{"confirm": {"1"}})
	require.Equal(t, http.StatusSeeOther, res.status)
	require.Equal(t, "/console/dead-letters?purged="+all[0], res.header.Get("Location"))
	require.Equal(t, 0, b.db.Count(t, `SELECT count(*) FROM dead_letter_jobs WHERE id = $1`, all[0]))
	require.Equal(t, 59, b.db.Count(t, `SELECT count(*) FROM dead_letter_jobs`))
	require.Contains(t, b.get(t, "/console/dead-letters?purged="+all[0]), "Dead letter "+all[0]+" purged.")
	require.NotContains(t, b.get(t, "/console/dead-letters?purged=everything"), "purged.", "only an id is echoed")
	res = b.post(t, "/console/dead-letters/"+all[0]+"/purge", url.Values{"confirm": {"1"}})
	require.Equal(t, http.StatusNotFound, res.status)
	log := b.log.String()
	require.Contains(t, log, `"msg":"console action","action":"purge","actor":"alice","dead_letter_id":`+all[0])
	require.Contains(t, log, `"msg":"console action","action":"replay","actor":"alice","dead_letter_id":`+id3+`,"to_queue":"specview_default","force":false`)
}

// TestConsoleBulkReplay: the confirmation shows the filter's pending dead
// letters and carries their ids; the replay acts on exactly those, not on
// one drained after the confirmation.
func TestConsoleBulkReplay(t *testing.T) {
	t.Parallel()
	b := setupConsole(t)
	confirmed := b.seedBulk(t)

	page := b.get(t, "/console/dead-letters?queue=analysis_default")
	require.Contains(t, page, `<a href="/console/dead-letters/replay?queue=analysis_default">Replay the pending dead letters of this filter…</a>`)
	page = b.get(t, "/console/dead-letters/replay?queue=analysis_default")
	require.Contains(t, page, "This replays exactly the <strong>2</strong> dead letters listed below")
	require.Contains(t, page, "Replayable now, over the whole filter: 2")
	ids := regexp.MustCompile(`<input type="hidden" name="id" value="(\d+)">`).FindAllStringSubmatch(page, -1)
	var carried []string
	for _, m := range ids {
		carried = append(carried, m[1])
	}
	require.Equal(t, confirmed, carried)

	// Another dead letter of the filter arrives before the operator
	// confirms: seed.Discarded's i = 7 is analysis_default's again.
	testdb.SeedDiscarded(t, b.db, 7)
	drainAll(t, b.bundle)
	require.Len(t, b.deadLetterIDs(t, "queue = 'analysis_default'"), 4)

	res := b.post(t, "/console/dead-letters/replay", url.Values{"id": carried, "reason": {"upstream back"}, "queue": {"analysis_default"}})
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	require.Contains(t, string(res.body), "Replayed 2 of the 2 dead letters confirmed.")
	require.Equal(t, confirmed, b.deadLetterIDs(t, "replayed_by = 'alice'"))
	require.Equal(t, 2, b.db.Count(t, `SELECT count(*) FROM river_job WHERE queue = 'analysis_default' AND kind = 'analysis'`))
	require.Equal(t, 2, b.db.Count(t, `SELECT count(*) FROM dead_letter_jobs WHERE queue = 'analysis_default' AND replayed_at IS NULL`))

	// The same form again: each is replayed once.
	res = b.post(t, "/console/dead-letters/replay", url.Values{"id": carried, "reason": {"upstream back"}})
	require.Equal(t, http.StatusOK, res.status)
	require.Contains(t, string(res.body), "Replayed 0 of the 2 dead letters confirmed.")
	r := row(t, string(res.body), carried[0])
	require.True(t, strings.HasPrefix(r[1], "dead letter already replayed: id "+carried[0]+" was replayed as job "), r[1])
	require.Equal(t, 2, b.db.Count(t, `SELECT count(*) FROM river_job`))

	for name, form := range map[string]url.Values{
		"no id":     {"reason": {"r"}},
		"no reason": {"id": carried},
		"bad id":    {"id": {"x"}, "reason": {"r"}},
		"1001 ids": {"id": func() []string {
			s := make([]string, 1001)
			for i := range s {
				s[i] = strconv.Itoa(i + 1)
			}
			return s
		}(), "reason": {"r"}},
	} {
		require.Equal(t, http.StatusBadRequest, b.post(t, "/console/dead-letters/replay", form).status, name)
	}
	require.Equal(t, 2, b.db.Count(t, `SELECT count(*) FROM river_job`))
	require.Contains(t, b.log.String(), `"msg":"console action","action":"bulk replay","actor":"alice","asked":2,"replayed":2`)

	// The two that arrived later, into the service's priority queue.
	later := b.deadLetterIDs(t, "queue = 'analysis_default' AND replayed_at IS NULL")
	require.Len(t, later, 2)
	res = b.post(t, "/console/dead-letters/replay", url.Values{"id": later, "reason": {"paid customer"}, "to_queue": {"analysis_priority"}})
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	require.Contains(t, string(res.body), "Replayed 2 of the 2 dead letters confirmed.")
	require.Equal(t, 2, b.db.Count(t, `SELECT count(*) FROM river_job WHERE queue = 'analysis_priority' AND kind = 'analysis'
		AND id IN (SELECT replay_job_id FROM dead_letter_jobs WHERE id = ANY($1::bigint[]))`, later))
	require.Equal(t, 4, b.db.Count(t, `SELECT count(*) FROM river_job`))
}

// TestConsoleEscalations: the audit, newest first, with its filters.
func TestConsoleEscalations(t *testing.T) {
	t.Parallel()
	b := setupConsole(t)
	ctx := context.Background()
	queues := testdb.Registry(t).Queues()
	var jobIDs []int64
	for i, actor := range []string{"alice", "bob", "alice"} {
		id := testdb.InsertWaitingJob(t, b.db, testdb.WaitingJob{Queue: []string{"analysis_default", "specview_default", "analysis_default"}[i]})
		_, err := escalation.Escalate(ctx, b.db.Pool, queues, escalation.Request{JobID: id, To: routing.Priority, Actor: actor, Reason: "call #" + strconv.Itoa(i)})
		require.NoError(t, err)
		jobIDs = append(jobIDs, id)
	}
	page := b.get(t, "/console/escalations")
	all := rows(page)[1:]
	require.Len(t, all, 3)
	require.Equal(t, []string{strconv.FormatInt(jobIDs[2], 10) + " River UI", "analysis_default (priority 4)", "analysis_priority (priority 1)", "alice", "call #2"}, all[0][1:])
	require.Equal(t, "bob", all[1][4])
	// Each job links to its story here and to River UI's page.
	require.Contains(t, page, `<a href="/console/jobs/`+strconv.FormatInt(jobIDs[0], 10)+`">`+strconv.FormatInt(jobIDs[0], 10)+`</a>`)
	require.Contains(t, page, `<a href="/riverui/jobs/`+strconv.FormatInt(jobIDs[0], 10)+`" class="note">River UI</a>`)

	require.Len(t, rows(b.get(t, "/console/escalations?actor=alice"))[1:], 2)
	require.Len(t, rows(b.get(t, "/console/escalations?queue=specview_priority"))[1:], 1)
	require.Contains(t, b.get(t, "/console/escalations?since=2999-01-01T00:00"), "No escalation matches.")
	require.Len(t, rows(b.get(t, "/console/escalations?since=2000-01-01&until=2999-01-01T00:00:00Z"))[1:], 3)
	res := b.send(t, "GET", "/console/escalations?since=yesterday", b.asOperator())
	require.Equal(t, http.StatusBadRequest, res.status)
	require.Contains(t, string(res.body), "Since must be a time")
	res = b.send(t, "GET", "/console/escalations?since=2026-01-02&until=2026-01-01", b.asOperator())
	require.Equal(t, http.StatusBadRequest, res.status)
	require.Contains(t, string(res.body), "since must be before until")
}

// TestConsoleOverview: per queue, jobs by state with held apart, the
// oldest wait, River's pause and the dead letters pending; the leader.
func TestConsoleOverview(t *testing.T) {
	t.Parallel()
	b := setupConsole(t)
	ctx := context.Background()
	seedStarvingHeldTenant(t, b.bundle)
	testdb.SeedDiscarded(t, b.db, 7) // 2 for analysis_default, 1 per other service queue
	drainAll(t, b.bundle)
	_, err := b.db.Pool.Exec(ctx, `INSERT INTO river_queue (name, created_at, metadata, paused_at, updated_at)
		VALUES ('specview_default', now(), '{}', '2026-03-01 10:00:00Z', now())`)
	require.NoError(t, err)

	page := b.get(t, "/console/")
	require.Contains(t, page, "River leader: <strong>none in the last minute</strong>")
	require.Contains(t, page, `Dead letters pending: <a href="/console/dead-letters?state=pending">7</a>`)
	def := row(t, page, "analysis_default")
	require.Equal(t, []string{"analysis_default", "2", "3", "0", "0", "0", "0", "none", "–"}, def[:9], "available 2, held 3; no worker process, no lending (not a priority queue)")
	require.Contains(t, []string{"1m30s", "1m31s"}, def[9], "the starving tenant's wait")
	require.Equal(t, []string{"no", "2"}, def[10:])
	require.Contains(t, page, `<a href="/console/dead-letters?queue=analysis_default&amp;state=pending">2</a>`)
	require.Equal(t, []string{"analysis_priority", "1", "0", "0", "0", "0", "0", "none", "0", "0s", "no", "1"}, row(t, page, "analysis_priority"))
	require.Equal(t, []string{"specview_default", "0", "0", "0", "0", "0", "0", "none", "–", "0s", "paused since 2026-03-01 10:00:00Z", "1"}, row(t, page, "specview_default"))
	require.Equal(t, []string{"scheduler", "0", "0", "0", "0", "0", "0", "–", "–", "0s", "no", "0"}, row(t, page, "scheduler"), "no heartbeats: not a service's queue")
	require.Contains(t, page, "No waits recorded in the last 60 minutes")

	_, err = b.db.Pool.Exec(ctx, `INSERT INTO river_leader (elected_at, expires_at, leader_id) VALUES (now(), now() + interval '15 seconds', 'scheduler-7')`)
	require.NoError(t, err)
	// The figures are the metrics' snapshot, read at most every
	// MetricsCacheFor (5 s): the new leader shows once it is read again.
	testdb.WaitFor(t, 3*api.MetricsCacheFor, "the overview to show the new leader", func() bool {
		return strings.Contains(b.get(t, "/console/"), `River leader: <span class="value">scheduler-7</span>.`)
	})
	require.Regexp(t, `Read at \d\d:\d\d:\d\d UTC`, b.get(t, "/console/"))
}

// TestConsoleReplayKeepsUniqueness: a dead letter of a unique job whose
// key a live job holds is not replayed from its page, forced or not: the
// page names the live job; once that job is gone, the replay goes ahead.
func TestConsoleReplayKeepsUniqueness(t *testing.T) {
	t.Parallel()
	b := setupConsole(t)
	ctx := context.Background()
	client := b.db.Producer(t)
	insert := func() int64 {
		res, err := client.Insert(ctx, jobs.AnalysisArgs{Target: "/srv/unique"}, &river.InsertOpts{Queue: "analysis_default", UniqueOpts: producer.UniqueOpts()})
		require.NoError(t, err)
		require.False(t, res.UniqueSkippedAsDuplicate)
		return res.Job.ID
	}
	dead := insert()
	_, err := b.db.Pool.Exec(ctx, `UPDATE river_job SET state = 'discarded', finalized_at = now() WHERE id = $1`, dead)
	require.NoError(t, err)
	drainAll(t, b.bundle)
	id := b.deadLetterIDs(t, "true")[0]
	live := strconv.FormatInt(insert(), 10)

	for _, force := range []string{"", "1"} {
		res := b.post(t, "/console/dead-letters/"+id+"/replay", url.Values{"reason": {"retry it"}, "force": {force}})
		require.Equal(t, http.StatusConflict, res.status, "force=%q", force)
		require.Contains(t, string(res.body), "Not replayed: dead letter duplicates a live job", "force=%q", force)
		require.Contains(t, string(res.body), `The live job holding its unique key: <a href="/riverui/jobs/`+live+`">`+live+`</a>.`)
	}
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM river_job`))
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM dead_letter_jobs WHERE replayed_at IS NULL`))

	_, err = b.db.Pool.Exec(ctx, `UPDATE river_job SET state = 'completed', finalized_at = now() WHERE id = $1`, live)
	require.NoError(t, err)
	res := b.post(t, "/console/dead-letters/"+id+"/replay", url.Values{"reason": {"retry it"}})
	require.Equal(t, http.StatusSeeOther, res.status, string(res.body))
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM river_job WHERE state = 'available' AND args->>'target' = '/srv/unique'`))
	require.Equal(t, 0, b.db.Count(t, `SELECT count(*) FROM dead_letter_jobs WHERE replayed_at IS NULL`))
}

// TestConsoleOverviewSnapshot: the overview shows the last metrics read at
// once while it is younger than its limit, and the load that finds it stale
// starts the next read in the background; past the limit a load waits for
// a new read.
func TestConsoleOverviewSnapshot(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	s := api.NewSnapshots(db.Pool, testdb.Registry(t), time.Nanosecond) // every read is stale at once
	leader, first, err := s.RecentLeader(time.Hour)
	require.NoError(t, err)
	require.Equal(t, "", leader, "no leader yet: the first load waits for the first read")

	_, err = db.Pool.Exec(ctx, `INSERT INTO river_leader (elected_at, expires_at, leader_id) VALUES (now(), now() + interval '15 seconds', 'scheduler-9')`)
	require.NoError(t, err)
	leader, at, err := s.RecentLeader(time.Hour)
	require.NoError(t, err)
	require.Equal(t, "", leader, "the last read, at once")
	require.True(t, at.Equal(first))
	testdb.WaitFor(t, 10*time.Second, "a read in the background to show the new leader", func() bool {
		leader, _, err := s.RecentLeader(time.Hour)
		require.NoError(t, err)
		return leader == "scheduler-9"
	})

	_, err = db.Pool.Exec(ctx, `UPDATE river_leader SET leader_id = 'scheduler-10'`)
	require.NoError(t, err)
	leader, _, err = s.RecentLeader(0)
	require.NoError(t, err)
	require.Equal(t, "scheduler-10", leader, "a read older than the limit is not shown: the load reads anew")
}

// TestConsoleOverviewWaits: the waits the workers recorded
// (job_wait_stats) per queue and tier over the last 5 and 60 minutes, with
// a chart of each minute's p99; the workers of the live heartbeats; the
// jobs lent to a priority queue now.
func TestConsoleOverviewWaits(t *testing.T) {
	t.Parallel()
	b := setupConsole(t)
	ctx := context.Background()
	// Heartbeats: two live processes serve analysis_priority, one
	// analysis_default (another's expired).
	_, err := b.db.Pool.Exec(ctx, `INSERT INTO fair_share_slots (client_id, queue, slots, expires_at) VALUES
		('w1', 'analysis_priority', 4, now() + interval '15 seconds'), ('w2', 'analysis_priority', 2, now() + interval '15 seconds'),
		('w1', 'analysis_default', 3, now() + interval '15 seconds'), ('w3', 'analysis_default', 5, now() - interval '1 second')`)
	require.NoError(t, err)
	// Lent to analysis_priority: two waiting, one running; and a paid job.
	lent := `{"tierq:tier": "free", "tierq:lent_from": "analysis_default", "tierq:lent_priority": 4}`
	for _, state := range []string{"available", "available", "running"} {
		testdb.InsertRaw(t, b.db, testdb.RawJob{Kind: jobs.KindAnalysis, Queue: "analysis_priority", State: state, Metadata: lent})
	}
	testdb.InsertRaw(t, b.db, testdb.RawJob{Kind: jobs.KindAnalysis, Queue: "analysis_priority", Metadata: `{"tierq:tier": "pro"}`})
	// Recorded waits, minutes before this one: bucket (0-based) → count.
	for _, w := range []struct {
		ago         int
		queue, tier string
		bucket, n   int
	}{
		{1, "analysis_default", "pro", 40, 100},      // (8s, 10s]
		{10, "analysis_default", "pro", 30, 100},     // (800ms, 1s]
		{2, "analysis_priority", "enterprise", 0, 4}, // up to 1ms
		{30, "analysis_default", "free", 60, 3},      // (800s, 1000s]
		{61, "analysis_default", "free", 81, 50},     // over an hour ago: not read
	} {
		var counts waitstats.Histogram
		counts[w.bucket] = int64(w.n)
		_, err := b.db.Pool.Exec(ctx, `INSERT INTO job_wait_stats (minute, queue, tier, counts)
			VALUES (date_trunc('minute', now()) - make_interval(mins => $1), $2, $3, $4)`,
			w.ago, w.queue, w.tier, counts[:])
		require.NoError(t, err)
	}

	page := b.get(t, "/console/")
	require.Equal(t, []string{"analysis_priority", "3", "0", "0", "0", "0", "1", "6 in 2", "1 running, 2 waiting", "0s", "no", "0"}, row(t, page, "analysis_priority"))
	require.Equal(t, []string{"3 in 1", "–"}, row(t, page, "analysis_default")[7:9])
	require.Equal(t, [][]string{
		{"analysis_priority", "enterprise", "4", "0.5ms", "0.99ms", "4", "0.5ms", "0.99ms", "p99 per minute over the last 60 minutes, highest 0.99ms top 0.99ms"},
		{"analysis_default", "pro", "100", "9s", "9.98s", "200", "1s", "9.96s", "p99 per minute over the last 60 minutes, highest 9.98s top 9.98s"},
		{"analysis_default", "free", "0", "–", "–", "3", "15m0s", "16m38s", "p99 per minute over the last 60 minutes, highest 16m38s top 16m38s"},
	}, tableRows(t, page, "Waits from the due time"), "the last cell: the chart's title and the top of its scale")
	// The charts: one stroke per minute that started jobs, scaled to the
	// row's highest minute (its y at 1.0, the top; 0 at 23.0).
	charts := regexp.MustCompile(`(?s)<svg class="chart".*?</svg>`).FindAllString(page, -1)
	require.Len(t, charts, 3)
	require.Contains(t, charts[1], `aria-label="p99 per minute, highest 9.98s"`)
	lines := regexp.MustCompile(`points="\d+,([\d.]+) \d+,([\d.]+)"`).FindAllStringSubmatch(charts[1], -1)
	require.Len(t, lines, 2, charts[1])
	require.Equal(t, []string{"20.8", "20.8"}, lines[0][1:], "10 minutes ago: 998ms")
	require.Equal(t, []string{"1.0", "1.0"}, lines[1][1:], "a minute ago: 9.98s, the top")
}

// hostile is a value a producer, a worker or an operator could write:
// markup, an ANSI escape sequence (clear screen, OSC title), a
// right-to-left override, and 10 KB.
var hostile = `<script>alert(1)</script>` + "\x1b[2J\x1b]0;owned\x07" + "abc\u202edcba" + strings.Repeat("A", 10<<10)

// requireInert checks that page shows hostile as inert text: no markup,
// no control or bidi character, and their visible escapes instead.
func requireInert(t *testing.T, page, what string) {
	t.Helper()
	require.NotContains(t, page, "<script>", what)
	require.NotContains(t, page, "\x1b", what)
	require.NotContains(t, page, "\x07", what)
	require.NotContains(t, page, "\u202e", what)
	require.Contains(t, page, `&lt;script&gt;alert(1)&lt;/script&gt;\x1b[2J\x1b]0;owned\a`+`abc\u202edcba`, what)
}

// TestConsoleHostileValues: hostile args, errors, tenants, actors and
// reasons render as inert, escaped text on every page.
func TestConsoleHostileValues(t *testing.T) {
	t.Parallel()
	b := setupConsole(t)
	ctx := context.Background()
	insert := func(jobID int64, kind, tenant string) int64 {
		t.Helper()
		var id int64
		err := b.db.Pool.QueryRow(ctx, `
		INSERT INTO dead_letter_jobs (job_id, kind, queue, priority, args, metadata, errors, attempt, max_attempts, created_at, finalized_at)
		VALUES ($1, $2, 'analysis_default', 4, jsonb_build_object('target', $3::text), jsonb_build_object('tierq:tenant', $4::text),
		        jsonb_build_array(jsonb_build_object('at', now(), 'attempt', 1, 'error', $3::text, 'trace', $3::text)), 1, 1, now(), now())
		RETURNING id`, jobID, kind, hostile, tenant).Scan(&id)
		require.NoError(t, err)
		return id
	}
	requireInert(t, b.get(t, "/console/dead-letters/"+strconv.FormatInt(insert(1, hostile, hostile), 10)), "hostile kind and tenant")
	// A dead letter River takes back (its tenant check refuses control
	// characters and more than 200 bytes), with hostile args and errors.
	id := insert(2, jobs.KindAnalysis, "<b>tenant</b>")
	path := "/console/dead-letters/" + strconv.FormatInt(id, 10)

	list := b.get(t, "/console/dead-letters")
	require.NotContains(t, list, "<script>")
	require.NotContains(t, list, "\x1b")
	require.NotContains(t, list, strings.Repeat("A", 200), "the list cuts long values")
	require.Contains(t, list, `&lt;script&gt;alert(1)&lt;/script&gt;\x1b[2J`)
	page := b.get(t, path)
	requireInert(t, page, "dead letter page")
	require.Contains(t, page, strings.Repeat("A", 10<<10), "the page shows all of it")
	require.Contains(t, b.get(t, "/console/dead-letters?error="+url.QueryEscape("\u202edcba")), `abc\u202edcba`, "error text search")
	requireInert(t, b.get(t, "/console/dead-letters/replay"), "bulk confirmation")

	// The actor is what the operator typed as the user name, hostile too;
	// so is the reason.
	actor := "<script>x</script>\x1b[31m\u202eeve"
	req := b.asOperator()
	req.user = actor
	req.form = url.Values{"reason": {hostile[:200]}}
	res := b.send(t, "POST", path+"/replay", req)
	require.Equal(t, http.StatusSeeOther, res.status, string(res.body))
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM dead_letter_jobs WHERE replayed_by = $1`, actor))
	for _, p := range []string{path, "/console/dead-letters"} {
		req.form = nil
		page := string(b.send(t, "GET", p, req).body)
		require.Contains(t, page, `&lt;script&gt;x&lt;/script&gt;\x1b[31m\u202eeve`, p)
		require.NotContains(t, page, "\u202e", p)
		require.NotContains(t, page, "<script>", p)
	}

	// Escalations: hostile actor and reason.
	// (Escalate takes 2,000 bytes of reason at most; the audit's column
	// takes anything.)
	_, err := b.db.Pool.Exec(ctx, `INSERT INTO job_escalations (job_id, from_queue, to_queue, from_priority, to_priority, actor, reason)
		VALUES (1, 'analysis_default', 'analysis_priority', 4, 1, $1, $2)`, "op\u202e<b>", hostile)
	require.NoError(t, err)
	page = b.get(t, "/console/escalations")
	requireInert(t, page, "escalations")
	require.Contains(t, page, `op\u202e&lt;b&gt;`)
	require.Contains(t, page, strings.Repeat("A", 10<<10), "the whole reason, in its details")

	// The tenant of a held job and the overview's queue names come from
	// River's tables; the overview shows no tenant yet.
	requireInert(t, b.get(t, "/console/dead-letters/"+strconv.FormatInt(id, 10)), "tenant")

	// River's jobs with a hostile tenant (10 KB: written without tierq's
	// producers, keyed by its first 200 characters and its md5), kind and
	// args, held and available: the queue page, the tenant's page found by
	// its link, and the job's story.
	args, err := json.Marshal(map[string]string{"target": hostile})
	require.NoError(t, err)
	jobID := b.insertJob(t, "analysis_default", "held", hostile, string(args))
	b.insertJob(t, "analysis_default", "available", hostile, `{}`)
	_, err = b.db.Pool.Exec(ctx, `UPDATE river_job SET kind = $1 WHERE id = $2`, hostile[:120], jobID) // River: at most 128
	require.NoError(t, err)
	page = b.get(t, "/console/queues/analysis_default")
	requireInert(t, page, "queue page")
	require.NotContains(t, page, strings.Repeat("A", 300), "the key is cut to 200 characters and the table to 60")
	link := regexp.MustCompile(`<a href="(/console/queues/analysis_default\?tenant=[^"]+)">`).FindStringSubmatch(page)
	require.Len(t, link, 2)
	page = b.get(t, html.UnescapeString(link[1]))
	requireInert(t, page, "tenant page")
	require.Contains(t, plain(page), "Here0 running, 1 available, 1 held; weight 1")
	require.Contains(t, plain(page), "no user id: no subscription, no limits")
	require.Len(t, tableRows(t, page, "Its newest 2 jobs here"), 2)
	page = b.get(t, "/console/jobs/"+strconv.FormatInt(jobID, 10))
	requireInert(t, page, "job story")
	require.Contains(t, page, strings.Repeat("A", 10<<10), "the story shows the whole tenant and args")
	require.NotContains(t, page, "/console/queues/analysis_default?tenant=", "a long tenant is no key: no link")

	// An escalation by a hostile actor with a hostile reason, in the
	// job's moves.
	req = b.asOperator()
	req.user = actor
	req.form = url.Values{"queue_class": {"priority"}, "reason": {hostile[:200]}}
	res = b.send(t, "POST", "/console/jobs/"+strconv.FormatInt(jobID, 10)+"/escalate", req)
	require.Equal(t, http.StatusSeeOther, res.status, string(res.body))
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM job_escalations WHERE actor = $1`, actor))
	page = b.get(t, "/console/jobs/"+strconv.FormatInt(jobID, 10))
	require.Contains(t, page, `&lt;script&gt;x&lt;/script&gt;\x1b[31m\u202eeve`)
	require.NotContains(t, page, "\u202e")
	require.NotContains(t, page, "<script>")

	// A user id may hold markup and a right-to-left override (no control
	// character): the lookup and the list show them inert.
	user := "<script>u</script>\u202erlo"
	res = b.post(t, "/console/subscriptions", url.Values{"user": {user}, "tier": {"pro"}})
	require.Equal(t, http.StatusSeeOther, res.status, string(res.body))
	// (A form's field keeps the user id's own bytes, escaped for HTML: the
	// form sets that user's tier, and a browser shows a field's value as
	// text.)
	inputs := regexp.MustCompile(`<input [^>]*>`)
	for _, p := range []string{"/console/subscriptions", "/console/subscriptions?user=" + url.QueryEscape(user)} {
		page := inputs.ReplaceAllString(b.get(t, p), "")
		require.Contains(t, page, `&lt;script&gt;u&lt;/script&gt;\u202erlo`, p)
		require.NotContains(t, page, "\u202e", p)
		require.NotContains(t, page, "<script>", p)
	}
	res = b.send(t, "GET", "/console/subscriptions?user="+url.QueryEscape(hostile), b.asOperator())
	require.Equal(t, http.StatusBadRequest, res.status)
	require.Contains(t, string(res.body), "invalid user id: "+strconv.Itoa(len(hostile))+" bytes, longer than 200.")
	require.NotContains(t, string(res.body), "<script>")
	require.NotContains(t, inputs.ReplaceAllString(string(res.body), ""), "\u202e")
	require.NotContains(t, inputs.ReplaceAllString(string(res.body), ""), "\x1b")
}

// insertJob writes a river_job row of queue in state with tenant (none
// when empty), tier and args, and returns its id.
func (b *consoleBundle) insertJob(t *testing.T, queue, state, tenant, args string) int64 {
	t.Helper()
	meta := map[string]any{"tierq:tier": "pro"}
	if tenant != "" {
		meta["tierq:tenant"] = tenant
	}
	if state == "held" {
		state, meta["tierq:held_at"] = "pending", "2026-01-01T00:00:00Z"
	}
	raw, err := json.Marshal(meta)
	require.NoError(t, err)
	if state != "completed" {
		return testdb.InsertRaw(t, b.db, testdb.RawJob{Kind: jobs.KindAnalysis, Queue: queue, State: state, Args: args, Metadata: string(raw)})
	}
	id := testdb.InsertRaw(t, b.db, testdb.RawJob{Kind: jobs.KindAnalysis, Queue: queue, Args: args, Metadata: string(raw)})
	_, err = b.db.Pool.Exec(context.Background(), `UPDATE river_job SET state = 'completed', finalized_at = now() WHERE id = $1`, id)
	require.NoError(t, err)
	return id
}

// plain is the page's text: tags removed, entities decoded.
func plain(page string) string { return html.UnescapeString(tagRE.ReplaceAllString(page, "")) }

// tableRows are the rows of the page's table whose caption starts with
// caption, header left out.
func tableRows(t *testing.T, page, caption string) [][]string {
	t.Helper()
	i := strings.Index(page, "<caption>"+caption)
	require.GreaterOrEqual(t, i, 0, "no table %q in:\n%s", caption, page)
	table := page[i:]
	table = table[:strings.Index(table, "</table>")]
	return rows(table)[1:]
}

// TestConsoleQueue: a queue's tenants with running, available and held
// jobs and weights, by waiting work; its service's limits by tier and
// overrides; a tenant's limits, quota use today and newest jobs.
func TestConsoleQueue(t *testing.T) {
	t.Parallel()
	b := setupConsole(t)
	ctx := context.Background()
	ids := map[string]int64{}
	for _, j := range []struct{ name, queue, state, tenant string }{
		{"acme running", "analysis_default", "running", "acme"},
		{"acme available", "analysis_default", "available", "acme"},
		{"acme held 1", "analysis_default", "held", "acme"},
		{"acme held 2", "analysis_default", "held", "acme"},
		{"acme scheduled", "analysis_default", "scheduled", "acme"},
		{"acme completed", "analysis_default", "completed", "acme"},
		{"acme elsewhere", "analysis_priority", "available", "acme"},
		{"busy 1", "analysis_default", "available", "busy"},
		{"busy 2", "analysis_default", "available", "busy"},
		{"busy 3", "analysis_default", "held", "busy"},
		{"nobody", "analysis_default", "available", ""},
	} {
		ids[j.name] = b.insertJob(t, j.queue, j.state, j.tenant, `{}`)
	}
	_, err := b.db.Pool.Exec(ctx, `INSERT INTO fair_share_weights (tenant, weight) VALUES ('acme', 3)`)
	require.NoError(t, err)
	require.NoError(t, subscriptions.Set(ctx, b.db.Pool, "acme", tiers.Pro))
	require.NoError(t, limits.Record(ctx, b.db.Pool, limits.Config{Services: map[string]limits.Tiers{jobs.ServiceAnalyzer: {
		tiers.Free: {DailyQuota: 100},
		tiers.Pro:  {MaxRunning: 5, Rate: limits.Rate{Count: 10, Per: time.Second}, DailyQuota: 1000},
	}}}, testdb.Registry(t).Names(), "scheduler"))
	quota := int64(50)
	_, err = limits.SetOverride(ctx, b.db.Pool, jobs.ServiceAnalyzer, "acme", limits.Override{DailyQuota: &quota})
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, `INSERT INTO tenant_quota_usage (service, tenant, day, used) VALUES ('analyzer', 'acme', (now() AT TIME ZONE 'UTC')::date, 7)`)
	require.NoError(t, err)

	require.Contains(t, b.get(t, "/console/"), `<a href="/console/queues/analysis_default">analysis_default</a>`, "the overview links to the queue")
	page := b.get(t, "/console/queues/analysis_default")
	require.Contains(t, page, `Service <span class="value">analyzer</span>, class default.`)
	require.Contains(t, page, `<a href="/riverui/queues/analysis_default">`)
	require.Equal(t, [][]string{
		{"acme", "1", "1", "2", "3", "3"},
		{"busy", "0", "2", "1", "3", "1"},
		{"(no tenant)", "0", "1", "0", "1", "1"},
	}, tableRows(t, page, "3 tenants have jobs running or waiting here"))
	require.Contains(t, page, `<a href="/console/queues/analysis_default?tenant=acme">acme</a>`)
	require.Contains(t, page, `<a href="/console/queues/analysis_default?tenant=">(no tenant)</a>`)
	require.Equal(t, [][]string{
		{"free", "none", "none", "100"}, {"pro", "5", "10/s", "1000"}, {"pro_plus", "none", "none", "none"}, {"enterprise", "none", "none", "none"},
	}, tableRows(t, page, "Each tier's limits per tenant"))
	overrides := tableRows(t, page, "Tenants' overrides")
	require.Len(t, overrides, 1)
	require.Equal(t, []string{"acme", "inherits", "inherits", "50"}, overrides[0][:4])

	// The tenant: its counts, weight, tier, limits, today's use, its jobs
	// here that have not finished, newest first.
	page = b.get(t, "/console/queues/analysis_default?tenant=acme")
	text := plain(page)
	for _, want := range []string{
		"Here1 running, 1 available, 2 held; weight 3",
		"Tierpro (subscription set ",
		"Limitsmax running 5, rate 10/s, daily quota 50 (an override, set ",
		": max running inherits, rate inherits, daily quota 50)",
		"Today7 jobs counted on " + time.Now().UTC().Format("2006-01-02") + ", 43 left; resets ",
	} {
		require.Contains(t, text, want)
	}
	var got [][]string
	for _, r := range tableRows(t, page, "Its newest 5 jobs here") {
		got = append(got, []string{r[0], r[2], r[3], r[4], r[8]})
	}
	id := func(name string) string { return strconv.FormatInt(ids[name], 10) }
	require.Equal(t, [][]string{
		{id("acme scheduled"), "scheduled", "4", "pro", "job " + id("acme scheduled")},
		{id("acme held 2"), "held", "4", "pro", "job " + id("acme held 2")},
		{id("acme held 1"), "held", "4", "pro", "job " + id("acme held 1")},
		{id("acme available"), "available", "4", "pro", "job " + id("acme available")},
		{id("acme running"), "running", "4", "pro", "job " + id("acme running")},
	}, got)
	require.Contains(t, page, `<a href="/console/jobs/`+id("acme held 1")+`">`)
	require.Contains(t, page, `<a href="/riverui/jobs/`+id("acme held 1")+`">`)

	page = b.get(t, "/console/queues/analysis_default?tenant=")
	require.Contains(t, plain(page), "Here0 running, 1 available, 0 held; weight 1")
	require.Contains(t, page, "no user id: no subscription, no limits")
	require.Equal(t, id("nobody"), tableRows(t, page, "Its newest 1 jobs here")[0][0])
	page = b.get(t, "/console/queues/analysis_default?tenant=busy")
	require.Contains(t, plain(page), "Tierfree (no subscription)")
	require.Contains(t, plain(page), "Limitsmax running none, rate none, daily quota 100 (its tier's)")
	require.Contains(t, b.get(t, "/console/queues/analysis_default?tenant=nobody-here"), "No job of this tenant is running or waiting here.")

	// A tenant beyond the top 50 by waiting work has its own counts, and
	// one with no job here its weight.
	for i := range 50 {
		for range 2 {
			b.insertJob(t, "analysis_priority", "available", fmt.Sprintf("top%02d", i), `{}`)
		}
	}
	b.insertJob(t, "analysis_priority", "held", "last", `{}`)
	_, err = b.db.Pool.Exec(ctx, `INSERT INTO fair_share_weights (tenant, weight) VALUES ('last', 2), ('idle', 4)`)
	require.NoError(t, err)
	page = b.get(t, "/console/queues/analysis_priority?tenant=last")
	require.Contains(t, plain(page), "Here0 running, 0 available, 1 held; weight 2")
	top := tableRows(t, page, "52 tenants have jobs running or waiting here")
	require.Len(t, top, 50)
	require.Equal(t, []string{"top49", "0", "2", "0", "2", "1"}, top[49], "the top 50 by waiting work")
	require.Contains(t, plain(b.get(t, "/console/queues/analysis_priority?tenant=idle")), "Here0 running, 0 available, 0 held; weight 4")

	// Other queues: one of no service; an unknown one is refused.
	page = b.get(t, "/console/queues/scheduler")
	require.Contains(t, page, "A queue of no service: no limits by tier.")
	require.Contains(t, page, "No job is running or waiting here.")
	for _, path := range []string{"/console/queues/nope", "/console/queues/%3Cscript%3E"} {
		res := b.send(t, "GET", path, b.asOperator())
		require.Equal(t, http.StatusNotFound, res.status, path)
		require.Contains(t, string(res.body), "No such queue")
		require.NotContains(t, string(res.body), "<script>")
	}
}

// TestConsoleQueuePlans: the queue page's statements read indexes, never
// the whole of river_job, with a big queue of held jobs and a big queue of
// scheduled ones beside finished jobs.
func TestConsoleQueuePlans(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	testdb.SeedFinished(t, db, 40_000)
	_, err := db.Pool.Exec(ctx, `
		INSERT INTO river_job (kind, args, queue, priority, state, scheduled_at, max_attempts, metadata)
		SELECT 'analysis', '{}', 'analysis_default', 4, 'pending', now() - interval '1 hour', 25,
		       jsonb_build_object('tierq:tenant', 't' || i % 100, 'tierq:held_at', now())
		FROM generate_series(1, 30000) AS i;
		INSERT INTO river_job (kind, args, queue, priority, state, scheduled_at, max_attempts, metadata)
		SELECT 'analysis', '{}', 'analysis_default', 4, 'available', now() - interval '1 hour', 25,
		       jsonb_build_object('tierq:tenant', 't' || i % 100)
		FROM generate_series(1, 300) AS i;
		INSERT INTO river_job (kind, args, queue, priority, state, scheduled_at, max_attempts, metadata)
		SELECT 'analysis', '{}', 'analysis_scheduled', 4, 'scheduled', now() + interval '1 hour', 25,
		       jsonb_build_object('tierq:tenant', 't' || i % 100)
		FROM generate_series(1, 30000) AS i;
		ANALYZE river_job`)
	require.NoError(t, err)
	statements := api.ConsoleQueueSQL()
	for _, name := range []string{"tenants", "tenant jobs"} {
		for _, queue := range []string{"analysis_default", "analysis_scheduled"} {
			args := map[string][]any{"tenants": {queue, 50, "t7"}, "tenant jobs": {queue, "t7", 50}}[name]
			rows, err := db.Pool.Query(ctx, "EXPLAIN "+statements[name], args...)
			require.NoError(t, err)
			lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
			require.NoError(t, err)
			plan := strings.Join(lines, "\n")
			require.NotContains(t, plan, "Seq Scan on river_job", "%s, %s:\n%s", name, queue, plan)
			require.NotContains(t, plan, "river_job_pkey", "%s, %s: no walk of the primary key:\n%s", name, queue, plan)
			if queue == "analysis_default" {
				require.Contains(t, plan, "river_job_tierq_held_idx", "%s: held jobs through their index:\n%s", name, plan)
			}
			testdb.WriteExplain(t, db, "console-"+strings.ReplaceAll(name, " ", "-")+"-"+queue+".txt", statements[name], args...)
		}
	}
}

// TestConsoleJob: a job's story (held, tenant, tier, moves, River UI),
// its escalation from the page and the effect in the database; a dead
// letter's job and a replayed one link to their dead letter.
func TestConsoleJob(t *testing.T) {
	t.Parallel()
	b := setupConsole(t)
	ctx := context.Background()
	held := b.insertJob(t, "analysis_default", "held", "acme", `{"target": "/srv/a"}`)
	running := b.insertJob(t, "analysis_default", "running", "acme", `{}`)
	_, err := b.db.Pool.Exec(ctx, `UPDATE river_job SET metadata = metadata || '{"tierq:original_queue": "analysis_default", "tierq:original_priority": 4}' WHERE id = $1`, held)
	require.NoError(t, err)
	path := "/console/jobs/" + strconv.FormatInt(held, 10)

	page := b.get(t, path)
	text := plain(page)
	for _, want := range []string{
		"Stateheld by fair share (River's state: pending)", "Kindanalysis", "Queueanalysis_default (priority 4)", "Tierpro", "Tenantacme",
		"Inserted intoanalysis_default (priority 4)", "Attempts0 of 1", "Dead letternone", "River UIRiver UI's page of job " + strconv.FormatInt(held, 10),
		"tierq has not moved the job.", `"target": "/srv/a"`,
	} {
		require.Contains(t, text, want)
	}
	require.Contains(t, page, `<a href="/console/queues/analysis_default?tenant=acme">acme</a>`)
	require.Contains(t, page, `<a href="/riverui/jobs/`+strconv.FormatInt(held, 10)+`">`)

	// A job held by its tenant's concurrency cap says so.
	capped := b.insertJob(t, "analysis_default", "held", "acme", `{"target": "/srv/c"}`)
	_, err = b.db.Pool.Exec(ctx, `UPDATE river_job SET metadata = metadata || jsonb_build_object('tierq:cap_held_at', now(), 'tierq:capped', 'analyzer') WHERE id = $1`, capped)
	require.NoError(t, err)
	require.Contains(t, plain(b.get(t, "/console/jobs/"+strconv.FormatInt(capped, 10))), "Stateheld: its tenant is at its concurrency cap (River's state: pending)")
	// And one held by its tenant's rate limit.
	rated := b.insertJob(t, "analysis_default", "held", "acme", `{"target": "/srv/r"}`)
	_, err = b.db.Pool.Exec(ctx, `UPDATE river_job SET metadata = metadata || jsonb_build_object('tierq:rate_held_at', now(), 'tierq:rated', 'analyzer') WHERE id = $1`, rated)
	require.NoError(t, err)
	require.Contains(t, plain(b.get(t, "/console/jobs/"+strconv.FormatInt(rated, 10))), "Stateheld: its tenant's rate limit (River's state: pending)")
	require.Contains(t, page, `<form method="post" action="`+path+`/escalate" class="action">`)

	// Escalated by alice, with her reason: the queue, the priority, the
	// audit and the job's moves.
	for name, c := range map[string]struct {
		form url.Values
		want string
	}{
		"no reason":   {url.Values{"queue_class": {"priority"}, "reason": {" "}}, "Give a reason for the escalation."},
		"bad class":   {url.Values{"queue_class": {"gold"}, "reason": {"r"}}, "unknown queue class"},
		"bad priorty": {url.Values{"queue_class": {"priority"}, "priority": {"x"}, "reason": {"r"}}, "the priority is 1 to 4, or empty"},
		"priority 9":  {url.Values{"queue_class": {"priority"}, "priority": {"9"}, "reason": {"r"}}, "priority 9 not in 1..4"},
	} {
		res := b.post(t, path+"/escalate", c.form)
		require.Equal(t, http.StatusBadRequest, res.status, name)
		require.Contains(t, html.UnescapeString(string(res.body)), c.want, name)
	}
	require.Equal(t, 0, b.db.Count(t, `SELECT count(*) FROM job_escalations`))
	res := b.post(t, path+"/escalate", url.Values{"queue_class": {"priority"}, "priority": {"2"}, "reason": {"VIP customer, INC-7"}})
	require.Equal(t, http.StatusSeeOther, res.status, string(res.body))
	require.Equal(t, path, res.header.Get("Location"))
	var queue string
	var priority int
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT queue, priority FROM river_job WHERE id = $1`, held).Scan(&queue, &priority))
	require.Equal(t, "analysis_priority", queue)
	require.Equal(t, 2, priority)
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM job_escalations WHERE job_id = $1 AND from_queue = 'analysis_default'
		AND to_queue = 'analysis_priority' AND to_priority = 2 AND actor = 'alice' AND reason = 'VIP customer, INC-7'`, held))
	page = b.get(t, path)
	moves := tableRows(t, page, "The moves tierq made to the job")
	require.Len(t, moves, 1)
	require.Equal(t, []string{"escalation", "analysis_default (priority 4)", "analysis_priority (priority 2)", "alice", "VIP customer, INC-7"}, moves[0][1:])
	require.Contains(t, b.log.String(), `"msg":"console action","action":"escalate","actor":"alice","job_id":`+strconv.FormatInt(held, 10)+`,"to_class":"priority","from_queue":"analysis_default","to_queue":"analysis_priority","changed":true`)

	// Again: nothing to do. A running job: refused, 409. None: 404.
	res = b.post(t, path+"/escalate", url.Values{"queue_class": {"priority"}, "priority": {"2"}, "reason": {"again"}})
	require.Equal(t, http.StatusOK, res.status)
	require.Contains(t, string(res.body), "Nothing to do: the job is in analysis_priority at priority 2 already.")
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM job_escalations`))
	runningPath := "/console/jobs/" + strconv.FormatInt(running, 10)
	require.Contains(t, b.get(t, runningPath), "Only a queued job (available, scheduled, retryable or pending) of a service queue can be escalated.")
	res = b.post(t, runningPath+"/escalate", url.Values{"queue_class": {"priority"}, "reason": {"r"}})
	require.Equal(t, http.StatusConflict, res.status)
	require.Contains(t, string(res.body), "Not escalated: job is not queued")
	require.Equal(t, http.StatusNotFound, b.post(t, "/console/jobs/999999/escalate", url.Values{"queue_class": {"priority"}, "reason": {"r"}}).status)
	res = b.send(t, "GET", "/console/jobs/999999", b.asOperator())
	require.Equal(t, http.StatusNotFound, res.status)
	require.Contains(t, string(res.body), "is neither in River nor a dead letter")
	require.Equal(t, http.StatusBadRequest, b.send(t, "GET", "/console/jobs/x", b.asOperator()).status)
	// The header's job form goes to the job's page; a bad id is refused.
	require.Contains(t, page, `<form method="get" action="/console/jobs" class="lookup">`)
	res = b.send(t, "GET", "/console/jobs?id=+"+strconv.FormatInt(held, 10)+"+", b.asOperator())
	require.Equal(t, http.StatusSeeOther, res.status)
	require.Equal(t, path, res.header.Get("Location"))
	for _, bad := range []string{"", "?id=", "?id=x", "?id=-3", "?id=0", "?id=99999999999999999999"} {
		res = b.send(t, "GET", "/console/jobs"+bad, b.asOperator())
		require.Equal(t, http.StatusBadRequest, res.status, bad)
		require.Contains(t, string(res.body), "A job id is a positive integer.", bad)
	}

	// Cross-origin: refused, nothing moved.
	res = b.send(t, "POST", runningPath+"/escalate", consoleReq{user: "mallory", password: adminToken,
		headers: map[string]string{"Origin": "http://evil.example"}, form: url.Values{"queue_class": {"default"}, "reason": {"r"}}})
	require.Equal(t, http.StatusForbidden, res.status)
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM job_escalations`))

	// A dead letter's job: its dead letter, no River UI; the replayed job
	// says where it came from.
	testdb.SeedDiscarded(t, b.db, 1)
	drainAll(t, b.bundle)
	var dlID, jobID int64
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT id, job_id FROM dead_letter_jobs`).Scan(&dlID, &jobID))
	page = b.get(t, "/console/jobs/"+strconv.FormatInt(jobID, 10))
	text = plain(page)
	require.Contains(t, text, "Statedead letter")
	require.Contains(t, text, "Dead letterdead letter "+strconv.FormatInt(dlID, 10)+": discarded and drained out of River")
	require.Contains(t, text, "River UIRiver no longer has the job")
	require.Contains(t, text, "attempt 2 of job 1")
	require.Contains(t, page, `<a href="/console/dead-letters/`+strconv.FormatInt(dlID, 10)+`">`)
	require.NotContains(t, page, "/escalate")
	res = b.post(t, "/console/dead-letters/"+strconv.FormatInt(dlID, 10)+"/replay", url.Values{"reason": {"fixed"}})
	require.Equal(t, http.StatusSeeOther, res.status)
	var replayID int64
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT replay_job_id FROM dead_letter_jobs WHERE id = $1`, dlID).Scan(&replayID))
	text = plain(b.get(t, "/console/jobs/"+strconv.FormatInt(replayID, 10)))
	require.Contains(t, text, "Dead letternone; replayed from dead letter "+strconv.FormatInt(dlID, 10))
	require.Contains(t, text, "replay of dead letter "+strconv.FormatInt(dlID, 10))
}

// TestConsoleSubscriptions: look a user's tier up, set it (the effect in
// the database, the actor in the log), the checks of tierctl's set, the
// list.
func TestConsoleSubscriptions(t *testing.T) {
	t.Parallel()
	b := setupConsole(t)
	ctx := context.Background()
	require.NoError(t, subscriptions.Set(ctx, b.db.Pool, "u_1", tiers.Pro))

	page := b.get(t, "/console/subscriptions")
	require.Equal(t, [][]string{{"u_1", "pro"}}, func() [][]string {
		var out [][]string
		for _, r := range tableRows(t, page, "By user id") {
			out = append(out, r[:2])
		}
		return out
	}())
	require.NotContains(t, page, "Set the tier", "no user looked up")
	page = b.get(t, "/console/subscriptions?user=u_1")
	require.Contains(t, plain(page), "User u_1: pro, set ")
	require.Contains(t, page, `<option value="pro" selected>pro</option>`)
	page = b.get(t, "/console/subscriptions?user=u_2")
	require.Contains(t, plain(page), "User u_2: no subscription: free.")

	res := b.post(t, "/console/subscriptions", url.Values{"user": {"u_2"}, "tier": {"enterprise"}})
	require.Equal(t, http.StatusSeeOther, res.status, string(res.body))
	require.Equal(t, "/console/subscriptions?user=u_2", res.header.Get("Location"))
	tier, err := subscriptions.Lookup(ctx, b.db.Pool, "u_2")
	require.NoError(t, err)
	require.Equal(t, tiers.Enterprise, tier)
	require.Contains(t, plain(b.get(t, "/console/subscriptions?user=u_2")), "User u_2: enterprise, set ")
	require.Contains(t, b.log.String(), `"msg":"console action","action":"set tier","actor":"alice","user_id":"u_2","from_tier":"free","tier":"enterprise"`)
	res = b.post(t, "/console/subscriptions", url.Values{"user": {"u_1"}, "tier": {"free"}})
	require.Equal(t, http.StatusSeeOther, res.status)
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM subscriptions WHERE user_id = 'u_1' AND tier = 'free'`))

	for name, c := range map[string]struct {
		form url.Values
		want string
	}{
		"unknown tier": {url.Values{"user": {"u_3"}, "tier": {"gold"}}, `Not set: unknown tier "gold" (want free, pro, pro_plus or enterprise).`},
		"no user":      {url.Values{"tier": {"pro"}}, "Not set: invalid user id: empty."},
		"long user":    {url.Values{"user": {strings.Repeat("u", 201)}, "tier": {"pro"}}, "Not set: invalid user id: 201 bytes, longer than 200."},
		"escape":       {url.Values{"user": {"a\x1bb"}, "tier": {"pro"}}, "Not set: invalid user id: control character U+001B at byte 1."},
	} {
		res := b.post(t, "/console/subscriptions", c.form)
		require.Equal(t, http.StatusBadRequest, res.status, name)
		require.Contains(t, html.UnescapeString(string(res.body)), c.want, name)
	}
	require.Equal(t, 2, b.db.Count(t, `SELECT count(*) FROM subscriptions`))
	res = b.send(t, "GET", "/console/subscriptions?user="+strings.Repeat("u", 201), b.asOperator())
	require.Equal(t, http.StatusBadRequest, res.status)
	require.Contains(t, string(res.body), "invalid user id: 201 bytes, longer than 200.")

	// Cross-origin: refused, nothing set.
	res = b.send(t, "POST", "/console/subscriptions", consoleReq{user: "mallory", password: adminToken,
		headers: map[string]string{"Sec-Fetch-Site": "cross-site"}, form: url.Values{"user": {"u_1"}, "tier": {"enterprise"}}})
	require.Equal(t, http.StatusForbidden, res.status)
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM subscriptions WHERE user_id = 'u_1' AND tier = 'free'`))

	// Pages of 50, by user id.
	for i := range 60 {
		require.NoError(t, subscriptions.Set(ctx, b.db.Pool, "v_"+strconv.Itoa(100+i), tiers.Pro))
	}
	page = b.get(t, "/console/subscriptions")
	require.Len(t, tableRows(t, page, "By user id"), 50)
	require.Contains(t, page, `<a href="/console/subscriptions?after=v_147">Next page</a>`)
	page = b.get(t, "/console/subscriptions?after=v_147")
	require.Len(t, tableRows(t, page, "By user id"), 12)
	require.NotContains(t, page, "Next page")
}

func TestConsoleWaitChart(t *testing.T) {
	t.Parallel()
	var ser waitstats.Series
	for _, m := range []struct {
		i   int
		p99 time.Duration
	}{{0, time.Second}, {1, 2 * time.Second}, {2, 4 * time.Second}, {10, 4 * time.Second}, {59, 2 * time.Second}} {
		ser.Minutes[m.i].Jobs, ser.Minutes[m.i].P99 = 1, m.p99
	}
	lines, top := api.WaitChart(&ser)
	require.Equal(t, []string{"1,17.5 3,12.0 5,1.0", "20,1.0 22,1.0", "118,12.0 120,12.0"}, lines)
	require.Equal(t, 4*time.Second, top)

	lines, top = api.WaitChart(&waitstats.Series{})
	require.Empty(t, lines)
	require.Zero(t, top)
}

func TestConsoleFormatWait(t *testing.T) {
	t.Parallel()
	tests := []struct {
		give time.Duration
		want string
	}{
		{0, "0ms"},
		{500 * time.Microsecond, "0.5ms"},
		{12500 * time.Microsecond, "12.5ms"},
		{911_111_111, "911ms"},
		{time.Second, "1s"},
		{9980 * time.Millisecond, "9.98s"},
		{42_500 * time.Millisecond, "42.5s"},
		{980 * time.Second, "16m20s"},
		{100_000 * time.Second, "27h46m"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, api.FormatWait(tt.give))
		})
	}
}
