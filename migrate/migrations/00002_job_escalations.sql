-- Audit of every move of a queued River job to another queue or priority:
-- by the scheduler's escalation rules, by an operator, or by a duplicate
-- insert of a higher tier. No foreign key to river_job: River deletes
-- finished jobs, and the audit must outlive them.

-- +goose Up
CREATE TABLE job_escalations (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id        bigint      NOT NULL,
    from_queue    text        NOT NULL,
    to_queue      text        NOT NULL,
    from_priority smallint    NOT NULL,
    to_priority   smallint    NOT NULL,
    actor         text        NOT NULL,
    reason        text        NOT NULL,
    escalated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX job_escalations_job_id_idx ON job_escalations (job_id);
CREATE INDEX job_escalations_escalated_at_idx ON job_escalations (escalated_at);

-- +goose Down
DROP TABLE job_escalations;
