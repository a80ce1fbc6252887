package api_test

import (
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
)

// seedFilterDeadLetters drains seven dead letters of analysis_default, one
// per kind named after its tier and tenant: pro_acme_1, pro_acme_2,
// free_acme, pro_beta, args_enterprise (its tier only in its args),
// no_tier (no tier, no tenant) and array_meta (metadata a JSON array).
func seedFilterDeadLetters(t *testing.T, b *bundle) {
	t.Helper()
	for _, j := range []struct{ kind, metadata, args string }{
		{"pro_acme_1", `{"tierq:tier": "pro", "tierq:tenant": "acme"}`, `{}`},
		{"pro_acme_2", `{"tierq:tier": "pro", "tierq:tenant": "acme"}`, `{}`},
		{"free_acme", `{"tierq:tier": "free", "tierq:tenant": "acme"}`, `{}`},
		{"pro_beta", `{"tierq:tier": "pro", "tierq:tenant": "beta"}`, `{}`},
		{"args_enterprise", `{}`, `{"tier": "enterprise"}`},
		{"no_tier", `{}`, `{}`},
		{"array_meta", `["tierq:tenant"]`, `{}`},
	} {
		testdb.InsertRaw(t, b.db, testdb.RawJob{State: "discarded", Queue: "analysis_default", Kind: j.kind, Metadata: j.metadata, Args: j.args})
	}
	drainAll(t, b)
}

// TestConsoleDeadLetterFilters: the list filters by tier and tenant (with
// the other filters), shows each row's tier, refuses a tier tierq does not
// know; the bulk replay of a tier and tenant filter confirms that filter's
// pending dead letters and replays exactly those.
func TestConsoleDeadLetterFilters(t *testing.T) {
	t.Parallel()
	b := setupConsole(t)
	seedFilterDeadLetters(t, b.bundle)
	kinds := func(page string) []string {
		var out []string
		for _, r := range rows(page) {
			if len(r) > 2 && r[0] != "Dead letter" {
				out = append(out, r[2]+" "+r[4]+" "+r[5])
			}
		}
		return out
	}

	require.Equal(t, []string{
		"array_meta unknown ", "no_tier unknown ", "args_enterprise enterprise ", "pro_beta pro beta",
		"free_acme free acme", "pro_acme_2 pro acme", "pro_acme_1 pro acme",
	}, kinds(b.get(t, "/console/dead-letters")))
	require.Equal(t, []string{"pro_beta pro beta", "pro_acme_2 pro acme", "pro_acme_1 pro acme"}, kinds(b.get(t, "/console/dead-letters?tier=pro")))
	require.Equal(t, []string{"free_acme free acme", "pro_acme_2 pro acme", "pro_acme_1 pro acme"}, kinds(b.get(t, "/console/dead-letters?tenant=acme")))
	require.Equal(t, []string{"pro_acme_2 pro acme", "pro_acme_1 pro acme"}, kinds(b.get(t, "/console/dead-letters?tier=pro&tenant=acme")))
	require.Equal(t, []string{"args_enterprise enterprise "}, kinds(b.get(t, "/console/dead-letters?tier=enterprise")))
	require.Equal(t, []string{"array_meta unknown ", "no_tier unknown "}, kinds(b.get(t, "/console/dead-letters?tier=unknown")))
	require.Equal(t, []string{"pro_acme_1 pro acme"}, kinds(b.get(t, "/console/dead-letters?tenant=acme&kind=pro_acme_1&queue=analysis_default&state=pending")))
	require.Nil(t, kinds(b.get(t, "/console/dead-letters?tenant=ACME")))

	// The form keeps the filter, and the tier is a choice.
	page := b.get(t, "/console/dead-letters?tier=pro&tenant=acme")
	require.Contains(t, page, `<option value="pro" selected>pro</option>`)
	require.Contains(t, page, `<option value="unknown">unknown</option>`)
	require.Contains(t, page, `<input name="tenant" value="acme">`)

	for _, tt := range []struct{ query, want string }{
		{"tier=gold", "invalid dead-letter request: the tier is one of free, pro, pro_plus, enterprise or unknown"},
		{"tier=Pro", "invalid dead-letter request: the tier is one of free, pro, pro_plus, enterprise or unknown"},
		{"tenant=" + strings.Repeat("t", 65537), "invalid dead-letter request: the tenant is at most 65536 bytes"},
	} {
		res := b.send(t, "GET", "/console/dead-letters?"+tt.query, b.asOperator())
		require.Equal(t, http.StatusBadRequest, res.status, tt.query)
		require.Contains(t, string(res.body), tt.want)
		res = b.send(t, "GET", "/console/dead-letters/replay?"+tt.query, b.asOperator())
		require.Equal(t, http.StatusBadRequest, res.status, tt.query)
	}
	res := b.send(t, "GET", "/console/dead-letters?tenant=a%00", b.asOperator())
	require.Equal(t, http.StatusBadRequest, res.status)
	require.Contains(t, html.UnescapeString(string(res.body)), "Field tenant: NUL (U+0000) at byte 1.")

	// Bulk replay of tier pro and tenant acme.
	confirmed := b.deadLetterIDs(t, "kind IN ('pro_acme_1', 'pro_acme_2')")
	page = b.get(t, "/console/dead-letters?tier=pro&tenant=acme")
	require.Contains(t, page, `<a href="/console/dead-letters/replay?tenant=acme&amp;tier=pro">Replay the pending dead letters of this filter…</a>`)
	page = b.get(t, "/console/dead-letters/replay?tenant=acme&tier=pro")
	require.Contains(t, page, `tier <span class="value">pro</span>, tenant <span class="value">acme</span>`)
	require.Contains(t, page, "This replays exactly the <strong>2</strong> dead letters listed below")
	require.Contains(t, page, "Replayable now, over the whole filter: 2")
	require.Contains(t, page, `<input type="hidden" name="tier" value="pro"><input type="hidden" name="tenant" value="acme">`)
	var carried []string
	for _, m := range regexp.MustCompile(`<input type="hidden" name="id" value="(\d+)">`).FindAllStringSubmatch(page, -1) {
		carried = append(carried, m[1])
	}
	require.Equal(t, confirmed, carried)

	// A third of the filter arrives before the operator confirms.
	testdb.InsertRaw(t, b.db, testdb.RawJob{State: "discarded", Queue: "analysis_default", Kind: "pro_acme_3",
		Metadata: `{"tierq:tier": "pro", "tierq:tenant": "acme"}`})
	drainAll(t, b.bundle)

	res = b.post(t, "/console/dead-letters/replay", url.Values{"id": carried, "reason": {"fixed"}, "tier": {"pro"}, "tenant": {"acme"}})
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	require.Contains(t, string(res.body), "Replayed 2 of the 2 dead letters confirmed.")
	require.Contains(t, html.UnescapeString(string(res.body)), "/console/dead-letters?tenant=acme&tier=pro")
	require.Equal(t, confirmed, b.deadLetterIDs(t, "replayed_by = 'alice'"))
	require.Equal(t, 2, b.db.Count(t, `SELECT count(*) FROM river_job WHERE kind IN ('pro_acme_1', 'pro_acme_2')`))
	require.Equal(t, 2, b.db.Count(t, `SELECT count(*) FROM river_job`), "not pro_acme_3")
}

// TestDeadLetterFiltersAPI: GET /v1/dead-letters filters by tier and
// tenant, and refuses a bad value with a 400 in JSON; the bulk replay
// takes the same filters, and either is a filter that lets it run without
// "all".
func TestDeadLetterFiltersAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	seedFilterDeadLetters(t, b)
	kinds := func(query string) []string {
		t.Helper()
		res := b.do(t, "GET", "/v1/dead-letters?"+query, adminToken, nil)
		require.Equal(t, http.StatusOK, res.status, string(res.body))
		out := []string{}
		for _, d := range res.json(t)["dead_letters"].([]any) {
			out = append(out, d.(map[string]any)["kind"].(string))
		}
		return out
	}
	require.Equal(t, []string{"pro_beta", "pro_acme_2", "pro_acme_1"}, kinds("tier=pro"))
	require.Equal(t, []string{"free_acme", "pro_acme_2", "pro_acme_1"}, kinds("tenant=acme"))
	require.Equal(t, []string{"free_acme"}, kinds("tenant=acme&tier=free"))
	require.Equal(t, []string{"array_meta", "no_tier"}, kinds("tier=unknown&pending=true"))
	require.Equal(t, []string{"free_acme"}, kinds("tenant=acme&limit=1"))
	require.Equal(t, []string{}, kinds("tenant=nobody"))
	// Each dead letter says its tier and tenant.
	first := b.do(t, "GET", "/v1/dead-letters?tenant=acme&tier=free", adminToken, nil).json(t)["dead_letters"].([]any)[0].(map[string]any)
	require.Equal(t, "free", first["tier"])
	require.Equal(t, "acme", first["tenant"])
	first = b.do(t, "GET", "/v1/dead-letters?tier=unknown&limit=1", adminToken, nil).json(t)["dead_letters"].([]any)[0].(map[string]any)
	require.Equal(t, "array_meta", first["kind"])
	require.Equal(t, "unknown", first["tier"])
	require.Equal(t, "", first["tenant"], "metadata that is not an object names no tenant")

	for _, tt := range []struct{ query, want string }{
		{"tier=gold", "invalid dead-letter request: the tier is one of free, pro, pro_plus, enterprise or unknown"},
		{"tier=", ""},
		{"tenant=" + strings.Repeat("t", 65537), "invalid dead-letter request: the tenant is at most 65536 bytes"},
		{"tenant=a%00", "query parameter tenant: NUL (U+0000) at byte 1"},
		{"tenant=%FF", "query parameter tenant: invalid UTF-8 at byte 0"},
		{"tier=%00", "query parameter tier: NUL (U+0000) at byte 0"},
	} {
		res := b.do(t, "GET", "/v1/dead-letters?"+tt.query, adminToken, nil)
		if tt.want == "" {
			require.Equal(t, http.StatusOK, res.status, "an empty tier is any tier")
			continue
		}
		require.Equal(t, http.StatusBadRequest, res.status, tt.query)
		require.Equal(t, tt.want, res.json(t)["error"], tt.query)
	}

	res := b.do(t, "POST", "/v1/dead-letters/replay", adminToken, map[string]any{"actor": "alice", "tier": "gold"})
	require.Equal(t, http.StatusBadRequest, res.status)
	require.Equal(t, "invalid dead-letter request: the tier is one of free, pro, pro_plus, enterprise or unknown", res.json(t)["error"])
	one := b.do(t, "GET", "/v1/dead-letters?tenant=beta", adminToken, nil).json(t)["dead_letters"].([]any)[0].(map[string]any)["id"]
	res = b.do(t, "POST", "/v1/dead-letters/"+jsonID(one)+"/replay", adminToken, map[string]any{"actor": "alice", "tenant": "beta"})
	require.Equal(t, http.StatusBadRequest, res.status)
	require.Equal(t, 0, b.db.Count(t, `SELECT count(*) FROM river_job`))

	res = b.do(t, "POST", "/v1/dead-letters/replay", adminToken, map[string]any{"actor": "alice", "tenant": "acme", "tier": "pro"})
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	require.EqualValues(t, 2, res.json(t)["replayed"])
	require.Equal(t, 2, b.db.Count(t, `SELECT count(*) FROM river_job WHERE kind IN ('pro_acme_1', 'pro_acme_2')`))
	require.Equal(t, 2, b.db.Count(t, `SELECT count(*) FROM river_job`))
	require.Equal(t, []string{"free_acme"}, kinds("tenant=acme&pending=true"))
}

// jsonID is an id decoded from JSON (a float64) as a path segment.
func jsonID(v any) string { return strconv.FormatInt(int64(v.(float64)), 10) }
