-- Fair share counts only work River can fetch now (package fairshare).
--
-- fair_share_slots.kinds: the job kinds the heartbeat's process fetches in
-- the queue (River's FetchOnlyKnownKinds, kind aliases included), or NULL
-- when it fetches every kind. A queue's fetchable kinds are those of its
-- unexpired heartbeats with workers: a job of any other kind stays
-- available and no worker of the queue will ever take it, so it holds no
-- place in its tenant's window, is never lent, and is reported instead
-- (tierq_unfetchable_jobs).
--
-- river_job_tierq_held_idx is rebuilt on a bounded tenant key. A tenant id
-- is a string in job metadata that anyone inserting a row may write, of any
-- length: indexed as it was, a tenant of about 2,700 bytes or more made
-- every pass over its queue fail ("index row size … exceeds btree version 4
-- maximum 2704"). A tenant id of up to 200 bytes (the rule, jobmeta) is its
-- own key; a longer one is keyed by its first 200 characters, "#md5:" and
-- the md5 of the whole: at most 837 bytes, longer than 200 bytes so never
-- equal to another tenant's id, and distinct from another long tenant's
-- key unless their md5s collide as well as their first 200 characters.
-- The expression is fairshare's tenantSQL, character for character: the
-- planner uses the index only for that exact expression.
--
-- The index is built in the migration's transaction (see 00007 for the
-- cost: the build reads the whole table while inserts into river_job wait);
-- it keeps its name, so what reads it by name (EXPLAIN checks, the
-- autoscaler's queries) keeps working.

-- +goose Up
ALTER TABLE fair_share_slots ADD COLUMN IF NOT EXISTS kinds text[];

DROP INDEX IF EXISTS river_job_tierq_held_idx;
CREATE INDEX river_job_tierq_held_idx
    ON river_job (queue,
                  (CASE WHEN octet_length(coalesce(metadata->>'tierq:tenant', '')) <= 200
                        THEN coalesce(metadata->>'tierq:tenant', '')
                        ELSE left(metadata->>'tierq:tenant', 200) || '#md5:' || md5(metadata->>'tierq:tenant') END),
                  priority, scheduled_at, id)
    WHERE state = 'pending' AND metadata ? 'tierq:held_at';

-- +goose Down
DROP INDEX IF EXISTS river_job_tierq_held_idx;
CREATE INDEX river_job_tierq_held_idx
    ON river_job (queue, (coalesce(metadata->>'tierq:tenant', '')), priority, scheduled_at, id)
    WHERE state = 'pending' AND metadata ? 'tierq:held_at';
ALTER TABLE fair_share_slots DROP COLUMN IF EXISTS kinds;
