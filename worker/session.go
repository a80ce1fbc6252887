package worker

import (
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tierq/tierq/loadtest"
	"github.com/tierq/tierq/service"
)

// IdleInTransactionParam is the PostgreSQL setting Run sets on every
// session of the worker's pool (SessionPoolConfig).
const IdleInTransactionParam = "idle_in_transaction_session_timeout"

// IdleInTransactionTimeout is the idle_in_transaction_session_timeout Run
// sets on the worker's database sessions: the longest timeout of the job
// kinds the deployment fetches (service.Timeout, else
// service.DefaultTimeout; the load-test workload's 1m when it runs it).
//
// Why: a worker whose network path to the database goes silent in the
// middle of a transaction (a job's completing transaction has updated its
// river_job row, the COMMIT is lost on the way) leaves its session open on
// the server, holding that row's lock, until PostgreSQL notices the client
// is gone, which over TCP alone takes hours (the server's keepalives at
// the operating system's defaults). River's rescuer updates the stuck jobs
// it found in one statement, which waits on that lock and times out, pass
// after pass: no stuck job of any worker is rescued meanwhile (chaos
// scenario network-partition, docs/reliability.md). PostgreSQL ends a
// session idle in a transaction for longer than this, which releases its
// locks. A live worker never leaves a transaction idle that long: a job's
// statements run under its context, which ends at the kind's timeout, and
// pgx then closes the connection (the transaction rolls back).
func (w *Deployment) IdleInTransactionTimeout() time.Duration {
	timeouts := w.cfg.Registry.Timeouts()
	longest := time.Duration(0)
	for _, kind := range w.d.kinds {
		longest = max(longest, timeouts[kind])
	}
	if w.cfg.LoadTestWorkload {
		longest = max(longest, loadtest.Timeout)
	}
	if longest == 0 {
		longest = service.DefaultTimeout
	}
	return longest
}

// SessionPoolConfig is a copy of poolConfig whose sessions PostgreSQL ends
// when they stay idle in a transaction for longer than
// IdleInTransactionTimeout (the startup parameter IdleInTransactionParam),
// unless poolConfig sets that parameter already: a DATABASE_URL with
// idle_in_transaction_session_timeout=… (in milliseconds, or with a unit:
// 90s, 5min; 0 turns it off) keeps its own value. Run opens its pool with
// it; a main that runs its own River client from RiverConfig can do the
// same.
func (w *Deployment) SessionPoolConfig(poolConfig *pgxpool.Config) *pgxpool.Config {
	c := poolConfig.Copy()
	if c.ConnConfig.RuntimeParams == nil {
		c.ConnConfig.RuntimeParams = map[string]string{}
	}
	if _, ok := c.ConnConfig.RuntimeParams[IdleInTransactionParam]; !ok {
		c.ConnConfig.RuntimeParams[IdleInTransactionParam] = strconv.FormatInt(w.IdleInTransactionTimeout().Milliseconds(), 10)
	}
	return c
}
