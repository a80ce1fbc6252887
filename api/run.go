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

	"github.com/tierq/tierq/internal/process"
	"github.com/tierq/tierq/migrate"
	"github.com/tierq/tierq/producer"
)

// ShutdownTimeout is how long Run lets requests in flight finish once it
// is asked to stop.
const ShutdownTimeout = 10 * time.Second

// StartCheckTimeout bounds Run's check of the database schema at start.
const StartCheckTimeout = 5 * time.Second

// checkSchemaAtStart checks the schema as every tierq process does
// (process.CheckSchema): a schema missing a migration stops the API with a
// *migrate.SchemaError ("run `tierctl migrate`"). A database that does not
// answer within StartCheckTimeout does not: the API starts, logs a warning,
// and /readyz answers 503 (and checks the migrations) until it answers.
func checkSchemaAtStart(ctx context.Context, pool *pgxpool.Pool, schema string, logger *slog.Logger) error {
	checkCtx, cancel := context.WithTimeout(ctx, StartCheckTimeout)
	defer cancel()
	err := process.CheckSchema(checkCtx, pool, schema, logger)
	var schemaErr *migrate.SchemaError
	if err == nil || errors.As(err, &schemaErr) || ctx.Err() != nil {
		return err
	}
	logger.WarnContext(ctx, "database unreachable at start: serving anyway; requests that need it fail and /readyz answers 503 until it answers (schema not checked)",
		slog.String("error", err.Error()))
	return nil
}

// Run serves the API of cfg on cfg.Addr until ctx ends or the process gets
// SIGINT or SIGTERM. cfg takes its defaults (Config.WithDefaults) and is
// validated first (Config.Validate: every problem at once). Run connects
// with cfg.PoolConfig (required), makes an insert-only River client (no
// queues, never a leader), builds the application's services on the pool
// with cfg.NewServices (or takes cfg.Registry; the API runs none of their
// workers: the registry says which services, queues and kinds there are),
// and serves the routes of New with /metrics and River UI under
// RiverUIPrefix (cfg.RiverUI when set, else one Run starts on its client). "api listening" is logged with the address, then
// cfg.LogAttrs, then River UI's path.
//
// On the first signal it stops accepting connections and lets requests in
// flight finish for up to ShutdownTimeout, then returns nil; a second
// signal kills the process at once. Before it listens it checks the
// schema: a missing migration is a *migrate.SchemaError returned at once
// (the process exits 1 saying to run `tierctl migrate`); a database that
// does not answer is logged as a warning and the API serves anyway. An
// error to listen or to serve is
// returned, and so is a registry without an OpenAPI document (OpenAPIFor's
// error: a kind's hand-written args schema that does not describe its args
// type, say), before anything listens.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	cfg = cfg.WithDefaults()
	if cfg.PoolConfig == nil {
		return errors.New("api: Config.PoolConfig is required to run")
	}
	logger := cfg.Logger
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	pool, err := pgxpool.NewWithConfig(ctx, cfg.PoolConfig)
	if err != nil {
		return fmt.Errorf("connect to database: %w", err)
	}
	defer pool.Close()
	if err := checkSchemaAtStart(ctx, pool, cfg.Schema, logger); err != nil {
		return err
	}
	// Insert-only: no queues, never a leader.
	client, err := process.NewClient(pool, producer.ClientConfig(cfg.Schema, logger))
	if err != nil {
		return err
	}

	// River UI's background counts run until Run returns, after the last
	// request has been served.
	riverUI := cfg.RiverUI
	if riverUI == nil {
		uiCtx, stopUI := context.WithCancel(context.WithoutCancel(ctx))
		defer stopUI()
		if riverUI, err = StartRiverUI(uiCtx, client, logger); err != nil {
			return err
		}
	}

	registry := cfg.Registry
	if cfg.NewServices != nil {
		if registry, err = cfg.NewServices(pool); err != nil {
			return fmt.Errorf("api: services: %w", err)
		}
		if err := cfg.Registry.SameServices(registry); err != nil {
			return fmt.Errorf("api: %w", err)
		}
	}
	// For the stock tierctl; like the schema check, bounded, and no reason
	// not to serve.
	recordCtx, cancelRecord := context.WithTimeout(ctx, StartCheckTimeout)
	if err := registry.Record(recordCtx, pool, "api"); err != nil {
		logger.WarnContext(ctx, "services not recorded", slog.String("error", err.Error()))
	}
	cancelRecord()
	serverConfig := cfg
	serverConfig.Registry, serverConfig.RiverUI = registry, riverUI
	server := New(serverConfig, pool, client, NewMetrics(pool, registry, logger))
	if server.openAPIErr != nil {
		return fmt.Errorf("api: %w", server.openAPIErr)
	}
	httpServer := &http.Server{
		Handler:           server.Handler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      cfg.RequestTimeout + 5*time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	listener, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	listening := []any{slog.String("addr", listener.Addr().String())}
	for _, a := range cfg.LogAttrs {
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
