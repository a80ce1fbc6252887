package kubernetes_test

import (
	"context"
	"database/sql"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
)

// seedJob is a group of river_job rows the KEDA queries are run against.
type seedJob struct {
	queue, state string
	// at is scheduled_at: now() plus this interval, or a literal timestamp
	// ('-infinity').
	at   string
	held bool // fair share holds it: metadata has tierq:held_at
	n    int
}

// seed is a mix of every state around each queue of the manifests, and a
// queue no Deployment serves; the comments give what each query must count.
var seed = []seedJob{
	// analysis_priority: load 8 (3 available, 2 running, 1 held, a
	// scheduled and a retryable job whose time has come), wait 100 (the held
	// job; not the running, finished, not-held pending or -infinity ones).
	{queue: "analysis_priority", state: "available", at: "-40 seconds", n: 1},
	{queue: "analysis_priority", state: "available", at: "-10 seconds", n: 1},
	{queue: "analysis_priority", state: "available", at: "-infinity", n: 1},
	{queue: "analysis_priority", state: "running", at: "-300 seconds", n: 2},
	{queue: "analysis_priority", state: "pending", at: "-100 seconds", held: true, n: 1},
	{queue: "analysis_priority", state: "pending", at: "-500 seconds", n: 1},
	{queue: "analysis_priority", state: "scheduled", at: "1 hour", n: 1},
	{queue: "analysis_priority", state: "scheduled", at: "-5 seconds", n: 1},
	{queue: "analysis_priority", state: "retryable", at: "-20 seconds", n: 1},
	{queue: "analysis_priority", state: "retryable", at: "60 seconds", n: 1},
	{queue: "analysis_priority", state: "completed", at: "-1000 seconds", n: 1},
	{queue: "analysis_priority", state: "cancelled", at: "-1000 seconds", n: 1},
	{queue: "analysis_priority", state: "discarded", at: "-1000 seconds", n: 1},
	// analysis_default: load 6.
	{queue: "analysis_default", state: "available", at: "-300 seconds", n: 3},
	{queue: "analysis_default", state: "pending", at: "-50 seconds", held: true, n: 2},
	{queue: "analysis_default", state: "running", at: "-10 seconds", n: 1},
	{queue: "analysis_default", state: "scheduled", at: "60 seconds", n: 1},
	{queue: "analysis_default", state: "completed", at: "-10 seconds", n: 4},
	// analysis_scheduled: load 3.
	{queue: "analysis_scheduled", state: "available", at: "-2 hours", n: 1},
	{queue: "analysis_scheduled", state: "running", at: "-1 minute", n: 1},
	{queue: "analysis_scheduled", state: "scheduled", at: "-30 seconds", n: 1},
	{queue: "analysis_scheduled", state: "retryable", at: "10 minutes", n: 1},
	// specview_priority: load 4, wait 30.
	{queue: "specview_priority", state: "available", at: "-30 seconds", n: 1},
	{queue: "specview_priority", state: "running", at: "-45 seconds", n: 3},
	// specview_default: load 5; specview_scheduled: empty, load 0.
	{queue: "specview_default", state: "available", at: "-1 second", n: 5},
	{queue: "specview_default", state: "discarded", at: "-1 minute", n: 2},
	// thumbnails_priority: load 1, wait 0 (nothing waits: one running, one
	// pending that fair share did not hold).
	{queue: "thumbnails_priority", state: "running", at: "-900 seconds", n: 1},
	{queue: "thumbnails_priority", state: "pending", at: "-900 seconds", n: 1},
	// thumbnails_default: load 1; thumbnails_scheduled: load 0.
	{queue: "thumbnails_default", state: "available", at: "-3 seconds", n: 1},
	// A queue no Deployment serves, older than anything above.
	{queue: "mailer_priority", state: "available", at: "-9999 seconds", held: false, n: 2},
	{queue: "mailer_priority", state: "pending", at: "-9999 seconds", held: true, n: 2},
}

// wantQuery is what each KEDA trigger's query returns on seed, by trigger
// name. Every PostgreSQL trigger of every build must be here.
var wantQuery = map[string]float64{
	"analysis-priority-load":    8,
	"analysis-priority-wait":    100,
	"analysis-default-load":     6,
	"analysis-scheduled-load":   3,
	"specview-priority-load":    4,
	"specview-priority-wait":    30,
	"specview-default-load":     5,
	"specview-scheduled-load":   0,
	"thumbnails-priority-load":  1,
	"thumbnails-priority-wait":  0,
	"thumbnails-default-load":   1,
	"thumbnails-scheduled-load": 0,
}

// seedSQL inserts n rows of one seedJob.
const seedSQL = `
INSERT INTO river_job (kind, args, queue, state, priority, max_attempts, attempt, scheduled_at, attempted_at, finalized_at, metadata)
SELECT 'k8s_seed', '{}', $1, $2::river_job_state, 4, 5,
       CASE WHEN $2 IN ('available', 'scheduled', 'pending') THEN 0 ELSE 1 END,
       CASE WHEN $3 LIKE '%infinity' THEN $3::timestamptz ELSE now() + $3::interval END,
       CASE WHEN $2 IN ('available', 'scheduled', 'pending') THEN NULL ELSE now() END,
       CASE WHEN $2 IN ('completed', 'cancelled', 'discarded') THEN now() END,
       CASE WHEN $4 THEN jsonb_build_object('tierq:held_at', now(), 'tierq:tenant', 'u_flood')
            ELSE jsonb_build_object('tierq:tenant', 'u_other') END
FROM generate_series(1, $5)`

// TestKEDAQueriesOnPostgreSQL runs every PostgreSQL trigger's query of
// every build, as KEDA's scaler does (database/sql on pgx, one row scanned
// into a float64), against real PostgreSQL holding seed, and compares what
// it returns with wantQuery. The seed and the queries share one
// transaction, so now() is the same instant for both and a wait is exact.
// Each query also has an index behind it: with sequential scans off, its
// plan reads river_job through an index only.
func TestKEDAQueriesOnPostgreSQL(t *testing.T) {
	t.Parallel()

	queries := map[string]string{} // query → trigger name
	for _, b := range builds(t) {
		for _, s := range scalers(t, b) {
			for _, tr := range s.triggers {
				if tr.source != "postgresql" {
					continue
				}
				_, ok := wantQuery[tr.name]
				require.True(t, ok, "%s: trigger %s has no expected value", b.variant.name, tr.name)
				if other, ok := queries[tr.query]; ok {
					require.Equal(t, other, tr.name, "the same query under two names")
				}
				queries[tr.query] = tr.name
			}
		}
	}
	var names []string
	for _, name := range queries {
		names = append(names, name)
	}
	require.ElementsMatch(t, mapsKeys(wantQuery), names, "every expected trigger is in some build")

	db := testdb.New(t)
	conn := stdlib.OpenDB(*db.Pool.Config().ConnConfig.Copy()) // what KEDA's scaler opens (sql.Open("pgx", …))
	t.Cleanup(func() { conn.Close() })
	ctx := context.Background()
	tx, err := conn.BeginTx(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback() })
	for _, s := range seed {
		_, err := tx.ExecContext(ctx, seedSQL, s.queue, s.state, s.at, s.held, s.n)
		require.NoError(t, err, "%+v", s)
	}
	_, err = tx.ExecContext(ctx, "ANALYZE river_job")
	require.NoError(t, err)

	for query, name := range queries {
		var got float64
		require.NoError(t, tx.QueryRowContext(ctx, query).Scan(&got), "%s:\n%s", name, query)
		require.Equal(t, wantQuery[name], got, "%s:\n%s", name, query)
		requireIndexed(t, ctx, tx, name, query)
	}
}

// indexScan is an index scan node of a plan, and the line after it.
var indexScan = regexp.MustCompile(`(?:Index Scan|Index Only Scan|Bitmap Index Scan) (?:using|on) (\S+)`)

// requireIndexed fails unless every read of river_job in query's plan, with
// sequential scans off, is a range of an index: of River's fetching index
// (state, queue, priority, scheduled_at, id) by state and queue, or of fair
// share's index of held jobs. A scan of the whole fetching index filtered
// by queue would read every finished job River still keeps.
func requireIndexed(t *testing.T, ctx context.Context, tx *sql.Tx, name, query string) {
	t.Helper()
	_, err := tx.ExecContext(ctx, "SET LOCAL enable_seqscan = off")
	require.NoError(t, err)
	defer func() {
		_, err := tx.ExecContext(ctx, "SET LOCAL enable_seqscan = on")
		require.NoError(t, err)
	}()
	rows, err := tx.QueryContext(ctx, "EXPLAIN "+query)
	require.NoError(t, err)
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		plan = append(plan, strings.TrimSpace(line))
	}
	require.NoError(t, rows.Err())
	text := name + "'s plan:\n" + strings.Join(plan, "\n")
	require.NotContains(t, text, "Seq Scan", text)
	scans := 0
	for i, line := range plan {
		m := indexScan.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		scans++
		switch m[1] {
		case "river_job_tierq_held_idx":
		case "river_job_prioritized_fetching_index":
			require.Less(t, i+1, len(plan), text)
			require.True(t, strings.HasPrefix(plan[i+1], "Index Cond: ((state = "), "%s\nthe fetching index is read by state", text)
		default:
			t.Fatalf("%s\nan index other than River's fetching index and fair share's", text)
		}
	}
	require.Positive(t, scans, text)
}

func mapsKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
