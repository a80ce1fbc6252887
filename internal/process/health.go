package process

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tierq/tierq/metrics"
)

// ReadyzPingTimeout bounds /readyz's database ping.
const ReadyzPingTimeout = 2 * time.Second

// Phases of a process, as /healthz and /readyz see them.
const (
	phaseStarting int32 = iota // connecting and starting the River client
	phaseServing               // the River client works its queues
	phaseStopping              // a signal arrived: running jobs finish, nothing is fetched
)

// health is what /healthz and /readyz answer from. Its zero value is a
// starting process.
type health struct {
	phase atomic.Int32
	pool  atomic.Pointer[pgxpool.Pool]
	// clientStopped is the River client's Stopped channel once it started.
	clientStopped atomic.Pointer[<-chan struct{}]
}

// started records a started River client on pool.
func (h *health) started(pool *pgxpool.Pool, stopped <-chan struct{}) {
	h.pool.Store(pool)
	h.clientStopped.Store(&stopped)
	h.phase.Store(phaseServing)
}

// stopping records that the process is stopping.
func (h *health) stopping() { h.phase.Store(phaseStopping) }

// Status is the body of /healthz and /readyz: "ok", or "unavailable" and
// what is wrong.
type Status struct {
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
}

// healthz answers 200 while the process runs as it should, whatever the
// database does (a database outage must not restart every replica), and 503
// when its River client stopped without being asked to: the process does no
// work and should be restarted.
func (h *health) healthz(w http.ResponseWriter, _ *http.Request) {
	if h.phase.Load() == phaseServing && closed(h.clientStopped.Load()) {
		writeStatus(w, http.StatusServiceUnavailable, "river client stopped without a signal")
		return
	}
	writeStatus(w, http.StatusOK, "")
}

// readyz answers 200 once the River client has started and while the
// database answers a ping within ReadyzPingTimeout; 503 while starting,
// while stopping (running jobs finish, nothing new is fetched), and when
// the database does not answer.
func (h *health) readyz(w http.ResponseWriter, r *http.Request) {
	switch h.phase.Load() {
	case phaseStarting:
		writeStatus(w, http.StatusServiceUnavailable, "starting: the River client has not started yet")
		return
	case phaseStopping:
		writeStatus(w, http.StatusServiceUnavailable, "stopping: finishing running jobs")
		return
	}
	if closed(h.clientStopped.Load()) {
		writeStatus(w, http.StatusServiceUnavailable, "river client stopped without a signal")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), ReadyzPingTimeout)
	defer cancel()
	if err := h.pool.Load().Ping(ctx); err != nil {
		writeStatus(w, http.StatusServiceUnavailable, "database unreachable")
		return
	}
	writeStatus(w, http.StatusOK, "")
}

func closed(ch *<-chan struct{}) bool {
	if ch == nil {
		return false
	}
	select {
	case <-*ch:
		return true
	default:
		return false
	}
}

func writeStatus(w http.ResponseWriter, code int, problem string) {
	body := Status{Status: "ok"}
	if problem != "" {
		body = Status{Status: "unavailable", Error: problem}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}

// serve serves reg at /metrics and h at /healthz and /readyz on listener
// until ctx ends, logging the address ("metrics listening", addr=...).
func serve(ctx context.Context, listener net.Listener, reg *prometheus.Registry, h *health, logger *slog.Logger) error {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics.Handler(reg))
	mux.HandleFunc("GET /healthz", h.healthz)
	mux.HandleFunc("GET /readyz", h.readyz)
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, WriteTimeout: 30 * time.Second}
	logger.InfoContext(ctx, "metrics listening", slog.String("addr", listener.Addr().String()))
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = server.Shutdown(shutdownCtx)
	}()
	if err := server.Serve(listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}
