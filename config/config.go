// Package config translates the environment into the configuration of
// every tierq process. The library's processes are configured in Go
// (worker.Config, scheduler.Config, api.Config: each field with its
// default, WithDefaults, Validate) and import nothing of this package; this
// package reads the environment into one struct per process (Worker for a
// worker deployment, Scheduler, API, and CLI for tierctl), each loaded from
// an environment passed in with github.com/caarlos0/env/v11 and checked as
// it loads (Load; LoadWorker for a Worker, whose variables depend on the
// application's services), and translates it: Worker.Config,
// Scheduler.Config and API.Config. An application's own variables are a
// Section (LoadSection), whose errors Join reports with the process's.
//
// Nothing here falls back to a default on a bad value. A variable that is
// missing, does not parse or is out of range is an *Error naming the variable
// and the value; every such error matches ErrInvalid, and the commands exit
// with status 2 on it (Exit) before they touch the database.
package config

import (
	"encoding"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"

	"github.com/tierq/tierq/service"
)

// ErrInvalid is matched (errors.Is) by every error that Load returns for bad
// configuration, so that a command can tell it apart and exit with status 2.
var ErrInvalid = errors.New("invalid configuration")

// ExitCodeInvalid is the process exit status for invalid configuration.
const ExitCodeInvalid = 2

// Exit ends a command whose run returned err: status 0 on nil, 2 (after the
// message, prefixed with name) for invalid configuration (ErrInvalid), 1
// for anything else.
func Exit(name string, err error) {
	if err == nil {
		os.Exit(0)
	}
	fmt.Fprintln(os.Stderr, name+":", err)
	if errors.Is(err, ErrInvalid) {
		os.Exit(ExitCodeInvalid)
	}
	os.Exit(1)
}

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
// application's services. An application's own variables are a Section,
// loaded with LoadSection.
func Load[T any, PT interface {
	*T
	Validator
}](environ []string) (T, error) {
	return load(environ, nil, func(cfg *T, c *checker) { PT(cfg).validate(c) })
}

// load parses environ into a T and checks it with validate. services are
// the application's services, which the configurations whose variable
// names derive from a service's name need (Worker); nil for the others.
func load[T any](environ []string, services *service.Registry, validate func(cfg *T, c *checker)) (T, error) {
	vars := env.ToMap(environ)
	fields := fieldsOf(reflect.TypeFor[T]())
	c := &checker{vars: vars, fields: fields, services: services}

	cfg, err := env.ParseAsWithOptions[T](env.Options{Environment: vars})
	if err != nil {
		c.errs = translate(err, vars, fields)
		// The variables no struct field declares are checked all the same,
		// so that one load still reports every bad variable.
		if sv, ok := any(&cfg).(servicesValidator); ok {
			sv.validateServices(c)
		}
		return cfg, c.errs
	}

	validate(&cfg, c)
	if len(c.errs) > 0 {
		return cfg, c.errs
	}
	if f, ok := any(&cfg).(filler); ok {
		f.fill(c)
	}
	return cfg, nil
}

// filler is a configuration with fields no variable sets directly, which
// load fills in once validate (which changes nothing) found no error: what
// the checker read of the variables named after the application's services
// (Worker), and whether or how a variable was written (Jobs.JobTimeoutSet,
// the value CheckKindTimeouts quotes).
type filler interface {
	fill(c *checker)
}

// servicesValidator is a configuration with variables derived from the
// names of the application's services, which no struct field declares; its
// validate calls validateServices too, which keeps what it read in the
// checker for fill.
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
