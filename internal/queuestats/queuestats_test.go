package queuestats_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/queuestats"
	"github.com/tierq/tierq/internal/testdb"
)

// TestSummaries checks held jobs and the oldest waits against queues whose
// jobs' due times are known: the literal ages inserted, within a second
// (the test's own run time).
func TestSummaries(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		db *testdb.DB
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		return &testBundle{db: testdb.New(t)}
	}
	summaries := func(t *testing.T, b *testBundle) map[string]queuestats.Summary {
		t.Helper()
		list, err := queuestats.Summaries(context.Background(), b.db.Pool, testdb.Registry(t).Queues())
		require.NoError(t, err)
		out := map[string]queuestats.Summary{}
		for _, s := range list {
			out[s.Name] = s
		}
		return out
	}
	const tolerance = 1.0 // seconds

	t.Run("HeldJobsWaitFromTheirDueTime", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// A starving tenant: held for 90 s; one of its jobs was moved (its
		// scheduled_at 20 s ago) but became due 90 s ago. Another tenant's
		// admitted jobs are available since 5 s.
		testdb.InsertWaitingJob(t, b.db, testdb.WaitingJob{Queue: "analysis_default", Held: true, Tenant: "starving", Scheduled: 90 * time.Second})
		testdb.InsertWaitingJob(t, b.db, testdb.WaitingJob{Queue: "analysis_default", Held: true, Tenant: "starving", Scheduled: 20 * time.Second, Due: 90 * time.Second})
		testdb.InsertWaitingJob(t, b.db, testdb.WaitingJob{Queue: "analysis_default", Held: true, Tenant: "starving", Scheduled: 10 * time.Second})
		testdb.InsertWaitingJob(t, b.db, testdb.WaitingJob{Queue: "analysis_default", Tenant: "busy", Scheduled: 5 * time.Second})
		testdb.InsertWaitingJob(t, b.db, testdb.WaitingJob{Queue: "analysis_default", Tenant: "busy", Scheduled: 5 * time.Second})

		got := summaries(t, b)["analysis_default"]
		require.Equal(t, 3, got.Held)
		require.Equal(t, 3, got.Counts["pending"])
		require.Equal(t, 2, got.Counts["available"])
		require.InDelta(t, 5, got.OldestAvailableSeconds, tolerance, "available jobs only, from scheduled_at")
		require.InDelta(t, 90, got.OldestWaitingSeconds, tolerance)
	})

	t.Run("MovedHeldJobKeepsItsDueTime", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// The only held job was escalated 20 s ago and became due 90 s ago.
		testdb.InsertWaitingJob(t, b.db, testdb.WaitingJob{Queue: "specview_default", Held: true, Scheduled: 20 * time.Second, Due: 90 * time.Second})

		got := summaries(t, b)["specview_default"]
		require.Equal(t, 1, got.Held)
		require.Zero(t, got.OldestAvailableSeconds)
		require.InDelta(t, 90, got.OldestWaitingSeconds, tolerance)
	})

	t.Run("AvailableJobKeepsItsDueTime", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// Admitted by fair share 2 s ago after waiting since 90 s ago.
		testdb.InsertWaitingJob(t, b.db, testdb.WaitingJob{Queue: "analysis_priority", Scheduled: 2 * time.Second, Due: 90 * time.Second})

		got := summaries(t, b)["analysis_priority"]
		require.Zero(t, got.Held)
		require.InDelta(t, 2, got.OldestAvailableSeconds, tolerance, "from the move, as documented")
		require.InDelta(t, 90, got.OldestWaitingSeconds, tolerance)
	})

	t.Run("JobsScheduledAheadAreNotWaitingYet", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// A retry River wrote as available 3 s ahead, and a held job not due
		// for a minute: neither waits yet. The held one is still held.
		testdb.InsertWaitingJob(t, b.db, testdb.WaitingJob{Queue: "analysis_priority", Scheduled: -3 * time.Second})
		testdb.InsertWaitingJob(t, b.db, testdb.WaitingJob{Queue: "analysis_default", Held: true, Scheduled: -time.Minute})

		got := summaries(t, b)
		require.Equal(t, 1, got["analysis_priority"].Counts["available"])
		require.Zero(t, got["analysis_priority"].OldestAvailableSeconds, "0, not -3")
		require.Zero(t, got["analysis_priority"].OldestWaitingSeconds, "0, not -3")
		require.Equal(t, 1, got["analysis_default"].Held)
		require.Zero(t, got["analysis_default"].OldestWaitingSeconds)

		// Beside a job that waits, the one ahead changes nothing.
		testdb.InsertWaitingJob(t, b.db, testdb.WaitingJob{Queue: "analysis_priority", Scheduled: 7 * time.Second})
		got = summaries(t, b)
		require.InDelta(t, 7, got["analysis_priority"].OldestAvailableSeconds, tolerance)
		require.InDelta(t, 7, got["analysis_priority"].OldestWaitingSeconds, tolerance)
	})

	t.Run("OnlyFairSharesPendingJobsAreHeld", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// Pending jobs fair share did not hold: someone else's (no mark) and
		// a row whose metadata is the mark as a JSON string.
		testdb.InsertRaw(t, b.db, testdb.RawJob{Kind: "other", Queue: "analysis_default", State: "pending", Wait: time.Hour})
		testdb.InsertRaw(t, b.db, testdb.RawJob{Kind: "other", Queue: "analysis_default", State: "pending", Metadata: `"tierq:held_at"`, Wait: time.Hour})
		// Held jobs whose metadata is not an object are not counted either.
		for name, v := range testdb.NotObjects {
			testdb.InsertRaw(t, b.db, testdb.RawJob{Kind: "raw_" + name, Queue: "analysis_default", State: "available", Metadata: v, Wait: 40 * time.Second})
		}

		got := summaries(t, b)["analysis_default"]
		require.Zero(t, got.Held)
		require.Equal(t, 2, got.Counts["pending"])
		require.InDelta(t, 40, got.OldestAvailableSeconds, tolerance)
		require.InDelta(t, 40, got.OldestWaitingSeconds, tolerance, "metadata of any shape: its scheduled_at")
	})

	t.Run("InfiniteTimestampsHaveNoAge", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		testdb.AllowInfinite(t, b.db) // where an operator dropped migration 00010's check
		_, err := b.db.Pool.Exec(context.Background(), `
			INSERT INTO river_job (state, queue, priority, kind, args, metadata, max_attempts, scheduled_at)
			VALUES ('available', 'analysis_default', 4, 'raw', '{}', '{}', 1, '-infinity'),
			       ('pending', 'analysis_default', 4, 'raw', '{}', '{"tierq:held_at": "x"}', 1, '-infinity'),
			       ('pending', 'analysis_default', 4, 'raw', '{}', '{"tierq:held_at": "x"}', 1, 'infinity')`)
		require.NoError(t, err)

		got := summaries(t, b)["analysis_default"]
		require.Equal(t, 2, got.Held)
		require.Zero(t, got.OldestAvailableSeconds)
		require.Zero(t, got.OldestWaitingSeconds)
	})

	t.Run("NoneWaiting", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, s := range summaries(t, b) {
			require.Zero(t, s.Held, s.Name)
			require.Zero(t, s.OldestAvailableSeconds, s.Name)
			require.Zero(t, s.OldestWaitingSeconds, s.Name)
		}
	})
}
