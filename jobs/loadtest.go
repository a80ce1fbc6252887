package jobs

import (
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tierq/tierq/loadtest"
	"github.com/tierq/tierq/service"
)

// The load-test workload lives in package loadtest; these names stay for the
// reference app's tools and tests.
const (
	// KindLoadTest is loadtest.Kind.
	KindLoadTest = loadtest.Kind
	// LoadTestTimeout is loadtest.Timeout.
	LoadTestTimeout = loadtest.Timeout
)

type (
	// LoadTestArgs are loadtest.Args.
	LoadTestArgs = loadtest.Args
	// LoadTestWorker is loadtest.Worker.
	LoadTestWorker = loadtest.Worker
)

// NewLoadTestWorker is loadtest.NewWorker.
func NewLoadTestWorker(pool *pgxpool.Pool) *LoadTestWorker { return loadtest.NewWorker(pool) }

// LoadTestKind is the load test's kind, with its timeout (LoadTestTimeout),
// worked on pool: no service's kind, which the reference app's scheduler
// registers (scheduler.Config.ExtraKinds) so that the rescuer on its
// leader retries a stuck load-test job.
func LoadTestKind(pool *pgxpool.Pool) service.Kind {
	return service.WorkerKind(NewLoadTestWorker(pool), service.Timeout[LoadTestArgs](LoadTestTimeout))
}

// ErrLoadTestFailure is loadtest.ErrFailure.
var ErrLoadTestFailure = loadtest.ErrFailure
