-- Results of the two services. job_id is unique in both tables so that a job
-- delivered twice (River is at-least-once) writes its row once.

-- +goose Up
CREATE TABLE analysis_results (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id        bigint      NOT NULL UNIQUE,
    target        text        NOT NULL,
    user_id       text        NOT NULL DEFAULT '',
    tier          text        NOT NULL DEFAULT '',
    git_commit    text,
    total_tests   integer     NOT NULL,
    go_tests      integer     NOT NULL,
    python_tests  integer     NOT NULL,
    js_tests      integer     NOT NULL,
    files_scanned integer     NOT NULL,
    files_skipped integer     NOT NULL,
    tests         jsonb       NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
);

-- The latest result per target (re-analysis of stale targets) and retention.
CREATE INDEX analysis_results_target_created_at_idx ON analysis_results (target, created_at DESC);
CREATE INDEX analysis_results_created_at_idx ON analysis_results (created_at);

CREATE TABLE spec_documents (
    id                 bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id             bigint      NOT NULL UNIQUE,
    analysis_result_id bigint      NOT NULL REFERENCES analysis_results (id) ON DELETE CASCADE,
    title              text        NOT NULL,
    content            text        NOT NULL,
    test_count         integer     NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX spec_documents_analysis_result_id_idx ON spec_documents (analysis_result_id);
CREATE INDEX spec_documents_created_at_idx ON spec_documents (created_at);

-- +goose Down
DROP TABLE spec_documents;
DROP TABLE analysis_results;
