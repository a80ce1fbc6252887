package config

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Section is a configuration of an application's own, beside tierq's: a
// struct whose fields carry `env` (and `envDefault`, `secret`) tags as
// tierq's configurations do, and whose Validate method checks what parsing
// cannot. LoadSection loads one; Join reports its errors together with a
// tierq configuration's, so that one start lists every bad variable and the
// process exits 2 before it connects. The reference app's are in package
// jobs.
type Section interface {
	// Validate records each bad variable on c. It must not change the
	// section.
	Validate(c *Checker)
}

// LoadSection parses environ (KEY=VALUE strings) into an application's own
// Section T and validates it, as Load does for tierq's configurations: a
// variable that is missing, does not parse or fails Validate is an *Error
// naming the variable and its value (secrets redacted), and the error
// matches ErrInvalid.
func LoadSection[T any, PT interface {
	*T
	Section
}](environ []string) (T, error) {
	return load(environ, nil, func(cfg *T, c *checker) { PT(cfg).Validate(&Checker{c: c}) })
}

// Checker records what is wrong with a Section's variables. Fields are
// named by their Go field name; errors name the variable behind it and
// quote the value the operator wrote.
type Checker struct {
	c *checker
}

// Fail records that the variable behind the Go field name is wrong, the
// reason formatted from format and args. A name that is no field of the
// section panics: that is a programming error.
func (c *Checker) Fail(field, format string, args ...any) {
	c.c.fail(field, format, args...)
}

// Value is the raw value of the variable behind the Go field name and
// whether the environment sets it at all: a variable set to "" gets its
// default from the parser, which a Validate that must refuse an empty
// value (one an unset shell variable emptied) needs to tell apart.
func (c *Checker) Value(field string) (string, bool) {
	f, ok := c.c.fields[field]
	if !ok {
		panic("config: no variable for field " + field) // programming error, caught by tests
	}
	value, set := c.c.vars[f.key]
	return value, set
}

// TimeZone checks that the variable behind the Go field name is a time
// zone name (an IANA name such as Europe/Berlin, or UTC).
func (c *Checker) TimeZone(field, tz string) {
	if !validTimeZone(tz) {
		c.Fail(field, timeZoneReason)
	}
}

const timeZoneReason = "not a time zone name (examples: UTC, Europe/Berlin)"

// Cron checks the cron expression spec of the variable behind the Go field
// name, read in time zone tz (CRON_TZ) as ParseCron reads it. When tz is no
// time zone the expression is not checked: that error is the time zone's
// variable's (TimeZone).
func (c *Checker) Cron(field, spec, tz string) {
	if !validTimeZone(tz) {
		return
	}
	if _, err := ParseCron(spec, tz); err != nil {
		c.Fail(field, "%s", err.Error())
	}
}

// ParseCron parses a cron expression as tierq reads one: a standard
// five-field expression or a descriptor (@hourly, @daily, @every 30m),
// in time zone tz; "@every D" runs at multiples of D (AlignedEvery), so
// that every replica computes the same run times. The time zone is tz, not
// part of the expression.
func ParseCron(spec, tz string) (cron.Schedule, error) {
	spec = strings.TrimSpace(spec)
	switch {
	case spec == "":
		return nil, errors.New(`must not be empty (a cron expression such as "0 */6 * * *" or "@every 1h")`)
	case strings.HasPrefix(spec, "TZ=") || strings.HasPrefix(spec, "CRON_TZ="):
		return nil, errors.New("set the time zone with CRON_TZ, not inside the expression")
	case !validTimeZone(tz):
		return nil, fmt.Errorf("time zone %q: %s", tz, timeZoneReason)
	}
	schedule, err := cron.ParseStandard("CRON_TZ=" + tz + " " + spec)
	if err != nil {
		return nil, fmt.Errorf(`not a cron expression (%w); examples: "0 */6 * * *", "30 3 * * *", "@every 1h"`, err)
	}
	if every, ok := schedule.(cron.ConstantDelaySchedule); ok {
		return AlignedEvery(every.Delay), nil
	}
	return schedule, nil
}

// validTimeZone reports whether tz names a time zone (IANA name or UTC).
func validTimeZone(tz string) bool {
	if tz == "" || strings.ContainsAny(tz, " \t") {
		return false
	}
	_, err := time.LoadLocation(tz)
	return err == nil
}

// Join is the errors of several loads (Load, LoadWorker, LoadSection) as
// one: an Errors listing every bad variable of each, in order, so that a
// process reports them all at once; a variable two of them read (CRON_TZ)
// is listed once, as the first reported it. Nil errors are skipped; Join of
// only nils is nil. An error that is not a configuration error is joined as
// errors.Join would.
func Join(errs ...error) error {
	var (
		all   Errors
		other []error
	)
	for _, err := range errs {
		var es Errors
		switch {
		case err == nil:
		case errors.As(err, &es):
			for _, e := range es {
				if !slices.ContainsFunc(all, func(seen *Error) bool { return seen.Var == e.Var }) {
					all = append(all, e)
				}
			}
		default:
			other = append(other, err)
		}
	}
	switch {
	case len(other) > 0:
		if len(all) > 0 {
			other = append(other, all)
		}
		return errors.Join(other...)
	case len(all) > 0:
		return all
	}
	return nil
}
