-- Executions of the load-test workload (kind loadtest) whose args ask to be
-- recorded ("record": true): one row when an attempt starts, committed on its
-- own, and completed_at set in the transaction that completes the River job.
-- The chaos suite (chaos/) counts deliveries with it: a job with two rows was
-- delivered twice, and at most one row of a job may have completed_at.
-- Production workers never write it unless a load test is run against them.

-- +goose Up
CREATE TABLE load_test_executions (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id       bigint      NOT NULL,
    attempt      smallint    NOT NULL,
    -- The worker process (its pid and River client id) that ran the attempt.
    pid          integer     NOT NULL,
    client_id    text        NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    completed_at timestamptz
);

CREATE INDEX load_test_executions_job_id_idx ON load_test_executions (job_id);

-- +goose Down
DROP TABLE load_test_executions;
