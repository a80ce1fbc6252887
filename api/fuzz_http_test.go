package api_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/tierq/tierq/api"
	"github.com/tierq/tierq/dlq"
	"github.com/tierq/tierq/internal/testdb"
)

// The fuzz targets below send arbitrary input to the request decoders
// through the real handler and a real database (a schema of the target's
// own, with jobs and dead letters to act on), and hold every answer to the
// API's promise for bad input: never a 5xx, always JSON (an error answer
// being {"error": "..."}). `make test` runs their seed corpora (the f.Add
// seeds and api/testdata/fuzz/<target>); `make fuzz` runs each for
// FUZZTIME:
//
//	go test -run '^$' -fuzz '^FuzzPatchJobRequest$' -fuzztime 30s ./api/

// fuzzHandler is the API's real handler on a fresh schema holding a few
// queued jobs (ids from 1) and drained dead letters (ids from 1).
func fuzzHandler(f *testing.F) http.Handler {
	f.Helper()
	db := testdb.New(f)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	registry := testdb.Registry(f)
	server := api.New(api.Config{Token: producerToken, AdminToken: adminToken, Schema: db.Schema, MaxAttempts: 5, Registry: registry, Logger: logger},
		db.Pool, db.Producer(f), api.NewMetrics(db.Pool, registry, logger))
	handler := server.Handler()
	testdb.SeedDiscarded(f, db, 6)
	for _, target := range []string{"/srv/a", "/srv/b", "/srv/c"} {
		body, _ := json.Marshal(analysisBody("u_fuzz", target))
		serveFuzz(f, handler, "POST", "/v1/jobs", producerToken, body)
	}
	if _, err := dlq.Drain(f.Context(), db.Pool, 1000); err != nil {
		f.Fatal(err)
	}
	return handler
}

// serveFuzz serves one request and fails t unless the answer keeps the
// promise: below 500, JSON, and an error's body {"error": "..."} (or
// ServeMux's redirect to a clean path, or a 204 without a body). A URL the
// client could not send is skipped.
func serveFuzz(t testing.TB, handler http.Handler, method, target, token string, body []byte) *httptest.ResponseRecorder {
	t.Helper()
	req, err := http.NewRequest(method, "http://tierq.test"+target, bytes.NewReader(body))
	if err != nil {
		return nil
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, req)
	if rec.Code >= 500 {
		t.Fatalf("%s %q with %q: %d %s", method, target, body, rec.Code, rec.Body)
	}
	if rec.Code >= 300 && rec.Code < 400 {
		// ServeMux's redirect of a path that is not clean ("/a/./b",
		// "//a") to the clean one: no body to speak of, but a Location.
		if rec.Header().Get("Location") == "" {
			t.Fatalf("%s %q with %q: %d without a Location", method, target, body, rec.Code)
		}
		return rec
	}
	if rec.Code == http.StatusNoContent {
		if rec.Body.Len() > 0 {
			t.Fatalf("%s %q with %q: 204 with a body: %s", method, target, body, rec.Body)
		}
		return rec
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s %q with %q: %d with content type %q: %s", method, target, body, rec.Code, ct, rec.Body)
	}
	if rec.Code >= 400 {
		var e struct {
			Error string `json:"error"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error == "" {
			t.Fatalf("%s %q with %q: %d without a JSON error: %s", method, target, body, rec.Code, rec.Body)
		}
	} else if !json.Valid(rec.Body.Bytes()) {
		t.Fatalf("%s %q with %q: %d with a body that is not JSON: %s", method, target, body, rec.Code, rec.Body)
	}
	return rec
}

// FuzzCreateJobRequest: POST /v1/jobs with any body.
func FuzzCreateJobRequest(f *testing.F) {
	f.Add([]byte(`{"kind":"analysis","user_id":"u_1","args":{"target":"/srv/a"}}`))
	f.Add([]byte(`{"kind":"specview","user_id":"u_1","args":{"analysis_result_id":7},"scheduled":true}`))
	f.Add([]byte(`{"kind":"analysis","user_id":"u_1","args":{"target":"/srv/\u0000"}}`))
	f.Add([]byte("{\"kind\":\"analysis\",\"user_id\":\"u\xff\",\"args\":{\"target\":\"/srv/a\"}}"))
	f.Add([]byte(`{"kind":"analysis","user_id":"u","args":{"target":"/a","target":"/b","tier":""}}`))
	f.Add([]byte(`{"kind":"analysis","user_id":"u","args":{"target":"/a","x\u0000":1}}`))
	handler := fuzzHandler(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		serveFuzz(t, handler, "POST", "/v1/jobs", producerToken, body)
	})
}

// FuzzPatchJobRequest: PATCH /v1/jobs/{id} with any id and body.
func FuzzPatchJobRequest(f *testing.F) {
	f.Add("1", []byte(`{"queue_class":"priority","priority":1,"actor":"alice","reason":"call"}`))
	f.Add("2", []byte(`{"queue_class":"default","actor":"al\u0000ice","reason":"r"}`))
	f.Add("3", []byte("{\"queue_class\":\"priority\",\"actor\":\"a\",\"reason\":\"\xff\"}"))
	f.Add("1%00", []byte(`{}`))
	f.Add("99999999999999999999", []byte(`{"queue_class":"scheduled","actor":"a","reason":"r"}`))
	handler := fuzzHandler(f)
	f.Fuzz(func(t *testing.T, id string, body []byte) {
		if strings.ContainsAny(id, "/?#") {
			return // another route
		}
		serveFuzz(t, handler, "PATCH", "/v1/jobs/"+id, adminToken, body)
	})
}

// FuzzReplayRequest: POST /v1/dead-letters/{id}/replay with any id and body.
func FuzzReplayRequest(f *testing.F) {
	f.Add("1", []byte(`{"actor":"alice"}`))
	f.Add("2", []byte(`{"actor":"alice","to_queue":"analysis_priority","force":true}`))
	f.Add("3", []byte(`{"actor":"\u0000"}`))
	f.Add("4", []byte("{\"actor\":\"a\",\"to_queue\":\"\xfe\"}"))
	f.Add("%FF", []byte(`{"actor":"a"}`))
	handler := fuzzHandler(f)
	f.Fuzz(func(t *testing.T, id string, body []byte) {
		if strings.ContainsAny(id, "/?#") {
			return
		}
		serveFuzz(t, handler, "POST", "/v1/dead-letters/"+id+"/replay", adminToken, body)
	})
}

// FuzzBulkReplayRequest: POST /v1/dead-letters/replay with any body.
func FuzzBulkReplayRequest(f *testing.F) {
	f.Add([]byte(`{"actor":"alice","queue":"analysis_default","limit":1}`))
	f.Add([]byte(`{"actor":"alice","kind":"specview","to_queue":"specview_priority"}`))
	f.Add([]byte(`{"actor":"a","queue":"analysis_default\u0000"}`))
	f.Add([]byte("{\"actor\":\"a\",\"kind\":\"\xff\"}"))
	f.Add([]byte(`{"actor":"a\u0000","all":true}`))
	handler := fuzzHandler(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		serveFuzz(t, handler, "POST", "/v1/dead-letters/replay", adminToken, body)
	})
}

// FuzzDeadLetterQuery: GET /v1/dead-letters with any query string.
func FuzzDeadLetterQuery(f *testing.F) {
	f.Add("queue=analysis_default&kind=analysis&since=1h&pending=true&limit=5")
	f.Add("cursor=3&limit=1")
	f.Add("queue=%00")
	f.Add("kind=%FF&queue=a%C3")
	f.Add("since=-1h&pending=maybe&limit=0")
	f.Add("tier=pro&tenant=acme")
	f.Add("tier=gold&tenant=%00")
	fuzzQuery(f, "/v1/dead-letters")
}

// fuzzQuery fuzzes the query string of an admin GET of path on the fuzz
// targets' handler (its seeds added by the caller): never a 5xx, always
// JSON. A '#' would end the query: such inputs are skipped.
func fuzzQuery(f *testing.F, path string) {
	handler := fuzzHandler(f)
	f.Fuzz(func(t *testing.T, query string) {
		if strings.ContainsAny(query, "#") {
			return
		}
		serveFuzz(t, handler, "GET", path+"?"+query, adminToken, nil)
	})
}

// FuzzQueuePath: GET /v1/queues/{queue}/priority-stats with any queue name.
func FuzzQueuePath(f *testing.F) {
	f.Add("analysis_default")
	f.Add("analysis%00")
	f.Add("%FF")
	f.Add(strings.Repeat("q", 300))
	handler := fuzzHandler(f)
	f.Fuzz(func(t *testing.T, queue string) {
		if strings.ContainsAny(queue, "/?#") {
			return
		}
		serveFuzz(t, handler, "GET", "/v1/queues/"+queue+"/priority-stats", adminToken, nil)
	})
}

// FuzzLimitsRequest: PATCH, GET and DELETE /v1/limits/{service}/tenant
// with any service, tenant id and body.
func FuzzLimitsRequest(f *testing.F) {
	f.Add("analyzer", "u_1", []byte(`{"daily_quota":5,"rate":"10/s","max_running":1}`))
	f.Add("analyzer", "u/../x", []byte(`{"daily_quota":null,"rate":null}`))
	f.Add("specgen", "\x00", []byte(`{"rate":"0"}`))
	f.Add("analyzer", "\xff\xfe", []byte("{\"rate\":\"1\x00/s\"}"))
	f.Add("x", "", []byte(`{"max_running":1e999}`))
	f.Add("analyzer", "u", []byte(`{"daily_quota":-9223372036854775808}`))
	handler := fuzzHandler(f)
	f.Fuzz(func(t *testing.T, service, tenant string, body []byte) {
		target := "/v1/limits/" + url.PathEscape(service) + "/tenant?id=" + url.QueryEscape(tenant)
		serveFuzz(t, handler, "PATCH", target, adminToken, body)
		serveFuzz(t, handler, "GET", target, adminToken, nil)
		serveFuzz(t, handler, "DELETE", target, adminToken, nil)
	})
}
