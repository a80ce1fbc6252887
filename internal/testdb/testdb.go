// Package testdb gives each test its own PostgreSQL schema, migrated with
// River's and tierq's migrations and the reference app's own line
// (jobs.Migrations: its tables analysis_results and spec_documents), so that
// tests that write run in parallel on one real database. NewCore's schema
// has River's and tierq's alone, as a team's database does.
//
// The server comes from TEST_DATABASE_URL, defaulting to database tierq_test on
// the local server (postgres://postgres@127.0.0.1:5432/tierq_test), which is
// created when missing. `make test` starts a throwaway server first when none
// answers.
package testdb

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/scratch"
	"github.com/tierq/tierq/jobs"
)

// DefaultURL is used when TEST_DATABASE_URL is not set.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/tierq_test?sslmode=disable"

// DB is one test's schema.
type DB struct {
	// Pool is connected with search_path set to Schema.
	Pool *pgxpool.Pool
	// Schema is the test's own schema, dropped when the test ends.
	Schema string
	// URL is the server's connection string (without the schema); processes
	// started by a test get it as DATABASE_URL and Schema as DATABASE_SCHEMA.
	URL string
}

// URL returns the test server's connection string.
func URL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultURL
}

var (
	ensureOnce sync.Once
	ensureErr  error
)

// New creates a schema for t, migrates it with River's and tierq's
// migrations and the reference app's line (jobs.Migrations), and drops it
// when t ends.
func New(t testing.TB) *DB {
	t.Helper()
	db := NewCore(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := jobs.Migrations().Up(ctx, db.Pool, db.Schema, nil)
	require.NoError(t, err, "reference app's migrations")
	return db
}

// NewCore creates a schema for t migrated with River's and tierq's
// migrations alone (migrate.Up, what `tierctl migrate` applies), as a
// team's database is, and drops it when t ends: no reference app's tables.
func NewCore(t testing.TB) *DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	baseURL := URL()
	ensureOnce.Do(func() { ensureErr = ensureDatabase(ctx, baseURL) })
	require.NoError(t, ensureErr, "test database %s", redacted(baseURL))

	s, err := scratch.New(ctx, baseURL, "test", 8)
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := s.Drop(context.Background()); err != nil {
			t.Logf("testdb: %v", err)
		}
	})
	return &DB{Pool: s.Pool, Schema: s.Name, URL: baseURL}
}

func ensureDatabase(ctx context.Context, rawURL string) error {
	conn, err := pgx.Connect(ctx, rawURL)
	if err == nil {
		return conn.Close(ctx)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "3D000" { // invalid_catalog_name
		return fmt.Errorf("connect: %w", err)
	}

	cfg, err := pgx.ParseConfig(rawURL)
	if err != nil {
		return err
	}
	name := cfg.Database
	cfg.Database = "postgres"
	admin, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect to create database %q: %w", name, err)
	}
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	if errors.As(err, &pgErr) && (pgErr.Code == "42P04" || pgErr.Code == "23505") {
		return nil // created by a test binary running beside this one
	}
	return err
}

func redacted(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "[unparseable URL]"
	}
	return u.Redacted()
}

// PoolFor opens a pool from config and closes it when t ends.
func PoolFor(t testing.TB, config *pgxpool.Config) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.NewWithConfig(context.Background(), config)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}
