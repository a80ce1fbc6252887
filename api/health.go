package api

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tierq/tierq/internal/queuestats"
	"github.com/tierq/tierq/migrate"
)

// MigrationsCacheFor is how long readyz trusts a migration check that found
// the schema current: probes within it do not check again. A check that
// found pending migrations or failed is not kept, so the next probe checks
// again.
const MigrationsCacheFor = 10 * time.Second

// noLeader is readyz's leader field when no River leader held a lease
// within queuestats.LeaderFreshness. It does not make the API unready.
const noLeader = "absent: no River leader in the last minute: is a scheduler running?"

// healthz answers 200 while the process serves requests.
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// Readiness is readyz's body: one entry per check, "ok" or what is wrong,
// and the River leader for information.
type Readiness struct {
	Status string `json:"status"`
	// Error names the failed checks (only when not ready).
	Error      string `json:"error,omitempty"`
	Database   string `json:"database"`
	Migrations string `json:"migrations"`
	// Leader is the ID of the River leader (a scheduler) that held a lease
	// within queuestats.LeaderFreshness, noLeader, or "unknown: ..." when
	// it could not be read. Information only: it never makes the API unready, since
	// inserts do not need a leader.
	Leader string `json:"leader"`
}

// readyz answers 200 when this process can serve: the database answers and
// every migration is applied (checked at most once per MigrationsCacheFor
// while it is current); 503 otherwise, saying which check failed. Whether a
// River leader is present is reported in the body and does not change the
// status: a scheduler outage must not take every API replica out of
// rotation while inserts work.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
	defer cancel()
	if err := s.pool.Ping(ctx); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, Readiness{
			Status: "unavailable", Error: "database unreachable",
			Database: "unreachable", Migrations: "unknown", Leader: "unknown: database unreachable",
		})
		return
	}
	res := Readiness{Status: "ok", Database: "ok", Migrations: "ok"}
	pending, err := s.ready.migrationsPending(ctx, func(ctx context.Context) (bool, error) {
		return migrate.Pending(ctx, s.pool, s.cfg.Schema, s.logger)
	})
	switch {
	case err != nil:
		s.logger.WarnContext(ctx, "readyz: check migrations", slog.String("error", err.Error()))
		res.Migrations = "could not check"
	case pending:
		res.Migrations = "pending: run tierctl migrate"
	}
	switch leader, err := queuestats.RecentLeader(ctx, s.pool); {
	case err != nil:
		res.Leader = "unknown: could not check"
	case leader == "":
		res.Leader = noLeader
	default:
		res.Leader = leader
	}
	if res.Migrations != "ok" {
		res.Status = "unavailable"
		res.Error = "not ready: migrations: " + res.Migrations
		writeJSON(w, http.StatusServiceUnavailable, res)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// readiness keeps readyz's last successful migration check. The zero value
// is ready to use.
type readiness struct {
	// nowFunc is the clock (nil: time.Now); tests set it.
	nowFunc func() time.Time

	mu sync.Mutex
	// currentAt is when a check that found every migration applied
	// started; zero when none has.
	currentAt time.Time
}

func (r *readiness) now() time.Time {
	if r.nowFunc != nil {
		return r.nowFunc()
	}
	return time.Now()
}

// migrationsPending answers from the last check when it found the schema
// current less than MigrationsCacheFor ago, and runs check otherwise. Only
// a check that found nothing pending is kept. Concurrent probes after the
// cache expired may each check once; none waits for another's check.
func (r *readiness) migrationsPending(ctx context.Context, check func(context.Context) (bool, error)) (bool, error) {
	startedAt := r.now()
	r.mu.Lock()
	fresh := !r.currentAt.IsZero() && startedAt.Sub(r.currentAt) < MigrationsCacheFor
	r.mu.Unlock()
	if fresh {
		return false, nil
	}
	pending, err := check(ctx)
	if err != nil || pending {
		return pending, err
	}
	r.mu.Lock()
	if startedAt.After(r.currentAt) {
		r.currentAt = startedAt
	}
	r.mu.Unlock()
	return false, nil
}

// isUnavailable says whether err means the database cannot be reached (or
// is shutting down), as opposed to a failed query.
func isUnavailable(err error) bool {
	var (
		connectErr *pgconn.ConnectError
		netErr     net.Error
		pgErr      *pgconn.PgError
	)
	switch {
	case errors.As(err, &pgErr):
		// admin_shutdown, crash_shutdown, cannot_connect_now
		return pgErr.Code == "57P01" || pgErr.Code == "57P02" || pgErr.Code == "57P03"
	case errors.As(err, &connectErr), errors.As(err, &netErr), errors.Is(err, context.DeadlineExceeded):
		return true
	}
	return pgconn.Timeout(err)
}
