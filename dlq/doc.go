// Package dlq is tierq's dead-letter queue: the jobs River gave up on, kept
// in tierq's own table (dead_letter_jobs) where nothing deletes them until an
// operator does.
//
// River marks a job `discarded` when its last attempt fails (or the rescuer
// finds it stuck after its last attempt) and, left alone, deletes it seven
// days later. The scheduler's leader runs Drain every DLQ_DRAIN_INTERVAL: one
// statement per batch claims discarded rows with FOR UPDATE SKIP LOCKED,
// deletes them from river_job and inserts them into dead_letter_jobs, so a
// job is in exactly one of the two tables at every instant, whatever is
// killed when, and two drains never copy one job twice. The scheduler sets
// River's DiscardedJobRetentionPeriod to -1 (never), so River's cleaner
// never deletes a discarded job before the drain has seen it.
//
// From the table, operators list and show dead letters (List; Get, or
// GetByJobID by the id the job had in River), replay them as new River jobs
// with fresh attempts (Replay, ReplayAll: the new job and the replayed mark
// are written in one transaction, so a dead letter is replayed once unless
// the operator forces it) and purge old ones (Purge).
// After each drain, Alerter reports the depth (rows not yet replayed) when it
// reaches DLQ_ALERT_THRESHOLD: a log warning and an optional webhook, rate
// limited, with one "resolved" message when the depth falls back.
//
// docs/dead-letters.md describes the lifecycle and every command.
package dlq
