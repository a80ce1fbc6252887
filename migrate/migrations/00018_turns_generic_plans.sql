-- Fair share by turns (migration 00017): the trigger's and the tag's
-- look-ups planned once per connection, each through the index made for it.
--
-- Left to choose, PostgreSQL planned the trigger's and the tag function's
-- statements afresh for the first five calls on every connection (custom
-- plans) before it settled on one plan: in a quick tierctl bench traffic
-- run with turns, 280 plans each of the line's head and of the tenant's
-- last turn, 1 s of planning beside 1.2 s of running them (the server's
-- statement statistics). Both functions now plan once per connection
-- (plan_cache_mode).
--
-- That generic plan, on statistics taken before a backlog arrived (a
-- table analyzed while the service was quiet), read the tenant's last turn
-- through River's fetching index rather than river_job_tierq_turn_idx:
-- the planner takes available jobs for rare there, and both indexes give
-- the order. For a tenant with no job in the line it read the whole line
-- (5,000 rows, 2.5 ms, against 0.03 ms through the turn index; fairshare's
-- TestTurnLookupsPlanOnce). The look-up now writes its state condition as
-- `(state = 'available') IS TRUE`, which River's fetching index cannot
-- search by, and the index it reads, river_job_tierq_turn_last_idx, the
-- same as river_job_tierq_turn_idx but for that condition, replaces it.
-- The index is built in the migration's transaction, as 00017's (few rows
-- enter it; on a large table, build it beforehand with CREATE INDEX
-- CONCURRENTLY and this exact definition: IF NOT EXISTS then skips it).
-- Dropping the old index locks river_job against every access, River's
-- fetch included, until the migration commits: on a busy table, drop it
-- beforehand with DROP INDEX CONCURRENTLY (IF EXISTS then skips it).

-- +goose Up
CREATE INDEX IF NOT EXISTS river_job_tierq_turn_last_idx
    ON river_job (queue, priority,
                  (CASE WHEN octet_length(coalesce(metadata->>'tierq:tenant', '')) <= 200
                        THEN coalesce(metadata->>'tierq:tenant', '')
                        ELSE left(metadata->>'tierq:tenant', 200) || '#md5:' || md5(metadata->>'tierq:tenant') END),
                  scheduled_at)
    WHERE (state = 'available') IS TRUE AND (scheduled_at < created_at OR metadata ? 'tierq:moved_at');
DROP INDEX IF EXISTS river_job_tierq_turn_idx;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION tierq_turn_tag(p_queue text, p_priority smallint, p_tenant text, p_due timestamptz)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    head timestamptz;
    last timestamptz;
BEGIN
    SELECT j.scheduled_at INTO head FROM river_job AS j
     WHERE j.state = 'available' AND j.queue = p_queue AND j.priority = p_priority
       AND j.scheduled_at <= now() AND NOT j.metadata ? 'tierq:turn_due'
     ORDER BY j.scheduled_at LIMIT 1;
    IF head IS NULL THEN
        RETURN least(now() - interval '1 hour', p_due);
    END IF;
    SELECT j.scheduled_at INTO last FROM river_job AS j
     WHERE (j.state = 'available') IS TRUE AND j.queue = p_queue AND j.priority = p_priority
       AND (CASE WHEN octet_length(coalesce(j.metadata->>'tierq:tenant', '')) <= 200
                 THEN coalesce(j.metadata->>'tierq:tenant', '')
                 ELSE left(j.metadata->>'tierq:tenant', 200) || '#md5:' || md5(j.metadata->>'tierq:tenant') END) = p_tenant
       AND j.scheduled_at <= now() AND (j.scheduled_at < j.created_at OR j.metadata ? 'tierq:moved_at')
     ORDER BY j.scheduled_at DESC LIMIT 1;
    IF last IS NULL OR last < head THEN
        RETURN least(head, p_due);
    END IF;
    RETURN least(last + interval '1 millisecond' / coalesce((SELECT w.weight FROM fair_share_weights AS w WHERE w.tenant = p_tenant), 1), p_due);
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION tierq_turn_tag(text, smallint, text, timestamptz) SET search_path = %I, pg_catalog', current_schema());
END
$$;
-- +goose StatementEnd

ALTER FUNCTION tierq_tenant_turn() SET plan_cache_mode = force_generic_plan;

-- +goose Down
ALTER FUNCTION tierq_tenant_turn() RESET plan_cache_mode;

CREATE INDEX IF NOT EXISTS river_job_tierq_turn_idx
    ON river_job (queue, priority,
                  (CASE WHEN octet_length(coalesce(metadata->>'tierq:tenant', '')) <= 200
                        THEN coalesce(metadata->>'tierq:tenant', '')
                        ELSE left(metadata->>'tierq:tenant', 200) || '#md5:' || md5(metadata->>'tierq:tenant') END),
                  scheduled_at)
    WHERE state = 'available' AND (scheduled_at < created_at OR metadata ? 'tierq:moved_at');

-- 00017's tierq_turn_tag
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION tierq_turn_tag(p_queue text, p_priority smallint, p_tenant text, p_due timestamptz)
RETURNS timestamptz
LANGUAGE plpgsql STABLE AS $$
DECLARE
    head timestamptz;
    last timestamptz;
BEGIN
    SELECT j.scheduled_at INTO head FROM river_job AS j
     WHERE j.state = 'available' AND j.queue = p_queue AND j.priority = p_priority
       AND j.scheduled_at <= now() AND NOT j.metadata ? 'tierq:turn_due'
     ORDER BY j.scheduled_at LIMIT 1;
    IF head IS NULL THEN
        RETURN least(now() - interval '1 hour', p_due);
    END IF;
    SELECT j.scheduled_at INTO last FROM river_job AS j
     WHERE j.state = 'available' AND j.queue = p_queue AND j.priority = p_priority
       AND (CASE WHEN octet_length(coalesce(j.metadata->>'tierq:tenant', '')) <= 200
                 THEN coalesce(j.metadata->>'tierq:tenant', '')
                 ELSE left(j.metadata->>'tierq:tenant', 200) || '#md5:' || md5(j.metadata->>'tierq:tenant') END) = p_tenant
       AND j.scheduled_at <= now() AND (j.scheduled_at < j.created_at OR j.metadata ? 'tierq:moved_at')
     ORDER BY j.scheduled_at DESC LIMIT 1;
    IF last IS NULL OR last < head THEN
        RETURN least(head, p_due);
    END IF;
    RETURN least(last + interval '1 millisecond' / coalesce((SELECT w.weight FROM fair_share_weights AS w WHERE w.tenant = p_tenant), 1), p_due);
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION tierq_turn_tag(text, smallint, text, timestamptz) SET search_path = %I, pg_catalog', current_schema());
END
$$;
-- +goose StatementEnd

DROP INDEX IF EXISTS river_job_tierq_turn_last_idx;
