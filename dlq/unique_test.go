package dlq_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/dlq"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/producer"
)

// uniqueArgs are unique by target, like the reference app's analysis.
type uniqueArgs struct {
	Target string `json:"target" river:"unique"`
	Note   string `json:"note"`
}

func (uniqueArgs) Kind() string { return "unique_test" }

// TestReplayKeepsUniqueness: two dead letters of one unique job (same
// unique key) replayed in one request give one live job; the other is
// refused as its duplicate, and so is every later replay, forced or bulk,
// while that job is live. The replayed job keeps the original metadata's
// own keys, not River's.
func TestReplayKeepsUniqueness(t *testing.T) {
	t.Parallel()
	serviceQueues := testdb.Registry(t).Queues()
	db := testdb.New(t)
	ctx := context.Background()
	client := db.Producer(t)

	var jobIDs []int64
	for _, note := range []string{"first", "second"} {
		res, err := client.Insert(ctx, uniqueArgs{Target: "/srv/t", Note: note}, &river.InsertOpts{
			Queue: "analysis_default", UniqueOpts: producer.UniqueOpts(),
			Metadata: []byte(`{"team": "payments", "river:rescue_count": 2}`),
		})
		require.NoError(t, err)
		require.False(t, res.UniqueSkippedAsDuplicate)
		jobIDs = append(jobIDs, res.Job.ID)
		_, err = db.Pool.Exec(ctx, `UPDATE river_job SET state = 'discarded', finalized_at = now() WHERE id = $1`, res.Job.ID)
		require.NoError(t, err)
	}
	_, err := dlq.Drain(ctx, db.Pool, 100)
	require.NoError(t, err)
	var ids []int64
	for _, jobID := range jobIDs {
		var id int64
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT id FROM dead_letter_jobs WHERE job_id = $1 AND unique_key IS NOT NULL
			AND unique_states IS NOT NULL`, jobID).Scan(&id))
		ids = append(ids, id)
	}

	out, err := dlq.Replay(ctx, client, db.Pool, serviceQueues, ids, dlq.ReplayOptions{Actor: "alice"})
	require.NoError(t, err)
	require.NoError(t, out[0].Err)
	live := out[0].JobID
	require.ErrorIs(t, out[1].Err, dlq.ErrDuplicate)
	require.Equal(t, dlq.Outcome{ID: ids[1], DuplicateOf: live, Err: out[1].Err}, out[1])
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'unique_test' AND state = 'available'`))
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM dead_letter_jobs WHERE replayed_at IS NULL`), "the duplicate stays pending")

	// The next insert of the same job finds the replayed one.
	res, err := client.Insert(ctx, uniqueArgs{Target: "/srv/t", Note: "third"}, &river.InsertOpts{Queue: "analysis_default", UniqueOpts: producer.UniqueOpts()})
	require.NoError(t, err)
	require.True(t, res.UniqueSkippedAsDuplicate)
	require.Equal(t, live, res.Job.ID)

	var metadata map[string]any
	require.NoError(t, json.Unmarshal(res.Job.Metadata, &metadata))
	require.Equal(t, "payments", metadata["team"])
	require.NotContains(t, metadata, "river:rescue_count")
	require.EqualValues(t, ids[0], metadata["tierq:replay_of"])

	// Forced and bulk replays are refused while the job is live.
	out, err = dlq.Replay(ctx, client, db.Pool, serviceQueues, ids, dlq.ReplayOptions{Actor: "alice", Force: true})
	require.NoError(t, err)
	for _, o := range out {
		require.True(t, errors.Is(o.Err, dlq.ErrDuplicate), "%v", o.Err)
		require.Equal(t, live, o.DuplicateOf)
	}
	all, err := dlq.ReplayAll(ctx, client, db.Pool, serviceQueues, dlq.Filter{}, dlq.ReplayOptions{Actor: "alice", Force: true}, 10, nil)
	require.NoError(t, err)
	require.Equal(t, dlq.ReplayAllResult{ByQueue: map[string]int{}, Duplicates: 2,
		DuplicateOf: map[int64]int64{ids[0]: live, ids[1]: live}}, all)
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'unique_test'`))
}

// TestBoundedReplayAllPassesOverHeldAndRefusedDeadLetters: dead letters
// whose key a live job holds, and one River refuses to insert (a tag River
// does not accept, written by hand), come first by id; a replay bounded to
// 2 per call still replays the others, call after call, and then reports
// "more": false. Before, the held ones counted toward the limit at every
// call and a client calling again while "more" looped for ever.
func TestBoundedReplayAllPassesOverHeldAndRefusedDeadLetters(t *testing.T) {
	t.Parallel()
	serviceQueues := testdb.Registry(t).Queues()
	db := testdb.New(t)
	ctx := context.Background()
	client := db.Producer(t)

	discard := func(args uniqueArgs, opts *river.InsertOpts) int64 {
		res, err := client.Insert(ctx, args, opts)
		require.NoError(t, err)
		_, err = db.Pool.Exec(ctx, `UPDATE river_job SET state = 'discarded', finalized_at = now() WHERE id = $1`, res.Job.ID)
		require.NoError(t, err)
		return res.Job.ID
	}
	unique := &river.InsertOpts{Queue: "analysis_default", UniqueOpts: producer.UniqueOpts()}
	var held []int64
	for _, target := range []string{"/a", "/b", "/c"} {
		held = append(held, discard(uniqueArgs{Target: target}, unique))
	}
	refused := discard(uniqueArgs{Target: "/bad-tag"}, &river.InsertOpts{Queue: "analysis_default"})
	var free []int64
	for _, target := range []string{"/d", "/e", "/f"} {
		free = append(free, discard(uniqueArgs{Target: target}, &river.InsertOpts{Queue: "analysis_default"}))
	}
	_, err := dlq.Drain(ctx, db.Pool, 100)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `UPDATE dead_letter_jobs SET tags = '{x}' WHERE job_id = $1`, refused)
	require.NoError(t, err)
	// Live jobs now hold the three keys.
	for _, target := range []string{"/a", "/b", "/c"} {
		_, err := client.Insert(ctx, uniqueArgs{Target: target}, unique)
		require.NoError(t, err)
	}

	opts := dlq.ReplayOptions{Actor: "alice", Limit: 2}
	first, err := dlq.ReplayAll(ctx, client, db.Pool, serviceQueues, dlq.Filter{}, opts, 10, nil)
	require.NoError(t, err)
	require.Equal(t, 2, first.Replayed)
	require.True(t, first.More)
	require.Equal(t, 3, first.Duplicates)
	require.Len(t, first.DuplicateOf, 3)
	require.Len(t, first.Invalid, 1)
	for _, reason := range first.Invalid {
		require.Contains(t, reason, "tag")
	}
	second, err := dlq.ReplayAll(ctx, client, db.Pool, serviceQueues, dlq.Filter{}, opts, 10, nil)
	require.NoError(t, err)
	require.Equal(t, 1, second.Replayed)
	require.False(t, second.More)
	require.Equal(t, 3, second.Duplicates)
	third, err := dlq.ReplayAll(ctx, client, db.Pool, serviceQueues, dlq.Filter{}, opts, 10, nil)
	require.NoError(t, err)
	require.Zero(t, third.Replayed)
	require.False(t, third.More)

	require.Equal(t, 3, db.Count(t, `SELECT count(*) FROM dead_letter_jobs WHERE job_id = ANY($1) AND replay_job_id IS NOT NULL`, free))
	require.Equal(t, 4, db.Count(t, `SELECT count(*) FROM dead_letter_jobs WHERE job_id = ANY($1) AND replayed_at IS NULL`,
		append(held, refused)), "held and refused stay pending")

	// One by one, the refused dead letter says why and the others go on.
	var refusedID, freeID int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT id FROM dead_letter_jobs WHERE job_id = $1`, refused).Scan(&refusedID))
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT id FROM dead_letter_jobs WHERE job_id = $1`, free[0]).Scan(&freeID))
	out, err := dlq.Replay(ctx, client, db.Pool, serviceQueues, []int64{refusedID, freeID}, dlq.ReplayOptions{Actor: "alice", Force: true})
	require.NoError(t, err)
	require.ErrorIs(t, out[0].Err, dlq.ErrInvalid)
	require.Contains(t, out[0].Err.Error(), "cannot be inserted as it is")
	require.NoError(t, out[1].Err)
	require.Positive(t, out[1].JobID)
}
