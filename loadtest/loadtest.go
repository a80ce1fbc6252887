// Package loadtest is tierq's load-test workload: a job kind (loadtest) whose
// worker sleeps for the time its args say, optionally records each
// execution, and behaves as production jobs do when asked: it fails
// (until a time, or its first attempts), retried after River's backoff or
// its own NextRetry, snoozes, and is cancelled for bad args. Benchmarks,
// the chaos suite and `tierctl demo` run it in any service's queues
// (LOAD_TEST_WORKLOAD=true registers it on a worker deployment); it
// simulates work and does nothing else.
package loadtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/tierq/tierq/tiers"
)

// Kind is the kind of the load-test workload.
const Kind = "loadtest"

// Args are the args of the load-test workload. JSON:
//
//	{"sleep_ms": 250, "record": true, "fail_until": "2026-11-21T12:00:00Z", "tier": "pro"}
//	{"sleep_ms": 20, "fail_attempts": 2, "retry_ms": 300, "snoozes": 1, "snooze_ms": 800}
//
// An attempt runs in this order: args that do not decode or are out of
// range cancel the job (river.JobCancel, "bad loadtest args: …"); Record
// records the execution; FailUntil, then FailAttempts, fail it; Snoozes
// snooze it; otherwise it sleeps SleepMS and completes.
type Args struct {
	// SleepMS is how long the job "works", in milliseconds (0 to 1 hour).
	SleepMS int `json:"sleep_ms"`
	// Record writes each attempt into load_test_executions (when it starts,
	// and when it completes, in the completing transaction), so a test can
	// count deliveries.
	Record bool `json:"record,omitempty"`
	// FailUntil makes every attempt that starts before this time fail with a
	// transient error (retried with backoff, dead-lettered when attempts run
	// out): an outage of whatever the job depends on.
	FailUntil *time.Time `json:"fail_until,omitempty"`
	// Tier is the tier the job was routed for, when the inserter says so
	// (tierctl demo does): the worker ignores it; the metrics hook, the API
	// and tierctl watch read it as they read any job's (jobmeta.TierOf).
	Tier string `json:"tier,omitempty"`
	// FailAttempts makes the job's first FailAttempts attempts fail with a
	// transient error (ErrFailure), as a flaky dependency does: River
	// retries them, after RetryMS when it is set and after River's backoff
	// (attempt⁴ seconds: 1 s, 16 s, …) otherwise. A job whose MaxAttempts
	// is at most FailAttempts fails every attempt: River discards it and
	// tierq's drain moves it to the dead-letter table. 0 to 1,000.
	FailAttempts int `json:"fail_attempts,omitempty"`
	// RetryMS, above 0, is the job's own retry delay (the worker's
	// NextRetry) in milliseconds, in place of River's backoff: River writes
	// a retry of 5 s or less straight into available with its scheduled_at
	// ahead. 0 to 1 hour.
	RetryMS int `json:"retry_ms,omitempty"`
	// Snoozes makes the job snooze (river.JobSnooze) for SnoozeMS on each
	// of its first Snoozes runs, counted by River in the job's metadata
	// ("snoozes"); a snooze uses no attempt. A snooze of 5 s or less is
	// written available with its scheduled_at ahead, a longer one
	// scheduled. Snoozes 0 to 100, SnoozeMS 1 ms to 1 hour when Snoozes is
	// set.
	Snoozes  int `json:"snoozes,omitempty"`
	SnoozeMS int `json:"snooze_ms,omitempty"`
	// Ref tells jobs of equal args apart, for inserts through
	// producer.Insert, whose unique options make equal args one job
	// (tierctl bench numbers its streams' jobs): the worker ignores it.
	Ref string `json:"ref,omitempty"`

	decodeErr error
}

func (Args) Kind() string { return Kind }

// UnmarshalJSON decodes the args without ever failing; see decodeArgs.
func (a *Args) UnmarshalJSON(data []byte) error {
	type plain Args
	return decodeArgs(data, (*plain)(a), &a.decodeErr)
}

// Worker is the load-test workload: it simulates work by sleeping for
// SleepMS and does nothing else, except what its args ask for (recording its
// executions, failing on purpose). It honours cancellation, so a stopping
// worker's soft-stop timeout and JOB_TIMEOUT apply to it like to real work.
// Registered only with LOAD_TEST_WORKLOAD=true.
type Worker struct {
	river.WorkerDefaults[Args]

	pool *pgxpool.Pool
}

var _ river.Worker[Args] = (*Worker)(nil)

// NewWorker returns the load-test workload, recording executions
// through pool (nil: jobs asking to be recorded fail).
func NewWorker(pool *pgxpool.Pool) *Worker {
	return &Worker{pool: pool}
}

// ErrFailure is the transient failure a load-test job asks for with
// fail_until or fail_attempts; the error returned wraps it and names which.
var ErrFailure = errors.New("load test: failing on purpose")

const insertLoadTestExecution = `
INSERT INTO load_test_executions (job_id, attempt, pid, client_id)
VALUES ($1, $2, $3, $4)
RETURNING id`

func (w *Worker) Work(ctx context.Context, job *river.Job[Args]) error {
	args := job.Args
	if args.decodeErr != nil {
		return cancelBadArgs(args.decodeErr)
	}
	if err := args.validate(); err != nil {
		return cancelBadArgs(err)
	}
	var execution int64
	if args.Record {
		client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
		if w.pool == nil || err != nil {
			return river.JobCancel(errors.New("load test: record asked, but this worker has no database pool or River client"))
		}
		if err := w.pool.QueryRow(ctx, insertLoadTestExecution, job.ID, job.Attempt, os.Getpid(), client.ID()).Scan(&execution); err != nil {
			return fmt.Errorf("record load-test execution: %w", err)
		}
	}
	if args.FailUntil != nil && time.Now().Before(*args.FailUntil) {
		return fmt.Errorf("%w (fail_until %s)", ErrFailure, args.FailUntil.UTC().Format(time.RFC3339))
	}
	if job.Attempt <= args.FailAttempts {
		return fmt.Errorf("%w (fail_attempts %d, attempt %d)", ErrFailure, args.FailAttempts, job.Attempt)
	}
	if args.Snoozes > 0 && snoozes(job.Metadata) < args.Snoozes {
		return river.JobSnooze(time.Duration(args.SnoozeMS) * time.Millisecond)
	}

	timer := time.NewTimer(time.Duration(args.SleepMS) * time.Millisecond)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	if !args.Record {
		return nil
	}
	return pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		completed, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job)
		if err != nil {
			return fmt.Errorf("complete job: %w", err)
		}
		// JobCompleteTx leaves a job that is no longer running as it is
		// (and would complete a later attempt's run): then this execution
		// did not complete it, and must not say so.
		if completed.State != rivertype.JobStateCompleted || completed.Attempt != job.Attempt {
			return fmt.Errorf("load test: job %d attempt %d was no longer this execution's to complete (state %s, attempt %d)",
				job.ID, job.Attempt, completed.State, completed.Attempt)
		}
		// The execution ends at the job's last statement (the clock now,
		// not the transaction's start, which came two statements earlier):
		// what runs after it is the commit and River's bookkeeping. Running
		// intervals read from these times end no earlier than the job's
		// last statement.
		if _, err := tx.Exec(ctx, `UPDATE load_test_executions SET completed_at = clock_timestamp() WHERE id = $1`, execution); err != nil {
			return fmt.Errorf("record load-test completion: %w", err)
		}
		return nil
	})
}

var errSleepRange = errors.New("sleep_ms must be between 0 and 3600000")

// maxMS is the longest sleep, retry delay and snooze: an hour.
const maxMS = int(time.Hour / time.Millisecond)

// validate checks the args' ranges; the error says which is out.
func (a Args) validate() error {
	switch {
	case a.SleepMS < 0 || a.SleepMS > maxMS:
		return errSleepRange
	case a.FailAttempts < 0 || a.FailAttempts > 1_000:
		return errors.New("fail_attempts must be between 0 and 1000")
	case a.RetryMS < 0 || a.RetryMS > maxMS:
		return errors.New("retry_ms must be between 0 and 3600000")
	case a.Snoozes < 0 || a.Snoozes > 100:
		return errors.New("snoozes must be between 0 and 100")
	case a.Snoozes > 0 && (a.SnoozeMS < 1 || a.SnoozeMS > maxMS):
		return errors.New("snooze_ms must be between 1 and 3600000 when snoozes is set")
	}
	return nil
}

// snoozes is how many times River has snoozed the job: the "snoozes" of
// its metadata (River's own key), 0 when there is none or it is not a
// number.
func snoozes(metadata []byte) int {
	var m struct {
		Snoozes int `json:"snoozes"`
	}
	if json.Unmarshal(metadata, &m) != nil {
		return 0
	}
	return m.Snoozes
}

// NextRetry is the job's RetryMS from now when it is set, and River's
// backoff otherwise (the zero time).
func (*Worker) NextRetry(job *river.Job[Args]) time.Time {
	if job.Args.RetryMS > 0 {
		return time.Now().Add(time.Duration(job.Args.RetryMS) * time.Millisecond)
	}
	return time.Time{}
}

// Timeout bounds one load-test job: sleep_ms beyond it ends in the timeout
// (retried, then dead-lettered). The chaos suite's longest job sleeps 3.5 s.
const Timeout = time.Minute

// Timeout is the package's Timeout, for every load-test job.
func (*Worker) Timeout(*river.Job[Args]) time.Duration { return Timeout }

// decodeArgs decodes into dst, keeping a failure in *decodeErr instead of
// returning it: River would retry an unmarshal error; Work cancels the job
// with the reason instead.
func decodeArgs[T any](data []byte, dst *T, decodeErr *error) error {
	if err := json.Unmarshal(data, dst); err != nil {
		*decodeErr = err
	}
	return nil
}

// cancelBadArgs cancels a job whose args did not decode or validate.
func cancelBadArgs(err error) error {
	return river.JobCancel(fmt.Errorf("bad %s args: %w", Kind, err))
}

// WithTier is a copy of the args with the job's tier in their own field too
// (producer.TierFields); an unknown tier leaves the field as it is.
func (a Args) WithTier(tier tiers.Tier, _ string) river.JobArgs {
	if tier.Valid() {
		a.Tier = tier.String()
	}
	return a
}
