package fairshare

import (
	"context"
	"log/slog"
	"time"

	"github.com/tierq/tierq/internal/riverschema"
	"github.com/tierq/tierq/jobmeta"
)

// Fair share by turns (experimental, Queue.Turns; migration 00017): the
// trigger tierq_tenant_turn writes each job's start tag into scheduled_at
// as it becomes available. A job made available before it is due (River's
// short retries and snoozes, its scheduler's look-ahead) keeps River's
// scheduled_at, marked tierq:turn_due, and the placing loop gives it its
// tag once due: one statement for every queue of the process placed by
// turns, run when the soonest marked job is due (at most every
// placeMinWait), or when a job of the process failed or snoozed.

const (
	placeMinWait = 20 * time.Millisecond
	placeMaxWait = time.Second
	placeBatch   = 1000
)

// placeSQL tags the marked jobs of the queues $1 that are due, and returns
// how many, and the soonest due time of those still marked (NULL: none).
// Every tag is computed against the statement's snapshot, so a tenant's
// jobs placed together take consecutive turns from its first (k steps of
// 1 ms / weight after it), not one turn each.
var placeSQL = `
WITH locked AS (
    SELECT j.id, j.queue, j.priority, ` + tenantSQL("j") + ` AS tenant, j.scheduled_at
    FROM ` + riverschema.JobTable + ` AS j
    WHERE j.state = 'available' AND j.metadata ? '` + jobmeta.TurnDue + `' AND j.queue = ANY($1::text[])
      AND j.scheduled_at <= now()
    ORDER BY j.scheduled_at, j.id
    LIMIT ` + itoa(placeBatch) + `
    FOR UPDATE SKIP LOCKED
),
due AS (
    SELECT l.*, row_number() OVER (PARTITION BY l.queue, l.priority, l.tenant ORDER BY l.scheduled_at, l.id) - 1 AS k
    FROM locked AS l
),
tagged AS (
    SELECT d.id, least(tierq_turn_tag(d.queue, d.priority, d.tenant, d.scheduled_at)
                       + d.k * (interval '1 millisecond' / coalesce(w.weight, 1)), d.scheduled_at) AS s
    FROM due AS d
    LEFT JOIN fair_share_weights AS w ON w.tenant = d.tenant
),
placed AS (
    UPDATE ` + riverschema.JobTable + ` AS j
    SET scheduled_at = t.s,
        metadata = CASE WHEN t.s < j.scheduled_at
            THEN (j.metadata - '` + jobmeta.TurnDue + `') || jsonb_build_object(
                '` + jobmeta.DueAt + `', tierq_due_micros(j.scheduled_at, j.created_at, j.tags, j.metadata),
                '` + jobmeta.MovedAt + `', (extract(epoch FROM t.s) * 1000000)::bigint)
            ELSE j.metadata - '` + jobmeta.TurnDue + `' END
    FROM tagged AS t
    WHERE j.id = t.id
    RETURNING 1
)
SELECT (SELECT count(*) FROM placed)::int,
       (SELECT min(j.scheduled_at) FROM ` + riverschema.JobTable + ` AS j
         WHERE j.state = 'available' AND j.metadata ? '` + jobmeta.TurnDue + `' AND j.queue = ANY($1::text[])
           AND j.scheduled_at > now())`

// placeLoop runs placeSQL until ctx ends.
func (a *Admitter) placeLoop(ctx context.Context) {
	for {
		var (
			n    int
			next *time.Time
		)
		wait := placeMaxWait
		err := a.pool.QueryRow(ctx, placeSQL, a.turns).Scan(&n, &next)
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			a.cfg.Logger.ErrorContext(ctx, "fair share: placing jobs by turns", slog.String("error", err.Error()))
		case n >= placeBatch:
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
