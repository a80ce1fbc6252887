-- The reference app's results: what the analysis worker finds
-- (analysis_results) and the specs the specview worker renders from it
-- (spec_documents). job_id is unique in both tables so that a job delivered
-- twice (River is at-least-once) writes its row once.
--
-- The reference app's own migration line (jobs.Migrations, recorded in
-- tierq_reference_app_schema_version), not tierq's: a team's database never
-- gets these tables. Until issue 30 tierq's migration 00001 created them,
-- with these very definitions, in every database; on such a database every
-- statement here finds its table or index already there and does nothing,
-- so the line takes them over, rows and all, and only records its version.

-- +goose Up
CREATE TABLE IF NOT EXISTS analysis_results (
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
CREATE INDEX IF NOT EXISTS analysis_results_target_created_at_idx ON analysis_results (target, created_at DESC);
CREATE INDEX IF NOT EXISTS analysis_results_created_at_idx ON analysis_results (created_at);

CREATE TABLE IF NOT EXISTS spec_documents (
    id                 bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id             bigint      NOT NULL UNIQUE,
    analysis_result_id bigint      NOT NULL REFERENCES analysis_results (id) ON DELETE CASCADE,
    title              text        NOT NULL,
    content            text        NOT NULL,
    test_count         integer     NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS spec_documents_analysis_result_id_idx ON spec_documents (analysis_result_id);
CREATE INDEX IF NOT EXISTS spec_documents_created_at_idx ON spec_documents (created_at);

-- +goose Down
DROP TABLE IF EXISTS spec_documents;
DROP TABLE IF EXISTS analysis_results;
