// Package service describes the services tierq runs: a service is a set of
// River job kinds with its own three queues (ADR-16), worked by its own
// worker deployment. A Registry holds every service of an application and is
// the one source of truth for routing, worker configuration, the scheduler
// (which registers every kind, so River's rescuer retries any of them), the
// API's accepted kinds, metrics and tierctl.
//
// A team adds its own service with a Config: a name, a base queue, the River
// workers of its kinds, and default worker counts per class of queue:
//
//	mail, err := service.New(&service.Config{
//		Name:  "mailer",
//		Kinds: []service.Kind{service.WorkerKind(&SendWorker{},
//			service.Timeout[SendArgs](30*time.Second))},
//	})
//
// A kind owns its timeout (Timeout; DefaultTimeout when it declares none):
// River applies it to every job of the kind, in the worker that runs it and
// in the leader's rescuer alike, and the scheduler checks
// RESCUE_STUCK_JOBS_AFTER against every kind's (Registry.Timeouts). A kind
// may declare its attempts too (MaxAttempts), which tierq's inserts apply.
//
// Nothing in tierq's core names a particular service: the reference app's
// two services (package jobs) are built the same way.
package service

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/riverqueue/river"

	"github.com/tierq/tierq/routing"
	"github.com/tierq/tierq/tiers"
)

// Config describes a service. Its zero value is not valid: Name and Kinds
// are required.
type Config struct {
	// Name identifies the service: the value of WORKER_SERVICE that makes a
	// worker deployment serve it, and, upper-cased, the prefix of its
	// environment variables (<NAME>_QUEUE_PRIORITY_WORKERS and so on). One
	// to 40 lower-case letters, digits and underscores, starting with a
	// letter. Required.
	Name string

	// BaseQueue is the prefix of the service's three queues: <BaseQueue>_priority
	// (paid tiers), <BaseQueue>_default (free and unknown tiers) and
	// <BaseQueue>_scheduled (background work). The same characters as Name,
	// at most 100 of them (River's limit on a queue name is 128).
	//
	// Default: Name.
	BaseQueue string

	// Kinds are the job kinds the service works (WorkerKind makes one from a
	// River worker, with the kind's timeout and, optionally, its attempts:
	// service.Timeout, service.MaxAttempts). A kind belongs to one service
	// only. Required.
	Kinds []Kind

	// Workers are the default worker counts of one process of the service's
	// worker deployment, per class of queue (River's MaxWorkers); the
	// deployment's environment overrides each. A count of 0 means the
	// deployment does not serve that queue.
	//
	// Default: DefaultWorkers (ADR-16's split, half to the priority queue).
	Workers *ClassWorkers

	// PeriodicJobs are River periodic jobs the scheduler deployment runs for
	// the service (River runs them on the leader only). A job one inserts
	// into the service's queues is of one of Kinds and is worked by the
	// service's workers; one it inserts into the scheduler's own queue (see
	// scheduler.CronJob) is of one of PeriodicKinds and is worked by the
	// scheduler. Optional.
	PeriodicJobs []*river.PeriodicJob

	// PeriodicKinds are the kinds of the jobs PeriodicJobs insert into the
	// scheduler's own queue: the service's maintenance, worked by the
	// scheduler deployment (a cleanup of old results, say).
	// Registry.AddWorkers registers them; the
	// service's workers do not work them (Service.AddWorkers) and they are
	// not among the kinds Registry.ForKind finds, so a producer cannot
	// insert one as the service's work. A kind belongs to one service, in
	// Kinds or here. Optional.
	PeriodicKinds []Kind
}

// ClassWorkers are worker counts per class of queue.
type ClassWorkers struct {
	Priority  int
	Default   int
	Scheduled int
}

// DefaultWorkers are a service's worker counts when its Config sets none:
// priority 5, default 3, scheduled 2 (ADR-16).
var DefaultWorkers = ClassWorkers{Priority: 5, Default: 3, Scheduled: 2}

// Of is the count for class.
func (w ClassWorkers) Of(class routing.Class) int {
	switch class {
	case routing.Priority:
		return w.Priority
	case routing.Scheduled:
		return w.Scheduled
	default:
		return w.Default
	}
}

// nameRE is a service name or base queue: lower-case, a letter first.
var nameRE = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// Name and base queue length limits.
const (
	maxNameLen      = 40
	maxBaseQueueLen = 100
)

// withDefaults is a copy of c with every default applied.
func (c *Config) withDefaults() *Config {
	out := *c
	if out.BaseQueue == "" {
		out.BaseQueue = out.Name
	}
	w := DefaultWorkers
	if c.Workers != nil {
		w = *c.Workers
	}
	out.Workers = &w
	out.Kinds = slices.Clone(c.Kinds)
	out.PeriodicJobs = slices.Clone(c.PeriodicJobs)
	out.PeriodicKinds = slices.Clone(c.PeriodicKinds)
	return &out
}

// validate checks a Config with its defaults applied. It changes nothing.
func (c *Config) validate() error {
	var problems []string
	if !nameRE.MatchString(c.Name) || len(c.Name) > maxNameLen {
		problems = append(problems, fmt.Sprintf("name %q must be 1 to %d lower-case letters, digits and underscores, starting with a letter", c.Name, maxNameLen))
	}
	if !nameRE.MatchString(c.BaseQueue) || len(c.BaseQueue) > maxBaseQueueLen {
		problems = append(problems, fmt.Sprintf("base queue %q must be 1 to %d lower-case letters, digits and underscores, starting with a letter", c.BaseQueue, maxBaseQueueLen))
	}
	if len(c.Kinds) == 0 {
		problems = append(problems, "at least one kind is required")
	}
	seen := map[string]bool{}
	for i, k := range slices.Concat(c.Kinds, c.PeriodicKinds) {
		switch {
		case k.name == "" && i < len(c.Kinds):
			problems = append(problems, fmt.Sprintf("kind %d is not made by WorkerKind", i))
		case k.name == "":
			problems = append(problems, fmt.Sprintf("periodic kind %d is not made by WorkerKind", i-len(c.Kinds)))
		case seen[k.name]:
			problems = append(problems, fmt.Sprintf("kind %q is listed twice", k.name))
		case k.err != nil:
			problems = append(problems, strings.TrimPrefix(k.err.Error(), ErrInvalid.Error()+": "))
		}
		seen[k.name] = true
	}
	for _, class := range routing.Classes() {
		if n := c.Workers.Of(class); n < 0 || n > MaxQueueWorkers {
			problems = append(problems, fmt.Sprintf("%s workers %d not in 0..%d", class, n, MaxQueueWorkers))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalid, strings.Join(problems, "; "))
	}
	return nil
}

// MaxQueueWorkers is River's own limit on one queue's workers in one process.
const MaxQueueWorkers = 10_000

// ErrInvalid is returned (wrapped, with every problem) for a Config or a
// Registry that cannot work.
var ErrInvalid = errors.New("invalid service")

// Service is a validated service. It is immutable.
type Service struct {
	cfg *Config
}

// New validates cfg and returns its Service. cfg is copied; later changes to
// it have no effect.
func New(cfg *Config) (*Service, error) {
	if cfg == nil {
		return nil, fmt.Errorf("%w: nil config", ErrInvalid)
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("service %q: %w", cfg.Name, err)
	}
	return &Service{cfg: c}, nil
}

// Name is the service's name.
func (s *Service) Name() string { return s.cfg.Name }

// BaseQueue is the prefix of the service's queue names.
func (s *Service) BaseQueue() string { return s.cfg.BaseQueue }

// Queue is the name of the service's queue of class.
func (s *Service) Queue(class routing.Class) string { return routing.QueueName(s.cfg.BaseQueue, class) }

// Queues are the service's three queue names, priority first.
func (s *Service) Queues() []string {
	return []string{s.Queue(routing.Priority), s.Queue(routing.Default), s.Queue(routing.Scheduled)}
}

// Kinds are the service's job kinds.
func (s *Service) Kinds() []Kind { return slices.Clone(s.cfg.Kinds) }

// Workers are the service's default worker counts per class.
func (s *Service) Workers() ClassWorkers { return *s.cfg.Workers }

// PeriodicJobs are the periodic jobs the scheduler runs for the service.
func (s *Service) PeriodicJobs() []*river.PeriodicJob { return slices.Clone(s.cfg.PeriodicJobs) }

// PeriodicKinds are the kinds the scheduler works for the service, in its
// own queue.
func (s *Service) PeriodicKinds() []Kind { return slices.Clone(s.cfg.PeriodicKinds) }

// EnvPrefix is the prefix of the service's environment variables: its name
// upper-cased, then "_" (service "mailer": "MAILER_").
func (s *Service) EnvPrefix() string { return strings.ToUpper(s.cfg.Name) + "_" }

// AddWorkers registers the River worker of each of the service's kinds
// (not its PeriodicKinds: the scheduler works those).
func (s *Service) AddWorkers(workers *river.Workers) error {
	for _, k := range s.cfg.Kinds {
		if err := k.AddWorker(workers); err != nil {
			return fmt.Errorf("service %s: %w", s.cfg.Name, err)
		}
	}
	return nil
}

// Kind is the service's kind named name (not one of its PeriodicKinds).
func (s *Service) Kind(name string) (Kind, bool) {
	for _, k := range s.cfg.Kinds {
		if k.name == name {
			return k, true
		}
	}
	return Kind{}, false
}

// InsertOpts are River's insert options for a job of the service on behalf
// of tenant (the user id; empty for none) of tier: the queue and starting
// priority routing gives the tier, and metadata recording both
// (routing.InsertOptsFor). A tenant that breaks jobmeta.CheckTenant is
// refused at insert by producer.TenantHook, which every River client made
// from producer.ClientConfig has; a client made without it must add the
// hook to its Config.Hooks.
func (s *Service) InsertOpts(tier tiers.Tier, tenant string, isScheduled bool) *river.InsertOpts {
	return routing.InsertOptsFor(s.cfg.BaseQueue, tier, tenant, isScheduled)
}

// KindInsertOpts are InsertOpts for a job of kind (one of the service's
// Kinds), with the kind's MaxAttempts when it declares one (0, River's
// "the client's default", otherwise): what producer.Insert and the API
// insert with. A caller that wants other attempts sets MaxAttempts on the
// result.
func (s *Service) KindInsertOpts(kind string, tier tiers.Tier, tenant string, isScheduled bool) *river.InsertOpts {
	opts := s.InsertOpts(tier, tenant, isScheduled)
	if k, ok := s.Kind(kind); ok {
		opts.MaxAttempts = k.maxAttempts
	}
	return opts
}
