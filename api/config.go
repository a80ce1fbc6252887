package api

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tierq/tierq/producer"
	"github.com/tierq/tierq/service"
)

// Defaults and limits of Config.
const (
	// DefaultAddr is Config.Addr's default: loopback only.
	DefaultAddr = "127.0.0.1:8081"
	// DefaultRequestTimeout is Config.RequestTimeout's default.
	DefaultRequestTimeout = 30 * time.Second
	// MinTokenLen is the shortest Token and AdminToken Validate accepts.
	MinTokenLen = 16
)

// Config is the configuration of the API: what New's server needs besides
// its connections, and what Run needs to make them. Build it in Go, or from
// the environment with package config (config.API.Config). WithDefaults
// applies the defaults in one place; Validate checks it without changing
// it. New applies the defaults and does not validate; Run does both.
type Config struct {
	// Token authorises producers (POST /v1/jobs, GET /v1/jobs/{id}), at
	// least MinTokenLen characters. Required: there is no open API.
	Token string
	// AdminToken authorises operators: everything, including escalation,
	// queue stats and dead letters. At least MinTokenLen characters and
	// different from Token. Required.
	AdminToken string

	// Schema is the database schema holding River's and tierq's tables;
	// readyz checks its migrations. Default "": the connection's
	// search_path.
	Schema string

	// MaxAttempts is how many times a job the API inserts is tried before
	// River discards it (and the drain makes it a dead letter), for a kind
	// that declares none of its own (service.MaxAttempts); between 1 and
	// 1000. Default producer.DefaultMaxAttempts, 10.
	MaxAttempts int

	// RequestTimeout bounds each request's work: a database that does not
	// answer in time makes a 503, not a hung client. Default
	// DefaultRequestTimeout, 30s.
	RequestTimeout time.Duration

	// Registry is every service of the application (package service): its
	// kinds are the ones POST /v1/jobs accepts (each kind's args decoded
	// and checked by service.Kind.DecodeArgs, with the checks the service
	// gave its kinds), its service queues are the ones GET /v1/queues and
	// /metrics list first, the ones PATCH /v1/jobs/{id} moves a job between
	// (inside the job's own service), and the ones a dead letter may be
	// replayed into. Required (New does not check it, and the endpoints
	// that need it fail without it).
	Registry *service.Registry

	// NewServices builds, on the pool Run opens, the registry Run serves
	// instead of Registry: for kinds whose checks need the pool. It must
	// have Registry's services, by name: Run fails, naming both, when it
	// has not. Default: nil, Run serves Registry.
	NewServices func(pool *pgxpool.Pool) (*service.Registry, error)

	// RiverUI, when set, is served under RiverUIPrefix (/riverui/) for
	// operators: the admin token as the Basic auth password (any user name)
	// or as a bearer token, and state-changing requests with Basic auth
	// only from River UI's own page (docs/api.md, "River UI").
	// StartRiverUI makes it. Default nil: New's server has no River UI
	// (/riverui/ is a 404), and Run serves one of its own (StartRiverUI on
	// its client); Run serves a RiverUI that is set instead.
	RiverUI http.Handler

	// Addr is where Run listens (host:port). Default DefaultAddr,
	// 127.0.0.1:8081: loopback only.
	Addr string

	// PoolConfig is the database's pgxpool configuration. Required by Run,
	// which opens the pool; New takes a pool instead.
	PoolConfig *pgxpool.Config

	// Logger is where Run and New's server log. Default slog.Default().
	Logger *slog.Logger

	// LogAttrs are logged with "api listening", after the address. Default
	// none.
	LogAttrs []slog.Attr
}

// WithDefaults returns a copy of c with every unset field at its default.
func (c Config) WithDefaults() Config {
	if c.MaxAttempts == 0 {
		c.MaxAttempts = producer.DefaultMaxAttempts
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.Addr == "" {
		c.Addr = DefaultAddr
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate checks c as WithDefaults leaves it (a zero field that has a
// default is not an error) and reports every problem at once
// (errors.Join). It changes nothing.
func (c Config) Validate() error {
	c = c.WithDefaults()
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf("api: "+format, args...)) }

	if len(c.Token) < MinTokenLen {
		fail("Token must be at least %d characters", MinTokenLen)
	}
	if len(c.AdminToken) < MinTokenLen {
		fail("AdminToken must be at least %d characters", MinTokenLen)
	} else if c.AdminToken == c.Token {
		fail("AdminToken must differ from Token")
	}
	if c.Registry == nil {
		fail("Registry is required")
	}
	if c.MaxAttempts < 1 || c.MaxAttempts > 1000 {
		fail("MaxAttempts is %d: must be between 1 and 1000", c.MaxAttempts)
	}
	if c.RequestTimeout < 0 {
		fail("RequestTimeout is %s: must not be negative", c.RequestTimeout)
	}
	if _, port, err := net.SplitHostPort(c.Addr); err != nil {
		fail("Addr %q is not a listen address (host:port, e.g. 127.0.0.1:8081 or :8081)", c.Addr)
	} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		fail("Addr %q is not a listen address (host:port, e.g. 127.0.0.1:8081 or :8081)", c.Addr)
	}
	return errors.Join(errs...)
}
