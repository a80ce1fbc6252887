package dlq

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/tierq/tierq/internal/db"
	"github.com/tierq/tierq/internal/riverschema"
	"github.com/tierq/tierq/jobmeta"
	"github.com/tierq/tierq/routing"
)

// MaxReplayIDs is the most ids one Replay takes; ReplayAll has no limit.
const MaxReplayIDs = 1000

// maxReasonLen bounds ReplayOptions.Reason.
const maxReasonLen = 2000

// Beginner starts transactions and runs single statements: *pgxpool.Pool,
// *pgx.Conn.
type Beginner interface {
	db.Querier
	Begin(ctx context.Context) (pgx.Tx, error)
}

// ReplayOptions say how dead letters are replayed.
type ReplayOptions struct {
	// ToQueue is the queue the new jobs go to; empty means each dead
	// letter's original queue. It must be one of the service queues Replay
	// is given, and a dead letter goes only to a queue of its own service:
	// one from <base>_default may go to <base>_priority, not to another
	// service's queue, whose workers do not run its kind.
	ToQueue string
	// Force replays a dead letter that was replayed before.
	Force bool
	// Actor is who replays (an operator's name); it lands in replayed_by
	// and in the replay's move in the new job's metadata (jobmeta.Move).
	Actor string
	// Reason is why (optional); it lands in the replay's move, cut to
	// jobmeta.MaxReasonChars. dead_letter_jobs keeps no reason.
	Reason string
	// Limit makes ReplayAll stop after this many (0: no limit), so that a
	// caller with a deadline (an HTTP request) replays a bounded amount and
	// calls again while More is true. Replay ignores it.
	Limit int
}

// Validate reports what is wrong with the options, as an ErrInvalid;
// serviceQueues are the service queues (service.Registry.Queues), the
// queues ToQueue may name.
func (o ReplayOptions) Validate(serviceQueues []string) error {
	var problems []string
	if strings.TrimSpace(o.Actor) == "" {
		problems = append(problems, "actor is required")
	}
	if len(o.Actor) > 200 {
		problems = append(problems, "actor is at most 200 bytes")
	}
	if len(o.Reason) > maxReasonLen {
		problems = append(problems, fmt.Sprintf("reason is at most %d bytes", maxReasonLen))
	}
	if o.Limit < 0 {
		problems = append(problems, "limit must not be negative")
	}
	if o.ToQueue != "" && !slices.Contains(serviceQueues, o.ToQueue) {
		problems = append(problems, fmt.Sprintf("queue %.128q is not a service queue (%s)", o.ToQueue, strings.Join(serviceQueues, ", ")))
	}
	return invalid(problems)
}

// Outcome is what happened to one dead letter Replay was asked for.
type Outcome struct {
	ID int64 `json:"id"`
	// JobID and Queue are the new River job's, when Err is nil.
	JobID int64  `json:"job_id,omitempty"`
	Queue string `json:"queue,omitempty"`
	// DuplicateOf is the live job holding this dead letter's unique key,
	// when Err is ErrDuplicate.
	DuplicateOf int64 `json:"duplicate_of,omitempty"`
	// Err is ErrNotFound, ErrAlreadyReplayed, ErrDuplicate or ErrInvalid
	// (wrapped, saying why) when this dead letter was not replayed.
	Err error `json:"-"`
}

// MarshalJSON adds the error's text as "error".
func (o Outcome) MarshalJSON() ([]byte, error) {
	type plain Outcome
	var msg string
	if o.Err != nil {
		msg = o.Err.Error()
	}
	return json.Marshal(struct {
		plain
		Error string `json:"error,omitempty"`
	}{plain(o), msg})
}

// Replay inserts a new River job for each dead letter in ids, in one
// transaction with marking them replayed: same kind, args, tags and
// max_attempts, fresh attempts, the original queue (or opts.ToQueue) and the
// original base priority (before aging), the original metadata's own keys,
// and the original's uniqueness (unique_key and unique_states, as River
// wrote them). A dead letter already replayed is refused with
// ErrAlreadyReplayed unless opts.Force; one whose unique key a live job
// holds is refused with ErrDuplicate naming that job, with or without
// opts.Force; a missing one gets ErrNotFound. serviceQueues are the service
// queues (service.Registry.Queues): opts.ToQueue must be one of them, of
// each dead letter's own service. Each id's Outcome comes back in the order
// of ids; the error is for the request as a whole (invalid, or the database
// failed, in which case nothing was replayed).
//
// The rows are locked for the transaction, so two Replays of one dead letter
// at once run one after the other and the second sees it replayed.
func Replay(ctx context.Context, client *river.Client[pgx.Tx], pool Beginner, serviceQueues []string, ids []int64, opts ReplayOptions) ([]Outcome, error) {
	if err := opts.Validate(serviceQueues); err != nil {
		return nil, err
	}
	origins := replayOrigins(serviceQueues, opts.ToQueue)
	if len(ids) == 0 || len(ids) > MaxReplayIDs {
		return nil, fmt.Errorf("%w: give 1 to %d ids", ErrInvalid, MaxReplayIDs)
	}
	for _, id := range ids {
		if id <= 0 {
			return nil, fmt.Errorf("%w: id %d is not a dead-letter id", ErrInvalid, id)
		}
	}

	outcomes := make([]Outcome, len(ids))
	err := retryUniqueRace(func() error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `SELECT `+columns+` FROM dead_letter_jobs WHERE id = ANY($1) ORDER BY id FOR UPDATE`, ids)
			if err != nil {
				return err
			}
			found, err := pgx.CollectRows(rows, pgx.RowToStructByPos[DeadLetter])
			if err != nil {
				return err
			}
			byID := make(map[int64]*DeadLetter, len(found))
			for i := range found {
				byID[found[i].ID] = &found[i]
			}

			var todo []*DeadLetter
			seen := map[int64]bool{}
			for i, id := range ids {
				outcomes[i].ID = id
				d := byID[id]
				switch {
				case d == nil:
					outcomes[i].Err = fmt.Errorf("%w: id %d", ErrNotFound, id)
				case seen[id]:
					outcomes[i].Err = fmt.Errorf("%w: id %d appears twice in the request", ErrInvalid, id)
				case d.ReplayedAt != nil && !opts.Force:
					outcomes[i].Err = fmt.Errorf("%w: id %d was replayed as job %d by %s at %s (force to replay again)",
						ErrAlreadyReplayed, id, *d.ReplayJobID, *d.ReplayedBy, d.ReplayedAt.UTC().Format(time.RFC3339))
				case !canReplayInto(d.Queue, opts.ToQueue, origins):
					outcomes[i].Err = fmt.Errorf("%w: a %s job from %s cannot go to queue %s (not a queue of the same service)",
						ErrInvalid, d.Kind, d.Queue, opts.ToQueue)
				default:
					todo = append(todo, d)
				}
				seen[id] = true
			}
			replayed, err := replayTx(ctx, client, tx, todo, opts)
			if err != nil {
				return err
			}
			for i := range outcomes {
				r, ok := replayed[outcomes[i].ID]
				switch {
				case !ok || outcomes[i].Err != nil:
				case r.DuplicateOf != 0:
					outcomes[i].DuplicateOf, outcomes[i].Err = r.DuplicateOf, r.duplicateErr(outcomes[i].ID)
				case r.Invalid != "":
					outcomes[i].Err = fmt.Errorf("%w: dead letter %d cannot be inserted as it is: %s", ErrInvalid, outcomes[i].ID, r.Invalid)
				default:
					outcomes[i].JobID, outcomes[i].Queue = r.JobID, r.Queue
				}
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("replay dead letters: %w", err)
	}
	return outcomes, nil
}

// canReplayInto says whether a dead letter from queue from may be replayed
// into queue to ("" meaning from), whose replayOrigins are origins.
func canReplayInto(from, to string, origins []string) bool {
	return to == "" || to == from || slices.Contains(origins, from)
}

// replayOrigins are the original queues whose dead letters may go to queue
// to: the queues of its service, when to is one of serviceQueues. A service
// queue is named <base queue>_<class> (routing.QueueName), so the queues of
// a service are those of its base queue.
func replayOrigins(serviceQueues []string, to string) []string {
	base, _, ok := routing.ClassOf(to)
	if !ok || !slices.Contains(serviceQueues, to) {
		return nil
	}
	var origins []string
	for _, queue := range serviceQueues {
		if b, _, ok := routing.ClassOf(queue); ok && b == base {
			origins = append(origins, queue)
		}
	}
	return origins
}

// replayedJob is the new River job of one replayed dead letter, or the live
// job that holds its unique key (DuplicateOf) when it was not replayed.
type replayedJob struct {
	JobID       int64
	Queue       string
	DuplicateOf int64
	// HolderState is the state of the job DuplicateOf names.
	HolderState string
	// Invalid says why River refused to insert the job (its tags or queue
	// are not valid for River), when it did.
	Invalid string
}

func (r replayedJob) duplicateErr(id int64) error {
	return fmt.Errorf("%w: dead letter %d: job %d (%s) holds the same unique key; replay it once that job no longer does (it finishes, or River deletes it)",
		ErrDuplicate, id, r.DuplicateOf, r.HolderState)
}

// rawArgs re-inserts a dead letter's args exactly as stored, under its kind,
// without decoding them into the kind's Go type.
type rawArgs struct {
	kind string
	args json.RawMessage
}

func (a rawArgs) Kind() string                 { return a.kind }
func (a rawArgs) MarshalJSON() ([]byte, error) { return a.args, nil }

// holderSQL is a LATERAL subquery: the live job holding the unique key of
// the dead letter aliased d (in a state its unique_states counts, the
// predicate of River's river_job_unique_idx), if any.
const holderSQL = `LATERAL (
    SELECT j.id AS holder_id, j.state::text AS holder_state FROM ` + riverschema.JobTable + ` AS j
    WHERE j.unique_key = d.unique_key AND j.unique_states IS NOT NULL
      AND ` + riverschema.StateInBitmaskFunc + `(j.unique_states, j.state)
    LIMIT 1
) AS h`

// uniqueHoldersSQL finds, for the dead letters $1, their unique key and the
// live job holding it, if any.
const uniqueHoldersSQL = `
SELECT d.id, d.unique_key, h.holder_id, h.holder_state
FROM dead_letter_jobs AS d
LEFT JOIN ` + holderSQL + ` ON true
WHERE d.id = ANY($1) AND d.unique_key IS NOT NULL AND d.unique_states IS NOT NULL`

// restoreUniqueSQL gives each new job its dead letter's unique key and
// states. River's unique index then refuses a second live job with that key.
const restoreUniqueSQL = `
UPDATE ` + riverschema.JobTable + ` AS j
SET unique_key = d.unique_key, unique_states = d.unique_states
FROM unnest($1::bigint[], $2::bigint[]) AS r(id, job_id)
JOIN dead_letter_jobs AS d ON d.id = r.id
WHERE j.id = r.job_id AND d.unique_key IS NOT NULL AND d.unique_states IS NOT NULL`

// replayTx inserts the new jobs for todo and marks the rows replayed, in tx.
// A dead letter whose unique key a live job holds, or an earlier dead letter
// of todo with the same key, is not replayed: its entry names that job.
func replayTx(ctx context.Context, client *river.Client[pgx.Tx], tx pgx.Tx, todo []*DeadLetter, opts ReplayOptions) (map[int64]replayedJob, error) {
	if len(todo) == 0 {
		return nil, nil
	}
	ids := make([]int64, len(todo))
	for i, d := range todo {
		ids[i] = d.ID
	}
	rows, err := tx.Query(ctx, uniqueHoldersSQL, ids)
	if err != nil {
		return nil, fmt.Errorf("find unique key holders: %w", err)
	}
	type uniqueRow struct {
		ID          int64
		Key         []byte
		Holder      *int64
		HolderState *string
	}
	uniques, err := pgx.CollectRows(rows, pgx.RowToStructByPos[uniqueRow])
	if err != nil {
		return nil, fmt.Errorf("find unique key holders: %w", err)
	}
	byID := make(map[int64]uniqueRow, len(uniques))
	for _, u := range uniques {
		byID[u.ID] = u
	}

	out := make(map[int64]replayedJob, len(todo))
	firstOfKey := map[string]int64{} // unique key → dead letter replayed for it here
	var (
		insert []*DeadLetter
		params []river.InsertManyParams
	)
	for _, d := range todo {
		if u, ok := byID[d.ID]; ok {
			if u.Holder != nil {
				out[d.ID] = replayedJob{DuplicateOf: *u.Holder, HolderState: *u.HolderState}
				continue
			}
			if _, seen := firstOfKey[string(u.Key)]; seen {
				continue // filled in once the first one has its job id
			}
			firstOfKey[string(u.Key)] = d.ID
		}
		queue := cmp.Or(opts.ToQueue, d.Queue)
		priority := basePriority(d)
		metadata, err := replayMetadata(d, queue, priority, opts, time.Now())
		if err != nil {
			return nil, err
		}
		insert = append(insert, d)
		params = append(params, river.InsertManyParams{
			Args: rawArgs{kind: d.Kind, args: d.Args},
			InsertOpts: &river.InsertOpts{
				MaxAttempts: d.MaxAttempts,
				Metadata:    metadata,
				Priority:    priority,
				Queue:       queue,
				Tags:        d.Tags,
			},
		})
	}
	if len(insert) > 0 {
		results, err := insertEach(ctx, client, tx, params)
		if err != nil {
			return nil, fmt.Errorf("insert jobs: %w", err)
		}
		var replayedIDs, jobIDs []int64
		for i, r := range results {
			if r.invalid != "" {
				out[insert[i].ID] = replayedJob{Invalid: r.invalid}
				continue
			}
			replayedIDs, jobIDs = append(replayedIDs, insert[i].ID), append(jobIDs, r.job.ID)
			out[insert[i].ID] = replayedJob{JobID: r.job.ID, Queue: r.job.Queue}
		}
		if _, err := tx.Exec(ctx, restoreUniqueSQL, replayedIDs, jobIDs); err != nil {
			return nil, fmt.Errorf("restore uniqueness: %w", err)
		}
		_, err = tx.Exec(ctx, `
			UPDATE dead_letter_jobs AS d
			SET replayed_at = now(), replay_job_id = r.job_id, replayed_by = $3
			FROM unnest($1::bigint[], $2::bigint[]) AS r(id, job_id)
			WHERE d.id = r.id`, replayedIDs, jobIDs, opts.Actor)
		if err != nil {
			return nil, fmt.Errorf("mark replayed: %w", err)
		}
	}
	for _, d := range todo {
		if u, ok := byID[d.ID]; ok && u.Holder == nil && firstOfKey[string(u.Key)] != d.ID {
			if first := out[firstOfKey[string(u.Key)]]; first.JobID != 0 {
				out[d.ID] = replayedJob{DuplicateOf: first.JobID, HolderState: "replayed just now, in this request"}
			} else {
				out[d.ID] = replayedJob{Invalid: "the dead letter replayed first for its unique key could not be inserted; replay it again"}
			}
		}
	}
	return out, nil
}

// inserted is one job insertEach inserted, or why River refused it.
type inserted struct {
	job     *rivertype.JobRow
	invalid string
}

// insertEach inserts params in one InsertManyTx. When River refuses the
// batch before touching the database (a tag or a queue name it does not
// accept, written into a dead letter by hand), it inserts them one by one,
// so that only the refused ones fail; a database error fails them all.
func insertEach(ctx context.Context, client *river.Client[pgx.Tx], tx pgx.Tx, params []river.InsertManyParams) ([]inserted, error) {
	out := make([]inserted, len(params))
	results, err := client.InsertManyTx(ctx, tx, params)
	if err == nil {
		for i, r := range results {
			out[i].job = r.Job
		}
		return out, nil
	}
	if isDatabaseError(ctx, err) || len(params) == 1 {
		if !isDatabaseError(ctx, err) {
			out[0].invalid = err.Error()
			return out, nil
		}
		return nil, err
	}
	for i, p := range params {
		results, err := client.InsertManyTx(ctx, tx, []river.InsertManyParams{p})
		switch {
		case err == nil:
			out[i].job = results[0].Job
		case isDatabaseError(ctx, err):
			return nil, err
		default:
			out[i].invalid = err.Error()
		}
	}
	return out, nil
}

// isDatabaseError says whether err came from PostgreSQL or the connection
// (the transaction may be unusable), rather than from River's checks.
func isDatabaseError(ctx context.Context, err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) || pgconn.SafeToRetry(err) || pgconn.Timeout(err) || ctx.Err() != nil ||
		errors.Is(err, pgx.ErrTxClosed)
}

// retryUniqueRace runs replay, a whole replay transaction, again when it
// failed because a job inserted by someone else after the holder check took
// a replayed dead letter's unique key: the next run finds that job and
// reports the dead letter as its duplicate.
func retryUniqueRace(replay func() error) error {
	var err error
	for range 3 {
		var pgErr *pgconn.PgError
		if err = replay(); !errors.As(err, &pgErr) || pgErr.Code != "23505" || pgErr.ConstraintName != riverschema.UniqueIndex {
			return err
		}
	}
	return err
}

// replayMetadata is the new job's metadata: the dead letter's own keys when
// its metadata is a JSON object (not River's "river:" keys nor tierq's
// per-attempt ones; legacy keys under their jobmeta names), its base
// priority, where it came from, and the replay (with opts' actor and
// reason) added to its moves.
func replayMetadata(d *DeadLetter, queue string, priority int, opts ReplayOptions, now time.Time) ([]byte, error) {
	meta := map[string]json.RawMessage{}
	var old map[string]json.RawMessage
	if json.Unmarshal(d.Metadata, &old) == nil {
		for k, v := range old {
			switch k {
			case jobmeta.DueAt, jobmeta.MovedAt, jobmeta.LegacyDueAt, jobmeta.LegacyMovedAt,
				jobmeta.LegacyBasePriority, jobmeta.LegacyReplayOf, jobmeta.LegacyReplayOfJobID:
			default:
				if !strings.HasPrefix(k, "river:") {
					meta[k] = v
				}
			}
		}
	}
	for k, v := range map[string]int64{
		jobmeta.BasePriority:  int64(priority),
		jobmeta.ReplayOf:      d.ID,
		jobmeta.ReplayOfJobID: d.JobID,
	} {
		meta[k] = json.RawMessage(strconv.FormatInt(v, 10))
	}
	var moves []json.RawMessage
	if json.Unmarshal(meta[jobmeta.Moves], &moves) != nil {
		moves = nil
	}
	move, err := json.Marshal(jobmeta.Move{
		Kind: jobmeta.MoveReplay, At: now.UTC(),
		FromQueue: d.Queue, ToQueue: queue, FromPriority: d.Priority, ToPriority: priority,
		DeadLetterID: d.ID, FromJobID: d.JobID,
		Actor: opts.Actor, Reason: cutRunes(opts.Reason, jobmeta.MaxReasonChars),
	})
	if err != nil {
		return nil, err
	}
	moves = append(moves[max(0, len(moves)-(jobmeta.MaxMoves-1)):], move)
	if meta[jobmeta.Moves], err = json.Marshal(moves); err != nil {
		return nil, err
	}
	return json.Marshal(meta)
}

// cutRunes is s cut to n characters.
func cutRunes(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n])
	}
	return s
}

// basePriority is the priority the job started with, before aging improved
// it (tierq keeps it in metadata), so a replayed job ages again from there.
func basePriority(d *DeadLetter) int {
	if p := jobmeta.Read(d.Metadata).BasePriority; p >= routing.PriorityEscalated && p <= routing.PriorityLowest {
		return p
	}
	return min(max(d.Priority, routing.PriorityEscalated), routing.PriorityLowest)
}

// ReplayAllResult counts what ReplayAll did.
type ReplayAllResult struct {
	Replayed int            `json:"replayed"`
	ByQueue  map[string]int `json:"by_queue"`
	// Duplicates are dead letters of the filter not replayed because a
	// live job holds their unique key (they stay pending); DuplicateOf maps
	// the first MaxReplayIDs of them to that job.
	Duplicates  int             `json:"duplicates"`
	DuplicateOf map[int64]int64 `json:"duplicate_of,omitempty"`
	// Invalid maps dead letters River refused to insert as they are (a tag
	// or queue name it does not accept) to why; they stay pending.
	Invalid map[int64]string `json:"invalid,omitempty"`
	// More is true when ReplayAll stopped at opts.Limit: call again.
	More bool `json:"more"`
}

// ReplayAll replays every dead letter f selects that has not been replayed
// (with opts.Force, replayed ones too), oldest first, batch per transaction,
// calling progress (when not nil) after each batch. serviceQueues are the
// service queues (service.Registry.Queues); with opts.ToQueue, one of them,
// it replays only dead letters of that queue's service. It takes only rows that
// exist when it starts, so a replayed job that fails again and is drained
// back during a long run is not replayed twice by it. Rows another
// transaction holds (a concurrent replay) are skipped; run it again to pick
// up any that transaction released without replaying. It returns what it
// replayed before an error.
func ReplayAll(ctx context.Context, client *river.Client[pgx.Tx], pool Beginner, serviceQueues []string, f Filter, opts ReplayOptions, batch int, progress func(replayed int)) (ReplayAllResult, error) {
	res := ReplayAllResult{ByQueue: map[string]int{}}
	if err := errors.Join(f.Validate(), opts.Validate(serviceQueues)); err != nil {
		return res, err
	}
	origins := replayOrigins(serviceQueues, opts.ToQueue)
	if batch < 1 {
		return res, fmt.Errorf("%w: batch must be positive", ErrInvalid)
	}
	var lastID int64
	if err := pool.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM dead_letter_jobs`).Scan(&lastID); err != nil {
		return res, fmt.Errorf("replay dead letters: %w", err)
	}
	where, args := replayWhere(f, opts, origins)
	args = append(args, lastID, int64(0), batch)
	limitIdx := len(args) - 1
	lastArg, afterArg, limitArg := len(args)-2, len(args)-1, len(args)
	sql := `SELECT ` + columns + ` FROM dead_letter_jobs WHERE ` + where +
		` AND id <= $` + strconv.Itoa(lastArg) + ` AND id > $` + strconv.Itoa(afterArg) +
		` ORDER BY id LIMIT $` + strconv.Itoa(limitArg) + ` FOR UPDATE SKIP LOCKED`

	// Only replayed jobs count toward opts.Limit: a dead letter left
	// pending (refused, or a duplicate of one replayed in the same batch) is
	// passed over, so every call either replays or reaches the end.
	for {
		if opts.Limit > 0 {
			if res.Replayed >= opts.Limit {
				res.More = true
				break
			}
			args[limitIdx] = min(batch, opts.Limit-res.Replayed)
		}
		n := 0
		var replayed map[int64]replayedJob
		err := retryUniqueRace(func() error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				rows, err := tx.Query(ctx, sql, args...)
				if err != nil {
					return err
				}
				found, err := pgx.CollectRows(rows, pgx.RowToAddrOfStructByPos[DeadLetter])
				if err != nil {
					return err
				}
				if n = len(found); n == 0 {
					return nil
				}
				replayed, err = replayTx(ctx, client, tx, found, opts)
				if err == nil {
					args[afterArg-1] = found[n-1].ID
				}
				return err
			})
		})
		if err != nil {
			return res, fmt.Errorf("replay dead letters: %w", err)
		}
		if n == 0 {
			break
		}
		for id, r := range replayed {
			switch {
			case r.DuplicateOf != 0:
				// Held now by the job replayed for its key in this batch:
				// heldDuplicates counts it below.
			case r.Invalid != "":
				if res.Invalid == nil {
					res.Invalid = map[int64]string{}
				}
				if len(res.Invalid) < MaxReplayIDs {
					res.Invalid[id] = r.Invalid
				}
			default:
				res.ByQueue[r.Queue]++
				res.Replayed++
			}
		}
		if progress != nil {
			progress(n)
		}
	}
	held, holders, err := heldDuplicates(ctx, pool, f, opts, origins, lastID)
	if err != nil {
		return res, fmt.Errorf("replay dead letters: %w", err)
	}
	res.Duplicates, res.DuplicateOf = held, holders
	return res, nil
}

// CountReplayable is how many dead letters ReplayAll(serviceQueues, f,
// opts) would replay now, for a progress bar's total.
func CountReplayable(ctx context.Context, q db.Querier, serviceQueues []string, f Filter, opts ReplayOptions) (int, error) {
	where, args := replayWhere(f, opts, replayOrigins(serviceQueues, opts.ToQueue))
	var n int
	if err := q.QueryRow(ctx, `SELECT count(*) FROM dead_letter_jobs WHERE `+where, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count dead letters: %w", err)
	}
	return n, nil
}

// replayWhere is the condition selecting what ReplayAll replays.
// It leaves out dead letters whose unique key a live job holds: they cannot
// be replayed now, and taking them would spend a bounded replay's limit on
// them at every call (heldSQL reports them instead).
func replayWhere(f Filter, opts ReplayOptions, origins []string) (string, []any) {
	where, args := replayFilter(f, opts, origins)
	return where + ` AND NOT EXISTS (SELECT 1 FROM ` + riverschema.JobTable + ` AS j
		WHERE j.unique_key = dead_letter_jobs.unique_key AND j.unique_states IS NOT NULL
		  AND ` + riverschema.StateInBitmaskFunc + `(j.unique_states, j.state))`, args
}

// replayFilter is the condition on dead_letter_jobs of f and opts;
// origins are opts.ToQueue's replayOrigins.
func replayFilter(f Filter, opts ReplayOptions, origins []string) (string, []any) {
	f.Pending = f.Pending || !opts.Force
	where, args := f.where(nil)
	if opts.ToQueue != "" {
		args = append(args, origins)
		where += " AND queue = ANY($" + strconv.Itoa(len(args)) + ")"
	}
	return where, args
}

// heldDuplicates counts the dead letters of f and opts (up to id lastID)
// that replayWhere leaves out because a live job holds their unique key,
// and maps the first MaxReplayIDs of them to that job.
func heldDuplicates(ctx context.Context, q db.Querier, f Filter, opts ReplayOptions, origins []string, lastID int64) (int, map[int64]int64, error) {
	where, args := replayFilter(f, opts, origins)
	args = append(args, lastID, MaxReplayIDs)
	rows, err := q.Query(ctx, `
		SELECT id, h.holder_id, count(*) OVER ()
		FROM (SELECT * FROM dead_letter_jobs WHERE `+where+` AND id <= $`+strconv.Itoa(len(args)-1)+`) AS d
		JOIN `+holderSQL+` ON true
		ORDER BY id LIMIT $`+strconv.Itoa(len(args)), args...)
	if err != nil {
		return 0, nil, fmt.Errorf("find dead letters held by live jobs: %w", err)
	}
	var (
		id, holder int64
		total      int
		held       map[int64]int64
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &holder, &total}, func() error {
		if held == nil {
			held = map[int64]int64{}
		}
		held[id] = holder
		return nil
	})
	if err != nil {
		return 0, nil, fmt.Errorf("find dead letters held by live jobs: %w", err)
	}
	return total, held, nil
}
