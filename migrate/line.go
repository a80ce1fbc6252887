package migrate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/tierq/tierq/internal/riverschema"
)

// Line is a migration line of an application's own tables, beside River's
// and tierq's: goose migrations (NNNNN_name.sql files at the root of FS)
// applied to the same schema and recorded in a version table of their own,
// so that its versions never mix with tierq's. Up applies it, and only the
// application that owns the tables calls it: tierq's migrations
// (migrate.Up, `tierctl migrate`) never do, and tierq's schema check
// (Check) does not read it.
//
// The reference app's tables (analysis_results, spec_documents) are such a
// line (jobs.Migrations), which its worker and scheduler processes apply
// when they start. A team's own tables can be another.
type Line struct {
	// Name names the line in errors ("reference app"). Required.
	Name string
	// Table is the table, in the schema, that records which of the line's
	// migrations have run (goose's version table). Required, and not
	// tierq's own (tierq_schema_version) nor River's (river_migration):
	// each line has its own.
	Table string
	// FS holds the line's migrations at its root: goose SQL files named
	// NNNNN_name.sql, with -- +goose Up and -- +goose Down sections.
	// Required.
	FS fs.FS
}

// LineResult says what Line.Up did.
type LineResult struct {
	// Applied is the line's migration versions applied by this run, in
	// order; empty when none was pending.
	Applied []int64
	// Version is the line's version in the schema after the run: the
	// highest version its table records.
	Version int64
}

func (l Line) validate() error {
	switch {
	case l.Name == "":
		return errors.New("migrate: line: Name is required")
	case l.Table == "":
		return fmt.Errorf("migrate: line %s: Table is required", l.Name)
	case l.Table == versionTable || l.Table == riverschema.MigrationTable:
		return fmt.Errorf("migrate: line %s: Table %s is not the line's own (it records tierq's or River's migrations)", l.Name, l.Table)
	case l.FS == nil:
		return fmt.Errorf("migrate: line %s: FS is required", l.Name)
	}
	return nil
}

// Up applies every pending migration of the line to schema (empty: the
// connection's search_path), as migrate.Up does tierq's: the pool's
// search_path must lead to schema when one is given
// (config.Database.PoolConfig does this), the schema is created if it does
// not exist, and a PostgreSQL advisory lock, one per line and schema, is
// held for the whole run, so that processes starting together apply each
// migration once and the others find nothing to do. Up is idempotent, and
// a schema whose table records versions this build does not know of (a
// newer build applied them) is left as it is.
//
// logger (nil: none) gets one info line, "<Name> migrations applied" with
// their versions and the line's version after them, when any was pending;
// nothing otherwise.
func (l Line) Up(ctx context.Context, pool *pgxpool.Pool, schema string, logger *slog.Logger) (*LineResult, error) {
	if err := l.validate(); err != nil {
		return nil, err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate %s: acquire connection: %w", l.Name, err)
	}
	defer conn.Release()

	lockID := lockIDFor(schema + "/" + l.Table)
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", lockID); err != nil {
		return nil, fmt.Errorf("migrate %s: take lock: %w", l.Name, err)
	}
	defer func() {
		// A fresh context: the caller's may be done, and the lock must go.
		_, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", lockID)
	}()

	if schema != "" {
		if _, err := conn.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{schema}.Sanitize()); err != nil {
			return nil, fmt.Errorf("migrate %s: create schema %q: %w", l.Name, schema, err)
		}
	}

	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	provider, err := goose.NewProvider(goose.DialectPostgres, db, l.FS,
		goose.WithTableName(l.Table),
		goose.WithDisableGlobalRegistry(true),
		// goose logs "no migrations to run" on every start: the line logs
		// what it applied itself, below.
		goose.WithSlog(slog.New(slog.NewTextHandler(io.Discard, nil))),
	)
	if err != nil {
		return nil, fmt.Errorf("migrate %s: goose provider: %w", l.Name, err)
	}
	applied, err := provider.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate %s: %w", l.Name, err)
	}
	res := &LineResult{}
	for _, r := range applied {
		res.Applied = append(res.Applied, r.Source.Version)
	}
	if res.Version, err = provider.GetDBVersion(ctx); err != nil {
		return nil, fmt.Errorf("migrate %s: version: %w", l.Name, err)
	}
	if len(res.Applied) > 0 && logger != nil {
		logger.InfoContext(ctx, l.Name+" migrations applied",
			slog.String("schema", schema), slog.Any("applied", res.Applied), slog.Int64("version", res.Version))
	}
	return res, nil
}
