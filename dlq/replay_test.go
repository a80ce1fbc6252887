package dlq_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/dlq"
	"github.com/tierq/tierq/internal/testdb"
)

type bundle struct {
	db     *testdb.DB
	client *river.Client[pgx.Tx]
	// ids are the dead letters' ids (dead_letter_jobs.id), oldest first.
	ids []int64
	// queues are the service queues (the reference app's).
	queues []string
}

// setup gives a test its own schema with n drained dead letters (see
// testdb.SeedDiscarded: the queues cycle analysis_default, analysis_scheduled,
// specview_priority, ... starting from i = 1).
func setup(t *testing.T, n int) *bundle {
	t.Helper()
	db := testdb.New(t)
	ctx := context.Background()
	testdb.SeedDiscarded(t, db, n)
	res, err := dlq.Drain(ctx, db.Pool, 1000)
	require.NoError(t, err)
	require.Equal(t, n, res.Moved)
	rows, err := db.Pool.Query(ctx, `SELECT id FROM dead_letter_jobs ORDER BY job_id`)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	return &bundle{db: db, client: db.Producer(t), ids: ids, queues: testdb.Registry(t).Queues()}
}

func (b *bundle) replay(t *testing.T, ids []int64, opts dlq.ReplayOptions) []dlq.Outcome {
	t.Helper()
	if opts.Actor == "" {
		opts.Actor = "alice"
	}
	out, err := dlq.Replay(context.Background(), b.client, b.db.Pool, b.queues, ids, opts)
	require.NoError(t, err)
	require.Len(t, out, len(ids))
	return out
}

func TestReplayInsertsAFreshJobAndMarksTheDeadLetter(t *testing.T) {
	t.Parallel()
	b := setup(t, 3)
	ctx := context.Background()
	d, err := dlq.Get(ctx, b.db.Pool, b.ids[0])
	require.NoError(t, err)

	out := b.replay(t, []int64{d.ID}, dlq.ReplayOptions{})
	require.NoError(t, out[0].Err)
	require.Equal(t, d.Queue, out[0].Queue)

	var (
		kind, queue, state string
		args, metadata     []byte
		priority, attempt  int
		maxAttempts        int
	)
	require.NoError(t, b.db.Pool.QueryRow(ctx, `
		SELECT kind, queue, state::text, args, metadata, priority, attempt, max_attempts FROM river_job WHERE id = $1`,
		out[0].JobID).Scan(&kind, &queue, &state, &args, &metadata, &priority, &attempt, &maxAttempts))
	require.Equal(t, d.Kind, kind)
	require.Equal(t, d.Queue, queue)
	require.Equal(t, "available", state)
	require.JSONEq(t, string(d.Args), string(args))
	require.Equal(t, 0, attempt, "fresh attempts")
	require.Equal(t, d.MaxAttempts, maxAttempts)
	require.Equal(t, 4, priority, "the base priority from before aging, not the aged one")
	var meta map[string]any
	require.NoError(t, json.Unmarshal(metadata, &meta))
	require.EqualValues(t, d.ID, meta["tierq:replay_of"])
	require.EqualValues(t, d.JobID, meta["tierq:replay_of_job_id"])

	after, err := dlq.Get(ctx, b.db.Pool, d.ID)
	require.NoError(t, err)
	require.NotNil(t, after.ReplayedAt)
	require.Equal(t, out[0].JobID, *after.ReplayJobID)
	require.Equal(t, "alice", *after.ReplayedBy)

	// A second replay is refused and inserts nothing; --force replays again.
	again := b.replay(t, []int64{d.ID}, dlq.ReplayOptions{})
	require.ErrorIs(t, again[0].Err, dlq.ErrAlreadyReplayed)
	require.Contains(t, again[0].Err.Error(), "alice")
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM river_job`))

	forced := b.replay(t, []int64{d.ID}, dlq.ReplayOptions{Force: true, Actor: "bob"})
	require.NoError(t, forced[0].Err)
	require.NotEqual(t, out[0].JobID, forced[0].JobID)
	require.Equal(t, 2, b.db.Count(t, `SELECT count(*) FROM river_job`))
	after, err = dlq.Get(ctx, b.db.Pool, d.ID)
	require.NoError(t, err)
	require.Equal(t, forced[0].JobID, *after.ReplayJobID)
	require.Equal(t, "bob", *after.ReplayedBy)
}

func TestReplayReportsEachIDAndReplaysTheRest(t *testing.T) {
	t.Parallel()
	b := setup(t, 6)
	ctx := context.Background()

	// ids[0] is analysis_default, ids[2] specview_priority (SeedDiscarded's cycle).
	b.replay(t, []int64{b.ids[1]}, dlq.ReplayOptions{})
	out := b.replay(t, []int64{b.ids[0], 424242, b.ids[1], b.ids[2]}, dlq.ReplayOptions{ToQueue: "analysis_priority"})
	require.NoError(t, out[0].Err)
	require.Equal(t, "analysis_priority", out[0].Queue)
	require.ErrorIs(t, out[1].Err, dlq.ErrNotFound)
	require.ErrorIs(t, out[2].Err, dlq.ErrAlreadyReplayed)
	require.ErrorIs(t, out[3].Err, dlq.ErrInvalid, "a specview job cannot go to an analysis queue")
	require.Equal(t, 2, b.db.Count(t, `SELECT count(*) FROM river_job`))
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM river_job WHERE queue = 'analysis_priority'`))
	d, err := dlq.Get(ctx, b.db.Pool, b.ids[2])
	require.NoError(t, err)
	require.Nil(t, d.ReplayedAt)

	// Whole-request errors replay nothing.
	for _, tc := range []struct {
		name string
		ids  []int64
		opts dlq.ReplayOptions
	}{
		{"no actor", []int64{b.ids[3]}, dlq.ReplayOptions{Actor: " "}},
		{"no ids", nil, dlq.ReplayOptions{Actor: "a"}},
		{"negative id", []int64{-1}, dlq.ReplayOptions{Actor: "a"}},
		{"huge queue name", []int64{b.ids[3]}, dlq.ReplayOptions{Actor: "a", ToQueue: string(make([]byte, 200))}},
		{"not a service queue", []int64{b.ids[3]}, dlq.ReplayOptions{Actor: "a", ToQueue: "analyss_priority"}},
	} {
		_, err := dlq.Replay(ctx, b.client, b.db.Pool, b.queues, tc.ids, tc.opts)
		require.ErrorIs(t, err, dlq.ErrInvalid, tc.name)
	}
	require.Equal(t, 2, b.db.Count(t, `SELECT count(*) FROM river_job`))
}

func TestRacingReplaysOfOneDeadLetterInsertOneJob(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	ctx := context.Background()

	const racers = 8
	var (
		wg    sync.WaitGroup
		outs  [racers][]dlq.Outcome
		errs  [racers]error
		start = make(chan struct{})
	)
	for i := range racers {
		wg.Go(func() {
			<-start
			outs[i], errs[i] = dlq.Replay(ctx, b.client, b.db.Pool, b.queues, b.ids, dlq.ReplayOptions{Actor: "racer"})
		})
	}
	close(start)
	wg.Wait()
	var (
		replayed []int64
		refused  int
	)
	for i := range racers {
		require.NoError(t, errs[i])
		if outs[i][0].Err == nil {
			replayed = append(replayed, outs[i][0].JobID)
		} else {
			require.ErrorIs(t, outs[i][0].Err, dlq.ErrAlreadyReplayed)
			refused++
		}
	}
	require.Len(t, replayed, 1, "exactly one replay wins")
	require.Equal(t, racers-1, refused)
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM river_job`))
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM dead_letter_jobs WHERE replay_job_id = $1`, replayed[0]))
}

func TestReplayAllFollowsTheFilterInBatches(t *testing.T) {
	t.Parallel()
	b := setup(t, 60) // 10 per queue
	ctx := context.Background()
	b.replay(t, []int64{b.ids[0]}, dlq.ReplayOptions{}) // an analysis_default one, already replayed

	var progress []int
	res, err := dlq.ReplayAll(ctx, b.client, b.db.Pool, b.queues, dlq.Filter{Queue: "analysis_default"},
		dlq.ReplayOptions{Actor: "alice"}, 4, func(n int) { progress = append(progress, n) })
	require.NoError(t, err)
	require.Equal(t, 9, res.Replayed, "the tenth was replayed before")
	require.Equal(t, map[string]int{"analysis_default": 9}, res.ByQueue)
	require.Equal(t, []int{4, 4, 1}, progress)

	// By kind into another queue of the service: only that service's rows.
	n, err := dlq.CountReplayable(ctx, b.db.Pool, b.queues, dlq.Filter{Kind: "specview"}, dlq.ReplayOptions{ToQueue: "specview_priority"})
	require.NoError(t, err)
	require.Equal(t, 30, n)
	res, err = dlq.ReplayAll(ctx, b.client, b.db.Pool, b.queues, dlq.Filter{Kind: "specview"},
		dlq.ReplayOptions{Actor: "alice", ToQueue: "specview_priority"}, 7, nil)
	require.NoError(t, err)
	require.Equal(t, 30, res.Replayed)
	require.Equal(t, 30, b.db.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'specview' AND queue = 'specview_priority'`))

	// --to-queue of one service never takes another service's rows.
	res, err = dlq.ReplayAll(ctx, b.client, b.db.Pool, b.queues, dlq.Filter{}, dlq.ReplayOptions{Actor: "alice", ToQueue: "specview_default"}, 7, nil)
	require.NoError(t, err)
	require.Zero(t, res.Replayed)

	// Everything left: the 20 other analysis rows; nothing twice.
	res, err = dlq.ReplayAll(ctx, b.client, b.db.Pool, b.queues, dlq.Filter{}, dlq.ReplayOptions{Actor: "alice"}, 1000, nil)
	require.NoError(t, err)
	require.Equal(t, 20, res.Replayed)
	require.Equal(t, 60, b.db.Count(t, `SELECT count(*) FROM river_job`))
	require.Zero(t, b.db.Count(t, `SELECT count(*) FROM dead_letter_jobs WHERE replayed_at IS NULL`))

	// With Force, the filter's rows are replayed again.
	res, err = dlq.ReplayAll(ctx, b.client, b.db.Pool, b.queues, dlq.Filter{Queue: "analysis_scheduled"}, dlq.ReplayOptions{Actor: "alice", Force: true}, 3, nil)
	require.NoError(t, err)
	require.Equal(t, 10, res.Replayed)
}

func TestReplayAllTakesOnlyRowsThatExistedWhenItStarted(t *testing.T) {
	t.Parallel()
	b := setup(t, 10)
	ctx := context.Background()

	// After the first batch, a replayed job fails again and is drained back
	// as a new dead letter: the running replay must not take it.
	first := true
	res, err := dlq.ReplayAll(ctx, b.client, b.db.Pool, b.queues, dlq.Filter{}, dlq.ReplayOptions{Actor: "alice"}, 2, func(int) {
		if !first {
			return
		}
		first = false
		_, err := b.db.Pool.Exec(ctx, `
			UPDATE river_job SET state = 'discarded', attempt = max_attempts, finalized_at = now()
			WHERE id = (SELECT min(id) FROM river_job)`)
		require.NoError(t, err)
		drained, err := dlq.Drain(ctx, b.db.Pool, 10)
		require.NoError(t, err)
		require.Equal(t, 1, drained.Moved)
	})
	require.NoError(t, err)
	require.Equal(t, 10, res.Replayed)
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM dead_letter_jobs WHERE replayed_at IS NULL`), "the new dead letter waits for the next replay")
}

func TestReplayAllStopsAtItsLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, 12)
	ctx := context.Background()

	var got []int
	for {
		res, err := dlq.ReplayAll(ctx, b.client, b.db.Pool, b.queues, dlq.Filter{}, dlq.ReplayOptions{Actor: "alice", Limit: 5}, 2, nil)
		require.NoError(t, err)
		got = append(got, res.Replayed)
		if !res.More {
			break
		}
	}
	require.Equal(t, []int{5, 5, 2}, got)
	require.Equal(t, 12, b.db.Count(t, `SELECT count(*) FROM river_job`))
}

func TestConcurrentReplayAllReplaysEachDeadLetterOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, 300)
	ctx := context.Background()

	var (
		wg    sync.WaitGroup
		total [2]int
		errs  [2]error
		start = make(chan struct{})
	)
	for i := range 2 {
		wg.Go(func() {
			<-start
			res, err := dlq.ReplayAll(ctx, b.client, b.db.Pool, b.queues, dlq.Filter{}, dlq.ReplayOptions{Actor: "r"}, 5, nil)
			total[i], errs[i] = res.Replayed, err
		})
	}
	close(start)
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.Equal(t, 300, total[0]+total[1])
	require.Equal(t, 300, b.db.Count(t, `SELECT count(*) FROM river_job`))
	require.Equal(t, 300, b.db.Count(t, `SELECT count(DISTINCT replay_job_id) FROM dead_letter_jobs`))
}

func TestReplayedJobRunsThroughRiver(t *testing.T) {
	t.Parallel()
	serviceQueues := testdb.Registry(t).Queues()
	db := testdb.New(t)
	ctx := context.Background()

	// A job that failed for a reason since fixed: replayed, it completes.
	failing := true
	var mu sync.Mutex
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[flakyArgs]) error {
		mu.Lock()
		defer mu.Unlock()
		if failing {
			return errFlaky
		}
		return nil
	}))
	db.Start(t, &river.Config{
		Schema:      db.Schema,
		Queues:      map[string]river.QueueConfig{"flaky": {MaxWorkers: 2}},
		Workers:     workers,
		RetryPolicy: immediateRetry{},
		Logger:      discard,
	})
	res, err := db.Producer(t).Insert(ctx, flakyArgs{N: 7}, &river.InsertOpts{Queue: "flaky", MaxAttempts: 2})
	require.NoError(t, err)
	testdb.WaitFor(t, 20*time.Second, "the job to be discarded", func() bool {
		return db.Jobs(t, "id = $1", res.Job.ID)[0].State == "discarded"
	})
	drained, err := dlq.Drain(ctx, db.Pool, 10)
	require.NoError(t, err)
	require.Equal(t, 1, drained.Moved)

	mu.Lock()
	failing = false
	mu.Unlock()
	list, err := dlq.List(ctx, db.Pool, dlq.Filter{Pending: true}, dlq.Page{Limit: 5})
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, "flaky: upstream unavailable", list[0].LastError())
	out, err := dlq.Replay(ctx, db.Producer(t), db.Pool, serviceQueues, []int64{list[0].ID}, dlq.ReplayOptions{Actor: "alice"})
	require.NoError(t, err)
	require.NoError(t, out[0].Err)
	testdb.WaitFor(t, 20*time.Second, "the replayed job to complete", func() bool {
		return db.Jobs(t, "id = $1", out[0].JobID)[0].State == "completed"
	})
	var args string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT args::text FROM river_job WHERE id = $1`, out[0].JobID).Scan(&args))
	require.JSONEq(t, `{"n": 7}`, args)
}

// TestReplayIntoAnyServicesQueues: the queues a dead letter may be replayed
// into are the service queues Replay is given, of the dead letter's own
// service, whatever that service is: here a team's own mailer service
// (testdb.MailerRegistry). The reference app's queues are not service
// queues then.
func TestReplayIntoAnyServicesQueues(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	mailerQueues := testdb.MailerRegistry(t).Queues()

	for range 2 {
		testdb.InsertRaw(t, db, testdb.RawJob{Kind: testdb.KindSendMail, Queue: "mailer_default", State: "discarded"})
	}
	testdb.InsertRaw(t, db, testdb.RawJob{Kind: "analysis", Queue: "analysis_default", State: "discarded"})
	_, err := dlq.Drain(ctx, db.Pool, 10)
	require.NoError(t, err)
	list, err := dlq.List(ctx, db.Pool, dlq.Filter{}, dlq.Page{Limit: 10})
	require.NoError(t, err)
	ids := map[string][]int64{}
	for _, d := range list {
		ids[d.Queue] = append(ids[d.Queue], d.ID)
	}

	require.NoError(t, dlq.ReplayOptions{Actor: "alice", ToQueue: "mailer_priority"}.Validate(mailerQueues))
	require.ErrorIs(t, dlq.ReplayOptions{Actor: "alice", ToQueue: "analysis_priority"}.Validate(mailerQueues), dlq.ErrInvalid)

	out, err := dlq.Replay(ctx, db.Producer(t), db.Pool, mailerQueues, []int64{ids["mailer_default"][0], ids["analysis_default"][0]},
		dlq.ReplayOptions{Actor: "alice", ToQueue: "mailer_priority"})
	require.NoError(t, err)
	require.NoError(t, out[0].Err)
	require.Equal(t, "mailer_priority", out[0].Queue)
	require.ErrorIs(t, out[1].Err, dlq.ErrInvalid, "an analysis dead letter never goes to the mailer's queue")

	n, err := dlq.CountReplayable(ctx, db.Pool, mailerQueues, dlq.Filter{}, dlq.ReplayOptions{ToQueue: "mailer_scheduled"})
	require.NoError(t, err)
	require.Equal(t, 1, n, "the mailer's other dead letter only")
	res, err := dlq.ReplayAll(ctx, db.Producer(t), db.Pool, mailerQueues, dlq.Filter{}, dlq.ReplayOptions{Actor: "alice", ToQueue: "mailer_scheduled"}, 10, nil)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"mailer_scheduled": 1}, res.ByQueue)
}
