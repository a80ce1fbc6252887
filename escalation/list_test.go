package escalation_test

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/escalation"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/routing"
)

// TestList makes three escalations through the real paths (two operators'
// Escalate, one by the scheduler's Sweep), pins their times, and lists them
// back whole, filtered and paged.
func TestList(t *testing.T) {
	t.Parallel()

	type bundle struct {
		db             *testdb.DB
		alice, bob, sw int64 // the jobs moved by alice, bob and the sweep
	}
	setup := func(t *testing.T) bundle {
		t.Helper()
		serviceQueues := testdb.Registry(t).Queues()
		db := testdb.New(t)
		ctx := context.Background()
		b := bundle{db: db}
		b.alice = insert(t, db, "analysis_default", 4)
		_, err := escalation.Escalate(ctx, db.Pool, serviceQueues, escalation.Request{
			JobID: b.alice, To: routing.Priority, Actor: "alice", Reason: "customer escalation #42",
		})
		require.NoError(t, err)
		b.bob = insert(t, db, "specview_priority", 2)
		_, err = escalation.Escalate(ctx, db.Pool, serviceQueues, escalation.Request{
			JobID: b.bob, To: routing.Scheduled, Priority: 3, Actor: "bob", Reason: "can wait",
		})
		require.NoError(t, err)
		b.sw = testdb.InsertWaiting(t, db, jobs.LoadTestArgs{}, &river.InsertOpts{Queue: "analysis_scheduled", Priority: 4}, 2*time.Hour)
		res, err := escalation.Sweep(ctx, db.Pool, serviceQueues, escalation.Rules(time.Hour, 0), 10)
		require.NoError(t, err)
		require.Equal(t, 1, res.Total)
		// Pinned times: 10:00, 11:00 and 12:00 on 2026-11-27, in id order.
		_, err = db.Pool.Exec(ctx, `UPDATE job_escalations SET escalated_at = '2026-11-27T09:00:00Z'::timestamptz + make_interval(hours => id::int)`)
		require.NoError(t, err)
		return b
	}
	at := func(hour int) time.Time { return time.Date(2026, 11, 27, hour, 0, 0, 0, time.UTC) }
	want := func(b bundle) []escalation.Escalation {
		return []escalation.Escalation{
			{ID: 3, JobID: b.sw, FromQueue: "analysis_scheduled", ToQueue: "analysis_default", FromPriority: 4, ToPriority: 4,
				Actor: "scheduler", Reason: "waited more than 1h0m0s in a scheduled queue", EscalatedAt: at(12)},
			{ID: 2, JobID: b.bob, FromQueue: "specview_priority", ToQueue: "specview_scheduled", FromPriority: 2, ToPriority: 3,
				Actor: "bob", Reason: "can wait", EscalatedAt: at(11)},
			{ID: 1, JobID: b.alice, FromQueue: "analysis_default", ToQueue: "analysis_priority", FromPriority: 4, ToPriority: 1,
				Actor: "alice", Reason: "customer escalation #42", EscalatedAt: at(10)},
		}
	}
	list := func(t *testing.T, b bundle, p escalation.ListParams) []escalation.Escalation {
		t.Helper()
		rows, err := escalation.List(context.Background(), b.db.Pool, p)
		require.NoError(t, err)
		for i := range rows {
			require.Equal(t, time.UTC, rows[i].EscalatedAt.Location()) // List answers in UTC
		}
		return rows
	}

	t.Run("NewestFirstAndFiltered", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		all := want(b)
		require.Equal(t, all, list(t, b, escalation.ListParams{}))
		tests := []struct {
			name string
			give escalation.ListParams
			want []escalation.Escalation
		}{
			{name: "queue moved out of or into", give: escalation.ListParams{Queue: "analysis_default"}, want: []escalation.Escalation{all[0], all[2]}},
			{name: "queue moved into only", give: escalation.ListParams{Queue: "specview_scheduled"}, want: all[1:2]},
			{name: "actor", give: escalation.ListParams{Actor: "scheduler"}, want: all[:1]},
			{name: "actor and queue", give: escalation.ListParams{Actor: "alice", Queue: "specview_priority"}, want: []escalation.Escalation{}},
			{name: "since inclusive", give: escalation.ListParams{Since: at(11)}, want: all[:2]},
			{name: "until exclusive", give: escalation.ListParams{Until: at(11)}, want: all[2:]},
			{name: "since and until", give: escalation.ListParams{Since: at(11), Until: at(12)}, want: all[1:2]},
			{name: "in another zone", give: escalation.ListParams{Since: at(11).In(time.FixedZone("", -5*3600))}, want: all[:2]},
			{name: "no such actor", give: escalation.ListParams{Actor: "Alice"}, want: []escalation.Escalation{}},
		}
		for _, tt := range tests {
			require.Equal(t, tt.want, list(t, b, tt.give), tt.name)
		}
	})

	t.Run("Pages", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		all := want(b)
		require.Equal(t, all[:2], list(t, b, escalation.ListParams{Limit: 2}))
		require.Equal(t, all[2:], list(t, b, escalation.ListParams{Limit: 2, BeforeID: 2}))
		require.Equal(t, all[1:2], list(t, b, escalation.ListParams{Limit: 1, BeforeID: 3, Until: at(12)}))
		require.Equal(t, []escalation.Escalation{}, list(t, b, escalation.ListParams{BeforeID: 1}))
	})
}

func TestListParamsValidate(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		give escalation.ListParams
		want string // "" for valid
	}{
		{name: "zero", give: escalation.ListParams{}},
		{name: "everything", give: escalation.ListParams{Queue: "q", Actor: "a", Since: at, Until: at.Add(time.Second), BeforeID: 9, Limit: 1000}},
		{name: "limit too big", give: escalation.ListParams{Limit: 1001}, want: "limit must be 1 to 1000"},
		{name: "limit negative", give: escalation.ListParams{Limit: -1}, want: "limit must be 1 to 1000"},
		{name: "cursor negative", give: escalation.ListParams{BeforeID: -1}, want: "the cursor (before id) must not be negative"},
		{name: "empty range", give: escalation.ListParams{Since: at, Until: at}, want: "since must be before until"},
		{name: "queue too long", give: escalation.ListParams{Queue: string(make([]byte, 129))}, want: "queue is at most 128 bytes"},
		{name: "actor NUL", give: escalation.ListParams{Actor: "a\x00"}, want: "actor holds a NUL"},
		{name: "queue not UTF-8", give: escalation.ListParams{Queue: "q\xff"}, want: "queue is not UTF-8"},
		{name: "two problems", give: escalation.ListParams{Actor: "a\xff", Limit: 5000}, want: "actor is not UTF-8; limit must be 1 to 1000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.give.Validate()
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, escalation.ErrInvalid)
			require.EqualError(t, err, "invalid escalation request: "+tt.want)
		})
	}
}
