package fairshare

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tierq/tierq/internal/db"
	"github.com/tierq/tierq/internal/jobmetasql"
	"github.com/tierq/tierq/internal/riverschema"
	"github.com/tierq/tierq/jobmeta"
)

// The refill is the fast path of per-tenant limits: when a job counted
// against its tenant's cap ends, or a job charged against its tenant's rate
// starts, in this process, the tenant may have room for its next held job
// at once. A pass would find it too, but a pass reads the whole queue and
// may be resting (passRest) or running in another replica; the refill
// admits the tenant's next best job held by a limit (jobmeta.CapHeldAt or
// RateHeldAt), one for each of its jobs that ended or started, in one small
// statement by the tenant's key through river_job_tierq_held_idx, within a
// millisecond or two of the hook. The database's triggers decide, as for
// every admission: a tenant still at its cap, or without a token, gets the
// job held again. Jobs held by fair share for their turn (jobmeta.HeldAt
// alone) are the passes' to admit.

// refillMax is the most tenants one refill statement serves: the hook
// queues at most this many and drops the rest (the passes the refill then
// wakes admit them).
const refillMax = 256

// refill is the tenants whose next held job the refill loop admits.
type refill struct {
	mu      sync.Mutex
	meta    [][]byte // the jobs' metadata (their tenant)
	q       []string // the jobs' queues (their service)
	dropped bool     // some beyond refillMax were not queued
	wake    chan struct{}
}

func newRefill() *refill { return &refill{wake: make(chan struct{}, 1)} }

// add queues the tenant of a job that ended (or started) in queue.
func (r *refill) add(queue string, metadata []byte) {
	r.mu.Lock()
	if len(r.q) < refillMax {
		r.meta = append(r.meta, metadata)
		r.q = append(r.q, queue)
	} else {
		r.dropped = true
	}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// take returns the queued jobs' metadata and queues, and whether some
// were dropped, and empties the queue.
func (r *refill) take() (meta, queues []string, dropped bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	meta = make([]string, len(r.meta))
	for i, m := range r.meta {
		meta[i] = string(m)
	}
	queues, dropped = r.q, r.dropped
	r.meta, r.q, r.dropped = nil, nil, false
	return meta, queues, dropped
}

// refillLoop runs refills until ctx ends.
func (a *Admitter) refillLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.hook.refill.wake:
		}
		meta, queues, dropped := a.hook.refill.take()
		if len(queues) == 0 {
			continue
		}
		n, err := a.Refill(ctx, meta, queues)
		if err != nil && ctx.Err() == nil {
			a.cfg.Logger.ErrorContext(ctx, "fair share refill", slog.String("error", err.Error()))
		}
		// Each job that ended or started freed room for one: when the
		// refill admitted one for each, the passes have nothing to add.
		// Otherwise (no job held by a limit, a trigger's refusal, jobs
		// dropped beyond refillMax, an error) every queue's loop runs a
		// pass, which also learns when a rated tenant's next token is
		// due. Waking them
		// after every refill cost tierctl bench limits a tenth of its
		// throughput with caps on (a pass per queue per capped job's end)
		// and half its reaction time.
		if err != nil || n < len(queues) || dropped {
			a.hook.wakeAll()
		}
	}
}

// Refill admits, for each job given by its metadata (JSON) and queue, its
// tenant's best job held by a limit in the queues of the job's service, and
// returns how many it made available. The hook calls it (through the
// refill loop) when a limited job ends or starts; exported for tests.
func (a *Admitter) Refill(ctx context.Context, metadata, queues []string) (int, error) {
	// One round trip: a batch sent outside a transaction runs as one
	// implicit transaction (the statements before the protocol's Sync), so
	// the setting is the transaction's and the refill commits with it,
	// where BEGIN, set, refill, COMMIT took four. (On a loaded 2-core
	// machine the difference was within the noise of tierctl bench limits'
	// reaction: each round trip waits for a CPU.)
	var n, notified int
	batch := &pgx.Batch{}
	if f := a.hook.capped.setting(time.Now()); f != "" {
		batch.Queue(`SELECT set_config('`+finishedJobsSetting+`', $1, true)`, f)
	}
	batch.Queue(refillSQL, metadata, queues).QueryRow(func(row pgx.Row) error { return row.Scan(&n, &notified) })
	if err := a.pool.SendBatch(ctx, batch).Close(); err != nil {
		return 0, err
	}
	return n, nil
}

// refillSQL admits, for each tenant of the jobs given (metadata $1[i],
// queue $2[i]: jobs that ended or started), as many of its best jobs held
// by a limit as jobs of it were given (the service's queues in their
// order: priority, default, scheduled; then River's fetch order), due, of a
// kind a live heartbeat of its queue fetches, in queues not paused; SKIP
// LOCKED, as a pass. The triggers re-check the limits: a job beyond the
// tenant's cap or tokens is held again, keeping its place. A job of the
// tenant already in line does not stop it: the cap counts that job, and
// while every worker is busy the passes hold a tenant's line to its
// window. (One job per tenant, and none beside a job in line, left a
// capped tenant whose two jobs ended together, or one after the other
// before the first refill's job started, to a pass: 20–40 ms later on a
// loaded 2-core machine, and the passes slowed every refill.)
// River's insert notification goes to each queue that gained a job.
var refillSQL = `
WITH e AS (
    SELECT ` + tenantSQL("e0") + ` AS tenant, s.queues, count(*)::int AS n
    FROM unnest($1::jsonb[], $2::text[]) AS e0(` + riverschema.JobMetadata + `, queue)
    JOIN tierq_services AS s ON e0.queue = ANY (s.queues)
    WHERE coalesce(e0.` + riverschema.JobMetadata + `->>'` + jobmeta.Tenant + `', '') <> ''
    GROUP BY 1, 2
),
pick AS (
    SELECT x.id
    FROM e
    CROSS JOIN LATERAL (
        SELECT h.id
        FROM unnest(e.queues) WITH ORDINALITY AS q(name, pos)
        CROSS JOIN LATERAL (
            SELECT j.id, j.priority, j.scheduled_at
            FROM ` + riverschema.JobTable + ` AS j
            WHERE ` + jobmetasql.HeldSQL("j") + ` AND j.queue = q.name AND ` + tenantSQL("j") + ` = e.tenant
              AND (j.metadata ? '` + jobmeta.CapHeldAt + `' OR j.metadata ? '` + jobmeta.RateHeldAt + `')
              AND j.scheduled_at <= now()
              AND ` + startableSQL("j") + `
            ORDER BY j.priority, j.scheduled_at, j.id
            LIMIT e.n
        ) AS h
        WHERE NOT ` + db.PausedSQL("q.name") + `
        ORDER BY q.pos, h.priority, h.scheduled_at, h.id
        LIMIT e.n
    ) AS x
),
locked AS (
    SELECT j.id
    FROM ` + riverschema.JobTable + ` AS j
    WHERE j.id = ANY(ARRAY(SELECT id FROM pick)) AND ` + stillHeldSQL("j") + `
    FOR UPDATE SKIP LOCKED
),
admitted AS (
    UPDATE ` + riverschema.JobTable + ` AS j
    SET state = '` + riverschema.StateAvailable + `',
        scheduled_at = greatest(now(), j.scheduled_at),
        metadata = (j.metadata - '` + jobmeta.HeldAt + `' - '` + jobmeta.CapHeldAt + `' - '` + jobmeta.RateHeldAt + `') || jsonb_build_object(
            ` + jobmetasql.KeptDueSQL(jobmetasql.DueAtSQL("j"), `greatest(now(), j.scheduled_at)`) + `)
    WHERE j.id = ANY(ARRAY(SELECT id FROM locked))
    RETURNING j.queue, j.state
),
notified AS (
    SELECT ` + riverschema.NotifyInsertSQL("q.queue") + `
    FROM (SELECT DISTINCT queue FROM admitted WHERE state = '` + riverschema.StateAvailable + `') AS q
)
SELECT (SELECT count(*) FROM admitted WHERE state = '` + riverschema.StateAvailable + `')::int,
       (SELECT count(*) FROM notified)::int`
