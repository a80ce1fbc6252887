-- What River's uniqueness needs, kept on a dead letter: the discarded job's
-- unique_key and unique_states as River wrote them. A replay gives the new
-- job the same two values, so it is unique exactly as the original was (the
-- next insert of the same job finds it as a duplicate), and a replay whose
-- key a live job already holds is refused, naming that job (package dlq).
-- Dead letters drained before this migration have neither and replay as
-- before, without uniqueness.

-- +goose Up
ALTER TABLE dead_letter_jobs ADD COLUMN unique_key bytea, ADD COLUMN unique_states bit(8);

-- +goose Down
ALTER TABLE dead_letter_jobs DROP COLUMN unique_states, DROP COLUMN unique_key;
