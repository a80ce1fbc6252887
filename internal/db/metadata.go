package db

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tierq/tierq/jobmeta"
	"github.com/tierq/tierq/tiers"
)

// River's scheduled_at is when the job became available in its current
// queue: the escalation sweep sets it to now() so that a moved job joins the
// back of its new queue. The time the current attempt became due (its
// insert, or the end of a retry's backoff or snooze) is kept across such
// moves in jobmeta.DueAt, in Unix microseconds, next to jobmeta.MovedAt, the
// scheduled_at the move wrote. The pair only counts while scheduled_at still
// equals jobmeta.MovedAt: once River gives the job a new scheduled_at (a
// retry, a snooze), that new time is when the next attempt is due.
//
// A job queued before tierq's keys took the "tierq:" prefix carries the pair
// under the legacy keys (jobmeta.LegacyDueAt, jobmeta.LegacyMovedAt): they
// count when the job has no jobmeta.MovedAt.

// A kept due time counts only when both keys hold JSON numbers written as
// plain non-negative integers of at most 18 digits (PostgreSQL prints a jsonb
// number in that form whatever form it was written in), the moved key
// equals scheduled_at in microseconds, and the due key is not after it.
// Anything else (a string, a fraction, a key in another case, a due time
// after the move) means scheduled_at. DueAtSQL and DueAt apply this one rule;
// TestDueAtAgreesWithDueAtSQL checks that they agree.
const keptMicrosPattern = `^[0-9]{1,18}$`

// DueAtSQL is an SQL expression for when the current attempt of the
// river_job row aliased alias became due (see jobmeta.DueAt): a timestamptz
// that is never after scheduled_at. It reads metadata of any shape without
// failing: an array, a scalar, a key of the wrong type or a number out of
// range all mean "scheduled_at".
func DueAtSQL(alias string) string {
	m := alias + ".metadata"
	return `(CASE WHEN ` + m + ` ? '` + jobmeta.MovedAt + `'
    THEN ` + dueAtSQL(alias, jobmeta.DueAt, jobmeta.MovedAt) + `
    ELSE ` + dueAtSQL(alias, jobmeta.LegacyDueAt, jobmeta.LegacyMovedAt) + ` END)`
}

// dueAtSQL applies the rule to one pair of keys.
func dueAtSQL(alias, dueKey, movedKey string) string {
	m, s := alias+".metadata", alias+".scheduled_at"
	due, moved := m+"->>'"+dueKey+"'", m+"->>'"+movedKey+"'"
	// CASE, not AND, orders the checks: PostgreSQL evaluates a THEN only
	// when its WHEN held, so the casts never see anything but digits.
	return `(CASE WHEN jsonb_typeof(` + m + `) = 'object'
      AND jsonb_typeof(` + m + `->'` + movedKey + `') = 'number' AND ` + moved + ` ~ '` + keptMicrosPattern + `'
      AND jsonb_typeof(` + m + `->'` + dueKey + `') = 'number' AND ` + due + ` ~ '` + keptMicrosPattern + `'
    THEN CASE WHEN (` + moved + `)::numeric = extract(epoch FROM ` + s + `) * 1000000
                AND (` + due + `)::numeric <= (` + moved + `)::numeric
        THEN to_timestamp((` + due + `)::float8 / 1000000)
        ELSE ` + s + ` END
    ELSE ` + s + ` END)`
}

// HasMovedAtSQL is an SQL condition: the river_job row aliased alias carries
// a kept move time under either generation of keys.
func HasMovedAtSQL(alias string) string {
	return alias + `.metadata ?| '{` + jobmeta.MovedAt + `,` + jobmeta.LegacyMovedAt + `}'::text[]`
}

// BasePrioritySQL is an SQL expression for the priority aging computes from
// for the river_job row aliased alias: jobmeta.BasePriority (or its legacy
// key) when it holds 1..4, else the job's priority.
func BasePrioritySQL(alias string) string {
	m := alias + ".metadata"
	return `(CASE WHEN ` + m + `->>'` + jobmeta.BasePriority + `' ~ '^[1-4]$' THEN (` + m + `->>'` + jobmeta.BasePriority + `')::smallint
      WHEN NOT ` + m + ` ? '` + jobmeta.BasePriority + `' AND ` + m + `->>'` + jobmeta.LegacyBasePriority + `' ~ '^[1-4]$' THEN (` + m + `->>'` + jobmeta.LegacyBasePriority + `')::smallint
      ELSE ` + alias + `.priority END)`
}

// WithMoveSQL is an SQL expression for the metadata m (an object) after a
// move: legacy keys renamed (UpgradeKeysSQL), the entries of fields (an SQL
// expression for a JSON object of jobmeta keys) set, and move (an SQL
// expression for a JSON object, see jobmeta.Move) added to jobmeta.Moves,
// keeping the last jobmeta.MaxMoves.
func WithMoveSQL(m, fields, move string) string {
	moves := m + `->'` + jobmeta.Moves + `'`
	return `(` + UpgradeKeysSQL(m) + ` || ` + fields + ` || jsonb_build_object('` + jobmeta.Moves + `',
        (CASE WHEN jsonb_typeof(` + moves + `) = 'array'
              THEN jsonb_path_query_array(` + moves + `, 'lax $[last-` + strconv.Itoa(jobmeta.MaxMoves-2) + ` to last]')
              ELSE '[]'::jsonb END) || jsonb_build_array(` + move + `)))`
}

// UpgradeKeysSQL is an SQL expression for the metadata m (an object) with
// each legacy key renamed to its jobmeta key, unless that key is already
// set.
func UpgradeKeysSQL(m string) string {
	pairs := make([]string, 0, len(legacyRenames))
	for _, r := range legacyRenames {
		pairs = append(pairs, `'`+r[1]+`', `+m+`->'`+r[0]+`'`)
	}
	return `(jsonb_strip_nulls(jsonb_build_object(` + strings.Join(pairs, ", ") + `)) || (` + m + ` - '{` + strings.Join(jobmeta.LegacyKeys(), ",") + `}'::text[]))`
}

// legacyRenames pairs each legacy key with its jobmeta key.
var legacyRenames = [][2]string{
	{jobmeta.LegacyBasePriority, jobmeta.BasePriority},
	{jobmeta.LegacyDueAt, jobmeta.DueAt},
	{jobmeta.LegacyMovedAt, jobmeta.MovedAt},
	{jobmeta.LegacyReplayOf, jobmeta.ReplayOf},
	{jobmeta.LegacyReplayOfJobID, jobmeta.ReplayOfJobID},
}

// DueAt is when the current attempt of a job became due, read from its
// scheduled_at and metadata (as PostgreSQL prints it) by the rule DueAtSQL
// applies in SQL. Metadata that is not an object, or does not carry a
// matching pair, means scheduledAt.
func DueAt(scheduledAt time.Time, metadata []byte) time.Time {
	var m map[string]json.RawMessage
	if json.Unmarshal(metadata, &m) != nil {
		return scheduledAt
	}
	dueKey, movedKey := jobmeta.DueAt, jobmeta.MovedAt
	if _, ok := m[movedKey]; !ok {
		dueKey, movedKey = jobmeta.LegacyDueAt, jobmeta.LegacyMovedAt
	}
	moved, ok1 := keptMicros(m[movedKey])
	due, ok2 := keptMicros(m[dueKey])
	if !ok1 || !ok2 || moved != scheduledAt.UnixMicro() || due > moved {
		return scheduledAt
	}
	return time.UnixMicro(due)
}

// keptMicros reads a kept time: digits only (keptMicrosPattern).
func keptMicros(raw json.RawMessage) (int64, bool) {
	if len(raw) == 0 || len(raw) > 18 {
		return 0, false
	}
	for _, c := range raw {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	return n, err == nil
}

// FiniteSQL is an SQL condition: the timestamptz expression col is neither
// infinity nor -infinity (a hand-written row may hold either; arithmetic on
// it fails).
func FiniteSQL(col string) string {
	return `isfinite(` + col + `)`
}

// IsObjectSQL is an SQL condition: the jsonb column col holds a JSON object.
func IsObjectSQL(col string) string {
	return `jsonb_typeof(` + col + `) = 'object'`
}

// TierSQL is an SQL expression for the tier of the river_job row aliased
// alias: its metadata's jobmeta.Tier when that is one of the four tiers,
// else its args' "tier" when that is (jobs inserted by producers that record
// the tier only there), else 'unknown'. Metadata and args of any shape read
// without failing.
func TierSQL(alias string) string {
	names := make([]string, 0, len(tiers.All()))
	for _, tier := range tiers.All() {
		names = append(names, "'"+tier.String()+"'")
	}
	list := "(" + strings.Join(names, ", ") + ")"
	m, a := alias+".metadata", alias+".args"
	return `(CASE WHEN ` + IsObjectSQL(m) + ` AND ` + m + `->>'` + jobmeta.Tier + `' IN ` + list + ` THEN ` + m + `->>'` + jobmeta.Tier + `'
      WHEN ` + IsObjectSQL(a) + ` AND ` + a + `->>'tier' IN ` + list + ` THEN ` + a + `->>'tier'
      ELSE 'unknown' END)`
}

// PausedSQL is an SQL condition: the queue named by the SQL expression
// queue is paused in River (river_queue.paused_at, River's QueuePause and
// River UI's pause button).
func PausedSQL(queue string) string {
	return `EXISTS (SELECT 1 FROM river_queue AS pq WHERE pq.name = ` + queue + ` AND pq.paused_at IS NOT NULL)`
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
	return `(CASE WHEN NOT ` + IsObjectSQL(alias+".metadata") + ` THEN '` + ReasonMetadataNotObject + `'
                  WHEN NOT ` + FiniteSQL(alias+".scheduled_at") + ` THEN '` + ReasonScheduledAtNotFinite + `' END)`
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
