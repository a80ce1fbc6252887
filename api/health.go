package api

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tierq/tierq/migrate"
)

// leaderFreshness is how recently a River leader must have held a lease for
// readyz: River's lease is 15s, a hand-over takes up to about 20s.
const leaderFreshness = time.Minute

// healthz answers 200 while the process serves requests.
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// Readiness is readyz's body: one entry per check, "ok" or what is wrong.
type Readiness struct {
	Status string `json:"status"`
	// Error names the failed checks (only when not ready).
	Error      string `json:"error,omitempty"`
	Database   string `json:"database"`
	Migrations string `json:"migrations"`
	Leader     string `json:"leader"`
}

// readyz answers 200 when the database answers, every migration is applied
// and a River leader (a scheduler) held a lease within the last minute;
// 503 otherwise, saying which check failed.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
	defer cancel()
	res := Readiness{Status: "ok", Database: "ok", Migrations: "ok", Leader: "ok"}
	var failed []string
	fail := func(field *string, msg string) {
		*field = msg
		res.Status = "unavailable"
		failed = append(failed, msg)
	}
	if err := s.pool.Ping(ctx); err != nil {
		fail(&res.Database, "unreachable")
		fail(&res.Migrations, "unknown")
		fail(&res.Leader, "unknown")
		res.Error = "database unreachable"
		writeJSON(w, http.StatusServiceUnavailable, res)
		return
	}
	if pending, err := migrate.Pending(ctx, s.pool, s.cfg.Schema, s.logger); err != nil {
		fail(&res.Migrations, "could not check")
	} else if pending {
		fail(&res.Migrations, "pending: run tierctl migrate")
	}
	var leader string
	err := s.pool.QueryRow(ctx, `SELECT leader_id FROM river_leader WHERE expires_at > now() - make_interval(secs => $1)`,
		leaderFreshness.Seconds()).Scan(&leader)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		fail(&res.Leader, "no River leader in the last minute: is a scheduler running?")
	case err != nil:
		fail(&res.Leader, "could not check")
	default:
		res.Leader = leader
	}
	status := http.StatusOK
	if res.Status != "ok" {
		status = http.StatusServiceUnavailable
		res.Error = "not ready: " + strings.Join(failed, "; ")
	}
	writeJSON(w, status, res)
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
