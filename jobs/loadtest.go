package jobs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
)

// KindLoadTest is the kind of the load-test workload.
const KindLoadTest = "loadtest"

// LoadTestArgs are the args of the load-test workload. JSON:
//
//	{"sleep_ms": 250, "record": true, "fail_until": "2026-11-21T12:00:00Z", "tier": "pro"}
type LoadTestArgs struct {
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
	// and tierctl watch read it as they read an analysis job's.
	Tier string `json:"tier,omitempty"`

	decodeErr error
}

func (LoadTestArgs) Kind() string { return KindLoadTest }

// UnmarshalJSON decodes the args without ever failing; see decodeArgs.
func (a *LoadTestArgs) UnmarshalJSON(data []byte) error {
	type plain LoadTestArgs
	return decodeArgs(data, (*plain)(a), &a.decodeErr)
}

// LoadTestWorker is the load-test workload: it simulates work by sleeping for
// SleepMS and does nothing else, except what its args ask for (recording its
// executions, failing on purpose). It honours cancellation, so a stopping
// worker's soft-stop timeout and JOB_TIMEOUT apply to it like to real work.
// Registered only with LOAD_TEST_WORKLOAD=true.
type LoadTestWorker struct {
	river.WorkerDefaults[LoadTestArgs]

	pool *pgxpool.Pool
}

var _ river.Worker[LoadTestArgs] = (*LoadTestWorker)(nil)

// NewLoadTestWorker returns the load-test workload, recording executions
// through pool (nil: jobs asking to be recorded fail).
func NewLoadTestWorker(pool *pgxpool.Pool) *LoadTestWorker {
	return &LoadTestWorker{pool: pool}
}

// ErrLoadTestFailure is the transient failure a load-test job asks for with
// fail_until.
var ErrLoadTestFailure = errors.New("load test: failing on purpose (fail_until)")

const insertLoadTestExecution = `
INSERT INTO load_test_executions (job_id, attempt, pid, client_id)
VALUES ($1, $2, $3, $4)
RETURNING id`

func (w *LoadTestWorker) Work(ctx context.Context, job *river.Job[LoadTestArgs]) error {
	args := job.Args
	if args.decodeErr != nil {
		return cancelBadArgs(KindLoadTest, args.decodeErr)
	}
	if args.SleepMS < 0 || args.SleepMS > int(time.Hour/time.Millisecond) {
		return cancelBadArgs(KindLoadTest, errSleepRange)
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
		return ErrLoadTestFailure
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
		if _, err := tx.Exec(ctx, `UPDATE load_test_executions SET completed_at = now() WHERE id = $1`, execution); err != nil {
			return fmt.Errorf("record load-test completion: %w", err)
		}
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
		return nil
	})
}

var errSleepRange = errors.New("sleep_ms must be between 0 and 3600000")
