-- Fair share by turns, experimental (QUEUE_FAIR_SHARE_MODE=turns;
-- docs/fairness.md, docs/design/fair-share-turns.md).
--
-- River fetches by (priority, scheduled_at, id). Start-time fair queuing
-- gives each job a start tag S = max(V, F(tenant)), F the tenant's last
-- tag waiting in the line + 1 ms / weight, V the scheduled_at of the head
-- of the job's line (its queue and priority; an empty line starts an hour
-- back). Written into scheduled_at (never after the job's own time),
-- River's own fetch order takes the tenants in turns: nothing is held, no
-- pass runs.
--
-- The job's due time is kept, so every view of waiting work measures from
-- when the job became due, not from its tag (jobmetasql.DueAtSQL): a job
-- placed at its insert, due then, gets River's tag tierq_turn (due at its
-- created_at); any other placed job keeps it as every move does
-- (tierq:due_at, tierq:moved_at = the tag).
--
-- A job aging gives a better priority while it waits takes a turn in its
-- new line the same way, its due time kept. A job moved to another queue
-- (escalation, lending) is left where the move put it, the back of its new
-- line (scheduled_at now()), as under windows: escalation counts a job's
-- time in its queue from there.
--
-- A row made available more than 50 ms before it is due (River's short
-- retries and snoozes, its scheduler's look-ahead, a producer's own
-- scheduled_at) is left where River put it, marked tierq:turn_due; the
-- workers' placing loop gives it its tag once due.

-- +goose Up
ALTER TABLE fair_share_slots ADD COLUMN IF NOT EXISTS turns boolean NOT NULL DEFAULT false;

-- Both indexes are built in the migration's transaction, as 00007's: few
-- or no rows enter them, but the build reads the whole table (about a
-- second per million rows here) while writes to river_job wait. On a table
-- much larger than that, build them beforehand with CREATE INDEX
-- CONCURRENTLY and these exact definitions: IF NOT EXISTS then skips them.
CREATE INDEX IF NOT EXISTS river_job_tierq_turn_due_idx
    ON river_job (queue, scheduled_at)
    WHERE state = 'available' AND metadata ? 'tierq:turn_due';

-- A tenant's last tag in a line: its latest placed job waiting there (a
-- job placed at its insert has a scheduled_at before its created_at, any
-- other a kept move time, tierq:moved_at), by the bounded tenant key
-- (migration 00009). Only such rows enter it (and rows a producer inserted
-- with a scheduled_at in the past, or moved): without turns almost
-- nothing pays for it.
CREATE INDEX IF NOT EXISTS river_job_tierq_turn_idx
    ON river_job (queue, priority,
                  (CASE WHEN octet_length(coalesce(metadata->>'tierq:tenant', '')) <= 200
                        THEN coalesce(metadata->>'tierq:tenant', '')
                        ELSE left(metadata->>'tierq:tenant', 200) || '#md5:' || md5(metadata->>'tierq:tenant') END),
                  scheduled_at)
    WHERE state = 'available' AND (scheduled_at < created_at OR metadata ? 'tierq:moved_at');

-- tierq_turn_tag returns the start tag of a job of tenant key p_tenant at
-- p_priority in p_queue, due at p_due: the line's head, or one step after
-- the tenant's last job waiting in the line if that is later; never after
-- p_due. Nothing is written and nothing locked: two transactions placing
-- one tenant's jobs at once may give them the same tag (ties go by id).
-- STABLE: within one statement (the placing loop's) every call reads the
-- statement's snapshot; the trigger calls it from a plpgsql expression,
-- which takes a new snapshot each time, so the rows a multi-row insert
-- placed before are read.
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

-- tierq_due_micros is the due time (Unix microseconds) of a job with
-- scheduled_at s, created_at c, tags g and metadata m, by
-- jobmetasql.DueAtSQL's rule: the kept due time while the kept move time
-- equals s (the "tierq:" pair, or the legacy "tierq_" pair when the
-- metadata has no tierq:moved_at), else c for a job placed by turns at its
-- insert (tag tierq_turn, s before c), else s.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION tierq_due_micros(s timestamptz, c timestamptz, g text[], m jsonb) RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN jsonb_typeof(m) = 'object'
                 AND jsonb_typeof(m->k.moved) = 'number' AND m->>k.moved ~ '^[0-9]{1,18}$'
                 AND jsonb_typeof(m->k.due) = 'number' AND m->>k.due ~ '^[0-9]{1,18}$'
                 AND (m->>k.moved)::numeric = extract(epoch FROM s) * 1000000
            THEN (m->>k.due)::bigint
            WHEN s < c AND 'tierq_turn' = ANY (g) THEN (extract(epoch FROM c) * 1000000)::bigint
            ELSE (extract(epoch FROM s) * 1000000)::bigint END
    FROM (SELECT CASE WHEN m ? 'tierq:moved_at' THEN 'tierq:moved_at' ELSE 'tierq_moved_at' END AS moved,
                 CASE WHEN m ? 'tierq:moved_at' THEN 'tierq:due_at' ELSE 'tierq_due_at' END AS due) AS k
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION tierq_tenant_turn() RETURNS trigger
LANGUAGE plpgsql AS $$
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
    -- (metadata that is not an object has no tenant: the key of none, '')
    tkey := CASE WHEN jsonb_typeof(NEW.metadata) <> 'object' THEN ''
                 WHEN octet_length(coalesce(NEW.metadata->>'tierq:tenant', '')) <= 200
                 THEN coalesce(NEW.metadata->>'tierq:tenant', '')
                 ELSE left(NEW.metadata->>'tierq:tenant', 200) || '#md5:' || md5(NEW.metadata->>'tierq:tenant') END;
    due := tierq_due_micros(NEW.scheduled_at, NEW.created_at, NEW.tags, NEW.metadata);
    s := tierq_turn_tag(NEW.queue, NEW.priority, tkey, NEW.scheduled_at);
    IF s < NEW.scheduled_at THEN
        IF TG_OP = 'INSERT' AND s < NEW.created_at
           AND NEW.scheduled_at BETWEEN NEW.created_at - interval '50 milliseconds' AND NEW.created_at + interval '50 milliseconds' THEN
            -- Due at its insert (River stamps both with the same time
            -- unless a producer gives its own): River's tag tierq_turn says
            -- so (due = created_at), with no key in the metadata, which
            -- River's GIN index would take in for every version of the row.
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
            RETURN NEW; -- nowhere to keep its due time: left where River put it
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

DROP TRIGGER IF EXISTS tierq_tenant_turn ON river_job;
CREATE TRIGGER tierq_tenant_turn
    BEFORE INSERT OR UPDATE OF state, priority ON river_job
    FOR EACH ROW
    WHEN (NEW.state = 'available')
    EXECUTE FUNCTION tierq_tenant_turn();

-- +goose Down
DROP TRIGGER IF EXISTS tierq_tenant_turn ON river_job;
DROP FUNCTION IF EXISTS tierq_tenant_turn();
DROP FUNCTION IF EXISTS tierq_due_micros(timestamptz, timestamptz, text[], jsonb);
DROP FUNCTION IF EXISTS tierq_turn_tag(text, smallint, text, timestamptz);
DROP INDEX IF EXISTS river_job_tierq_turn_idx;
DROP INDEX IF EXISTS river_job_tierq_turn_due_idx;
ALTER TABLE fair_share_slots DROP COLUMN IF EXISTS turns;
