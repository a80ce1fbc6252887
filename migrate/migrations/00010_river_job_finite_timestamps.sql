-- +goose NO TRANSACTION
-- river_job's timestamps are finite: a check constraint,
-- river_job_tierq_finite_timestamps, refuses 'infinity' and '-infinity' in
-- created_at, scheduled_at, attempted_at and finalized_at (the last two may
-- still be NULL, as River leaves them).
--
-- River reads those columns into Go's time.Time, which has no infinity: a
-- single such row, written by hand or by a producer inserting straight into
-- river_job, made River fail ("cannot scan -Infinity into *time.Time") in
-- every statement that returned it. A retryable or scheduled one failed the
-- leader's job scheduler on every run, so no retry or scheduled job became
-- available in any queue; an available one failed the fetch that took it,
-- leaving the other jobs of that fetch running and never worked, and then
-- failed every run of the rescuer, so no stuck job was rescued either.
-- River never writes an infinite timestamp itself, nor does tierq: the
-- constraint refuses only rows no River client can read.
--
-- The rows already there are repaired first (an unrepaired row would fail
-- every UPDATE of it once the constraint exists, even NOT VALID, River's
-- fetch included):
--
--   - scheduled_at 'infinity' of a job that is not running and not finished
--     (available, scheduled, retryable, pending): the job was never due, so
--     it is cancelled, with the reason as the last entry of its errors
--     (state cancelled, finalized_at now(), scheduled_at now());
--   - every other infinite value becomes now(): a '-infinity' scheduled_at
--     makes the job due at once, which is what it said;
--   - when metadata is a JSON object, tierq:repaired records the repair:
--     when, by what, each original value by its column's name, and the
--     state a cancelled job was in (cancelled_from).
--
-- Safe beside running workers and repeatable: nothing here runs in one long
-- transaction. Each UPDATE changes only the rows it repairs, and changes
-- nothing when run again. ADD CONSTRAINT ... NOT VALID needs ACCESS
-- EXCLUSIVE on river_job for a moment (no scan): it waits at most 2 s for
-- it, so that River's statements do not queue behind it for longer, and
-- tries again a second later, 30 times. Rows committed between the first
-- repair and the constraint are repaired by the second. VALIDATE reads the
-- whole table under SHARE UPDATE EXCLUSIVE, which blocks no insert, fetch or
-- update. At 1,000,000 rows, `tierctl migrate` applied it in 0.47 s here.

-- +goose Up
UPDATE river_job SET
    state = CASE
        WHEN scheduled_at = 'infinity' AND state IN ('available', 'scheduled', 'retryable', 'pending') THEN 'cancelled'
        ELSE state END,
    finalized_at = CASE
        WHEN scheduled_at = 'infinity' AND state IN ('available', 'scheduled', 'retryable', 'pending') THEN now()
        WHEN finalized_at IN ('infinity', '-infinity') THEN now()
        ELSE finalized_at END,
    errors = CASE
        WHEN scheduled_at = 'infinity' AND state IN ('available', 'scheduled', 'retryable', 'pending')
        THEN coalesce(errors, '{}') || jsonb_build_object('at', now(), 'attempt', attempt, 'trace', '',
            'error', 'tierq migration 00010: cancelled: scheduled_at was infinity (state ' || state || '), so the job would never run')
        ELSE errors END,
    metadata = CASE
        WHEN jsonb_typeof(metadata) = 'object'
        THEN metadata || jsonb_build_object('tierq:repaired', jsonb_strip_nulls(jsonb_build_object(
            'at', now(),
            'by', 'tierq migration 00010',
            'created_at', CASE WHEN created_at IN ('infinity', '-infinity') THEN created_at::text END,
            'scheduled_at', CASE WHEN scheduled_at IN ('infinity', '-infinity') THEN scheduled_at::text END,
            'attempted_at', CASE WHEN attempted_at IN ('infinity', '-infinity') THEN attempted_at::text END,
            'finalized_at', CASE WHEN finalized_at IN ('infinity', '-infinity') THEN finalized_at::text END,
            'cancelled_from', CASE WHEN scheduled_at = 'infinity' AND state IN ('available', 'scheduled', 'retryable', 'pending') THEN state::text END)))
        ELSE metadata END,
    created_at = CASE WHEN created_at IN ('infinity', '-infinity') THEN now() ELSE created_at END,
    scheduled_at = CASE WHEN scheduled_at IN ('infinity', '-infinity') THEN now() ELSE scheduled_at END,
    attempted_at = CASE WHEN attempted_at IN ('infinity', '-infinity') THEN now() ELSE attempted_at END
WHERE created_at IN ('infinity', '-infinity') OR scheduled_at IN ('infinity', '-infinity')
   OR attempted_at IN ('infinity', '-infinity') OR finalized_at IN ('infinity', '-infinity');

-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_constraint
               WHERE conrelid = 'river_job'::regclass AND conname = 'river_job_tierq_finite_timestamps') THEN
        RETURN;
    END IF;
    SET LOCAL lock_timeout = '2s';
    FOR try IN 1..30 LOOP
        BEGIN
            ALTER TABLE river_job ADD CONSTRAINT river_job_tierq_finite_timestamps CHECK (
                created_at > '-infinity' AND created_at < 'infinity'
                AND scheduled_at > '-infinity' AND scheduled_at < 'infinity'
                AND (attempted_at IS NULL OR (attempted_at > '-infinity' AND attempted_at < 'infinity'))
                AND (finalized_at IS NULL OR (finalized_at > '-infinity' AND finalized_at < 'infinity'))
            ) NOT VALID;
            RETURN;
        EXCEPTION WHEN lock_not_available THEN
            IF try = 30 THEN
                RAISE;
            END IF;
        END;
        PERFORM pg_sleep(1);
    END LOOP;
END
$$;
-- +goose StatementEnd

-- The first repair's statement again, for rows committed before the
-- constraint existed and after that repair read the table.
UPDATE river_job SET
    state = CASE
        WHEN scheduled_at = 'infinity' AND state IN ('available', 'scheduled', 'retryable', 'pending') THEN 'cancelled'
        ELSE state END,
    finalized_at = CASE
        WHEN scheduled_at = 'infinity' AND state IN ('available', 'scheduled', 'retryable', 'pending') THEN now()
        WHEN finalized_at IN ('infinity', '-infinity') THEN now()
        ELSE finalized_at END,
    errors = CASE
        WHEN scheduled_at = 'infinity' AND state IN ('available', 'scheduled', 'retryable', 'pending')
        THEN coalesce(errors, '{}') || jsonb_build_object('at', now(), 'attempt', attempt, 'trace', '',
            'error', 'tierq migration 00010: cancelled: scheduled_at was infinity (state ' || state || '), so the job would never run')
        ELSE errors END,
    metadata = CASE
        WHEN jsonb_typeof(metadata) = 'object'
        THEN metadata || jsonb_build_object('tierq:repaired', jsonb_strip_nulls(jsonb_build_object(
            'at', now(),
            'by', 'tierq migration 00010',
            'created_at', CASE WHEN created_at IN ('infinity', '-infinity') THEN created_at::text END,
            'scheduled_at', CASE WHEN scheduled_at IN ('infinity', '-infinity') THEN scheduled_at::text END,
            'attempted_at', CASE WHEN attempted_at IN ('infinity', '-infinity') THEN attempted_at::text END,
            'finalized_at', CASE WHEN finalized_at IN ('infinity', '-infinity') THEN finalized_at::text END,
            'cancelled_from', CASE WHEN scheduled_at = 'infinity' AND state IN ('available', 'scheduled', 'retryable', 'pending') THEN state::text END)))
        ELSE metadata END,
    created_at = CASE WHEN created_at IN ('infinity', '-infinity') THEN now() ELSE created_at END,
    scheduled_at = CASE WHEN scheduled_at IN ('infinity', '-infinity') THEN now() ELSE scheduled_at END,
    attempted_at = CASE WHEN attempted_at IN ('infinity', '-infinity') THEN now() ELSE attempted_at END
WHERE created_at IN ('infinity', '-infinity') OR scheduled_at IN ('infinity', '-infinity')
   OR attempted_at IN ('infinity', '-infinity') OR finalized_at IN ('infinity', '-infinity');

-- Validating a valid constraint does nothing.
ALTER TABLE river_job VALIDATE CONSTRAINT river_job_tierq_finite_timestamps;

-- +goose Down
ALTER TABLE river_job DROP CONSTRAINT IF EXISTS river_job_tierq_finite_timestamps;
