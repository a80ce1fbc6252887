-- Recorded job waits (package waitstats, issue 34): how long the jobs that
-- workers started waited from their due time, per minute, queue and tier,
-- as counts in fixed histogram buckets. Every worker process aggregates
-- the waits it observes in memory and adds them here every 10 s with one
-- upsert (waitstats.Recorder), so that replicas sum: a row is the whole
-- fleet's minute. The operator console's overview reads the last hour of
-- rows (waitstats.Read) instead of scanning river_job.
--
-- Keys and columns:
--   minute  the start of the UTC minute in which the jobs started.
--   queue   the River queue the job was started from.
--   tier    the job's tier (jobmeta's tierq:tier, else its args), or
--           'unknown'.
--   counts  jobs per bucket, not cumulative: counts[i] (1-based) counts
--           the waits above waitstats.Bounds[i-2] and at most
--           waitstats.Bounds[i-1]; the last element the waits above the
--           last bound. 82 buckets: 10 per decade from 1 ms to 100,000 s
--           (1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6, 8 × 10^k). Changing the
--           bounds needs a new table or a new migration that converts the
--           rows: the check refuses another length.
--
-- Rows older than waitstats.DefaultRetention (2 h) are deleted by the
-- flushes themselves, through the primary key (its leading column is
-- minute): the console's window is 60 minutes.

-- +goose Up
CREATE TABLE job_wait_stats (
    minute timestamptz NOT NULL,
    queue  text        NOT NULL CHECK (length(queue) BETWEEN 1 AND 128),
    tier   text        NOT NULL CHECK (tier IN ('free', 'pro', 'pro_plus', 'enterprise', 'unknown')),
    counts bigint[]    NOT NULL CHECK (cardinality(counts) = 82 AND array_ndims(counts) = 1),
    PRIMARY KEY (minute, queue, tier)
);

-- +goose Down
DROP TABLE job_wait_stats;
