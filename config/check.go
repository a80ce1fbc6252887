package config

import (
	"fmt"
	"time"

	"github.com/tierq/tierq/service"
)

// checker collects validation errors, quoting each variable's raw value.
type checker struct {
	vars   map[string]string
	fields map[string]field
	// services are the application's services (LoadWorker); nil for a
	// configuration that does not depend on them.
	services *service.Registry
	// selected is what validateServices read of the selected service's
	// variables (LoadWorker), for Worker.fill.
	selected *selectedService
	errs     Errors
}

// selectedService is the service a worker deployment serves and what its
// variables set.
type selectedService struct {
	svc    *service.Service
	counts service.ClassWorkers
	lend   bool
	floor  int
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
