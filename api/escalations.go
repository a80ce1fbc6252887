package api

import (
	"net/http"
	"strconv"
	"time"

	"github.com/tierq/tierq/escalation"
)

// escalationPage is GET /v1/escalations's answer. NextCursor, when set, is
// the cursor of the next page.
type escalationPage struct {
	Escalations []escalation.Escalation `json:"escalations"`
	NextCursor  *string                 `json:"next_cursor"`
}

// listEscalations is GET /v1/escalations: the audit of moves
// (escalation.List), newest first, filtered by queue, actor and time,
// paged by cursor.
func (s *Server) listEscalations(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p := escalation.ListParams{Queue: q.Get("queue"), Actor: q.Get("actor"), Limit: escalation.DefaultListLimit}
	for _, t := range []struct {
		name string
		to   *time.Time
	}{{"since", &p.Since}, {"until", &p.Until}} {
		v := q.Get(t.name)
		if v == "" {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			writeError(w, http.StatusBadRequest, "%s must be an RFC 3339 time such as 2026-11-27T10:00:00Z, not %.40q", t.name, v)
			return
		}
		*t.to = at
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > escalation.MaxListLimit {
			writeError(w, http.StatusBadRequest, "limit must be 1 to %d, not %.40q", escalation.MaxListLimit, v)
			return
		}
		p.Limit = n
	}
	if v := q.Get("cursor"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			writeError(w, http.StatusBadRequest, "cursor must be a next_cursor from a previous page, not %.40q", v)
			return
		}
		p.BeforeID = n
	}
	rows, err := escalation.List(r.Context(), s.pool, p)
	if err != nil {
		s.writeErr(w, r, err) // escalation.ErrInvalid: 400
		return
	}
	out := escalationPage{Escalations: rows}
	if len(rows) == p.Limit {
		next := strconv.FormatInt(rows[len(rows)-1].ID, 10)
		out.NextCursor = &next
	}
	writeJSON(w, http.StatusOK, out)
}
