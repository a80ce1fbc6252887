package kubernetes_test

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
)

// loadSQLFormat is every load trigger's query (fmt: the queue, the most
// jobs it counts). It counts the jobs the queue's workers have to hold:
// running and available (River's fetching index, by state and queue), due
// scheduled and retryable ones (the same index, a range per priority up to
// now()), and those fair share holds (river_job_tierq_held_idx, by queue).
// It stops at the limit, the scaler's maxReplicaCount times the trigger's
// target: at that count KEDA already asks for the most replicas, so more
// cannot change the decision, and a backlog of a million costs what one of
// the limit does. A queue paused in River counts nothing.
const loadSQLFormat = `SELECT count(*)::float8 FROM (
    SELECT 1 FROM river_job
    WHERE state IN ('available', 'running') AND queue = '%[1]s'
    UNION ALL
    SELECT 1 FROM unnest('{scheduled,retryable}'::river_job_state[]) AS s(state),
         generate_series(1, 4) AS p(priority),
         LATERAL (SELECT FROM river_job AS j
                  WHERE j.state = s.state AND j.queue = '%[1]s' AND j.priority = p.priority
                    AND j.scheduled_at <= now()
                  LIMIT %[2]d) AS due
    UNION ALL
    SELECT 1 FROM river_job
    WHERE state = 'pending' AND metadata ? 'tierq:held_at' AND queue = '%[1]s'
    LIMIT %[2]d
) AS live
WHERE NOT EXISTS (SELECT 1 FROM river_queue WHERE name = '%[1]s' AND paused_at IS NOT NULL)`

// waitSQLFormat is every wait trigger's query (fmt: the queue, the cap in
// seconds). It is the wait of the oldest job waiting for a worker: the
// oldest available or due scheduled or retryable one, one index probe per
// (state, priority) into River's fetching index (ORDER BY scheduled_at
// LIMIT 1, as internal/queuestats reads the oldest available job), and the
// oldest held one, one probe per (tenant, priority) into
// river_job_tierq_held_idx after a loose scan of its tenants; so its cost
// follows the tenants holding work, never the jobs. A hand-written
// infinite scheduled_at has no wait and is passed over. The cap is the
// scaler's maxReplicaCount times the trigger's target: at that wait even
// one ready replica asks for the most replicas (a Value target scales the
// ready replicas by wait / target), so a longer wait cannot change the
// decision. A queue paused in River waits for nothing.
const waitSQLFormat = `WITH RECURSIVE tenants(tenant) AS (
    (SELECT (CASE WHEN octet_length(coalesce(metadata->>'tierq:tenant', '')) <= 200 THEN coalesce(metadata->>'tierq:tenant', '') ELSE left(metadata->>'tierq:tenant', 200) || '#md5:' || md5(metadata->>'tierq:tenant') END) FROM river_job
     WHERE state = 'pending' AND metadata ? 'tierq:held_at' AND queue = '%[1]s'
     ORDER BY 1 LIMIT 1)
    UNION ALL
    SELECT (SELECT (CASE WHEN octet_length(coalesce(j.metadata->>'tierq:tenant', '')) <= 200 THEN coalesce(j.metadata->>'tierq:tenant', '') ELSE left(j.metadata->>'tierq:tenant', 200) || '#md5:' || md5(j.metadata->>'tierq:tenant') END) FROM river_job AS j
            WHERE j.state = 'pending' AND j.metadata ? 'tierq:held_at' AND j.queue = '%[1]s'
              AND (CASE WHEN octet_length(coalesce(j.metadata->>'tierq:tenant', '')) <= 200 THEN coalesce(j.metadata->>'tierq:tenant', '') ELSE left(j.metadata->>'tierq:tenant', 200) || '#md5:' || md5(j.metadata->>'tierq:tenant') END) > t.tenant
            ORDER BY 1 LIMIT 1)
    FROM tenants AS t WHERE t.tenant IS NOT NULL
)
SELECT least(coalesce(extract(epoch FROM now() - min(w.at)), 0), %[2]d)::float8 FROM (
    SELECT (SELECT j.scheduled_at FROM river_job AS j
            WHERE j.state = s.state AND j.queue = '%[1]s' AND j.priority = p.priority
              AND j.scheduled_at > '-infinity' AND j.scheduled_at <= now()
            ORDER BY j.scheduled_at LIMIT 1)
    FROM unnest('{available,scheduled,retryable}'::river_job_state[]) AS s(state),
         generate_series(1, 4) AS p(priority)
    UNION ALL
    SELECT (SELECT j.scheduled_at FROM river_job AS j
            WHERE j.state = 'pending' AND j.metadata ? 'tierq:held_at' AND j.queue = '%[1]s'
              AND (CASE WHEN octet_length(coalesce(j.metadata->>'tierq:tenant', '')) <= 200 THEN coalesce(j.metadata->>'tierq:tenant', '') ELSE left(j.metadata->>'tierq:tenant', 200) || '#md5:' || md5(j.metadata->>'tierq:tenant') END) = t.tenant AND j.priority = p.priority
              AND j.scheduled_at > '-infinity' AND j.scheduled_at <= now()
            ORDER BY j.scheduled_at LIMIT 1)
    FROM tenants AS t, generate_series(1, 4) AS p(priority)
    WHERE t.tenant IS NOT NULL
) AS w(at)
WHERE NOT EXISTS (SELECT 1 FROM river_queue WHERE name = '%[1]s' AND paused_at IS NOT NULL)`

// loadSQL is the load query of queue, counting at most limit jobs.
func loadSQL(queue string, limit int) string { return fmt.Sprintf(loadSQLFormat, queue, limit) }

// waitSQL is the wait query of queue, capped at capSeconds.
func waitSQL(queue string, capSeconds int) string {
	return fmt.Sprintf(waitSQLFormat, queue, capSeconds)
}

// seedJob is a group of river_job rows the KEDA queries are run against.
type seedJob struct {
	queue, state string
	// at is scheduled_at: now() plus this interval, or a literal timestamp
	// ('-infinity').
	at   string
	held bool // fair share holds it: metadata has tierq:held_at
	n    int
	// tenant is its metadata's tierq:tenant (default u_other); priority its
	// River priority (default 4).
	tenant   string
	priority int
}

// seed is a mix of every state around each queue of the manifests, and a
// queue no Deployment serves; the comments give what each query must count.
// Waits stay under the wait triggers' caps (16s for the analyzer's, 8s for
// the others'), except where a cap is what is shown.
var seed = []seedJob{
	// analysis_priority: load 11 (3 available, 2 running, 4 held of two
	// tenants, a scheduled and a retryable job whose time has come), wait 15
	// (u_trickle's held job, at priority 2 behind u_flood's three at 4; not
	// the running, finished, not-held pending or -infinity ones). River
	// knows the queue and it is not paused.
	{queue: "analysis_priority", state: "available", at: "-4 seconds", priority: 1, n: 1},
	{queue: "analysis_priority", state: "available", at: "-1 second", n: 1},
	{queue: "analysis_priority", state: "available", at: "-infinity", n: 1},
	{queue: "analysis_priority", state: "running", at: "-300 seconds", n: 2},
	{queue: "analysis_priority", state: "pending", at: "-2 seconds", held: true, tenant: "u_flood", n: 3},
	{queue: "analysis_priority", state: "pending", at: "-15 seconds", held: true, tenant: "u_trickle", priority: 2, n: 1},
	{queue: "analysis_priority", state: "pending", at: "-500 seconds", n: 1},
	{queue: "analysis_priority", state: "scheduled", at: "1 hour", n: 1},
	{queue: "analysis_priority", state: "scheduled", at: "-5 seconds", n: 1},
	{queue: "analysis_priority", state: "retryable", at: "-10 seconds", n: 1},
	{queue: "analysis_priority", state: "retryable", at: "60 seconds", n: 1},
	{queue: "analysis_priority", state: "completed", at: "-1000 seconds", n: 1},
	{queue: "analysis_priority", state: "cancelled", at: "-1000 seconds", n: 1},
	{queue: "analysis_priority", state: "discarded", at: "-1000 seconds", n: 1},
	// analysis_default: load 6.
	{queue: "analysis_default", state: "available", at: "-300 seconds", n: 3},
	{queue: "analysis_default", state: "pending", at: "-50 seconds", held: true, tenant: "u_flood", n: 2},
	{queue: "analysis_default", state: "running", at: "-10 seconds", n: 1},
	{queue: "analysis_default", state: "scheduled", at: "60 seconds", n: 1},
	{queue: "analysis_default", state: "completed", at: "-10 seconds", n: 4},
	// analysis_scheduled: load 3.
	{queue: "analysis_scheduled", state: "available", at: "-2 hours", n: 1},
	{queue: "analysis_scheduled", state: "running", at: "-1 minute", n: 1},
	{queue: "analysis_scheduled", state: "scheduled", at: "-30 seconds", n: 1},
	{queue: "analysis_scheduled", state: "retryable", at: "10 minutes", n: 1},
	// specview_priority: the caps. 16 live jobs, load 12 (worker-specgen's
	// max 4 replicas x target 3); the oldest has waited 30s, wait 8 (4 x 2s).
	{queue: "specview_priority", state: "available", at: "-30 seconds", n: 1},
	{queue: "specview_priority", state: "available", at: "-1 second", n: 12},
	{queue: "specview_priority", state: "running", at: "-45 seconds", n: 3},
	// specview_default: load 5; specview_scheduled: empty, load 0.
	{queue: "specview_default", state: "available", at: "-1 second", n: 5},
	{queue: "specview_default", state: "discarded", at: "-1 minute", n: 2},
	// thumbnails_priority: paused in River, so load 0 and wait 0; unpaused,
	// load 3 and wait 5 (unpaused below: the running job, the two
	// available, not the pending one that fair share did not hold).
	{queue: "thumbnails_priority", state: "running", at: "-900 seconds", n: 1},
	{queue: "thumbnails_priority", state: "pending", at: "-900 seconds", n: 1},
	{queue: "thumbnails_priority", state: "available", at: "-5 seconds", n: 2},
	// thumbnails_default: load 1; thumbnails_scheduled: load 0.
	{queue: "thumbnails_default", state: "available", at: "-3 seconds", n: 1},
	// A queue no Deployment serves, older than anything above.
	{queue: "mailer_priority", state: "available", at: "-9999 seconds", held: false, n: 2},
	{queue: "mailer_priority", state: "pending", at: "-9999 seconds", held: true, n: 2},
}

// seedQueues are the rows of river_queue beside seed: River knows a queue
// once a client has served it, and River UI or QueuePause pauses it.
var seedQueues = []struct {
	name   string
	paused bool
}{
	{name: "analysis_priority", paused: false},
	{name: "thumbnails_priority", paused: true},
	{name: "mailer_priority", paused: true},
}

// wantQuery is what each KEDA trigger's query returns on seed, by trigger
// name. Every PostgreSQL trigger of every build must be here.
var wantQuery = map[string]float64{
	"analysis-priority-load":    11,
	"analysis-priority-wait":    15,
	"analysis-default-load":     6,
	"analysis-scheduled-load":   3,
	"specview-priority-load":    12,
	"specview-priority-wait":    8,
	"specview-default-load":     5,
	"specview-scheduled-load":   0,
	"thumbnails-priority-load":  0,
	"thumbnails-priority-wait":  0,
	"thumbnails-default-load":   1,
	"thumbnails-scheduled-load": 0,
}

// wantUnpaused is what the queries of seed's paused queue return once it is
// resumed.
var wantUnpaused = map[string]float64{
	"thumbnails-priority-load": 3,
	"thumbnails-priority-wait": 5,
}

// seedSQL inserts n rows of one seedJob.
const seedSQL = `
INSERT INTO river_job (kind, args, queue, state, priority, max_attempts, attempt, scheduled_at, attempted_at, finalized_at, metadata)
SELECT 'k8s_seed', '{}', $1, $2::river_job_state, $7, 5,
       CASE WHEN $2 IN ('available', 'scheduled', 'pending') THEN 0 ELSE 1 END,
       CASE WHEN $3 LIKE '%infinity' THEN $3::timestamptz ELSE now() + $3::interval END,
       CASE WHEN $2 IN ('available', 'scheduled', 'pending') THEN NULL ELSE now() END,
       CASE WHEN $2 IN ('completed', 'cancelled', 'discarded') THEN now() END,
       CASE WHEN $4 THEN jsonb_build_object('tierq:held_at', now(), 'tierq:tenant', $6::text)
            ELSE jsonb_build_object('tierq:tenant', $6::text) END
FROM generate_series(1, $5)`

// seedQueueSQL inserts one row of seedQueues.
const seedQueueSQL = `
INSERT INTO river_queue (name, paused_at, updated_at)
VALUES ($1, CASE WHEN $2 THEN now() END, now())`

// args are s's parameters of seedSQL.
func (s seedJob) args() []any {
	tenant, priority := cmp.Or(s.tenant, "u_other"), cmp.Or(s.priority, 4)
	if s.held && s.tenant == "" {
		tenant = "u_flood"
	}
	return []any{s.queue, s.state, s.at, s.held, s.n, tenant, priority}
}

// TestKEDAQueriesOnPostgreSQL runs every PostgreSQL trigger's query of
// every build, as KEDA's scaler does (database/sql on pgx, one row scanned
// into a float64), against real PostgreSQL holding seed and seedQueues, and
// compares what it returns with wantQuery; then resumes the paused queue
// and compares its queries with wantUnpaused. The seed and the queries
// share one transaction, so now() is the same instant for both and a wait
// is exact. Each query also has an index behind every read of river_job
// (requireIndexed).
func TestKEDAQueriesOnPostgreSQL(t *testing.T) {
	t.Parallel()

	type query struct{ name, sql string }
	var queries []query // one per distinct query: a trigger's cap may differ between builds
	for _, b := range builds(t) {
		for _, s := range scalers(t, b) {
			for _, tr := range s.triggers {
				if tr.source != "postgresql" {
					continue
				}
				_, ok := wantQuery[tr.name]
				require.True(t, ok, "%s: trigger %s has no expected value", b.variant.name, tr.name)
				i := slices.IndexFunc(queries, func(q query) bool { return q.sql == tr.query })
				if i >= 0 {
					require.Equal(t, queries[i].name, tr.name, "the same query under two names")
					continue
				}
				queries = append(queries, query{tr.name, tr.query})
			}
		}
	}
	var names []string
	for _, q := range queries {
		if !slices.Contains(names, q.name) {
			names = append(names, q.name)
		}
	}
	require.ElementsMatch(t, mapsKeys(wantQuery), names, "every expected trigger is in some build")

	db := testdb.New(t)
	// The seed's -infinity row is written past migration 00010's check, as
	// an operator who dropped it could: the wait queries still pass it over.
	testdb.AllowInfinite(t, db)
	conn := stdlib.OpenDB(*db.Pool.Config().ConnConfig.Copy()) // what KEDA's scaler opens (sql.Open("pgx", …))
	t.Cleanup(func() { conn.Close() })
	ctx := context.Background()
	tx, err := conn.BeginTx(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback() })
	for _, s := range seed {
		_, err := tx.ExecContext(ctx, seedSQL, s.args()...)
		require.NoError(t, err, "%+v", s)
	}
	for _, q := range seedQueues {
		_, err := tx.ExecContext(ctx, seedQueueSQL, q.name, q.paused)
		require.NoError(t, err, "%+v", q)
	}
	_, err = tx.ExecContext(ctx, "ANALYZE river_job")
	require.NoError(t, err)

	run := func(q query) float64 {
		t.Helper()
		var got float64
		require.NoError(t, tx.QueryRowContext(ctx, q.sql).Scan(&got), "%s:\n%s", q.name, q.sql)
		return got
	}
	for _, q := range queries {
		require.Equal(t, wantQuery[q.name], run(q), "%s:\n%s", q.name, q.sql)
		requireIndexed(t, ctx, tx, q.name, q.sql)
	}

	// A paused queue asks for nothing; resumed, its jobs count again.
	_, err = tx.ExecContext(ctx, "UPDATE river_queue SET paused_at = NULL WHERE name = 'thumbnails_priority'")
	require.NoError(t, err)
	resumed := 0
	for _, q := range queries {
		if want, ok := wantUnpaused[q.name]; ok {
			require.Equal(t, want, run(q), "%s, resumed:\n%s", q.name, q.sql)
			resumed++
		}
	}
	require.Equal(t, len(wantUnpaused), resumed)
}

// TestDocsShowTheQueries: the queries docs/kubernetes.md shows are the
// analyzer's in components/keda, as the tests above run them.
func TestDocsShowTheQueries(t *testing.T) {
	t.Parallel()

	want := "-- analysis-priority-load (target 5 per replica, at most 40 counted)\n" + loadSQL("analysis_priority", 40) +
		"\n\n-- analysis-priority-wait (target 2 seconds, at most 16)\n" + waitSQL("analysis_priority", 16) + "\n"
	require.Equal(t, want, docsBlock(t, "## Autoscaling", "sql"))
	b := builtNamed(t, "prod")
	var queries []string
	for _, s := range scalers(t, b) {
		for _, tr := range s.triggers {
			if tr.queue == "analysis_priority" {
				queries = append(queries, tr.query)
			}
		}
	}
	require.Equal(t, []string{loadSQL("analysis_priority", 40), waitSQL("analysis_priority", 16)}, queries)
}

// indexScan is an index scan node of a plan.
var indexScan = regexp.MustCompile(`(?:Index Scan|Index Only Scan|Bitmap Index Scan)(?: Backward)? (?:using|on) (\S+)`)

// qualified is the table or alias VERBOSE puts before a column.
var qualified = regexp.MustCompile(`\b[a-z_][a-z0-9_]*\.`)

// indexKey is what each index an autoscaler query may read must be read
// by, in its Index Cond: River's fetching index (state, queue, priority,
// scheduled_at, id) by state and queue, fair share's index of held jobs
// (queue, tenant, priority, scheduled_at, id) by queue, river_queue's
// primary key by name.
var indexKey = map[string][]string{
	"river_job_prioritized_fetching_index": {"(state = ", "(queue = "},
	"river_job_tierq_held_idx":             {"(queue = "},
	"river_queue_pkey":                     {"(name = "},
}

// requireIndexed fails unless every read of a table in query's plan, with
// sequential scans off, is a range of one of indexKey's indexes, its Index
// Cond naming the columns indexKey gives (a queue's range, never a scan of
// the whole index filtered by queue, which would read every finished job
// River still keeps), and fixing priority wherever it bounds scheduled_at.
func requireIndexed(t *testing.T, ctx context.Context, tx *sql.Tx, name, query string) {
	t.Helper()
	_, err := tx.ExecContext(ctx, "SET LOCAL enable_seqscan = off")
	require.NoError(t, err)
	defer func() {
		_, err := tx.ExecContext(ctx, "SET LOCAL enable_seqscan = on")
		require.NoError(t, err)
	}()
	// ANALYZE, VERBOSE: without them PostgreSQL 15 leaves out the subquery
	// of a recursive CTE's recursive term, a read of river_job.
	rows, err := tx.QueryContext(ctx, "EXPLAIN (ANALYZE, VERBOSE) "+query)
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
		keys, ok := indexKey[m[1]]
		require.True(t, ok, "%s\nreads index %s", text, m[1])
		// The node's own lines, up to the next node.
		var cond string
		for _, l := range plan[i+1:] {
			if strings.Contains(l, "(cost=") {
				break
			}
			if strings.HasPrefix(l, "Index Cond: ") {
				cond = qualified.ReplaceAllString(l, "")
				break
			}
		}
		for _, k := range keys {
			require.Contains(t, cond, k, "%s\n%s is read by %s", text, m[1], strings.Trim(k, "(= "))
		}
		// scheduled_at follows priority in both indexes: a bound on it
		// bounds the range only when priority is fixed, else it filters a
		// scan of every priority (every job scheduled for later, say).
		if strings.Contains(cond, "scheduled_at") {
			require.Contains(t, cond, "(priority = ", "%s\n%s: scheduled_at bounds no range without priority", text, m[1])
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
