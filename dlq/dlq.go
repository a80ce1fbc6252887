package dlq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"

	"github.com/tierq/tierq/internal/db"
	"github.com/tierq/tierq/internal/jobmetasql"
)

var (
	// ErrNotFound: no dead letter has the id (HTTP 404).
	ErrNotFound = errors.New("dead letter not found")
	// ErrAlreadyReplayed: the dead letter was replayed before and the
	// request did not force another replay (HTTP 409).
	ErrAlreadyReplayed = errors.New("dead letter already replayed")
	// ErrInvalid: the request itself is wrong (HTTP 400).
	ErrInvalid = errors.New("invalid dead-letter request")
	// ErrDuplicate: a job in a state its uniqueness counts (queued or
	// running for tierq's producer.UniqueOpts; River's default also counts
	// completed) holds the dead letter's unique key, so replaying it would
	// run the same job twice (HTTP 409).
	ErrDuplicate = errors.New("dead letter duplicates a live job")
)

// MaxListLimit is the most rows one List returns.
const MaxListLimit = 1000

// maxNameLen bounds queue and kind filters (River's limit for both is 128).
const maxNameLen = 128

// DeadLetter is one row of dead_letter_jobs: a River job that was discarded,
// as it was at that moment, and whether it has been replayed.
type DeadLetter struct {
	ID          int64                    `json:"id"`
	JobID       int64                    `json:"job_id"`
	Kind        string                   `json:"kind"`
	Queue       string                   `json:"queue"`
	Priority    int                      `json:"priority"`
	Args        json.RawMessage          `json:"args"`
	Metadata    json.RawMessage          `json:"metadata"`
	Tags        []string                 `json:"tags"`
	Errors      []rivertype.AttemptError `json:"errors"`
	Attempt     int                      `json:"attempt"`
	MaxAttempts int                      `json:"max_attempts"`
	CreatedAt   time.Time                `json:"created_at"`
	FinalizedAt *time.Time               `json:"finalized_at"`
	MovedAt     time.Time                `json:"moved_at"`
	ReplayedAt  *time.Time               `json:"replayed_at"`
	ReplayJobID *int64                   `json:"replay_job_id"`
	ReplayedBy  *string                  `json:"replayed_by"`
	// Tier is the job's tier: its metadata's, else its args', else
	// "unknown" (the column dead_letter_jobs.tier, what Filter.Tier
	// matches).
	Tier string `json:"tier"`
	// Tenant is the job's tenant key (dead_letter_jobs.tenant, what
	// Filter.Tenant matches): its metadata's tenant id, "" when it names
	// none, and an id longer than 200 bytes (written without tierq's
	// producers) as its first 200 characters, "#md5:" and the md5 of the
	// whole. The whole id stays in Metadata.
	Tenant string `json:"tenant"`
}

// LastError is the error of the last attempt River recorded ("" when none).
func (d *DeadLetter) LastError() string {
	if len(d.Errors) == 0 {
		return ""
	}
	return d.Errors[len(d.Errors)-1].Error
}

// columns are DeadLetter's fields in order, for RowToStructByPos.
const columns = `id, job_id, kind, queue, priority, args, metadata, tags, errors, attempt, max_attempts,
    created_at, finalized_at, moved_at, replayed_at, replay_job_id, replayed_by, tier, tenant`

// Filter selects dead letters. The zero Filter selects every row.
type Filter struct {
	// Queue and Kind match exactly when not empty.
	Queue string
	Kind  string
	// Since keeps rows moved into the table at most this long ago (0: any).
	Since time.Duration
	// Pending keeps only rows not replayed yet.
	Pending bool
	// Replayed keeps only rows replayed already (not with Pending).
	Replayed bool
	// Tier keeps rows of this tier: "free", "pro", "pro_plus",
	// "enterprise", or "unknown" for a job that names none ("": any). A
	// row's tier is its metadata's, else its args' (jobmeta.TierOf), in
	// the column dead_letter_jobs.tier (migration 00016).
	Tier string
	// Tenant keeps rows of this tenant id, compared by fair share's tenant
	// key (jobmetasql.TenantKeySQL: an id longer than 200 bytes matches by
	// its first 200 characters and its md5), at most MaxTenantFilterLen
	// bytes ("": any).
	Tenant string
	// ErrorContains keeps rows one of whose attempts' errors contains it,
	// ignoring case (at most maxErrorTextLen bytes; "": any). No index
	// serves it: it reads the rows the other conditions leave.
	ErrorContains string
}

// maxErrorTextLen bounds Filter.ErrorContains.
const maxErrorTextLen = 1000

// MaxTenantFilterLen bounds Filter.Tenant, in bytes: far above the 200
// bytes tierq's producers allow, so that a row written by hand with a
// longer tenant id can still be found by it.
const MaxTenantFilterLen = 64 << 10

// filterTiers are the values Filter.Tier takes: the four tiers, and "unknown".
var filterTiers = []string{"free", "pro", "pro_plus", "enterprise", UnknownTier}

// UnknownTier is the tier of a dead letter whose job names none.
const UnknownTier = "unknown"

// Validate reports what is wrong with the filter, as an ErrInvalid.
func (f Filter) Validate() error {
	var problems []string
	if len(f.Queue) > maxNameLen || len(f.Kind) > maxNameLen {
		problems = append(problems, fmt.Sprintf("queue and kind are at most %d bytes", maxNameLen))
	}
	if f.Since < 0 {
		problems = append(problems, "since must not be negative")
	}
	if f.Pending && f.Replayed {
		problems = append(problems, "pending and replayed exclude each other")
	}
	if f.Tier != "" && !slices.Contains(filterTiers, f.Tier) {
		problems = append(problems, "the tier is one of free, pro, pro_plus, enterprise or unknown")
	}
	if len(f.Tenant) > MaxTenantFilterLen {
		problems = append(problems, fmt.Sprintf("the tenant is at most %d bytes", MaxTenantFilterLen))
	} else if !utf8.ValidString(f.Tenant) || strings.IndexByte(f.Tenant, 0) >= 0 {
		problems = append(problems, "the tenant must be UTF-8 without NUL")
	}
	if len(f.ErrorContains) > maxErrorTextLen {
		problems = append(problems, fmt.Sprintf("the error text is at most %d bytes", maxErrorTextLen))
	}
	return invalid(problems)
}

func invalid(problems []string) error {
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrInvalid, strings.Join(problems, "; "))
}

// where builds the filter's conditions, numbering parameters from len(args)+1.
// Only placeholders are added to the SQL; every value goes into args.
func (f Filter) where(args []any) (string, []any) {
	var conds []string
	add := func(cond string, v any) {
		args = append(args, v)
		conds = append(conds, strings.ReplaceAll(cond, "$?", "$"+strconv.Itoa(len(args))))
	}
	if f.Queue != "" {
		add("queue = $?", f.Queue)
	}
	if f.Kind != "" {
		add("kind = $?", f.Kind)
	}
	if f.Tier != "" {
		add("tier = $?", f.Tier)
	}
	if f.Tenant != "" {
		add("tenant = "+jobmetasql.TenantKeyOfSQL("$?::text"), f.Tenant)
	}
	if f.Since > 0 {
		add("moved_at >= now() - make_interval(secs => $?)", f.Since.Seconds())
	}
	if f.Pending {
		conds = append(conds, "replayed_at IS NULL")
	}
	if f.Replayed {
		conds = append(conds, "replayed_at IS NOT NULL")
	}
	if f.ErrorContains != "" {
		// errors is River's array of attempt errors; a row written by hand
		// with something else there matches nothing rather than failing.
		add(`EXISTS (SELECT 1 FROM jsonb_array_elements(CASE WHEN jsonb_typeof(errors) = 'array' THEN errors ELSE '[]' END) AS e
		    WHERE strpos(lower(e->>'error'), lower($?)) > 0)`, f.ErrorContains)
	}
	if len(conds) == 0 {
		return "true", args
	}
	return strings.Join(conds, " AND "), args
}

// Page is where a List starts and how many rows it returns.
type Page struct {
	// BeforeID continues a listing: only rows with a smaller id (0: from the
	// newest).
	BeforeID int64
	// Limit is 1..MaxListLimit.
	Limit int
}

// listSQL is List's statement and its arguments. Every filter but the
// error text has an index on (its column, id) that serves the order and
// the cursor: queue, kind, tier, tenant.
func listSQL(f Filter, page Page) (string, []any) {
	where, args := f.where(nil)
	if page.BeforeID > 0 {
		args = append(args, page.BeforeID)
		where += " AND id < $" + strconv.Itoa(len(args))
	}
	args = append(args, page.Limit)
	return `SELECT ` + columns + ` FROM dead_letter_jobs WHERE ` + where +
		` ORDER BY id DESC LIMIT $` + strconv.Itoa(len(args)), args
}

// List returns the dead letters matching f, newest (highest id) first.
func List(ctx context.Context, q db.Querier, f Filter, page Page) ([]DeadLetter, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	if page.Limit < 1 || page.Limit > MaxListLimit || page.BeforeID < 0 {
		return nil, fmt.Errorf("%w: limit must be 1..%d and the cursor not negative", ErrInvalid, MaxListLimit)
	}
	sql, args := listSQL(f, page)
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[DeadLetter])
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	return out, nil
}

// Get returns one dead letter, or ErrNotFound.
func Get(ctx context.Context, q db.Querier, id int64) (DeadLetter, error) {
	rows, err := q.Query(ctx, `SELECT `+columns+` FROM dead_letter_jobs WHERE id = $1`, id)
	if err != nil {
		return DeadLetter{}, fmt.Errorf("get dead letter %d: %w", id, err)
	}
	d, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByPos[DeadLetter])
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return DeadLetter{}, fmt.Errorf("%w: id %d", ErrNotFound, id)
	case err != nil:
		return DeadLetter{}, fmt.Errorf("get dead letter %d: %w", id, err)
	}
	return d, nil
}

// GetByJobID returns the dead letter of the River job jobID (DeadLetter's
// JobID: a job is drained into at most one), or ErrNotFound when that job
// has not been drained.
func GetByJobID(ctx context.Context, q db.Querier, jobID int64) (DeadLetter, error) {
	rows, err := q.Query(ctx, `SELECT `+columns+` FROM dead_letter_jobs WHERE job_id = $1`, jobID)
	if err != nil {
		return DeadLetter{}, fmt.Errorf("get dead letter of job %d: %w", jobID, err)
	}
	d, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByPos[DeadLetter])
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return DeadLetter{}, fmt.Errorf("%w: job id %d", ErrNotFound, jobID)
	case err != nil:
		return DeadLetter{}, fmt.Errorf("get dead letter of job %d: %w", jobID, err)
	}
	return d, nil
}

// Depth is how many dead letters wait for an operator: rows not replayed.
type Depth struct {
	Total   int            `json:"depth"`
	ByQueue map[string]int `json:"queues"`
}

// PendingDepth counts the rows not replayed yet, per queue (a scan of the
// partial index dead_letter_jobs_pending_queue_idx).
func PendingDepth(ctx context.Context, q db.Querier) (Depth, error) {
	rows, err := q.Query(ctx, `SELECT queue, count(*) FROM dead_letter_jobs WHERE replayed_at IS NULL GROUP BY queue`)
	if err != nil {
		return Depth{}, fmt.Errorf("dead-letter depth: %w", err)
	}
	d := Depth{ByQueue: map[string]int{}}
	var (
		queue string
		n     int
	)
	_, err = pgx.ForEachRow(rows, []any{&queue, &n}, func() error {
		d.ByQueue[queue] = n
		d.Total += n
		return nil
	})
	if err != nil {
		return Depth{}, fmt.Errorf("dead-letter depth: %w", err)
	}
	return d, nil
}

// PurgeRequest says which dead letters Purge deletes.
type PurgeRequest struct {
	// OlderThan deletes rows moved into the table more than this long ago
	// (0: every row).
	OlderThan time.Duration
	// ReplayedOnly keeps rows that were never replayed.
	ReplayedOnly bool
	// Batch is the most rows one statement deletes.
	Batch int
}

// purgeSQL deletes one batch, oldest first, over the moved_at index.
const purgeSQL = `
WITH doomed AS (
    SELECT id FROM dead_letter_jobs
    WHERE moved_at < now() - make_interval(secs => $1) AND (NOT $2 OR replayed_at IS NOT NULL)
    ORDER BY moved_at
    LIMIT $3
    FOR UPDATE SKIP LOCKED
)
DELETE FROM dead_letter_jobs AS d USING doomed WHERE d.id = doomed.id`

// Purge deletes the dead letters req selects, one batch per statement,
// calling progress (when not nil) with each batch's count, and returns how
// many it deleted. A purged dead letter is gone for good.
func Purge(ctx context.Context, q db.Querier, req PurgeRequest, progress func(deleted int)) (int, error) {
	if req.OlderThan < 0 || req.Batch < 1 {
		return 0, fmt.Errorf("%w: older-than must not be negative and the batch must be positive", ErrInvalid)
	}
	total := 0
	for {
		tag, err := q.Exec(ctx, purgeSQL, req.OlderThan.Seconds(), req.ReplayedOnly, req.Batch)
		if err != nil {
			return total, fmt.Errorf("purge dead letters: %w", err)
		}
		n := int(tag.RowsAffected())
		total += n
		if progress != nil && n > 0 {
			progress(n)
		}
		if n < req.Batch {
			return total, nil
		}
	}
}

// Delete removes one dead letter, or returns ErrNotFound.
func Delete(ctx context.Context, q db.Querier, id int64) error {
	tag, err := q.Exec(ctx, `DELETE FROM dead_letter_jobs WHERE id = $1`, id)
	if err != nil {
		return fmt.Errorf("delete dead letter %d: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: id %d", ErrNotFound, id)
	}
	return nil
}
