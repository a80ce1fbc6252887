package api

import (
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/tierq/tierq/dlq"
)

// deadLetterPage is GET /v1/dead-letters's answer. NextCursor, when set,
// is the cursor of the next page.
type deadLetterPage struct {
	DeadLetters []dlq.DeadLetter `json:"dead_letters"`
	NextCursor  *string          `json:"next_cursor"`
}

// defaultPageSize is the page size when limit is not given.
const defaultPageSize = 50

func (s *Server) listDeadLetters(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := dlq.Filter{Queue: q.Get("queue"), Kind: q.Get("kind"), Tier: q.Get("tier"), Tenant: q.Get("tenant")}
	page := dlq.Page{Limit: defaultPageSize}
	if v := q.Get("since"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			writeError(w, http.StatusBadRequest, "since must be a duration such as 90m or 24h, not %.40q", v)
			return
		}
		f.Since = d
	}
	if v := q.Get("pending"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			writeError(w, http.StatusBadRequest, "pending must be true or false, not %.40q", v)
			return
		}
		f.Pending = b
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > dlq.MaxListLimit {
			writeError(w, http.StatusBadRequest, "limit must be 1 to %d, not %.40q", dlq.MaxListLimit, v)
			return
		}
		page.Limit = n
	}
	if v := q.Get("cursor"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			writeError(w, http.StatusBadRequest, "cursor must be a next_cursor from a previous page, not %.40q", v)
			return
		}
		page.BeforeID = n
	}
	rows, err := dlq.List(r.Context(), s.pool, f, page)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	out := deadLetterPage{DeadLetters: rows}
	if out.DeadLetters == nil {
		out.DeadLetters = []dlq.DeadLetter{}
	}
	if len(rows) == page.Limit {
		next := strconv.FormatInt(rows[len(rows)-1].ID, 10)
		out.NextCursor = &next
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getDeadLetter(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, "id")
	if !ok {
		return
	}
	d, err := dlq.Get(r.Context(), s.pool, id)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

// ReplayRequest is the body of both replay endpoints; Queue, Kind, Tier,
// Tenant, All and Limit apply to the bulk one only.
type ReplayRequest struct {
	Actor   string `json:"actor"`
	ToQueue string `json:"to_queue,omitempty"`
	Force   bool   `json:"force,omitempty"`
	Queue   string `json:"queue,omitempty"`
	Kind    string `json:"kind,omitempty"`
	// Tier and Tenant filter as GET /v1/dead-letters's parameters do.
	Tier   string `json:"tier,omitempty"`
	Tenant string `json:"tenant,omitempty"`
	// All must be true to replay without a queue, kind, tier or tenant
	// filter.
	All bool `json:"all,omitempty"`
	// Limit is the most one request replays (default and maximum
	// maxBulkReplay); the answer's "more" says whether to call again.
	Limit int `json:"limit,omitempty"`
}

// maxBulkReplay bounds one bulk replay request well inside the request
// timeout (replay runs at about 20k rows/s: docs/dead-letters.md).
const maxBulkReplay = 100_000

func (s *Server) replayDeadLetter(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, "id")
	if !ok {
		return
	}
	var req ReplayRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if req.Queue != "" || req.Kind != "" || req.Tier != "" || req.Tenant != "" || req.All || req.Limit != 0 {
		writeError(w, http.StatusBadRequest, "queue, kind, tier, tenant, all and limit are for the bulk replay (POST /v1/dead-letters/replay), not one dead letter")
		return
	}
	outcomes, err := dlq.Replay(r.Context(), s.client, s.pool, s.cfg.Registry.Queues(), []int64{id},
		dlq.ReplayOptions{ToQueue: req.ToQueue, Force: req.Force, Actor: req.Actor})
	if err == nil {
		err = outcomes[0].Err
	}
	if errors.Is(err, dlq.ErrDuplicate) {
		writeJSON(w, http.StatusConflict, outcomes[0]) // names the live job in duplicate_of
		return
	}
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, outcomes[0])
}

// bulkReplayBatch is how many dead letters one transaction of a bulk replay
// takes (see docs/dead-letters.md for the measurement).
const bulkReplayBatch = 2000

func (s *Server) replayDeadLetters(w http.ResponseWriter, r *http.Request) {
	var req ReplayRequest
	if !decodeBody(w, r, &req) {
		return
	}
	f := dlq.Filter{Queue: req.Queue, Kind: req.Kind, Tier: req.Tier, Tenant: req.Tenant}
	if !req.All && f == (dlq.Filter{}) {
		writeError(w, http.StatusBadRequest, `give a queue, kind, tier or tenant filter, or "all": true to replay every dead letter`)
		return
	}
	if req.Limit == 0 {
		req.Limit = maxBulkReplay
	}
	if req.Limit < 1 || req.Limit > maxBulkReplay {
		writeError(w, http.StatusBadRequest, "limit must be 1 to %d", maxBulkReplay)
		return
	}
	res, err := dlq.ReplayAll(r.Context(), s.client, s.pool, s.cfg.Registry.Queues(), f,
		dlq.ReplayOptions{ToQueue: req.ToQueue, Force: req.Force, Actor: req.Actor, Limit: req.Limit}, bulkReplayBatch, nil)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (s *Server) deleteDeadLetter(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, "id")
	if !ok {
		return
	}
	if err := dlq.Delete(r.Context(), s.pool, id); err != nil {
		s.writeErr(w, r, err)
		return
	}
	// Deletion is final and no table records it: the log does.
	s.logger.InfoContext(r.Context(), "dead letter deleted", slog.Int64("dead_letter_id", id))
	w.WriteHeader(http.StatusNoContent)
}
