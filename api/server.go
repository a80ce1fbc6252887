// Package api is tierq's HTTP API: tier-aware enqueue for producers (the
// subscription is looked up here, never chosen by the client), and the
// operations endpoints for operators: job status, escalation, queue and
// priority statistics, dead letters, health and metrics. JSON in and out;
// every error is {"error": "..."} with a 4xx or 5xx status. The OpenAPI
// document is openapi.json (served at /openapi.json, copied in docs/).
//
// The API can also serve River UI (riverqueue.com/riverui) under /riverui/,
// behind the admin token (riverui.go); it is not part of the JSON API nor of
// the OpenAPI document.
//
// New makes the server for a main that runs its own HTTP server; Run is the
// whole process (connect, an insert-only River client, River UI, listen,
// graceful stop on a signal). A team's API of the reference app's services
// and its own is a few lines of its main:
//
//	cfg, err := config.Load[config.API](environ) // exit 2 on config.ErrInvalid
//	if err != nil {
//		return err
//	}
//	return api.Run(ctx, cfg, cfg.NewLogger(stdout), newServices)
//
// where newServices(pool) joins jobs.Registry with the team's registry
// (service.Registry.Join; see the example).
package api

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/tierq/tierq/dlq"
	"github.com/tierq/tierq/escalation"
	"github.com/tierq/tierq/service"
)

// MaxBodyBytes is the largest request body accepted (1 MiB); larger → 413.
const MaxBodyBytes = 1 << 20

//go:embed openapi.json
var openAPI []byte

// Config is what the server needs besides its connections.
type Config struct {
	// Token authorises producers; AdminToken operators (everything).
	Token, AdminToken string
	// Schema is the database schema holding River's and tierq's tables
	// ("" for the connection's search_path); readyz checks its migrations.
	Schema string
	// MaxAttempts is the max_attempts of the jobs the API inserts.
	MaxAttempts int
	// RequestTimeout bounds each request's work (0: DefaultRequestTimeout);
	// a database that does not answer in time makes a 503, not a hung
	// client.
	RequestTimeout time.Duration
	// Registry is every service of the application (package service): its
	// kinds are the ones POST /v1/jobs accepts (each kind's args decoded
	// and checked by service.Kind.DecodeArgs, with the checks the service
	// gave its kinds), its
	// service queues are the ones GET /v1/queues and /metrics list first,
	// the ones PATCH /v1/jobs/{id} moves a job between (inside the job's own
	// service), and the ones a dead letter may be replayed into. Required;
	// New does not check it, and the endpoints that need it fail without
	// it.
	Registry *service.Registry
	// RiverUI, when set, is served under RiverUIPrefix (/riverui/) for
	// operators: the admin token as the Basic auth password (any user name)
	// or as a bearer token, and state-changing requests with Basic auth
	// only from River UI's own page (docs/api.md, "River UI").
	// StartRiverUI makes it. Nil (the default): no River UI, /riverui/ is
	// a 404.
	RiverUI http.Handler
}

// DefaultRequestTimeout is Config.RequestTimeout's default.
const DefaultRequestTimeout = 30 * time.Second

// Server serves the API.
type Server struct {
	cfg     Config
	pool    *pgxpool.Pool
	client  *river.Client[pgx.Tx]
	logger  *slog.Logger
	metrics *Metrics
	ready   readiness // readyz's cached migration check

	producerDigest, adminDigest [sha256.Size]byte
}

// New returns a server inserting through client (an insert-only River
// client) and reading through pool.
func New(cfg Config, pool *pgxpool.Pool, client *river.Client[pgx.Tx], metrics *Metrics, logger *slog.Logger) *Server {
	return &Server{
		cfg: cfg, pool: pool, client: client, logger: logger, metrics: metrics,
		producerDigest: sha256.Sum256([]byte(cfg.Token)),
		adminDigest:    sha256.Sum256([]byte(cfg.AdminToken)),
	}
}

// role is what a token may do.
type role int

const (
	roleNone role = iota
	roleProducer
	roleAdmin
)

// Route is one endpoint: a ServeMux pattern ("METHOD /path/{param}") and
// who may call it (roleNone: anyone).
type Route struct {
	Pattern string
	need    role
	handler http.HandlerFunc
}

// routes lists every endpoint; the OpenAPI document must describe each
// (checked by a test).
func (s *Server) routes() []Route {
	return []Route{
		{"POST /v1/jobs", roleProducer, s.createJob},
		{"GET /v1/jobs/{id}", roleProducer, s.getJob},
		{"PATCH /v1/jobs/{id}", roleAdmin, s.patchJob},

		{"GET /v1/queues", roleAdmin, s.listQueues},
		{"GET /v1/queues/{queue}/priority-stats", roleAdmin, s.priorityStats},

		{"GET /v1/dead-letters", roleAdmin, s.listDeadLetters},
		{"GET /v1/dead-letters/{id}", roleAdmin, s.getDeadLetter},
		{"POST /v1/dead-letters/{id}/replay", roleAdmin, s.replayDeadLetter},
		{"POST /v1/dead-letters/replay", roleAdmin, s.replayDeadLetters},
		{"DELETE /v1/dead-letters/{id}", roleAdmin, s.deleteDeadLetter},

		{"GET /healthz", roleNone, s.healthz},
		{"GET /readyz", roleNone, s.readyz},
		{"GET /metrics", roleNone, s.metrics.Handler().ServeHTTP},
		{"GET /openapi.json", roleNone, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(openAPI)
		}},
	}
}

// Patterns are the ServeMux patterns of every endpoint of the JSON API,
// the ones openapi.json describes; River UI (Config.RiverUI) is not one.
func (s *Server) Patterns() []string {
	var out []string
	for _, r := range s.routes() {
		out = append(out, r.Pattern)
	}
	return out
}

// OpenAPI is the OpenAPI 3 document served at /openapi.json.
func OpenAPI() []byte { return openAPI }

// Handler routes every endpoint, and River UI when Config.RiverUI is set.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, r := range s.routes() {
		if r.need == roleNone {
			mux.Handle(r.Pattern, r.handler)
		} else {
			mux.Handle(r.Pattern, s.auth(r.need, r.handler))
		}
	}
	if s.cfg.RiverUI != nil {
		mux.Handle(RiverUIPrefix+"/", s.riverUI(s.cfg.RiverUI))
	}
	timeout := cmp.Or(s.cfg.RequestTimeout, DefaultRequestTimeout)
	return withTimeout(timeout, jsonMuxErrors(mux))
}

// withTimeout gives every request a deadline; handlers that hit it answer
// 503 through internalError.
func withTimeout(d time.Duration, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), d)
		defer cancel()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// jsonMuxErrors turns the mux's own plain-text 404 and 405 answers into
// JSON errors (with the Allow header kept).
func jsonMuxErrors(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if pattern != "" {
			mux.ServeHTTP(w, r) // sets the path values
			return
		}
		rec := &statusRecorder{header: http.Header{}}
		h.ServeHTTP(rec, r)
		if allow := rec.header.Get("Allow"); allow != "" {
			w.Header().Set("Allow", allow)
		}
		switch rec.status {
		case http.StatusMethodNotAllowed:
			writeError(w, http.StatusMethodNotAllowed, "method %s not allowed on %s", r.Method, r.URL.Path)
		default:
			writeError(w, http.StatusNotFound, "no such endpoint: %s %s", r.Method, r.URL.Path)
		}
	})
}

// statusRecorder keeps a status and headers and drops the body.
type statusRecorder struct {
	header http.Header
	status int
}

func (r *statusRecorder) Header() http.Header         { return r.header }
func (r *statusRecorder) Write(p []byte) (int, error) { return len(p), nil }
func (r *statusRecorder) WriteHeader(status int)      { r.status = status }

// auth lets a request through when its bearer token has at least role
// need: 401 without a token or with a wrong one, 403 for a producer token
// on an operator endpoint. Tokens are compared as SHA-256 digests in
// constant time, so neither their content nor their length leaks.
func (s *Server) auth(need role, next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := s.roleOf(r)
		switch {
		case got == roleNone:
			w.Header().Set("WWW-Authenticate", `Bearer realm="tierq"`)
			writeError(w, http.StatusUnauthorized, "missing or wrong bearer token")
		case got < need:
			writeError(w, http.StatusForbidden, "this token may not use %s %s", r.Method, r.Pattern)
		default:
			next(w, r)
		}
	})
}

// roleOf is the role of r's bearer token.
func (s *Server) roleOf(r *http.Request) role {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return roleNone
	}
	return s.tokenRole(token)
}

// tokenRole is the role token grants (roleNone for "" and for a wrong one).
func (s *Server) tokenRole(token string) role {
	if token == "" {
		return roleNone
	}
	digest := sha256.Sum256([]byte(token))
	isAdmin := subtle.ConstantTimeCompare(digest[:], s.adminDigest[:])
	isProducer := subtle.ConstantTimeCompare(digest[:], s.producerDigest[:])
	switch {
	case isAdmin == 1:
		return roleAdmin
	case isProducer == 1:
		return roleProducer
	}
	return roleNone
}

// errorBody is every error's JSON.
type errorBody struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, status int, format string, args ...any) {
	writeJSON(w, status, errorBody{Error: fmt.Sprintf(format, args...)})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		status = http.StatusInternalServerError
		buf.Reset()
		buf.WriteString(`{"error":"encode response"}` + "\n")
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// writeErr answers err with the status its sentinel means (400 invalid,
// 404 not found, 409 conflicting with the current state) and its message;
// anything else is an internal error.
func (s *Server) writeErr(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, dlq.ErrInvalid), errors.Is(err, escalation.ErrInvalid):
		writeError(w, http.StatusBadRequest, "%v", err)
	case errors.Is(err, dlq.ErrNotFound), errors.Is(err, escalation.ErrNotFound), errors.Is(err, errJobNotFound):
		writeError(w, http.StatusNotFound, "%v", err)
	case errors.Is(err, dlq.ErrAlreadyReplayed), errors.Is(err, dlq.ErrDuplicate), errors.Is(err, escalation.ErrNotQueued),
		errors.Is(err, escalation.ErrNotServiceQueue):
		writeError(w, http.StatusConflict, "%v", err)
	default:
		s.internalError(w, r, err)
	}
}

// internalError logs err and answers 500 without its details (they may name
// tables, hosts or values), or 503 when the database is unreachable.
func (s *Server) internalError(w http.ResponseWriter, r *http.Request, err error) {
	s.logger.ErrorContext(r.Context(), "request failed", slog.String("method", r.Method),
		slog.String("pattern", r.Pattern), slog.String("error", err.Error()))
	if isUnavailable(err) {
		writeError(w, http.StatusServiceUnavailable, "database unavailable; retry later")
		return
	}
	writeError(w, http.StatusInternalServerError, "internal error")
}

// readLimited reads r's body, at most MaxBodyBytes (413 beyond). It writes
// the 4xx itself and returns false when the body is unusable.
func readLimited(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, "body larger than %d bytes", MaxBodyBytes)
		} else {
			writeError(w, http.StatusBadRequest, "read body: %v", err)
		}
		return nil, false
	}
	return body, true
}

// decodeBody decodes a JSON request body into v strictly: at most
// MaxBodyBytes (413 beyond), no unknown fields, exactly one JSON value. It
// writes the 4xx itself and returns false when the body is unusable.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if media, _, err := mime.ParseMediaType(ct); err != nil || media != "application/json" {
			writeError(w, http.StatusUnsupportedMediaType, "content type must be application/json, not %.100q", ct)
			return false
		}
	}
	body, ok := readLimited(w, r)
	if !ok {
		return false
	}
	if err := DecodeStrict(body, v); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return false
	}
	return true
}

// DecodeStrict decodes exactly one JSON value from data into v, refusing
// unknown fields, fields in another letter case than documented
// (encoding/json would match "User_Id" to user_id), a field given twice,
// and trailing data.
func DecodeStrict(data []byte, v any) error {
	if err := checkKeys(data, v); err != nil {
		return fmt.Errorf("invalid JSON body: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("invalid JSON body: %w", jsonError(err))
	}
	if dec.More() {
		return errors.New("invalid JSON body: more than one JSON value")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("invalid JSON body: trailing data after the JSON value")
	}
	return nil
}

// checkKeys checks the keys of the JSON object in data against the json
// names of the struct v points to: exact case, each at most once. Anything
// that is not an object of a struct is left to the decoder.
func checkKeys(data []byte, v any) error {
	t := reflect.TypeOf(v)
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil
	}
	allowed := map[string]bool{}
	for f := range t.Elem().Fields() {
		if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" {
			allowed[name] = true
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		key, _ := tok.(string)
		switch {
		case seen[key]:
			return fmt.Errorf("field %q given twice", key)
		case !allowed[key]:
			return fmt.Errorf("json: unknown field %q", key)
		}
		seen[key] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil
		}
	}
	return nil
}

// jsonError words encoding/json's errors for a client.
func jsonError(err error) error {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		return fmt.Errorf("field %q must be %s, not %s", typeErr.Field, typeErr.Type, typeErr.Value)
	}
	if errors.Is(err, io.EOF) {
		return errors.New("empty body")
	}
	return err
}

// pathID reads a positive int64 path value; it writes the 400 itself.
func pathID(w http.ResponseWriter, r *http.Request, name string) (int64, bool) {
	id, err := strconv.ParseInt(r.PathValue(name), 10, 64)
	if err != nil || id <= 0 {
		writeError(w, http.StatusBadRequest, "%s must be a positive 64-bit integer, not %.40q", name, r.PathValue(name))
		return 0, false
	}
	return id, true
}
