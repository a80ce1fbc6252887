package service

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/riverqueue/river"

	"github.com/tierq/tierq/routing"
)

// Registry is every service of an application, in the order given. It is
// immutable; Join makes a bigger one.
type Registry struct {
	services []*Service
	byName   map[string]*Service
	byBase   map[string]*Service
	byKind   map[string]kindOf
}

type kindOf struct {
	service *Service
	kind    Kind
}

// NewRegistry checks that services can run side by side (no two share a
// name, a base queue, a queue name or a kind) and returns their Registry.
func NewRegistry(services ...*Service) (*Registry, error) {
	r := &Registry{
		byName: map[string]*Service{},
		byBase: map[string]*Service{},
		byKind: map[string]kindOf{},
	}
	var problems []string
	queues := map[string]string{} // queue → service
	kinds := map[string]string{}  // kind, periodic or not → service
	for _, s := range services {
		if s == nil {
			problems = append(problems, "a nil service")
			continue
		}
		if other, ok := r.byName[s.Name()]; ok && other != s {
			problems = append(problems, fmt.Sprintf("two services are named %q", s.Name()))
			continue
		}
		if _, ok := r.byName[s.Name()]; ok {
			continue // the same service twice (a registry joined with itself)
		}
		if other, ok := r.byBase[s.BaseQueue()]; ok {
			problems = append(problems, fmt.Sprintf("services %q and %q share base queue %q", other.Name(), s.Name(), s.BaseQueue()))
		}
		for _, q := range s.Queues() {
			if other, ok := queues[q]; ok {
				problems = append(problems, fmt.Sprintf("services %q and %q share queue %q", other, s.Name(), q))
			}
			queues[q] = s.Name()
		}
		for _, k := range slices.Concat(s.cfg.Kinds, s.cfg.PeriodicKinds) {
			if other, ok := kinds[k.Name()]; ok {
				problems = append(problems, fmt.Sprintf("services %q and %q both work kind %q", other, s.Name(), k.Name()))
			}
			kinds[k.Name()] = s.Name()
		}
		for _, k := range s.cfg.Kinds {
			r.byKind[k.Name()] = kindOf{service: s, kind: k}
		}
		r.byName[s.Name()] = s
		r.byBase[s.BaseQueue()] = s
		r.services = append(r.services, s)
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrInvalid, strings.Join(problems, "; "))
	}
	return r, nil
}

// Join is a registry of r's services followed by others' (a service in both
// counts once). It is how an application combines services from several
// packages, e.g. the reference app's and its own.
func (r *Registry) Join(others ...*Registry) (*Registry, error) {
	all := slices.Clone(r.services)
	for _, o := range others {
		all = append(all, o.services...)
	}
	return NewRegistry(all...)
}

// Services are the registry's services, in order.
func (r *Registry) Services() []*Service { return slices.Clone(r.services) }

// Names are the services' names, in order.
func (r *Registry) Names() []string {
	names := make([]string, 0, len(r.services))
	for _, s := range r.services {
		names = append(names, s.Name())
	}
	return names
}

// SameServices fails when built has not r's services, by name: what a
// worker, scheduler or API given both a Config.Registry and a
// Config.NewServices checks once NewServices has built its registry. The
// error names both lists, built's first.
func (r *Registry) SameServices(built *Registry) error {
	want, got := slices.Sorted(slices.Values(r.Names())), slices.Sorted(slices.Values(built.Names()))
	if slices.Equal(want, got) {
		return nil
	}
	return fmt.Errorf("Config.NewServices built services %s, Config.Registry has %s: they must be the same services",
		strings.Join(got, ", "), strings.Join(want, ", "))
}

// Lookup is the service named name.
func (r *Registry) Lookup(name string) (*Service, bool) {
	s, ok := r.byName[name]
	return s, ok
}

// Parse is the service named name, or an error that names the registered
// ones.
func (r *Registry) Parse(name string) (*Service, error) {
	if s, ok := r.byName[name]; ok {
		return s, nil
	}
	return nil, fmt.Errorf("unknown service %q (want %s)", name, strings.Join(r.Names(), " or "))
}

// ForQueue is the service that owns queue, and the queue's class.
func (r *Registry) ForQueue(queue string) (*Service, routing.Class, bool) {
	base, class, ok := routing.ClassOf(queue)
	if !ok {
		return nil, 0, false
	}
	s, ok := r.byBase[base]
	return s, class, ok
}

// ForKind is the service that works kind, and the Kind.
func (r *Registry) ForKind(kind string) (*Service, Kind, bool) {
	k, ok := r.byKind[kind]
	return k.service, k.kind, ok
}

// Queues are every service's three queues, services in order, priority
// first.
func (r *Registry) Queues() []string {
	queues := make([]string, 0, 3*len(r.services))
	for _, s := range r.services {
		queues = append(queues, s.Queues()...)
	}
	return queues
}

// QueuesOf are every service's queue of each class in classes, services in
// order.
func (r *Registry) QueuesOf(classes ...routing.Class) []string {
	var queues []string
	for _, s := range r.services {
		for _, c := range classes {
			queues = append(queues, s.Queue(c))
		}
	}
	return queues
}

// KindNames are every kind's name, services in order.
func (r *Registry) KindNames() []string {
	var names []string
	for _, s := range r.services {
		for _, k := range s.Kinds() {
			names = append(names, k.Name())
		}
	}
	return names
}

// AddWorkers registers the worker of every kind of every service, and of
// every periodic kind (Config.PeriodicKinds): what a scheduler deployment
// needs, since River's rescuer retries a stuck job only when its kind is
// registered on the leader, and the scheduler works the periodic kinds.
func (r *Registry) AddWorkers(workers *river.Workers) error {
	for _, s := range r.services {
		if err := s.AddWorkers(workers); err != nil {
			return err
		}
		for _, k := range s.cfg.PeriodicKinds {
			if err := k.AddWorker(workers); err != nil {
				return fmt.Errorf("service %s: %w", s.Name(), err)
			}
		}
	}
	return nil
}

// PeriodicJobs are every service's periodic jobs, services in order.
func (r *Registry) PeriodicJobs() []*river.PeriodicJob {
	var jobs []*river.PeriodicJob
	for _, s := range r.services {
		jobs = append(jobs, s.PeriodicJobs()...)
	}
	return jobs
}

// Timeouts are the timeout of every kind of every service, periodic kinds
// included, by kind name: the timeout River applies to each (Kind.Timeout),
// declared with the kind, so a kind cannot be left out. The scheduler
// checks RESCUE_STUCK_JOBS_AFTER against them (scheduler.Timeouts).
func (r *Registry) Timeouts() map[string]time.Duration {
	timeouts := map[string]time.Duration{}
	for _, s := range r.services {
		for _, k := range slices.Concat(s.cfg.Kinds, s.cfg.PeriodicKinds) {
			timeouts[k.name] = k.timeout
		}
	}
	return timeouts
}
