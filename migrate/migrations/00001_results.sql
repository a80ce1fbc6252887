-- Once the reference app's tables (analysis_results, spec_documents). They
-- are no table of tierq's: they belong to the reference app (package jobs),
-- whose own migration line creates them now (jobs/migrations, recorded in
-- tierq_reference_app_schema_version; its worker and scheduler processes
-- apply it when they start). A team's database migrated from here on has
-- neither.
--
-- This migration stays, doing nothing, because goose versions are never
-- renumbered: a database that applied it before keeps its version and its
-- tables, and the reference app's line, whose migration 00001 creates them
-- only if they do not exist, takes them over as they are, rows and all. Its
-- Down does nothing either: the tables are the reference line's to drop.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
