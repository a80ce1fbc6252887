package loadtest

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"
)

// TestWorkBehavesAsAsked runs single attempts of the workload (no database:
// none records) and checks what each returns to River: a transient
// failure, a snooze of the asked length, a cancellation with the reason,
// or success.
func TestWorkBehavesAsAsked(t *testing.T) {
	t.Parallel()
	// Each check declares its own errors.As targets: the subtests run in
	// parallel, and shared targets were written by several at once (a data
	// race under -race).
	tests := []struct {
		name     string
		give     string // the args' JSON
		attempt  int
		metadata string
		want     func(t *testing.T, err error)
	}{
		{name: "plain", give: `{"sleep_ms": 1}`, attempt: 1, want: func(t *testing.T, err error) { require.NoError(t, err) }},
		{name: "failing attempt", give: `{"fail_attempts": 2}`, attempt: 2, want: func(t *testing.T, err error) {
			require.ErrorIs(t, err, ErrFailure)
		}},
		{name: "attempt past the failures", give: `{"fail_attempts": 2}`, attempt: 3, want: func(t *testing.T, err error) { require.NoError(t, err) }},
		{name: "first snooze", give: `{"snoozes": 2, "snooze_ms": 700}`, attempt: 1, metadata: `{}`, want: func(t *testing.T, err error) {
			var snoozeErr *river.JobSnoozeError
			require.ErrorAs(t, err, &snoozeErr)
			require.Equal(t, 700*time.Millisecond, snoozeErr.Duration)
		}},
		{name: "second snooze", give: `{"snoozes": 2, "snooze_ms": 700}`, attempt: 1, metadata: `{"snoozes": 1}`, want: func(t *testing.T, err error) {
			var snoozeErr *river.JobSnoozeError
			require.ErrorAs(t, err, &snoozeErr)
		}},
		{name: "snoozed enough", give: `{"snoozes": 2, "snooze_ms": 700}`, attempt: 1, metadata: `{"snoozes": 2}`, want: func(t *testing.T, err error) {
			require.NoError(t, err)
		}},
		{name: "snooze count not a number", give: `{"snoozes": 1, "snooze_ms": 5}`, attempt: 1, metadata: `{"snoozes": "x"}`, want: func(t *testing.T, err error) {
			var snoozeErr *river.JobSnoozeError
			require.ErrorAs(t, err, &snoozeErr)
		}},
		{name: "failure before snooze", give: `{"fail_attempts": 1, "snoozes": 1, "snooze_ms": 5}`, attempt: 1, want: func(t *testing.T, err error) {
			require.ErrorIs(t, err, ErrFailure)
		}},
		{name: "bad sleep", give: `{"sleep_ms": -1}`, attempt: 1, want: func(t *testing.T, err error) {
			var cancelErr *rivertype.JobCancelError
			require.ErrorAs(t, err, &cancelErr)
			require.EqualError(t, err, "JobCancelError: bad loadtest args: sleep_ms must be between 0 and 3600000")
		}},
		{name: "bad retry", give: `{"retry_ms": -5}`, attempt: 1, want: func(t *testing.T, err error) {
			var cancelErr *rivertype.JobCancelError
			require.ErrorAs(t, err, &cancelErr)
			require.ErrorContains(t, err, "retry_ms must be between")
		}},
		{name: "snoozes without a length", give: `{"snoozes": 1}`, attempt: 1, want: func(t *testing.T, err error) {
			var cancelErr *rivertype.JobCancelError
			require.ErrorAs(t, err, &cancelErr)
			require.ErrorContains(t, err, "snooze_ms must be between 1 and 3600000")
		}},
		{name: "args of the wrong type", give: `{"fail_attempts": "many"}`, attempt: 1, want: func(t *testing.T, err error) {
			var cancelErr *rivertype.JobCancelError
			require.ErrorAs(t, err, &cancelErr)
			require.ErrorContains(t, err, "bad loadtest args")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var args Args
			require.NoError(t, json.Unmarshal([]byte(tt.give), &args))
			job := &river.Job[Args]{JobRow: &rivertype.JobRow{ID: 1, Attempt: tt.attempt, Metadata: []byte(tt.metadata)}, Args: args}
			err := NewWorker(nil).Work(context.Background(), job)
			tt.want(t, err)
			var snoozeErr *river.JobSnoozeError
			var cancelErr *rivertype.JobCancelError
			if !errors.Is(err, ErrFailure) && !errors.As(err, &snoozeErr) && !errors.As(err, &cancelErr) {
				require.NoError(t, err)
			}
		})
	}
}

func TestNextRetry(t *testing.T) {
	t.Parallel()
	w := NewWorker(nil)
	require.True(t, w.NextRetry(&river.Job[Args]{Args: Args{}}).IsZero(), "River's backoff")
	before := time.Now()
	at := w.NextRetry(&river.Job[Args]{Args: Args{RetryMS: 300}})
	require.WithinRange(t, at, before.Add(300*time.Millisecond), time.Now().Add(300*time.Millisecond))
}
