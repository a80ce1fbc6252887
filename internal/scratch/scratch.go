// Package scratch creates a schema of its own in a database, migrated with
// River's and tierq's migrations, and drops it again: the tests' isolated
// databases and tierctl bench's work area. Nothing outside the schema is
// touched.
package scratch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tierq/tierq/migrate"
)

// Schema is a migrated schema and a pool whose search_path is that schema.
type Schema struct {
	Name string
	Pool *pgxpool.Pool
	// PoolConfig is the configuration Pool was made from, to make more
	// pools on the same schema.
	PoolConfig *pgxpool.Config

	baseURL string
}

// New creates the schema prefix_<random hex> in the database at baseURL,
// migrates it, and returns it with a pool of at most maxConns connections.
// On error nothing is left behind.
func New(ctx context.Context, baseURL, prefix string, maxConns int32) (*Schema, error) {
	name := prefix + "_" + randomHex(6)
	poolConfig, err := pgxpool.ParseConfig(baseURL)
	if err != nil {
		return nil, fmt.Errorf("parse database URL: %w", err)
	}
	poolConfig.ConnConfig.RuntimeParams["search_path"] = name
	poolConfig.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(ctx, poolConfig)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	s := &Schema{Name: name, Pool: pool, PoolConfig: poolConfig, baseURL: baseURL}
	if _, err := migrate.Up(ctx, pool, name, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		_ = s.Drop(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("migrate schema %s: %w", name, err)
	}
	return s, nil
}

// Drop closes the pool and drops the schema with everything in it, on a
// connection of its own (so it works after ctx's pool is gone).
func (s *Schema) Drop(ctx context.Context) error {
	s.Pool.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.baseURL)
	if err != nil {
		return fmt.Errorf("drop schema %s: %w", s.Name, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{s.Name}.Sanitize()+" CASCADE"); err != nil {
		return fmt.Errorf("drop schema %s: %w", s.Name, err)
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
