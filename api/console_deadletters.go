package api

// The console's dead-letter pages: the list with its filters, one dead
// letter with every attempt, replay and purge, and the bulk replay of a
// filter after a confirmation. Every read and write is package dlq's own
// operation (List, Get, CountReplayable, Replay, Delete), with its
// guarantees: a dead letter is replayed once unless forced, never while a
// live job holds its unique key.

import (
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/tierq/tierq/dlq"
	"github.com/tierq/tierq/jobmeta"
	"github.com/tierq/tierq/tiers"
)

// consoleDeadLetterPage is the list's page size.
const consoleDeadLetterPage = 50

// Dead-letter states the list filters by (its "state" parameter).
const (
	dlStateAny      = ""
	dlStatePending  = "pending"
	dlStateReplayed = "replayed"
)

// deadLetterFilter is the list's filter as the form gives it.
type deadLetterFilter struct {
	Queue, Kind, Tier, Tenant, Error, State string
}

func readDeadLetterFilter(q url.Values) deadLetterFilter {
	return deadLetterFilter{
		Queue: strings.TrimSpace(q.Get("queue")), Kind: strings.TrimSpace(q.Get("kind")),
		Tier: strings.TrimSpace(q.Get("tier")), Tenant: q.Get("tenant"),
		Error: q.Get("error"), State: q.Get("state"),
	}
}

// dlq is the filter as dlq.Filter, or a message saying what is wrong.
func (f deadLetterFilter) dlq() (dlq.Filter, string) {
	out := dlq.Filter{Queue: f.Queue, Kind: f.Kind, Tier: f.Tier, Tenant: f.Tenant, ErrorContains: f.Error}
	switch f.State {
	case dlStateAny:
	case dlStatePending:
		out.Pending = true
	case dlStateReplayed:
		out.Replayed = true
	default:
		return out, "State must be empty (any), pending or replayed."
	}
	if err := out.Validate(); err != nil {
		return out, err.Error()
	}
	return out, ""
}

// filterTiers are the tier filter's choices: the tiers, and "unknown".
func filterTiers() []string {
	var out []string
	for _, t := range tiers.All() {
		out = append(out, t.String())
	}
	return append(out, dlq.UnknownTier)
}

// query is the filter as URL query parameters (without empty ones).
func (f deadLetterFilter) query() url.Values {
	q := url.Values{}
	for k, v := range map[string]string{
		"queue": f.Queue, "kind": f.Kind, "tier": f.Tier, "tenant": f.Tenant, "error": f.Error, "state": f.State,
	} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q
}

// deadLetterRow is one dead letter as the pages show it.
type deadLetterRow struct {
	dlq.DeadLetter
	Tenant, Tier string
}

// newDeadLetterRow reads d's tier as the tier filter does: its metadata's,
// else its args' (jobmeta.TierOf).
func newDeadLetterRow(d dlq.DeadLetter) deadLetterRow {
	row := deadLetterRow{DeadLetter: d, Tenant: jobmeta.Read(d.Metadata).Tenant}
	if t, ok := jobmeta.TierOf(d.Metadata, d.Args); ok {
		row.Tier = t.String()
	}
	return row
}

func (s *Server) consoleDeadLetters(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	form := readDeadLetterFilter(q)
	data := struct {
		Filter    deadLetterFilter
		Rows      []deadLetterRow
		Next      string // the next page's URL, when there is one
		FirstPage bool
		ReplayURL string // the bulk replay's confirmation of the filter
		Purged    string // the id of a dead letter just purged
		Newest    string // the first page's URL
		Tiers     []string
	}{Filter: form, FirstPage: q.Get("before") == "", Tiers: filterTiers()}
	// Only an id is echoed: a crafted link cannot make the page say
	// anything else was purged.
	if n, err := strconv.ParseInt(q.Get("purged"), 10, 64); err == nil && n > 0 {
		data.Purged = strconv.FormatInt(n, 10)
	}
	page := consolePage{Title: "Dead letters", Nav: "dead-letters", Data: &data}
	f, problem := form.dlq()
	var before int64
	if v := q.Get("before"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			problem = "The page cursor (before) must be a dead-letter id."
		}
		before = n
	}
	if problem != "" {
		page.Error = problem
		s.render(w, r, http.StatusBadRequest, "dead-letters", page)
		return
	}
	rows, err := dlq.List(r.Context(), s.pool, f, dlq.Page{BeforeID: before, Limit: consoleDeadLetterPage})
	if err != nil {
		s.consoleDLQError(w, r, err)
		return
	}
	for _, d := range rows {
		data.Rows = append(data.Rows, newDeadLetterRow(d))
	}
	fq := form.query()
	data.Newest = ConsolePrefix + "/dead-letters?" + fq.Encode()
	if len(rows) == consoleDeadLetterPage {
		next := form.query()
		next.Set("before", strconv.FormatInt(rows[len(rows)-1].ID, 10))
		data.Next = ConsolePrefix + "/dead-letters?" + next.Encode()
	}
	if form.State != dlStateReplayed {
		data.ReplayURL = ConsolePrefix + "/dead-letters/replay?" + fq.Encode()
	}
	s.render(w, r, http.StatusOK, "dead-letters", page)
}

// consoleDLQError answers an error of package dlq: the error page with
// its status, or an internal error.
func (s *Server) consoleDLQError(w http.ResponseWriter, r *http.Request, err error) {
	if status := consoleErrStatus(err); status != 0 {
		s.consoleError(w, r, status, err.Error())
		return
	}
	s.consoleInternal(w, r, err)
}

// deadLetterData is the page of one dead letter.
type deadLetterData struct {
	deadLetterRow
	// Queues are the queues a replay may go to (the service queues).
	Queues []string
	// Reason and ToQueue refill the replay form after a refused replay.
	Reason, ToQueue string
	// DuplicateOf is the live job holding the dead letter's unique key,
	// after a replay refused for it.
	DuplicateOf int64
}

// consoleID is the path's {id}, a positive integer, or 0 after answering
// 400 saying what it names ("A dead-letter id", "A job id").
func (s *Server) consoleID(w http.ResponseWriter, r *http.Request, what string) int64 {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		s.consoleError(w, r, http.StatusBadRequest, what+" is a positive integer.")
		return 0
	}
	return id
}

func (s *Server) consoleDeadLetter(w http.ResponseWriter, r *http.Request) {
	id := s.consoleID(w, r, "A dead-letter id")
	if id == 0 {
		return
	}
	s.showDeadLetter(w, r, id, http.StatusOK, "", deadLetterData{})
}

// showDeadLetter renders dead letter id's page with status and errMsg
// above it; form refills the replay form.
func (s *Server) showDeadLetter(w http.ResponseWriter, r *http.Request, id int64, status int, errMsg string, form deadLetterData) {
	d, err := dlq.Get(r.Context(), s.pool, id)
	if err != nil {
		s.consoleDLQError(w, r, err)
		return
	}
	form.deadLetterRow = newDeadLetterRow(d)
	form.Queues = s.cfg.Registry.Queues()
	s.render(w, r, status, "dead-letter", consolePage{
		Title: "Dead letter " + strconv.FormatInt(id, 10), Nav: "dead-letters", Error: errMsg, Data: &form,
	})
}

// consoleActor is the actor of r's action: its Basic auth user name.
// consoleGuard lets only Basic auth POST.
func consoleActor(r *http.Request) string {
	user, _, _ := r.BasicAuth()
	return user
}

func (s *Server) consoleReplay(w http.ResponseWriter, r *http.Request) {
	id := s.consoleID(w, r, "A dead-letter id")
	if id == 0 {
		return
	}
	form := deadLetterData{Reason: r.PostFormValue("reason"), ToQueue: r.PostFormValue("to_queue")}
	if strings.TrimSpace(form.Reason) == "" {
		s.showDeadLetter(w, r, id, http.StatusBadRequest, "Give a reason for the replay.", form)
		return
	}
	opts := dlq.ReplayOptions{
		Actor: consoleActor(r), Reason: form.Reason, ToQueue: form.ToQueue, Force: r.PostFormValue("force") == "1",
	}
	outcomes, err := dlq.Replay(r.Context(), s.client, s.pool, s.cfg.Registry.Queues(), []int64{id}, opts)
	if err == nil {
		err = outcomes[0].Err
	}
	s.logAction(r, "replay", err, slog.Int64("dead_letter_id", id), slog.String("to_queue", opts.ToQueue), slog.Bool("force", opts.Force))
	if err != nil {
		status := consoleErrStatus(err)
		if status == 0 {
			s.consoleInternal(w, r, err)
			return
		}
		if errors.Is(err, dlq.ErrDuplicate) {
			form.DuplicateOf = outcomes[0].DuplicateOf
		}
		s.showDeadLetter(w, r, id, status, "Not replayed: "+err.Error(), form)
		return
	}
	http.Redirect(w, r, ConsolePrefix+"/dead-letters/"+strconv.FormatInt(id, 10), http.StatusSeeOther)
}

func (s *Server) consolePurge(w http.ResponseWriter, r *http.Request) {
	id := s.consoleID(w, r, "A dead-letter id")
	if id == 0 {
		return
	}
	if r.PostFormValue("confirm") != "1" {
		s.showDeadLetter(w, r, id, http.StatusBadRequest, "Tick the box to confirm the purge: a purged dead letter is gone for good.", deadLetterData{})
		return
	}
	err := dlq.Delete(r.Context(), s.pool, id)
	s.logAction(r, "purge", err, slog.Int64("dead_letter_id", id))
	if err != nil {
		s.consoleDLQError(w, r, err)
		return
	}
	http.Redirect(w, r, ConsolePrefix+"/dead-letters?purged="+strconv.FormatInt(id, 10), http.StatusSeeOther)
}

// logAction logs a console action with its actor: purges and replays
// leave this line (a purge leaves nothing else).
func (s *Server) logAction(r *http.Request, action string, err error, attrs ...slog.Attr) {
	attrs = append([]slog.Attr{slog.String("action", action), slog.String("actor", consoleActor(r))}, attrs...)
	level := slog.LevelInfo
	if err != nil {
		level = slog.LevelWarn
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	s.logger.LogAttrs(r.Context(), level, "console action", attrs...)
}

// bulkData is the bulk replay's confirmation and result.
type bulkData struct {
	Filter  deadLetterFilter
	BackURL string // the list of the filter
	// Rows are the dead letters the confirmation replays (its ids go in
	// the form); Replayable is how many of the filter's could be replayed
	// now (dlq.CountReplayable); More says that the filter has more than
	// one replay takes.
	Rows       []deadLetterRow
	Replayable int
	More       bool
	Max        int
	Queues     []string
	Reason     string
	ToQueue    string

	// After the replay: how many were asked for, and what happened to
	// each one that was not replayed.
	Done     bool
	Asked    int
	Replayed int
	Failed   []dlq.Outcome
}

// consoleBulkConfirm shows what a bulk replay of the filter would replay:
// the newest dlq.MaxReplayIDs pending dead letters it selects, whose ids
// the form carries, so that the replay acts on exactly those.
func (s *Server) consoleBulkConfirm(w http.ResponseWriter, r *http.Request) {
	form := readDeadLetterFilter(r.URL.Query())
	form.State = dlStatePending
	data := bulkData{Filter: form, BackURL: ConsolePrefix + "/dead-letters?" + form.query().Encode(), Max: dlq.MaxReplayIDs, Queues: s.cfg.Registry.Queues()}
	page := consolePage{Title: "Replay dead letters", Nav: "dead-letters", Data: &data}
	f, problem := form.dlq()
	if problem != "" {
		page.Error = problem
		s.render(w, r, http.StatusBadRequest, "replay-confirm", page)
		return
	}
	rows, err := dlq.List(r.Context(), s.pool, f, dlq.Page{Limit: dlq.MaxReplayIDs})
	if err != nil {
		s.consoleDLQError(w, r, err)
		return
	}
	n, err := dlq.CountReplayable(r.Context(), s.pool, s.cfg.Registry.Queues(), f, dlq.ReplayOptions{})
	if err != nil {
		s.consoleDLQError(w, r, err)
		return
	}
	for _, d := range rows {
		data.Rows = append(data.Rows, newDeadLetterRow(d))
	}
	data.Replayable = n
	data.More = len(rows) == dlq.MaxReplayIDs
	s.render(w, r, http.StatusOK, "replay-confirm", page)
}

// consoleBulkReplay replays exactly the dead letters whose ids the
// confirmation's form carries (dlq.Replay: one transaction, each one at
// most once).
func (s *Server) consoleBulkReplay(w http.ResponseWriter, r *http.Request) {
	form := readDeadLetterFilter(r.PostForm)
	data := bulkData{
		Filter: form, BackURL: ConsolePrefix + "/dead-letters?" + form.query().Encode(), Max: dlq.MaxReplayIDs, Queues: s.cfg.Registry.Queues(),
		Reason: r.PostFormValue("reason"), ToQueue: r.PostFormValue("to_queue"),
	}
	page := consolePage{Title: "Replay dead letters", Nav: "dead-letters", Data: &data}
	var ids []int64
	for _, v := range r.PostForm["id"] {
		id, err := strconv.ParseInt(v, 10, 64)
		if err != nil || id <= 0 {
			page.Error = "The form's ids must be dead-letter ids."
			s.render(w, r, http.StatusBadRequest, "replay-result", page)
			return
		}
		ids = append(ids, id)
	}
	switch {
	case len(ids) == 0:
		page.Error = "The form names no dead letter to replay."
	case len(ids) > dlq.MaxReplayIDs:
		page.Error = "One replay takes at most " + strconv.Itoa(dlq.MaxReplayIDs) + " dead letters."
	case strings.TrimSpace(data.Reason) == "":
		page.Error = "Give a reason for the replay."
	}
	if page.Error != "" {
		s.render(w, r, http.StatusBadRequest, "replay-result", page)
		return
	}
	opts := dlq.ReplayOptions{Actor: consoleActor(r), Reason: data.Reason, ToQueue: data.ToQueue}
	outcomes, err := dlq.Replay(r.Context(), s.client, s.pool, s.cfg.Registry.Queues(), ids, opts)
	data.Asked = len(ids)
	for _, o := range outcomes {
		if o.Err == nil {
			data.Replayed++
			continue
		}
		data.Failed = append(data.Failed, o)
	}
	s.logAction(r, "bulk replay", err, slog.Int("asked", len(ids)), slog.Int("replayed", data.Replayed),
		slog.String("to_queue", opts.ToQueue))
	if err != nil {
		if status := consoleErrStatus(err); status != 0 {
			page.Error = "Nothing replayed: " + err.Error()
			s.render(w, r, status, "replay-result", page)
			return
		}
		s.consoleInternal(w, r, err)
		return
	}
	data.Done = true
	s.render(w, r, http.StatusOK, "replay-result", page)
}
