// Package config owns the configuration of every tierq process: one struct per
// process (Worker now; the scheduler and the API follow), each loaded from an
// environment passed in with github.com/caarlos0/env/v11 and checked by its
// Validate method.
//
// Nothing here falls back to a default on a bad value. A variable that is
// missing, does not parse or is out of range is an *Error naming the variable
// and the value; every such error matches ErrInvalid, and the commands exit
// with status 2 on it before they touch the database.
package config

import (
	"encoding"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tierq/tierq/service"
)

// ErrInvalid is matched (errors.Is) by every error that Load returns for bad
// configuration, so that a command can tell it apart and exit with status 2.
var ErrInvalid = errors.New("invalid configuration")

// ExitCodeInvalid is the process exit status for invalid configuration.
const ExitCodeInvalid = 2

// Error is one bad variable.
type Error struct {
	// Var is the environment variable, e.g. "DATABASE_MAX_CONNS".
	Var string
	// Value is the value it had ("" when unset). Secrets are redacted.
	Value string
	// Reason says what is wrong and what would be right.
	Reason string
}

func (e *Error) Error() string { return fmt.Sprintf("%s=%q: %s", e.Var, e.Value, e.Reason) }

// Is makes every *Error match ErrInvalid.
func (e *Error) Is(target error) bool { return target == ErrInvalid }

// Errors is every bad variable found in one load, in field order.
type Errors []*Error

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return "invalid configuration: " + strings.Join(lines, "; ")
}

// Is makes Errors match ErrInvalid.
func (es Errors) Is(target error) bool { return target == ErrInvalid }

// Unwrap exposes each *Error to errors.As.
func (es Errors) Unwrap() []error {
	errs := make([]error, len(es))
	for i, e := range es {
		errs[i] = e
	}
	return errs
}

// Validator is what every process configuration implements (and only this
// package can): validate gets a checker that knows the raw values, so its
// errors quote what the operator typed.
type Validator interface {
	validate(c *checker)
}

// Load parses environ (KEY=VALUE strings, as from os.Environ) into a T and
// validates it. The error, if any, is an Errors value listing every bad
// variable.
//
// A Worker is loaded with LoadWorker instead: its variables depend on the
// application's services.
func Load[T any, PT interface {
	*T
	Validator
}](environ []string) (T, error) {
	return load[T, PT](environ, nil)
}

// load is Load with the application's services, which the configurations
// whose variable names derive from a service's name need (Worker).
func load[T any, PT interface {
	*T
	Validator
}](environ []string, services *service.Registry) (T, error) {
	vars := env.ToMap(environ)
	fields := fieldsOf(reflect.TypeFor[T]())
	c := &checker{vars: vars, fields: fields, services: services}

	cfg, err := env.ParseAsWithOptions[T](env.Options{Environment: vars})
	if err != nil {
		c.errs = translate(err, vars, fields)
		// The variables no struct field declares are checked all the same,
		// so that one load still reports every bad variable.
		if sv, ok := any(PT(&cfg)).(servicesValidator); ok {
			sv.validateServices(c)
		}
		return cfg, c.errs
	}

	PT(&cfg).validate(c)
	if len(c.errs) > 0 {
		return cfg, c.errs
	}
	return cfg, nil
}

// servicesValidator is a configuration with variables derived from the
// names of the application's services, which no struct field declares; its
// validate calls validateServices too.
type servicesValidator interface {
	validateServices(c *checker)
}

// field is what Load knows about one variable of a configuration struct.
type field struct {
	name   string // Go field name
	key    string // environment variable
	secret string // how the value is redacted in errors: "" (not), "true" (a database URL's password), "url" (all but scheme and host), "token" (all)
}

// fieldsOf lists the variables of a configuration struct, embedded structs
// included, keyed by Go field name.
func fieldsOf(t reflect.Type) map[string]field {
	fields := map[string]field{}
	for sf := range t.Fields() {
		if sf.Anonymous && sf.Type.Kind() == reflect.Struct {
			for name, f := range fieldsOf(sf.Type) {
				fields[name] = f
			}
			continue
		}
		key, _, _ := strings.Cut(sf.Tag.Get("env"), ",")
		if key == "" {
			continue
		}
		fields[sf.Name] = field{name: sf.Name, key: key, secret: sf.Tag.Get("secret")}
	}
	return fields
}

// translate turns caarlos0/env's errors, which name Go fields, into Errors,
// which name variables and values.
func translate(err error, vars map[string]string, fields map[string]field) Errors {
	var agg env.AggregateError
	if !errors.As(err, &agg) {
		return Errors{{Var: "?", Reason: err.Error()}}
	}
	keyOf := map[string]field{}
	for _, f := range fields {
		keyOf[f.key] = f
	}
	var errs Errors
	for _, e := range agg.Errors {
		var (
			parseErr  env.ParseError
			notSetErr env.VarIsNotSetError
			emptyErr  env.EmptyVarError
		)
		switch {
		case errors.As(e, &parseErr):
			f := fields[parseErr.Name]
			errs = append(errs, &Error{Var: f.key, Value: display(f, vars[f.key]), Reason: reasonOf(parseErr.Type, parseErr.Err)})
		case errors.As(e, &notSetErr):
			errs = append(errs, &Error{Var: notSetErr.Key, Reason: "required and not set"})
		case errors.As(e, &emptyErr):
			errs = append(errs, &Error{Var: emptyErr.Key, Reason: "must not be empty"})
		default:
			errs = append(errs, &Error{Var: "?", Reason: e.Error()})
		}
	}
	return errs
}

// reasonOf says what a value that did not parse should have been; strconv's
// and time's own messages repeat the value and name no unit.
func reasonOf(t reflect.Type, err error) string {
	msg := err.Error()
	switch {
	case reflect.PointerTo(t).Implements(reflect.TypeFor[encoding.TextUnmarshaler]()):
		return msg // the type's own message (slog.Level: "unknown name")
	case t == reflect.TypeFor[time.Duration]():
		return "not a duration (examples: 250ms, 30s, 5m, 1h)"
	case t.Kind() == reflect.Bool:
		return "not a boolean (true or false)"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		if strings.Contains(msg, "out of range") {
			return "out of range for an integer"
		}
		return "not an integer"
	}
	return msg
}

func display(f field, value string) string {
	switch f.secret {
	case "":
		return value
	case "token":
		if value == "" {
			return ""
		}
		return "[redacted]"
	case "url":
		return redactURL(value)
	default:
		return redact(value)
	}
}

// redactURL keeps a URL's scheme and host only: a webhook URL's path and
// query are its secret.
func redactURL(value string) string {
	u, err := url.Parse(value)
	if err != nil || u.Host == "" {
		if value == "" {
			return ""
		}
		return "[redacted]"
	}
	return u.Scheme + "://" + u.Host + "/[redacted]"
}

// redact hides the password of a database URL (and anything that does not
// parse as one), keeping enough to recognise which database it was. pgx
// also reads a password from the query (?password=, ?sslpassword=), so every
// query parameter whose name holds "password" is hidden too.
func redact(value string) string {
	u, err := url.Parse(value)
	if err != nil || u.Scheme == "" {
		if value == "" {
			return ""
		}
		return "[redacted]"
	}
	if u.RawQuery != "" {
		query, err := url.ParseQuery(u.RawQuery)
		if err != nil {
			return "[redacted]"
		}
		changed := false
		for key := range query {
			if strings.Contains(strings.ToLower(key), "password") {
				query[key] = []string{"xxxxx"}
				changed = true
			}
		}
		if changed {
			u.RawQuery = query.Encode()
		}
	}
	return u.Redacted()
}

// checker collects validation errors, quoting each variable's raw value.
type checker struct {
	vars   map[string]string
	fields map[string]field
	// services are the application's services (LoadWorker); nil for a
	// configuration that does not depend on them.
	services *service.Registry
	errs     Errors
}

// fail records that the variable behind Go field name is wrong.
func (c *checker) fail(name, format string, args ...any) {
	f, ok := c.fields[name]
	if !ok {
		panic("config: no variable for field " + name) // programming error, caught by tests
	}
	c.errs = append(c.errs, &Error{Var: f.key, Value: display(f, c.vars[f.key]), Reason: fmt.Sprintf(format, args...)})
}

// failVar records that variable key, which no struct field declares (a
// service's worker count), is wrong.
func (c *checker) failVar(key, format string, args ...any) {
	c.errs = append(c.errs, &Error{Var: key, Value: c.vars[key], Reason: fmt.Sprintf(format, args...)})
}

func (c *checker) intRange(name string, v, lo, hi int) {
	if v < lo || v > hi {
		c.fail(name, "must be between %d and %d", lo, hi)
	}
}

// fetch checks one queue class's fetch cooldown and poll interval against
// each other and against River's limits.
func (c *checker) fetch(cooldownName string, cooldown time.Duration, pollName string, poll time.Duration) {
	if cooldown < time.Millisecond || cooldown > time.Minute {
		c.fail(cooldownName, "must be between 1ms and 1m")
	}
	if poll < time.Millisecond || poll > time.Hour {
		c.fail(pollName, "must be between 1ms and 1h")
	} else if poll < cooldown {
		c.fail(pollName, "must not be shorter than the fetch cooldown (%s)", cooldown)
	}
}

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
