// Package migrate brings a database up to the schema tierq needs: River's own
// tables (through rivermigrate) and tierq's tables (embedded SQL files applied
// with goose, recorded in table tierq_schema_version).
//
// Up is idempotent and safe to run from several processes at once: it holds a
// PostgreSQL advisory lock, one per schema, for the whole run.
//
// Check (and Read) is what every other tierq process does before it starts:
// it reads the versions recorded in river_migration and tierq_schema_version,
// changing nothing, and returns a *SchemaError saying what it found and what
// this build needs when a migration is missing, so that the process exits
// with "run `tierctl migrate`" instead of a missing relation. A schema
// migrated by a newer tierq passes: migrations only add, and a rolling
// deploy runs the old processes on the migrated database.
package migrate

import (
	"context"
	"embed"
	"fmt"
	"hash/fnv"
	"io/fs"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// versionTable records which of tierq's migrations have run.
const versionTable = "tierq_schema_version"

// FiniteTimestampsCheck is the check constraint on river_job (migration
// 00010) that refuses an infinite created_at, scheduled_at, attempted_at or
// finalized_at: River cannot read such a row, and one made its job
// scheduler, fetch and rescuer fail for every queue. An insert or update
// it refuses fails with SQLSTATE 23514 (check_violation) and this
// constraint's name (pgconn.PgError.ConstraintName).
const FiniteTimestampsCheck = "river_job_tierq_finite_timestamps"

// Result says what Up did.
type Result struct {
	// RiverApplied is the River migration versions applied by this run.
	RiverApplied []int
	// TierqApplied is tierq's migration versions applied by this run.
	TierqApplied []int64
	// TierqVersion is tierq's schema version after the run.
	TierqVersion int64
}

// Up applies every pending River and tierq migration to schema (empty: the
// connection's search_path). The pool's search_path must lead to schema when
// one is given (config.Database.PoolConfig does this); Up creates the schema
// if it does not exist.
func Up(ctx context.Context, pool *pgxpool.Pool, schema string, logger *slog.Logger) (*Result, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: acquire connection: %w", err)
	}
	defer conn.Release()

	lockID := lockIDFor(schema)
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", lockID); err != nil {
		return nil, fmt.Errorf("migrate: take lock: %w", err)
	}
	defer func() {
		// A fresh context: the caller's may be done, and the lock must go.
		_, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", lockID)
	}()

	if schema != "" {
		if _, err := conn.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{schema}.Sanitize()); err != nil {
			return nil, fmt.Errorf("migrate: create schema %q: %w", schema, err)
		}
	}

	migrator, err := riverMigrator(pool, schema, logger)
	if err != nil {
		return nil, err
	}
	riverRes, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	if err != nil {
		return nil, fmt.Errorf("migrate: river: %w", err)
	}
	res := &Result{}
	for _, v := range riverRes.Versions {
		res.RiverApplied = append(res.RiverApplied, v.Version)
	}

	provider, db, err := newProvider(pool, logger)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	applied, err := provider.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: tierq: %w", err)
	}
	for _, r := range applied {
		res.TierqApplied = append(res.TierqApplied, r.Source.Version)
	}
	if res.TierqVersion, err = provider.GetDBVersion(ctx); err != nil {
		return nil, fmt.Errorf("migrate: tierq version: %w", err)
	}
	return res, nil
}

// Pending reports whether any River or tierq migration has not been applied.
func Pending(ctx context.Context, pool *pgxpool.Pool, schema string, logger *slog.Logger) (bool, error) {
	migrator, err := riverMigrator(pool, schema, logger)
	if err != nil {
		return false, err
	}
	validation, err := migrator.Validate(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("migrate: validate river: %w", err)
	}
	if !validation.OK {
		return true, nil
	}
	provider, db, err := newProvider(pool, logger)
	if err != nil {
		return false, err
	}
	defer db.Close()
	pending, err := provider.HasPending(ctx)
	if err != nil {
		return false, fmt.Errorf("migrate: tierq status: %w", err)
	}
	return pending, nil
}

func riverMigrator(pool *pgxpool.Pool, schema string, logger *slog.Logger) (*rivermigrate.Migrator[pgx.Tx], error) {
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema, Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("migrate: river migrator: %w", err)
	}
	return migrator, nil
}

type closer interface{ Close() error }

func newProvider(pool *pgxpool.Pool, logger *slog.Logger) (*goose.Provider, closer, error) {
	fsys, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return nil, nil, fmt.Errorf("migrate: embedded files: %w", err)
	}
	db := stdlib.OpenDBFromPool(pool)
	provider, err := goose.NewProvider(goose.DialectPostgres, db, fsys,
		goose.WithTableName(versionTable),
		goose.WithDisableGlobalRegistry(true),
		goose.WithSlog(logger),
	)
	if err != nil {
		_ = db.Close()
		return nil, nil, fmt.Errorf("migrate: goose provider: %w", err)
	}
	return provider, db, nil
}

// lockIDFor is the advisory lock key for migrating schema: runs against
// different schemas of one database do not wait for each other.
func lockIDFor(schema string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte("tierq/migrate/" + schema))
	return int64(h.Sum64()) //nolint:gosec // any 64 bits make a lock key
}
