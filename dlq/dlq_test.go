package dlq_test

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/dlq"
	"github.com/tierq/tierq/jobmeta"
)

// age moves dead letters' moved_at into the past.
func (b *bundle) age(t *testing.T, by time.Duration, ids ...int64) {
	t.Helper()
	_, err := b.db.Pool.Exec(context.Background(),
		`UPDATE dead_letter_jobs SET moved_at = moved_at - make_interval(secs => $1) WHERE id = ANY($2)`, by.Seconds(), ids)
	require.NoError(t, err)
}

func TestListFiltersAndPages(t *testing.T) {
	t.Parallel()
	b := setup(t, 12) // 2 per queue
	ctx := context.Background()
	b.age(t, 48*time.Hour, b.ids[:6]...)
	b.replay(t, []int64{b.ids[6]}, dlq.ReplayOptions{})

	list := func(f dlq.Filter, page dlq.Page) []int64 {
		t.Helper()
		if page.Limit == 0 {
			page.Limit = 100
		}
		rows, err := dlq.List(ctx, b.db.Pool, f, page)
		require.NoError(t, err)
		ids := make([]int64, len(rows))
		for i, r := range rows {
			ids[i] = r.ID
		}
		return ids
	}
	all := list(dlq.Filter{}, dlq.Page{})
	require.ElementsMatch(t, b.ids, all)
	require.True(t, slices.IsSortedFunc(all, func(a, b int64) int { return cmp.Compare(b, a) }), "newest first")
	require.ElementsMatch(t, []int64{b.ids[6], b.ids[0]}, list(dlq.Filter{Queue: "analysis_default"}, dlq.Page{}))
	require.Len(t, list(dlq.Filter{Kind: "specview"}, dlq.Page{}), 6)
	require.ElementsMatch(t, b.ids[6:], list(dlq.Filter{Since: time.Hour}, dlq.Page{}))
	require.NotContains(t, list(dlq.Filter{Pending: true}, dlq.Page{}), b.ids[6])
	require.Len(t, list(dlq.Filter{Pending: true}, dlq.Page{}), 11)
	require.Equal(t, all[5:7], list(dlq.Filter{}, dlq.Page{BeforeID: all[4], Limit: 2}), "the page after all[4]")
	require.Empty(t, list(dlq.Filter{Queue: "x' OR '1'='1"}, dlq.Page{}), "filters are parameters")

	for _, tc := range []struct {
		name string
		f    dlq.Filter
		page dlq.Page
	}{
		{"limit 0", dlq.Filter{}, dlq.Page{}},
		{"limit too big", dlq.Filter{}, dlq.Page{Limit: dlq.MaxListLimit + 1}},
		{"negative cursor", dlq.Filter{}, dlq.Page{Limit: 1, BeforeID: -1}},
		{"negative since", dlq.Filter{Since: -time.Second}, dlq.Page{Limit: 1}},
		{"huge queue", dlq.Filter{Queue: string(make([]byte, 129))}, dlq.Page{Limit: 1}},
	} {
		_, err := dlq.List(ctx, b.db.Pool, tc.f, tc.page)
		require.ErrorIs(t, err, dlq.ErrInvalid, tc.name)
	}
}

func TestPurgeDeletesOldRowsInBatches(t *testing.T) {
	t.Parallel()
	b := setup(t, 10)
	ctx := context.Background()
	b.age(t, 40*24*time.Hour, b.ids[:6]...)
	b.replay(t, b.ids[:2], dlq.ReplayOptions{}) // old and replayed
	b.replay(t, b.ids[8:], dlq.ReplayOptions{}) // new and replayed

	var batches []int
	n, err := dlq.Purge(ctx, b.db.Pool, dlq.PurgeRequest{OlderThan: 30 * 24 * time.Hour, ReplayedOnly: true, Batch: 1},
		func(n int) { batches = append(batches, n) })
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, []int{1, 1}, batches)
	require.Equal(t, 8, b.db.Count(t, `SELECT count(*) FROM dead_letter_jobs`))

	n, err = dlq.Purge(ctx, b.db.Pool, dlq.PurgeRequest{OlderThan: 30 * 24 * time.Hour, Batch: 3}, nil)
	require.NoError(t, err)
	require.Equal(t, 4, n, "the other old rows, replayed or not")
	require.Equal(t, 4, b.db.Count(t, `SELECT count(*) FROM dead_letter_jobs`))
	require.Zero(t, b.db.Count(t, `SELECT count(*) FROM dead_letter_jobs WHERE moved_at < now() - interval '1 day'`))

	_, err = dlq.Purge(ctx, b.db.Pool, dlq.PurgeRequest{OlderThan: -time.Hour, Batch: 3}, nil)
	require.ErrorIs(t, err, dlq.ErrInvalid)

	require.NoError(t, dlq.Delete(ctx, b.db.Pool, b.ids[9]))
	require.ErrorIs(t, dlq.Delete(ctx, b.db.Pool, b.ids[9]), dlq.ErrNotFound)
}

func TestPendingDepthCountsRowsNotReplayed(t *testing.T) {
	t.Parallel()
	b := setup(t, 12)
	ctx := context.Background()
	b.replay(t, b.ids[:3], dlq.ReplayOptions{})

	depth, err := dlq.PendingDepth(ctx, b.db.Pool)
	require.NoError(t, err)
	require.Equal(t, 9, depth.Total)
	require.Equal(t, map[string]int{
		"analysis_default": 1, "analysis_scheduled": 1, "specview_priority": 1,
		"specview_default": 2, "specview_scheduled": 2, "analysis_priority": 2,
	}, depth.ByQueue)
}

// TestListFiltersByErrorTextAndReplayed: ErrorContains matches any
// attempt's error, ignoring case, as a parameter (LIKE's wildcards are
// plain characters); Replayed keeps the replayed rows; a row whose errors
// are not an array matches no error text instead of failing the list.
func TestListFiltersByErrorTextAndReplayed(t *testing.T) {
	t.Parallel()
	b := setup(t, 6)
	ctx := context.Background()
	b.replay(t, []int64{b.ids[1]}, dlq.ReplayOptions{})
	_, err := b.db.Pool.Exec(ctx, `UPDATE dead_letter_jobs SET errors = '{"not": "an array"}' WHERE id = $1`, b.ids[5])
	require.NoError(t, err)

	list := func(f dlq.Filter) []int64 {
		t.Helper()
		rows, err := dlq.List(ctx, b.db.Pool, f, dlq.Page{Limit: 100})
		require.NoError(t, err)
		ids := []int64{}
		for _, r := range rows {
			ids = append(ids, r.ID)
		}
		return ids
	}
	// seed.Discarded's errors are "attempt 1 of job <i>", "attempt 2 of job <i>".
	require.Equal(t, []int64{b.ids[2]}, list(dlq.Filter{ErrorContains: "ATTEMPT 1 OF JOB 3"}))
	require.Len(t, list(dlq.Filter{ErrorContains: "attempt 2 of"}), 5, "all but the row without an array")
	require.Empty(t, list(dlq.Filter{ErrorContains: "attempt % of"}), "% is a plain character")
	require.Equal(t, []int64{b.ids[1]}, list(dlq.Filter{Replayed: true}))
	require.Equal(t, []int64{b.ids[1]}, list(dlq.Filter{Replayed: true, ErrorContains: "of job 2"}))
	require.Empty(t, list(dlq.Filter{Pending: true, ErrorContains: "of job 2"}))

	for name, f := range map[string]dlq.Filter{
		"pending and replayed": {Pending: true, Replayed: true},
		"error text too long":  {ErrorContains: strings.Repeat("x", 1001)},
	} {
		_, err := dlq.List(ctx, b.db.Pool, f, dlq.Page{Limit: 1})
		require.ErrorIs(t, err, dlq.ErrInvalid, name)
	}
}

// TestReplayRecordsActorAndReason: the replay's move in the new job's
// metadata names the actor and the reason, cut to jobmeta.MaxReasonChars.
func TestReplayRecordsActorAndReason(t *testing.T) {
	t.Parallel()
	b := setup(t, 2)
	ctx := context.Background()
	long := strings.Repeat("é", 250)
	out := b.replay(t, b.ids, dlq.ReplayOptions{Actor: "bob", Reason: "upstream fixed"})
	out2 := b.replay(t, b.ids[:1], dlq.ReplayOptions{Actor: "carol", Reason: long, Force: true})
	for _, tc := range []struct {
		jobID         int64
		actor, reason string
	}{
		{out[0].JobID, "bob", "upstream fixed"},
		{out[1].JobID, "bob", "upstream fixed"},
		{out2[0].JobID, "carol", strings.Repeat("é", jobmeta.MaxReasonChars)},
	} {
		var metadata []byte
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT metadata FROM river_job WHERE id = $1`, tc.jobID).Scan(&metadata))
		moves := jobmeta.Read(metadata).Moves
		require.NotEmpty(t, moves)
		last := moves[len(moves)-1]
		require.Equal(t, jobmeta.MoveReplay, last.Kind)
		require.Equal(t, tc.actor, last.Actor)
		require.Equal(t, tc.reason, last.Reason)
	}
	_, err := dlq.Replay(ctx, b.client, b.db.Pool, b.queues, b.ids, dlq.ReplayOptions{Actor: "a", Reason: strings.Repeat("x", 2001), Force: true})
	require.ErrorIs(t, err, dlq.ErrInvalid)
}
