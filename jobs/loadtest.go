package jobs

import (
	"context"
	"errors"
	"time"

	"github.com/riverqueue/river"
)

// KindLoadTest is the kind of the load-test workload.
const KindLoadTest = "loadtest"

// LoadTestArgs are the args of the load-test workload. JSON:
//
//	{"sleep_ms": 250}
type LoadTestArgs struct {
	// SleepMS is how long the job "works", in milliseconds (0 to 1 hour).
	SleepMS int `json:"sleep_ms"`

	decodeErr error
}

func (LoadTestArgs) Kind() string { return KindLoadTest }

// UnmarshalJSON decodes the args without ever failing; see decodeArgs.
func (a *LoadTestArgs) UnmarshalJSON(data []byte) error {
	type plain LoadTestArgs
	return decodeArgs(data, (*plain)(a), &a.decodeErr)
}

// LoadTestWorker is the load-test workload: it simulates work by sleeping for
// SleepMS and does nothing else. It honours cancellation, so a stopping
// worker's soft-stop timeout and JOB_TIMEOUT apply to it like to real work.
// Registered only with LOAD_TEST_WORKLOAD=true.
type LoadTestWorker struct {
	river.WorkerDefaults[LoadTestArgs]
}

var _ river.Worker[LoadTestArgs] = (*LoadTestWorker)(nil)

func (w *LoadTestWorker) Work(ctx context.Context, job *river.Job[LoadTestArgs]) error {
	if job.Args.decodeErr != nil {
		return cancelBadArgs(KindLoadTest, job.Args.decodeErr)
	}
	if job.Args.SleepMS < 0 || job.Args.SleepMS > int(time.Hour/time.Millisecond) {
		return cancelBadArgs(KindLoadTest, errSleepRange)
	}
	timer := time.NewTimer(time.Duration(job.Args.SleepMS) * time.Millisecond)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

var errSleepRange = errors.New("sleep_ms must be between 0 and 3600000")
