package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/tidwall/gjson"

	"github.com/tierq/tierq/dlq"
	"github.com/tierq/tierq/escalation"
	"github.com/tierq/tierq/jobmeta"
	"github.com/tierq/tierq/limits"
	"github.com/tierq/tierq/producer"
	"github.com/tierq/tierq/routing"
	"github.com/tierq/tierq/service"
	"github.com/tierq/tierq/subscriptions"
	"github.com/tierq/tierq/tiers"
)

// CreateJobRequest is POST /v1/jobs's body. There is no tier: the API looks
// it up from user_id's subscription.
type CreateJobRequest struct {
	Kind   string          `json:"kind"`
	UserID string          `json:"user_id"`
	Args   json.RawMessage `json:"args"`
	// Scheduled marks background work (the <svc>_scheduled queue).
	Scheduled bool `json:"scheduled,omitempty"`
}

// ParseCreateJob decodes and validates a POST /v1/jobs body into the job to
// insert, without the tier (the caller looks it up and sets it). The kind
// must be one of services' kinds; every string and key is UTF-8 without NUL
// (CheckText); args give no key twice and neither tier nor user_id (the
// server's), and are decoded strictly into the kind's args type and checked
// by it (service.Kind.DecodeArgs). Every failure is a client error.
func ParseCreateJob(body []byte, services *service.Registry) (CreateJobRequest, producer.Job, error) {
	var req CreateJobRequest
	if err := DecodeStrict(body, &req); err != nil {
		if strings.Contains(strings.ToLower(err.Error()), `unknown field "tier"`) {
			return req, producer.Job{}, errors.New("tier is not accepted: the server looks it up from user_id's subscription")
		}
		return req, producer.Job{}, err
	}
	if err := subscriptions.CheckUserID(sentUserID(body, req.UserID)); err != nil {
		return req, producer.Job{}, fmt.Errorf("user_id: %w", err)
	}
	if err := CheckText(body); err != nil {
		return req, producer.Job{}, err
	}
	if len(req.Args) == 0 || string(req.Args) == "null" {
		return req, producer.Job{}, errors.New("args is required")
	}
	kinds := strings.Join(services.KindNames(), ", ")
	if req.Kind == "" {
		return req, producer.Job{}, fmt.Errorf("kind is required (%s)", kinds)
	}
	svc, kind, ok := services.ForKind(req.Kind)
	if !ok {
		return req, producer.Job{}, fmt.Errorf("unknown kind %.40q (want %s)", req.Kind, kinds)
	}
	if err := checkArgsKeys(req.Args); err != nil {
		return req, producer.Job{}, err
	}
	args, err := kind.DecodeArgs(req.Args)
	if err != nil {
		return req, producer.Job{}, fmt.Errorf("invalid args: %w", err)
	}
	return req, producer.Job{Args: args, Service: svc, Tenant: req.UserID, Scheduled: req.Scheduled}, nil
}

// serverArgs are the args keys the server fills in (producer.Insert): a
// client may not send them, not even empty.
var serverArgs = []string{"tier", "user_id"}

// checkArgsKeys refuses args that name a key the server sets, or give a key
// twice in any object (encoding/json and jsonb would both keep the last,
// silently).
func checkArgsKeys(args json.RawMessage) error {
	v := gjson.ParseBytes(args)
	if !v.IsObject() {
		return nil // DecodeArgs says what is wrong
	}
	for _, key := range serverArgs {
		if v.Get(gjson.Escape(key)).Exists() {
			return fmt.Errorf("args may not set tier or user_id, not even empty (args.%s given): the server sets both", key)
		}
	}
	return duplicateKey("args", v)
}

// duplicateKey finds a key given twice in any object of v.
func duplicateKey(path string, v gjson.Result) error {
	var err error
	switch {
	case v.IsObject():
		seen := map[string]bool{}
		v.ForEach(func(key, value gjson.Result) bool {
			field := joinField(path, key.Str)
			if seen[key.Str] {
				err = fmt.Errorf("field %s given twice", field)
				return false
			}
			seen[key.Str] = true
			err = duplicateKey(field, value)
			return err == nil
		})
	case v.IsArray():
		i := 0
		v.ForEach(func(_, value gjson.Result) bool {
			err = duplicateKey(fmt.Sprintf("%s[%d]", path, i), value)
			i++
			return err == nil
		})
	}
	return err
}

// sentUserID is the user id as the body has it, for the check: the
// decoded one, except when the JSON string holds bytes that are not UTF-8,
// which encoding/json replaces with U+FFFD (another user id than the one
// sent): then the string with those bytes, which the check refuses.
func sentUserID(body []byte, decoded string) string {
	if raw := gjson.GetBytes(body, "user_id"); raw.Type == gjson.String && !utf8.ValidString(raw.Str) {
		return raw.Str
	}
	return decoded
}

// Job is a job as the API shows it.
type Job struct {
	ID       int64  `json:"id"`
	Kind     string `json:"kind"`
	Queue    string `json:"queue"`
	Priority int    `json:"priority"`
	Tier     string `json:"tier,omitempty"`
	// Tenant and Moves are read from the job's metadata (package jobmeta):
	// who the job runs for, and the last moves tierq made to it.
	Tenant      string                   `json:"tenant,omitempty"`
	Moves       []jobmeta.Move           `json:"moves,omitempty"`
	State       string                   `json:"state"`
	Attempt     int                      `json:"attempt"`
	MaxAttempts int                      `json:"max_attempts"`
	Errors      []rivertype.AttemptError `json:"errors"`
	Args        json.RawMessage          `json:"args"`
	CreatedAt   time.Time                `json:"created_at"`
	ScheduledAt time.Time                `json:"scheduled_at"`
	AttemptedAt *time.Time               `json:"attempted_at,omitempty"`
	FinalizedAt *time.Time               `json:"finalized_at,omitempty"`
	// DeadLetterID is set when the job is no longer in river_job but in
	// dead_letter_jobs (state "dead_letter").
	DeadLetterID int64 `json:"dead_letter_id,omitempty"`
	// Duplicate and Upgraded describe a POST that found the job queued.
	Duplicate bool `json:"duplicate,omitempty"`
	Upgraded  bool `json:"upgraded,omitempty"`
	// QueuePaused is set in a PATCH's answer when the job's queue is paused
	// in River: the job waits there until an operator resumes the queue.
	QueuePaused bool `json:"queue_paused,omitempty"`
}

func jobFromRow(row *rivertype.JobRow) Job {
	j := Job{
		ID: row.ID, Kind: row.Kind, Queue: row.Queue, Priority: row.Priority, State: string(row.State),
		Attempt: row.Attempt, MaxAttempts: row.MaxAttempts, Errors: row.Errors, Args: row.EncodedArgs,
		CreatedAt: row.CreatedAt, ScheduledAt: row.ScheduledAt, AttemptedAt: row.AttemptedAt, FinalizedAt: row.FinalizedAt,
	}
	if j.Errors == nil {
		j.Errors = []rivertype.AttemptError{}
	}
	j.explain(row.Metadata)
	return j
}

// explain fills in what the job's metadata says about it. The tier comes
// from its args when its metadata has none (a job inserted by a producer
// that records the tier only there).
func (j *Job) explain(metadata []byte) {
	info := jobmeta.Read(metadata)
	j.Tier, j.Tenant, j.Moves = info.Tier, info.Tenant, info.Moves
	if j.Tier == "" {
		var t struct {
			Tier string `json:"tier"`
		}
		if json.Unmarshal(j.Args, &t) == nil {
			j.Tier = t.Tier
		}
	}
}

// tierFor looks the user's tier up. When the lookup fails for a reason
// other than an unreachable database (or the request's end), it routes as
// ADR-16 routes an unknown tier: free, to _default, logged here and counted
// by the caller once the insert has committed. An unreachable database is
// returned: the insert could not work either (503).
func (s *Server) tierFor(ctx context.Context, userID string) (tier tiers.Tier, fellBack bool, err error) {
	tier, err = subscriptions.Lookup(ctx, s.pool, userID)
	switch {
	case err == nil:
		return tier, false, nil
	case isUnavailable(err) || ctx.Err() != nil:
		return 0, false, err
	}
	s.logger.WarnContext(ctx, "subscription lookup failed; routing as free (to _default)",
		slog.String("error", err.Error()))
	return tiers.Free, true, nil
}

func (s *Server) createJob(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	req, job, err := ParseCreateJob(body, s.cfg.Registry)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	ctx := r.Context()
	tier, fellBack, err := s.tierFor(ctx, req.UserID)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	job.Tier = tier
	// Config.MaxAttempts is the default; a kind that declares its own
	// (service.MaxAttempts) keeps it (producer.Insert applies it).
	if kind, ok := job.Service.Kind(req.Kind); !ok || kind.MaxAttempts() == 0 {
		job.MaxAttempts = s.cfg.MaxAttempts
	}

	var res producer.Inserted
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		res, err = producer.Insert(ctx, s.client, tx, job)
		return err
	})
	var quota *limits.QuotaError
	switch {
	case errors.As(err, &quota):
		writeQuotaError(w, quota) // 429, nothing inserted
		return
	case err != nil:
		s.internalError(w, r, err)
		return
	}
	if fellBack {
		s.metrics.TierFallback("lookup_error")
	}
	if res.Upgraded {
		s.metrics.Escalation(res.FromQueue, res.Job.Queue, escalation.ActorDedup)
	}
	if !res.Duplicate {
		w.Header().Set("Location", fmt.Sprintf("/v1/jobs/%d", res.Job.ID))
		writeJSON(w, http.StatusCreated, jobFromRow(res.Job))
		return
	}
	// A duplicate is shown as it is now (its queue, priority and the tier
	// it runs for may differ from this request's).
	out, err := s.findJob(ctx, res.Job.ID)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	out.Duplicate, out.Upgraded = true, res.Upgraded
	writeJSON(w, http.StatusOK, out)
}

// readBody reads a JSON request body within MaxBodyBytes; it writes the 4xx
// itself. Its strings are checked by ParseCreateJob (after user_id's own
// check, whose message is documented).
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	var raw json.RawMessage
	return readJSON(w, r, &raw)
}

func (s *Server) getJob(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, "id")
	if !ok {
		return
	}
	job, err := s.findJob(r.Context(), id)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, job)
}

// errJobNotFound: in neither river_job nor dead_letter_jobs.
var errJobNotFound = errors.New("job not found (finished jobs are deleted by River after a day)")

// findJob reads a job from river_job or, once drained, dead_letter_jobs
// (dlq.GetByJobID).
func (s *Server) findJob(ctx context.Context, id int64) (Job, error) {
	row, err := s.client.JobGet(ctx, id)
	if err == nil {
		return jobFromRow(row), nil
	}
	if !errors.Is(err, river.ErrNotFound) {
		return Job{}, err
	}
	d, err := dlq.GetByJobID(ctx, s.pool, id)
	if errors.Is(err, dlq.ErrNotFound) {
		return Job{}, fmt.Errorf("%w: id %d", errJobNotFound, id)
	}
	if err != nil {
		return Job{}, err
	}
	j := Job{
		ID: d.JobID, Kind: d.Kind, Queue: d.Queue, Priority: d.Priority, State: "dead_letter",
		Attempt: d.Attempt, MaxAttempts: d.MaxAttempts, Errors: d.Errors, Args: d.Args,
		CreatedAt: d.CreatedAt, ScheduledAt: d.CreatedAt, FinalizedAt: d.FinalizedAt, DeadLetterID: d.ID,
	}
	j.explain(d.Metadata)
	return j, nil
}

// PatchJobRequest is PATCH /v1/jobs/{id}'s body: an escalation.
type PatchJobRequest struct {
	QueueClass string `json:"queue_class"`
	Priority   int    `json:"priority,omitempty"`
	Actor      string `json:"actor"`
	Reason     string `json:"reason"`
}

func (s *Server) patchJob(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, "id")
	if !ok {
		return
	}
	var req PatchJobRequest
	if !decodeBody(w, r, &req) {
		return
	}
	class, err := routing.ParseClass(req.QueueClass)
	if err != nil {
		writeError(w, http.StatusBadRequest, "queue_class: %v", err)
		return
	}
	ctx := r.Context()
	moved, err := escalation.Escalate(ctx, s.pool, s.cfg.Registry.Queues(), escalation.Request{
		JobID: id, To: class, Priority: req.Priority, Actor: req.Actor, Reason: req.Reason,
	})
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	if moved.Changed {
		s.metrics.Escalation(moved.FromQueue, moved.ToQueue, "operator")
	}
	job, err := s.findJob(ctx, id)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	job.QueuePaused = moved.ToQueuePaused
	writeJSON(w, http.StatusOK, job)
}
