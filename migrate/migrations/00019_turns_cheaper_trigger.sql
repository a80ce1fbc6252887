-- Fair share by turns (migrations 00017, 00018): the turn trigger and the
-- tag function cost less per job.
--
-- Both functions set search_path for each call (SET search_path on the
-- function). PostgreSQL sets and restores the setting around every call,
-- and every cached plan the call runs checks the path again: in a loop of
-- 5,000 tag calls, 350 ms with the setting against 220 ms without it and
-- 165 ms with no setting at all (plan_cache_mode, kept: without it every
-- connection plans each look-up five times; migration 00018). The trigger
-- set it too, and called the tag function once per job made available: in
-- a 5,000-row insert with fair share by turns, about 1,000 ms against 780
-- ms now and about 300 ms without turns (psql's timing, medians of ten
-- runs each in two alternated rounds, on a machine's noisy shared cores). The functions now name
-- the schema's tables and functions themselves (written in at migration
-- time, as the search_path was), so a session whose search_path leads
-- elsewhere (River's Schema setting) still reads this schema's rows.
--
-- The tag function reads the tenant's last turn first and the line's head
-- only when the tenant has none waiting: a turn waiting in the line is
-- never before the head (the head look-up reads every row the last-turn
-- look-up does, now that it too skips rows marked tierq:turn_due), so the
-- tag is the same with one look-up for most jobs (a flood's). One tag
-- differs: a marked job that carries a kept move time (a job moved or
-- placed before, then retried or snoozed) and is due but not yet placed
-- was its tenant's last turn, so the tenant's next job went behind it, at
-- the back of the line; it is no turn now, as no other marked job is
-- (fairshare TestTurns/AMarkedJobDueButNotYetPlacedIsNoTurnOfItsTenant).
-- The trigger computes a job's due time only when it keeps it (a job
-- placed at its insert keeps none).

-- +goose Up
-- +goose StatementBegin
DO $migration$
BEGIN
    EXECUTE format($fn$
CREATE OR REPLACE FUNCTION %1$I.tierq_turn_tag(p_queue text, p_priority smallint, p_tenant text, p_due timestamptz)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    head timestamptz;
    last timestamptz;
BEGIN
    SELECT j.scheduled_at INTO last FROM %1$I.river_job AS j
     WHERE (j.state = 'available') IS TRUE AND j.queue = p_queue AND j.priority = p_priority
       AND (CASE WHEN octet_length(coalesce(j.metadata->>'tierq:tenant', '')) <= 200
                 THEN coalesce(j.metadata->>'tierq:tenant', '')
                 ELSE left(j.metadata->>'tierq:tenant', 200) || '#md5:' || md5(j.metadata->>'tierq:tenant') END) = p_tenant
       AND j.scheduled_at <= now() AND (j.scheduled_at < j.created_at OR j.metadata ? 'tierq:moved_at')
       AND NOT j.metadata ? 'tierq:turn_due'
     ORDER BY j.scheduled_at DESC LIMIT 1;
    IF last IS NOT NULL THEN
        RETURN least(last + interval '1 millisecond' / coalesce((SELECT w.weight FROM %1$I.fair_share_weights AS w WHERE w.tenant = p_tenant), 1), p_due);
    END IF;
    SELECT j.scheduled_at INTO head FROM %1$I.river_job AS j
     WHERE j.state = 'available' AND j.queue = p_queue AND j.priority = p_priority
       AND j.scheduled_at <= now() AND NOT j.metadata ? 'tierq:turn_due'
     ORDER BY j.scheduled_at LIMIT 1;
    RETURN least(coalesce(head, now() - interval '1 hour'), p_due);
END
$$
$fn$, current_schema());

    EXECUTE format($fn$
CREATE OR REPLACE FUNCTION %1$I.tierq_tenant_turn() RETURNS trigger
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    tkey text;
    s    timestamptz;
BEGIN
    IF NEW.state <> 'available'
       OR (TG_OP = 'UPDATE' AND OLD.state = 'available' AND (OLD.queue <> NEW.queue OR OLD.priority = NEW.priority)) THEN
        RETURN NEW;
    END IF;
    PERFORM FROM %1$I.fair_share_slots AS f WHERE f.queue = NEW.queue AND f.turns AND f.expires_at > now() LIMIT 1;
    IF NOT FOUND THEN
        RETURN NEW;
    END IF;
    IF NEW.scheduled_at > clock_timestamp() + interval '50 milliseconds' THEN
        IF jsonb_typeof(NEW.metadata) = 'object' THEN
            NEW.metadata := NEW.metadata || '{"tierq:turn_due": true}';
        END IF;
        RETURN NEW;
    END IF;
    -- (metadata that is not an object has no tenant: the key of none, '')
    tkey := CASE WHEN jsonb_typeof(NEW.metadata) <> 'object' THEN ''
                 WHEN octet_length(coalesce(NEW.metadata->>'tierq:tenant', '')) <= 200
                 THEN coalesce(NEW.metadata->>'tierq:tenant', '')
                 ELSE left(NEW.metadata->>'tierq:tenant', 200) || '#md5:' || md5(NEW.metadata->>'tierq:tenant') END;
    s := %1$I.tierq_turn_tag(NEW.queue, NEW.priority, tkey, NEW.scheduled_at);
    IF s < NEW.scheduled_at THEN
        IF TG_OP = 'INSERT' AND s < NEW.created_at
           AND NEW.scheduled_at BETWEEN NEW.created_at - interval '50 milliseconds' AND NEW.created_at + interval '50 milliseconds' THEN
            -- Due at its insert: River's tag tierq_turn says so (due =
            -- created_at), with no key in the metadata (migration 00017).
            IF NOT coalesce('tierq_turn' = ANY (NEW.tags), false) THEN
                NEW.tags := NEW.tags || '{tierq_turn}'::varchar(255)[];
            END IF;
            IF jsonb_typeof(NEW.metadata) = 'object' AND NEW.metadata ? 'tierq:turn_due' THEN
                NEW.metadata := NEW.metadata - 'tierq:turn_due';
            END IF;
        ELSIF jsonb_typeof(NEW.metadata) = 'object' THEN
            NEW.metadata := (NEW.metadata - 'tierq:turn_due')
                || jsonb_build_object('tierq:due_at', %1$I.tierq_due_micros(NEW.scheduled_at, NEW.created_at, NEW.tags, NEW.metadata),
                                      'tierq:moved_at', (extract(epoch FROM s) * 1000000)::bigint);
        ELSE
            RETURN NEW; -- nowhere to keep its due time: left where River put it
        END IF;
        NEW.scheduled_at := s;
    ELSIF jsonb_typeof(NEW.metadata) = 'object' AND NEW.metadata ? 'tierq:turn_due' THEN
        NEW.metadata := NEW.metadata - 'tierq:turn_due';
    END IF;
    RETURN NEW;
END
$$
$fn$, current_schema());
END
$migration$;
-- +goose StatementEnd

-- +goose Down
-- 00018's tierq_turn_tag and 00017's tierq_tenant_turn, each with the
-- schema as its search_path.
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
CREATE OR REPLACE FUNCTION tierq_tenant_turn() RETURNS trigger
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    tkey text;
    s    timestamptz;
    due  bigint;
BEGIN
    IF NEW.state <> 'available'
       OR (TG_OP = 'UPDATE' AND OLD.state = 'available' AND (OLD.queue <> NEW.queue OR OLD.priority = NEW.priority)) THEN
        RETURN NEW;
    END IF;
    PERFORM FROM fair_share_slots AS f WHERE f.queue = NEW.queue AND f.turns AND f.expires_at > now() LIMIT 1;
    IF NOT FOUND THEN
        RETURN NEW;
    END IF;
    IF NEW.scheduled_at > clock_timestamp() + interval '50 milliseconds' THEN
        IF jsonb_typeof(NEW.metadata) = 'object' THEN
            NEW.metadata := NEW.metadata || '{"tierq:turn_due": true}';
        END IF;
        RETURN NEW;
    END IF;
    tkey := CASE WHEN jsonb_typeof(NEW.metadata) <> 'object' THEN ''
                 WHEN octet_length(coalesce(NEW.metadata->>'tierq:tenant', '')) <= 200
                 THEN coalesce(NEW.metadata->>'tierq:tenant', '')
                 ELSE left(NEW.metadata->>'tierq:tenant', 200) || '#md5:' || md5(NEW.metadata->>'tierq:tenant') END;
    due := tierq_due_micros(NEW.scheduled_at, NEW.created_at, NEW.tags, NEW.metadata);
    s := tierq_turn_tag(NEW.queue, NEW.priority, tkey, NEW.scheduled_at);
    IF s < NEW.scheduled_at THEN
        IF TG_OP = 'INSERT' AND s < NEW.created_at
           AND NEW.scheduled_at BETWEEN NEW.created_at - interval '50 milliseconds' AND NEW.created_at + interval '50 milliseconds' THEN
            IF NOT coalesce('tierq_turn' = ANY (NEW.tags), false) THEN
                NEW.tags := NEW.tags || '{tierq_turn}'::varchar(255)[];
            END IF;
            IF jsonb_typeof(NEW.metadata) = 'object' AND NEW.metadata ? 'tierq:turn_due' THEN
                NEW.metadata := NEW.metadata - 'tierq:turn_due';
            END IF;
        ELSIF jsonb_typeof(NEW.metadata) = 'object' THEN
            NEW.metadata := (NEW.metadata - 'tierq:turn_due')
                || jsonb_build_object('tierq:due_at', due, 'tierq:moved_at', (extract(epoch FROM s) * 1000000)::bigint);
        ELSE
            RETURN NEW;
        END IF;
        NEW.scheduled_at := s;
    ELSIF jsonb_typeof(NEW.metadata) = 'object' AND NEW.metadata ? 'tierq:turn_due' THEN
        NEW.metadata := NEW.metadata - 'tierq:turn_due';
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION tierq_tenant_turn() SET search_path = %I, pg_catalog', current_schema());
    EXECUTE format('ALTER FUNCTION tierq_turn_tag(text, smallint, text, timestamptz) SET search_path = %I, pg_catalog', current_schema());
END
$$;
-- +goose StatementEnd
