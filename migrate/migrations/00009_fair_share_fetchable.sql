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
-- The index is built in the migration's transaction: DROP INDEX takes an
-- ACCESS EXCLUSIVE lock on river_job that is held until the build ends, so
-- every read and write of river_job waits meanwhile (about 70 ms for a
-- million narrow rows here; the build reads the whole table). It keeps its
-- name, so what reads it by name (EXPLAIN checks, the autoscaler's
-- queries) keeps working.
--
-- Upgrading: worker processes of an earlier release still pass over their
-- queues correctly after this migration, but their statements key tenants
-- the old way, which no index serves any more: each of their passes sorts
-- every held job of the queue (237 ms instead of 4 with 10,000 held, 29 s
-- instead of 15 ms with 100,000 held over 1,000 tenants), and their
-- heartbeats carry no kinds, which counts every kind as fetchable while they
-- run. Replace every worker soon after migrating (a rolling update does),
-- and do not roll workers back past this migration.

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
