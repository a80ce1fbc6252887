package api_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"testing"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/jobs"
)

// seedMix inserts a known mix: analysis_default 3 available (priority 4),
// 1 scheduled; analysis_priority 2 available (priority 2) and 1 running;
// specview_default 1 retryable.
func seedMix(t *testing.T, b *bundle) {
	t.Helper()
	ctx := context.Background()
	insert := func(queue string, priority int, state string) {
		id := testdb.InsertWaiting(t, b.db, jobs.LoadTestArgs{}, &river.InsertOpts{Queue: queue, Priority: priority}, 0)
		if state != "available" {
			_, err := b.db.Pool.Exec(ctx, `UPDATE river_job SET state = $2::text::river_job_state WHERE id = $1`, id, state)
			require.NoError(t, err)
		}
	}
	for range 3 {
		insert("analysis_default", 4, "available")
	}
	insert("analysis_default", 4, "scheduled")
	insert("analysis_priority", 2, "available")
	insert("analysis_priority", 2, "available")
	insert("analysis_priority", 2, "running")
	insert("specview_default", 4, "retryable")
	// The oldest available analysis_default job has waited an hour.
	_, err := b.db.Pool.Exec(ctx, `
		UPDATE river_job SET scheduled_at = now() - interval '1 hour'
		WHERE id = (SELECT min(id) FROM river_job WHERE queue = 'analysis_default')`)
	require.NoError(t, err)
}

func TestQueuesAndPriorityStats(t *testing.T) {
	t.Parallel()
	b := setup(t)
	seedMix(t, b)

	res := b.do(t, "GET", "/v1/queues", adminToken, nil)
	require.Equal(t, http.StatusOK, res.status)
	byName := map[string]map[string]any{}
	for _, q := range res.json(t)["queues"].([]any) {
		byName[q.(map[string]any)["name"].(string)] = q.(map[string]any)
	}
	require.Len(t, byName, 7, "six service queues and scheduler")
	counts := func(queue string) map[string]any { return byName[queue]["counts"].(map[string]any) }
	require.EqualValues(t, 3, counts("analysis_default")["available"])
	require.EqualValues(t, 1, counts("analysis_default")["scheduled"])
	require.EqualValues(t, 2, counts("analysis_priority")["available"])
	require.EqualValues(t, 1, counts("analysis_priority")["running"])
	require.EqualValues(t, 1, counts("specview_default")["retryable"])
	require.EqualValues(t, 0, counts("specview_scheduled")["available"])
	require.InDelta(t, 3600, byName["analysis_default"]["oldest_available_seconds"], 60)
	require.InDelta(t, 0, byName["analysis_priority"]["oldest_available_seconds"], 60)

	res = b.do(t, "GET", "/v1/queues/analysis_default/priority-stats", adminToken, nil)
	require.Equal(t, http.StatusOK, res.status)
	stats := res.json(t)
	require.Equal(t, "analysis_default", stats["queue"])
	priorities := stats["priorities"].([]any)
	require.Len(t, priorities, 4)
	p4 := priorities[3].(map[string]any)
	require.EqualValues(t, 4, p4["priority"])
	require.EqualValues(t, 3, p4["counts"].(map[string]any)["available"])
	require.InDelta(t, 3600, p4["oldest_available_seconds"], 60)
	wait := p4["wait_seconds"].(map[string]any)
	require.InDelta(t, 0, wait["p50"], 60, "two of three waited ~0s")
	require.Greater(t, wait["p99"], 3000.0)
	require.EqualValues(t, 0, priorities[0].(map[string]any)["counts"].(map[string]any)["available"])

	require.Equal(t, http.StatusNotFound, b.do(t, "GET", "/v1/queues/nope/priority-stats", adminToken, nil).status)
	require.Equal(t, http.StatusNotFound, b.do(t, "GET", "/v1/queues/"+url.PathEscape("x' OR '1'='1")+"/priority-stats", adminToken, nil).status)
}

func TestMetricsMatchTheDatabase(t *testing.T) {
	t.Parallel()
	b := setup(t)
	seedMix(t, b)
	testdb.SeedDiscarded(t, b.db, 12) // 2 per service queue
	drainAll(t, b)

	metrics := string(b.do(t, "GET", "/metrics", "", nil).body)
	for _, want := range []string{
		`tierq_queue_depth{queue="analysis_default",state="available"} 3`,
		`tierq_queue_depth{queue="analysis_default",state="scheduled"} 1`,
		`tierq_queue_depth{queue="analysis_priority",state="available"} 2`,
		`tierq_queue_depth{queue="analysis_priority",state="running"} 1`,
		`tierq_queue_depth{queue="specview_default",state="retryable"} 1`,
		`tierq_queue_depth{queue="specview_scheduled",state="available"} 0`,
		`tierq_dlq_depth{queue="analysis_default"} 2`,
		`tierq_dlq_depth{queue="scheduler"} 0`,
		`tierq_tier_fallbacks_total{reason="lookup_error"} 0`,
		`tierq_metrics_database_up 1`,
	} {
		require.Contains(t, metrics, want)
	}
	oldest := regexp.MustCompile(`tierq_oldest_available_seconds\{queue="analysis_default"\} (\S+)`).FindStringSubmatch(metrics)
	require.Len(t, oldest, 2)
	age, err := strconv.ParseFloat(oldest[1], 64)
	require.NoError(t, err)
	require.InDelta(t, 3600, age, 60)

	// Cached: a change in the database shows after MetricsCacheFor, not at
	// the next scrape.
	_, err = b.db.Pool.Exec(context.Background(), `DELETE FROM river_job WHERE queue = 'analysis_default'`)
	require.NoError(t, err)
	require.Contains(t, string(b.do(t, "GET", "/metrics", "", nil).body), `tierq_queue_depth{queue="analysis_default",state="available"} 3`)
}

func TestDeadLetterEndpoints(t *testing.T) {
	t.Parallel()
	b := setup(t)
	testdb.SeedDiscarded(t, b.db, 12) // 2 per service queue
	drainAll(t, b)

	res := b.do(t, "GET", "/v1/dead-letters?limit=5", adminToken, nil)
	require.Equal(t, http.StatusOK, res.status)
	page := res.json(t)
	require.Len(t, page["dead_letters"], 5)
	cursor := page["next_cursor"].(string)
	seen := map[float64]bool{}
	for _, d := range page["dead_letters"].([]any) {
		seen[d.(map[string]any)["id"].(float64)] = true
	}
	for cursor != "" {
		page = b.do(t, "GET", "/v1/dead-letters?limit=5&cursor="+cursor, adminToken, nil).json(t)
		for _, d := range page["dead_letters"].([]any) {
			id := d.(map[string]any)["id"].(float64)
			require.False(t, seen[id], "no row on two pages")
			seen[id] = true
		}
		cursor, _ = page["next_cursor"].(string)
	}
	require.Len(t, seen, 12)

	filtered := b.do(t, "GET", "/v1/dead-letters?queue=analysis_default&kind=analysis&since=1h&pending=true", adminToken, nil).json(t)
	require.Len(t, filtered["dead_letters"], 2)
	require.Empty(t, b.do(t, "GET", "/v1/dead-letters?queue="+url.QueryEscape("x' OR '1'='1"), adminToken, nil).json(t)["dead_letters"])
	for _, bad := range []string{"limit=0", "limit=5000", "limit=x", "cursor=-3", "cursor=abc", "since=yesterday", "pending=maybe",
		"queue=" + url.QueryEscape(string(make([]byte, 200)))} {
		require.Equal(t, http.StatusBadRequest, b.do(t, "GET", "/v1/dead-letters?"+bad, adminToken, nil).status, bad)
	}

	one := filtered["dead_letters"].([]any)[0].(map[string]any)
	id := fmt.Sprintf("%v", one["id"])
	got := b.do(t, "GET", "/v1/dead-letters/"+id, adminToken, nil)
	require.Equal(t, http.StatusOK, got.status)
	require.Len(t, got.json(t)["errors"], 2)
	require.Equal(t, http.StatusNotFound, b.do(t, "GET", "/v1/dead-letters/424242", adminToken, nil).status)
	require.Equal(t, http.StatusBadRequest, b.do(t, "GET", "/v1/dead-letters/1e3", adminToken, nil).status)

	// Replay one: 200, then 409; force: 200; missing: 404; bad: 400.
	replay := "/v1/dead-letters/" + id + "/replay"
	res = b.do(t, "POST", replay, adminToken, map[string]any{"actor": "alice", "to_queue": "analysis_priority"})
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	require.Equal(t, "analysis_priority", res.json(t)["queue"])
	require.Equal(t, http.StatusConflict, b.do(t, "POST", replay, adminToken, map[string]any{"actor": "alice"}).status)
	require.Equal(t, http.StatusOK, b.do(t, "POST", replay, adminToken, map[string]any{"actor": "alice", "force": true}).status)
	require.Equal(t, http.StatusNotFound, b.do(t, "POST", "/v1/dead-letters/424242/replay", adminToken, map[string]any{"actor": "a"}).status)
	for name, body := range map[string]any{
		"no actor":        map[string]any{},
		"other service":   map[string]any{"actor": "a", "to_queue": "specview_priority"},
		"unknown queue":   map[string]any{"actor": "a", "to_queue": "nope"},
		"filter on one":   map[string]any{"actor": "a", "queue": "analysis_default"},
		"unknown field":   map[string]any{"actor": "a", "priority": 1},
		"malformed":       `{"actor":`,
		"wrong type":      map[string]any{"actor": 7},
		"force as string": map[string]any{"actor": "a", "force": "yes"},
	} {
		other := fmt.Sprintf("%v", filtered["dead_letters"].([]any)[1].(map[string]any)["id"])
		require.Equal(t, http.StatusBadRequest, b.do(t, "POST", "/v1/dead-letters/"+other+"/replay", adminToken, body).status, name)
	}
	require.Equal(t, 2, b.db.Count(t, `SELECT count(*) FROM river_job`), "only the two good replays inserted")

	// Bulk replay with filters, bounded per request.
	res = b.do(t, "POST", "/v1/dead-letters/replay", adminToken, map[string]any{"actor": "alice", "kind": "specview", "limit": 4})
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	require.EqualValues(t, 4, res.json(t)["replayed"])
	require.Equal(t, true, res.json(t)["more"])
	res = b.do(t, "POST", "/v1/dead-letters/replay", adminToken, map[string]any{"actor": "alice", "kind": "specview"})
	require.EqualValues(t, 2, res.json(t)["replayed"])
	require.Equal(t, false, res.json(t)["more"])
	for name, body := range map[string]any{
		"no actor":      map[string]any{"kind": "specview"},
		"no filter":     map[string]any{"actor": "alice"},
		"limit too big": map[string]any{"actor": "alice", "all": true, "limit": 1_000_000},
	} {
		require.Equal(t, http.StatusBadRequest, b.do(t, "POST", "/v1/dead-letters/replay", adminToken, body).status, name)
	}
	require.Equal(t, 8, b.db.Count(t, `SELECT count(*) FROM river_job`))
	res = b.do(t, "POST", "/v1/dead-letters/replay", adminToken, map[string]any{"actor": "alice", "all": true})
	require.EqualValues(t, 5, res.json(t)["replayed"], "the five analysis dead letters not replayed yet")

	// Delete: 204, then 404.
	require.Equal(t, http.StatusNoContent, b.do(t, "DELETE", "/v1/dead-letters/"+id, adminToken, nil).status)
	require.Equal(t, http.StatusNotFound, b.do(t, "DELETE", "/v1/dead-letters/"+id, adminToken, nil).status)
}
