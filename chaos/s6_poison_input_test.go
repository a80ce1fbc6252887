//go:build chaos

package chaos_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/routing"
	"github.com/tierq/tierq/scheduler"
	"github.com/tierq/tierq/service"
	"github.com/tierq/tierq/tiers"
)

// rawArgs are args exactly as given, of any kind: what a producer in another
// language (or a bug) can insert.
type rawArgs struct {
	kind string
	json string
}

func (a rawArgs) Kind() string                 { return a.kind }
func (a rawArgs) MarshalJSON() ([]byte, error) { return []byte(a.json), nil }

// TestPoisonInput sends bad input two ways. Through the API it is refused
// with a 4xx JSON error and nothing is inserted. Inserted straight into the
// queues at the best priority (as a producer that bypasses the API could),
// it is cancelled with the reason, or, when it fails transiently forever,
// retried with backoff and dead-lettered with the reason; and the good jobs
// queued behind it in the same queues finish as if it were not there.
func TestPoisonInput(t *testing.T) {
	s := newSystem(t, "poison-input")
	ctx := context.Background()
	s.fullTopology()

	// Through the API: refused, nothing inserted.
	enormous := `{"kind":"analysis","user_id":"u_free","args":{"target":"/` + strings.Repeat("a", 2<<20) + `"}}`
	for _, tc := range []struct {
		name, body string
		status     int
	}{
		{"not JSON", `{"kind": "analysis", "user_id": `, http.StatusBadRequest},
		{"target of the wrong type", `{"kind":"analysis","user_id":"u_free","args":{"target":42}}`, http.StatusBadRequest},
		{"args not an object", `{"kind":"analysis","user_id":"u_free","args":[1,2]}`, http.StatusBadRequest},
		{"target escaping with ..", `{"kind":"analysis","user_id":"u_free","args":{"target":"/srv/../etc"}}`, http.StatusBadRequest},
		{"target outside the analysis roots", `{"kind":"analysis","user_id":"u_free","args":{"target":"/etc"}}`, http.StatusBadRequest},
		{"tier chosen by the client", `{"kind":"analysis","user_id":"u_free","tier":"enterprise","args":{"target":"/srv"}}`, http.StatusBadRequest},
		{"unknown kind", `{"kind":"rm -rf","user_id":"u_free","args":{}}`, http.StatusBadRequest},
		{"bad result id", `{"kind":"specview","user_id":"u_free","args":{"analysis_result_id":-1}}`, http.StatusBadRequest},
		{"enormous body", enormous, http.StatusRequestEntityTooLarge},
	} {
		status, body, err := s.callRaw(ctx, http.MethodPost, "/v1/jobs", producerToken, []byte(tc.body))
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.status, status, "%s: %s", tc.name, body)
		var e struct {
			Error string `json:"error"`
		}
		require.NoError(t, json.Unmarshal(body, &e), "%s: not a JSON error: %s", tc.name, body)
		require.NotEmpty(t, e.Error, tc.name)
	}
	var queued int
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = ANY($1)`,
		[]string{jobs.KindAnalysis, jobs.KindSpecView}).Scan(&queued))
	require.Zero(t, queued, "jobs inserted by refused requests")

	// Bad rows (ids below every job the good-wait check below reads).
	badRows := s.insertBadRows(ctx)

	// Straight into the queues.
	file := filepath.Join(s.dir, "targets", "a-file")
	require.NoError(t, os.WriteFile(file, []byte("not a directory"), 0o644))
	unreadable := filepath.Join(s.dir, "targets", "unreadable")
	require.NoError(t, os.Mkdir(unreadable, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(unreadable, "x_test.go"), []byte("package x"), 0o644))
	require.NoError(t, os.Chmod(unreadable, 0o000)) // the workers do not run as root
	t.Cleanup(func() { _ = os.Chmod(unreadable, 0o755) })
	trapped, err := s.newTarget() // a real checkout with traps in it
	require.NoError(t, err)
	require.NoError(t, syscall.Mkfifo(filepath.Join(trapped, "fifo_test.go"), 0o644))
	require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(trapped, "outside_test.go")))
	require.NoError(t, os.Symlink("/", filepath.Join(trapped, "root")))
	require.NoError(t, os.Symlink("../../../..", filepath.Join(trapped, "up")))
	// Ways out of ANALYSIS_ROOTS (the scenario's targets directory).
	escape := filepath.Join(s.dir, "targets", "escape")
	require.NoError(t, os.Symlink("/etc", escape))
	dotDot := filepath.Join(s.dir, "targets") + strings.Repeat("/..", 20) + "/etc"
	hugeTarget := "/" + strings.Repeat("a", 1<<20)

	target := func(path string) string {
		data, _ := json.Marshal(map[string]string{"target": path, "tier": "enterprise"})
		return string(data)
	}
	until, _ := time.Now().Add(time.Hour).MarshalJSON()
	poison := []struct {
		kind, args string
		want       final
		reason     string
	}{
		{jobs.KindAnalysis, `{"target": 42}`, cancelled, "bad analysis args"},
		{jobs.KindAnalysis, `[]`, cancelled, "bad analysis args"},
		{jobs.KindAnalysis, `{}`, cancelled, "target is required"},
		{jobs.KindAnalysis, target("/nonexistent/checkout"), cancelled, "does not exist"},
		{jobs.KindAnalysis, target(file), cancelled, "is not a directory"},
		{jobs.KindAnalysis, target(unreadable), cancelled, "permission denied"},
		{jobs.KindAnalysis, target(hugeTarget), cancelled, "invalid target"},
		{jobs.KindAnalysis, target(trapped), completed, ""},
		{jobs.KindAnalysis, target("/etc"), cancelled, `target "/etc" is outside the analysis roots`},
		{jobs.KindAnalysis, target(escape), cancelled, `(it resolves to "/etc") is outside the analysis roots`},
		{jobs.KindAnalysis, target(dotDot), cancelled, `(it resolves to "/etc") is outside the analysis roots`},
		{jobs.KindSpecView, `{"analysis_result_id": "seven"}`, cancelled, "bad specview args"},
		{jobs.KindSpecView, `{"analysis_result_id": 987654321}`, cancelled, "analysis result not found"},
		{jobs.KindLoadTest, `{"sleep_ms": "slow"}`, cancelled, "bad loadtest args"},
		{jobs.KindLoadTest, `{"sleep_ms": -5}`, cancelled, "sleep_ms must be between"},
		{jobs.KindLoadTest, `{"sleep_ms": 0, "fail_until": ` + string(until) + `}`, deadLettered, "failing on purpose"},
	}
	const copies = 8
	var params []river.InsertManyParams
	var wants []entry
	for _, p := range poison {
		svc := s.analyzer
		if p.kind == jobs.KindSpecView {
			svc = s.specGen
		}
		for i := range copies {
			opts := &river.InsertOpts{Queue: svc.Queue(routing.Priority), Priority: 1, MaxAttempts: 2}
			if i%2 == 1 {
				opts.Queue = svc.Queue(routing.Default)
			}
			params = append(params, river.InsertManyParams{Args: rawArgs{p.kind, p.args}, InsertOpts: opts})
			wants = append(wants, entry{kind: p.kind, queue: opts.Queue, want: p.want, reason: p.reason})
		}
	}
	insertedAt := time.Now()
	var res []*rivertype.JobInsertResult
	res, err = s.client.InsertMany(ctx, params)
	require.NoError(t, err)
	for i, r := range res {
		wants[i].id = r.Job.ID
		s.ledger.add(wants[i])
	}

	// Good work behind it, in the same queues.
	var good []loadtestJob
	for i := range 200 {
		job := routedLoadtest(rand.New(rand.NewPCG(1, uint64(i))), []*service.Service{s.analyzer, s.specGen}[i%2], tiers.All()[i%4], false, 20, 20)
		good = append(good, job)
	}
	require.NoError(t, s.insert(ctx, good))
	for i := range 20 {
		status, _ := s.enqueueAnalysis(ctx, tiers.All()[i%4], false)
		require.Equal(t, http.StatusCreated, status)
	}

	tally, settle := s.settle(ctx, 2*time.Minute)
	s.check(tally)

	// The bad rows never made a sweep fail, and the sweeps reported the
	// ones they skipped.
	var failedSweeps int
	require.NoError(t, s.pool.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM river_job WHERE kind = ANY($1) AND coalesce(array_length(errors, 1), 0) > 0)
		     + (SELECT count(*) FROM dead_letter_jobs WHERE kind = ANY($1))`,
		[]string{scheduler.KindAgingSweep, scheduler.KindEscalationSweep, scheduler.KindDLQDrain}).Scan(&failedSweeps))
	require.Zero(t, failedSweeps, "sweep or drain attempts that failed")
	var skipped float64
	for _, p := range s.processes() {
		if p.binary == "scheduler" && p.alive() {
			skipped += scrapeSum(t, p.metricsURL, "tierq_sweep_skipped_rows_total")
		}
	}
	require.Positive(t, skipped, "rows the sweeps skipped and reported")

	// Each poison job ended with its reason, and the good jobs did not wait
	// on it.
	var recovery time.Duration
	for _, e := range wants {
		var (
			last string
			at   time.Time
		)
		switch e.want {
		case cancelled:
			require.NoError(t, s.pool.QueryRow(ctx, `SELECT errors[array_length(errors, 1)]->>'error', finalized_at FROM river_job WHERE id = $1`, e.id).Scan(&last, &at))
		case deadLettered:
			require.NoError(t, s.pool.QueryRow(ctx, `SELECT errors->-1->>'error', moved_at FROM dead_letter_jobs WHERE job_id = $1`, e.id).Scan(&last, &at))
		default:
			continue
		}
		require.Contains(t, last, e.reason, "%s job %d", e.kind, e.id)
		recovery = max(recovery, at.Sub(insertedAt))
	}
	var goodWait time.Duration
	require.NoError(t, s.pool.QueryRow(ctx, `
		SELECT coalesce(max(finalized_at - created_at), '0')
		FROM river_job WHERE kind = $1 AND id > $2`, jobs.KindLoadTest, res[len(res)-1].Job.ID).Scan(&goodWait))
	require.Less(t, goodWait, 15*time.Second, "the slowest good job behind the poison")
	s.summary(tally, recovery, settle, fmt.Sprintf("poison=%d", len(wants)), fmt.Sprintf("bad_rows=%d", badRows),
		fmt.Sprintf("sweep_skipped=%.0f", skipped), fmt.Sprintf("api_refused=%d", 9),
		fmt.Sprintf("good_wait_max=%s", goodWait.Round(time.Millisecond)))
}

// insertBadRows writes rows the way a producer that bypasses River (or a
// person) can: in every service queue, load-test jobs whose metadata is an
// array, a string, a number, null or a boolean, over 1 MiB, or nested 300
// levels deep, waiting since an hour ago at priority 4, so that the aging
// and escalation sweeps meet them; and discarded jobs whose args or
// metadata have those shapes, for the dead-letter drain. Each is in the
// ledger: worked to completion, or dead-lettered. It returns how many.
func (s *system) insertBadRows(ctx context.Context) int {
	s.t.Helper()
	shapes := testdb.BadShapes()
	n := 0
	add := func(queue, state, args, metadata string, want final) {
		var id int64
		require.NoError(s.t, s.pool.QueryRow(ctx, `
			INSERT INTO river_job (state, queue, priority, kind, args, metadata, max_attempts, attempt,
			                       created_at, scheduled_at, attempted_at, finalized_at, errors)
			SELECT $1::river_job_state, $2, 4, $3, $4::jsonb, $5::jsonb, 5,
			       CASE WHEN $1 = 'discarded' THEN 5 ELSE 0 END, now() - interval '1 hour', now() - interval '1 hour',
			       CASE WHEN $1 = 'discarded' THEN now() END, CASE WHEN $1 = 'discarded' THEN now() END,
			       CASE WHEN $1 = 'discarded'
			            THEN ARRAY[jsonb_build_object('at', now(), 'attempt', 5, 'error', 'bad row written by hand', 'trace', '')] END
			RETURNING id`, state, queue, jobs.KindLoadTest, args, metadata).Scan(&id))
		s.ledger.add(entry{id: id, kind: jobs.KindLoadTest, queue: queue, priority: 4, want: want, reason: "bad row written by hand"})
		n++
	}
	for _, svc := range []*service.Service{s.analyzer, s.specGen} {
		for _, class := range []routing.Class{routing.Priority, routing.Default, routing.Scheduled} {
			for _, shape := range shapes {
				for range 2 {
					add(svc.Queue(class), "available", `{"sleep_ms": 1000}`, shape, completed)
				}
				add(svc.Queue(class), "discarded", shape, `{}`, deadLettered)
				add(svc.Queue(class), "discarded", `{"sleep_ms": 0}`, shape, deadLettered)
			}
		}
	}
	return n
}
