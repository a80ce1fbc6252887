package api

// The console's escalation audit: escalation.List, the query GET
// /v1/escalations and tierctl escalations list read, with its filters.

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/tierq/tierq/escalation"
)

// consoleTimeLayouts are the forms a since or until may take: RFC 3339,
// or a browser's datetime-local input or a date, read as UTC.
var consoleTimeLayouts = []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02"}

// parseConsoleTime reads a since or until ("": the zero time).
func parseConsoleTime(v string) (time.Time, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return time.Time{}, true
	}
	for _, layout := range consoleTimeLayouts {
		if t, err := time.Parse(layout, v); err == nil {
			return t.UTC(), true
		}
	}
	return time.Time{}, false
}

// escalationFilter is the audit's filter as the form gives it.
type escalationFilter struct {
	Queue, Actor, Since, Until string
}

func (f escalationFilter) query() url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"queue": f.Queue, "actor": f.Actor, "since": f.Since, "until": f.Until} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q
}

func (s *Server) consoleEscalations(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	form := escalationFilter{
		Queue: strings.TrimSpace(q.Get("queue")), Actor: q.Get("actor"), Since: q.Get("since"), Until: q.Get("until"),
	}
	data := struct {
		Filter    escalationFilter
		Rows      []escalation.Escalation
		Next      string
		Newest    string
		FirstPage bool
	}{Filter: form, FirstPage: q.Get("before") == "", Newest: ConsolePrefix + "/escalations?" + form.query().Encode()}
	page := consolePage{Title: "Escalations", Nav: "escalations", Data: &data}
	p := escalation.ListParams{Queue: form.Queue, Actor: form.Actor, Limit: escalation.DefaultListLimit}
	var ok bool
	if p.Since, ok = parseConsoleTime(form.Since); !ok {
		page.Error = "Since must be a time such as 2026-11-27T10:00:00Z or 2026-11-27T10:00 (UTC)."
	}
	if p.Until, ok = parseConsoleTime(form.Until); !ok {
		page.Error = "Until must be a time such as 2026-11-27T10:00:00Z or 2026-11-27T10:00 (UTC)."
	}
	if v := q.Get("before"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			page.Error = "The page cursor (before) must be an escalation id."
		}
		p.BeforeID = n
	}
	if page.Error == "" {
		if err := p.Validate(); err != nil {
			page.Error = err.Error()
		}
	}
	if page.Error != "" {
		s.render(w, r, http.StatusBadRequest, "escalations", page)
		return
	}
	rows, err := escalation.List(r.Context(), s.pool, p)
	if err != nil {
		s.consoleInternal(w, r, err)
		return
	}
	data.Rows = rows
	if len(rows) == p.Limit {
		next := form.query()
		next.Set("before", strconv.FormatInt(rows[len(rows)-1].ID, 10))
		data.Next = ConsolePrefix + "/escalations?" + next.Encode()
	}
	s.render(w, r, http.StatusOK, "escalations", page)
}
