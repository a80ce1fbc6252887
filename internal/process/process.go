// Package process runs a long-lived tierq process around one River client:
// connect, start, wait for SIGINT or SIGTERM, soft-stop, exit.
package process

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/tierq/tierq/migrate"
)

// CheckSchema reads schema's migration versions (migrate.Read) before a
// process starts: a schema missing a migration is a *migrate.SchemaError
// (its message says what was found, what is needed and to run `tierctl
// migrate`; the process exits 1), a database that does not answer is an
// error too, and a schema a newer tierq migrated is logged and accepted (a
// rolling deploy runs the old processes on the migrated database).
func CheckSchema(ctx context.Context, pool *pgxpool.Pool, schema string, logger *slog.Logger) error {
	st, err := migrate.Read(ctx, pool, schema)
	if err != nil {
		return fmt.Errorf("connect to database: %w", err)
	}
	if err := st.Err(); err != nil {
		return err
	}
	if st.Newer() {
		logger.InfoContext(ctx, "database schema is newer than this binary (a newer tierq migrated it; fine during a rolling deploy)",
			slog.String("schema", st.Schema), slog.String("found", st.Found.String()), slog.String("needs", st.Need.String()))
	}
	return nil
}

// NewClient returns a River client on pool with cfg and hooks added; every
// tierq process (and tierctl's insert-only client) builds its client here.
func NewClient(pool *pgxpool.Pool, cfg *river.Config, hooks ...rivertype.Hook) (*river.Client[pgx.Tx], error) {
	cfg.Hooks = append(cfg.Hooks, hooks...)
	client, err := river.NewClient(riverpgxv5.New(pool), cfg)
	if err != nil {
		return nil, fmt.Errorf("new river client: %w", err)
	}
	return client, nil
}

// Spec describes one process.
type Spec struct {
	// Name is the process name used in log messages ("worker", "scheduler").
	Name   string
	Logger *slog.Logger
	// Pool is the pgxpool configuration of the process's database.
	Pool *pgxpool.Config
	// Schema is the database schema (DATABASE_SCHEMA; empty: the pool's
	// search_path), checked before the client starts (CheckSchema).
	Schema string
	// SoftStopTimeout is logged when stopping; River's client enforces it.
	SoftStopTimeout time.Duration
	// NewClient builds the River client on the connected pool.
	NewClient func(pool *pgxpool.Pool) (*river.Client[pgx.Tx], error)
	// Attrs are logged with "<name> started".
	Attrs []any
	// Background, when set, runs beside the started client until the
	// process stops: its ctx ends with the first signal (or when the client
	// stopped on its own), and Run waits for it to return (after the client
	// has stopped) before closing the pool.
	Background func(ctx context.Context, pool *pgxpool.Pool, client *river.Client[pgx.Tx])
	// MetricsAddr, when set, is where Metrics is served at /metrics, with
	// /healthz (liveness) and /readyz (readiness) beside it, from before
	// the process connects until it has stopped.
	MetricsAddr string
	Metrics     *prometheus.Registry
}

// startFailed is what Run returns when starting failed with err: nil when a
// signal (or the end of Run's context) cut the start short, since nothing
// ran yet and the stop is the one asked for (a terminal's Ctrl-C a moment
// after `make run` started the processes had the scheduler exit 1); err
// otherwise.
func (s Spec) startFailed(ctx context.Context, err error) error {
	if ctx.Err() == nil || !errors.Is(err, context.Canceled) {
		return err
	}
	s.Logger.InfoContext(context.WithoutCancel(ctx), s.Name+" stopped before it started", slog.String("error", err.Error()))
	return nil
}

// Run runs the process until ctx ends or a signal arrives. It first checks
// the schema (CheckSchema): one missing a migration, or a database that
// does not answer, is an error returned before the client starts. On the first
// SIGINT or SIGTERM River stops fetching and lets running jobs finish for up
// to the soft-stop timeout, then cancels them; a second signal kills the
// process at once.
func Run(ctx context.Context, s Spec) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	var h health
	if s.MetricsAddr != "" {
		listener, err := net.Listen("tcp", s.MetricsAddr)
		if err != nil {
			return fmt.Errorf("metrics: listen on %s: %w", s.MetricsAddr, err)
		}
		// Served until Run returns, not until the first signal: probes and
		// scrapes go on while running jobs finish.
		serveCtx, cancelServe := context.WithCancel(context.WithoutCancel(ctx))
		served := make(chan struct{})
		defer func() { cancelServe(); <-served }()
		go func() {
			defer close(served)
			if err := serve(serveCtx, listener, s.Metrics, &h, s.Logger); err != nil {
				s.Logger.ErrorContext(serveCtx, "metrics server stopped", slog.String("error", err.Error()))
			}
		}()
	}

	pool, err := pgxpool.NewWithConfig(ctx, s.Pool)
	if err != nil {
		return fmt.Errorf("connect to database: %w", err)
	}
	defer pool.Close()
	if err := CheckSchema(ctx, pool, s.Schema, s.Logger); err != nil {
		return s.startFailed(ctx, err)
	}

	client, err := s.NewClient(pool)
	if err != nil {
		return s.startFailed(ctx, err)
	}
	if err := client.Start(ctx); err != nil {
		return s.startFailed(ctx, fmt.Errorf("start river client: %w", err))
	}
	h.started(pool, client.Stopped())
	background := make(chan struct{})
	backgroundCtx, cancelBackground := context.WithCancel(ctx)
	defer cancelBackground()
	if s.Background != nil {
		go func() {
			defer close(background)
			s.Background(backgroundCtx, pool, client)
		}()
	} else {
		close(background)
	}
	s.Logger.InfoContext(ctx, s.Name+" started", append([]any{slog.String("client_id", client.ID())}, s.Attrs...)...)

	select {
	case <-ctx.Done():
	case <-client.Stopped():
		// River stopped without being asked: a process that works nothing
		// must not look alive. Run returns an error (the process exits 1)
		// so that its orchestrator restarts it at once, not after the
		// liveness probe (/healthz answers 503 meanwhile) has failed.
		s.Logger.ErrorContext(ctx, s.Name+": river client stopped without a signal")
		cancelBackground()
		<-background
		return errors.New("river client stopped without a signal")
	}
	stop() // from here on, a second signal terminates the process at once
	h.stopping()
	ctx = context.WithoutCancel(ctx)
	s.Logger.InfoContext(ctx, s.Name+" stopping: finishing running jobs", slog.Duration("soft_stop_timeout", s.SoftStopTimeout))
	<-client.Stopped()
	<-background
	s.Logger.InfoContext(ctx, s.Name+" stopped")
	return nil
}
