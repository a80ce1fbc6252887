package process_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/process"
	"github.com/tierq/tierq/internal/testdb"
)

type noopArgs struct{}

func (noopArgs) Kind() string { return "process_test_noop" }

type noopWorker struct{ river.WorkerDefaults[noopArgs] }

func (noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

// TestRunReturnsWhenTheClientStopsOnItsOwn: a River client that stops
// without a signal ends Run with an error (the process exits 1 and is
// restarted), after its background work has returned.
func TestRunReturnsWhenTheClientStopsOnItsOwn(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	var logs bytes.Buffer
	backgroundDone := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- process.Run(t.Context(), process.Spec{
			Name:   "test",
			Logger: slog.New(slog.NewTextHandler(&logs, nil)),
			Pool:   db.Pool.Config().Copy(),
			NewClient: func(pool *pgxpool.Pool) (*river.Client[pgx.Tx], error) {
				workers := river.NewWorkers()
				river.AddWorker(workers, noopWorker{})
				return process.NewClient(pool, &river.Config{
					Queues:  map[string]river.QueueConfig{"process_test": {MaxWorkers: 1}},
					Workers: workers,
				})
			},
			Background: func(ctx context.Context, _ *pgxpool.Pool, client *river.Client[pgx.Tx]) {
				defer close(backgroundDone)
				// Something stops the client; no signal arrives.
				require.NoError(t, client.Stop(ctx))
				<-ctx.Done() // ends only because Run cancels it
			},
		})
	}()
	select {
	case err := <-done:
		require.EqualError(t, err, "river client stopped without a signal")
	case <-time.After(20 * time.Second):
		t.Fatalf("Run did not return; log:\n%s", logs.String())
	}
	select {
	case <-backgroundDone:
	default:
		t.Fatal("Run returned before its background work")
	}
	require.Contains(t, logs.String(), "test: river client stopped without a signal")
}

// TestRunStoppedWhileStarting: a signal while the process starts (here the
// context ends while the client is made, as a scheduler's start is cut
// short by Ctrl-C) is a clean stop: Run returns nil and says so; an error
// of its own while starting is still an error.
func TestRunStoppedWhileStarting(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	for name, tc := range map[string]struct {
		cancel  bool
		wantErr string
	}{
		"Stopped": {cancel: true},
		"Failed":  {wantErr: "registry: bad kind"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var logs bytes.Buffer
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			err := process.Run(ctx, process.Spec{
				Name:   "test",
				Logger: slog.New(slog.NewTextHandler(&logs, nil)),
				Pool:   db.Pool.Config().Copy(),
				NewClient: func(*pgxpool.Pool) (*river.Client[pgx.Tx], error) {
					if tc.cancel {
						cancel() // the signal arrives
						return nil, fmt.Errorf("record services: %w", ctx.Err())
					}
					return nil, errors.New("registry: bad kind")
				},
			})
			if tc.wantErr != "" {
				require.EqualError(t, err, tc.wantErr)
				require.NotContains(t, logs.String(), "stopped before it started")
				return
			}
			require.NoError(t, err)
			require.Contains(t, logs.String(), "test stopped before it started")
			require.Contains(t, logs.String(), "record services: context canceled")
		})
	}
}
