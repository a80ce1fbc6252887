package scheduler_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/proctest"
	"github.com/tierq/tierq/internal/promtest"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/internal/workertest"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/metrics"
)

// records are the JSON log records in logs whose msg is msg.
func records(t *testing.T, logs *proctest.Buffer, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(logs.String()) {
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &rec))
		if rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// TestBadRowsNeverStopTheSweeps runs the real scheduler over every service
// queue holding, next to good jobs, rows whose metadata is an array, a
// string, a number, null or a boolean, rows of over 1 MiB and rows nested
// 300 levels deep, and discarded rows of every shape. Before the sweeps
// coped with them, a single `[]` metadata made every aging and escalation
// sweep fail ("path element at position 1 is not an integer"), so no good
// job was aged or escalated.
func TestBadRowsNeverStopTheSweeps(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	// Migration 00010 refuses infinite timestamps; without its check (an
	// operator may drop it) the sweeps still skip them.
	testdb.AllowInfinite(t, db)

	queues := []string{
		"analysis_priority", "analysis_default", "analysis_scheduled",
		"specview_priority", "specview_default", "specview_scheduled",
	}
	type row struct {
		id       int64
		queue    string
		metadata string
	}
	var good, poison, odd []row // odd: large or deep, handled as they are
	var infinite []int64        // scheduled_at -infinity: no wait to compute
	for _, queue := range queues {
		add := func(list *[]row, metadata string) {
			id := testdb.InsertRaw(t, db, testdb.RawJob{Kind: "loadtest", Queue: queue, Metadata: metadata, Wait: 2 * time.Hour})
			*list = append(*list, row{id: id, queue: queue, metadata: metadata})
		}
		for _, name := range slices.Sorted(maps.Keys(testdb.NotObjects)) {
			add(&poison, testdb.NotObjects[name])
		}
		add(&good, `{}`)
		add(&odd, testdb.Large())
		add(&odd, testdb.Deep(300))
		id := testdb.InsertRaw(t, db, testdb.RawJob{Kind: "loadtest", Queue: queue})
		_, err := db.Pool.Exec(context.Background(), `UPDATE river_job SET scheduled_at = '-infinity' WHERE id = $1`, id)
		require.NoError(t, err)
		infinite = append(infinite, id)
	}
	// Discarded rows of every shape, in args and in metadata.
	var discarded []int64
	shapes := append([]string{`{}`}, testdb.BadShapes()...)
	for i, shape := range shapes {
		queue := queues[i%len(queues)]
		discarded = append(discarded,
			testdb.InsertRaw(t, db, testdb.RawJob{Kind: "loadtest", Queue: queue, State: "discarded", Args: shape}),
			testdb.InsertRaw(t, db, testdb.RawJob{Kind: "loadtest", Queue: queue, State: "discarded", Metadata: shape}))
	}

	logs := &proctest.Buffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	reg := prometheus.NewRegistry()
	db.Start(t, riverConfig(t, schedulerConfig(t, db,
		"AGING_INTERVAL=1s", "AGING_STEP=1s", "AGING_MAX_PRIORITY=2",
		"ESCALATION_INTERVAL=1s", "ESCALATE_SCHEDULED_AFTER=1h", "ESCALATE_DEFAULT_AFTER=3h",
		"DLQ_DRAIN_INTERVAL=1s",
	), db.Pool, logger, newMetrics(t, reg)))

	// Good and odd rows: a _scheduled job moves to _default (it waited 2h
	// there, the rule says 1h), and every job ends at the aging cap, the
	// moved ones too (aging counts from when they became due, 2h ago).
	wantQueue := map[string]string{
		"analysis_priority": "analysis_priority", "analysis_default": "analysis_default", "analysis_scheduled": "analysis_default",
		"specview_priority": "specview_priority", "specview_default": "specview_default", "specview_scheduled": "specview_default",
	}
	testdb.WaitFor(t, 20*time.Second, "every good row aged and escalated, every discarded row drained", func() bool {
		for _, r := range slices.Concat(good, odd) {
			j := db.Jobs(t, "id = $1", r.id)[0]
			if j.Queue != wantQueue[r.queue] || j.Priority != 2 {
				return false
			}
		}
		return db.Count(t, `SELECT count(*) FROM dead_letter_jobs WHERE job_id = ANY($1)`, discarded) == len(discarded)
	})
	require.Zero(t, db.Count(t, `SELECT count(*) FROM river_job WHERE id = ANY($1)`, discarded))

	// Let more sweeps run over the poison rows, then check that they are
	// exactly as written: same queue, priority and metadata.
	completed := func(kind string) int {
		return db.Count(t, `SELECT count(*) FROM river_job WHERE kind = $1 AND state = 'completed'`, kind)
	}
	aging, escalating := completed("aging_sweep"), completed("escalation_sweep")
	testdb.WaitFor(t, 10*time.Second, "two more sweeps of each kind", func() bool {
		return completed("aging_sweep") >= aging+2 && completed("escalation_sweep") >= escalating+2
	})
	for _, r := range poison {
		var (
			queue    string
			priority int
			same     bool
		)
		require.NoError(t, db.Pool.QueryRow(context.Background(),
			`SELECT queue, priority, metadata = $2::jsonb FROM river_job WHERE id = $1`, r.id, r.metadata).Scan(&queue, &priority, &same))
		require.Equal(t, r.queue, queue, "job %d (metadata %s) moved", r.id, r.metadata)
		require.Equal(t, 4, priority, "job %d (metadata %s) aged", r.id, r.metadata)
		require.True(t, same, "job %d: metadata %s changed", r.id, r.metadata)
	}
	require.Zero(t, db.Count(t, `SELECT count(*) FROM river_job WHERE kind IN ('aging_sweep', 'escalation_sweep', 'dlq_drain') AND state IN ('retryable', 'discarded')`),
		"no sweep failed")

	// Reported: each sweep logs the rows it skipped, with their ids, once
	// per reason, and counts them. Aging skips the 30 poison rows (5 shapes
	// × 6 queues) and the 6 with an infinite scheduled_at; the rules the 10
	// poison rows of the two _scheduled queues and 4 infinite ones.
	var poisonIDs, scheduledPoisonIDs []float64
	for _, r := range poison {
		poisonIDs = append(poisonIDs, float64(r.id))
		if strings.HasSuffix(r.queue, "_scheduled") {
			scheduledPoisonIDs = append(scheduledPoisonIDs, float64(r.id))
		}
	}
	sort.Float64s(poisonIDs)
	sort.Float64s(scheduledPoisonIDs)
	require.Len(t, poisonIDs, 30)
	require.Len(t, scheduledPoisonIDs, 10)
	agingLogs := records(t, logs, "aging sweep skipped jobs it cannot change")
	escalationLogs := records(t, logs, "escalation sweep skipped jobs it cannot change")
	require.GreaterOrEqual(t, len(agingLogs), 4)
	require.GreaterOrEqual(t, len(escalationLogs), 4)
	// -infinity is older than both rules' thresholds: the _scheduled and
	// the _default rows count.
	var infiniteIDs, escalationInfiniteIDs []float64
	for i, id := range infinite {
		infiniteIDs = append(infiniteIDs, float64(id))
		if !strings.HasSuffix(queues[i], "_priority") {
			escalationInfiniteIDs = append(escalationInfiniteIDs, float64(id))
		}
	}
	// One line per reason and sweep.
	want := map[string]map[string][]float64{
		"aging":      {"metadata_not_object": poisonIDs, "scheduled_at_not_finite": infiniteIDs},
		"escalation": {"metadata_not_object": scheduledPoisonIDs, "scheduled_at_not_finite": escalationInfiniteIDs},
	}
	for sweep, recs := range map[string][]map[string]any{"aging": agingLogs, "escalation": escalationLogs} {
		for _, rec := range recs {
			ids := want[sweep][rec["reason"].(string)]
			require.NotNil(t, ids, "%s: unexpected reason %v", sweep, rec["reason"])
			require.EqualValues(t, len(ids), rec["num_skipped"])
			require.Equal(t, ids, floats(rec["job_ids"]))
		}
	}
	require.Len(t, infiniteIDs, 6)
	require.Len(t, escalationInfiniteIDs, 4)
	values := promtest.Values(t, reg, "tierq_sweep_skipped_rows_total")
	// The counter may run a sweep ahead of the log lines read above.
	// Two reasons per sweep: each sweep wrote two lines.
	require.GreaterOrEqual(t, values["tierq_sweep_skipped_rows_total{reason=metadata_not_object,sweep=aging}"], float64(30*len(agingLogs)/2))
	require.GreaterOrEqual(t, values["tierq_sweep_skipped_rows_total{reason=metadata_not_object,sweep=escalation}"], float64(10*len(escalationLogs)/2))
	require.GreaterOrEqual(t, values["tierq_sweep_skipped_rows_total{reason=scheduled_at_not_finite,sweep=aging}"], float64(6*len(agingLogs)/2))
	require.GreaterOrEqual(t, values["tierq_sweep_skipped_rows_total{reason=scheduled_at_not_finite,sweep=escalation}"], float64(4*len(escalationLogs)/2))
}

func floats(v any) []float64 {
	var out []float64
	for _, x := range v.([]any) {
		out = append(out, x.(float64))
	}
	sort.Float64s(out)
	return out
}

// TestEscalatedJobReportsItsWholeWait: a job due 3 hours ago in
// analysis_scheduled is moved to analysis_default by the scheduler's rule
// and worked there; tierq_job_wait_seconds observes a wait of at least 3
// hours. Before the move kept the due time, the escalation's scheduled_at
// (now) made it look like a fresh job (a wait of milliseconds).
func TestEscalatedJobReportsItsWholeWait(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)

	id := testdb.InsertWaiting(t, db, jobs.LoadTestArgs{}, &river.InsertOpts{Queue: "analysis_scheduled", Priority: 4}, 3*time.Hour)
	startScheduler(t, db, schedulerConfig(t, db, "ESCALATE_SCHEDULED_AFTER=1h", "ESCALATION_INTERVAL=1s", "AGING_INTERVAL=0"))
	testdb.WaitFor(t, 10*time.Second, "the job to move to analysis_default", func() bool {
		return db.Jobs(t, "id = $1", id)[0].Queue == "analysis_default"
	})

	reg := prometheus.NewRegistry()
	rc := workertest.RiverConfig(t, db,
		"WORKER_SERVICE=analyzer", "LOAD_TEST_WORKLOAD=true",
		"ANALYZER_QUEUE_PRIORITY_WORKERS=0", "ANALYZER_QUEUE_DEFAULT_WORKERS=1", "ANALYZER_QUEUE_SCHEDULED_WORKERS=0",
	)
	rc.Hooks = append(rc.Hooks, metrics.NewJobs(reg))
	db.Start(t, rc)
	testdb.WaitFor(t, 10*time.Second, "the job to complete", func() bool {
		return db.Jobs(t, "id = $1", id)[0].State == "completed"
	})

	families, err := reg.Gather()
	require.NoError(t, err)
	var observed []float64
	for _, f := range families {
		if f.GetName() != "tierq_job_wait_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			observed = append(observed, float64(m.GetHistogram().GetSampleCount()), m.GetHistogram().GetSampleSum())
		}
	}
	require.Len(t, observed, 2, "one series")
	require.Equal(t, 1.0, observed[0], "one job observed")
	require.GreaterOrEqual(t, observed[1], 3*3600.0, "its wait counts from when it became due, not from the move")
	require.Less(t, observed[1], 3*3600.0+60)
}

// TestSweepsLeavePausedQueuesAlone pauses queues with River's own
// QueuePause and runs the real scheduler: no job moves out of or into a
// paused queue and aging leaves a paused queue alone, while the same jobs
// in queues that run are moved and aged, and the dead-letter drain still
// empties a paused queue's discarded jobs. Resuming lets the sweeps act.
func TestSweepsLeavePausedQueuesAlone(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()

	// Worker clients register their queues in river_queue (a queue River
	// has not seen cannot be paused). Without the load-test workload they
	// never fetch the loadtest jobs below.
	for _, service := range []string{"analyzer", "specgen"} {
		db.Start(t, workertest.RiverConfig(t, db, "WORKER_SERVICE="+service))
	}
	client := db.Producer(t)
	testdb.WaitFor(t, 10*time.Second, "the worker queues in river_queue", func() bool {
		return db.Count(t, `SELECT count(*) FROM river_queue WHERE name LIKE 'analysis_%' OR name LIKE 'specview_%'`) == 6
	})
	for _, queue := range []string{"analysis_scheduled", "analysis_default", "specview_default"} {
		require.NoError(t, client.QueuePause(ctx, queue, nil))
	}

	wait := func(queue string) int64 {
		return testdb.InsertWaiting(t, db, jobs.LoadTestArgs{}, &river.InsertOpts{Queue: queue, Priority: 4}, 2*time.Hour)
	}
	outOfPaused := wait("analysis_scheduled") // its own queue is paused
	intoPaused := wait("specview_scheduled")  // its target (specview_default) is paused
	agedInPaused := wait("analysis_default")  // aging must leave it
	agedControl := wait("specview_priority")  // runs: aged to 2
	discardedInPaused := testdb.InsertRaw(t, db, testdb.RawJob{Kind: "loadtest", Queue: "analysis_scheduled", State: "discarded"})

	startScheduler(t, db, schedulerConfig(t, db,
		"AGING_INTERVAL=1s", "AGING_STEP=1s", "AGING_MAX_PRIORITY=2",
		"ESCALATION_INTERVAL=1s", "ESCALATE_SCHEDULED_AFTER=1h", "ESCALATE_DEFAULT_AFTER=3h",
		"DLQ_DRAIN_INTERVAL=1s"))
	testdb.WaitFor(t, 15*time.Second, "the control job aged and the paused queue's discarded job drained", func() bool {
		return db.Jobs(t, "id = $1", agedControl)[0].Priority == 2 &&
			db.Count(t, `SELECT count(*) FROM dead_letter_jobs WHERE job_id = $1`, discardedInPaused) == 1
	})
	completed := func(kind string) int {
		return db.Count(t, `SELECT count(*) FROM river_job WHERE kind = $1 AND state = 'completed'`, kind)
	}
	aging, escalating := completed("aging_sweep"), completed("escalation_sweep")
	testdb.WaitFor(t, 10*time.Second, "two more sweeps of each kind", func() bool {
		return completed("aging_sweep") >= aging+2 && completed("escalation_sweep") >= escalating+2
	})
	require.Equal(t, testdb.Job{ID: outOfPaused, Kind: "loadtest", Queue: "analysis_scheduled", State: "available", Priority: 4},
		db.Jobs(t, "id = $1", outOfPaused)[0])
	// Its own queue runs: aging lifts it; only the move is held back.
	require.Equal(t, testdb.Job{ID: intoPaused, Kind: "loadtest", Queue: "specview_scheduled", State: "available", Priority: 2},
		db.Jobs(t, "id = $1", intoPaused)[0])
	require.Equal(t, testdb.Job{ID: agedInPaused, Kind: "loadtest", Queue: "analysis_default", State: "available", Priority: 4},
		db.Jobs(t, "id = $1", agedInPaused)[0])
	require.Zero(t, db.Count(t, `SELECT count(*) FROM job_escalations`))

	// Resumed, the sweeps act again.
	require.NoError(t, client.QueueResume(ctx, "*", nil))
	testdb.WaitFor(t, 15*time.Second, "the jobs moved and aged after the resume", func() bool {
		return db.Jobs(t, "id = $1", outOfPaused)[0].Queue == "analysis_default" &&
			db.Jobs(t, "id = $1", intoPaused)[0].Queue == "specview_default" &&
			db.Jobs(t, "id = $1", agedInPaused)[0].Priority == 2
	})
}
