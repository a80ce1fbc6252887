package config

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Observability is how a long-running process exposes itself.
type Observability struct {
	// MetricsAddr, when set, serves Prometheus metrics at /metrics on this
	// address (host:port; :9090 for all interfaces). Empty (the default):
	// no metrics server.
	MetricsAddr string `env:"METRICS_ADDR"`
}

func (o *Observability) validate(c *checker) {
	if o.MetricsAddr != "" {
		c.listenAddr("MetricsAddr", o.MetricsAddr)
	}
}

// listenAddr checks a host:port to listen on.
func (c *checker) listenAddr(name, addr string) {
	host, port, err := net.SplitHostPort(addr)
	n, portErr := strconv.Atoi(port)
	if err != nil || portErr != nil || n < 0 || n > 65535 || (host != "" && net.ParseIP(host) == nil && !validHostName(host)) {
		c.fail(name, "not a listen address (host:port, e.g. 127.0.0.1:8081 or :8081)")
	}
}

// validHostName accepts letters, digits, dots and hyphens.
func validHostName(host string) bool {
	for _, r := range host {
		if r != '-' && r != '.' && (r < '0' || r > '9') && (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') {
			return false
		}
	}
	return len(host) <= 253
}

// Database is the connection every process needs.
type Database struct {
	// URL is the PostgreSQL connection string, e.g.
	// postgres://tierq@db:5432/tierq?sslmode=disable. Required.
	URL string `env:"DATABASE_URL,required,notEmpty" secret:"true"`

	// Schema is the PostgreSQL schema holding River's and tierq's tables.
	// Empty (the default) means the connection's search_path decides, which
	// is `public` on a stock server.
	Schema string `env:"DATABASE_SCHEMA"`

	// MaxConns caps the process's connection pool. Default 20.
	MaxConns int `env:"DATABASE_MAX_CONNS" envDefault:"20"`
}

func (d *Database) validate(c *checker) {
	if _, err := pgxpool.ParseConfig(d.URL); err != nil {
		c.fail("URL", "not a PostgreSQL connection string")
	}
	if d.Schema != "" && !validIdentifier(d.Schema) {
		c.fail("Schema", "must be a plain lower-case identifier (letters, digits, underscores)")
	}
	c.intRange("MaxConns", d.MaxConns, 2, 1000)
}

// PoolConfig is the pgxpool configuration for this database: the pool size
// and, when Schema is set, a search_path pinned to it.
func (d *Database) PoolConfig() (*pgxpool.Config, error) {
	poolConfig, err := pgxpool.ParseConfig(d.URL)
	if err != nil {
		return nil, fmt.Errorf("parse DATABASE_URL: %w", err)
	}
	poolConfig.MaxConns = int32(min(d.MaxConns, 1000)) //nolint:gosec // validated range
	if d.Schema != "" {
		poolConfig.ConnConfig.RuntimeParams["search_path"] = d.Schema
	}
	return poolConfig, nil
}

func validIdentifier(s string) bool {
	if s == "" || len(s) > 63 || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return true
}

// Logging is how a process logs.
type Logging struct {
	// Level is debug, info, warn or error. Default info.
	Level slog.Level `env:"LOG_LEVEL" envDefault:"info"`

	// Format is text (for people) or json (for log pipelines). Default text.
	Format string `env:"LOG_FORMAT" envDefault:"text"`
}

func (l *Logging) validate(c *checker) {
	if l.Format != "text" && l.Format != "json" {
		c.fail("Format", "must be text or json")
	}
}

// NewLogger returns a logger writing to w at the configured level and format.
func (l *Logging) NewLogger(w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: l.Level}
	if l.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
