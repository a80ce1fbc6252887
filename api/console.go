package api

// The operator console: server-rendered HTML pages under /console/ for
// what River UI cannot show (tierq's dead letters, the escalation audit,
// held jobs and dead letters per queue, a queue's tenants and limits, a
// job's story, subscriptions), beside River UI and behind the
// same admin credentials. Pages are html/template, embedded in the binary,
// readable without JavaScript (there is none); actions are HTML form
// POSTs. docs/operations.md ("Operator console") is the operator's guide.
//
// Security, in the order a request meets it (consoleGuard):
//   - every answer, errors included, carries consoleHeaders: a
//     Content-Security-Policy that loads nothing but the console's own
//     stylesheet, runs no script and forbids framing (frame-ancestors
//     'none'), and nosniff, no-referrer and no-store;
//   - the admin token as the Basic auth password (in River UI's realm, so
//     one browser login serves both) or as a bearer token; else 401 or 403;
//   - a POST must come from the console's own page: Go's
//     http.CrossOriginProtection (Sec-Fetch-Site, else Origin against Host),
//     and, unlike it, a POST that carries neither header is refused too: a
//     browser sends at least one with every form POST, and a request with
//     neither may come from an old browser that sends no Sec-Fetch-Site and
//     no Origin; its Basic credentials must not act on their own;
//   - a POST needs Basic auth: the user name is the action's actor (what
//     the operator typed at the login prompt: the admin token is shared,
//     so it is a name, not an identity);
//   - query and form values must be UTF-8 without NUL, as the JSON API's.
//
// Every value the pages show from the database (args, errors, metadata,
// tenants, actors, reasons) goes through safetext: html/template escapes
// markup, and safetext makes control, format and bidi characters visible
// escapes, so an ESC sequence or a U+202E shows as \x1b or \u202e.

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tierq/tierq/dlq"
	"github.com/tierq/tierq/escalation"
	"github.com/tierq/tierq/internal/safetext"
)

// ConsolePrefix is the path under which Server.Handler serves the operator
// console.
const ConsolePrefix = "/console"

// consoleCSP is the console's Content-Security-Policy: its own stylesheet,
// no script, no plugin, forms posted to itself only, and no framing (a
// page of another site cannot frame the console to trick a click).
// maxConsoleActorBytes bounds the user name an action records as its actor
// (dlq.ReplayOptions.Actor's bound).
const maxConsoleActorBytes = 200

const consoleCSP = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// maxFormBytes bounds a console form's body: a bulk replay's form carries
// up to dlq.MaxReplayIDs ids.
const maxFormBytes = 64 << 10

//go:embed console
var consoleFiles embed.FS

// consolePages are the console's templates, one per page, each parsed with
// the layout.
type consolePages map[string]*template.Template

// parseConsolePages parses every page of console/ with the layout. The
// templates are embedded: an error is a bug, which every console test
// finds.
func parseConsolePages() (consolePages, error) {
	funcs := template.FuncMap{
		"visible": safetext.Visible,
		"lines":   safetext.VisibleLines,
		"cut":     cutText,
		"long":    func(s string, n int) bool { return utf8.RuneCountInString(s) > n },
		"bytes":   func(s string) int { return len(s) },
		"json":    prettyJSON,
		"time":    formatConsoleTime,
		"timep": func(t *time.Time) string {
			if t == nil {
				return ""
			}
			return formatConsoleTime(*t)
		},
		"seconds": formatSeconds,
		"wait":    formatWait,
		"deref": func(s *string) string {
			if s == nil {
				return ""
			}
			return *s
		},
		"state":  jobState,
		"tenant": tenantLabel,
		"limit":  formatLimit,
		"list":   func(xs ...int) []int { return xs },
		"deref64": func(n *int64) int64 {
			if n == nil {
				return 0
			}
			return *n
		},
		"derefID": func(id *int64) int64 {
			if id == nil {
				return 0
			}
			return *id
		},
	}
	names, err := fs.Glob(consoleFiles, "console/*.html")
	if err != nil {
		return nil, err
	}
	pages := consolePages{}
	for _, name := range names {
		if name == "console/layout.html" {
			continue
		}
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(consoleFiles, "console/layout.html", name)
		if err != nil {
			return nil, fmt.Errorf("parse console page %s: %w", name, err)
		}
		pages[strings.TrimSuffix(strings.TrimPrefix(name, "console/"), ".html")] = t
	}
	return pages, nil
}

// consolePage is what the layout shows around a page's content.
type consolePage struct {
	Title string
	// Nav is the page's entry in the navigation: "overview",
	// "dead-letters", "escalations", "subscriptions".
	Nav string
	// User is the Basic auth user name, the actor of the operator's
	// actions ("" with a bearer token).
	User string
	// RiverUI is whether River UI is served, so that job ids link to it.
	RiverUI bool
	// Error is shown above the content.
	Error string
	// Data is the page's own.
	Data any
}

// consoleGuard puts the console's headers, auth and checks in front of
// next (see the comment at the top of this file).
func (s *Server) consoleGuard(next http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", consoleCSP)
		h.Set("X-Frame-Options", "DENY") // for browsers without frame-ancestors
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")

		got, kind := s.riverUICredential(r)
		switch {
		case got == roleNone:
			h.Set("WWW-Authenticate", riverUIRealm)
			s.consoleError(w, r, http.StatusUnauthorized, "The console needs the admin token: as the password of the browser's login prompt (your name as the user name), or as a bearer token.")
			return
		case got < roleAdmin:
			s.consoleError(w, r, http.StatusForbidden, "The console is for operators: this token may not use it.")
			return
		}
		if !isSafeMethod(r.Method) {
			reason := ""
			if err := cop.Check(r); err != nil {
				reason = err.Error()
			} else if r.Header.Get("Sec-Fetch-Site") == "" && r.Header.Get("Origin") == "" {
				reason = "the request carries neither Sec-Fetch-Site nor Origin"
			}
			if reason != "" {
				s.logger.WarnContext(r.Context(), "console cross-origin request refused",
					slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.String("reason", reason))
				s.consoleError(w, r, http.StatusForbidden, "Cross-origin request refused ("+reason+"): console actions must come from the console's own pages.")
				return
			}
			if kind != credentialBasic {
				s.consoleError(w, r, http.StatusForbidden, "Console actions need Basic auth: the user name is the actor of the action.")
				return
			}
			// Every action records its actor: a blank or over-long user name
			// acts for nobody (purge, unlike replay, has no check of its own).
			if user, _, _ := r.BasicAuth(); strings.TrimSpace(user) == "" || len(user) > maxConsoleActorBytes {
				s.consoleError(w, r, http.StatusForbidden, fmt.Sprintf("Console actions need a user name of 1 to %d bytes at login: it is recorded as the actor of the action.", maxConsoleActorBytes))
				return
			}
			r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
			if err := r.ParseForm(); err != nil {
				var tooBig *http.MaxBytesError
				if errors.As(err, &tooBig) {
					s.consoleError(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("The form is larger than %d bytes.", maxFormBytes))
					return
				}
				s.consoleError(w, r, http.StatusBadRequest, "The form cannot be read: "+err.Error())
				return
			}
		}
		if problem := formTextProblem(r); problem != "" {
			s.consoleError(w, r, http.StatusBadRequest, problem)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// formTextProblem says which of r's query or form values (or the Basic
// auth user name) is not text PostgreSQL takes, or "".
func formTextProblem(r *http.Request) string {
	if user, _, ok := r.BasicAuth(); ok {
		if p := textProblem(user); p != "" {
			return "The user name: " + p + "."
		}
	}
	for _, values := range []map[string][]string{r.URL.Query(), r.PostForm} {
		for _, name := range slices.Sorted(maps.Keys(values)) {
			if p := textProblem(name); p != "" {
				return "A field's name: " + p + "."
			}
			for _, v := range values[name] {
				if p := textProblem(v); p != "" {
					return "Field " + safetext.Visible(name) + ": " + p + "."
				}
			}
		}
	}
	return ""
}

// consoleHandler routes the console's pages; an unknown path is a 404
// page and a wrong method a 405 page, in HTML.
func (s *Server) consoleHandler() http.Handler {
	mux := http.NewServeMux()
	static, err := fs.Sub(consoleFiles, "console/static")
	if err != nil {
		panic(err) // the embedded directory is there: a bug
	}
	files := http.StripPrefix(ConsolePrefix+"/static/", http.FileServerFS(static))
	mux.HandleFunc("GET "+ConsolePrefix+"/static/", func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/") { // no directory listings
			s.consoleError(w, r, http.StatusNotFound, "No such console page.")
			return
		}
		files.ServeHTTP(w, r)
	})
	mux.HandleFunc("GET "+ConsolePrefix+"/{$}", s.consoleOverview)
	mux.HandleFunc("GET "+ConsolePrefix+"/dead-letters", s.consoleDeadLetters)
	mux.HandleFunc("GET "+ConsolePrefix+"/dead-letters/{id}", s.consoleDeadLetter)
	mux.HandleFunc("POST "+ConsolePrefix+"/dead-letters/{id}/replay", s.consoleReplay)
	mux.HandleFunc("POST "+ConsolePrefix+"/dead-letters/{id}/purge", s.consolePurge)
	mux.HandleFunc("GET "+ConsolePrefix+"/dead-letters/replay", s.consoleBulkConfirm)
	mux.HandleFunc("POST "+ConsolePrefix+"/dead-letters/replay", s.consoleBulkReplay)
	mux.HandleFunc("GET "+ConsolePrefix+"/escalations", s.consoleEscalations)
	mux.HandleFunc("GET "+ConsolePrefix+"/queues/{queue}", s.consoleQueue)
	mux.HandleFunc("GET "+ConsolePrefix+"/jobs", s.consoleJobLookup)
	mux.HandleFunc("GET "+ConsolePrefix+"/jobs/{id}", s.consoleJob)
	mux.HandleFunc("POST "+ConsolePrefix+"/jobs/{id}/escalate", s.consoleEscalate)
	mux.HandleFunc("GET "+ConsolePrefix+"/subscriptions", s.consoleSubscriptions)
	mux.HandleFunc("POST "+ConsolePrefix+"/subscriptions", s.consoleSetTier)

	return s.consoleGuard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		rec := &statusRecorder{header: http.Header{}}
		h.ServeHTTP(rec, r)
		if rec.status == http.StatusMethodNotAllowed {
			w.Header().Set("Allow", rec.header.Get("Allow"))
			s.consoleError(w, r, http.StatusMethodNotAllowed, "Method "+r.Method+" is not allowed here.")
			return
		}
		s.consoleError(w, r, http.StatusNotFound, "No such console page.")
	}))
}

// render writes page name with status.
func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, name string, page consolePage) {
	t, ok := s.consolePages[name]
	if !ok {
		s.consoleInternal(w, r, fmt.Errorf("no console page %q (templates: %v)", name, s.consolePagesErr))
		return
	}
	if page.User == "" {
		page.User, _, _ = r.BasicAuth()
	}
	page.RiverUI = s.cfg.RiverUI != nil
	var buf bytes.Buffer
	if err := t.Execute(&buf, page); err != nil {
		s.consoleInternal(w, r, fmt.Errorf("render console page %s: %w", name, err))
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// consoleError answers with the error page.
func (s *Server) consoleError(w http.ResponseWriter, r *http.Request, status int, msg string) {
	s.render(w, r, status, "error", consolePage{Title: http.StatusText(status), Error: msg})
}

// consoleInternal logs err and answers 500 without its details (or 503
// when the database is unreachable), as internalError.
func (s *Server) consoleInternal(w http.ResponseWriter, r *http.Request, err error) {
	s.logger.ErrorContext(r.Context(), "console request failed", slog.String("method", r.Method),
		slog.String("path", r.URL.Path), slog.String("error", err.Error()))
	if isUnavailable(err) {
		s.consoleError(w, r, http.StatusServiceUnavailable, "The database is unavailable; retry later.")
		return
	}
	if _, ok := s.consolePages["error"]; !ok { // the error page itself failed
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	s.consoleError(w, r, http.StatusInternalServerError, "Internal error (logged).")
}

// consoleErrStatus is the status of an error from dlq or escalation, as
// the JSON API's writeErr: 400 invalid, 404 not found, 409 conflicting
// with the current state, 0 for any other (an internal error).
func consoleErrStatus(err error) int {
	switch {
	case errors.Is(err, dlq.ErrInvalid), errors.Is(err, escalation.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, dlq.ErrNotFound), errors.Is(err, escalation.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, dlq.ErrAlreadyReplayed), errors.Is(err, dlq.ErrDuplicate),
		errors.Is(err, escalation.ErrNotQueued), errors.Is(err, escalation.ErrNotServiceQueue):
		return http.StatusConflict
	}
	return 0
}

// cutText is s cut to n characters, "…" last when it was longer.
func cutText(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// prettyJSON is a JSON document indented, or as it is when it is not JSON.
func prettyJSON(raw json.RawMessage) string {
	var buf bytes.Buffer
	if json.Indent(&buf, raw, "", "  ") != nil {
		return string(raw)
	}
	return buf.String()
}

func formatConsoleTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// formatSeconds is a wait in seconds, rounded for reading: "0s", "4s",
// "3m20s", "2h5m".
func formatSeconds(sec float64) string {
	d := time.Duration(sec * float64(time.Second))
	switch {
	case d < time.Minute:
		return strconv.Itoa(int(d.Seconds())) + "s"
	case d < time.Hour:
		return d.Truncate(time.Second).String()
	default:
		return strings.TrimSuffix(d.Truncate(time.Minute).String(), "0s")
	}
}
