package service_test

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/service"
	"github.com/tierq/tierq/tiers"
)

// deadlineArgs are the args of a kind whose worker reports the deadline
// River gave its job's context.
type deadlineArgs struct{}

func (deadlineArgs) Kind() string { return "deadline" }

// otherDeadlineArgs are the same, for a kind that declares no timeout.
type otherDeadlineArgs struct{}

func (otherDeadlineArgs) Kind() string { return "deadline_default" }

// deadline is what a worker saw: when Work started, and its context's
// deadline.
type deadline struct {
	start, deadline time.Time
	ok              bool
}

// deadlineWorker reports its context's deadline. Its own Timeout method
// says one second: the kind's timeout must win, so River never calls it.
type deadlineWorker[T river.JobArgs] struct {
	river.WorkerDefaults[T]
	seen chan<- deadline
}

func (*deadlineWorker[T]) Timeout(*river.Job[T]) time.Duration { return time.Second }

func (w *deadlineWorker[T]) Work(ctx context.Context, _ *river.Job[T]) error {
	d, ok := ctx.Deadline()
	w.seen <- deadline{start: time.Now(), deadline: d, ok: ok}
	return nil
}

// TestRiverAppliesTheKindsTimeout: a real River client runs a job of a kind
// that declares 7 minutes with a context whose deadline is 7 minutes after
// the job started, though the client's JobTimeout is 5 minutes and the
// worker's own Timeout method says 1 second; a kind that declares none
// gets DefaultTimeout (1 minute), not the client's JobTimeout.
func TestRiverAppliesTheKindsTimeout(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()

	declared, undeclared := make(chan deadline, 1), make(chan deadline, 1)
	svc, err := service.New(&service.Config{
		Name: "deadlines",
		Kinds: []service.Kind{
			service.WorkerKind(&deadlineWorker[deadlineArgs]{seen: declared}, service.Timeout[deadlineArgs](7*time.Minute)),
			service.WorkerKind(&deadlineWorker[otherDeadlineArgs]{seen: undeclared}),
		},
	})
	require.NoError(t, err)
	workers := river.NewWorkers()
	require.NoError(t, svc.AddWorkers(workers))
	client := db.Start(t, &river.Config{
		Schema:     db.Schema,
		JobTimeout: 5 * time.Minute,
		Queues:     map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2}},
		Workers:    workers,
	})

	tests := []struct {
		name string
		args river.JobArgs
		seen <-chan deadline
		want time.Duration
	}{
		{name: "declared", args: deadlineArgs{}, seen: declared, want: 7 * time.Minute},
		{name: "the default", args: otherDeadlineArgs{}, seen: undeclared, want: time.Minute},
	}
	for _, tt := range tests {
		_, err := client.Insert(ctx, tt.args, nil)
		require.NoError(t, err, tt.name)
	}
	for _, tt := range tests {
		select {
		case got := <-tt.seen:
			require.True(t, got.ok, "%s: the job's context has a deadline", tt.name)
			// River sets the deadline just before Work starts.
			require.WithinRange(t, got.deadline, got.start.Add(tt.want-5*time.Second), got.start.Add(tt.want), tt.name)
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: the job did not run", tt.name)
		}
	}
}

// TestKindTimeout: a kind's timeout is the one it declares, or
// DefaultTimeout; Registry.Timeouts has every kind's and periodic kind's.
func TestKindTimeout(t *testing.T) {
	t.Parallel()

	declared := service.WorkerKind(&deadlineWorker[deadlineArgs]{}, service.Timeout[deadlineArgs](90*time.Second), service.MaxAttempts[deadlineArgs](3))
	undeclared := service.WorkerKind(&deadlineWorker[otherDeadlineArgs]{})
	require.Equal(t, 90*time.Second, declared.Timeout())
	require.Equal(t, 3, declared.MaxAttempts())
	require.NoError(t, declared.Err())
	require.Equal(t, time.Minute, undeclared.Timeout())
	require.Equal(t, time.Minute, service.DefaultTimeout)
	require.Equal(t, 0, undeclared.MaxAttempts(), "none declared: the inserting process's default applies")

	svc, err := service.New(&service.Config{
		Name:          "deadlines",
		Kinds:         []service.Kind{declared},
		PeriodicKinds: []service.Kind{undeclared},
	})
	require.NoError(t, err)
	mailer := testdb.MailerRegistry(t)
	registry, err := service.NewRegistry(svc)
	require.NoError(t, err)
	registry, err = registry.Join(mailer)
	require.NoError(t, err)
	require.Equal(t, map[string]time.Duration{
		"deadline": 90 * time.Second, "deadline_default": time.Minute, "send_mail": time.Minute,
	}, registry.Timeouts())

	// The kind's attempts go into the insert options tierq inserts with;
	// a kind that declares none leaves River's 0 (the client's default).
	require.Equal(t, 3, svc.KindInsertOpts("deadline", tiers.Pro, "u_1", false).MaxAttempts)
	require.Equal(t, "deadlines_priority", svc.KindInsertOpts("deadline", tiers.Pro, "u_1", false).Queue)
	require.Equal(t, 0, svc.KindInsertOpts("deadline_default", tiers.Pro, "u_1", false).MaxAttempts, "a periodic kind is not the service's work")
	require.Equal(t, 0, svc.InsertOpts(tiers.Pro, "u_1", false).MaxAttempts)
}

// TestKindOptionsRefused: a timeout that is not positive (River's -1, no
// timeout, would never be rescued) and attempts out of 1..1000 make the
// kind invalid: service.New refuses it, naming the kind, and so does
// Kind.AddWorker.
func TestKindOptionsRefused(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		give service.Kind
		want string
	}{
		{name: "no timeout", give: service.WorkerKind(&deadlineWorker[deadlineArgs]{}, service.Timeout[deadlineArgs](-1)),
			want: `kind "deadline": timeout -1ns must be positive (a kind without one, -1, is never rescued when its worker dies)`},
		{name: "negative", give: service.WorkerKind(&deadlineWorker[deadlineArgs]{}, service.Timeout[deadlineArgs](-time.Minute)),
			want: `kind "deadline": timeout -1m0s must be positive (a kind without one, -1, is never rescued when its worker dies)`},
		{name: "zero", give: service.WorkerKind(&deadlineWorker[deadlineArgs]{}, service.Timeout[deadlineArgs](0)),
			want: `kind "deadline": timeout 0s must be positive (a kind without one, -1, is never rescued when its worker dies)`},
		{name: "no attempts", give: service.WorkerKind(&deadlineWorker[deadlineArgs]{}, service.MaxAttempts[deadlineArgs](0)),
			want: `kind "deadline": max attempts 0 not in 1..1000`},
		{name: "too many attempts and no timeout", give: service.WorkerKind(&deadlineWorker[deadlineArgs]{},
			service.MaxAttempts[deadlineArgs](1001), service.Timeout[deadlineArgs](-1)),
			want: `kind "deadline": timeout -1ns must be positive (a kind without one, -1, is never rescued when its worker dies); max attempts 1001 not in 1..1000`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.ErrorIs(t, tt.give.Err(), service.ErrInvalid)
			require.EqualError(t, tt.give.Err(), "invalid service: "+tt.want)
			require.ErrorIs(t, tt.give.AddWorker(river.NewWorkers()), service.ErrInvalid)

			_, err := service.New(&service.Config{Name: "deadlines", Kinds: []service.Kind{tt.give}})
			require.ErrorIs(t, err, service.ErrInvalid)
			require.EqualError(t, err, `service "deadlines": invalid service: `+tt.want)
			_, err = service.New(&service.Config{Name: "deadlines", Kinds: []service.Kind{service.WorkerKind(&deadlineWorker[otherDeadlineArgs]{})},
				PeriodicKinds: []service.Kind{tt.give}})
			require.EqualError(t, err, `service "deadlines": invalid service: `+tt.want, "a periodic kind too")
		})
	}
	require.EqualError(t, service.Kind{}.AddWorker(river.NewWorkers()), "invalid service: kind not made by WorkerKind")
}
