package db

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/tierq/tierq/internal/jobmetasql"
	"github.com/tierq/tierq/internal/riverschema"
)

// FiniteSQL is an SQL condition: the timestamptz expression col is neither
// infinity nor -infinity (a hand-written row may hold either; arithmetic on
// it fails).
func FiniteSQL(col string) string {
	return `isfinite(` + col + `)`
}

// PausedSQL is an SQL condition: the queue named by the SQL expression
// queue is paused in River (river_queue.paused_at, River's QueuePause and
// River UI's pause button).
func PausedSQL(queue string) string {
	return `EXISTS (SELECT 1 FROM ` + riverschema.QueueTable + ` AS pq WHERE pq.` + riverschema.QueueName + ` = ` + queue +
		` AND pq.` + riverschema.QueuePausedAt + ` IS NOT NULL)`
}

// Reasons a sweep skips a row.
const (
	// ReasonMetadataNotObject: the job's metadata is an array, a string, a
	// number, a boolean or null, so tierq cannot keep its bookkeeping there.
	ReasonMetadataNotObject = "metadata_not_object"
	// ReasonScheduledAtNotFinite: the job's scheduled_at is infinity or
	// -infinity, so it has no wait to compute.
	ReasonScheduledAtNotFinite = "scheduled_at_not_finite"
)

// SkipReasonSQL is an SQL expression naming why a sweep cannot change the
// river_job row aliased alias (one of the Reason constants), or NULL when
// it can.
func SkipReasonSQL(alias string) string {
	return `(CASE WHEN NOT ` + jobmetasql.IsObjectSQL(alias+"."+riverschema.JobMetadata) + ` THEN '` + ReasonMetadataNotObject + `'
                  WHEN NOT ` + FiniteSQL(alias+"."+riverschema.JobScheduledAt) + ` THEN '` + ReasonScheduledAtNotFinite + `' END)`
}

// MaxSkippedIDs is the most ids a Skipped keeps (and a log line shows).
const MaxSkippedIDs = 100

// maxSkippedCount bounds the rows one FindSkipped reads.
const maxSkippedCount = 10000

// Skipped are rows a sweep found but left alone for one reason: how many
// (counting at most 10000 in all) and the first MaxSkippedIDs ids.
type Skipped struct {
	Reason string
	Count  int
	IDs    []int64
}

// FindSkipped runs sql, a query returning (id, reason) rows ordered by id
// whose last parameter is a limit, and groups them by reason, in the order
// the reasons first appear.
//
// The query is planned for its arguments at every execution (pgx's unnamed
// statement), never with a cached generic plan: generic, ORDER BY id LIMIT
// over "the available jobs of these queues" read river_job in id order,
// all of it when nothing is skipped (14–34 ms over a 50,000-job backlog,
// against 0.05–0.16 ms; aging's TestSweepsArePlannedForTheirArguments).
func FindSkipped(ctx context.Context, q Querier, sql string, args ...any) ([]Skipped, error) {
	rows, err := q.Query(ctx, sql, append([]any{pgx.QueryExecModeCacheDescribe}, append(args, maxSkippedCount)...)...)
	if err != nil {
		return nil, err
	}
	var (
		id     int64
		reason string
		out    []Skipped
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &reason}, func() error {
		out = AddSkipped(out, Skipped{Reason: reason, Count: 1, IDs: []int64{id}})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// AddSkipped adds s to the entry of its reason in all (a new one when none),
// keeping at most MaxSkippedIDs ids.
func AddSkipped(all []Skipped, s Skipped) []Skipped {
	for i := range all {
		if all[i].Reason == s.Reason {
			all[i].Count += s.Count
			room := max(0, MaxSkippedIDs-len(all[i].IDs))
			all[i].IDs = append(all[i].IDs, s.IDs[:min(room, len(s.IDs))]...)
			return all
		}
	}
	s.IDs = s.IDs[:min(len(s.IDs), MaxSkippedIDs)]
	return append(all, s)
}
