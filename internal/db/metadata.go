package db

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"
)

// Metadata keys tierq keeps on a River job besides MetadataBasePriority.
//
// River's scheduled_at is when the job became available in its current
// queue: the escalation sweep sets it to now() so that a moved job joins the
// back of its new queue. The time the current attempt became due (its
// insert, or the end of a retry's backoff or snooze) is kept across such
// moves in MetadataDueAt, in Unix microseconds, next to MetadataMovedAt, the
// scheduled_at the move wrote. The pair only counts while scheduled_at still
// equals MetadataMovedAt: once River gives the job a new scheduled_at (a
// retry, a snooze), that new time is when the next attempt is due.
const (
	MetadataDueAt   = "tierq_due_at"
	MetadataMovedAt = "tierq_moved_at"
)

// DueAtSQL is an SQL expression for when the current attempt of the
// river_job row aliased alias became due (see MetadataDueAt): a timestamptz
// that is never after scheduled_at. It reads metadata of any shape without
// failing: an array, a scalar, a key of the wrong type or a number out of
// range all mean "scheduled_at".
func DueAtSQL(alias string) string {
	m, s := alias+".metadata", alias+".scheduled_at"
	// CASE, not AND, orders the checks: PostgreSQL evaluates a THEN only
	// when its WHEN held, so the numeric casts never see a non-number.
	return `(CASE WHEN jsonb_typeof(` + m + `) = 'object'
      AND jsonb_typeof(` + m + `->'` + MetadataMovedAt + `') = 'number'
      AND jsonb_typeof(` + m + `->'` + MetadataDueAt + `') = 'number'
    THEN CASE WHEN (` + m + `->'` + MetadataMovedAt + `')::numeric = extract(epoch FROM ` + s + `) * 1000000
        THEN to_timestamp(greatest(0, least((` + m + `->'` + MetadataDueAt + `')::numeric,
                                          extract(epoch FROM ` + s + `) * 1000000))::float8 / 1000000)
        ELSE ` + s + ` END
    ELSE ` + s + ` END)`
}

// IsObjectSQL is an SQL condition: the jsonb column col holds a JSON object.
func IsObjectSQL(col string) string {
	return `jsonb_typeof(` + col + `) = 'object'`
}

// DueAt is when the current attempt of a job became due, read from its
// scheduled_at and metadata as DueAtSQL reads them in SQL. Metadata that is
// not an object, or does not carry a matching pair, means scheduledAt.
func DueAt(scheduledAt time.Time, metadata []byte) time.Time {
	var m struct {
		DueAt   *json.Number `json:"tierq_due_at"`
		MovedAt *json.Number `json:"tierq_moved_at"`
	}
	if json.Unmarshal(metadata, &m) != nil || m.DueAt == nil || m.MovedAt == nil {
		return scheduledAt
	}
	moved, err1 := m.MovedAt.Int64()
	due, err2 := m.DueAt.Int64()
	if err1 != nil || err2 != nil || moved != scheduledAt.UnixMicro() || due < 0 || due > moved {
		return scheduledAt
	}
	return time.UnixMicro(due)
}

// PausedSQL is an SQL condition: the queue named by the SQL expression
// queue is paused in River (river_queue.paused_at, River's QueuePause and
// River UI's pause button).
func PausedSQL(queue string) string {
	return `EXISTS (SELECT 1 FROM river_queue AS pq WHERE pq.name = ` + queue + ` AND pq.paused_at IS NOT NULL)`
}

// ReasonMetadataNotObject: the job's metadata is an array, a string, a
// number, a boolean or null, so tierq cannot keep its bookkeeping there.
const ReasonMetadataNotObject = "metadata_not_object"

// MaxSkippedIDs is the most ids a Skipped keeps (and a log line shows).
const MaxSkippedIDs = 100

// maxSkippedCount bounds the count of skipped rows one sweep reads.
const maxSkippedCount = 10000

// Skipped are rows a sweep found but left alone for one reason: how many
// (counting at most 10000) and the first MaxSkippedIDs ids.
type Skipped struct {
	Reason string
	Count  int
	IDs    []int64
}

// FindSkipped runs sql, a query returning ids ordered by id whose last
// parameter is a limit, and collects them as a Skipped for reason (ok false
// when none).
func FindSkipped(ctx context.Context, q Querier, reason, sql string, args ...any) (Skipped, bool, error) {
	rows, err := q.Query(ctx, sql, append(args, maxSkippedCount)...)
	if err != nil {
		return Skipped{}, false, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return Skipped{}, false, err
	}
	if len(ids) == 0 {
		return Skipped{}, false, nil
	}
	return Skipped{Reason: reason, Count: len(ids), IDs: ids[:min(len(ids), MaxSkippedIDs)]}, true, nil
}
