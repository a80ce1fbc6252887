package api_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/tiers"
)

// TestReplayedDeadLetterKeepsItsUniqueness: an analysis of target T is
// dead-lettered and replayed; posting T again finds the replayed job
// (duplicate: true), and a forced replay while that job is live is refused
// with 409 naming it. Before dead letters kept unique_key and
// unique_states, the replayed job had no unique key and the post inserted
// a second job for T.
func TestReplayedDeadLetterKeepsItsUniqueness(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.subscribe(t, "u1", tiers.Pro)
	const target = "/srv/repos/unique-after-replay"

	res := b.do(t, "POST", "/v1/jobs", producerToken, analysisBody("u1", target))
	require.Equal(t, http.StatusCreated, res.status, string(res.body))
	first := int64(res.json(t)["id"].(float64))
	// River discards it after its last attempt (the unique key stays on the
	// row; discarded is not one of the states it holds).
	_, err := b.db.Pool.Exec(t.Context(), `UPDATE river_job SET state = 'discarded', finalized_at = now() WHERE id = $1`, first)
	require.NoError(t, err)
	drainAll(t, b)
	var deadLetter int64
	require.NoError(t, b.db.Pool.QueryRow(t.Context(), `SELECT id FROM dead_letter_jobs WHERE job_id = $1 AND unique_key IS NOT NULL`, first).Scan(&deadLetter))

	replay := fmt.Sprintf("/v1/dead-letters/%d/replay", deadLetter)
	res = b.do(t, "POST", replay, adminToken, map[string]any{"actor": "alice"})
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	replayed := int64(res.json(t)["job_id"].(float64))

	res = b.do(t, "POST", "/v1/jobs", producerToken, analysisBody("u1", target))
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	require.Equal(t, true, res.json(t)["duplicate"])
	require.EqualValues(t, replayed, res.json(t)["id"])
	live := `SELECT count(*) FROM river_job WHERE args->>'target' = $1 AND state NOT IN ('completed', 'cancelled', 'discarded')`
	require.Equal(t, 1, b.db.Count(t, live, target))

	// force replays a replayed dead letter again, but never a second live job.
	res = b.do(t, "POST", replay, adminToken, map[string]any{"actor": "alice", "force": true})
	require.Equal(t, http.StatusConflict, res.status, string(res.body))
	require.EqualValues(t, replayed, res.json(t)["duplicate_of"])
	require.Contains(t, res.json(t)["error"], fmt.Sprintf("job %d (available) holds the same unique key", replayed))
	require.Equal(t, 1, b.db.Count(t, live, target))

	// Once the replayed job has finished, force replays again.
	_, err = b.db.Pool.Exec(t.Context(), `UPDATE river_job SET state = 'completed', finalized_at = now() WHERE id = $1`, replayed)
	require.NoError(t, err)
	res = b.do(t, "POST", replay, adminToken, map[string]any{"actor": "alice", "force": true})
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	again := int64(res.json(t)["job_id"].(float64))
	res = b.do(t, "POST", "/v1/jobs", producerToken, analysisBody("u1", target))
	require.Equal(t, true, res.json(t)["duplicate"])
	require.EqualValues(t, again, res.json(t)["id"])
}

// TestEndpointsReadRowsOfAnyShape: river_job and dead_letter_jobs rows
// whose args or metadata are arrays, scalars, null, over 1 MiB or nested
// 300 levels deep, and rows whose scheduled_at is infinite, do not make the
// API's listings, job view, priority-stats or metrics fail.
func TestEndpointsReadRowsOfAnyShape(t *testing.T) {
	t.Parallel()
	b := setup(t)

	shapes := testdb.BadShapes()
	var live []int64
	for _, shape := range shapes {
		for _, state := range []string{"available", "discarded"} {
			live = append(live,
				testdb.InsertRaw(t, b.db, testdb.RawJob{Kind: "analysis", Queue: "analysis_default", State: state, Args: shape}),
				testdb.InsertRaw(t, b.db, testdb.RawJob{Kind: "analysis", Queue: "analysis_default", State: state, Metadata: shape}))
		}
	}
	// Half of the discarded rows become dead letters, half stay in river_job.
	drainAll(t, b)
	for _, shape := range shapes {
		testdb.InsertRaw(t, b.db, testdb.RawJob{Kind: "analysis", Queue: "analysis_default", State: "discarded", Args: shape, Metadata: shape})
	}

	// Infinite scheduled_at, both ways (their own job view is River's
	// JobGet, which cannot read them; the listings must), written past
	// migration 00010's check, as an operator who dropped it could.
	testdb.AllowInfinite(t, b.db)
	for _, at := range []string{"-infinity", "infinity"} {
		id := testdb.InsertRaw(t, b.db, testdb.RawJob{Kind: "analysis", Queue: "analysis_default"})
		_, err := b.db.Pool.Exec(t.Context(), `UPDATE river_job SET scheduled_at = $2::timestamptz WHERE id = $1`, id, at)
		require.NoError(t, err)
	}

	for _, path := range []string{
		"/v1/queues", "/v1/queues/analysis_default/priority-stats", "/v1/dead-letters?limit=1000", "/metrics",
	} {
		res := b.do(t, "GET", path, adminToken, nil)
		require.Equal(t, http.StatusOK, res.status, "%s: %.300s", path, res.body)
	}
	require.Contains(t, string(b.do(t, "GET", "/metrics", "", nil).body), "tierq_metrics_database_up 1",
		"the metrics' read of the database succeeded")
	stats := b.do(t, "GET", "/v1/queues/analysis_default/priority-stats", adminToken, nil).json(t)
	require.EqualValues(t, 2*len(shapes)+2, stats["priorities"].([]any)[3].(map[string]any)["counts"].(map[string]any)["available"])
	page := b.do(t, "GET", "/v1/dead-letters?limit=1000", adminToken, nil).json(t)
	require.Len(t, page["dead_letters"], 2*len(shapes))
	for _, d := range page["dead_letters"].([]any) {
		res := b.do(t, "GET", fmt.Sprintf("/v1/dead-letters/%v", d.(map[string]any)["id"]), adminToken, nil)
		require.Equal(t, http.StatusOK, res.status, "%.300s", res.body)
	}
	for _, id := range live {
		res := b.do(t, "GET", fmt.Sprintf("/v1/jobs/%d", id), producerToken, nil)
		require.Equal(t, http.StatusOK, res.status, "job %d: %.300s", id, res.body)
	}
	// Escalating one of them and replaying every dead letter works too.
	res := b.do(t, "PATCH", fmt.Sprintf("/v1/jobs/%d", live[len(live)-3]), adminToken,
		map[string]any{"queue_class": "priority", "actor": "alice", "reason": "bad row"})
	require.Equal(t, http.StatusOK, res.status, "%.300s", res.body)
	res = b.do(t, "POST", "/v1/dead-letters/replay", adminToken, map[string]any{"actor": "alice", "all": true})
	require.Equal(t, http.StatusOK, res.status, "%.300s", res.body)
	require.EqualValues(t, 2*len(shapes), res.json(t)["replayed"])
}
