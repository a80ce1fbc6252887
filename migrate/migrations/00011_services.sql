-- The services tierq's processes run, so that tools that do not link an
-- application's code (the stock tierctl) know every service's queues and
-- kinds: each worker, scheduler and API process upserts its registry's
-- services here when it starts (service.Registry.Record), and tierctl reads
-- them (escalate, dlq replay --to-queue, watch, enqueue --kind). A row
-- stays until `tierctl services forget NAME` deletes it: a service's jobs
-- and dead letters outlive its processes, and an operator must still be
-- able to move or replay them while its workers are down. seen_at says
-- when a process last recorded it.
--
-- kinds is a JSON array of {"name", "aliases", "fields"}: the kind's name,
-- its args' KindAliases, and the JSON field names of its args type, sorted
-- (null when the args type is not a struct: any JSON object).

-- +goose Up
CREATE TABLE tierq_services (
    name          text        PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9_]*$' AND length(name) <= 40),
    base_queue    text        NOT NULL CHECK (base_queue ~ '^[a-z][a-z0-9_]*$' AND length(base_queue) <= 100),
    queues        text[]      NOT NULL CHECK (cardinality(queues) = 3),
    kinds         jsonb       NOT NULL CHECK (jsonb_typeof(kinds) = 'array'),
    recorded_by   text        NOT NULL,
    first_seen_at timestamptz NOT NULL DEFAULT now(),
    seen_at       timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE tierq_services;
