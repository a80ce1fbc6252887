package producer_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/producer"
	"github.com/tierq/tierq/service"
	"github.com/tierq/tierq/tiers"
)

// noteArgs have no `river:"unique"` tag: River deduplicates them on all
// their fields.
type noteArgs struct {
	Text string `json:"text"`
	Lang string `json:"lang"`
}

func (noteArgs) Kind() string { return "note" }

// receiptArgs are of a kind that declares its attempts.
type receiptArgs struct {
	Order int `json:"order" river:"unique"`
}

func (receiptArgs) Kind() string { return "receipt" }

type noopWorker[T river.JobArgs] struct{ river.WorkerDefaults[T] }

func (*noopWorker[T]) Work(context.Context, *river.Job[T]) error { return nil }

// notesService is a team's service of two kinds: note, which declares no
// attempts, and receipt, which declares 3.
func notesService(t *testing.T) *service.Service {
	t.Helper()
	svc, err := service.New(&service.Config{
		Name: "notes",
		Kinds: []service.Kind{
			service.WorkerKind(&noopWorker[noteArgs]{}),
			service.WorkerKind(&noopWorker[receiptArgs]{}, service.MaxAttempts[receiptArgs](3)),
		},
	})
	require.NoError(t, err)
	return svc
}

// insertJob inserts job through producer.Insert with client, in its own
// transaction.
func insertJob(t *testing.T, db *testdb.DB, client *river.Client[pgx.Tx], job producer.Job) producer.Inserted {
	t.Helper()
	ctx := context.Background()
	var out producer.Inserted
	require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		var err error
		out, err = producer.Insert(ctx, client, tx, job)
		return err
	}))
	return out
}

// TestMaxAttempts: a job producer.Insert inserts with a client made by
// ClientConfig gets DefaultMaxAttempts (10, not River's 25), or its kind's
// own when the kind declares one, or the caller's when it sets one; a
// client's plain Insert gets the default too.
func TestMaxAttempts(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	client := db.Producer(t)
	svc := notesService(t)

	tests := []struct {
		name string
		give producer.Job
		want int
	}{
		{name: "the default", give: producer.Job{Args: noteArgs{Text: "a"}, Service: svc, Tier: tiers.Free}, want: 10},
		{name: "the kind's", give: producer.Job{Args: receiptArgs{Order: 1}, Service: svc, Tier: tiers.Free}, want: 3},
		{name: "the caller's over the kind's", give: producer.Job{Args: receiptArgs{Order: 2}, Service: svc, Tier: tiers.Free, MaxAttempts: 5}, want: 5},
		{name: "the caller's over the default", give: producer.Job{Args: noteArgs{Text: "b"}, Service: svc, Tier: tiers.Free, MaxAttempts: 1}, want: 1},
	}
	for _, tt := range tests {
		got := insertJob(t, db, client, tt.give)
		require.False(t, got.Duplicate, tt.name)
		require.Equal(t, tt.want, got.Job.MaxAttempts, tt.name)
		require.Equal(t, tt.want, db.Count(t, `SELECT max_attempts FROM river_job WHERE id = $1`, got.Job.ID), tt.name)
	}

	res, err := client.Insert(context.Background(), noteArgs{Text: "plain"}, svc.InsertOpts(tiers.Free, "", false))
	require.NoError(t, err)
	require.Equal(t, 10, res.Job.MaxAttempts, "River's own Insert on a ClientConfig client")
}

// TestDedupWithoutUniqueTags: args with no `river:"unique"` field are
// deduplicated on all their fields (River's ByArgs with no tagged field
// keys on the whole encoded args): the same note while one is queued is
// that job, and a better tier moves it up as for tagged args; a note that
// differs in any field is a job of its own.
func TestDedupWithoutUniqueTags(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	client := db.Producer(t)
	svc := notesService(t)

	first := insertJob(t, db, client, producer.Job{Args: noteArgs{Text: "hello", Lang: "en"}, Service: svc, Tier: tiers.Free, Tenant: "u_1"})
	require.False(t, first.Duplicate)
	require.Equal(t, "notes_default", first.Job.Queue)

	again := insertJob(t, db, client, producer.Job{Args: noteArgs{Text: "hello", Lang: "en"}, Service: svc, Tier: tiers.Pro, Tenant: "u_1"})
	require.True(t, again.Duplicate, "every field equal: the same job")
	require.True(t, again.Upgraded)
	require.Equal(t, first.Job.ID, again.Job.ID)
	require.Equal(t, "notes_priority", again.Job.Queue)

	other := insertJob(t, db, client, producer.Job{Args: noteArgs{Text: "hello", Lang: "fr"}, Service: svc, Tier: tiers.Free, Tenant: "u_1"})
	require.False(t, other.Duplicate, "one field differs: another job")
	require.NotEqual(t, first.Job.ID, other.Job.ID)

	require.Equal(t, 2, db.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'note'`))
}

// TestDefaultAttemptsReachTheDeadLetterTable backs docs/library.md's
// "Attempts and retries" with River's own retry policy: a job that fails
// every attempt is retried after 1^4, 2^4, … seconds, ±10% jitter each,
// so with DefaultMaxAttempts (10) its last attempt comes 15,333 s (4h15m33s)
// after the first failure, between 3h49m59.7s and 4h41m6.3s; with 5 (a kind's
// service.MaxAttempts, the page's "fewer attempts") it is 354 s; with River's
// 25 it would be 1,763,020 s (20 days 9h43m40s).
func TestDefaultAttemptsReachTheDeadLetterTable(t *testing.T) {
	t.Parallel()

	policy := &river.DefaultClientRetryPolicy{}
	// retries is the base delay of every retry of a job with attempts
	// attempts (every attempt but the last), checking River's policy gives
	// each within 10% of it.
	retries := func(attempts int) time.Duration {
		var total time.Duration
		for failures := 1; failures < attempts; failures++ {
			base := time.Duration(failures*failures*failures*failures) * time.Second
			// The policy counts the job's recorded errors: failures-1
			// before this one.
			job := &rivertype.JobRow{Attempt: failures, Errors: make([]rivertype.AttemptError, failures-1)}
			for range 20 {
				before := time.Now()
				delay := policy.NextRetry(job).Sub(before)
				require.InDelta(t, base.Seconds(), delay.Seconds(), base.Seconds()/10+0.01, "retry after failure %d", failures)
			}
			total += base
		}
		return total
	}

	total := retries(producer.DefaultMaxAttempts)
	require.Equal(t, 15_333*time.Second, total)
	require.Equal(t, "4h15m33s", total.String())
	require.Equal(t, "3h49m59.7s", (total * 9 / 10).String(), "every retry 10% early")
	require.Equal(t, "4h41m6.3s", (total * 11 / 10).String(), "every retry 10% late")

	require.Equal(t, 354*time.Second, retries(5), "5 attempts: docs/library.md's fewer attempts")
	require.Equal(t, 1_763_020*time.Second, retries(25), "River's default attempts")
}
