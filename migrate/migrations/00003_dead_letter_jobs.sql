-- Dead letters: River jobs that ended `discarded` (attempts exhausted, or
-- rescued after their last attempt), moved out of river_job by the
-- scheduler's drain (package dlq). job_id is unique: a job is copied
-- at most once. No foreign key to river_job: the row is deleted there in the
-- same statement that inserts it here.

-- +goose Up
CREATE TABLE dead_letter_jobs (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id        bigint      NOT NULL UNIQUE,
    kind          text        NOT NULL,
    queue         text        NOT NULL,
    priority      smallint    NOT NULL,
    args          jsonb       NOT NULL,
    metadata      jsonb       NOT NULL DEFAULT '{}',
    tags          text[]      NOT NULL DEFAULT '{}',
    -- Every attempt's error as River recorded it: a JSON array of
    -- {"at", "attempt", "error", "trace"}.
    errors        jsonb       NOT NULL DEFAULT '[]',
    attempt       smallint    NOT NULL,
    max_attempts  smallint    NOT NULL,
    created_at    timestamptz NOT NULL, -- the original enqueue time
    finalized_at  timestamptz,          -- when River discarded it
    moved_at      timestamptz NOT NULL DEFAULT now(),
    replayed_at   timestamptz,
    replay_job_id bigint,
    replayed_by   text,
    CONSTRAINT dead_letter_jobs_replay_complete CHECK (
        (replayed_at IS NULL) = (replay_job_id IS NULL) AND (replayed_at IS NULL) = (replayed_by IS NULL))
);

-- Listing newest first, filtered by queue or kind; paging by id.
CREATE INDEX dead_letter_jobs_queue_id_idx ON dead_letter_jobs (queue, id);
CREATE INDEX dead_letter_jobs_kind_id_idx ON dead_letter_jobs (kind, id);
-- --since and purge --older-than.
CREATE INDEX dead_letter_jobs_moved_at_idx ON dead_letter_jobs (moved_at);
-- Depth (rows not yet replayed) per queue, read after every drain.
CREATE INDEX dead_letter_jobs_pending_queue_idx ON dead_letter_jobs (queue) WHERE replayed_at IS NULL;

-- The depth alert's state, shared by every scheduler replica so that a
-- leader hand-over neither repeats an alert early nor forgets one that fired.
CREATE TABLE dead_letter_alert_state (
    singleton    boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    firing       boolean     NOT NULL DEFAULT false,
    last_sent_at timestamptz
);
INSERT INTO dead_letter_alert_state DEFAULT VALUES;

-- +goose Down
DROP TABLE dead_letter_alert_state;
DROP TABLE dead_letter_jobs;
