package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/internal/process"
	"github.com/tierq/tierq/producer"
	"github.com/tierq/tierq/service"
)

// ShutdownTimeout is how long Run lets requests in flight finish once it
// is asked to stop.
const ShutdownTimeout = 10 * time.Second

// Run serves the API of cfg on cfg.Addr until ctx ends or the process gets
// SIGINT or SIGTERM: it connects to cfg's database, makes an insert-only
// River client (no queues, never a leader), builds the application's
// services on the pool with newServices (the API runs none of their
// workers: the registry says which services, queues and kinds there are,
// Config.Registry), and serves the routes of New with /metrics and River UI
// under RiverUIPrefix. "api listening" is logged with the address, then
// attrs, then River UI's path.
//
// On the first signal it stops accepting connections and lets requests in
// flight finish for up to ShutdownTimeout, then returns nil; a second
// signal kills the process at once. An error to listen or to serve is
// returned, and so is a registry without an OpenAPI document (OpenAPIFor's
// error: a kind's hand-written args schema that does not describe its args
// type, say), before anything listens.
func Run(ctx context.Context, cfg config.API, logger *slog.Logger, newServices func(pool *pgxpool.Pool) (*service.Registry, error), attrs ...slog.Attr) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	poolConfig, err := cfg.PoolConfig()
	if err != nil {
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, poolConfig)
	if err != nil {
		return fmt.Errorf("connect to database: %w", err)
	}
	defer pool.Close()
	// Insert-only: no queues, never a leader.
	client, err := process.NewClient(pool, producer.ClientConfig(cfg.Schema, logger))
	if err != nil {
		return err
	}

	// River UI's background counts run until Run returns, after the last
	// request has been served.
	uiCtx, stopUI := context.WithCancel(context.WithoutCancel(ctx))
	defer stopUI()
	riverUI, err := StartRiverUI(uiCtx, client, logger)
	if err != nil {
		return err
	}

	registry, err := newServices(pool)
	if err != nil {
		return fmt.Errorf("api: services: %w", err)
	}
	server := New(Config{
		Token: cfg.Token, AdminToken: cfg.AdminToken, Schema: cfg.Schema, MaxAttempts: cfg.MaxAttempts,
		Registry: registry, RiverUI: riverUI,
	}, pool, client, NewMetrics(pool, registry, logger), logger)
	if server.openAPIErr != nil {
		return fmt.Errorf("api: %w", server.openAPIErr)
	}
	httpServer := &http.Server{
		Handler:           server.Handler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      DefaultRequestTimeout + 5*time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	listener, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	listening := []any{slog.String("addr", listener.Addr().String())}
	for _, a := range attrs {
		listening = append(listening, a)
	}
	listening = append(listening, slog.String("river_ui", RiverUIPrefix+"/"))
	logger.InfoContext(ctx, "api listening", listening...)

	served := make(chan error, 1)
	go func() { served <- httpServer.Serve(listener) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	stop() // a second signal kills the process at once
	logger.InfoContext(ctx, "api stopping")
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownTimeout)
	defer cancel()
	if err := httpServer.Shutdown(shutdownCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("shut down: %w", err)
	}
	logger.InfoContext(ctx, "api stopped")
	return nil
}
