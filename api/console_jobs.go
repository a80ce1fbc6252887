package api

// The console's job story (/console/jobs/{id}): what tierq knows about a
// job beside River's row: its tier and tenant, whether fair share holds it
// or lent it, where it was inserted, the moves tierq made to it (jobmeta's
// last moves), the dead letter it became or was replayed from; links to
// River UI's page of the job while River has it. A queued job is escalated
// from here with escalation.Escalate, the function PATCH /v1/jobs/{id}
// calls, the operator as its actor.

import (
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/tidwall/gjson"

	"github.com/tierq/tierq/dlq"
	"github.com/tierq/tierq/escalation"
	"github.com/tierq/tierq/internal/queuestats"
	"github.com/tierq/tierq/internal/riverschema"
	"github.com/tierq/tierq/jobmeta"
	"github.com/tierq/tierq/routing"
)

// jobStory is the job page.
type jobStory struct {
	Job
	// InRiver is whether River still has the job (else it is a dead letter,
	// DeadLetterID).
	InRiver bool
	// Held: fair share holds the job back (pending with jobmeta.HeldAt);
	// CapHeld: because its tenant is at its concurrency cap
	// (jobmeta.CapHeldAt beside it), not for its turn; RateHeld: because
	// its tenant has no token left under its rate limit, or a job waiting
	// to start (jobmeta.RateHeldAt).
	Held, CapHeld, RateHeld bool
	// LentFrom is the queue fair share lent the job from.
	LentFrom string
	// OriginalQueue and OriginalPriority are where it was inserted.
	OriginalQueue    string
	OriginalPriority int
	// ReplayOf is the dead letter the job was replayed from (0: none).
	ReplayOf int64
	// QueuePaused: the job's queue is paused in River.
	QueuePaused bool
	// Escalatable: the job is queued in a service queue; Classes are the
	// classes the form offers. FormClass, FormPriority and FormReason refill
	// the form after a refused escalation.
	Escalatable                         bool
	Classes                             []string
	FormClass, FormPriority, FormReason string
}

// queuedJobStates are the states in which escalation.Escalate moves a job.
var queuedJobStates = []string{riverschema.StateAvailable, riverschema.StateScheduled, riverschema.StateRetryable, riverschema.StatePending}

// consoleJobLookup is the header's job form: ?id= goes to the job's page.
func (s *Server) consoleJobLookup(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(strings.TrimSpace(r.URL.Query().Get("id")), 10, 64)
	if err != nil || id <= 0 {
		s.consoleError(w, r, http.StatusBadRequest, "A job id is a positive integer.")
		return
	}
	http.Redirect(w, r, ConsolePrefix+"/jobs/"+strconv.FormatInt(id, 10), http.StatusSeeOther)
}

func (s *Server) consoleJob(w http.ResponseWriter, r *http.Request) {
	id := s.consoleID(w, r, "A job id")
	if id == 0 {
		return
	}
	s.showJob(w, r, id, http.StatusOK, "", jobStory{})
}

// showJob renders job id's story with status and errMsg above it; form
// refills the escalation form.
func (s *Server) showJob(w http.ResponseWriter, r *http.Request, id int64, status int, errMsg string, form jobStory) {
	ctx := r.Context()
	story := jobStory{FormClass: form.FormClass, FormPriority: form.FormPriority, FormReason: form.FormReason, Classes: []string{
		routing.Priority.String(), routing.Default.String(), routing.Scheduled.String(),
	}}
	row, err := s.client.JobGet(ctx, id)
	switch {
	case err == nil:
		s.tellJob(&story, row)
		paused, err := queuestats.Paused(ctx, s.pool)
		if err != nil {
			s.consoleInternal(w, r, err)
			return
		}
		_, story.QueuePaused = paused[row.Queue]
	case errors.Is(err, river.ErrNotFound):
		d, err := dlq.GetByJobID(ctx, s.pool, id)
		if errors.Is(err, dlq.ErrNotFound) {
			s.consoleError(w, r, http.StatusNotFound, "Job "+strconv.FormatInt(id, 10)+" is neither in River nor a dead letter: River deletes finished jobs after a day.")
			return
		}
		if err != nil {
			s.consoleInternal(w, r, err)
			return
		}
		story.Job = Job{
			ID: d.JobID, Kind: d.Kind, Queue: d.Queue, Priority: d.Priority, State: "dead letter",
			Attempt: d.Attempt, MaxAttempts: d.MaxAttempts, Errors: d.Errors, Args: d.Args,
			CreatedAt: d.CreatedAt, ScheduledAt: d.CreatedAt, FinalizedAt: d.FinalizedAt, DeadLetterID: d.ID,
		}
		story.Job.explain(d.Metadata)
		story.tellMetadata(d.Metadata)
	default:
		s.consoleInternal(w, r, err)
		return
	}
	s.render(w, r, status, "job", consolePage{
		Title: "Job " + strconv.FormatInt(id, 10), Nav: "overview", Error: errMsg, Data: &story,
	})
}

// tellJob fills story in from River's row.
func (s *Server) tellJob(story *jobStory, row *rivertype.JobRow) {
	story.Job = jobFromRow(row)
	story.InRiver = true
	story.tellMetadata(row.Metadata)
	story.Held = row.State == rivertype.JobStatePending && gjson.GetBytes(row.Metadata, gjson.Escape(jobmeta.HeldAt)).Exists() &&
		gjson.ParseBytes(row.Metadata).IsObject()
	story.CapHeld = story.Held && gjson.GetBytes(row.Metadata, gjson.Escape(jobmeta.CapHeldAt)).Exists()
	story.RateHeld = story.Held && !story.CapHeld && gjson.GetBytes(row.Metadata, gjson.Escape(jobmeta.RateHeldAt)).Exists()
	_, _, inService := s.cfg.Registry.ForQueue(row.Queue)
	story.Escalatable = inService && slices.Contains(queuedJobStates, string(row.State))
}

// tellMetadata fills in what the metadata says beside Job.explain.
func (j *jobStory) tellMetadata(metadata []byte) {
	info := jobmeta.Read(metadata)
	j.OriginalQueue, j.OriginalPriority, j.ReplayOf = info.OriginalQueue, info.OriginalPriority, info.ReplayOf
	if v := gjson.GetBytes(metadata, gjson.Escape(jobmeta.LentFrom)); v.Type == gjson.String {
		j.LentFrom = v.Str
	}
}

func (s *Server) consoleEscalate(w http.ResponseWriter, r *http.Request) {
	id := s.consoleID(w, r, "A job id")
	if id == 0 {
		return
	}
	form := jobStory{FormClass: r.PostFormValue("queue_class"), FormPriority: r.PostFormValue("priority"), FormReason: r.PostFormValue("reason")}
	class, err := routing.ParseClass(form.FormClass)
	if err != nil {
		s.showJob(w, r, id, http.StatusBadRequest, "Not escalated: "+err.Error()+".", form)
		return
	}
	priority := 0
	if form.FormPriority != "" {
		if priority, err = strconv.Atoi(form.FormPriority); err != nil {
			s.showJob(w, r, id, http.StatusBadRequest, "Not escalated: the priority is 1 to 4, or empty.", form)
			return
		}
	}
	if strings.TrimSpace(form.FormReason) == "" {
		s.showJob(w, r, id, http.StatusBadRequest, "Give a reason for the escalation.", form)
		return
	}
	moved, err := escalation.Escalate(r.Context(), s.pool, s.cfg.Registry.Queues(), escalation.Request{
		JobID: id, To: class, Priority: priority, Actor: consoleActor(r), Reason: form.FormReason,
	})
	s.logAction(r, "escalate", err, slog.Int64("job_id", id), slog.String("to_class", class.String()),
		slog.String("from_queue", moved.FromQueue), slog.String("to_queue", moved.ToQueue), slog.Bool("changed", moved.Changed))
	if err != nil {
		status := consoleErrStatus(err)
		if status == 0 {
			s.consoleInternal(w, r, err)
			return
		}
		s.showJob(w, r, id, status, "Not escalated: "+err.Error(), form)
		return
	}
	if !moved.Changed {
		s.showJob(w, r, id, http.StatusOK, "Nothing to do: the job is in "+moved.ToQueue+" at priority "+strconv.Itoa(moved.ToPriority)+" already.", form)
		return
	}
	s.metrics.Escalation(moved.FromQueue, moved.ToQueue, "operator")
	http.Redirect(w, r, ConsolePrefix+"/jobs/"+strconv.FormatInt(id, 10), http.StatusSeeOther)
}
