-- Extended statistics on river_job's (state, queue): how many jobs of each
-- state each queue holds, as one distribution (an MCV list), not two.
--
-- Without them PostgreSQL multiplies the share of available jobs by the
-- share of a queue's jobs, as if they were unrelated. With a free backlog of
-- 50,000 available jobs and River's retained completed jobs spread over the
-- queues, it estimated 6,736 available jobs in a paid queue that held 10,
-- and read the whole table for the statements that look for one there (fair
-- share's check, and lending's test for waiting paid work: 13.9 ms where
-- the index answers in 0.04 ms). TestStateQueueEstimates checks the
-- estimate.
--
-- ANALYZE fills them now; autovacuum keeps them current from then on. It
-- reads a sample of the table (30,000 rows at the default statistics
-- target), whatever its size, and blocks no insert or update.

-- +goose Up
CREATE STATISTICS IF NOT EXISTS river_job_tierq_state_queue (mcv) ON state, queue FROM river_job;
ANALYZE river_job;

-- +goose Down
DROP STATISTICS IF EXISTS river_job_tierq_state_queue;
