// Command api serves tierq's HTTP API (package api): tier-aware enqueue for
// producers, operations for operators, /healthz, /readyz and /metrics, and
// River UI at /riverui/ for operators (the admin token as the Basic auth
// password, any user name).
//
// API_TOKEN and API_ADMIN_TOKEN are required: there is no open-by-default
// API. An analysis target outside ANALYSIS_ROOTS is refused (400). SIGINT or SIGTERM stops accepting connections and lets requests in
// flight finish for up to 10 seconds. Invalid configuration exits 2 before
// any connection is made.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tierq/tierq/api"
	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/internal/process"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/producer"
)

func main() {
	process.Exit("api", run(context.Background(), os.Args, os.Environ(), os.Stdout))
}

func run(ctx context.Context, _ []string, environ []string, stdout io.Writer) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	cfg, err := config.Load[config.API](environ)
	if err != nil {
		return err
	}
	logger := cfg.NewLogger(stdout)
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

	// River UI's background counts run until run returns, after the last
	// request has been served.
	uiCtx, stopUI := context.WithCancel(context.WithoutCancel(ctx))
	defer stopUI()
	riverUI, err := api.StartRiverUI(uiCtx, client, logger)
	if err != nil {
		return err
	}

	// The API runs none of the workers: the registry says which services,
	// queues and kinds there are.
	registry, err := jobs.Registry(jobs.Deps{Pool: pool, Logger: logger, AnalysisRoots: cfg.Analysis.Roots})
	if err != nil {
		return err
	}
	server := api.New(api.Config{
		Token: cfg.Token, AdminToken: cfg.AdminToken, Schema: cfg.Schema, MaxAttempts: cfg.MaxAttempts,
		Registry: registry, RiverUI: riverUI,
	}, pool, client, api.NewMetrics(pool, registry, logger), logger)
	httpServer := &http.Server{
		Handler:           server.Handler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      api.DefaultRequestTimeout + 5*time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	listener, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	logger.InfoContext(ctx, "api listening", slog.String("addr", listener.Addr().String()),
		slog.String("analysis_roots", cfg.Analysis.Roots.String()),
		slog.String("river_ui", api.RiverUIPrefix+"/"))

	served := make(chan error, 1)
	go func() { served <- httpServer.Serve(listener) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	stop() // a second signal kills the process at once
	logger.InfoContext(ctx, "api stopping")
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := httpServer.Shutdown(shutdownCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("shut down: %w", err)
	}
	logger.InfoContext(ctx, "api stopped")
	return nil
}
