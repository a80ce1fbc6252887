// Package escalation moves queued River jobs between a service's queues and
// priorities: on an operator's request (Escalate), by the scheduler's rules
// for jobs that waited too long (Sweep), and for a duplicate insert of a
// higher tier (package producer).
//
// River has no API for this, so it is tierq's own SQL on river_job. Every
// move is one statement that locks the job, checks that it is still queued
// (available, scheduled, retryable or pending), updates its queue and
// priority, writes one row to job_escalations and sends River's insert
// notification for the target queue so that its workers fetch at once. A job
// that a worker is fetching holds a row lock: the move waits for it (or skips
// it, in a sweep) and then sees the job running, so a job is either moved
// before the fetch or left alone, never both.
package escalation

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tierq/tierq/internal/db"
	"github.com/tierq/tierq/internal/jobmetasql"
	"github.com/tierq/tierq/internal/riverschema"
	"github.com/tierq/tierq/jobmeta"
	"github.com/tierq/tierq/routing"
)

var (
	// ErrNotFound: no job has the id (HTTP 404).
	ErrNotFound = errors.New("job not found")
	// ErrNotQueued: the job is running or finished, past the point where its
	// queue matters (HTTP 409).
	ErrNotQueued = errors.New("job is not queued")
	// ErrNotServiceQueue: the job is in a queue that is not one of the
	// service queues Escalate was given, e.g. the scheduler's own (HTTP 409).
	ErrNotServiceQueue = errors.New("job is not in a service queue")
	// ErrInvalid: the request itself is wrong (HTTP 400).
	ErrInvalid = errors.New("invalid escalation request")
)

// Actors the system itself uses; operators name themselves.
const (
	ActorScheduler = "scheduler"
	ActorDedup     = "dedup"
)

// queuedStates are the states in which a job has not been fetched yet.
const queuedStates = `('` + riverschema.StateAvailable + `', '` + riverschema.StateScheduled + `', '` +
	riverschema.StateRetryable + `', '` + riverschema.StatePending + `')`

// Request asks for one job to move.
type Request struct {
	JobID int64
	// To is the class of queue the job moves to, inside its own service.
	To routing.Class
	// Priority is the River priority after the move (1..4). 0 means 1 when
	// moving to the priority class and the job's current priority otherwise.
	Priority int
	// Actor is who asks (an operator's name, "dedup"); Reason why. Both are
	// required and land in job_escalations.
	Actor  string
	Reason string
}

// Result describes a job after Escalate.
type Result struct {
	JobID        int64
	Kind         string
	State        string
	FromQueue    string
	ToQueue      string
	FromPriority int
	ToPriority   int
	// Changed is false when the job already was in the requested queue at
	// the requested priority; nothing was written then.
	Changed bool
	// ToQueuePaused is true when ToQueue is paused in River: the job waits
	// there until an operator resumes the queue. Escalate moves a job into
	// a paused queue when asked to (the sweeps never do).
	ToQueuePaused bool
}

// Validate reports what is wrong with the request, as an ErrInvalid.
func (r Request) Validate() error {
	var problems []string
	if r.JobID <= 0 {
		problems = append(problems, "job id must be positive")
	}
	if r.To > routing.Scheduled {
		problems = append(problems, "queue class must be priority, default or scheduled")
	}
	if r.Priority != 0 && (r.Priority < routing.PriorityEscalated || r.Priority > routing.PriorityLowest) {
		problems = append(problems, fmt.Sprintf("priority %d not in 1..4", r.Priority))
	}
	if strings.TrimSpace(r.Actor) == "" {
		problems = append(problems, "actor is required")
	}
	if strings.TrimSpace(r.Reason) == "" {
		problems = append(problems, "reason is required")
	}
	if len(r.Actor) > 200 || len(r.Reason) > 2000 {
		problems = append(problems, "actor (200) or reason (2000 bytes) too long")
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalid, strings.Join(problems, "; "))
	}
	return nil
}

// errNoQueues is returned by Escalate and Sweep when they are given no
// service queues: a caller's mistake, never a request's.
var errNoQueues = errors.New("escalation: no service queues given")

// queueMoves pairs each of queues whose class is one of from with the queue
// of class to of the same service, when that is one of queues too (a queue
// of class to pairs with itself). A service queue is named <base
// queue>_<class> (routing.QueueName), so its service is its base queue.
func queueMoves(queues []string, from []routing.Class, to routing.Class) (fromQueues, toQueues []string) {
	for _, queue := range queues {
		base, class, ok := routing.ClassOf(queue)
		if !ok || !slices.Contains(from, class) {
			continue
		}
		if target := routing.QueueName(base, to); slices.Contains(queues, target) {
			fromQueues = append(fromQueues, queue)
			toQueues = append(toQueues, target)
		}
	}
	return fromQueues, toQueues
}

// notifyCTE sends River's insert notification (riverschema.NotifyInsertSQL,
// as River's own inserts do) once per target queue of the moved rows that are
// available now.
var notifyCTE = `
notified AS (
    SELECT ` + riverschema.NotifyInsertSQL("q.to_queue") + `
    FROM (SELECT DISTINCT to_queue FROM moved WHERE state = '` + riverschema.StateAvailable + `') AS q
)`

// moveSQL is the jobmeta.Move of an escalation, as an SQL expression: kind
// and toPriority are SQL expressions; t is the alias of a row with
// from_queue, to_queue and from_priority; $5 and $6 are the actor and the
// reason.
func moveSQL(kind, t, toPriority string) string {
	return jobmetasql.Move{
		Kind: kind, FromQueue: t + ".from_queue", ToQueue: t + ".to_queue", FromPriority: t + ".from_priority", ToPriority: toPriority,
		Actor: "$5::text", Reason: "left($6::text, " + strconv.Itoa(jobmeta.MaxReasonChars) + ")",
	}.SQL()
}

const auditCTE = `
audit AS (
    INSERT INTO job_escalations (job_id, from_queue, to_queue, from_priority, to_priority, actor, reason)
    SELECT id, from_queue, to_queue, from_priority, to_priority, $5, $6 FROM moved
)`

// escalateSQL moves one job. The row lock waits for a fetch that holds the
// job; the state check then runs on the fetched row's new version.
var escalateSQL = `
WITH target AS (
    SELECT j.id, j.queue AS from_queue, m.to_queue, j.priority AS from_priority,
           coalesce($4::smallint, j.priority) AS to_priority
    FROM ` + riverschema.JobTable + ` AS j
    JOIN unnest($2::text[], $3::text[]) AS m(from_queue, to_queue) ON m.from_queue = j.queue
    WHERE j.id = $1 AND j.state IN ` + queuedStates + `
    FOR UPDATE OF j
),
moved AS (
    UPDATE ` + riverschema.JobTable + ` AS j
    SET queue = t.to_queue,
        priority = t.to_priority,
        metadata = CASE WHEN ` + jobmetasql.IsObjectSQL("j.metadata") + `
                        THEN ` + jobmetasql.WithMoveSQL("j.metadata", `jsonb_build_object('`+jobmeta.BasePriority+`', t.to_priority)`,
	moveSQL(`CASE WHEN $5 = '`+ActorDedup+`' THEN '`+jobmeta.MoveDedup+`' ELSE '`+jobmeta.MoveEscalation+`' END`, "t", "t.to_priority")) + `
                        ELSE j.metadata END
    FROM target AS t
    WHERE j.id = t.id AND (j.queue, j.priority) IS DISTINCT FROM (t.to_queue, t.to_priority)
    RETURNING j.id, j.kind, j.state::text AS state, t.from_queue, j.queue AS to_queue,
              t.from_priority, j.priority AS to_priority
),` + auditCTE + `,` + notifyCTE + `
SELECT id, kind, state, from_queue, to_queue, from_priority, to_priority, ` + db.PausedSQL("to_queue") + `
FROM moved, (SELECT count(*) FROM notified) AS n`

// Escalate moves the job req names to req.To's queue of its own service.
// queues are the service queues it moves jobs between: every service's
// (service.Registry.Queues) or one service's (service.Service.Queues). It
// returns ErrNotFound, ErrNotQueued (wrapped, naming the state),
// ErrNotServiceQueue (the job is in none of queues) or ErrInvalid, and
// changes nothing then.
func Escalate(ctx context.Context, q db.Querier, queues []string, req Request) (Result, error) {
	if err := req.Validate(); err != nil {
		return Result{}, err
	}
	if len(queues) == 0 {
		return Result{}, errNoQueues
	}
	var priority *int16
	switch {
	case req.Priority != 0:
		p := int16(req.Priority) //nolint:gosec // validated 1..4
		priority = &p
	case req.To == routing.Priority:
		p := int16(routing.PriorityEscalated)
		priority = &p
	}
	// Every service queue; a job already in the target queue may still
	// change priority.
	fromQueues, toQueues := queueMoves(queues, routing.Classes(), req.To)

	res := Result{Changed: true}
	err := q.QueryRow(ctx, escalateSQL, req.JobID, fromQueues, toQueues, priority, req.Actor, req.Reason).
		Scan(&res.JobID, &res.Kind, &res.State, &res.FromQueue, &res.ToQueue, &res.FromPriority, &res.ToPriority, &res.ToQueuePaused)
	if err == nil {
		return res, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return Result{}, fmt.Errorf("escalate job %d: %w", req.JobID, err)
	}
	return unchanged(ctx, q, queues, req.JobID, req.To)
}

// unchanged explains why Escalate moved nothing: the job is not there or
// not queued, it is not in one of queues or cannot go to its service's
// queue of class to (not one of queues), or it already is where it was to
// go.
func unchanged(ctx context.Context, q db.Querier, queues []string, jobID int64, to routing.Class) (Result, error) {
	res := Result{JobID: jobID}
	err := q.QueryRow(ctx, `SELECT kind, state::text, queue, priority, `+db.PausedSQL("queue")+` FROM `+riverschema.JobTable+` WHERE id = $1`, jobID).
		Scan(&res.Kind, &res.State, &res.FromQueue, &res.FromPriority, &res.ToQueuePaused)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Result{}, fmt.Errorf("%w: job %d", ErrNotFound, jobID)
	case err != nil:
		return Result{}, fmt.Errorf("escalate job %d: %w", jobID, err)
	}
	switch res.State {
	case riverschema.StateAvailable, riverschema.StateScheduled, riverschema.StateRetryable, riverschema.StatePending:
	default:
		return Result{}, fmt.Errorf("%w: job %d is %s", ErrNotQueued, jobID, res.State)
	}
	if !slices.Contains(queues, res.FromQueue) {
		return Result{}, fmt.Errorf("%w: job %d is in queue %q", ErrNotServiceQueue, jobID, res.FromQueue)
	}
	if base, _, _ := routing.ClassOf(res.FromQueue); !slices.Contains(queues, routing.QueueName(base, to)) {
		return Result{}, fmt.Errorf("%w: job %d cannot move to queue %q", ErrNotServiceQueue, jobID, routing.QueueName(base, to))
	}
	res.ToQueue, res.ToPriority = res.FromQueue, res.FromPriority
	return res, nil
}

// Rule is one automatic escalation: a job available in a From queue for
// longer than After moves to the same service's To queue. After 0 turns the
// rule off.
type Rule struct {
	From  routing.Class
	To    routing.Class
	After time.Duration
}

// Rules are the scheduler's two rules: scheduled → default after
// scheduledAfter, default → priority after defaultAfter.
func Rules(scheduledAfter, defaultAfter time.Duration) []Rule {
	return []Rule{
		{From: routing.Scheduled, To: routing.Default, After: scheduledAfter},
		{From: routing.Default, To: routing.Priority, After: defaultAfter},
	}
}

// Move is one pair of queues a sweep moved jobs between.
type Move struct {
	From, To string
}

func (m Move) String() string { return m.From + "->" + m.To }

// SweepResult counts the jobs a sweep moved, by pair of queues, and the
// jobs it left alone because it could not move them (metadata that is not a
// JSON object, a scheduled_at of -infinity).
type SweepResult struct {
	Moved   map[Move]int
	Total   int
	Skipped []db.Skipped
}

// sweepSQL moves at most $4 available jobs that waited longer than $3 seconds
// in one of the from queues, and at most $4 held ones (River state pending,
// marked jobmeta.HeldAt: held back by fair share or by their tenant's
// limits) from those of the from queues that no live worker serves
// (idle: no unexpired heartbeat with workers in fair_share_slots, as for a
// class run with 0 workers, whose jobs wait for this sweep). In such a
// queue no process passes over its held jobs, so nothing would ever admit
// them: moved, they stay held in the new queue (their state and marks kept;
// no trigger fires, since the state does not change), where its workers'
// passes admit them as their tenant's window and limits allow. Held jobs of
// a queue with workers are its passes' to admit and are not moved: a
// tenant's backlog held for its turn is not escalated wholesale. A moved
// job joins the back of its new queue:
// priority 4 (PriorityLowest) and scheduled_at now. The time its attempt
// became due is kept in its metadata (jobmeta.DueAt, with the scheduled_at
// the move wrote in jobmeta.MovedAt), so that its reported wait and its
// aging still count from then: the next aging sweep lifts it by its whole
// wait (docs/scheduling.md). created_at keeps its original enqueue time.
//
// Jobs of a paused queue, and jobs whose target queue is paused, stay where
// they are. A job whose metadata is not a JSON object cannot carry its due
// time, and one whose scheduled_at is -infinity has no wait: both are left
// alone too, and skippedSQL reports them.
var sweepSQL = `
WITH idle AS (
    SELECT coalesce(array_agg(q.queue), '{}') AS queues
    FROM unnest($1::text[]) AS q(queue)
    WHERE NOT EXISTS (SELECT 1 FROM fair_share_slots AS s WHERE s.queue = q.queue AND s.expires_at > now() AND s.slots > 0)
),
due_available AS (` + sweepDueSQL(`j.state = '`+riverschema.StateAvailable+`'
      AND j.queue = ANY($1::text[])
      AND j.priority = ANY('{1,2,3,4}'::smallint[])
      AND `+jobmetasql.IsObjectSQL("j.metadata")) + `),
due_held AS (` + sweepDueSQL(jobmetasql.HeldSQL("j")+`
      AND j.queue = ANY((SELECT queues FROM idle)::text[])`) + `),
due AS (
    SELECT * FROM due_available UNION ALL SELECT * FROM due_held
),
moved AS (
    UPDATE ` + riverschema.JobTable + ` AS j
    SET queue = due.to_queue,
        priority = 4,
        scheduled_at = now(),
        metadata = ` + jobmetasql.WithMoveSQL("j.metadata", `jsonb_build_object(
            '`+jobmeta.BasePriority+`', 4,
            `+jobmetasql.KeptDueSQL("due.due_at", "now()")+`)`,
	moveSQL(`'`+jobmeta.MoveEscalation+`'`, "due", "4")) + `
    FROM due
    WHERE j.id = due.id
    RETURNING j.id, j.state::text AS state, due.from_queue, due.to_queue, due.from_priority, j.priority AS to_priority
),` + auditCTE + `,` + notifyCTE + `
SELECT from_queue, to_queue FROM moved, (SELECT count(*) FROM notified) AS n`

// sweepDueSQL is a CTE body of sweepSQL: at most $4 jobs of the from queues
// ($1, paired with their targets $2) matching where, that waited longer than
// $3 seconds in line (scheduled_at, never -infinity, and their due time: a
// job fair share by turns placed has its turn in scheduled_at, before it
// was due), out of and into
// queues not paused, locked (SKIP LOCKED), with the time each became due.
func sweepDueSQL(where string) string {
	return `
    SELECT j.id, j.queue AS from_queue, m.to_queue, j.priority AS from_priority,
           ` + jobmetasql.DueAtSQL("j") + ` AS due_at
    FROM ` + riverschema.JobTable + ` AS j
    JOIN unnest($1::text[], $2::text[]) AS m(from_queue, to_queue) ON m.from_queue = j.queue
    WHERE ` + where + `
      AND j.scheduled_at <= now() - make_interval(secs => $3)
      AND ` + jobmetasql.DueAtSQL("j") + ` <= now() - make_interval(secs => $3)
      AND j.scheduled_at > '-infinity'
      AND NOT ` + db.PausedSQL("j.queue") + `
      AND NOT ` + db.PausedSQL("m.to_queue") + `
    LIMIT $4
    FOR UPDATE OF j SKIP LOCKED
`
}

// skippedSQL finds the jobs a rule's sweep would move but cannot: their
// metadata is not a JSON object, or their scheduled_at is -infinity.
var skippedSQL = `
SELECT j.id, ` + db.SkipReasonSQL("j") + ` AS reason FROM ` + riverschema.JobTable + ` AS j
JOIN unnest($1::text[], $2::text[]) AS m(from_queue, to_queue) ON m.from_queue = j.queue
WHERE j.state = '` + riverschema.StateAvailable + `'
  AND j.queue = ANY($1::text[])
  AND j.priority = ANY('{1,2,3,4}'::smallint[])
  AND j.scheduled_at <= now() - make_interval(secs => $3)
  AND ` + jobmetasql.DueAtSQL("j") + ` <= now() - make_interval(secs => $3)
  AND ` + db.SkipReasonSQL("j") + ` IS NOT NULL
  AND NOT ` + db.PausedSQL("j.queue") + `
  AND NOT ` + db.PausedSQL("m.to_queue") + `
ORDER BY j.id
LIMIT $4`

// Sweep applies rules once to the jobs of queues, the service queues
// (service.Registry.Queues), in batches of at most batch jobs per
// statement, with actor "scheduler": a job moves to its own service's queue
// of the rule's To class. It moves no job out of or into a paused queue,
// and reports in SweepResult.Skipped the jobs it could not move.
func Sweep(ctx context.Context, q db.Querier, queues []string, rules []Rule, batch int) (SweepResult, error) {
	if len(queues) == 0 {
		return SweepResult{}, errNoQueues
	}
	if batch <= 0 {
		batch = 1000
	}
	res := SweepResult{Moved: map[Move]int{}}
	for _, rule := range rules {
		if rule.After <= 0 || rule.From == rule.To {
			continue
		}
		fromQueues, toQueues := queueMoves(queues, []routing.Class{rule.From}, rule.To)
		reason := fmt.Sprintf("waited more than %s in a %s queue", rule.After, rule.From)
		for {
			n, err := sweepBatch(ctx, q, fromQueues, toQueues, rule.After, batch, reason, &res)
			if err != nil {
				return res, err
			}
			if n < batch {
				break
			}
		}
		skipped, err := db.FindSkipped(ctx, q, skippedSQL, fromQueues, toQueues, rule.After.Seconds())
		if err != nil {
			return res, fmt.Errorf("escalation sweep: find skipped jobs: %w", err)
		}
		for _, s := range skipped {
			res.Skipped = db.AddSkipped(res.Skipped, s)
		}
	}
	return res, nil
}

func sweepBatch(ctx context.Context, q db.Querier, fromQueues, toQueues []string, after time.Duration, batch int, reason string, res *SweepResult) (int, error) {
	// $5 and $6 (actor, reason) are shared with escalateSQL's audit CTE.
	rows, err := q.Query(ctx, sweepSQL, fromQueues, toQueues, after.Seconds(), batch, ActorScheduler, reason)
	if err != nil {
		return 0, fmt.Errorf("escalation sweep: %w", err)
	}
	// The batch counts only once its statement succeeded: rows read before
	// an error were rolled back with it.
	moved := map[Move]int{}
	n := 0
	for rows.Next() {
		var m Move
		if err := rows.Scan(&m.From, &m.To); err != nil {
			rows.Close()
			return n, fmt.Errorf("escalation sweep: %w", err)
		}
		moved[m]++
		n++
	}
	if err := rows.Err(); err != nil {
		return n, fmt.Errorf("escalation sweep: %w", err)
	}
	for m, k := range moved {
		res.Moved[m] += k
	}
	res.Total += n
	return n, nil
}
