package scheduler_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/dlq"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/scheduler"
)

// alwaysFailsArgs is a test job kind whose handler always returns an error,
// as a handler does when a dependency is down.
type alwaysFailsArgs struct{}

func (alwaysFailsArgs) Kind() string { return "always_fails" }

// immediateRetry retries at once instead of after River's attempt^4 seconds.
type immediateRetry struct{}

func (immediateRetry) NextRetry(*rivertype.JobRow) time.Time { return time.Now() }

func TestRiverNeverDeletesDiscardedJobs(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()

	// A month-old completed job (River's cleaner deletes it: proof that the
	// cleaner ran) and a month-old discarded one (it must not).
	var completed, discarded int64
	for _, state := range []string{"completed", "discarded"} {
		var id int64
		require.NoError(t, db.Pool.QueryRow(ctx, `
			INSERT INTO river_job (state, queue, priority, kind, args, max_attempts, attempt, attempted_at, created_at, scheduled_at, finalized_at)
			VALUES ($1::text::river_job_state, 'analysis_default', 4, 'loadtest', '{}', 1, 1, now() - interval '30 days',
			        now() - interval '30 days', now() - interval '30 days', now() - interval '30 days')
			RETURNING id`, state).Scan(&id))
		if state == "completed" {
			completed = id
		} else {
			discarded = id
		}
	}

	riverConfig := riverConfig(t, schedulerConfig(t, db), db.Pool, discard, newMetrics(t, prometheus.NewRegistry()))
	require.Equal(t, time.Duration(-1), riverConfig.DiscardedJobRetentionPeriod, "only the dead-letter drain removes discarded jobs")
	riverConfig.PeriodicJobs = nil // no drain: River's cleaner alone
	db.Start(t, riverConfig)
	testdb.WaitFor(t, 20*time.Second, "River's cleaner to delete the old completed job", func() bool {
		return len(db.Jobs(t, "id = $1", completed)) == 0
	})
	require.Equal(t, "discarded", db.Jobs(t, "id = $1", discarded)[0].State)
}

func TestFailingJobEndsInTheDeadLetterTable(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()

	// A worker process (never a leader, as tierq's are) whose handler fails.
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(context.Context, *river.Job[alwaysFailsArgs]) error {
		return errors.New("payments API unavailable")
	}))
	db.Start(t, &river.Config{
		LeaderElectionDisabled: true,
		Logger:                 discard,
		Queues:                 map[string]river.QueueConfig{"analysis_default": {MaxWorkers: 2}},
		RetryPolicy:            immediateRetry{},
		Schema:                 db.Schema,
		Workers:                workers,
	})
	// The scheduler leads: it makes retryable jobs available again and drains.
	startScheduler(t, db, schedulerConfig(t, db, "DLQ_DRAIN_INTERVAL=1s"))

	res, err := db.Producer(t).Insert(ctx, alwaysFailsArgs{}, &river.InsertOpts{Queue: "analysis_default", MaxAttempts: 3})
	require.NoError(t, err)
	testdb.WaitFor(t, 30*time.Second, "the job to reach the dead-letter table", func() bool {
		return db.Count(t, `SELECT count(*) FROM dead_letter_jobs WHERE job_id = $1`, res.Job.ID) == 1
	})
	require.Empty(t, db.Jobs(t, "id = $1", res.Job.ID), "moved, not copied")

	list, err := dlq.List(ctx, db.Pool, dlq.Filter{Kind: "always_fails"}, dlq.Page{Limit: 10})
	require.NoError(t, err)
	require.Len(t, list, 1)
	d := list[0]
	require.Equal(t, "analysis_default", d.Queue)
	require.Equal(t, 3, d.Attempt)
	require.Equal(t, 3, d.MaxAttempts)
	require.Len(t, d.Errors, 3, "every attempt's error")
	for i, e := range d.Errors {
		require.Equal(t, i+1, e.Attempt)
		require.Equal(t, "payments API unavailable", e.Error)
	}
	require.WithinDuration(t, res.Job.CreatedAt, d.CreatedAt, time.Millisecond, "the original enqueue time")
}

func TestJobRescuedAfterItsLastAttemptEndsInTheDeadLetterTable(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()

	res, err := db.Producer(t).Insert(ctx, jobs.LoadTestArgs{SleepMS: 10}, &river.InsertOpts{Queue: "analysis_default", MaxAttempts: 1})
	require.NoError(t, err)
	markStuck(t, db, res.Job.ID) // running, attempt 1 of 1, its worker gone for 2h

	startScheduler(t, db, schedulerConfig(t, db, "JOB_TIMEOUT=1s", "RESCUE_STUCK_JOBS_AFTER=2s", "DLQ_DRAIN_INTERVAL=1s"))
	testdb.WaitFor(t, 30*time.Second, "the rescued job to reach the dead-letter table", func() bool {
		return db.Count(t, `SELECT count(*) FROM dead_letter_jobs WHERE job_id = $1`, res.Job.ID) == 1
	})
	var lastError string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT errors->-1->>'error' FROM dead_letter_jobs WHERE job_id = $1`, res.Job.ID).Scan(&lastError))
	require.Contains(t, lastError, "Stuck job rescued")
	require.Empty(t, db.Jobs(t, "id = $1", res.Job.ID))
}

func TestHangingWebhookDoesNotStallTheDrain(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)

	var calls atomic.Int64
	hang := make(chan struct{})
	hook := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		select { // never answers
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(hook.Close)
	t.Cleanup(func() { close(hang) })

	testdb.SeedDiscarded(t, db, 50)
	startScheduler(t, db, schedulerConfig(t, db, "DLQ_DRAIN_INTERVAL=1s", "DLQ_ALERT_WEBHOOK_URL="+hook.URL,
		"DLQ_ALERT_TIMEOUT=500ms", "DLQ_ALERT_INTERVAL=1s"))
	testdb.WaitFor(t, 15*time.Second, "the first 50 to drain", func() bool {
		return db.Count(t, `SELECT count(*) FROM dead_letter_jobs`) == 50
	})
	testdb.WaitFor(t, 15*time.Second, "the webhook to be called", func() bool { return calls.Load() >= 1 })

	// The webhook hangs on every call; later drains still run and move.
	testdb.SeedDiscarded(t, db, 50)
	testdb.WaitFor(t, 15*time.Second, "the next 50 to drain", func() bool {
		return db.Count(t, `SELECT count(*) FROM dead_letter_jobs`) == 100
	})
	testdb.WaitFor(t, 15*time.Second, "drain jobs to complete despite the webhook", func() bool {
		return db.Count(t, `SELECT count(*) FROM river_job WHERE kind = $1 AND state = 'completed'`, scheduler.KindDLQDrain) >= 2
	})
	require.Zero(t, db.Count(t, `SELECT count(*) FROM river_job WHERE kind = $1 AND state IN ('retryable', 'discarded')`, scheduler.KindDLQDrain),
		"a failing webhook never fails the drain")
}
