package testdb

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/riverschema"
	"github.com/tierq/tierq/jobmeta"
)

// WaitingJob is a job waiting in a queue, written with SQL in the shape
// tierq's sweeps leave it: available, or held back by fair share (River
// state pending, marked jobmeta.HeldAt), and optionally moved with its due
// time kept (jobmeta.DueAt, jobmeta.MovedAt), as fair share's admission,
// escalation and lending keep it.
type WaitingJob struct {
	Queue  string
	Held   bool   // pending with jobmeta.HeldAt; else available
	Tenant string // jobmeta.Tenant; none when empty
	// Capped, when not empty, is the service whose concurrency cap the job
	// counts against (jobmeta.Capped), as migration 00013's trigger marks
	// it; with Held, CapHeld says it is held by that cap (jobmeta.CapHeldAt).
	// An available job with a tenant goes through that trigger like any
	// insert: under a recorded cap, the trigger marks or holds it itself.
	Capped  string
	CapHeld bool
	// RateHeld, with Held, says the job is held by its tenant's rate
	// (jobmeta.RateHeldAt, beside jobmeta.Rated "test").
	RateHeld bool
	// Running writes the job running (attempted now) instead of available;
	// not with Held.
	Running  bool
	Priority int // default 4
	// Scheduled sets scheduled_at this long ago (negative: ahead) and
	// created_at with it.
	Scheduled time.Duration
	// Due, when not zero, is how long ago the job became due, kept across a
	// move: jobmeta.DueAt is now() - Due and jobmeta.MovedAt is scheduled_at,
	// so jobmetasql.DueAtSQL reads now() - Due. Due must be at least Scheduled.
	Due time.Duration
}

// InsertWaitingJob writes job into river_job (kind "loadtest", args {})
// and returns its id.
func InsertWaitingJob(t testing.TB, db *DB, job WaitingJob) int64 {
	t.Helper()
	if job.Priority == 0 {
		job.Priority = 4
	}
	if job.Due != 0 {
		require.GreaterOrEqual(t, job.Due, job.Scheduled, "a kept due time is never after scheduled_at")
	}
	var id int64
	require.NoError(t, db.Pool.QueryRow(context.Background(), `
		WITH t AS (SELECT now() - make_interval(secs => $4) AS scheduled_at)
		INSERT INTO `+riverschema.JobTable+` (state, queue, priority, kind, args, metadata, max_attempts, created_at, scheduled_at, attempt, attempted_at)
		SELECT CASE WHEN $2 THEN '`+riverschema.StatePending+`' WHEN $9 THEN '`+riverschema.StateRunning+`' ELSE '`+riverschema.StateAvailable+`' END::`+riverschema.StateType+`, $1, $3, 'loadtest', '{}',
		       jsonb_strip_nulls(jsonb_build_object(
		           '`+jobmeta.Tenant+`', nullif($6, ''),
		           '`+jobmeta.HeldAt+`', CASE WHEN $2 THEN now() END,
		           '`+jobmeta.Capped+`', nullif($7, ''),
		           '`+jobmeta.CapHeldAt+`', CASE WHEN $2 AND $8 THEN now() END,
		           '`+jobmeta.Rated+`', CASE WHEN $2 AND $10 THEN 'test' END,
		           '`+jobmeta.RateHeldAt+`', CASE WHEN $2 AND $10 THEN now() END,
		           '`+jobmeta.DueAt+`', CASE WHEN $5 <> 0 THEN (extract(epoch FROM now() - make_interval(secs => $5)) * 1000000)::bigint END,
		           '`+jobmeta.MovedAt+`', CASE WHEN $5 <> 0 THEN (extract(epoch FROM t.scheduled_at) * 1000000)::bigint END)),
		       10, t.scheduled_at, t.scheduled_at, CASE WHEN $9 THEN 1 ELSE 0 END, CASE WHEN $9 THEN now() END
		FROM t
		RETURNING id`,
		job.Queue, job.Held, job.Priority, job.Scheduled.Seconds(), job.Due.Seconds(), job.Tenant, job.Capped, job.CapHeld, job.Running, job.RateHeld).Scan(&id))
	return id
}
