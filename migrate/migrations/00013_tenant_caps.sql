-- Per-tenant concurrency caps, enforced by the database (issue 33; package
-- limits, docs/fairness.md "Limits").
--
-- A cap (tier_limits.max_running, tenant_limits.max_running: migration
-- 00012) is the most jobs of one tenant of a service that are running or
-- available at once across the service's three queues (tierq_services.queues,
-- migration 00011). The invariant is kept here, by a trigger, not by the
-- timing of any process: every path by which a job becomes available (an
-- insert, River's retries, snoozes, scheduler and rescuer, River UI's
-- retry, fair share's admission, an operator's UPDATE) goes through it.
--
-- tierq_tenant_cap(), BEFORE INSERT OR UPDATE OF state ON river_job, for a
-- row becoming (or staying) available whose metadata has a tenant:
--
--   1. Reads the cap that applies: the service whose queues hold the row's
--      queue, the tenant's override (tenant_limits), else the default of the
--      row's tier (tier_limits; a tier that is not one of the four reads as
--      free). No service, or no cap (0): the row is left as it is. This is
--      all the work an uncapped job costs: one query of three small lookups.
--   2. Tries the transaction-level advisory lock of the service and tenant,
--      without waiting: racing transactions never both pass the count, and
--      River's completer, scheduler and fair share's passes never wait for a
--      producer's transaction. A row that cannot take the lock at once is
--      held (step 4): holding never exceeds a cap, and the next pass admits
--      it when there is room.
--   3. Counts the tenant's other jobs counted against caps (marked
--      tierq:capped) that are available or running in the service's
--      queues, through river_job_tierq_capped_idx, up to the cap, less the
--      jobs fair share's pass says its process has finished and River has
--      not written yet (the setting tierq.finished_jobs, a comma-separated
--      list of job ids, set by the pass in its own transaction; only while
--      they are still running: one River wrote available again counts). Below the
--      cap: the row is marked tierq:capped (the service) and goes on.
--   4. At the cap (or without the lock): the row is held as fair share holds
--      jobs, River state pending with tierq:held_at, plus tierq:cap_held_at
--      (held by a cap, not by a window) and tierq:capped. Fair share's pass
--      admits it when the tenant has room (package fairshare).
--
-- A row whose metadata is not a JSON object is left as it is (nowhere to
-- mark it), as fair share leaves it.
--
-- Jobs that were available or running before their tenant's cap was set
-- carry no mark and are not counted until they finish (or become available
-- again, through the trigger).
--
-- river_job_tierq_capped_idx serves the count: only the available and
-- running rows of capped tenants enter it, so uncapped traffic does not pay
-- for it. Its tenant key is fair share's bounded key (migration 00009).
--
-- The function's search_path is pinned to the schema it is created in, so
-- that any session that updates river_job (River UI, psql, another
-- schema's search_path) finds tierq's tables.

-- +goose Up
CREATE INDEX IF NOT EXISTS river_job_tierq_capped_idx
    ON river_job ((CASE WHEN octet_length(coalesce(metadata->>'tierq:tenant', '')) <= 200
                        THEN coalesce(metadata->>'tierq:tenant', '')
                        ELSE left(metadata->>'tierq:tenant', 200) || '#md5:' || md5(metadata->>'tierq:tenant') END),
                  queue)
    WHERE state IN ('available', 'running') AND metadata ? 'tierq:capped';

CREATE INDEX IF NOT EXISTS tenant_limits_capped_idx ON tenant_limits (service, tenant) WHERE max_running > 0;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION tierq_tenant_cap() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_tenant text;
    v_tier   text;
    svc      text;
    svc_q    text[];
    cap      integer;
    used     integer;
    tkey     text;
    finished bigint[];
BEGIN
    PERFORM FROM (SELECT FROM tier_limits WHERE max_running > 0
                  UNION ALL SELECT FROM tenant_limits WHERE max_running > 0) AS c LIMIT 1;
    IF NOT FOUND THEN
        RETURN NEW; -- no cap anywhere: the default
    END IF;
    v_tenant := NEW.metadata->>'tierq:tenant';
    v_tier := NEW.metadata->>'tierq:tier';
    IF jsonb_typeof(NEW.metadata) <> 'object' OR v_tenant IS NULL OR v_tenant = '' THEN
        RETURN NEW;
    END IF;
    IF v_tier IS NULL OR v_tier NOT IN ('free', 'pro', 'pro_plus', 'enterprise') THEN
        v_tier := 'free';
    END IF;
    SELECT s.name, s.queues INTO svc, svc_q FROM tierq_services AS s WHERE NEW.queue = ANY (s.queues) LIMIT 1;
    IF svc IS NULL THEN
        RETURN NEW;
    END IF;
    cap := coalesce((SELECT o.max_running FROM tenant_limits AS o WHERE o.service = svc AND o.tenant = v_tenant),
                    (SELECT l.max_running FROM tier_limits AS l WHERE l.service = svc AND l.tier = v_tier), 0);
    IF cap = 0 THEN
        RETURN NEW;
    END IF;

    IF pg_try_advisory_xact_lock(hashtext('tierq_tenant_cap'), hashtext(current_schema() || '.' || svc || '/' || v_tenant)) THEN
        tkey := CASE WHEN octet_length(v_tenant) <= 200 THEN v_tenant
                     ELSE left(v_tenant, 200) || '#md5:' || md5(v_tenant) END;
        finished := coalesce(string_to_array(nullif(current_setting('tierq.finished_jobs', true), ''), ',')::bigint[], '{}');
        SELECT count(*) INTO used FROM (
            SELECT 1 FROM river_job AS j
             WHERE j.state IN ('available', 'running') AND j.metadata ? 'tierq:capped'
               AND (CASE WHEN octet_length(coalesce(j.metadata->>'tierq:tenant', '')) <= 200
                         THEN coalesce(j.metadata->>'tierq:tenant', '')
                         ELSE left(j.metadata->>'tierq:tenant', 200) || '#md5:' || md5(j.metadata->>'tierq:tenant') END) = tkey
               AND j.queue = ANY (svc_q)
               AND j.id <> NEW.id AND NOT (j.state = 'running' AND j.id = ANY (finished))
             LIMIT cap) AS x;
        IF used < cap THEN
            NEW.metadata := (NEW.metadata - 'tierq:held_at' - 'tierq:cap_held_at') || jsonb_build_object('tierq:capped', svc);
            RETURN NEW;
        END IF;
    END IF;

    NEW.state := 'pending';
    NEW.metadata := NEW.metadata || jsonb_build_object('tierq:held_at', now(), 'tierq:cap_held_at', now(), 'tierq:capped', svc);
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION tierq_tenant_cap() SET search_path = %I, pg_catalog', current_schema());
END
$$;
-- +goose StatementEnd

DROP TRIGGER IF EXISTS tierq_tenant_cap ON river_job;
CREATE TRIGGER tierq_tenant_cap
    BEFORE INSERT OR UPDATE OF state ON river_job
    FOR EACH ROW
    WHEN (NEW.state = 'available' AND NEW.metadata ? 'tierq:tenant')
    EXECUTE FUNCTION tierq_tenant_cap();

-- +goose Down
DROP TRIGGER IF EXISTS tierq_tenant_cap ON river_job;
DROP FUNCTION IF EXISTS tierq_tenant_cap();
DROP INDEX IF EXISTS tenant_limits_capped_idx;
DROP INDEX IF EXISTS river_job_tierq_capped_idx;
