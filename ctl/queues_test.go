package ctl

import (
	"context"
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
)

// queuesTestArgs is a job the queues test's worker completes at once.
type queuesTestArgs struct{}

func (queuesTestArgs) Kind() string { return "queues_test" }

// TestQueuesPauseResume pauses and resumes analysis_default under a real
// River worker client: the pause is River's (river_queue.paused_at), a job
// inserted while paused is worked once the queue is resumed, and names that
// are no queue, or a queue no worker has registered, are refused.
func TestQueuesPauseResume(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	env := dbEnv(t, db)
	ctx := context.Background()
	pausedAt := func(queue string) *time.Time {
		t.Helper()
		var at *time.Time
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT paused_at FROM river_queue WHERE name = $1`, queue).Scan(&at))
		return at
	}

	// No worker has served a queue yet: nothing to pause (exit 1).
	_, err := runTierctl(t, env, "queues", "pause", "analysis_default")
	require.ErrorIs(t, err, errQueueNotRegistered)
	require.EqualError(t, err, "queue not registered: queue analysis_default has no row in river_queue: no worker serving it has started yet, so there is nothing to pause (start one, e.g. make run, and try again)")
	var usage *UsageError
	require.False(t, errors.As(err, &usage))

	// A name that is no queue: a usage error naming the queues.
	_, err = runTierctl(t, env, "queues", "pause", "analysis_defualt")
	require.True(t, errors.As(err, &usage), "%v", err)
	require.EqualError(t, err, `"analysis_defualt" is not a queue; the queues are analysis_priority, analysis_default, analysis_scheduled, specview_priority, specview_default, specview_scheduled, scheduler`)

	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(context.Context, *river.Job[queuesTestArgs]) error { return nil }))
	db.Start(t, &river.Config{
		Schema:            db.Schema,
		Queues:            map[string]river.QueueConfig{"analysis_default": {MaxWorkers: 1}},
		Workers:           workers,
		FetchPollInterval: 100 * time.Millisecond,
	})
	testdb.WaitFor(t, 10*time.Second, "analysis_default in river_queue", func() bool {
		return db.Count(t, `SELECT count(*) FROM river_queue WHERE name = 'analysis_default'`) == 1
	})

	// WORKERS is the queues' live fair-share heartbeats, as tierq's worker
	// processes write them (fairshare's heartbeatSQL): two processes on
	// analysis_default, the latest 2 seconds ago; analysis_priority's
	// only row expired (its process is gone). River's own updated_at,
	// which River refreshes about every 10 minutes and its pause sets, is
	// not shown.
	_, err = db.Pool.Exec(ctx, `INSERT INTO fair_share_slots (client_id, queue, slots, heartbeat_at, expires_at) VALUES
	    ('worker-a', 'analysis_default', 3, now() - interval '4 seconds', now() + interval '11 seconds'),
	    ('worker-b', 'analysis_default', 2, now() - interval '2 seconds', now() + interval '13 seconds'),
	    ('worker-a', 'analysis_priority', 4, now() - interval '30 seconds', now() - interval '15 seconds')`)
	require.NoError(t, err)
	var beat time.Time
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT max(heartbeat_at) FROM fair_share_slots WHERE queue = 'analysis_default'`).Scan(&beat))

	out, err := runTierctl(t, env, "queues", "list")
	require.NoError(t, err, out)
	require.Regexp(t, `^QUEUE\s+KIND\s+STATE\s+WORKERS\n`+
		`analysis_priority\s+service\s+active\s+none \(no worker process serves it now\)\n`+
		`analysis_default\s+service\s+active\s+5 in 2 processes \(heartbeat `+regexp.QuoteMeta(formatTime(beat))+`\)\n`+
		`(?s:.*)scheduler\s+scheduler\s+active\s+not reported \(the scheduler's own\)\n$`, out)
	require.NotContains(t, out, "LAST WORKER REPORT")

	out, err = runTierctl(t, env, "queues", "pause", "analysis_default")
	require.NoError(t, err, out)
	require.Equal(t, "queue analysis_default paused: workers fetch no new jobs from it (running jobs finish) until `tierctl queues resume analysis_default`\n", out)
	at := pausedAt("analysis_default")
	require.NotNil(t, at)

	out, err = runTierctl(t, env, "queues", "pause", "analysis_default")
	require.NoError(t, err, out)
	require.Equal(t, "queue analysis_default was already paused (since "+formatTime(*at)+"); nothing changed\n", out)

	out, err = runTierctl(t, env, "queues", "list", "--json")
	require.NoError(t, err, out)
	require.Contains(t, out, `"name": "analysis_default",
    "kind": "service",
    "paused_at": "`)
	require.Contains(t, out, `"workers": 5,
    "processes": 2,
    "heartbeat_at": "`)
	require.Contains(t, out, `"name": "analysis_priority",
    "kind": "service",
    "paused_at": null,
    "workers": 0,
    "processes": 0,
    "heartbeat_at": null`)
	require.NotContains(t, out, "updated_at")

	res, err := db.Producer(t).Insert(ctx, queuesTestArgs{}, &river.InsertOpts{Queue: "analysis_default"})
	require.NoError(t, err)

	out, err = runTierctl(t, env, "queues", "resume", "analysis_default")
	require.NoError(t, err, out)
	require.Regexp(t, `^queue analysis_default resumed \(it was paused for \d+s\)\n$`, out)
	require.Nil(t, pausedAt("analysis_default"))
	testdb.WaitFor(t, 10*time.Second, "the job inserted while paused completed", func() bool {
		return db.Count(t, `SELECT count(*) FROM river_job WHERE id = $1 AND state = 'completed'`, res.Job.ID) == 1
	})

	out, err = runTierctl(t, env, "queues", "resume", "analysis_default")
	require.NoError(t, err, out)
	require.Equal(t, "queue analysis_default is not paused; nothing changed\n", out)
}

func TestQueuesUsageErrors(t *testing.T) {
	t.Parallel()
	requireUsageErrors(t, []usageCase{
		{name: "no subcommand", args: []string{"queues"}, want: "queues needs a subcommand: list, pause or resume"},
		{name: "pause without queue", args: []string{"queues", "pause"}, want: "accepts 1 arg(s), received 0"},
		{name: "resume two queues", args: []string{"queues", "resume", "a", "b"}, want: "accepts 1 arg(s), received 2"},
		{name: "every queue", args: []string{"queues", "pause", "*"}, want: `queue name "*": only letters, digits, '_' and '-' (River's rule)`},
		{name: "escape in name", args: []string{"queues", "pause", "a\x1b[2Jb"}, want: `queue name "a\x1b[2Jb": only letters`},
		{name: "empty name", args: []string{"queues", "resume", ""}, want: `queue name "": want 1 to 128 bytes`},
		{name: "list extra argument", args: []string{"queues", "list", "x"}, want: `unknown command "x"`},
	})
}

// TestQueuesPauseScheduler: pausing the scheduler's queue says what stops
// with it.
func TestQueuesPauseScheduler(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	// As a scheduler's River client registers it.
	_, err := db.Pool.Exec(context.Background(), `INSERT INTO river_queue (name, created_at, updated_at) VALUES ('scheduler', now(), now())`)
	require.NoError(t, err)
	out, err := runTierctl(t, dbEnv(t, db), "queues", "pause", "scheduler")
	require.NoError(t, err, out)
	require.Equal(t, "queue scheduler paused: workers fetch no new jobs from it (running jobs finish) until `tierctl queues resume scheduler`\n"+
		"the scheduler's periodic jobs (the aging and escalation sweeps, the dead-letter drain, the services' periodic jobs) wait until then\n", out)
	out, err = runTierctl(t, dbEnv(t, db), "queues", "list")
	require.NoError(t, err, out)
	require.Regexp(t, `(?m)^scheduler\s+scheduler\s+paused since \d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ\s+not reported \(the scheduler's own\)$`, out)
}

// TestQueuesAndEscalationsHideThePassword: as every command
// (TestConnectErrorsHideThePassword), a refused connection's error names
// no password.
func TestQueuesAndEscalationsHideThePassword(t *testing.T) {
	t.Parallel()
	const password = "hunter2-secret"
	for _, args := range [][]string{{"queues", "list"}, {"queues", "pause", "analysis_default"}, {"queues", "resume", "nope"},
		{"escalations", "list"}, {"watch", "--once"}} {
		out, err := runTierctl(t, []string{"DATABASE_URL=postgres://tierq:" + password + "@127.0.0.1:1/x?sslmode=disable&connect_timeout=5"}, args...)
		require.ErrorContains(t, err, "connect", args)
		require.NotContains(t, err.Error(), password)
		require.NotContains(t, out, password)
	}
}
