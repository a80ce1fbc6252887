-- Per-tenant rate limits, enforced by the database (issue 33; package
-- limits, docs/fairness.md "Rate limits").
--
-- A rate (tier_limits.rate_count per rate_interval, tenant_limits' override:
-- migration 00012) is how many jobs of one tenant of a service may start per
-- interval across the service's three queues: a token bucket whose burst is
-- the count. It is measured where tierq can measure it, when a job becomes
-- available (River's fetch starts available jobs and nothing can refuse
-- that), with one rule that ties the start to it: a rate-limited tenant has
-- at most one job available and not started yet. So the starts in any
-- interval are at most the tokens taken in it plus the one job admitted
-- before it: within one of the limit once the bucket's burst is spent.
--
-- tierq_tenant_rate(), BEFORE INSERT OR UPDATE OF state ON river_job, for a
-- row becoming available whose metadata has a tenant; it runs after
-- tierq_tenant_cap (migration 00013; triggers of one event run in name
-- order), and only while that one left the row available:
--
--   1. Reads the rate that applies: the service whose queues hold the row's
--      queue, the tenant's override (tenant_limits.rate_count: NULL
--      inherits, 0 is no rate), else the default of the row's tier. No
--      service, or no rate: the row is left as it is. With no rate
--      anywhere (the default) this is one probe of two small tables.
--   2. A row that was available already (an UPDATE that leaves it there: a
--      lent job going back) was charged when it became available: left as
--      it is.
--   3. Tries the same transaction-level advisory lock as the cap trigger
--      (re-entrant: a row that passed the cap holds it already), without
--      waiting; no lock: held (step 5).
--   4. Looks for another available job of the tenant counted against its
--      limits (tierq:capped) in the service's queues, through
--      river_job_tierq_capped_idx, that a worker can fetch: a live
--      heartbeat of its queue (fair_share_slots, with kinds: migration
--      00009) has workers for its kind. A job in a queue no live worker
--      serves, or of a kind none fetches, would never start and does not
--      count (it took its token: the bucket still bounds admissions). One
--      found: held. Otherwise takes a token from
--      the tenant's bucket (tenant_rate_buckets: the tokens left at the time
--      at, refilled at count per interval up to count, from the statement's
--      clock, clock_timestamp(), never backwards): the row is marked
--      tierq:capped (the service) and tierq:rated, and goes on. No token:
--      held.
--   5. Held: River state pending with tierq:held_at and tierq:rate_held_at
--      (held by a rate), tierq:capped. Fair share's pass admits it when the
--      tenant has a token and no job waiting to start (package fairshare),
--      waking when the next token is due and when a rated job starts.
--
-- A new bucket is full (count tokens). Buckets are keyed by the tenant key
-- of fair share and the cap (at most 200 bytes plus an md5 for longer ids).
-- A bucket whose tenant has been idle for longer than its interval is full
-- again, and its row is only rewritten at the next charge; rows of tenants
-- that no longer exist are small and left (one per tenant ever limited).

-- +goose Up
CREATE TABLE IF NOT EXISTS tenant_rate_buckets (
    service text             NOT NULL,
    tenant  text             NOT NULL,
    tokens  double precision NOT NULL CHECK (tokens >= 0),
    at      timestamptz      NOT NULL,
    PRIMARY KEY (service, tenant)
) WITH (fillfactor = 70);

CREATE INDEX IF NOT EXISTS tenant_limits_rated_idx ON tenant_limits (service, tenant) WHERE rate_count > 0;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION tierq_tenant_rate() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_tenant text;
    v_tier   text;
    svc      text;
    svc_q    text[];
    r_count  integer;
    r_per    interval;
    tkey     text;
    b_tokens double precision;
    b_at     timestamptz;
    t        timestamptz;
BEGIN
    PERFORM FROM (SELECT FROM tier_limits WHERE rate_count > 0
                  UNION ALL SELECT FROM tenant_limits WHERE rate_count > 0) AS r LIMIT 1;
    IF NOT FOUND THEN
        RETURN NEW; -- no rate anywhere: the default
    END IF;
    IF TG_OP = 'UPDATE' AND OLD.state = 'available' THEN
        RETURN NEW; -- charged when it became available
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
    SELECT CASE WHEN o.rate_count IS NOT NULL THEN o.rate_count ELSE coalesce(l.rate_count, 0) END,
           CASE WHEN o.rate_count IS NOT NULL THEN o.rate_interval ELSE l.rate_interval END
      INTO r_count, r_per
      FROM (SELECT 1) AS one
      LEFT JOIN tier_limits AS l ON l.service = svc AND l.tier = v_tier
      LEFT JOIN tenant_limits AS o ON o.service = svc AND o.tenant = v_tenant;
    IF coalesce(r_count, 0) = 0 OR r_per IS NULL THEN
        RETURN NEW;
    END IF;

    IF pg_try_advisory_xact_lock(hashtext('tierq_tenant_cap'), hashtext(current_schema() || '.' || svc || '/' || v_tenant)) THEN
        tkey := CASE WHEN octet_length(v_tenant) <= 200 THEN v_tenant
                     ELSE left(v_tenant, 200) || '#md5:' || md5(v_tenant) END;
        PERFORM 1 FROM river_job AS j
         WHERE j.state = 'available' AND j.metadata ? 'tierq:capped'
           AND (CASE WHEN octet_length(coalesce(j.metadata->>'tierq:tenant', '')) <= 200
                     THEN coalesce(j.metadata->>'tierq:tenant', '')
                     ELSE left(j.metadata->>'tierq:tenant', 200) || '#md5:' || md5(j.metadata->>'tierq:tenant') END) = tkey
           AND j.queue = ANY (svc_q) AND j.id <> NEW.id
           AND EXISTS (SELECT 1 FROM fair_share_slots AS s
                        WHERE s.queue = j.queue AND s.expires_at > now() AND s.slots > 0
                          AND (s.kinds IS NULL OR j.kind = ANY (s.kinds)))
         LIMIT 1;
        IF NOT FOUND THEN
            t := clock_timestamp();
            SELECT b.tokens, b.at INTO b_tokens, b_at FROM tenant_rate_buckets AS b WHERE b.service = svc AND b.tenant = tkey;
            IF NOT FOUND THEN
                b_tokens := r_count;
                b_at := t;
            END IF;
            b_tokens := least(r_count::double precision,
                              b_tokens + r_count * greatest(0, extract(epoch FROM t - b_at)) / extract(epoch FROM r_per));
            IF b_tokens >= 1 THEN
                INSERT INTO tenant_rate_buckets AS b (service, tenant, tokens, at)
                VALUES (svc, tkey, b_tokens - 1, greatest(t, b_at))
                ON CONFLICT (service, tenant) DO UPDATE SET tokens = excluded.tokens, at = excluded.at;
                NEW.metadata := (NEW.metadata - 'tierq:held_at' - 'tierq:rate_held_at')
                                || jsonb_build_object('tierq:capped', svc, 'tierq:rated', svc);
                RETURN NEW;
            END IF;
        END IF;
    END IF;

    NEW.state := 'pending';
    NEW.metadata := NEW.metadata || jsonb_build_object('tierq:held_at', now(), 'tierq:rate_held_at', now(),
                                                       'tierq:capped', svc, 'tierq:rated', svc);
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION tierq_tenant_rate() SET search_path = %I, pg_catalog', current_schema());
END
$$;
-- +goose StatementEnd

DROP TRIGGER IF EXISTS tierq_tenant_rate ON river_job;
CREATE TRIGGER tierq_tenant_rate
    BEFORE INSERT OR UPDATE OF state ON river_job
    FOR EACH ROW
    WHEN (NEW.state = 'available' AND NEW.metadata ? 'tierq:tenant')
    EXECUTE FUNCTION tierq_tenant_rate();

-- +goose Down
DROP TRIGGER IF EXISTS tierq_tenant_rate ON river_job;
DROP FUNCTION IF EXISTS tierq_tenant_rate();
DROP INDEX IF EXISTS tenant_limits_rated_idx;
DROP TABLE IF EXISTS tenant_rate_buckets;
