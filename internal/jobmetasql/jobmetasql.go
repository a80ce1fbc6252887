// Package jobmetasql is package jobmeta's rules in SQL: the expressions and
// conditions by which tierq's statements read and write the "tierq:" keys
// of a river_job row's metadata (when a moved job's attempt became due, the
// priority aging computes from, the tier a job runs for, whether fair share
// holds it, the metadata after a move). The due-time rule has a Go form
// too, DueAt, beside its SQL, and a test checks that the two agree.
//
// Every function takes the alias of a river_job row (or an SQL expression
// for its metadata) and returns SQL text to build a statement with, the way
// tierq's SQL constants are built. River's names come from
// internal/riverschema, jobmeta's keys from package jobmeta.
//
// The package is internal: these fragments are built on River's internal
// schema, which tierq does not hand out (see internal/riverschema); jobmeta's
// keys, which are tierq's contract, are in package jobmeta.
package jobmetasql

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tierq/tierq/internal/riverschema"
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
// equals scheduled_at in microseconds. (A move to another queue or priority
// writes a scheduled_at after the due time; fair share by turns,
// fairshare.Queue.Turns, one before it, the job's turn in line, which may be
// any time back.) Anything else (a string, a fraction, a key in another
// case) means scheduled_at. DueAtSQL and DueAt apply this one rule;
// TestDueAtAgreesWithDueAtSQL checks that they agree.
const keptMicrosPattern = `^[0-9]{1,18}$`

// DueAtSQL is an SQL expression for when the current attempt of the
// river_job row aliased alias became due (see jobmeta.DueAt): a timestamptz.
// It reads metadata of any shape without
// failing: an array, a scalar, a key of the wrong type or a number out of
// range all mean "scheduled_at" (or created_at for a job placed by turns at
// its insert: TurnTag).
func DueAtSQL(alias string) string {
	m := alias + "." + riverschema.JobMetadata
	return `(CASE WHEN ` + m + ` ? '` + jobmeta.MovedAt + `'
    THEN ` + dueAtSQL(alias, jobmeta.DueAt, jobmeta.MovedAt) + `
    ELSE ` + dueAtSQL(alias, jobmeta.LegacyDueAt, jobmeta.LegacyMovedAt) + ` END)`
}

// TurnTag is the River tag fair share by turns (fairshare.Queue.Turns,
// migration 00017) gives a job it placed at its insert, due then: its
// scheduled_at is its turn, before its created_at, and it became due at
// its created_at. (Writing the due time into the metadata instead cost
// every job two new entries in River's GIN index on metadata, for each
// version of its row.)
const TurnTag = "tierq_turn"

// fallbackDueSQL is the due time of a job without a kept pair: its
// created_at when fair share by turns placed it at its insert (TurnTag,
// scheduled_at before created_at), else its scheduled_at.
func fallbackDueSQL(alias string) string {
	s, c := alias+"."+riverschema.JobScheduledAt, alias+"."+riverschema.JobCreatedAt
	return `(CASE WHEN ` + s + ` < ` + c + ` AND '` + TurnTag + `' = ANY (` + alias + `.` + riverschema.JobTags + `) THEN ` + c + ` ELSE ` + s + ` END)`
}

// dueAtSQL applies the rule to one pair of keys.
func dueAtSQL(alias, dueKey, movedKey string) string {
	m, s := alias+"."+riverschema.JobMetadata, alias+"."+riverschema.JobScheduledAt
	due, moved := m+"->>'"+dueKey+"'", m+"->>'"+movedKey+"'"
	// CASE, not AND, orders the checks: PostgreSQL evaluates a THEN only
	// when its WHEN held, so the casts never see anything but digits.
	return `(CASE WHEN jsonb_typeof(` + m + `) = 'object'
      AND jsonb_typeof(` + m + `->'` + movedKey + `') = 'number' AND ` + moved + ` ~ '` + keptMicrosPattern + `'
      AND jsonb_typeof(` + m + `->'` + dueKey + `') = 'number' AND ` + due + ` ~ '` + keptMicrosPattern + `'
    THEN CASE WHEN (` + moved + `)::numeric = extract(epoch FROM ` + s + `) * 1000000
        THEN to_timestamp((` + due + `)::float8 / 1000000)
        ELSE ` + fallbackDueSQL(alias) + ` END
    ELSE ` + fallbackDueSQL(alias) + ` END)`
}

// DueAt is when the current attempt of a job became due, read from its
// scheduled_at, created_at, tags and metadata (as PostgreSQL prints it) by
// the rule DueAtSQL applies in SQL. Metadata that is not an object, or does
// not carry a matching pair, means scheduledAt, or createdAt for a job
// placed by turns at its insert (TurnTag, scheduledAt before createdAt).
func DueAt(scheduledAt, createdAt time.Time, tags []string, metadata []byte) time.Time {
	fallback := scheduledAt
	if scheduledAt.Before(createdAt) && slices.Contains(tags, TurnTag) {
		fallback = createdAt
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(metadata, &m) != nil {
		return fallback
	}
	dueKey, movedKey := jobmeta.DueAt, jobmeta.MovedAt
	if _, ok := m[movedKey]; !ok {
		dueKey, movedKey = jobmeta.LegacyDueAt, jobmeta.LegacyMovedAt
	}
	moved, ok1 := keptMicros(m[movedKey])
	due, ok2 := keptMicros(m[dueKey])
	if !ok1 || !ok2 || moved != scheduledAt.UnixMicro() {
		return fallback
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

// HasMovedAtSQL is an SQL condition: the river_job row aliased alias carries
// a kept move time under either generation of keys.
func HasMovedAtSQL(alias string) string {
	return alias + `.` + riverschema.JobMetadata + ` ?| '{` + jobmeta.MovedAt + `,` + jobmeta.LegacyMovedAt + `}'::text[]`
}

// BasePrioritySQL is an SQL expression for the priority aging computes from
// for the river_job row aliased alias: jobmeta.BasePriority (or its legacy
// key) when it holds 1..4, else the job's priority.
func BasePrioritySQL(alias string) string {
	m := alias + "." + riverschema.JobMetadata
	return `(CASE WHEN ` + m + `->>'` + jobmeta.BasePriority + `' ~ '^[1-4]$' THEN (` + m + `->>'` + jobmeta.BasePriority + `')::smallint
      WHEN NOT ` + m + ` ? '` + jobmeta.BasePriority + `' AND ` + m + `->>'` + jobmeta.LegacyBasePriority + `' ~ '^[1-4]$' THEN (` + m + `->>'` + jobmeta.LegacyBasePriority + `')::smallint
      ELSE ` + alias + `.` + riverschema.JobPriority + ` END)`
}

// WithMoveSQL is an SQL expression for the metadata m (an object) after a
// move: legacy keys renamed (UpgradeKeysSQL), fair share by turns' mark of a
// job not due yet dropped (a moved job stays where the move puts it), the
// entries of fields (an SQL
// expression for a JSON object of jobmeta keys) set, and move (an SQL
// expression for a JSON object, see jobmeta.Move) added to jobmeta.Moves,
// keeping the last jobmeta.MaxMoves.
func WithMoveSQL(m, fields, move string) string {
	moves := m + `->'` + jobmeta.Moves + `'`
	return `((` + UpgradeKeysSQL(m) + ` - '` + jobmeta.TurnDue + `') || ` + fields + ` || jsonb_build_object('` + jobmeta.Moves + `',
        (CASE WHEN jsonb_typeof(` + moves + `) = 'array'
              THEN jsonb_path_query_array(` + moves + `, 'lax $[last-` + strconv.Itoa(jobmeta.MaxMoves-2) + ` to last]')
              ELSE '[]'::jsonb END) || jsonb_build_array(` + move + `)))`
}

// KeptDueSQL is the metadata entries (for jsonb_build_object) that keep a
// job's due time across a move: jobmeta.DueAt, the timestamptz expression
// dueAt, and jobmeta.MovedAt, the timestamptz expression movedAt (the
// scheduled_at the move writes), both in Unix microseconds, as DueAtSQL and
// DueAt read them back.
func KeptDueSQL(dueAt, movedAt string) string {
	return `'` + jobmeta.DueAt + `', (extract(epoch FROM ` + dueAt + `) * 1000000)::bigint,
            '` + jobmeta.MovedAt + `', (extract(epoch FROM ` + movedAt + `) * 1000000)::bigint`
}

// Move is a jobmeta.Move made at now(), as SQL: each field is an SQL
// expression for that field of jobmeta.Move. Actor and Reason are left out
// of the move when "".
type Move struct {
	Kind, FromQueue, ToQueue, FromPriority, ToPriority string
	Actor, Reason                                      string
}

// SQL is an SQL expression for the move's JSON object, under jobmeta.Move's
// JSON names: the move argument of WithMoveSQL.
func (m Move) SQL() string {
	out := `jsonb_build_object('kind', ` + m.Kind + `, 'at', now(), 'from_queue', ` + m.FromQueue + `, 'to_queue', ` + m.ToQueue + `,
            'from_priority', ` + m.FromPriority + `, 'to_priority', ` + m.ToPriority
	if m.Actor != "" {
		out += `, 'actor', ` + m.Actor
	}
	if m.Reason != "" {
		out += `, 'reason', ` + m.Reason
	}
	return out + `)`
}

// UpgradeKeysSQL is an SQL expression for the metadata m (an object) with
// each legacy key renamed to its jobmeta key, unless that key is already
// set.
func UpgradeKeysSQL(m string) string {
	renames := legacyRenames()
	pairs := make([]string, 0, len(renames))
	for _, r := range renames {
		pairs = append(pairs, `'`+r[1]+`', `+m+`->'`+r[0]+`'`)
	}
	return `(jsonb_strip_nulls(jsonb_build_object(` + strings.Join(pairs, ", ") + `)) || (` + m + ` - '{` + strings.Join(jobmeta.LegacyKeys(), ",") + `}'::text[]))`
}

// legacyRenames pairs each legacy key with its jobmeta key.
func legacyRenames() [][2]string {
	return [][2]string{
		{jobmeta.LegacyBasePriority, jobmeta.BasePriority},
		{jobmeta.LegacyDueAt, jobmeta.DueAt},
		{jobmeta.LegacyMovedAt, jobmeta.MovedAt},
		{jobmeta.LegacyReplayOf, jobmeta.ReplayOf},
		{jobmeta.LegacyReplayOfJobID, jobmeta.ReplayOfJobID},
	}
}

// IsObjectSQL is an SQL condition: the jsonb column col holds a JSON object
// (a job whose metadata is not one is never rewritten: see jobmeta).
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
	m, a := alias+"."+riverschema.JobMetadata, alias+"."+riverschema.JobArgs
	return `(CASE WHEN ` + IsObjectSQL(m) + ` AND ` + m + `->>'` + jobmeta.Tier + `' IN ` + list + ` THEN ` + m + `->>'` + jobmeta.Tier + `'
      WHEN ` + IsObjectSQL(a) + ` AND ` + a + `->>'tier' IN ` + list + ` THEN ` + a + `->>'tier'
      ELSE 'unknown' END)`
}

// TenantKeySQL is the key of the tenant of the river_job row aliased alias,
// as package fairshare and the operator console group and find tenants by
// it: its metadata's jobmeta.Tenant, or the empty string for a job without
// one (they count as one tenant). A tenant id longer than
// jobmeta.MaxTenantBytes (a row written without tierq's producers, which
// refuse one) is keyed by its first jobmeta.MaxTenantBytes characters,
// "#md5:" and the md5 of the whole: bounded (at most 837 bytes: an index
// entry or a sort key of unbounded text failed whole fair-share passes),
// longer than jobmeta.MaxTenantBytes bytes so never another tenant's id,
// and collision-free in practice (two ids must share both their first 200
// characters and their md5). river_job_tierq_held_idx is built on this
// exact expression (migration 00009): a statement that compares it, with
// HeldSQL and the queue, reads that index.
func TenantKeySQL(alias string) string {
	return TenantKeyOfSQL(alias + `.` + riverschema.JobMetadata + `->>'` + jobmeta.Tenant + `'`)
}

// TenantKeyOfSQL is TenantKeySQL's key of the tenant id the SQL text
// expression t gives (NULL: no tenant): how a statement keys a tenant it
// is asked for, a parameter such as "$1::text", to compare it with the key
// of a row (dead_letter_jobs.tenant is that key, migration 00016).
func TenantKeyOfSQL(t string) string {
	n := strconv.Itoa(jobmeta.MaxTenantBytes)
	return `(CASE WHEN octet_length(coalesce(` + t + `, '')) <= ` + n + `
             THEN coalesce(` + t + `, '')
             ELSE left(` + t + `, ` + n + `) || '#md5:' || md5(` + t + `) END)`
}

// HeldSQL is an SQL condition: the river_job row aliased alias is held by
// fair share (pending, with jobmeta.HeldAt). It is package fairshare's
// condition, character for character: the predicate of
// river_job_tierq_held_idx (which a query with this condition implies, so
// the index serves it) and an object (a pending row whose metadata is the
// JSON string "tierq:held_at" matches the predicate and is no held job).
func HeldSQL(alias string) string {
	m := alias + "." + riverschema.JobMetadata
	return alias + `.` + riverschema.JobState + ` = '` + riverschema.StatePending + `' AND ` + m + ` ? '` + jobmeta.HeldAt + `' AND ` + IsObjectSQL(m)
}
