-- Fair share inside a queue (package fairshare).
--
-- fair_share_slots is each worker process's heartbeat: how many workers it
-- runs per queue, until expires_at. A queue's capacity, the base of every
-- tenant's window, is the sum of its unexpired rows: River keeps no registry
-- of worker capacity, and the windows must be global across replicas.
--
-- fair_share_weights gives a tenant a weight other than 1 in every queue
-- with fair share on: its window, and so its share of a contended queue, is
-- proportional to it.
--
-- river_job_tierq_held_idx serves the admission of held jobs: only rows that
-- tierq holds (state pending, metadata carrying tierq:held_at) enter it, so
-- no insert pays for it. Its columns are the admission's order: per queue,
-- per tenant, in River's fetch order.

-- +goose Up
CREATE TABLE IF NOT EXISTS fair_share_slots (
    client_id    text        NOT NULL,
    queue        text        NOT NULL,
    slots        integer     NOT NULL CHECK (slots >= 0),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    PRIMARY KEY (client_id, queue)
);

CREATE TABLE IF NOT EXISTS fair_share_weights (
    tenant     text        PRIMARY KEY,
    weight     integer     NOT NULL CHECK (weight BETWEEN 1 AND 1000),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Built in the migration's transaction: it holds no rows yet (nothing is
-- held before this release), but the build reads the whole table, about a
-- second per million rows here, while inserts into river_job wait. On a
-- table much larger than that, build it beforehand with CREATE INDEX
-- CONCURRENTLY and this exact definition: IF NOT EXISTS then skips it.
-- (CONCURRENTLY here would wait for every open transaction in the
-- database, including those of other schemas' workers.)
CREATE INDEX IF NOT EXISTS river_job_tierq_held_idx
    ON river_job (queue, (coalesce(metadata->>'tierq:tenant', '')), priority, scheduled_at, id)
    WHERE state = 'pending' AND metadata ? 'tierq:held_at';

-- +goose Down
DROP INDEX IF EXISTS river_job_tierq_held_idx;
DROP TABLE IF EXISTS fair_share_weights;
DROP TABLE IF EXISTS fair_share_slots;
