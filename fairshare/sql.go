package fairshare

import (
	"github.com/tierq/tierq/internal/db"
	"github.com/tierq/tierq/internal/jobmetasql"
	"github.com/tierq/tierq/internal/riverschema"
	"github.com/tierq/tierq/jobmeta"
)

// tenantSQL is the key of a job's tenant in the SQL of this package
// (jobmetasql.TenantKeySQL): its metadata's jobmeta.Tenant, or the empty
// string for a job without one (they count as one tenant), a tenant id
// longer than jobmeta.MaxTenantBytes keyed by its first characters and its
// md5. river_job_tierq_held_idx is built on this exact expression
// (migration 00009).
func tenantSQL(alias string) string { return jobmetasql.TenantKeySQL(alias) }

// unlimited is the window of a queue without fair share: nothing is held
// back and everything held is admitted.
const unlimited = 1 << 30

// capCTE is a queue's capacity ($1), the sum of the unexpired heartbeats of
// the processes that serve it (fair_share_slots), and at least the
// parameter local (this process's own workers, before its first heartbeat
// lands).
func capCTE(local string) string {
	return `cap AS (
    SELECT greatest(` + local + `::int, coalesce(sum(s.slots), 0))::int AS c
    FROM fair_share_slots AS s
    WHERE s.queue = $1 AND s.expires_at > now()
)`
}

// knownCTE is the job kinds the workers of queue $1 fetch (River's
// FetchOnlyKnownKinds): the kinds of the unexpired heartbeats with workers
// (fair_share_slots.kinds; NULL: every kind), and this process's own, the
// parameters kinds (text[]) and every (bool: it fetches every kind), which
// count before its first heartbeat lands. One row: every, or the kinds.
func knownCTE(kinds, every string) string {
	return `known AS (
    SELECT ` + every + `::bool OR coalesce(bool_or(s.kinds IS NULL), false) AS every,
           ` + kinds + `::text[] || coalesce(array_agg(k.kind) FILTER (WHERE k.kind IS NOT NULL), '{}') AS kinds
    FROM fair_share_slots AS s
    LEFT JOIN LATERAL unnest(s.kinds) AS k(kind) ON true
    WHERE s.queue = $1 AND s.expires_at > now() AND s.slots > 0
)`
}

// knownKindSQL is an SQL condition: a worker of the queue fetches the kind
// of the river_job row aliased alias (the statement's knownCTE).
func knownKindSQL(alias string) string {
	return `((SELECT every FROM known) OR ` + alias + `.kind = ANY((SELECT kinds FROM known)::text[]))`
}

// fetchableSQL is an SQL condition: River's fetch would take the available
// river_job row aliased alias now. It is due (River writes retries and
// snoozes of up to 5 s, and its scheduler promotes jobs, into available
// with a scheduled_at ahead: its fetch skips them until then) and of a kind
// a worker of the queue runs (knownKindSQL). Only such rows hold a place in
// line; the others are neither counted, held back nor lent.
func fetchableSQL(alias string) string {
	return alias + `.scheduled_at <= now() AND ` + knownKindSQL(alias)
}

// localFetchableSQL is fetchableSQL with this process's own kinds only
// (the parameters kinds and every): for a look or a check, which read no
// heartbeats. A job of a kind only another process fetches is that
// process's look to find.
func localFetchableSQL(alias, kinds, every string) string {
	return alias + `.scheduled_at <= now() AND (` + every + `::bool OR ` + alias + `.kind = ANY(` + kinds + `::text[]))`
}

// notifiedCTE sends River's insert notification for the queue ($1) when
// the statement's CTE moved made any row available there, so that idle
// workers fetch at once.
func notifiedCTE(moved string) string {
	return `notified AS (
    SELECT ` + riverschema.NotifyInsertSQL("$1::text") + `
    WHERE EXISTS (SELECT 1 FROM ` + moved + `)
)`
}

// admittedAtSQL is the scheduled_at of an admitted job (t, a row of the
// pass's turns): now(), less a microsecond per job admitted after it in the
// same pass, in the order the places they refill were freed (places: a
// tenant's k admitted jobs refill the places its k latest starts freed,
// oldest first; ties, jobs fetched together, in the order they stood in
// line). When a pass refills several places at once (it came late), the
// line is rebuilt as if each place had been refilled at the back the moment
// it was freed: jobs admitted together would otherwise tie on scheduled_at
// and go in id order, the oldest tenant's first every time. In the past,
// so that River fetches it at once; but never before the job's own
// scheduled_at (a safeguard: only due held jobs are admitted, so that a
// held job not due yet, held by an older release or written held, neither
// runs early nor takes a place in line before it is due).
const admittedAtSQL = `greatest(now() - (t.total - t.pos) * interval '1 microsecond', j.scheduled_at)`

// stillAvailableSQL is an SQL condition for a row a pass found by its id
// (id = ANY(ARRAY(…))): the river_job row aliased alias is still
// available. The state is compared as text on purpose: written as
// state = 'available', the generic plan of a pass read those ids through
// River's fetching index, whose first column is the state, filtering
// every available job of every queue by id (1,700 rows and 70 ms for 0
// matches under production traffic, six times a pass), instead of one
// primary-key probe per id (TestPassPlanReadsTheHeldIndexByTenantKey).
func stillAvailableSQL(alias string) string {
	return alias + `.state::text = '` + riverschema.StateAvailable + `'`
}

// stillHeldSQL is stillAvailableSQL for a held row found by its id: the
// river_job row aliased alias is still held (pending, marked
// jobmeta.HeldAt), its state compared as text for the same reason. Written
// as jobmetasql.HeldSQL, the refill's generic plan read the rows it picked
// through River's fetching index, filtering every pending job by id, once
// the statistics were taken before anything was held (the same shape read
// 2,547 rows for one id, 5 ms, in a refill under tierctl bench traffic;
// TestRefillPlanReadsRowsByID).
func stillHeldSQL(alias string) string {
	m := alias + `.` + riverschema.JobMetadata
	return alias + `.state::text = '` + riverschema.StatePending + `' AND ` + m + ` ? '` + jobmeta.HeldAt + `' AND ` + jobmetasql.IsObjectSQL(m)
}

// finishedJobsSetting is the transaction-local setting by which a pass
// names the jobs its process has finished and River has not written yet
// (a comma-separated list of ids): they no longer count against their
// tenant's concurrency cap, here and in migration 00013's trigger, which
// reads the same setting.
const finishedJobsSetting = "tierq.finished_jobs"

// roomCTEs are a pass's view of the concurrency caps and rate limits
// (package limits, migrations 00013 and 00015) of the tenants of CTE held
// (tenant, level, tier: each tenant with held work, the tier of its best
// held job):
//
//   - finished: the jobs this process finished whose completion River has
//     not written yet (finishedJobsSetting); they stop counting only while
//     still running (a snooze River wrote available counts again).
//   - svc: the service whose queues hold queue $1 (tierq_services).
//   - room: for each such tenant under a cap or a rate (its override in
//     tenant_limits, else its tier's default in tier_limits; 0 is none),
//     how many more of its jobs may be made available now, the least of:
//     the cap less its jobs counted against it (marked jobmeta.Capped,
//     running, or available unless of a kind no live worker of its queue
//     fetches (unfetchableSQL), in any queue of the service, through
//     river_job_tierq_capped_idx), never below 0 (cap_room); and for a
//     rate, 1 when it has a token in its bucket (tenant_rate_buckets,
//     refilled to now) and no job available and not started yet that a
//     worker can fetch (rateWaitingSQL), else 0 (rate_room). rate_wait is
//     how long until its next token, when that is all it lacks. The
//     triggers keep the limits whatever a pass does; room keeps a pass
//     from admitting jobs the triggers would only hold again, and from
//     counting a limited tenant's held jobs as demand beyond it (a tenant
//     with no room is no active tenant, and its held jobs close no worse
//     level).
func roomCTEs(held string) string {
	return `finished AS (
    SELECT coalesce(string_to_array(nullif(current_setting('` + finishedJobsSetting + `', true), ''), ',')::bigint[], '{}') AS ids
),
svc AS (
    SELECT s.name, s.queues FROM tierq_services AS s WHERE $1 = ANY (s.queues) LIMIT 1
),
room AS (
    SELECT h.tenant, k.cap_room, k.rate_room, least(k.cap_room, k.rate_room) AS room,
           CASE WHEN k.rate_room = 0 AND NOT r.waiting AND k.cap_room > 0
                THEN greatest(0, extract(epoch FROM r.at - clock_timestamp()))::float8 + (1 - r.tokens) * extract(epoch FROM c.per)::float8 / c.rc END AS rate_wait
    FROM ` + held + ` AS h
    CROSS JOIN svc
    CROSS JOIN LATERAL (
        SELECT coalesce(o.max_running, l.max_running, 0) AS n,
               CASE WHEN o.rate_count IS NOT NULL THEN o.rate_count ELSE coalesce(l.rate_count, 0) END AS rc,
               CASE WHEN o.rate_count IS NOT NULL THEN o.rate_interval ELSE l.rate_interval END AS per
        FROM (SELECT 1) AS one
        LEFT JOIN tenant_limits AS o ON o.service = svc.name AND o.tenant = h.tenant
        LEFT JOIN tier_limits AS l
               ON l.service = svc.name AND l.tier = CASE WHEN h.tier IN ('pro', 'pro_plus', 'enterprise') THEN h.tier ELSE 'free' END
    ) AS c
    LEFT JOIN LATERAL (
        SELECT ` + rateWaitingSQL("h.tenant", "svc.queues") + ` AS waiting,
               (SELECT b.at FROM tenant_rate_buckets AS b WHERE b.service = svc.name AND b.tenant = h.tenant) AS at,
               coalesce((SELECT least(c.rc::float8, b.tokens + c.rc * greatest(0, extract(epoch FROM clock_timestamp() - b.at))::float8
                                                              / extract(epoch FROM c.per)::float8)
                         FROM tenant_rate_buckets AS b WHERE b.service = svc.name AND b.tenant = h.tenant), c.rc::float8) AS tokens
        WHERE c.rc > 0 AND c.per IS NOT NULL
    ) AS r ON true
    CROSS JOIN LATERAL (
        SELECT CASE WHEN c.n > 0
                    THEN greatest(0, c.n - (SELECT count(*) FROM (SELECT 1 FROM ` + riverschema.JobTable + ` AS j
                                                                 WHERE j.state IN ('` + riverschema.StateAvailable + `', '` + riverschema.StateRunning + `')
                                                                   AND j.metadata ? '` + jobmeta.Capped + `'
                                                                   AND ` + tenantSQL("j") + ` = h.tenant AND j.queue = ANY (svc.queues)
                                                                   AND NOT (j.state = '` + riverschema.StateRunning + `' AND j.id = ANY ((SELECT ids FROM finished)::bigint[]))
                                                                   AND NOT ` + unfetchableSQL("j") + `
                                                                 LIMIT c.n) AS x))::int
                    ELSE ` + itoa(unlimited) + ` END AS cap_room,
               CASE WHEN r.tokens IS NULL THEN ` + itoa(unlimited) + `
                    WHEN r.waiting OR r.tokens < 1 THEN 0
                    ELSE 1 END AS rate_room
    ) AS k
    WHERE (c.n > 0 OR (c.rc > 0 AND c.per IS NOT NULL)) AND h.tenant <> ''
)`
}

// rateWaitingSQL is an SQL condition: the tenant whose key is the
// expression tenant has a job counted against its limits (jobmeta.Capped)
// available in one of the queues of the expression queues (text[]) that a
// worker can fetch, a job admitted and not started yet: a rate-limited
// tenant has at most one (migration 00015's trigger, whose rule this is). A
// job counts only when a live heartbeat of its queue has workers for its
// kind: one in a queue no worker serves, or of a kind none fetches, would
// never start, and counted it would hold the tenant's other work for ever.
func rateWaitingSQL(tenant, queues string) string {
	return `EXISTS (SELECT 1 FROM ` + riverschema.JobTable + ` AS j
               WHERE j.state = '` + riverschema.StateAvailable + `' AND j.metadata ? '` + jobmeta.Capped + `'
                 AND ` + tenantSQL("j") + ` = ` + tenant + ` AND j.queue = ANY (` + queues + `)
                 AND NOT ` + unfetchableSQL("j") + `)`
}

// startableSQL is an SQL condition: a live heartbeat of the queue of the
// river_job row aliased alias has workers that fetch its kind
// (fair_share_slots), so that, available, it would start. The refill
// admits only such jobs.
func startableSQL(alias string) string {
	return `EXISTS (SELECT 1 FROM fair_share_slots AS s
                WHERE s.queue = ` + alias + `.queue AND s.expires_at > now() AND s.slots > 0
                  AND (s.kinds IS NULL OR ` + alias + `.kind = ANY (s.kinds)))`
}

// unfetchableSQL is an SQL condition: the river_job row aliased alias is of
// a kind that no worker of its queue fetches, while the queue has live
// workers (their heartbeats say which kinds they fetch). Such a job never
// starts; available, it does not count against its tenant's cap nor as its
// rate-limited job waiting to start (migration 00015's triggers apply the
// same rule): counted, it held the tenant's work in every queue of the
// service for ever. A queue with no live worker at all (a restart, a scale
// to zero) counts its jobs: they start when workers come, and the limits
// err on the safe side meanwhile. A running job is never unfetchable.
func unfetchableSQL(alias string) string {
	return `(` + alias + `.state = '` + riverschema.StateAvailable + `'
         AND EXISTS (SELECT 1 FROM fair_share_slots AS s
                     WHERE s.queue = ` + alias + `.queue AND s.expires_at > now() AND s.slots > 0)
         AND NOT ` + startableSQL(alias) + `)`
}

// Rows are joined to river_job by id through id = ANY(ARRAY(…)), which the
// planner always answers from the primary key: a plain join may be planned
// as a sequential scan of river_job once its statistics have seen a flood
// (45 ms a pass with 75,000 jobs held, growing with the table).
//
// passSQL is one pass over one queue ($1), in one statement:
//
//   - lock: nothing is done over a queue paused in River. (The pass runs
//     in a transaction that holds lockSQL's lock on the queue: see
//     Admitter.locked.)
//   - cap: the queue's capacity, the sum of the unexpired heartbeats of the
//     processes that serve it (fair_share_slots), and at least $2 (this
//     process's own workers, before its first heartbeat lands).
//   - known: the kinds the queue's workers fetch (knownCTE: heartbeats,
//     and $4, $5 for this process's own).
//   - avail: the queue's available jobs that River's fetch would take now
//     (fetchableSQL: due, of a known kind), ranked per tenant in River's
//     fetch order (priority, scheduled_at, id). Through River's fetching
//     index. Jobs lent to the queue (jobmeta.LentFrom) are the lending
//     pass's: they neither count nor move here. An available job that is
//     not due yet (a retry or a snooze River wrote a few seconds ahead) or
//     that no worker of the queue fetches holds no place in line: counted,
//     it filled its tenant's window with work no worker would take, and
//     the tenant's held jobs waited beside idle workers.
//   - held_levels: the tenants with held jobs River would fetch once
//     admitted (due, of known kinds) and the best priority each has held, one index probe per tenant (a loose scan of
//     river_job_tierq_held_idx), so a pass costs O(tenants), never O(held
//     jobs). (A held job of a kind no worker fetches is left to
//     releaseSQL.)
//   - held_counts: how many held jobs each of those has that River would
//     fetch once admitted, counted up to cap (a probe of at most cap index
//     entries per tenant): its demand beyond what it has in line. Counted
//     only while the active tenants are fewer than cap; with as many
//     tenants as places or more, every held tenant's demand is taken as
//     cap: every tenant still has at least one place, so the line holds
//     the capacity's worth whatever the counts, which would only move
//     places between tenants (a tenant with few held jobs may get a window
//     it cannot fill, a worse priority fewer places than the better one's
//     true demand would leave it), and counting cost a probe per tenant
//     (about 4.5 ms a pass at 1,000 tenants, BenchmarkPass).
//   - tenants, levels, filling, windows: every active tenant's window, its
//     max-min fair share of its level's capacity by weight
//     (fair_share_weights, default 1) among the tenants of its level (the
//     best priority it has waiting), at least one. Its demand d is its
//     fetchable available and held jobs (at most cap); a level's capacity
//     is cap less the demand of the better levels (never below 0). Water
//     filling: tenants that want less than an equal share by weight get
//     what they want, and the rest of the level's capacity is shared by
//     weight among the others (tenants in order of d / weight; a tenant is
//     satisfied when d × the weight of it and those after it is at most its
//     weight × the capacity those before it left). So the line holds the
//     capacity's worth of work whenever the demand is there: with windows
//     of cap / tenants, tenants of one or two jobs left their places empty
//     and the workers idle until the next pass. A level whose capacity the
//     better ones took gets windows of one: each of its tenants keeps its
//     best job in line, behind every better job (River fetches by priority
//     first), so a worker that finds the better line empty before the next
//     pass takes the longest waiting work of the next level, not a job of
//     a worse priority inserted since (with windows of 0 there, every job
//     of the level was held and such fresh inserts ran first). Unlimited
//     when $3 (fair share on) is false, or when one tenant alone is active
//     and nothing is held (a tenant alone needs no turns: holding its
//     backlog would cost two row updates per job for nothing; it is held
//     the moment a second tenant shows up, and stays windowed until its
//     held jobs are all admitted, so that a trickle of other tenants does
//     not make the pass hold and release it over and over).
//   - pushed: each tenant's available jobs beyond its window, worst first
//     in fetch order, go to pending with jobmeta.HeldAt. (cleared: an
//     available job that still carries jobmeta.HeldAt, made available by
//     someone else, River UI's retry button, loses the mark.) SKIP LOCKED: a
//     job a worker is fetching right now is left to it. A job whose
//     metadata is not an object has nowhere to record the hold and is left
//     available.
//   - yielded: while a tenant with no job running (one that has not had
//     its turn yet: a newcomer, a trickle) waits in line, the places of
//     tenants with jobs running that stand ahead of it go behind it
//     (scheduled_at just after its newest job's, never after now, and so
//     never before their own: every row ranked is due; their due time
//     kept), as deficit round robin serves a newly active flow
//     next. Without this its job would wait behind every place the other
//     tenants hold. (Moving the newcomer ahead instead would give it an
//     earlier scheduled_at than its due time: aging and escalation would
//     count a wait it never had.) SKIP LOCKED, as every row this pass
//     moves: a pass never waits for River's fetch or completer (waiting
//     for a row lock, passes took 20 ms and more under production traffic,
//     and one deadlocked with River's completer).
//   - admitted: each tenant's best held jobs that are due and of known
//     kinds, as many as its window has room for, go back to available with scheduled_at
//     now() (admittedAtSQL: never before their own scheduled_at): the back
//     of the queue in River's fetch order, so that tenants take turns, each
//     with as many places in the line as its window. Jobs admitted together
//     go in the order their places were freed, and the jobs of tenants with
//     none running (newcomers held behind a better priority) in the order
//     they became due: first come, first served (in random order, as
//     before, a newcomer waited behind tenants that arrived after it). The time the job's
//     attempt became due is kept (jobmeta.DueAt and MovedAt, as escalation
//     keeps it), so its reported wait and its aging count the hold.
//   - notified: River's insert notification for the queue when anything
//     was admitted, so that idle workers fetch at once.
//
// A queue paused in River is left alone.
var passSQL = `
WITH RECURSIVE
lock AS (
    SELECT true AS ok WHERE NOT ` + db.PausedSQL("$1") + `
),
` + capCTE("$2") + `,
` + knownCTE("$4", "$5") + `,
avail AS MATERIALIZED (
    SELECT j.id, j.priority, j.scheduled_at, ` + tenantSQL("j") + ` AS tenant, jsonb_typeof(j.metadata) = 'object' AS holdable,
           j.metadata ? '` + jobmeta.HeldAt + `' AS marked,
           row_number() OVER (PARTITION BY ` + tenantSQL("j") + ` ORDER BY j.priority, j.scheduled_at, j.id) AS rank
    FROM ` + riverschema.JobTable + ` AS j
    WHERE j.state = '` + riverschema.StateAvailable + `' AND j.queue = $1 AND NOT j.metadata ? '` + jobmeta.LentFrom + `' AND (SELECT ok FROM lock)
      AND ` + fetchableSQL("j") + `
),
held_all(tenant, level, tier) AS (
    (SELECT ` + tenantSQL("j") + `, j.priority, j.metadata->>'` + jobmeta.Tier + `' FROM ` + riverschema.JobTable + ` AS j
     WHERE ` + jobmetasql.HeldSQL("j") + ` AND j.queue = $1 AND (SELECT ok FROM lock) AND ` + fetchableSQL("j") + `
     ORDER BY ` + tenantSQL("j") + `, j.priority LIMIT 1)
    UNION ALL
    SELECT x.tenant, x.level, x.tier
    FROM held_all AS h,
         LATERAL (SELECT ` + tenantSQL("j") + ` AS tenant, j.priority AS level, j.metadata->>'` + jobmeta.Tier + `' AS tier FROM ` + riverschema.JobTable + ` AS j
                  WHERE ` + jobmetasql.HeldSQL("j") + ` AND j.queue = $1 AND ` + tenantSQL("j") + ` > h.tenant AND ` + fetchableSQL("j") + `
                  ORDER BY ` + tenantSQL("j") + `, j.priority LIMIT 1) AS x
),
` + roomCTEs("held_all") + `,
held_levels AS (
    SELECT h.tenant, h.level FROM held_all AS h
    WHERE NOT EXISTS (SELECT 1 FROM room AS r WHERE r.tenant = h.tenant AND r.room = 0)
),
held_counts AS (
    SELECT h.tenant,
           least(coalesce((SELECT r.room FROM room AS r WHERE r.tenant = h.tenant), ` + itoa(unlimited) + `),
           CASE WHEN (SELECT count(*) FROM (SELECT tenant FROM avail UNION SELECT tenant FROM held_levels) AS k) >= (SELECT c FROM cap)
                THEN (SELECT c FROM cap)
                ELSE (SELECT count(*) FROM (SELECT 1 FROM ` + riverschema.JobTable + ` AS j
                                            WHERE ` + jobmetasql.HeldSQL("j") + ` AND j.queue = $1 AND ` + tenantSQL("j") + ` = h.tenant AND ` + fetchableSQL("j") + `
                                            LIMIT (SELECT c FROM cap)) AS x) END) AS h
    FROM held_levels AS h
),
tenants AS (
    SELECT t.tenant, min(t.level) AS level, coalesce(max(a.n), 0) AS n, coalesce(max(w.weight), 1) AS weight,
           least((SELECT c FROM cap), coalesce(max(a.n), 0) + coalesce(max(hc.h), 0)) AS d
    FROM (SELECT tenant, priority AS level FROM avail
          UNION ALL
          SELECT tenant, level FROM held_levels) AS t
    LEFT JOIN (SELECT tenant, count(*) AS n FROM avail GROUP BY tenant) AS a USING (tenant)
    LEFT JOIN held_counts AS hc USING (tenant)
    LEFT JOIN fair_share_weights AS w USING (tenant)
    GROUP BY t.tenant
),
levels AS (
    SELECT l.level,
           greatest(0, cap.c - coalesce(sum(l.d) OVER (ORDER BY l.level ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)) AS c
    FROM (SELECT level, sum(d) AS d FROM tenants GROUP BY level) AS l, cap
),
filling AS (
    SELECT t.*,
           bool_and(t.d::numeric * t.rest_w <= t.weight::numeric * (t.c - t.before_d))
               OVER (PARTITION BY t.level ORDER BY t.d::float8 / t.weight, t.tenant COLLATE "C" ROWS UNBOUNDED PRECEDING) AS sat
    FROM (SELECT t.*, l.c,
                 coalesce(sum(t.d) OVER (PARTITION BY t.level ORDER BY t.d::float8 / t.weight, t.tenant COLLATE "C"
                                         ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS before_d,
                 sum(t.weight) OVER (PARTITION BY t.level ORDER BY t.d::float8 / t.weight, t.tenant COLLATE "C"
                                     ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING) AS rest_w
          FROM tenants AS t JOIN levels AS l USING (level)) AS t
),
windows AS (
    SELECT f.tenant, f.n,
           CASE WHEN NOT $3::bool THEN ` + itoa(unlimited) + `
                WHEN NOT EXISTS (SELECT 1 FROM held_levels) AND (SELECT count(*) FROM tenants) = 1 THEN ` + itoa(unlimited) + `
                WHEN f.sat THEN f.d::int
                ELSE greatest(1, ceil(greatest(0, f.c - coalesce(sum(f.d) FILTER (WHERE f.sat) OVER (PARTITION BY f.level), 0))::numeric
                                      * f.weight / sum(f.weight) FILTER (WHERE NOT f.sat) OVER (PARTITION BY f.level)))::int END AS w
    FROM filling AS f
),
ranked AS (
    SELECT a.id, a.tenant, a.priority, a.scheduled_at, a.marked, a.holdable, a.rank > w.w AND a.holdable AS over
    FROM avail AS a JOIN windows AS w USING (tenant)
),
busy AS (
    SELECT DISTINCT ` + tenantSQL("j") + ` AS tenant
    FROM ` + riverschema.JobTable + ` AS j
    WHERE j.state = '` + riverschema.StateRunning + `' AND j.queue = $1 AND (SELECT ok FROM lock)
),
newcomers AS (
    SELECT r.priority, max(r.scheduled_at) AS at
    FROM ranked AS r
    WHERE $3::bool AND NOT r.over AND r.tenant NOT IN (SELECT tenant FROM busy)
    GROUP BY r.priority
),
yield AS (
    SELECT r.id,
           least(now(), n.at + row_number() OVER (PARTITION BY r.priority ORDER BY r.scheduled_at, r.id) * interval '1 microsecond') AS back
    FROM ranked AS r JOIN newcomers AS n USING (priority)
    WHERE NOT r.over AND NOT r.marked AND r.holdable
      AND r.tenant IN (SELECT tenant FROM busy)
      AND r.scheduled_at < n.at
),
yielding AS (
    SELECT j.id
    FROM ` + riverschema.JobTable + ` AS j
    WHERE j.id = ANY(ARRAY(SELECT id FROM yield))
      AND ` + stillAvailableSQL("j") + `
    FOR UPDATE SKIP LOCKED
),
yielded AS (
    UPDATE ` + riverschema.JobTable + ` AS j
    SET scheduled_at = y.back,
        metadata = j.metadata || jsonb_build_object(
            ` + jobmetasql.KeptDueSQL(jobmetasql.DueAtSQL("j"), `y.back`) + `)
    FROM yield AS y
    WHERE j.id = y.id AND j.id = ANY(ARRAY(SELECT id FROM yielding)) AND ` + stillAvailableSQL("j") + `
    RETURNING j.id
),
excess AS (
    SELECT j.id
    FROM ` + riverschema.JobTable + ` AS j
    WHERE j.id = ANY(ARRAY(SELECT id FROM ranked WHERE over))
      AND ` + stillAvailableSQL("j") + `
    FOR UPDATE SKIP LOCKED
),
clearing AS (
    SELECT j.id
    FROM ` + riverschema.JobTable + ` AS j
    WHERE j.id = ANY(ARRAY(SELECT id FROM ranked WHERE marked AND NOT over))
      AND ` + stillAvailableSQL("j") + `
    FOR UPDATE SKIP LOCKED
),
cleared AS (
    UPDATE ` + riverschema.JobTable + ` AS j
    SET metadata = j.metadata - '` + jobmeta.HeldAt + `'
    WHERE j.id = ANY(ARRAY(SELECT id FROM clearing)) AND ` + stillAvailableSQL("j") + `
    RETURNING j.id
),
pushed AS (
    UPDATE ` + riverschema.JobTable + ` AS j
    SET state = '` + riverschema.StatePending + `',
        metadata = j.metadata || jsonb_build_object('` + jobmeta.HeldAt + `', now())
    WHERE j.id = ANY(ARRAY(SELECT id FROM excess)) AND ` + stillAvailableSQL("j") + `
    RETURNING j.id
),
admit AS (
    SELECT x.id, w.tenant, x.priority, x.scheduled_at, x.due
    FROM windows AS w
    CROSS JOIN LATERAL (
        SELECT j.id, j.priority, j.scheduled_at, ` + jobmetasql.DueAtSQL("j") + ` AS due
        FROM ` + riverschema.JobTable + ` AS j
        WHERE ` + jobmetasql.HeldSQL("j") + ` AND j.queue = $1 AND ` + tenantSQL("j") + ` = w.tenant AND ` + fetchableSQL("j") + `
        ORDER BY j.priority, j.scheduled_at, j.id
        LIMIT greatest(0, least(w.w - w.n, coalesce((SELECT r.room FROM room AS r WHERE r.tenant = w.tenant), ` + itoa(unlimited) + `)))
        FOR UPDATE SKIP LOCKED
    ) AS x
),
starts AS (
    SELECT ` + tenantSQL("j") + ` AS tenant, j.attempted_at, j.scheduled_at,
           row_number() OVER (PARTITION BY ` + tenantSQL("j") + ` ORDER BY j.attempted_at DESC, j.scheduled_at DESC, j.id DESC) AS rn
    FROM ` + riverschema.JobTable + ` AS j
    WHERE j.state = '` + riverschema.StateRunning + `' AND j.queue = $1 AND j.attempted_at IS NOT NULL
      AND EXISTS (SELECT 1 FROM admit)
),
places AS (
    SELECT a.id, a.due, s.attempted_at AS freed_at, s.scheduled_at AS was_at
    FROM (SELECT a.id, a.tenant, a.due,
                 row_number() OVER (PARTITION BY a.tenant ORDER BY a.priority, a.scheduled_at, a.id) AS turn,
                 count(*) OVER (PARTITION BY a.tenant) AS k
          FROM admit AS a) AS a
    LEFT JOIN starts AS s ON s.tenant = a.tenant AND s.rn = a.k - a.turn + 1
),
turns AS (
    SELECT p.id,
           row_number() OVER (ORDER BY coalesce(p.freed_at, now()), p.was_at, p.due, p.id) AS pos,
           count(*) OVER () AS total
    FROM places AS p
),
admitted AS (
    UPDATE ` + riverschema.JobTable + ` AS j
    SET state = '` + riverschema.StateAvailable + `',
        scheduled_at = ` + admittedAtSQL + `,
        metadata = (j.metadata - '` + jobmeta.HeldAt + `' - '` + jobmeta.CapHeldAt + `' - '` + jobmeta.RateHeldAt + `') || jsonb_build_object(
            ` + jobmetasql.KeptDueSQL(jobmetasql.DueAtSQL("j"), admittedAtSQL) + `)
    FROM turns AS t
    WHERE j.id = t.id AND j.id = ANY(ARRAY(SELECT id FROM turns))
    RETURNING j.id, j.state
),
admitted_available AS (
    SELECT id FROM admitted WHERE state = '` + riverschema.StateAvailable + `'
),
` + notifiedCTE("admitted_available") + `
SELECT coalesce((SELECT ok FROM lock), false),
       (SELECT count(*) FROM pushed)::int,
       (SELECT count(*) FROM admitted_available)::int,
       (SELECT count(*) FROM tenants)::int,
       (SELECT count(*) FROM held_all)::int,
       (SELECT c FROM cap),
       (SELECT count(*) FROM notified)::int,
       (SELECT CASE WHEN count(*) = 1 THEN min(tenant) END FROM tenants),
       ` + watermarkSQL + `,
       (SELECT count(*) FROM yielded)::int,
       (SELECT count(*) FROM room WHERE cap_room = 0)::int,
       (SELECT count(*) FROM room WHERE rate_room = 0 AND cap_room > 0)::int,
       (SELECT min(rate_wait) FROM room),
       (SELECT count(*) FROM held_levels AS h JOIN windows AS w USING (tenant)
        WHERE greatest(0, w.w - w.n) < coalesce((SELECT r.room FROM room AS r WHERE r.tenant = h.tenant), ` + itoa(unlimited) + `))::int,
       (SELECT count(*) FROM admitted WHERE state <> '` + riverschema.StateAvailable + `')::int`

// watermarkSQL is the database's clock as a look's watermark sees it: now,
// or the start of the oldest transaction of another session of the
// database that has written and not yet ended, when that is earlier, but
// never more than maxWatermarkLag back. A job's scheduled_at is its
// insert's time, from its transaction's start (or the producer's clock just
// before), while it becomes visible only when the transaction commits: a
// look whose watermark passed a batch insert's start never saw the batch's
// jobs. So a producer's InsertMany of thousands of jobs, which takes
// seconds, left a newcomer among them unseen until the next tick's check
// (up to 10 s), while a lone tenant's flood ran first in first out (tierctl
// bench traffic: the small tenants' p99 position went to 3 to 40 times its
// bound in about half the runs; TestALookSeesALateCommit). Without the
// rights to see other roles' sessions in pg_stat_activity (their
// xact_start reads NULL), the look falls back to now, as before.
const watermarkSQL = `greatest(now() - interval '` + maxWatermarkLag + `',
       least(now(), coalesce((SELECT min(a.xact_start) FROM pg_stat_activity AS a
                              WHERE a.datname = current_database() AND a.backend_xid IS NOT NULL
                                AND a.pid <> pg_backend_pid()), now())))`

// maxWatermarkLag bounds how far a long writing transaction holds the
// watermark back (each look reads the jobs made available since): what
// commits later than that is the tick's check's to find.
const maxWatermarkLag = "10 seconds"

// loneCheckSQL is the cheap look a process takes at a queue whose last
// pass found one tenant alone ($3; NULL: none, the queue was empty) and
// nothing held, instead of a pass: whether anything is held now, and
// whether a job of another tenant became available after $2 (through
// River's fetching index: the jobs inserted since, not the backlog). When
// the queue was empty, the first new job's tenant is the one alone (the
// fourth column), and only a job of a second tenant is a newcomer: without
// that, the first jobs into an empty queue sent every process to a pass
// (and, with many replicas, to the pass's lock, missed by all but one). A
// job made available with an older scheduled_at (a retry River's scheduler
// promotes late) is missed here and found by the next full pass
// (Config.Tick).
var loneCheckSQL = `
SELECT ` + watermarkSQL + `,
       EXISTS (SELECT 1 FROM ` + riverschema.JobTable + ` AS j WHERE ` + jobmetasql.HeldSQL("j") + ` AND j.queue = $1 AND ($5::bool OR j.kind = ANY($4::text[]))),
       EXISTS (SELECT 1 FROM ` + riverschema.JobTable + ` AS j
               WHERE ` + freshSQL("j") + ` AND ` + tenantSQL("j") + ` IS DISTINCT FROM ` + loneSQL + `),
       ` + loneSQL

// checkSQL is what a tick's full look takes at a queue ($1) whose last pass
// found one tenant alone ($2; NULL: none, the queue was empty) and nothing
// held, or whose fair share is off ($3 false), instead of a pass: whether
// anything is held, and whether an available job (not lent) would make a
// pass act: one still marked held (made available by someone else), or,
// with fair share on, one of another tenant, whenever and however it
// became available (a look sees only the jobs made available since the
// last). It reads every available job of the queue, and stops at the first
// it finds: a backlog of one tenant costs a scan (16.5 ms for 50,000 jobs on
// the development machine), where a pass ranks all of it (158 ms;
// BenchmarkLoneBacklog).
var checkSQL = `
SELECT ` + watermarkSQL + `,
       EXISTS (SELECT 1 FROM ` + riverschema.JobTable + ` AS j WHERE ` + jobmetasql.HeldSQL("j") + ` AND j.queue = $1 AND ($5::bool OR j.kind = ANY($4::text[]))),
       EXISTS (SELECT 1 FROM ` + riverschema.JobTable + ` AS j
               WHERE j.state = '` + riverschema.StateAvailable + `' AND j.queue = $1 AND NOT j.metadata ? '` + jobmeta.LentFrom + `'
                 AND ` + localFetchableSQL("j", "$4", "$5") + `
                 AND (j.metadata ? '` + jobmeta.HeldAt + `' OR ($3::bool AND ` + tenantSQL("j") + ` IS DISTINCT FROM $2::text)))`

// freshSQL is an SQL condition: the river_job row aliased alias is an
// available job of queue $1 made available after $2 (a lone check's
// watermark), not lent to it, at one of tierq's priorities (River's
// fetching index), and fetchable now by this process ($4 its kinds, $5
// every kind): a retry River wrote a few seconds ahead is found once it is
// due (its scheduled_at is then after the watermark), not every look until
// then.
func freshSQL(alias string) string {
	return alias + `.state = '` + riverschema.StateAvailable + `' AND ` + alias + `.queue = $1 AND ` + alias + `.priority = ANY('{1,2,3,4}'::smallint[])
                 AND ` + alias + `.scheduled_at > $2 AND NOT ` + alias + `.metadata ? '` + jobmeta.LentFrom + `'
                 AND ` + localFetchableSQL(alias, "$4", "$5")
}

// loneSQL is the tenant alone of a lone check: $3, or when the queue was
// empty ($3 NULL) the tenant of any job made available since.
var loneSQL = `coalesce($3::text, (SELECT ` + tenantSQL("f") + ` FROM ` + riverschema.JobTable + ` AS f WHERE ` + freshSQL("f") + ` LIMIT 1))`

// releaseSQL makes available again, up to 1,000 at a time, the held jobs
// of queue $1 of a kind no worker of the queue fetches (knownCTE, $2 and
// $3 this process's kinds): jobs held before they became unfetchable (a
// release without their kind's worker), or written held. A pass neither
// counts nor admits them (they would fill their tenant's window, or with a
// better priority take every other tenant's places, for work no worker
// takes); made available, they wait for a worker of their kind in plain
// sight, counted by tierq_unfetchable_jobs. It reads every held job of the
// queue (their kinds are not in river_job_tierq_held_idx), and so runs
// once every fullPassTicks Ticks, not with each pass; when every kind is
// fetched it reads nothing.
var releaseSQL = `
WITH ` + knownCTE("$2", "$3") + `,
stray AS (
    SELECT j.id
    FROM ` + riverschema.JobTable + ` AS j
    WHERE ` + jobmetasql.HeldSQL("j") + ` AND j.queue = $1 AND NOT ` + knownKindSQL("j") + `
    LIMIT 1000
    FOR UPDATE SKIP LOCKED
),
released AS (
    UPDATE ` + riverschema.JobTable + ` AS j
    SET state = '` + riverschema.StateAvailable + `',
        metadata = j.metadata - '` + jobmeta.HeldAt + `'
    WHERE j.id = ANY(ARRAY(SELECT id FROM stray)) AND ` + jobmetasql.HeldSQL("j") + `
    RETURNING j.id
)
SELECT count(*)::int FROM released`

// lockSQL tries the transaction-level advisory lock of a pass ($1: what it
// passes over), so that one process at a time passes over a queue. It is a
// statement of its own, before the pass: a READ COMMITTED statement sees
// what was committed when it started, so a pass that took the lock in its
// own statement could miss what the previous holder committed just before
// releasing it, and lend, or admit, twice.
const lockSQL = `SELECT pg_try_advisory_xact_lock(hashtext('tierq_fair_share'), hashtext(current_schema() || '.' || $1))`

// heartbeatSQL records this process's workers per queue ($1 client id, $2
// queue names, $3 their worker counts, $4 the lease in seconds, $5 the kinds
// its workers fetch there, each a JSON array of strings, or JSON null for
// every kind) and deletes expired rows of any process, so a crashed
// process's slots and kinds stop counting when its lease runs out and its
// rows do not pile up.
const heartbeatSQL = `
WITH beat AS (
    INSERT INTO fair_share_slots (client_id, queue, slots, heartbeat_at, expires_at, kinds, turns)
    SELECT $1, q.queue, q.slots, now(), now() + make_interval(secs => $4::float8),
           CASE WHEN jsonb_typeof(q.kinds::jsonb) = 'array'
                THEN ARRAY(SELECT jsonb_array_elements_text(q.kinds::jsonb)) END, q.turns
    FROM unnest($2::text[], $3::int[], $5::text[], $6::bool[]) AS q(queue, slots, kinds, turns)
    ON CONFLICT (client_id, queue) DO UPDATE
        SET slots = excluded.slots, heartbeat_at = excluded.heartbeat_at, expires_at = excluded.expires_at,
            kinds = excluded.kinds, turns = excluded.turns
    RETURNING 1
)
DELETE FROM fair_share_slots WHERE expires_at < now() - interval '1 minute' AND (SELECT count(*) FROM beat) >= 0`

// leaveSQL deletes this process's heartbeat rows ($1 client id) when it
// stops, so its slots stop counting at once.
const leaveSQL = `DELETE FROM fair_share_slots WHERE client_id = $1`

// lendSQL is one lending pass of a service's priority queue ($1), which
// borrows the free jobs of its default queue ($2), in one statement:
//
//   - lock: nothing is done when either queue is paused in River. (The
//     pass runs holding lockSQL's lock on "lend:" and the priority queue.)
//   - cap: the priority queue's capacity (as passSQL; at least $3).
//   - known: the kinds the priority queue's workers fetch (knownCTE; $7,
//     $8 this process's own).
//   - paid: whether paid work waits in the priority queue: an available job
//     that is not lent and that River would fetch now (fetchableSQL), or a
//     held one of a known kind. A job no worker of the queue fetches, or a
//     retry not due yet, is not paid work waiting: counted, one misrouted
//     row stopped lending for good.
//   - occupied: the priority queue's fetchable available and running jobs,
//     all and lent, except the jobs in $5: the ones this process has finished whose
//     completion River has not written yet (it batches them, up to 250ms),
//     so that a slot this process freed counts as free at once. Another
//     process's finished jobs still count as running until River writes
//     them: the bound errs on the safe side.
//   - budget: 0 while paid work waits; else the free slots, but never more
//     lent jobs than capacity minus the floor ($4).
//   - lent: that many of the default queue's available jobs that the
//     priority queue's workers would fetch now (due, of a kind they run:
//     a lent job no worker takes would hold a lending slot for good),
//     first in its fetch order, move to the priority queue at the lowest priority ($6)
//     and the back of its line (scheduled_at now()): behind every paid job
//     already waiting. jobmeta.LentFrom and LentPriority record where they
//     came from; their due time is kept (jobmeta.DueAt and MovedAt).
//   - returned: while paid work waits, lent jobs not yet started go back
//     to the default queue at their own priority, keeping their place
//     (scheduled_at unchanged); so does, at any time, a lent job of a kind
//     the priority queue's workers no longer fetch.
//   - notified: River's insert notification for the priority queue when
//     anything was lent.
var lendSQL = `
WITH lock AS (
    SELECT true AS ok WHERE NOT ` + db.PausedSQL("$1") + ` AND NOT ` + db.PausedSQL("$2") + `
),
` + capCTE("$3") + `,
` + knownCTE("$7", "$8") + `,
paid AS (
    SELECT EXISTS (SELECT 1 FROM ` + riverschema.JobTable + ` AS j
                   WHERE j.state = '` + riverschema.StateAvailable + `' AND j.queue = $1 AND NOT j.metadata ? '` + jobmeta.LentFrom + `'
                     AND ` + fetchableSQL("j") + `)
        OR EXISTS (SELECT 1 FROM ` + riverschema.JobTable + ` AS j WHERE ` + jobmetasql.HeldSQL("j") + ` AND j.queue = $1 AND ` + knownKindSQL("j") + `) AS waiting
    WHERE (SELECT ok FROM lock)
),
occupied AS (
    SELECT count(*) FILTER (WHERE j.metadata ? '` + jobmeta.LentFrom + `') AS lent, count(*) AS total
    FROM ` + riverschema.JobTable + ` AS j
    WHERE j.queue = $1 AND ((j.state = '` + riverschema.StateAvailable + `' AND ` + fetchableSQL("j") + `) OR (j.state = '` + riverschema.StateRunning + `' AND NOT j.id = ANY($5::bigint[])))
      AND (SELECT ok FROM lock)
),
budget AS (
    SELECT CASE WHEN coalesce((SELECT waiting FROM paid), true) THEN 0
                ELSE greatest(0, least(cap.c - $4::int - o.lent, cap.c - o.total)) END AS n
    FROM cap, occupied AS o
),
candidates AS (
    SELECT j.id
    FROM ` + riverschema.JobTable + ` AS j
    WHERE j.state = '` + riverschema.StateAvailable + `' AND j.queue = $2 AND jsonb_typeof(j.metadata) = 'object' AND ` + fetchableSQL("j") + `
    ORDER BY j.priority, j.scheduled_at, j.id
    LIMIT (SELECT n FROM budget)
    FOR UPDATE SKIP LOCKED
),
lent AS (
    UPDATE ` + riverschema.JobTable + ` AS j
    SET queue = $1,
        priority = $6,
        scheduled_at = now(),
        metadata = j.metadata || jsonb_build_object(
            '` + jobmeta.LentFrom + `', $2::text,
            '` + jobmeta.LentPriority + `', j.priority,
            ` + jobmetasql.KeptDueSQL(jobmetasql.DueAtSQL("j"), `now()`) + `)
    FROM candidates
    WHERE j.id = candidates.id AND j.id = ANY(ARRAY(SELECT id FROM candidates))
    RETURNING j.id
),
homeward AS (
    SELECT j.id
    FROM ` + riverschema.JobTable + ` AS j
    WHERE j.state = '` + riverschema.StateAvailable + `' AND j.queue = $1 AND j.metadata->>'` + jobmeta.LentFrom + `' = $2
      AND (coalesce((SELECT waiting FROM paid), false) OR NOT ` + knownKindSQL("j") + `)
    FOR UPDATE SKIP LOCKED
),
returned AS (
    UPDATE ` + riverschema.JobTable + ` AS j
    SET queue = $2,
        priority = CASE WHEN j.metadata->>'` + jobmeta.LentPriority + `' ~ '^[1-4]$'
                        THEN (j.metadata->>'` + jobmeta.LentPriority + `')::smallint ELSE j.priority END,
        metadata = j.metadata - '` + jobmeta.LentFrom + `' - '` + jobmeta.LentPriority + `'
    FROM homeward
    WHERE j.id = homeward.id AND j.id = ANY(ARRAY(SELECT id FROM homeward))
    RETURNING j.id
),
` + notifiedCTE("lent") + `
SELECT coalesce((SELECT ok FROM lock), false),
       (SELECT count(*) FROM lent)::int,
       (SELECT count(*) FROM returned)::int,
       coalesce((SELECT waiting FROM paid), false),
       (SELECT count(*) FROM notified)::int`
