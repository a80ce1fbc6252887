package escalation_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/escalation"
	"github.com/tierq/tierq/internal/jobmetasql"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/internal/workertest"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/routing"
)

type audit struct {
	JobID        int64
	FromQueue    string
	ToQueue      string
	FromPriority int
	ToPriority   int
	Actor        string
	Reason       string
}

func audits(t *testing.T, db *testdb.DB, jobID int64) []audit {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `
		SELECT job_id, from_queue, to_queue, from_priority, to_priority, actor, reason
		FROM job_escalations WHERE job_id = $1 ORDER BY id`, jobID)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[audit])
	require.NoError(t, err)
	return out
}

func insert(t *testing.T, db *testdb.DB, queue string, priority int) int64 {
	t.Helper()
	res, err := db.Producer(t).Insert(context.Background(), jobs.LoadTestArgs{}, &river.InsertOpts{Queue: queue, Priority: priority})
	require.NoError(t, err)
	return res.Job.ID
}

func TestEscalateQueuedJob(t *testing.T) {
	t.Parallel()
	serviceQueues := testdb.Registry(t).Queues()
	db := testdb.New(t)
	ctx := context.Background()

	id := insert(t, db, "analysis_default", 4)
	res, err := escalation.Escalate(ctx, db.Pool, serviceQueues, escalation.Request{
		JobID: id, To: routing.Priority, Actor: "alice", Reason: "customer escalation #42",
	})
	require.NoError(t, err)
	require.Equal(t, escalation.Result{
		JobID: id, Kind: jobs.KindLoadTest, State: "available",
		FromQueue: "analysis_default", ToQueue: "analysis_priority", FromPriority: 4, ToPriority: 1, Changed: true,
	}, res)
	require.Equal(t, testdb.Job{ID: id, Kind: jobs.KindLoadTest, Queue: "analysis_priority", State: "available", Priority: 1},
		db.Jobs(t, "id = $1", id)[0])
	require.Equal(t, []audit{{JobID: id, FromQueue: "analysis_default", ToQueue: "analysis_priority",
		FromPriority: 4, ToPriority: 1, Actor: "alice", Reason: "customer escalation #42"}}, audits(t, db, id))

	// An explicit priority wins; moving down a class is allowed too, and a
	// scheduled (not yet available) job is still queued.
	later, err := db.Producer(t).Insert(ctx, jobs.LoadTestArgs{}, &river.InsertOpts{
		Queue: "specview_priority", Priority: 2, ScheduledAt: time.Now().Add(time.Hour),
	})
	require.NoError(t, err)
	res, err = escalation.Escalate(ctx, db.Pool, serviceQueues, escalation.Request{
		JobID: later.Job.ID, To: routing.Scheduled, Priority: 3, Actor: "bob", Reason: "can wait",
	})
	require.NoError(t, err)
	require.Equal(t, "specview_scheduled", res.ToQueue)
	require.Equal(t, 3, res.ToPriority)
	require.Equal(t, "scheduled", db.Jobs(t, "id = $1", later.Job.ID)[0].State)

	// Asking for where the job already is changes and audits nothing.
	res, err = escalation.Escalate(ctx, db.Pool, serviceQueues, escalation.Request{JobID: id, To: routing.Priority, Actor: "alice", Reason: "again"})
	require.NoError(t, err)
	require.False(t, res.Changed)
	require.Len(t, audits(t, db, id), 1)
}

func TestEscalateRefusesJobsThatAreNotQueued(t *testing.T) {
	t.Parallel()
	serviceQueues := testdb.Registry(t).Queues()
	db := testdb.New(t)
	ctx := context.Background()

	foreign := insert(t, db, "scheduler", 4)
	byState := map[string]int64{}
	for _, state := range []string{"running", "completed", "cancelled", "discarded"} {
		id := insert(t, db, "analysis_default", 4)
		_, err := db.Pool.Exec(ctx, `
			UPDATE river_job SET state = $2::text::river_job_state, attempt = 1, attempted_at = now(),
			       finalized_at = CASE WHEN $2::text = 'running' THEN NULL ELSE now() END
			WHERE id = $1`, id, state)
		require.NoError(t, err)
		byState[state] = id
	}

	req := func(id int64) escalation.Request {
		return escalation.Request{JobID: id, To: routing.Priority, Actor: "alice", Reason: "r"}
	}
	for state, id := range byState {
		_, err := escalation.Escalate(ctx, db.Pool, serviceQueues, req(id))
		require.ErrorIs(t, err, escalation.ErrNotQueued, state)
		require.ErrorContains(t, err, state)
		require.Equal(t, "analysis_default", db.Jobs(t, "id = $1", id)[0].Queue)
		require.Empty(t, audits(t, db, id))
	}

	_, err := escalation.Escalate(ctx, db.Pool, serviceQueues, req(999_999))
	require.ErrorIs(t, err, escalation.ErrNotFound)

	_, err = escalation.Escalate(ctx, db.Pool, serviceQueues, req(foreign))
	require.ErrorIs(t, err, escalation.ErrNotServiceQueue)
	require.Equal(t, "scheduler", db.Jobs(t, "id = $1", foreign)[0].Queue)

	for name, bad := range map[string]escalation.Request{
		"no actor":     {JobID: foreign, To: routing.Priority, Reason: "r"},
		"no reason":    {JobID: foreign, To: routing.Priority, Actor: "a"},
		"bad priority": {JobID: foreign, To: routing.Priority, Priority: 5, Actor: "a", Reason: "r"},
		"bad class":    {JobID: foreign, To: routing.Class(9), Actor: "a", Reason: "r"},
		"bad id":       {JobID: 0, To: routing.Priority, Actor: "a", Reason: "r"},
	} {
		_, err := escalation.Escalate(ctx, db.Pool, serviceQueues, bad)
		require.ErrorIs(t, err, escalation.ErrInvalid, name)
	}
	require.Zero(t, db.Count(t, `SELECT count(*) FROM job_escalations`))
}

func TestSweepRules(t *testing.T) {
	t.Parallel()
	serviceQueues := testdb.Registry(t).Queues()
	db := testdb.New(t)
	ctx := context.Background()

	opts := func(queue string, priority int) *river.InsertOpts {
		return &river.InsertOpts{Queue: queue, Priority: priority}
	}
	oldScheduled := testdb.InsertWaiting(t, db, jobs.LoadTestArgs{}, opts("analysis_scheduled", 2), 2*time.Hour)
	freshScheduled := testdb.InsertWaiting(t, db, jobs.LoadTestArgs{}, opts("specview_scheduled", 4), time.Minute)
	oldDefault := testdb.InsertWaiting(t, db, jobs.LoadTestArgs{}, opts("specview_default", 3), 2*time.Hour)
	oldPriority := testdb.InsertWaiting(t, db, jobs.LoadTestArgs{}, opts("analysis_priority", 4), 2*time.Hour)

	// The default → priority rule is off (0): only the scheduled job moves.
	res, err := escalation.Sweep(ctx, db.Pool, serviceQueues, escalation.Rules(time.Hour, 0), 1)
	require.NoError(t, err)
	require.Equal(t, 1, res.Total)
	require.Equal(t, map[escalation.Move]int{{From: "analysis_scheduled", To: "analysis_default"}: 1}, res.Moved)

	moved := db.Jobs(t, "id = $1", oldScheduled)[0]
	require.Equal(t, "analysis_default", moved.Queue)
	require.Equal(t, routing.PriorityLowest, moved.Priority, "joins the back of the new queue")
	var waited time.Duration
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT now() - scheduled_at FROM river_job WHERE id = $1`, oldScheduled).Scan(&waited))
	require.Less(t, waited, time.Minute, "its wait in the new queue starts at the move")
	require.Equal(t, []audit{{JobID: oldScheduled, FromQueue: "analysis_scheduled", ToQueue: "analysis_default",
		FromPriority: 2, ToPriority: 4, Actor: "scheduler", Reason: "waited more than 1h0m0s in a scheduled queue"}},
		audits(t, db, oldScheduled))
	for _, id := range []int64{freshScheduled, oldDefault, oldPriority} {
		require.Empty(t, audits(t, db, id))
	}

	// With the second rule on, the old default job moves up; the job that
	// just arrived in analysis_default has not waited there yet.
	res, err = escalation.Sweep(ctx, db.Pool, serviceQueues, escalation.Rules(time.Hour, 30*time.Minute), 10)
	require.NoError(t, err)
	require.Equal(t, map[escalation.Move]int{{From: "specview_default", To: "specview_priority"}: 1}, res.Moved)
	require.Equal(t, "specview_priority", db.Jobs(t, "id = $1", oldDefault)[0].Queue)
	require.Equal(t, "analysis_default", db.Jobs(t, "id = $1", oldScheduled)[0].Queue)
	require.Equal(t, "analysis_priority", db.Jobs(t, "id = $1", oldPriority)[0].Queue)

	// Both rules off: nothing at all.
	res, err = escalation.Sweep(ctx, db.Pool, serviceQueues, escalation.Rules(0, 0), 10)
	require.NoError(t, err)
	require.Zero(t, res.Total)
}

// TestSweepMovesHeldJobsOutOfIdleQueues: a held job (by a tenant's cap or
// by fair share) waits in a queue no live worker serves (a class run with 0
// workers) with nothing to admit it: past the rule's wait the sweep moves it
// to the next class, still held, its marks and due time kept. In a queue
// with live workers held jobs are the passes' and stay.
func TestSweepMovesHeldJobsOutOfIdleQueues(t *testing.T) {
	t.Parallel()
	serviceQueues := testdb.Registry(t).Queues()
	db := testdb.New(t)
	ctx := context.Background()
	// specview_scheduled has a live worker process; analysis_scheduled
	// has none (another's heartbeat expired, one has 0 workers there).
	_, err := db.Pool.Exec(ctx, `INSERT INTO fair_share_slots (client_id, queue, slots, expires_at) VALUES
		('w1', 'specview_scheduled', 2, now() + interval '15 seconds'),
		('w2', 'analysis_scheduled', 3, now() - interval '1 second'),
		('w3', 'analysis_scheduled', 0, now() + interval '15 seconds')`)
	require.NoError(t, err)
	capHeld := testdb.InsertWaitingJob(t, db, testdb.WaitingJob{Queue: "analysis_scheduled", Held: true, Tenant: "acme", Capped: "analyzer", CapHeld: true, Priority: 2, Scheduled: 2 * time.Hour})
	turnHeld := testdb.InsertWaitingJob(t, db, testdb.WaitingJob{Queue: "analysis_scheduled", Held: true, Tenant: "beta", Scheduled: 3 * time.Hour, Due: 5 * time.Hour})
	fresh := testdb.InsertWaitingJob(t, db, testdb.WaitingJob{Queue: "analysis_scheduled", Held: true, Tenant: "acme", Scheduled: time.Minute})
	served := testdb.InsertWaitingJob(t, db, testdb.WaitingJob{Queue: "specview_scheduled", Held: true, Tenant: "acme", Scheduled: 2 * time.Hour})
	available := testdb.InsertWaitingJob(t, db, testdb.WaitingJob{Queue: "specview_scheduled", Scheduled: 2 * time.Hour})

	res, err := escalation.Sweep(ctx, db.Pool, serviceQueues, escalation.Rules(time.Hour, 0), 10)
	require.NoError(t, err)
	require.Equal(t, map[escalation.Move]int{
		{From: "analysis_scheduled", To: "analysis_default"}: 2,
		{From: "specview_scheduled", To: "specview_default"}: 1,
	}, res.Moved)

	type row struct {
		Queue, State      string
		Priority          int
		HeldAt, CapHeldAt bool
		Due               float64 // hours since it became due
	}
	read := func(id int64) row {
		var r row
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT queue, state::text, priority, metadata ? 'tierq:held_at', metadata ? 'tierq:cap_held_at',
			round((extract(epoch FROM now() - `+jobmetasql.DueAtSQL("j")+`) / 3600)::numeric, 1)::float8
			FROM river_job AS j WHERE id = $1`, id).Scan(&r.Queue, &r.State, &r.Priority, &r.HeldAt, &r.CapHeldAt, &r.Due))
		return r
	}
	require.Equal(t, row{"analysis_default", "pending", 4, true, true, 2}, read(capHeld), "moved, still held by its cap")
	require.Equal(t, row{"analysis_default", "pending", 4, true, false, 5}, read(turnHeld), "moved, still held, its due time kept")
	require.Equal(t, row{"analysis_scheduled", "pending", 4, true, false, 0}, read(fresh), "has not waited an hour")
	require.Equal(t, row{"specview_scheduled", "pending", 4, true, false, 2}, read(served), "its queue's workers admit it")
	require.Equal(t, row{"specview_default", "available", 4, false, false, 2}, read(available))
	require.Equal(t, []audit{{JobID: capHeld, FromQueue: "analysis_scheduled", ToQueue: "analysis_default",
		FromPriority: 2, ToPriority: 4, Actor: "scheduler", Reason: "waited more than 1h0m0s in a scheduled queue"}},
		audits(t, db, capHeld))
}

// TestAnyServiceQueues: escalation moves jobs between the queues it is
// given, whatever service they belong to: here a team's own mailer service
// (testdb.MailerRegistry), whose queues nothing in tierq names. The
// reference app's queues are not service queues then, and a move never
// leaves its service, nor goes to a queue it was not given.
func TestAnyServiceQueues(t *testing.T) {
	t.Parallel()
	mailerQueues := testdb.MailerRegistry(t).Queues()
	db := testdb.New(t)
	ctx := context.Background()
	mail := func(queue string, priority int, wait time.Duration) int64 {
		return testdb.InsertWaiting(t, db, testdb.SendMailArgs{To: "a@example.com"}, &river.InsertOpts{Queue: queue, Priority: priority}, wait)
	}
	req := func(id int64, to routing.Class) escalation.Request {
		return escalation.Request{JobID: id, To: to, Actor: "alice", Reason: "r"}
	}

	queued := mail("mailer_default", 4, 0)
	res, err := escalation.Escalate(ctx, db.Pool, mailerQueues, req(queued, routing.Priority))
	require.NoError(t, err)
	require.Equal(t, escalation.Result{JobID: queued, Kind: testdb.KindSendMail, State: "available",
		FromQueue: "mailer_default", ToQueue: "mailer_priority", FromPriority: 4, ToPriority: 1, Changed: true}, res)

	analysis := insert(t, db, "analysis_default", 4)
	_, err = escalation.Escalate(ctx, db.Pool, mailerQueues, req(analysis, routing.Priority))
	require.ErrorIs(t, err, escalation.ErrNotServiceQueue)
	// A job moves only from and to queues it was given.
	_, err = escalation.Escalate(ctx, db.Pool, []string{"mailer_default", "mailer_scheduled"}, req(queued, routing.Scheduled))
	require.ErrorIs(t, err, escalation.ErrNotServiceQueue, "from mailer_priority, not given")
	_, err = escalation.Escalate(ctx, db.Pool, []string{"mailer_priority", "mailer_default"}, req(queued, routing.Scheduled))
	require.ErrorIs(t, err, escalation.ErrNotServiceQueue, "to mailer_scheduled, not given")
	_, err = escalation.Escalate(ctx, db.Pool, nil, req(queued, routing.Default))
	require.Error(t, err, "no queues")
	require.Equal(t, "mailer_priority", db.Jobs(t, "id = $1", queued)[0].Queue)

	waiting := mail("mailer_scheduled", 4, 2*time.Hour)
	analysisWaiting := testdb.InsertWaiting(t, db, jobs.LoadTestArgs{}, &river.InsertOpts{Queue: "analysis_scheduled", Priority: 4}, 2*time.Hour)
	sweep, err := escalation.Sweep(ctx, db.Pool, mailerQueues, escalation.Rules(time.Hour, 0), 10)
	require.NoError(t, err)
	require.Equal(t, map[escalation.Move]int{{From: "mailer_scheduled", To: "mailer_default"}: 1}, sweep.Moved)
	require.Equal(t, "mailer_default", db.Jobs(t, "id = $1", waiting)[0].Queue)
	require.Equal(t, "analysis_scheduled", db.Jobs(t, "id = $1", analysisWaiting)[0].Queue)
	_, err = escalation.Sweep(ctx, db.Pool, nil, escalation.Rules(time.Hour, 0), 10)
	require.Error(t, err, "no queues")
}

// TestMoveNotifiesTheTargetQueue listens the way River's producers do and
// sees the insert notification for the queue a job moved to.
func TestMoveNotifiesTheTargetQueue(t *testing.T) {
	t.Parallel()
	serviceQueues := testdb.Registry(t).Queues()
	db := testdb.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	conn, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `LISTEN `+pgx.Identifier{db.Schema + ".river_insert"}.Sanitize())
	require.NoError(t, err)

	id := insert(t, db, "specview_default", 4)
	// River's own insert notification for specview_default comes first.
	for {
		n, err := conn.Conn().WaitForNotification(ctx)
		require.NoError(t, err)
		if n.Payload == `{"queue": "specview_default"}` {
			break
		}
	}

	_, err = escalation.Escalate(ctx, db.Pool, serviceQueues, escalation.Request{JobID: id, To: routing.Priority, Actor: "a", Reason: "r"})
	require.NoError(t, err)
	n, err := conn.Conn().WaitForNotification(ctx)
	require.NoError(t, err)
	var payload struct{ Queue string }
	require.NoError(t, json.Unmarshal([]byte(n.Payload), &payload))
	require.Equal(t, "specview_priority", payload.Queue)
}

// TestEscalationNeverRacesAFetch escalates jobs while a worker fetches them.
// Each job must end up either escalated before its fetch (audited, and run
// from the new queue) or refused as not queued (not audited, run from the
// old queue), never both, and every job runs exactly once.
func TestEscalationNeverRacesAFetch(t *testing.T) {
	t.Parallel()
	serviceQueues := testdb.Registry(t).Queues()
	db := testdb.New(t)
	ctx := context.Background()

	var (
		mu    sync.Mutex
		ranIn = map[int64][]string{}
	)
	record := river.WorkerMiddlewareFunc(func(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
		mu.Lock()
		ranIn[job.ID] = append(ranIn[job.ID], job.Queue)
		mu.Unlock()
		return doInner(ctx)
	})

	riverConfig := workertest.RiverConfig(t, db,
		"WORKER_SERVICE=analyzer", "LOAD_TEST_WORKLOAD=true",
		"QUEUE_PRIORITY_FETCH_COOLDOWN=1ms", "QUEUE_PRIORITY_FETCH_POLL_INTERVAL=20ms",
		"QUEUE_DEFAULT_FETCH_COOLDOWN=1ms", "QUEUE_DEFAULT_FETCH_POLL_INTERVAL=20ms",
		"ANALYZER_QUEUE_DEFAULT_WORKERS=4", "ANALYZER_QUEUE_PRIORITY_WORKERS=4",
	)
	riverConfig.WorkerMiddleware = []rivertype.WorkerMiddleware{record}
	db.Start(t, riverConfig)

	const n = 300
	params := make([]river.InsertManyParams, n)
	for i := range params {
		params[i] = river.InsertManyParams{Args: jobs.LoadTestArgs{SleepMS: 2}, InsertOpts: &river.InsertOpts{Queue: "analysis_default", Priority: 4}}
	}
	inserted, err := db.Producer(t).InsertMany(ctx, params)
	require.NoError(t, err)

	// Escalate every job from 8 goroutines while the 4 default workers fetch.
	type outcome struct {
		moved bool
		err   error
	}
	outcomes := make([]outcome, n)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := g; i < n; i += 8 {
				res, err := escalation.Escalate(ctx, db.Pool, serviceQueues, escalation.Request{
					JobID: inserted[i].Job.ID, To: routing.Priority, Actor: "racer", Reason: "race test",
				})
				outcomes[i] = outcome{moved: err == nil && res.Changed, err: err}
			}
		})
	}
	wg.Wait()

	testdb.WaitFor(t, 30*time.Second, "every job to complete", func() bool {
		return db.Count(t, `SELECT count(*) FROM river_job WHERE state = 'completed'`) == n
	})

	movedCount, refused := 0, 0
	mu.Lock()
	defer mu.Unlock()
	for i, o := range outcomes {
		id := inserted[i].Job.ID
		require.Len(t, ranIn[id], 1, "job %d ran exactly once", id)
		audited := len(audits(t, db, id))
		switch {
		case o.moved:
			movedCount++
			require.Equal(t, "analysis_priority", ranIn[id][0], "job %d escalated, so it must run from the priority queue", id)
			require.Equal(t, 1, audited)
		case errors.Is(o.err, escalation.ErrNotQueued):
			refused++
			require.Equal(t, "analysis_default", ranIn[id][0], "job %d refused, so it ran where it was", id)
			require.Zero(t, audited)
		default:
			t.Fatalf("job %d: unexpected outcome %+v", id, o)
		}
	}
	t.Logf("%d jobs escalated before their fetch, %d refused as already fetched", movedCount, refused)
	require.Equal(t, n, movedCount+refused)
	require.Positive(t, movedCount, "no escalation won a race: the test exercised nothing")
	require.Positive(t, refused, "no fetch won a race: the test exercised nothing")
}

// TestSweepCountsAJobPlacedByTurnsFromItsDueTime: fair share by turns puts
// a waiting job's turn in its scheduled_at, an hour or more back; the sweep
// counts its wait from its due time (here its insert, River's tag
// jobmetasql.TurnTag), so a job that just arrived is not escalated, and one
// due two hours ago is.
func TestSweepCountsAJobPlacedByTurnsFromItsDueTime(t *testing.T) {
	t.Parallel()
	serviceQueues := testdb.Registry(t).Queues()
	db := testdb.New(t)
	ctx := context.Background()

	var fresh, old int64
	require.NoError(t, db.Pool.QueryRow(ctx, `
		INSERT INTO river_job (state, queue, priority, kind, args, metadata, max_attempts, scheduled_at, tags)
		VALUES ('available', 'analysis_scheduled', 4, 'loadtest', '{}', '{}', 3, now() - interval '3 hours', '{`+jobmetasql.TurnTag+`}')
		RETURNING id`).Scan(&fresh))
	require.NoError(t, db.Pool.QueryRow(ctx, `
		INSERT INTO river_job (state, queue, priority, kind, args, metadata, max_attempts, scheduled_at, created_at, tags)
		VALUES ('available', 'analysis_scheduled', 4, 'loadtest', '{}', '{}', 3, now() - interval '3 hours', now() - interval '2 hours', '{`+jobmetasql.TurnTag+`}')
		RETURNING id`).Scan(&old))

	res, err := escalation.Sweep(ctx, db.Pool, serviceQueues, escalation.Rules(time.Hour, 0), 10)
	require.NoError(t, err)
	require.Equal(t, map[escalation.Move]int{{From: "analysis_scheduled", To: "analysis_default"}: 1}, res.Moved)
	require.Equal(t, "analysis_scheduled", db.Jobs(t, "id = $1", fresh)[0].Queue)
	require.Equal(t, "analysis_default", db.Jobs(t, "id = $1", old)[0].Queue)
}
