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
// says one second per attempt (none for a zero job, so WorkerKind's check
// lets it through): the kind's timeout must win, so River never calls it.
type deadlineWorker[T river.JobArgs] struct {
	river.WorkerDefaults[T]
	seen chan<- deadline
}

func (*deadlineWorker[T]) Timeout(job *river.Job[T]) time.Duration {
	return time.Duration(job.Attempt) * time.Second
}

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

// ownTimeoutWorker has a Timeout method of its own, as workers had before
// kinds declared their timeouts: timeout for every job, or a panic when
// the job has no args to read (a timeout per job).
type ownTimeoutWorker struct {
	river.WorkerDefaults[deadlineArgs]
	timeout time.Duration
	perJob  bool
}

func (w *ownTimeoutWorker) Timeout(job *river.Job[deadlineArgs]) time.Duration {
	if w.perJob && job.EncodedArgs == nil {
		panic("no args to read")
	}
	return w.timeout
}

func (*ownTimeoutWorker) Work(context.Context, *river.Job[deadlineArgs]) error { return nil }

// TestWorkerTimeoutNotLostSilently: a worker whose own Timeout method says
// 5 minutes, in a kind that declares no timeout (so River would apply
// DefaultTimeout, not the worker's), makes the kind invalid with the fix
// in the error; declared 5 minutes, it is fine, and so is a method that
// returns River's 0 (the default) or panics on a zero job (per job,
// unknown). A declaration that differs from the method is refused too.
func TestWorkerTimeoutNotLostSilently(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		give    service.Kind
		wantErr string
	}{
		{name: "undeclared", give: service.WorkerKind[deadlineArgs](&ownTimeoutWorker{timeout: 5 * time.Minute}),
			wantErr: `service "deadlines": invalid service: kind "deadline": its worker's Timeout method returns 5m0s, but the kind's timeout is 1m0s (the default, service.DefaultTimeout), which River applies instead: ` +
				`declare the worker's with service.Timeout[service_test.deadlineArgs](5m0s) in WorkerKind (and drop the method)`},
		{name: "declared otherwise", give: service.WorkerKind[deadlineArgs](&ownTimeoutWorker{timeout: 5 * time.Minute}, service.Timeout[deadlineArgs](2*time.Minute)),
			wantErr: `service "deadlines": invalid service: kind "deadline": its worker's Timeout method returns 5m0s, but the kind's timeout is 2m0s (its declared timeout), which River applies instead: ` +
				`declare the worker's with service.Timeout[service_test.deadlineArgs](5m0s) in WorkerKind (and drop the method)`},
		{name: "no timeout", give: service.WorkerKind[deadlineArgs](&ownTimeoutWorker{timeout: -1}),
			wantErr: `service "deadlines": invalid service: kind "deadline": its worker's Timeout method returns -1ns, but the kind's timeout is 1m0s (the default, service.DefaultTimeout), which River applies instead: ` +
				`declare the worker's with service.Timeout[service_test.deadlineArgs](-1ns) in WorkerKind (and drop the method)`},
		{name: "declared the same", give: service.WorkerKind[deadlineArgs](&ownTimeoutWorker{timeout: 5 * time.Minute}, service.Timeout[deadlineArgs](5*time.Minute))},
		{name: "the default", give: service.WorkerKind[deadlineArgs](&ownTimeoutWorker{timeout: time.Minute})},
		{name: "zero", give: service.WorkerKind[deadlineArgs](&ownTimeoutWorker{})},
		{name: "per job", give: service.WorkerKind[deadlineArgs](&ownTimeoutWorker{timeout: 5 * time.Minute, perJob: true})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := service.New(&service.Config{Name: "deadlines", Kinds: []service.Kind{tt.give}})
			if tt.wantErr == "" {
				require.NoError(t, err)
				require.NoError(t, tt.give.Err())
				return
			}
			require.ErrorIs(t, err, service.ErrInvalid)
			require.EqualError(t, err, tt.wantErr)
			require.ErrorIs(t, tt.give.Err(), service.ErrInvalid)
		})
	}
}
