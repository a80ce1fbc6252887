// Package api is tierq's HTTP API: tier-aware enqueue for producers (the
// subscription is looked up here, never chosen by the client), and the
// operations endpoints for operators: job status, escalation, queue and
// priority statistics, dead letters, health and metrics. JSON in and out;
// every error is {"error": "..."} with a 4xx or 5xx status. The OpenAPI
// document served at /openapi.json describes the server's registry's kinds
// (OpenAPIFor): the core document, openapi.json, with each kind's args
// schema, its args type's own (JobArgsWithOpenAPISchema) or one generated
// from the type. docs/openapi.json is the reference app's.
//
// The API can also serve River UI (riverqueue.com/riverui) under /riverui/,
// behind the admin token (riverui.go); it is not part of the JSON API nor of
// the OpenAPI document. Beside it, under /console/, the operator console
// (console.go): server-rendered pages of tierq's dead letters, escalation
// audit and queues, behind the same admin credentials.
//
// New makes the server for a main that runs its own HTTP server; Run is the
// whole process (connect, an insert-only River client, River UI, listen,
// graceful stop on a signal). A team's API of the reference app's services
// and its own is a few lines of its main:
//
//	return api.Run(ctx, api.Config{
//		Token:      producerToken,
//		AdminToken: adminToken,
//		Registry:   registry, // the team's service.Registry
//		PoolConfig: poolConfig,
//		Logger:     logger,
//	})
//
// A Config is built in Go from the registry and plain values (see the
// example), or from the environment by package config (config.API.Config),
// which this package does not import.
package api

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
)

// MaxBodyBytes is the largest request body accepted (1 MiB); larger → 413.
const MaxBodyBytes = 1 << 20

// Server serves the API.
type Server struct {
	cfg     Config
	pool    *pgxpool.Pool
	client  *river.Client[pgx.Tx]
	logger  *slog.Logger
	metrics *Metrics
	ready   readiness // readyz's cached migration check

	// openAPI is the document of the registry's kinds (OpenAPIFor), or
	// why there is none (no registry).
	openAPI    []byte
	openAPIErr error

	producerDigest, adminDigest [sha256.Size]byte

	// consolePages are the operator console's templates, or why there are
	// none (a bug in the embedded templates: every console page is a 500).
	consolePages    consolePages
	consolePagesErr error
}

// New returns a server of cfg, with its defaults (Config.WithDefaults; New
// does not validate it, Run does), inserting through client (an
// insert-only River client) and reading through pool. It serves
// OpenAPIFor(cfg.Registry) at /openapi.json (without a registry, a 500).
// It logs to cfg.Logger (default slog.Default()).
func New(cfg Config, pool *pgxpool.Pool, client *river.Client[pgx.Tx], metrics *Metrics) *Server {
	cfg = cfg.WithDefaults()
	doc, err := OpenAPIFor(cfg.Registry)
	pages, pagesErr := parseConsolePages()
	return &Server{
		cfg: cfg, pool: pool, client: client, logger: cfg.Logger, metrics: metrics,
		openAPI: doc, openAPIErr: err,
		consolePages: pages, consolePagesErr: pagesErr,
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

		{"GET /v1/escalations", roleAdmin, s.listEscalations},

		{"GET /v1/limits", roleAdmin, s.listLimits},
		{"GET /v1/limits/{service}/tenant", roleAdmin, s.getTenantLimits},
		{"PATCH /v1/limits/{service}/tenant", roleAdmin, s.patchTenantLimits},
		{"DELETE /v1/limits/{service}/tenant", roleAdmin, s.deleteTenantLimits},

		{"GET /healthz", roleNone, s.healthz},
		{"GET /readyz", roleNone, s.readyz},
		{"GET /metrics", roleNone, s.metrics.Handler().ServeHTTP},
		{"GET /openapi.json", roleNone, s.serveOpenAPI},
	}
}

// serveOpenAPI serves the document of the server's kinds.
func (s *Server) serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	if s.openAPIErr != nil {
		writeError(w, http.StatusInternalServerError, "%v", s.openAPIErr)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(s.openAPI)
}

// Patterns are the ServeMux patterns of every endpoint of the JSON API,
// the ones the OpenAPI document describes; River UI (Config.RiverUI) is not one.
func (s *Server) Patterns() []string {
	var out []string
	for _, r := range s.routes() {
		out = append(out, r.Pattern)
	}
	return out
}

// Handler routes every endpoint, the operator console (ConsolePrefix,
// console.go), and River UI when Config.RiverUI is set.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, r := range s.routes() {
		handler := checkRequestText(r.Pattern, r.handler)
		if r.need == roleNone {
			mux.Handle(r.Pattern, handler)
		} else {
			mux.Handle(r.Pattern, s.auth(r.need, handler))
		}
	}
	if s.cfg.RiverUI != nil {
		mux.Handle(RiverUIPrefix+"/", s.riverUI(s.cfg.RiverUI))
	}
	mux.Handle(ConsolePrefix+"/", s.consoleHandler())
	return withTimeout(s.cfg.RequestTimeout, jsonMuxErrors(mux))
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
