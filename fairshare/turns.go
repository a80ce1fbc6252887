package fairshare

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tierq/tierq/internal/riverschema"
	"github.com/tierq/tierq/jobmeta"
)

// Fair share by turns (experimental, Queue.Turns; migration 00017): the
// trigger tierq_tenant_turn writes each job's start tag into scheduled_at
// as it becomes available. A job made available before it is due (River's
// short retries and snoozes, its scheduler's look-ahead) keeps River's
// scheduled_at, marked tierq:turn_due, and the placing loop gives it its
// tag once due: a look for every queue of the process placed by turns
// (dueSQL), and a placing statement when it finds some (placeSQL), run
// when the soonest marked job is due (at most every placeMinWait), or
// when a job of the process failed or snoozed.

const (
	placeMinWait = 250 * time.Millisecond
	placeMaxWait = time.Second
	placeBatch   = 1000
)

// dueSQL lists the marked jobs of the queues $1 that are due, soonest
// first (at most placeBatch a queue), and the soonest due time of those not
// due yet (NULL: none), through river_job_tierq_turn_due_idx. It runs with
// sorts off (place sends it after sortsOffSQL, in one implicit
// transaction): on statistics taken before a backlog arrived (a table
// analyzed while the service was quiet; every run of tierctl bench
// traffic), the planner costed River's fetching index, which needs a sort
// by scheduled_at, below the partial index, which needs none, and read
// every available job of the queues at each look: 8.7 ms a look on
// average in a quick traffic run, 26.6 s in all, the most database time
// of any statement but River's completer's (the server's statement log;
// 14 ms against 1 ms over 8,000 available jobs in psql).
var dueSQL = `
SELECT coalesce(array_agg(x.id), '{}'),
       (SELECT min(n.at)
        FROM unnest($1::text[]) AS q(name)
        CROSS JOIN LATERAL (
            SELECT j.scheduled_at AS at
            FROM ` + riverschema.JobTable + ` AS j
            WHERE ` + markedSQL + ` AND j.scheduled_at > now()
            ORDER BY j.scheduled_at
            LIMIT 1
        ) AS n)
FROM unnest($1::text[]) AS q(name)
CROSS JOIN LATERAL (
    SELECT j.id
    FROM ` + riverschema.JobTable + ` AS j
    WHERE ` + markedSQL + ` AND j.scheduled_at <= now()
    ORDER BY j.scheduled_at
    LIMIT ` + itoa(placeBatch) + `
) AS x`

// markedSQL is dueSQL's condition, river_job_tierq_turn_due_idx's: the row
// j is an available job of queue q.name marked not due yet.
var markedSQL = `j.state = 'available' AND j.metadata ? '` + jobmeta.TurnDue + `' AND j.queue = q.name`

// genericSQL makes the planner plan every statement of the rest of the
// transaction once per connection: left to choose, it planned dueSQL and
// placeSQL again at every execution (custom plans; the server's statement
// statistics in a quick traffic run: 1,258 plans for 1,214 looks, 768 for
// 726 placings, 2.5 s of planning in all). sortsOffSQL, added to it, turns
// the planner's sorts off for the rest of the transaction too (dueSQL).
const (
	genericSQL  = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true)`
	sortsOffSQL = `set_config('enable_sort', 'off', true)`
)

// placeSQL tags the jobs $2 (dueSQL's) of the queues $1 that are still
// marked and due, at most placeBatch, and returns how many (placingSQL):
// found by id through the primary key (stillAvailableSQL; with the state
// written as state = 'available', its generic plan read River's fetching
// index over every available job, 12.8 ms a statement in a quick traffic
// run, by the server's statement log).
var placeSQL = placingSQL(`
    SELECT j.id, j.queue, j.priority, ` + tenantSQL("j") + ` AS tenant, j.scheduled_at
    FROM ` + riverschema.JobTable + ` AS j
    WHERE j.id = ANY($2::bigint[]) AND ` + stillAvailableSQL("j") + ` AND j.metadata ? '` + jobmeta.TurnDue + `'
      AND j.queue = ANY($1::text[]) AND j.scheduled_at <= now()
    ORDER BY j.scheduled_at, j.id
    LIMIT ` + itoa(placeBatch) + `
    FOR UPDATE SKIP LOCKED`)

// placingSQL is a statement that gives the rows locked (its text: a
// query of id, queue, priority, tenant key and scheduled_at, locking them)
// their turns and returns how many and the greatest id. Every tag is computed against the
// statement's snapshot, so a tenant's jobs placed together take
// consecutive turns from its first (k steps of 1 ms / weight after it),
// not one turn each: tierq_turn_tag is called once per tenant, for its
// first (k = 0), and tagged is materialized (inlined, each tag was
// computed once for every use of s in placed, two or three times a job:
// TestPlacingLooksThroughTheTurnIndex). A tag is never after now() (the
// trigger's, never after the job's own time, is the same at an insert): a
// job due a while ago (a retry placed late, a backlog) takes its turn
// among the tenants waiting now, later than its own time if its tenant's
// turn is, its due time kept in its metadata.
func placingSQL(locked string) string {
	return `
WITH locked AS (` + locked + `
),
due AS (
    SELECT l.*, row_number() OVER (PARTITION BY l.queue, l.priority, l.tenant ORDER BY l.scheduled_at, l.id) - 1 AS k
    FROM locked AS l
),
tagged AS MATERIALIZED (
    SELECT d.id, least(max(CASE WHEN d.k = 0 THEN tierq_turn_tag(d.queue, d.priority, d.tenant, now()) END)
                           OVER (PARTITION BY d.queue, d.priority, d.tenant)
                       + d.k * (interval '1 millisecond' / coalesce(w.weight, 1)), now()) AS s
    FROM due AS d
    LEFT JOIN fair_share_weights AS w ON w.tenant = d.tenant
),
placed AS (
    UPDATE ` + riverschema.JobTable + ` AS j
    SET scheduled_at = t.s,
        metadata = CASE WHEN t.s <> j.scheduled_at
            THEN (j.metadata - '` + jobmeta.TurnDue + `') || jsonb_build_object(
                '` + jobmeta.DueAt + `', tierq_due_micros(j.scheduled_at, j.created_at, j.tags, j.metadata),
                '` + jobmeta.MovedAt + `', (extract(epoch FROM t.s) * 1000000)::bigint)
            ELSE j.metadata - '` + jobmeta.TurnDue + `' END
    FROM tagged AS t
    WHERE j.id = t.id
    RETURNING j.id
)
SELECT count(*)::int, coalesce(max(p.id), 0) FROM placed AS p`
}

// backlogQueuesSQL lists the queues of $1 that no other live process ($2
// this one's client id) places by turns.
const backlogQueuesSQL = `
SELECT coalesce(array_agg(q.name), '{}')
FROM unnest($1::text[]) AS q(name)
WHERE NOT EXISTS (
    SELECT FROM fair_share_slots AS f
    WHERE f.queue = q.name AND f.turns AND f.client_id <> $2 AND f.expires_at > now())`

// backlogSQL is the condition of a row j of the backlog of the queues $1:
// an available job no process placed (no turn before its created_at, no
// kept move time) or marked. Made available while no live process placed
// the queue by turns (a backlog queued before the first worker started, or
// while every worker was down, or under windows), such jobs keep River's
// time, first in first out, behind every turn placed since. A row whose
// metadata is not an object has nowhere to keep its due time and stays
// where it is.
var backlogSQL = `j.state = 'available' AND j.queue = ANY($1::text[]) AND jsonb_typeof(j.metadata) = 'object'
      AND NOT j.metadata ? '` + jobmeta.TurnDue + `'
      AND NOT (j.scheduled_at < j.created_at OR j.metadata ? '` + jobmeta.MovedAt + `')`

// placeBacklogSQL places up to placeBatch due jobs of the backlog
// (backlogSQL) after id $2, oldest first, as if inserted now: a tenant's
// jobs take consecutive turns from the head's (or after its last turn),
// every tenant's first the head's. (A job whose turn is its own time stays
// as it was, still a backlog job by backlogSQL: the id keeps each batch
// after the last.)
var placeBacklogSQL = placingSQL(`
    SELECT j.id, j.queue, j.priority, ` + tenantSQL("j") + ` AS tenant, j.scheduled_at
    FROM ` + riverschema.JobTable + ` AS j
    WHERE ` + backlogSQL + ` AND j.scheduled_at <= now() AND j.id > $2
    ORDER BY j.id
    LIMIT ` + itoa(placeBatch) + `
    FOR UPDATE SKIP LOCKED`)

// markBacklogSQL marks the backlog's jobs not due yet as the trigger
// marks them: the placing loop places them once due.
var markBacklogSQL = `
UPDATE ` + riverschema.JobTable + ` AS j
SET metadata = j.metadata || '{"` + jobmeta.TurnDue + `": true}'
WHERE ` + backlogSQL + ` AND j.scheduled_at > now()`

// placeBacklog places (placeBacklogSQL, a batch at a time, each a short
// transaction, so that River's fetches skip few locked rows) and marks
// (markBacklogSQL) the backlog of the queues placed by turns that no other
// live process places, once this process's heartbeat says it places them
// (so that every job made available from then on is placed by the
// trigger), and returns how many jobs it placed or marked. A process that
// starts while another places the queue leaves the line alone: its rows
// were placed as they came.
func (a *Admitter) placeBacklog(ctx context.Context, db placer) (int64, error) {
	var queues []string
	if err := db.QueryRow(ctx, backlogQueuesSQL, a.turns, a.cfg.ClientID).Scan(&queues); err != nil || len(queues) == 0 {
		return 0, err
	}
	tag, err := db.Exec(ctx, markBacklogSQL, queues)
	if err != nil {
		return 0, err
	}
	done := tag.RowsAffected()
	var after int64
	for {
		var n int
		placing := placingBatch(false)
		placing.Queue(placeBacklogSQL, queues, after).QueryRow(func(row pgx.Row) error { return row.Scan(&n, &after) })
		if err := db.SendBatch(ctx, placing).Close(); err != nil {
			return done, err
		}
		done += int64(n)
		if n < placeBatch {
			return done, nil
		}
	}
}

// placer is what the placing sends its statements through: the pool, or
// one connection of it.
type placer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// placeLoop runs placeSQL until ctx ends, after placing the queues' backlog
// (placeBacklog) once the process's first heartbeat is recorded, on one
// connection of the pool, held while the loop runs (another after an
// error, or once held for the pool's MaxConnLifetime): each connection
// plans the loop's statements, compiles the tag function and plans its
// look-ups at its first use of them (about 10 ms for a placing statement of
// 5 jobs on a fresh connection against 1.6 ms on one that placed before, in
// psql), and on whichever of the pool's connections was free, the loop paid
// that on each of them (tierctl bench traffic
// --quick: 210–261 placing statements a run, 12–22 ms each on average, by
// the server's statement statistics).
func (a *Admitter) placeLoop(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case <-a.beaten:
	}
	var (
		conn *pgxpool.Conn
		held time.Time
	)
	defer func() {
		if conn != nil {
			conn.Release()
		}
	}()
	// acquire takes a connection unless one is held; one held for the
	// pool's MaxConnLifetime is given back first, so that the pool retires
	// it as it retires the others (a held connection is not checked, and
	// would otherwise live as long as the process).
	lifetime := a.pool.Config().MaxConnLifetime
	acquire := func() bool {
		if conn != nil && lifetime > 0 && time.Since(held) >= lifetime {
			conn.Release()
			conn = nil
		}
		if conn != nil {
			return true
		}
		c, err := a.pool.Acquire(ctx)
		if err != nil {
			if ctx.Err() == nil {
				a.cfg.Logger.ErrorContext(ctx, "fair share: placing jobs by turns", slog.String("error", err.Error()))
			}
			return false
		}
		conn, held = c, time.Now()
		return true
	}
	// dropOnError releases the held connection after an error (the pool
	// destroys a broken one); the next statement acquires another.
	dropOnError := func(err error) {
		if err != nil && conn != nil {
			conn.Release()
			conn = nil
		}
	}
	if acquire() {
		n, err := a.placeBacklog(ctx, conn)
		dropOnError(err)
		if err != nil && ctx.Err() == nil {
			a.cfg.Logger.ErrorContext(ctx, "fair share: placing a backlog by turns", slog.String("error", err.Error()))
		} else if n > 0 {
			a.cfg.Logger.InfoContext(ctx, "fair share: placing a backlog by turns", slog.Int64("jobs", n))
		}
	}
	for {
		var (
			found, n int
			next     *time.Time
			err      error
		)
		if acquire() {
			found, n, next, err = a.place(ctx, conn)
			dropOnError(err)
		}
		wait := placeMaxWait
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			a.cfg.Logger.ErrorContext(ctx, "fair share: placing jobs by turns", slog.String("error", err.Error()))
		case n >= placeBatch || found >= placeBatch:
			// More may be due: a full batch placed, or a full look whose
			// jobs another process placed, or River fetched, first.
			wait = 0
		case next != nil:
			wait = min(max(time.Until(*next), placeMinWait), placeMaxWait)
		}
		if wait == 0 {
			continue
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		case <-a.turnWake:
			timer.Stop()
			// a retry or snooze: look after placeMinWait, not at once
			select {
			case <-ctx.Done():
				return
			case <-time.After(placeMinWait):
			}
		}
	}
}

// place looks for the marked jobs due (dueSQL) and places them (placeSQL),
// and returns how many it found and placed, and when the next marked job
// is due (nil: none). Most looks find none and cost one round trip: the
// settings and one small statement.
func (a *Admitter) place(ctx context.Context, db placer) (found, n int, next *time.Time, err error) {
	var ids []int64
	look := placingBatch(true)
	look.Queue(dueSQL, a.turns).QueryRow(func(row pgx.Row) error { return row.Scan(&ids, &next) })
	if err := db.SendBatch(ctx, look).Close(); err != nil {
		return 0, 0, nil, err
	}
	if len(ids) == 0 {
		return 0, 0, next, nil
	}
	placing := placingBatch(false)
	placing.Queue(placeSQL, a.turns, ids).QueryRow(func(row pgx.Row) error { return row.Scan(&n, nil) })
	if err := db.SendBatch(ctx, placing).Close(); err != nil {
		return len(ids), 0, nil, err
	}
	return len(ids), n, next, nil
}

// placingBatch is a batch whose statements queued after its first are
// planned once per connection (genericSQL) and, with sortsOff, with sorts
// off (sortsOffSQL), by one statement: sent outside a transaction, a batch
// runs as one implicit transaction, whose settings these are.
func placingBatch(sortsOff bool) *pgx.Batch {
	settings := genericSQL
	if sortsOff {
		settings += ", " + sortsOffSQL
	}
	b := &pgx.Batch{}
	b.Queue(settings)
	return b
}
