// Package jobmeta names the keys tierq keeps in a River job's metadata, so
// that a job explains itself wherever River shows it (River UI's job page,
// `river_job.metadata` in psql): the tier and tenant it runs for, where it
// was first inserted, and the last moves tierq made to it.
//
// Every key starts with Prefix ("tierq:"), as River's own keys start with
// "river:"; tierq reads and writes no other key of a job's metadata. The
// contract for producers in other languages is the same: a job they insert
// with Tier and Tenant set is shown and counted like one inserted here.
//
// A job whose metadata is not a JSON object (written by hand, or by another
// tool) is never rewritten: tierq moves it when asked and leaves its
// metadata as it is.
package jobmeta

import (
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/tierq/tierq/tiers"
)

// Prefix starts every key tierq keeps in a job's metadata.
const Prefix = "tierq:"

// Keys of a job's metadata. The first four are written at insert (For);
// the rest by tierq's own moves.
const (
	// Tier is the billing tier the job runs for ("free", "pro",
	// "pro_plus", "enterprise"). A dedup upgrade rewrites it.
	Tier = Prefix + "tier"
	// Tenant is who the job runs for: the user id of the request. A
	// tenant id follows one rule (CheckTenant): at most MaxTenantBytes
	// bytes of UTF-8, no control characters.
	Tenant = Prefix + "tenant"
	// OriginalQueue and OriginalPriority are where the job was inserted,
	// before aging, escalation or a dedup upgrade moved it.
	OriginalQueue    = Prefix + "original_queue"
	OriginalPriority = Prefix + "original_priority"

	// Moves is the job's last moves (at most MaxMoves, oldest first): a JSON
	// array of Move objects.
	Moves = Prefix + "moves"

	// BasePriority is the priority the job had before aging first improved
	// it. Aging computes from it, so a sweep run twice gives the same
	// result; an escalation resets it.
	BasePriority = Prefix + "base_priority"
	// DueAt and MovedAt are kept by the escalation sweep, which gives a
	// moved job a new scheduled_at: DueAt is when the job's current attempt
	// became due, MovedAt the scheduled_at the move wrote, both in Unix
	// microseconds. The pair counts only while scheduled_at still equals
	// MovedAt (internal/jobmetasql.DueAtSQL has the whole rule).
	DueAt   = Prefix + "due_at"
	MovedAt = Prefix + "moved_at"

	// HeldAt is set while fair share holds the job back (River state
	// pending): when its tenant's window was full. Package fairshare writes
	// it and removes it when it admits the job; a pending job without it is
	// someone else's and is never admitted by tierq.
	HeldAt = Prefix + "held_at"
	// TurnDue marks an available job that fair share by turns
	// (fairshare.Queue.Turns) left where River put it because it was not
	// due yet; the placing loop gives it its turn once due and drops the
	// mark, and so does a move to another queue. Its value is true.
	TurnDue = Prefix + "turn_due"

	// Capped is the service whose concurrency cap the job counts against
	// (its tenant's MaxRunning, package limits): written by the database's
	// cap trigger (migration 00013) when it lets the job become available
	// or holds it, and kept while the job is available or running, when it
	// counts. CapHeldAt is set, beside HeldAt, while the job is held because
	// its tenant was at its cap, not because of its fair-share window; fair
	// share admits it when the tenant has room, and removes both marks of a
	// hold.
	Capped    = Prefix + "capped"
	CapHeldAt = Prefix + "cap_held_at"

	// Rated is the service whose rate limit the job was charged against
	// (its tenant's Rate, package limits): written, beside Capped, by the
	// database's rate trigger (migration 00015) when it takes a token for
	// the job or holds it. RateHeldAt is set, beside HeldAt, while the job
	// is held because its tenant had no token (or a job already waiting to
	// start); fair share admits it when the tenant has a token, and removes
	// both marks of a hold.
	Rated      = Prefix + "rated"
	RateHeldAt = Prefix + "rate_held_at"

	// LentFrom is the queue a job was lent from: a free job moved into its
	// service's priority queue to use an idle paid worker (package
	// fairshare), with its priority there the lowest; LentPriority is the
	// priority it had, given back if it returns unstarted. LentFrom stays
	// after the job has run, as a record.
	LentFrom     = Prefix + "lent_from"
	LentPriority = Prefix + "lent_priority"

	// ReplayOf is the dead letter (dead_letter_jobs.id) a replayed job was
	// made from, and ReplayOfJobID the id of the discarded job it held.
	ReplayOf      = Prefix + "replay_of"
	ReplayOfJobID = Prefix + "replay_of_job_id"
)

// Legacy keys: tierq's first releases wrote these. Jobs queued before an upgrade
// still carry them: tierq reads them when the key above is missing, and a
// move that rewrites the job's metadata drops them.
const (
	LegacyBasePriority  = "tierq_base_priority"
	LegacyDueAt         = "tierq_due_at"
	LegacyMovedAt       = "tierq_moved_at"
	LegacyReplayOf      = "tierq_replay_of"
	LegacyReplayOfJobID = "tierq_replay_of_job_id"
)

// LegacyKeys lists every legacy key.
func LegacyKeys() []string {
	return []string{LegacyBasePriority, LegacyDueAt, LegacyMovedAt, LegacyReplayOf, LegacyReplayOfJobID}
}

// MaxMoves is how many moves a job's metadata keeps: the oldest go first.
const MaxMoves = 10

// Kinds of Move.
const (
	// MoveAging: the aging sweep improved the job's priority in its queue.
	MoveAging = "aging"
	// MoveEscalation: the escalation sweep or an operator moved the job to
	// a better queue or priority (Actor says who).
	MoveEscalation = "escalation"
	// MoveDedup: a duplicate of the job was inserted for a better tier, and
	// the job moved where that insert would have gone.
	MoveDedup = "dedup"
	// MoveReplay: the job was made from a dead letter (DeadLetterID).
	MoveReplay = "replay"
)

// Move is one move tierq made to a job.
type Move struct {
	Kind         string    `json:"kind"`
	At           time.Time `json:"at"`
	FromQueue    string    `json:"from_queue,omitempty"`
	ToQueue      string    `json:"to_queue"`
	FromPriority int       `json:"from_priority,omitempty"`
	ToPriority   int       `json:"to_priority"`
	// Actor is who asked for an escalation: "scheduler", "dedup", or the
	// operator's name.
	Actor string `json:"actor,omitempty"`
	// Reason is why, cut to MaxReasonChars.
	Reason string `json:"reason,omitempty"`
	// DeadLetterID and FromJobID are where a replayed job came from.
	DeadLetterID int64 `json:"dead_letter_id,omitempty"`
	FromJobID    int64 `json:"from_job_id,omitempty"`
}

// MaxReasonChars bounds a move's reason in metadata, in characters (the
// audit table keeps the whole reason).
const MaxReasonChars = 200

// Insert is what tierq records on a job when it is inserted.
type Insert struct {
	// Tier is the tier name; empty leaves the key out (an unknown tier).
	Tier string
	// Tenant is who the job is for; empty leaves the key out. JSON does
	// not check it (CheckTenant does): a tenant that is not valid UTF-8 is
	// written with its bytes as they are, not replaced.
	Tenant string
	// Queue and Priority are where the job is inserted.
	Queue    string
	Priority int
}

// JSON is the metadata of a new job: a JSON object with Tier, Tenant,
// OriginalQueue and OriginalPriority.
func (in Insert) JSON() []byte {
	buf := make([]byte, 0, 128)
	buf = append(buf, '{')
	if in.Tier != "" {
		buf = appendString(buf, Tier, in.Tier)
		buf = append(buf, ',')
	}
	if in.Tenant != "" {
		buf = appendString(buf, Tenant, in.Tenant)
		buf = append(buf, ',')
	}
	buf = appendString(buf, OriginalQueue, in.Queue)
	buf = append(buf, ',')
	buf = appendKey(buf, OriginalPriority)
	buf = strconv.AppendInt(buf, int64(in.Priority), 10)
	return append(buf, '}')
}

func appendKey(buf []byte, key string) []byte {
	buf = appendJSONString(buf, key)
	return append(buf, ':')
}

func appendString(buf []byte, key, value string) []byte {
	return appendJSONString(appendKey(buf, key), value)
}

// appendJSONString appends s as a JSON string. Plain ASCII (tier, queue and
// key names, most tenant ids) is copied; other valid UTF-8 goes through
// encoding/json. A string that is not valid UTF-8 keeps its bytes
// (appendRawJSONString): encoding/json would replace them with U+FFFD and
// record another tenant than the producer's, where this way the insert is
// refused, by producer.TenantHook (jobmeta.CheckTenantIn) or by PostgreSQL.
func appendJSONString(buf []byte, s string) []byte {
	for i := range len(s) {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			if !utf8.ValidString(s) {
				return appendRawJSONString(buf, s)
			}
			b, _ := json.Marshal(s) //nolint:errchkjson // a string always marshals
			return append(buf, b...)
		}
	}
	buf = append(buf, '"')
	buf = append(buf, s...)
	return append(buf, '"')
}

// appendRawJSONString appends s as a JSON string with '"', '\\' and the C0
// control characters escaped and every other byte as it is.
func appendRawJSONString(buf []byte, s string) []byte {
	const hex = "0123456789abcdef"
	buf = append(buf, '"')
	for i := range len(s) {
		switch c := s[i]; {
		case c == '"', c == '\\':
			buf = append(buf, '\\', c)
		case c < 0x20:
			buf = append(buf, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			buf = append(buf, c)
		}
	}
	return append(buf, '"')
}

// TierOf is the tier a job runs for: its metadata's Tier when that names a
// tier, else its args' "tier" field when that does (jobs inserted by
// producers that record the tier only in args, as tierq's first releases
// did), else false. Metadata and args of any shape read without failing.
func TierOf(metadata, args []byte) (tiers.Tier, bool) {
	if t, ok := tierAt(metadata, Tier); ok {
		return t, true
	}
	return tierAt(args, "tier")
}

// tierAt parses the string at key of the JSON object doc as a tier. It
// runs for every job a worker starts (the metrics hook), so it reads the one
// key with gjson instead of decoding the whole object.
func tierAt(doc []byte, key string) (tiers.Tier, bool) {
	if !gjson.ValidBytes(doc) {
		return 0, false
	}
	root := gjson.ParseBytes(doc)
	if !root.IsObject() {
		return 0, false
	}
	v := root.Get(gjson.Escape(key))
	if v.Type != gjson.String {
		return 0, false
	}
	t, err := tiers.Parse(v.Str)
	return t, err == nil
}

// Info is what a job's metadata says about it.
type Info struct {
	Tier             string
	Tenant           string
	OriginalQueue    string
	OriginalPriority int
	Moves            []Move
	// BasePriority is 0 when the job has none (aging never touched it).
	BasePriority int
	// ReplayOf and ReplayOfJobID are 0 unless the job was replayed.
	ReplayOf      int64
	ReplayOfJobID int64
}

// Read reads a job's metadata. Metadata that is not a JSON object, and keys
// of the wrong type, read as absent; legacy keys count when the new key is
// missing.
func Read(metadata []byte) Info {
	var m map[string]json.RawMessage
	if json.Unmarshal(metadata, &m) != nil {
		return Info{}
	}
	var info Info
	readInto(m, Tier, "", &info.Tier)
	readInto(m, Tenant, "", &info.Tenant)
	readInto(m, OriginalQueue, "", &info.OriginalQueue)
	readInto(m, OriginalPriority, "", &info.OriginalPriority)
	readInto(m, BasePriority, LegacyBasePriority, &info.BasePriority)
	readInto(m, ReplayOf, LegacyReplayOf, &info.ReplayOf)
	readInto(m, ReplayOfJobID, LegacyReplayOfJobID, &info.ReplayOfJobID)
	var moves []json.RawMessage
	if json.Unmarshal(m[Moves], &moves) == nil {
		for _, raw := range moves {
			var mv Move
			if json.Unmarshal(raw, &mv) == nil {
				info.Moves = append(info.Moves, mv)
			}
		}
	}
	return info
}

// readInto decodes m[key], or m[legacy] when key is missing, into v; a value
// of the wrong type leaves v as it is.
func readInto[T any](m map[string]json.RawMessage, key, legacy string, v *T) {
	raw, ok := m[key]
	if !ok && legacy != "" {
		raw = m[legacy]
	}
	var out T
	if len(raw) > 0 && json.Unmarshal(raw, &out) == nil {
		*v = out
	}
}
