package upgradetest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/dlq"
	"github.com/tierq/tierq/internal/proctest"
	"github.com/tierq/tierq/internal/promtest"
	"github.com/tierq/tierq/internal/refapp"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/migrate"
	"github.com/tierq/tierq/subscriptions"
	"github.com/tierq/tierq/tiers"
)

const (
	producerToken = "producer-token-upgrade"
	adminToken    = "admin-token-upgrade"
)

// TestUpgradeFromOldStyleJobs is issue 16's upgrade test. A database is
// written as tierq's releases before the "tierq:" metadata keys (dbe71cc)
// wrote one, with the code at 8b78568 as the reference: the tier only in a
// job's args, no "tierq:" metadata, moves recorded under the legacy "tierq_"
// keys; reference-app jobs in every River state and two dead letters. It is
// migrated by today's migrate.Up, then today's scheduler, workers (one
// deployment per service) and API run over it, all in this process through
// the same Run functions cmd/* call. After the upgrade, jobs are inserted as
// producers following the old contract insert them: straight into
// river_job, and through River with the old producer's options.
//
// Every job is worked, counted, aged, escalated, dead-lettered, replayed and
// shown by the tier its args name, legacy keys count and are renamed on the
// next move, and nothing is lost: every row before the upgrade is accounted
// for after it.
func TestUpgradeFromOldStyleJobs(t *testing.T) {
	t.Parallel()
	// The schema before the upgrade is today's: migrate/ (River's
	// migrations through rivermigrate at River v0.51.1, tierq's 00001 to
	// 00006) was the same at 8b78568, the last commit that wrote jobs as
	// below; since, 00007 (fair share's tables and partial index), 00008
	// (statistics on river_job), 00009 (fair share's fetchable kinds and
	// bounded tenant key) and 00010 (river_job's finite timestamps, whose
	// repair finds nothing here: every row below has finite ones) add
	// nothing an existing row needs or enters. migrate.Up takes no
	// target version, so testdb.New's migration to the latest is the
	// pre-upgrade schema, and the upgrade's migrate.Up must find nothing to
	// apply.
	db := testdb.New(t)
	ctx := t.Context()
	old := &oldRelease{t: t, db: db, client: db.Producer(t), root: t.TempDir()}

	// --- The database as the old release left it. ---

	// available: inserted by the old producer, waiting in its tier's queue.
	available := old.insert("acme", "enterprise", "analysis_priority", 2, river.InsertOpts{})
	// scheduled: due a second ago; the leader's River scheduler makes it
	// available.
	scheduled := old.insert("beta", "pro", "analysis_priority", 4, river.InsertOpts{ScheduledAt: time.Now().Add(-time.Second)})
	// retryable: its first attempt failed, its backoff is over.
	retryable := old.insert("gamma", "pro_plus", "analysis_priority", 3, river.InsertOpts{})
	old.exec(`UPDATE river_job SET state = 'retryable', attempt = 1, attempted_at = now() - interval '1 minute',
	            attempted_by = '{worker_old_1}', scheduled_at = now() - interval '1 second',
	            errors = ARRAY[jsonb_build_object('at', now() - interval '1 minute', 'attempt', 1, 'error', 'scan: input/output error', 'trace', '')]
	          WHERE id = $1`, retryable)
	// pending: River's state for a job held back (no tierq release wrote
	// one; a River feature may): no sweep or worker touches it.
	pending := old.insert("iota", "free", "analysis_default", 4, river.InsertOpts{Pending: true})
	// running: started by an old worker half a minute ago.
	running := old.insert("kappa", "pro_plus", "analysis_priority", 3, river.InsertOpts{})
	old.exec(`UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now() - interval '30 seconds',
	            attempted_by = '{worker_old_1}' WHERE id = $1`, running)
	// completed an hour ago, with its result and the specview job it
	// chained (as the old analysis worker did: tier in args, no unique
	// options), still available.
	completed := old.insert("lambda", "pro", "analysis_priority", 4, river.InsertOpts{})
	old.exec(`UPDATE river_job SET state = 'completed', attempt = 1, attempted_at = now() - interval '61 minutes',
	            attempted_by = '{worker_old_1}', finalized_at = now() - interval '1 hour' WHERE id = $1`, completed)
	var resultID int64
	require.NoError(t, db.Pool.QueryRow(ctx, `
		INSERT INTO analysis_results (job_id, target, user_id, tier, total_tests, go_tests, python_tests, js_tests,
		                              files_scanned, files_skipped, tests, created_at)
		VALUES ($1, $2, 'u_lambda', 'pro', 1, 1, 0, 0, 1, 0,
		        '[{"file": "x_test.go", "name": "TestIt", "framework": "go", "line": 3}]', now() - interval '1 hour')
		RETURNING id`, completed, old.target("lambda")).Scan(&resultID))
	spec, err := old.client.Insert(ctx, jobs.SpecViewArgs{AnalysisResultID: resultID, Tier: "pro"},
		&river.InsertOpts{Queue: "specview_priority", Priority: 4})
	require.NoError(t, err)
	// cancelled an hour ago.
	cancelled := old.insert("mu", "free", "analysis_default", 4, river.InsertOpts{})
	old.exec(`UPDATE river_job SET state = 'cancelled', attempt = 1, attempted_at = now() - interval '61 minutes',
	            attempted_by = '{worker_old_1}', finalized_at = now() - interval '1 hour',
	            errors = ARRAY[jsonb_build_object('at', now() - interval '1 hour', 'attempt', 1, 'error', 'JobCancelError: target does not exist', 'trace', '')]
	          WHERE id = $1`, cancelled)
	// Escalated by the old sweep ten seconds ago, from analysis_scheduled
	// after 10 minutes there: priority 4, scheduled_at the move, and the due
	// time and the move in microseconds under the legacy keys, audited in
	// job_escalations (escalation.sweepSQL at 8b78568).
	escalated := old.insert("zeta", "free", "analysis_scheduled", 4, river.InsertOpts{})
	old.exec(`UPDATE river_job AS j SET queue = 'analysis_default', priority = 4, scheduled_at = s.at,
	            metadata = j.metadata || jsonb_build_object('tierq_base_priority', 4,
	                'tierq_due_at', (extract(epoch FROM s.at - interval '10 minutes') * 1000000)::bigint,
	                'tierq_moved_at', (extract(epoch FROM s.at) * 1000000)::bigint)
	          FROM (SELECT now() - interval '10 seconds' AS at) AS s WHERE j.id = $1`, escalated)
	old.exec(`INSERT INTO job_escalations (job_id, from_queue, to_queue, from_priority, to_priority, actor, reason, escalated_at)
	          SELECT id, 'analysis_scheduled', 'analysis_default', 4, 4, 'scheduler', 'waited more than 10m0s in a scheduled queue', scheduled_at
	          FROM river_job WHERE id = $1`, escalated)
	var escalatedDue, escalatedMoved int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT (metadata->>'tierq_due_at')::bigint, (metadata->>'tierq_moved_at')::bigint
		FROM river_job WHERE id = $1`, escalated).Scan(&escalatedDue, &escalatedMoved))
	require.Equal(t, int64(600_000_000), escalatedMoved-escalatedDue)
	// Aged once by the old sweep at its default 5-minute step (base 4 kept
	// under the legacy key), waiting 5.5 minutes in analysis_default.
	aged := old.insert("eta", "free", "analysis_default", 4, river.InsertOpts{})
	old.exec(`UPDATE river_job SET priority = 3, scheduled_at = now() - interval '330 seconds', created_at = now() - interval '330 seconds',
	            metadata = metadata || '{"tierq_base_priority": 4}' WHERE id = $1`, aged)
	// A background job aged to the cap, waiting two hours in
	// analysis_scheduled.
	background := old.insert("theta", "free", "analysis_scheduled", 4, river.InsertOpts{})
	old.exec(`UPDATE river_job SET priority = 2, scheduled_at = now() - interval '2 hours', created_at = now() - interval '2 hours',
	            metadata = metadata || '{"tierq_base_priority": 4}' WHERE id = $1`, background)
	var backgroundDue int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT (extract(epoch FROM scheduled_at) * 1000000)::bigint FROM river_job WHERE id = $1`,
		background).Scan(&backgroundDue))

	// Dead letters drained by the old drain. One was replayed by the old
	// replay (dlq.Replay at 8b78568: the original's base priority, its
	// unique key, the legacy replay keys) as a job that failed again and is
	// discarded now; the other was aged (legacy base priority 3) before it
	// failed, and waits for an operator.
	firstDiscarded := old.insert("epsilon", "enterprise", "analysis_priority", 2, river.InsertOpts{MaxAttempts: 2})
	old.discard(firstDiscarded)
	replayedLetter := old.drain(firstDiscarded)
	replayed, err := old.client.Insert(ctx, jobs.AnalysisArgs{Target: old.target("epsilon"), UserID: "u_epsilon", Tier: "enterprise"},
		&river.InsertOpts{Queue: "analysis_priority", Priority: 2, MaxAttempts: 2, Tags: []string{},
			Metadata: fmt.Appendf(nil, `{"tierq_base_priority": 2, "tierq_replay_of": %d, "tierq_replay_of_job_id": %d}`, replayedLetter, firstDiscarded)})
	require.NoError(t, err)
	discarded := replayed.Job.ID
	old.exec(`UPDATE river_job AS j SET unique_key = d.unique_key, unique_states = d.unique_states
	          FROM dead_letter_jobs AS d WHERE j.id = $1 AND d.id = $2 AND d.unique_key IS NOT NULL`, discarded, replayedLetter)
	old.exec(`UPDATE dead_letter_jobs SET replayed_at = now() - interval '50 minutes', replay_job_id = $2, replayed_by = 'alice'
	          WHERE id = $1`, replayedLetter, discarded)
	old.discard(discarded)
	agedDiscarded := old.insert("delta", "pro_plus", "analysis_priority", 3, river.InsertOpts{MaxAttempts: 2})
	old.exec(`UPDATE river_job SET priority = 2, metadata = metadata || '{"tierq_base_priority": 3}' WHERE id = $1`, agedDiscarded)
	old.discard(agedDiscarded)
	waitingLetter := old.drain(agedDiscarded)

	originals := []int64{available, scheduled, retryable, pending, running, completed, spec.Job.ID, cancelled, escalated, aged, background, discarded}
	untouched := []int64{pending, running, completed, cancelled}
	require.Equal(t, map[string]int{
		"available": 5, "scheduled": 1, "pending": 1, "running": 1, "retryable": 1, "completed": 1, "cancelled": 1, "discarded": 1,
	}, jobsByState(t, db))
	require.Equal(t, 2, db.Count(t, `SELECT count(*) FROM dead_letter_jobs`))
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM dead_letter_jobs WHERE replayed_at IS NULL`))
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM job_escalations`))
	before := snapshot(t, db)
	untouchedBefore := rowsOf(t, db, untouched)

	// --- The upgrade: today's migrations apply nothing and change no row. ---

	res, err := migrate.Up(ctx, db.Pool, db.Schema, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	require.Empty(t, res.RiverApplied)
	require.Empty(t, res.TierqApplied)
	// The test's schema is made at today's version (19: fair share's
	// tables and partial index, which no existing row enters, river_job's
	// statistics on (state, queue), its finite-timestamps check, the
	// record of the services, tierq_services, the tenant limits' tables
	// the recorded waits, job_wait_stats, the rate buckets, the dead letters' tier and
	// tenant columns, and fair share by turns' trigger and partial indexes,
	// its functions planned once per connection and reading the schema by name); the
	// rows are the old releases'. The
	// pending job among them has no tierq:held_at: fair share never admits
	// it (checked below: it is still pending).
	require.EqualValues(t, 19, res.TierqVersion)
	require.Equal(t, before, snapshot(t, db))

	// --- Today's deployments over the old rows. ---

	require.NoError(t, subscriptions.Set(ctx, db.Pool, "u_enterprise", tiers.Enterprise))
	require.NoError(t, subscriptions.Set(ctx, db.Pool, "u_pro", tiers.Pro))
	sys := start(t, db, old.root)

	// The API shows the tier of old jobs that nothing will move.
	for id, want := range map[int64][2]string{
		pending: {"pending", "free"}, running: {"running", "pro_plus"}, completed: {"completed", "pro"}, cancelled: {"cancelled", "free"},
	} {
		job := sys.job(t, id)
		require.Equal(t, want[0], job["state"], "job %d", id)
		require.Equal(t, want[1], job["tier"], "job %d", id)
	}

	// Worked: the available job, and the scheduled and retryable ones once
	// the leader's River scheduler made them available.
	testdb.WaitFor(t, 20*time.Second, "the available, scheduled and retryable old jobs completed", func() bool {
		return db.Count(t, `SELECT count(*) FROM river_job WHERE id = ANY($1) AND state = 'completed'`,
			[]int64{available, scheduled, retryable}) == 3
	})
	// Aged from the due time its legacy keys kept (10 minutes at a 5-minute
	// step: 4 - 2, the cap), not from its move 10 s ago (no aging at all).
	testdb.WaitFor(t, 20*time.Second, "the job the old sweep escalated aged", func() bool {
		return db.Jobs(t, "id = $1", escalated)[0].Priority == 2
	})
	require.JSONEq(t, fmt.Sprintf(`{"tierq:base_priority": 4, "tierq:due_at": %d, "tierq:moved_at": %d, "tierq:moves": [
		{"kind": "aging", "from_queue": "analysis_default", "to_queue": "analysis_default", "from_priority": 4, "to_priority": 2}
	]}`, escalatedDue, escalatedMoved), metadataOf(t, db, escalated))
	require.Equal(t, testdb.Job{ID: escalated, Kind: "analysis", Queue: "analysis_default", State: "available", Priority: 2}, db.Jobs(t, "id = $1", escalated)[0])
	// The sweep that aged it looked at the aged job first (the jobs
	// available for a step before the recently moved ones): 5.5 minutes
	// from its legacy base 4 is 3, where it is (from its priority 3 it
	// would be 2).
	require.Equal(t, testdb.Job{ID: aged, Kind: "analysis", Queue: "analysis_default", State: "available", Priority: 3}, db.Jobs(t, "id = $1", aged)[0])
	require.JSONEq(t, `{"tierq_base_priority": 4}`, metadataOf(t, db, aged))
	// Escalated after 2 hours in analysis_scheduled (priority 4 in
	// analysis_default, its due time kept), then aged from that due time.
	// Aging could not touch it before: it was at the cap.
	testdb.WaitFor(t, 20*time.Second, "the old background job escalated and aged", func() bool {
		job := db.Jobs(t, "id = $1", background)[0]
		return job.Queue == "analysis_default" && job.Priority == 2
	})
	var backgroundMoved int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT (extract(epoch FROM scheduled_at) * 1000000)::bigint FROM river_job WHERE id = $1`,
		background).Scan(&backgroundMoved))
	require.JSONEq(t, fmt.Sprintf(`{"tierq:base_priority": 4, "tierq:due_at": %d, "tierq:moved_at": %d, "tierq:moves": [
		{"kind": "escalation", "from_queue": "analysis_scheduled", "to_queue": "analysis_default", "from_priority": 2, "to_priority": 4,
		 "actor": "scheduler", "reason": "waited more than 1h0m0s in a scheduled queue"},
		{"kind": "aging", "from_queue": "analysis_default", "to_queue": "analysis_default", "from_priority": 4, "to_priority": 2}
	]}`, backgroundDue, backgroundMoved), metadataOf(t, db, background))

	// Drained: the discarded job, as it was, and as the API shows it.
	testdb.WaitFor(t, 20*time.Second, "the discarded old job drained", func() bool {
		return db.Count(t, `SELECT count(*) FROM dead_letter_jobs WHERE job_id = $1`, discarded) == 1
	})
	var deadLetter int64
	var letterQueue, letterArgs, letterMetadata string
	var letterPriority int
	var sameKey bool
	require.NoError(t, db.Pool.QueryRow(ctx, `
		SELECT d.id, d.queue, d.priority, d.args::text, d.metadata::text, d.unique_key = o.unique_key
		FROM dead_letter_jobs AS d, dead_letter_jobs AS o WHERE d.job_id = $1 AND o.id = $2`, discarded, replayedLetter).
		Scan(&deadLetter, &letterQueue, &letterPriority, &letterArgs, &letterMetadata, &sameKey))
	require.Equal(t, "analysis_priority", letterQueue)
	require.Equal(t, 2, letterPriority)
	require.JSONEq(t, `{"target": "`+old.target("epsilon")+`", "user_id": "u_epsilon", "tier": "enterprise"}`, letterArgs)
	require.JSONEq(t, fmt.Sprintf(`{"tierq_base_priority": 2, "tierq_replay_of": %d, "tierq_replay_of_job_id": %d}`, replayedLetter, firstDiscarded), letterMetadata)
	require.True(t, sameKey, "the drain kept the unique key the old replay restored")
	job := sys.job(t, discarded)
	require.Equal(t, "dead_letter", job["state"])
	require.Equal(t, "enterprise", job["tier"])
	require.EqualValues(t, deadLetter, job["dead_letter_id"])

	// Replay (package dlq, as tierctl and the API call it): the dead letter
	// the old release replayed is refused; the old waiting one and the one
	// drained just now go back to their queue at the base priority their
	// legacy key kept, with today's keys only.
	outcomes, err := dlq.Replay(ctx, db.Producer(t), db.Pool, testdb.Registry(t).Queues(),
		[]int64{replayedLetter, waitingLetter, deadLetter}, dlq.ReplayOptions{Actor: "bob"})
	require.NoError(t, err)
	require.ErrorIs(t, outcomes[0].Err, dlq.ErrAlreadyReplayed)
	require.Contains(t, outcomes[0].Err.Error(), fmt.Sprintf("id %d was replayed as job %d by alice at ", replayedLetter, discarded))
	require.NoError(t, outcomes[1].Err)
	require.NoError(t, outcomes[2].Err)
	require.Equal(t, "analysis_priority", outcomes[1].Queue)
	require.Equal(t, "analysis_priority", outcomes[2].Queue)
	fromWaiting, fromDrained := outcomes[1].JobID, outcomes[2].JobID
	require.JSONEq(t, fmt.Sprintf(`{"tierq:base_priority": 3, "tierq:replay_of": %d, "tierq:replay_of_job_id": %d, "tierq:moves": [
		{"kind": "replay", "from_queue": "analysis_priority", "to_queue": "analysis_priority", "from_priority": 2, "to_priority": 3,
		 "dead_letter_id": %d, "from_job_id": %d, "actor": "bob"}
	]}`, waitingLetter, agedDiscarded, waitingLetter, agedDiscarded), metadataOf(t, db, fromWaiting))
	require.JSONEq(t, fmt.Sprintf(`{"tierq:base_priority": 2, "tierq:replay_of": %d, "tierq:replay_of_job_id": %d, "tierq:moves": [
		{"kind": "replay", "from_queue": "analysis_priority", "to_queue": "analysis_priority", "from_priority": 2, "to_priority": 2,
		 "dead_letter_id": %d, "from_job_id": %d, "actor": "bob"}
	]}`, deadLetter, discarded, deadLetter, discarded), metadataOf(t, db, fromDrained))
	require.Equal(t, []int{3, 2}, []int{db.Jobs(t, "id = $1", fromWaiting)[0].Priority, db.Jobs(t, "id = $1", fromDrained)[0].Priority})

	// --- New old-style inserts, after the upgrade. ---

	// A producer in another language, on the old contract: straight into
	// river_job, routed by hand for pro_plus, the tier in args only. (It
	// writes no unique key, so nothing is ever its duplicate: River's
	// clients compute that key.)
	foreign := testdb.InsertRaw(t, db, testdb.RawJob{
		Kind: "analysis", Queue: "analysis_priority", Priority: 3, Metadata: `{}`,
		Args: `{"target": "` + old.target("nu") + `", "user_id": "u_nu", "tier": "pro_plus"}`,
	})
	// An old producer still running (a replica not yet upgraded): River's
	// insert with the old options, for a free user. A pro user then asks
	// for the same target through today's API: the old-style job moves up
	// and runs for pro, in the pro user's fair share (its tenant).
	late := old.insert("xi", "free", "analysis_default", 4, river.InsertOpts{})
	status, dup := sys.call(t, http.MethodPost, "/v1/jobs", producerToken,
		map[string]any{"kind": "analysis", "user_id": "u_pro", "args": map[string]any{"target": old.target("xi")}})
	require.Equal(t, http.StatusOK, status, "%v", dup)
	require.Equal(t, []any{float64(late), true, true, "analysis_priority", float64(4), "pro"},
		[]any{dup["id"], dup["duplicate"], dup["upgraded"], dup["queue"], dup["priority"], dup["tier"]})
	require.JSONEq(t, `{"tierq:base_priority": 4, "tierq:tier": "pro", "tierq:tenant": "u_pro", "tierq:moves": [
		{"kind": "dedup", "from_queue": "analysis_default", "to_queue": "analysis_priority", "from_priority": 4, "to_priority": 4,
		 "actor": "dedup", "reason": "duplicate inserted for tier pro"}
	]}`, metadataOf(t, db, late))
	// The same for the job aged before the upgrade, asked for by an
	// enterprise user: its legacy key is renamed by the move.
	status, dup = sys.call(t, http.MethodPost, "/v1/jobs", producerToken,
		map[string]any{"kind": "analysis", "user_id": "u_enterprise", "args": map[string]any{"target": old.target("eta")}})
	require.Equal(t, http.StatusOK, status, "%v", dup)
	require.Equal(t, []any{float64(aged), true, true, "analysis_priority", float64(2), "enterprise"},
		[]any{dup["id"], dup["duplicate"], dup["upgraded"], dup["queue"], dup["priority"], dup["tier"]})
	require.JSONEq(t, `{"tierq:base_priority": 2, "tierq:tier": "enterprise", "tierq:tenant": "u_enterprise", "tierq:moves": [
		{"kind": "dedup", "from_queue": "analysis_default", "to_queue": "analysis_priority", "from_priority": 3, "to_priority": 2,
		 "actor": "dedup", "reason": "duplicate inserted for tier enterprise"}
	]}`, metadataOf(t, db, aged))
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM river_job WHERE id = $1 AND args->>'tier' = 'enterprise' AND args->>'user_id' = 'u_eta'`, aged))

	// An operator escalates the job escalated before the upgrade: it runs
	// at once, and its wait counts from the due time the old sweep kept.
	status, patched := sys.call(t, http.MethodPatch, fmt.Sprintf("/v1/jobs/%d", escalated), adminToken,
		map[string]any{"queue_class": "priority", "actor": "carol", "reason": "upgrade check"})
	require.Equal(t, http.StatusOK, status, "%v", patched)
	require.Equal(t, []any{"analysis_priority", float64(1), "free"}, []any{patched["queue"], patched["priority"], patched["tier"]})
	require.JSONEq(t, fmt.Sprintf(`{"tierq:base_priority": 1, "tierq:due_at": %d, "tierq:moved_at": %d, "tierq:moves": [
		{"kind": "aging", "from_queue": "analysis_default", "to_queue": "analysis_default", "from_priority": 4, "to_priority": 2},
		{"kind": "escalation", "from_queue": "analysis_default", "to_queue": "analysis_priority", "from_priority": 2, "to_priority": 1,
		 "actor": "carol", "reason": "upgrade check"}
	]}`, escalatedDue, escalatedMoved), metadataOf(t, db, escalated))

	// --- Everything worked, counted by its tier. ---

	worked := []int64{available, scheduled, retryable, fromWaiting, fromDrained, foreign, late, aged, escalated}
	testdb.WaitFor(t, 20*time.Second, "every job worked and counted", func() bool {
		return db.Count(t, `SELECT count(*) FROM river_job WHERE id = ANY($1) AND state = 'completed'`, worked) == len(worked) &&
			db.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'specview' AND state = 'completed'`) == 10 &&
			strings.Contains(proctest.Scrape(t, sys.analyzerMetrics), `tierq_jobs_total{kind="analysis",outcome="completed",queue="analysis_priority"} 9`+"\n") &&
			strings.Contains(proctest.Scrape(t, sys.specgenMetrics), `tierq_jobs_total{kind="specview",outcome="completed",queue="specview_priority"} 10`+"\n")
	})
	analyzer := proctest.Scrape(t, sys.analyzerMetrics)
	require.Equal(t, map[string]float64{
		"tierq_jobs_total{kind=analysis,outcome=completed,queue=analysis_priority}": 9,
		// available, the replay of the job the old release replayed, aged
		// (upgraded by dedup)
		"tierq_job_wait_seconds_count{queue=analysis_priority,tier=enterprise}": 3,
		// retryable, the replay of the old waiting dead letter, foreign
		"tierq_job_wait_seconds_count{queue=analysis_priority,tier=pro_plus}": 3,
		// scheduled, late (upgraded by dedup)
		"tierq_job_wait_seconds_count{queue=analysis_priority,tier=pro}": 2,
		// escalated
		"tierq_job_wait_seconds_count{queue=analysis_priority,tier=free}": 1,
	}, promtest.Text(t, analyzer, "tierq_job"))
	// escalated waited from its legacy due time: more than 10 minutes, less
	// than 15.
	require.Contains(t, analyzer, `tierq_job_wait_seconds_bucket{queue="analysis_priority",tier="free",le="300"} 0`+"\n")
	require.Contains(t, analyzer, `tierq_job_wait_seconds_bucket{queue="analysis_priority",tier="free",le="900"} 1`+"\n")
	// Each analysis chained its spec to the specview queue of its class, at
	// its tier's priority; the old specview job counts by its args' tier.
	require.Equal(t, map[string]float64{
		"tierq_jobs_total{kind=specview,outcome=completed,queue=specview_priority}": 10,
		"tierq_job_wait_seconds_count{queue=specview_priority,tier=enterprise}":     3,
		"tierq_job_wait_seconds_count{queue=specview_priority,tier=pro_plus}":       3,
		"tierq_job_wait_seconds_count{queue=specview_priority,tier=pro}":            3,
		"tierq_job_wait_seconds_count{queue=specview_priority,tier=free}":           1,
	}, promtest.Text(t, proctest.Scrape(t, sys.specgenMetrics), "tierq_job"))
	require.Equal(t, map[string]int{
		"specview_priority 2 enterprise": 3, "specview_priority 3 pro_plus": 3, "specview_priority 4 pro": 2,
		"specview_priority 4 free": 1, "specview_priority 4 (args only)": 1,
	}, countBy(t, db, `SELECT queue || ' ' || priority || ' ' || coalesce(metadata->>'tierq:tier', '(args only)'), count(*)
		FROM river_job WHERE kind = 'specview' GROUP BY 1`))
	require.Equal(t, map[string]int{"enterprise": 3, "pro_plus": 3, "pro": 3, "free": 1},
		countBy(t, db, `SELECT tier, count(*) FROM analysis_results GROUP BY tier`))
	require.Equal(t, 10, db.Count(t, `SELECT count(*) FROM spec_documents`))

	// The API shows the tier of the new old-style insert and of the
	// replays.
	for id, want := range map[int64]string{foreign: "pro_plus", fromWaiting: "pro_plus", fromDrained: "enterprise", late: "pro", escalated: "free"} {
		job := sys.job(t, id)
		require.Equal(t, "completed", job["state"], "job %d", id)
		require.Equal(t, want, job["tier"], "job %d", id)
	}

	// --- Nothing lost. ---

	// completed: the old completed job, the 9 worked and the 10 specs;
	// available: background, in a queue no deployment here serves; the rest
	// untouched. The discarded job is a dead letter, replayed.
	require.Equal(t, map[string]int{"available": 1, "pending": 1, "running": 1, "completed": 20, "cancelled": 1}, jobsByState(t, db))
	require.Equal(t, 3, db.Count(t, `SELECT count(*) FROM dead_letter_jobs`))
	require.Equal(t, 0, db.Count(t, `SELECT count(*) FROM dead_letter_jobs WHERE replayed_at IS NULL`))
	// escalated's old escalation and its operator escalation, background's
	// escalation, the two dedup upgrades.
	require.Equal(t, 5, db.Count(t, `SELECT count(*) FROM job_escalations`))
	require.Equal(t, len(originals), db.Count(t, `
		SELECT count(*) FROM unnest($1::bigint[]) AS o(id)
		WHERE EXISTS (SELECT 1 FROM river_job WHERE id = o.id) OR EXISTS (SELECT 1 FROM dead_letter_jobs WHERE job_id = o.id)`, originals))
	require.Equal(t, untouchedBefore, rowsOf(t, db, untouched))
}

// oldRelease writes rows as tierq's releases before issue 16 wrote them
// (8b78568 and earlier): analysis jobs of targets under root, the tier only
// in args.
type oldRelease struct {
	t      *testing.T
	db     *testdb.DB
	client *river.Client[pgx.Tx]
	root   string
}

// target is the directory of target name under root, with one Go test in
// it, made on first use.
func (o *oldRelease) target(name string) string {
	dir := filepath.Join(o.root, name)
	require.NoError(o.t, os.MkdirAll(dir, 0o750))
	require.NoError(o.t, os.WriteFile(filepath.Join(dir, "x_test.go"),
		[]byte("package x\n\nimport \"testing\"\n\nfunc TestIt(t *testing.T) {}\n"), 0o600))
	return dir
}

// oldUniqueOpts are the old producer's unique options (producer.UniqueOpts
// at 8b78568): by args, in any queue, while queued or running.
var oldUniqueOpts = river.UniqueOpts{
	ByArgs: true,
	ByState: []rivertype.JobState{
		rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRetryable,
		rivertype.JobStateRunning, rivertype.JobStateScheduled,
	},
}

// insert inserts an analysis of target name for user "u_"+name of tier as
// the old producer.Insert did: River's insert into the queue and at the
// priority the old routing chose for the tier, the old unique options, the
// tier in args and no metadata (River writes {}).
func (o *oldRelease) insert(name, tier, queue string, priority int, opts river.InsertOpts) int64 {
	o.t.Helper()
	opts.Queue, opts.Priority, opts.UniqueOpts = queue, priority, oldUniqueOpts
	res, err := o.client.Insert(context.Background(), jobs.AnalysisArgs{Target: o.target(name), UserID: "u_" + name, Tier: tier}, &opts)
	require.NoError(o.t, err)
	require.False(o.t, res.UniqueSkippedAsDuplicate)
	return res.Job.ID
}

// exec runs sql, which must change exactly one row.
func (o *oldRelease) exec(sql string, args ...any) {
	o.t.Helper()
	tag, err := o.db.Pool.Exec(context.Background(), sql, args...)
	require.NoError(o.t, err)
	require.EqualValues(o.t, 1, tag.RowsAffected(), sql)
}

// discard leaves the job as River leaves one whose last attempt failed.
func (o *oldRelease) discard(id int64) {
	o.t.Helper()
	o.exec(`UPDATE river_job SET state = 'discarded', attempt = max_attempts, attempted_at = now() - interval '2 minutes',
	          attempted_by = '{worker_old_1}', finalized_at = now() - interval '1 minute',
	          errors = ARRAY[jsonb_build_object('at', now() - interval '3 minutes', 'attempt', 1, 'error', 'scan: input/output error', 'trace', ''),
	                         jsonb_build_object('at', now() - interval '2 minutes', 'attempt', 2, 'error', 'scan: input/output error', 'trace', '')]
	        WHERE id = $1`, id)
}

// drain moves the discarded job into dead_letter_jobs with the old drain's
// statement (dlq.drainSQL at 8b78568, for one job) and returns its dead
// letter's id.
func (o *oldRelease) drain(id int64) int64 {
	o.t.Helper()
	var letter int64
	require.NoError(o.t, o.db.Pool.QueryRow(context.Background(), `
		WITH removed AS (
		    DELETE FROM river_job AS j WHERE j.id = $1 AND j.state = 'discarded'
		    RETURNING j.id, j.kind, j.queue, j.priority, j.args, j.metadata, j.tags, j.errors,
		              j.attempt, j.max_attempts, j.created_at, j.finalized_at, j.unique_key, j.unique_states
		)
		INSERT INTO dead_letter_jobs (job_id, kind, queue, priority, args, metadata, tags, errors,
		                              attempt, max_attempts, created_at, finalized_at, unique_key, unique_states)
		SELECT id, kind, queue, priority, args, coalesce(metadata, '{}'), coalesce(tags::text[], '{}'),
		       coalesce(to_jsonb(errors), '[]'), attempt, max_attempts, created_at, finalized_at,
		       unique_key, unique_states
		FROM removed
		RETURNING id`, id).Scan(&letter))
	return letter
}

// jobsByState counts the reference app's jobs (analysis, specview) by state;
// the scheduler's own periodic jobs are left out.
func jobsByState(t *testing.T, db *testdb.DB) map[string]int {
	t.Helper()
	return countBy(t, db, `SELECT state::text, count(*) FROM river_job WHERE kind IN ('analysis', 'specview') GROUP BY 1`)
}

// countBy runs a query of (key, count) rows.
func countBy(t *testing.T, db *testdb.DB, sql string) map[string]int {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), sql)
	require.NoError(t, err)
	out := map[string]int{}
	var (
		key string
		n   int
	)
	_, err = pgx.ForEachRow(rows, []any{&key, &n}, func() error {
		out[key] = n
		return nil
	})
	require.NoError(t, err)
	return out
}

// snapshot is every row of the tables the old release wrote, as JSON.
func snapshot(t *testing.T, db *testdb.DB) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, table := range []string{"river_job", "dead_letter_jobs", "job_escalations", "analysis_results", "spec_documents", "river_migration", "tierq_schema_version"} {
		var rows string
		require.NoError(t, db.Pool.QueryRow(context.Background(),
			`SELECT coalesce(jsonb_agg(to_jsonb(t) ORDER BY to_jsonb(t)::text), '[]')::text FROM `+table+` AS t`).Scan(&rows))
		out[table] = rows
	}
	return out
}

// rowsOf is the river_job rows of ids, as JSON.
func rowsOf(t *testing.T, db *testdb.DB, ids []int64) string {
	t.Helper()
	var rows string
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT jsonb_agg(to_jsonb(j) ORDER BY j.id)::text FROM river_job AS j WHERE j.id = ANY($1)`, ids).Scan(&rows))
	return rows
}

// metadataOf is a job's metadata as JSON, each move's time checked (within
// a minute of now) and taken out.
func metadataOf(t *testing.T, db *testdb.DB, id int64) string {
	t.Helper()
	var m map[string]any
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT metadata FROM river_job WHERE id = $1`, id).Scan(&m))
	moves, _ := m["tierq:moves"].([]any)
	for _, mv := range moves {
		move, ok := mv.(map[string]any)
		require.True(t, ok, "move %v", mv)
		at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(move["at"]))
		require.NoError(t, err, "move time %v", move["at"])
		require.WithinDuration(t, time.Now(), at, time.Minute)
		delete(move, "at")
	}
	out, err := json.Marshal(m)
	require.NoError(t, err)
	return string(out)
}

// system is today's deployments of the reference app, running in this
// process: the scheduler, the API, and a worker deployment per service.
type system struct {
	api                             string
	analyzerMetrics, specgenMetrics string
}

// start runs the deployments on db until t ends, as cmd/scheduler,
// cmd/api and cmd/worker run them. The scheduler sweeps every second (aging
// at a 5-minute step up to priority 2, the defaults; escalation out of a
// _scheduled queue after an hour, none out of a _default one, the default)
// and drains every second. The
// analyzer deployment serves analysis_priority only: jobs in
// analysis_default and analysis_scheduled wait there, for the sweeps.
func start(t *testing.T, db *testdb.DB, root string) *system {
	t.Helper()
	common := []string{"DATABASE_URL=" + db.URL, "DATABASE_SCHEMA=" + db.Schema, "DATABASE_MAX_CONNS=4", "SOFT_STOP_TIMEOUT=5s"}
	logs := proctest.Start(t, common,
		proctest.Deployment{Name: "scheduler", Run: refapp.RunScheduler, Env: []string{
			"AGING_INTERVAL=1s", "AGING_STEP=5m", "ESCALATION_INTERVAL=1s", "ESCALATE_SCHEDULED_AFTER=1h", "DLQ_DRAIN_INTERVAL=1s",
		}},
		proctest.Deployment{Name: "api", Run: refapp.RunAPI, Env: []string{
			"API_ADDR=127.0.0.1:0", "API_TOKEN=" + producerToken, "API_ADMIN_TOKEN=" + adminToken, "ANALYSIS_ROOTS=" + root,
		}},
		proctest.Deployment{Name: "analyzer", Run: refapp.RunWorker, Env: []string{
			"WORKER_SERVICE=analyzer", "ANALYZER_QUEUE_DEFAULT_WORKERS=0", "ANALYZER_QUEUE_SCHEDULED_WORKERS=0",
			"ANALYSIS_ROOTS=" + root, "METRICS_ADDR=127.0.0.1:0",
		}},
		proctest.Deployment{Name: "specgen", Run: refapp.RunWorker, Env: []string{"WORKER_SERVICE=specgen", "METRICS_ADDR=127.0.0.1:0"}},
	)
	proctest.WaitOutput(t, logs["scheduler"], "scheduler started", 20*time.Second)
	proctest.WaitOutput(t, logs["api"], "api listening", 20*time.Second)
	listening := regexp.MustCompile(`msg="api listening" addr=(\S+)`).FindStringSubmatch(logs["api"].String())
	require.Len(t, listening, 2, logs["api"].String())
	return &system{
		api:             "http://" + listening[1],
		analyzerMetrics: proctest.MetricsURL(t, logs["analyzer"]),
		specgenMetrics:  proctest.MetricsURL(t, logs["specgen"]),
	}
}

// call sends a JSON request to the API and decodes the JSON object it
// answers.
func (s *system) call(t *testing.T, method, path, token string, body any) (int, map[string]any) {
	t.Helper()
	return proctest.CallJSON(t, method, s.api+path, token, body)
}

// job is GET /v1/jobs/{id}.
func (s *system) job(t *testing.T, id int64) map[string]any {
	t.Helper()
	status, job := s.call(t, http.MethodGet, fmt.Sprintf("/v1/jobs/%d", id), producerToken, nil)
	require.Equal(t, http.StatusOK, status, "%v", job)
	return job
}
