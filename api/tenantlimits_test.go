package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/limits"
	"github.com/tierq/tierq/tiers"
)

// recordLimits records the reference app's limits by tier as a scheduler
// whose environment says ANALYZER_FREE_TENANT_DAILY_QUOTA=7,
// ANALYZER_FREE_TENANT_MAX_RUNNING=1 and ANALYZER_PRO_TENANT_RATE=10/s
// would.
func recordLimits(t *testing.T, b *bundle) {
	t.Helper()
	require.NoError(t, limits.Record(t.Context(), b.db.Pool, limits.Config{Services: map[string]limits.Tiers{
		"analyzer": {
			tiers.Free: {MaxRunning: 1, DailyQuota: 7},
			tiers.Pro:  {Rate: limits.Rate{Count: 10, Per: time.Second}},
		},
	}}, []string{"analyzer", "specgen"}, "scheduler"))
}

// today is the database's current UTC day and the next midnight UTC.
func today(t *testing.T, b *bundle) (day, reset string) {
	t.Helper()
	require.NoError(t, b.db.Pool.QueryRow(t.Context(), `SELECT to_char((now() AT TIME ZONE 'UTC')::date, 'YYYY-MM-DD'),
		to_char((now() AT TIME ZONE 'UTC')::date + 1, 'YYYY-MM-DD')`).Scan(&day, &reset))
	return day, reset
}

// rawPost posts body to /v1/jobs with the producer token; safe in any
// goroutine (it fails nothing).
func rawPost(url string, body any) (status int, header http.Header, data []byte, err error) {
	payload, err := json.Marshal(body)
	if err != nil {
		return 0, nil, nil, err
	}
	req, err := http.NewRequestWithContext(context.Background(), "POST", url+"/v1/jobs", strings.NewReader(string(payload)))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+producerToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	data, err = io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, data, err
}

// TestQuotaAnswers429UnderRacingRequests: 20 requests of one free user
// race for its daily quota of 7 (ANALYZER_FREE_TENANT_DAILY_QUOTA): exactly
// 7 jobs are inserted (201), the other 13 answer 429 with Retry-After (the
// seconds to the next midnight UTC) and the API's JSON error naming the
// tenant, the quota and the reset; at the quota, a duplicate of a queued
// job is still answered (200), and another service's quota is its own.
func TestQuotaAnswers429UnderRacingRequests(t *testing.T) {
	t.Parallel()
	b := setup(t)
	recordLimits(t, b)
	day, reset := today(t, b)

	type answer struct {
		status int
		header http.Header
		body   []byte
		err    error
	}
	var (
		start   = make(chan struct{})
		wg      sync.WaitGroup
		mu      sync.Mutex
		answers []answer
	)
	for i := range 20 {
		wg.Go(func() {
			<-start
			status, header, body, err := rawPost(b.url, analysisBody("u_race", fmt.Sprintf("/srv/race/%d", i)))
			mu.Lock()
			defer mu.Unlock()
			answers = append(answers, answer{status, header, body, err})
		})
	}
	close(start)
	wg.Wait()

	statuses := map[int]int{}
	for _, a := range answers {
		require.NoError(t, a.err)
		statuses[a.status]++
		if a.status != http.StatusTooManyRequests {
			continue
		}
		requireJSONError(t, a.header, a.body, "POST", "/v1/jobs")
		var e struct {
			Error string `json:"error"`
		}
		require.NoError(t, json.Unmarshal(a.body, &e))
		require.Equal(t, `daily quota reached: tenant "u_race" has inserted its 7 jobs of service analyzer for `+day+` (UTC); the quota resets at `+reset+`T00:00:00Z`, e.Error)
		retryAfter, err := strconv.Atoi(a.header.Get("Retry-After"))
		require.NoError(t, err, a.header.Get("Retry-After"))
		require.GreaterOrEqual(t, retryAfter, 1)
		require.LessOrEqual(t, retryAfter, 86400)
	}
	require.Equal(t, map[int]int{http.StatusCreated: 7, http.StatusTooManyRequests: 13}, statuses)
	require.Equal(t, 7, b.db.Count(t, `SELECT count(*) FROM river_job WHERE metadata->>'tierq:tenant' = 'u_race'`))
	require.Equal(t, 7, b.db.Count(t, `SELECT used FROM tenant_quota_usage WHERE service = 'analyzer' AND tenant = 'u_race'`))

	dup := b.do(t, "POST", "/v1/jobs", producerToken, analysisBody("u_race", b.targetOf(t, "u_race")))
	require.Equal(t, http.StatusOK, dup.status, "%s", dup.body)
	require.Equal(t, true, dup.json(t)["duplicate"])
	require.Equal(t, http.StatusCreated, b.do(t, "POST", "/v1/jobs", producerToken,
		map[string]any{"kind": "specview", "user_id": "u_race", "args": map[string]any{"analysis_result_id": 1}}).status, "specgen has no quota")
	require.Equal(t, 7, b.db.Count(t, `SELECT used FROM tenant_quota_usage WHERE service = 'analyzer' AND tenant = 'u_race'`))
}

// targetOf is the target of one of tenant's queued analyses.
func (b *bundle) targetOf(t *testing.T, tenant string) string {
	t.Helper()
	var target string
	require.NoError(t, b.db.Pool.QueryRow(t.Context(), `SELECT args->>'target' FROM river_job WHERE metadata->>'tierq:tenant' = $1 LIMIT 1`, tenant).Scan(&target))
	return target
}

// TestTenantLimitsEndpoints: GET /v1/limits lists the recorded limits by
// tier; GET /v1/limits/{service}/tenant shows a tenant's limits for its
// subscription's tier and the day's use; PATCH sets and clears its
// override, which beats the tier's default (POST /v1/jobs obeys it); DELETE
// clears it all.
func TestTenantLimitsEndpoints(t *testing.T) {
	t.Parallel()
	b := setup(t)
	recordLimits(t, b)
	day, reset := today(t, b)
	const tenant = "acme/eu ü" // a slash and non-ASCII: a query parameter, percent-encoded
	path := "/v1/limits/analyzer/tenant?id=" + url.QueryEscape(tenant)

	all := b.do(t, "GET", "/v1/limits", adminToken, nil)
	require.Equal(t, http.StatusOK, all.status)
	var listed struct {
		Services []struct {
			Service    string                    `json:"service"`
			Tiers      map[string]map[string]any `json:"tiers"`
			RecordedBy *string                   `json:"recorded_by"`
			RecordedAt *time.Time                `json:"recorded_at"`
		} `json:"services"`
	}
	require.NoError(t, json.Unmarshal(all.body, &listed))
	require.Len(t, listed.Services, 2)
	require.Equal(t, "analyzer", listed.Services[0].Service)
	require.Equal(t, "scheduler", *listed.Services[0].RecordedBy)
	require.Equal(t, map[string]map[string]any{
		"free":       {"max_running": 1.0, "rate": "0", "daily_quota": 7.0},
		"pro":        {"max_running": 0.0, "rate": "10/s", "daily_quota": 0.0},
		"pro_plus":   {"max_running": 0.0, "rate": "0", "daily_quota": 0.0},
		"enterprise": {"max_running": 0.0, "rate": "0", "daily_quota": 0.0},
	}, listed.Services[0].Tiers)
	require.Equal(t, "specgen", listed.Services[1].Service)

	// No override, free (no subscription), nothing counted yet.
	got := b.do(t, "GET", path, adminToken, nil)
	require.Equal(t, http.StatusOK, got.status, "%s", got.body)
	view := got.json(t)
	require.NotNil(t, view["tier_recorded_at"])
	delete(view, "tier_recorded_at")
	require.Equal(t, map[string]any{
		"service": "analyzer", "tenant": tenant, "tier": "free",
		"limits":              map[string]any{"max_running": 1.0, "rate": "0", "daily_quota": 7.0},
		"tier_limits":         map[string]any{"max_running": 1.0, "rate": "0", "daily_quota": 7.0},
		"override":            map[string]any{"max_running": nil, "rate": nil, "daily_quota": nil},
		"override_updated_at": nil,
		"quota":               map[string]any{"day": day, "used": 0.0, "remaining": 7.0, "reset_at": reset + "T00:00:00Z"},
		"jobs":                map[string]any{"running": 0.0, "available": 0.0, "held": 0.0, "held_by_cap": 0.0, "held_by_rate": 0.0},
	}, view)

	// A pro subscription with an override of the quota to 2 and of the
	// rate to none: the override beats pro's defaults.
	b.subscribe(t, tenant, tiers.Pro)
	patched := b.do(t, "PATCH", path, adminToken, `{"daily_quota": 2, "rate": "0"}`)
	require.Equal(t, http.StatusOK, patched.status, "%s", patched.body)
	view = patched.json(t)
	require.Equal(t, "pro", view["tier"])
	require.Equal(t, map[string]any{"max_running": 0.0, "rate": "0", "daily_quota": 2.0}, view["limits"])
	require.Equal(t, map[string]any{"max_running": 0.0, "rate": "10/s", "daily_quota": 0.0}, view["tier_limits"])
	require.Equal(t, map[string]any{"max_running": nil, "rate": "0", "daily_quota": 2.0}, view["override"])
	require.NotNil(t, view["override_updated_at"])

	for i, want := range []int{http.StatusCreated, http.StatusCreated, http.StatusTooManyRequests} {
		res := b.do(t, "POST", "/v1/jobs", producerToken, analysisBody(tenant, fmt.Sprintf("/srv/acme/%d", i)))
		require.Equal(t, want, res.status, "insert %d: %s", i, res.body)
	}
	view = b.do(t, "GET", path, adminToken, nil).json(t)
	require.Equal(t, map[string]any{"day": day, "used": 2.0, "remaining": 0.0, "reset_at": reset + "T00:00:00Z"}, view["quota"])

	// null clears the quota's override: pro has none, so no quota.
	patched = b.do(t, "PATCH", path, adminToken, `{"daily_quota": null, "max_running": 3}`)
	require.Equal(t, http.StatusOK, patched.status, "%s", patched.body)
	view = patched.json(t)
	require.Equal(t, map[string]any{"max_running": 3.0, "rate": "0", "daily_quota": nil}, view["override"])
	require.Equal(t, map[string]any{"max_running": 3.0, "rate": "0", "daily_quota": 0.0}, view["limits"])
	require.Equal(t, map[string]any{"day": day, "used": 2.0, "remaining": nil, "reset_at": reset + "T00:00:00Z"}, view["quota"])
	require.Equal(t, http.StatusCreated, b.do(t, "POST", "/v1/jobs", producerToken, analysisBody(tenant, "/srv/acme/3")).status)

	require.Equal(t, http.StatusNoContent, b.do(t, "DELETE", path, adminToken, nil).status)
	res := b.do(t, "DELETE", path, adminToken, nil)
	require.Equal(t, http.StatusNotFound, res.status)
	require.Equal(t, `tenant "acme/eu ü" has no override of service analyzer's limits`, res.json(t)["error"])
	view = b.do(t, "GET", path, adminToken, nil).json(t)
	require.Equal(t, map[string]any{"max_running": nil, "rate": nil, "daily_quota": nil}, view["override"])
	require.Equal(t, map[string]any{"max_running": 0.0, "rate": "10/s", "daily_quota": 0.0}, view["limits"])
	require.Zero(t, b.db.Count(t, `SELECT count(*) FROM tenant_limits`))
}

// TestTenantLimitsShowJobs: GET /v1/limits/{service}/tenant shows the
// tenant's jobs in the service's queues: under a cap of 1
// (ANALYZER_FREE_TENANT_MAX_RUNNING), of three analyses inserted through
// POST /v1/jobs one is available and two wait held by the cap; one running
// counts as running; another tenant's jobs and the tenant's jobs of
// another service do not count.
func TestTenantLimitsShowJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	recordLimits(t, b)
	require.NoError(t, testdb.Registry(t).Record(t.Context(), b.db.Pool, "api"))
	jobs := func(service, tenant string) map[string]any {
		t.Helper()
		res := b.do(t, "GET", "/v1/limits/"+service+"/tenant?id="+tenant, adminToken, nil)
		require.Equal(t, http.StatusOK, res.status, "%s", res.body)
		return res.json(t)["jobs"].(map[string]any)
	}

	for i := range 3 {
		res := b.do(t, "POST", "/v1/jobs", producerToken, analysisBody("acme", fmt.Sprintf("/srv/acme/%d", i)))
		require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
	}
	res := b.do(t, "POST", "/v1/jobs", producerToken, analysisBody("globex", "/srv/globex/0"))
	require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
	require.Equal(t, map[string]any{"running": 0.0, "available": 1.0, "held": 2.0, "held_by_cap": 2.0, "held_by_rate": 0.0}, jobs("analyzer", "acme"))
	require.Equal(t, map[string]any{"running": 0.0, "available": 1.0, "held": 0.0, "held_by_cap": 0.0, "held_by_rate": 0.0}, jobs("analyzer", "globex"))
	require.Equal(t, map[string]any{"running": 0.0, "available": 0.0, "held": 0.0, "held_by_cap": 0.0, "held_by_rate": 0.0}, jobs("specgen", "acme"))

	// A worker fetches acme's available job.
	_, err := b.db.Pool.Exec(t.Context(), `UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now()
		WHERE state = 'available' AND metadata->>'tierq:tenant' = 'acme'`)
	require.NoError(t, err)
	require.Equal(t, map[string]any{"running": 1.0, "available": 0.0, "held": 2.0, "held_by_cap": 2.0, "held_by_rate": 0.0}, jobs("analyzer", "acme"))
}

// TestTenantLimitsRefuseBadInput: whatever the bytes (NUL, invalid UTF-8,
// control characters, wrong types, out of range), the limits endpoints
// answer a 4xx JSON error naming what is wrong, never a 5xx, and change
// nothing.
func TestTenantLimitsRefuseBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	recordLimits(t, b)
	const ok = "/v1/limits/analyzer/tenant?id=u_1"
	const notARate = "not a rate (jobs per second, minute or hour, such as 10/s, 100/m or 1000/h; 0 for no limit)"
	tests := []struct {
		name   string
		method string
		path   string
		body   string
		status int
		want   string
	}{
		{"id missing", "GET", "/v1/limits/analyzer/tenant", "", 400, "query parameter id is required: the tenant id (a user_id)"},
		{"id empty", "PATCH", "/v1/limits/analyzer/tenant?id=", `{"daily_quota":1}`, 400, "query parameter id is required: the tenant id (a user_id)"},
		{"id NUL", "GET", "/v1/limits/analyzer/tenant?id=u%00", "", 400, "query parameter id: NUL (U+0000) at byte 1"},
		{"id not UTF-8", "PATCH", "/v1/limits/analyzer/tenant?id=u%FF", `{"daily_quota":1}`, 400, "query parameter id: invalid UTF-8 at byte 1"},
		{"id control character", "DELETE", "/v1/limits/analyzer/tenant?id=u%1B", "", 400, "query parameter id: invalid tenant id: control character U+001B at byte 1"},
		{"id C1", "GET", "/v1/limits/analyzer/tenant?id=%C2%85", "", 400, "query parameter id: invalid tenant id: control character U+0085 at byte 0"},
		{"id too long", "GET", "/v1/limits/analyzer/tenant?id=" + strings.Repeat("a", 201), "", 400, "query parameter id: invalid tenant id: 201 bytes, longer than 200"},
		{"service NUL", "GET", "/v1/limits/ana%00lyzer/tenant?id=u", "", 400, "path parameter service: NUL (U+0000) at byte 3"},
		{"service not UTF-8", "PATCH", "/v1/limits/%FE/tenant?id=u", `{"daily_quota":1}`, 400, "path parameter service: invalid UTF-8 at byte 0"},
		{"unknown service", "GET", "/v1/limits/mailer/tenant?id=u", "", 404, `unknown service "mailer" (want analyzer, specgen)`},
		{"unknown service, PATCH", "PATCH", "/v1/limits/x/tenant?id=u", `{"daily_quota":1}`, 404, `unknown service "x" (want analyzer, specgen)`},
		{"rate NUL", "PATCH", ok, `{"rate":"10/s\u0000"}`, 400, "rate: NUL (U+0000) at byte 4"},
		{"rate not UTF-8", "PATCH", ok, "{\"rate\":\"10/\xff\"}", 400, "rate: invalid UTF-8 at byte 3"},
		{"key not UTF-8", "PATCH", ok, "{\"\xff\":1}", 400, "invalid JSON body: json: unknown field \"\ufffd\""},
		{"rate unit", "PATCH", ok, `{"rate":"10/d"}`, 400, `rate "10/d": ` + notARate},
		{"rate a number", "PATCH", ok, `{"rate":10}`, 400, `rate must be a string such as "10/s", "100/m", "1000/h" or "0", or null, not 10`},
		{"rate too high", "PATCH", ok, `{"rate":"1000001/s"}`, 400, `rate "1000001/s": more than 1000000 jobs per interval`},
		{"max_running a fraction", "PATCH", ok, `{"max_running":1.5}`, 400, "max_running must be an integer from 0 to 1000000, or null, not 1.5"},
		{"max_running a string", "PATCH", ok, `{"max_running":"1"}`, 400, `max_running must be an integer from 0 to 1000000, or null, not "1"`},
		{"max_running negative", "PATCH", ok, `{"max_running":-1}`, 400, "max_running is -1: must be between 0 and 1000000 (0: no cap)"},
		{"daily_quota exponent", "PATCH", ok, `{"daily_quota":1e3}`, 400, "daily_quota must be an integer from 0 to 1000000000, or null, not 1e3"},
		{"daily_quota huge", "PATCH", ok, `{"daily_quota":99999999999999999999}`, 400, "daily_quota must be an integer from 0 to 1000000000, or null, not 99999999999999999999"},
		{"daily_quota too high", "PATCH", ok, `{"daily_quota":1000000001}`, 400, "daily_quota is 1000000001: must be between 0 and 1000000000 (0: no quota)"},
		{"daily_quota a bool", "PATCH", ok, `{"daily_quota":true}`, 400, "daily_quota must be an integer from 0 to 1000000000, or null, not true"},
		{"every problem", "PATCH", ok, `{"max_running":"x","rate":"fast","daily_quota":-1}`, 400,
			`max_running must be an integer from 0 to 1000000, or null, not "x"; rate "fast": ` + notARate},
		{"nothing to change", "PATCH", ok, `{}`, 400, "nothing to change: give max_running, rate or daily_quota (null clears one)"},
		{"unknown field", "PATCH", ok, `{"quota":1}`, 400, `invalid JSON body: json: unknown field "quota"`},
		{"field in another case", "PATCH", ok, `{"Daily_Quota":1}`, 400, `invalid JSON body: json: unknown field "Daily_Quota"`},
		{"field twice", "PATCH", ok, `{"daily_quota":1,"daily_quota":2}`, 400, `invalid JSON body: field "daily_quota" given twice`},
		{"not an object", "PATCH", ok, `[1]`, 400, "invalid JSON body: field \"\" must be api.PatchLimitsRequest, not array"},
		{"not JSON", "PATCH", ok, `daily_quota=1`, 400, "invalid JSON body: invalid character 'd' looking for beginning of value"},
		{"empty body", "PATCH", ok, ``, 400, "invalid JSON body: empty body"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var body any
			if tt.body != "" {
				body = tt.body
			}
			res := b.do(t, tt.method, tt.path, adminToken, body)
			require.Equal(t, tt.status, res.status, "%s", res.body)
			require.Equal(t, tt.want, res.json(t)["error"])
		})
	}
	t.Run("media type", func(t *testing.T) {
		t.Parallel()
		req, err := http.NewRequest("PATCH", b.url+ok, strings.NewReader("daily_quota=1"))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusUnsupportedMediaType, resp.StatusCode)
	})
	t.Cleanup(func() {
		require.Zero(t, b.db.Count(t, `SELECT count(*) FROM tenant_limits`), "nothing written")
	})
}
