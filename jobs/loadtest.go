package jobs

import (
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/tierq/tierq/loadtest"
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

// ErrLoadTestFailure is loadtest.ErrFailure.
var ErrLoadTestFailure = loadtest.ErrFailure
