package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"riverqueue.com/riverui"
)

// RiverUIPrefix is the path under which Server.Handler serves River UI
// (Config.RiverUI): the UI at /riverui/, its JSON API under /riverui/api/.
const RiverUIPrefix = "/riverui"

// riverUIRealm is the Basic auth realm browsers show in their login prompt.
const riverUIRealm = `Basic realm="tierq River UI"`

// Credential kinds, as logged.
const (
	credentialBasic  = "basic"
	credentialBearer = "bearer"
)

// StartRiverUI builds River UI (riverqueue.com/riverui: the embedded front
// end and its JSON API) on client, to be served under RiverUIPrefix, and
// starts its background services (job counts by state, refreshed every 10 s
// or so, and an exact count at most every 30 s), which stop when ctx is done.
// Put the handler in Config.RiverUI: Server.Handler puts the admin
// credential and the cross-origin check in front of it.
//
// River UI reads and writes River's tables in client's schema
// (river.Config.Schema), so an insert-only client such as the API's own
// serves it.
func StartRiverUI(ctx context.Context, client *river.Client[pgx.Tx], logger *slog.Logger) (http.Handler, error) {
	handler, err := riverui.NewHandler(&riverui.HandlerOpts{
		Endpoints: riverui.NewEndpoints(client, nil),
		Logger:    logger,
		Prefix:    RiverUIPrefix,
	})
	if err != nil {
		return nil, fmt.Errorf("new river ui handler: %w", err)
	}
	if err := handler.Start(ctx); err != nil {
		return nil, fmt.Errorf("start river ui: %w", err)
	}
	return handler, nil
}

// riverUI guards River UI, an operator tool: only the admin token gets in,
// as the password of HTTP Basic auth (any user name; what a browser sends
// after its login prompt) or as a bearer token (scripts). No credential or
// a wrong one → 401 with a Basic challenge; the producer token → 403.
//
// A browser resends Basic credentials by itself, to any page's request, so a
// state-changing request (any method but GET, HEAD and OPTIONS) carrying
// them must come from River UI's own page: its Sec-Fetch-Site, when sent,
// must be same-origin, and its Origin, when sent, this server's own
// (http://Host, unless the connection is TLS, or https://Host); otherwise
// 403. Bearer requests are not checked: no browser adds a bearer token by
// itself. Each state-changing request let through is logged with the
// credential kind, the method and path, and the job ids or queue it names.
func (s *Server) riverUI(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, kind := s.riverUICredential(r)
		switch {
		case got == roleNone:
			w.Header().Set("WWW-Authenticate", riverUIRealm)
			if r.Header.Get("Authorization") == "" {
				writeError(w, http.StatusUnauthorized, "River UI needs the admin token: as the Basic auth password (any user name) or as a bearer token")
			} else {
				writeError(w, http.StatusUnauthorized, "wrong credentials for River UI")
			}
			return
		case got < roleAdmin:
			writeError(w, http.StatusForbidden, "River UI is for operators: this token may not use it")
			return
		}
		if isSafeMethod(r.Method) {
			next.ServeHTTP(w, r)
			return
		}
		if kind == credentialBasic {
			if reason := crossOrigin(r); reason != "" {
				s.logger.WarnContext(r.Context(), "river ui cross-origin request refused",
					slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.String("reason", reason))
				writeError(w, http.StatusForbidden, "cross-origin request refused: %s", reason)
				return
			}
		}
		s.riverUIAction(w, r, kind, next)
	})
}

// riverUICredential is the role of r's Basic auth password or bearer token,
// and which of the two it is.
func (s *Server) riverUICredential(r *http.Request) (role, string) {
	if _, password, ok := r.BasicAuth(); ok {
		return s.tokenRole(password), credentialBasic
	}
	return s.roleOf(r), credentialBearer
}

func isSafeMethod(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return true
	}
	return false
}

// crossOrigin says why r may have been sent by another site's page, or ""
// when it was not. A header that is absent does not count against r: older
// browsers send no Sec-Fetch-Site, and only browsers send Origin.
func crossOrigin(r *http.Request) string {
	for _, site := range r.Header.Values("Sec-Fetch-Site") {
		if site != "same-origin" {
			return fmt.Sprintf("Sec-Fetch-Site is %.40q, not same-origin", site)
		}
	}
	for _, origin := range r.Header.Values("Origin") {
		if !isOwnOrigin(origin, r) {
			return fmt.Sprintf("Origin %.100q is not this server's (%s)", origin, strings.Join(ownOrigins(r), " or "))
		}
	}
	return ""
}

// ownOrigins are the origins of River UI's page as served to r: the
// scheme of r's connection with r's Host, and https with r's Host when the
// connection is plain HTTP, as it is behind a proxy that terminates TLS (the
// proxy must pass the Host header on). X-Forwarded-* headers are not read:
// the API trusts no proxy.
func ownOrigins(r *http.Request) []string {
	if r.TLS != nil {
		return []string{"https://" + r.Host}
	}
	return []string{"http://" + r.Host, "https://" + r.Host}
}

func isOwnOrigin(origin string, r *http.Request) bool {
	for _, own := range ownOrigins(r) {
		if strings.EqualFold(origin, own) {
			return true
		}
	}
	return false
}

// riverUIAction serves a state-changing River UI request and logs it. The
// body is read (at most MaxBodyBytes) for the job ids it names and handed on
// unchanged.
func (s *Server) riverUIAction(w http.ResponseWriter, r *http.Request, kind string, next http.Handler) {
	body, ok := readLimited(w, r)
	if !ok {
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))

	attrs := []slog.Attr{
		slog.String("credential", kind),
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
	}
	if ids, ok := jobIDs(body); ok {
		attrs = append(attrs, slog.Any("job_ids", ids))
	}
	if queue, ok := riverUIQueue(r.URL.Path); ok {
		attrs = append(attrs, slog.String("queue", queue))
	}
	rec := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	next.ServeHTTP(rec, r)
	attrs = append(attrs, slog.Int("status", rec.status))
	s.logger.LogAttrs(r.Context(), slog.LevelInfo, "river ui action", attrs...)
}

// jobIDs reads the "ids" of a River UI job action's body
// ({"ids": ["12", 13]}: River UI sends them as strings and accepts numbers).
// An id that is neither is skipped: River UI refuses the request anyway.
func jobIDs(body []byte) ([]int64, bool) {
	var req struct {
		IDs []json.RawMessage `json:"ids"`
	}
	if err := json.Unmarshal(body, &req); err != nil || req.IDs == nil {
		return nil, false
	}
	ids := make([]int64, 0, len(req.IDs))
	for _, raw := range req.IDs {
		var text string
		if err := json.Unmarshal(raw, &text); err != nil {
			text = string(raw)
		}
		if id, err := strconv.ParseInt(text, 10, 64); err == nil {
			ids = append(ids, id)
		}
	}
	return ids, true
}

// riverUIQueue is the queue named by a River UI queue path
// (/riverui/api/queues/{name}, …/{name}/pause, …/{name}/resume).
func riverUIQueue(path string) (string, bool) {
	rest, ok := strings.CutPrefix(path, RiverUIPrefix+"/api/queues/")
	if !ok {
		return "", false
	}
	name, _, _ := strings.Cut(rest, "/")
	return name, name != ""
}

// statusWriter remembers the status written through it.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(status int) {
	w.status = status
	w.ResponseWriter.WriteHeader(status)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
