package ctl

// The services tierctl knows: Config.Registry's, then those the database's
// processes recorded (service.Registry.Record, table tierq_services).

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/tierq/tierq/internal/db"
	"github.com/tierq/tierq/routing"
	"github.com/tierq/tierq/service"
)

// catalog is every service tierctl knows in one database: Config.Registry's
// services first, in the registry's order, then the recorded ones, by name.
// A recorded service that shares a name, a queue or a kind with one taken
// before it is left out (shadowed): the registry wins over the record, and
// among recorded services the one a process recorded last.
type catalog struct {
	services []service.Recorded
	// fromRegistry says which of services are Config.Registry's.
	fromRegistry map[string]bool
	// shadowed are the recorded services left out, with why.
	shadowed []shadowedService
}

type shadowedService struct {
	service.Recorded
	by string // why: "shares queue analysis_default with analyzer"
}

// catalog reads the record and joins it to Config.Registry.
func (a *app) catalog(ctx context.Context, q db.Querier) (catalog, error) {
	recorded, err := service.ReadRecorded(ctx, q)
	if err != nil {
		return catalog{}, err
	}
	c := catalog{fromRegistry: map[string]bool{}}
	if a.registry != nil {
		for _, s := range a.registry.Recorded() {
			c.services = append(c.services, s)
			c.fromRegistry[s.Name] = true
		}
	}
	// The latest recorded first, so that it wins a conflict; then listed by
	// name after the registry's.
	slices.SortStableFunc(recorded, func(x, y service.Recorded) int { return y.SeenAt.Compare(x.SeenAt) })
	fromRecord := len(c.services)
	for _, r := range recorded {
		if why := c.conflict(r); why != "" {
			if !c.fromRegistry[r.Name] {
				c.shadowed = append(c.shadowed, shadowedService{Recorded: r, by: why})
			} else {
				c.replaceSeen(r)
			}
			continue
		}
		c.services = append(c.services, r)
	}
	slices.SortFunc(c.services[fromRecord:], func(x, y service.Recorded) int { return strings.Compare(x.Name, y.Name) })
	slices.SortFunc(c.shadowed, func(x, y shadowedService) int { return strings.Compare(x.Name, y.Name) })
	return c, nil
}

// replaceSeen keeps a registry service's description but shows when a
// process last recorded it.
func (c *catalog) replaceSeen(r service.Recorded) {
	for i := range c.services {
		if c.services[i].Name == r.Name {
			c.services[i].RecordedBy, c.services[i].FirstSeenAt, c.services[i].SeenAt = r.RecordedBy, r.FirstSeenAt, r.SeenAt
		}
	}
}

// conflict says why r cannot join the catalog ("" when it can): its name,
// one of its queues or one of its kinds is a service's already in it.
func (c *catalog) conflict(r service.Recorded) string {
	for _, s := range c.services {
		switch {
		case s.Name == r.Name:
			return "its name is the registry's service's"
		case s.BaseQueue == r.BaseQueue:
			return fmt.Sprintf("shares base queue %s with service %s", r.BaseQueue, s.Name)
		}
		for _, q := range r.Queues {
			if slices.Contains(s.Queues, q) {
				return fmt.Sprintf("shares queue %s with service %s", q, s.Name)
			}
		}
		for _, k := range r.Kinds {
			if _, ok := kindIn(s, k.Name); ok {
				return fmt.Sprintf("shares kind %s with service %s", k.Name, s.Name)
			}
		}
	}
	return ""
}

// queues are every service's three queues, services in order, priority
// first: the queues tierctl escalates jobs between, replays dead letters
// into and watches.
func (c catalog) queues() []string {
	var queues []string
	for _, s := range c.services {
		queues = append(queues, s.Queues...)
	}
	return queues
}

// tiered are every service's priority and default queues, where a job's
// tier chose the queue.
func (c catalog) tiered() []string {
	var queues []string
	for _, s := range c.services {
		for _, q := range s.Queues {
			if _, class, ok := routing.ClassOf(q); ok && class != routing.Scheduled {
				queues = append(queues, q)
			}
		}
	}
	return queues
}

// forKind is the service whose kinds include kind (by name, not alias:
// one inserts a kind by its name), and the kind.
func (c catalog) forKind(kind string) (service.Recorded, service.RecordedKind, bool) {
	for _, s := range c.services {
		if k, ok := kindIn(s, kind); ok {
			return s, k, true
		}
	}
	return service.Recorded{}, service.RecordedKind{}, false
}

func kindIn(s service.Recorded, kind string) (service.RecordedKind, bool) {
	i := slices.IndexFunc(s.Kinds, func(k service.RecordedKind) bool { return k.Name == kind })
	if i < 0 {
		return service.RecordedKind{}, false
	}
	return s.Kinds[i], true
}

// errNoServices is returned when a command needs a service and tierctl
// knows none in the database.
var errNoServices = errors.New("no service is recorded in this database: a worker, scheduler or API process records its services when it starts (tierctl services list)")

// serviceQueues are the catalog's queues: every known service's, or
// errNoServices when there is none.
func (a *app) serviceQueues(ctx context.Context, q db.Querier) ([]string, error) {
	c, err := a.catalog(ctx, q)
	if err != nil {
		return nil, err
	}
	if len(c.services) == 0 {
		return nil, errNoServices
	}
	return c.queues(), nil
}

func (a *app) servicesCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "services",
		Short: "List the services tierctl knows in this database; forget one",
		Long: `tierctl knows a service when a worker, scheduler or API process of it has
started on this database (each records its registry's services: name, queues,
kinds and their args' fields, in table tierq_services), or, for a tierctl
built into an application's own binary, when the application's registry has
it. escalate, dlq replay --to-queue, watch and enqueue --kind work on these
services' queues and kinds.

A record stays until it is forgotten: a service's jobs and dead letters
outlive its processes, and while its workers are down an operator can still
move, replay and watch them. Forget a service that is gone for good; a
process of it that starts again records it again.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(*cobra.Command, []string) error {
			return &UsageError{errors.New("services needs a subcommand: list or forget")}
		},
	}
	cmd.AddCommand(a.servicesListCommand(), a.servicesForgetCommand())
	return cmd
}

func (a *app) servicesListCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the known services: queues, kinds, who recorded them and when",
		Long: `List every service tierctl knows here, by name (an application's own
registry's first, for a tierctl built into its binary): its three queues,
its kinds, which process last recorded it and when it was first and last
recorded. A recorded service left out because another one has its name, a
queue or a kind (the registry's, or one recorded later) is listed after them
with why.`,
		Example: `  tierctl services list
  tierctl services list --json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			_, pool, err := a.connect(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			c, err := a.catalog(ctx, pool)
			if err != nil {
				return err
			}
			if asJSON {
				type row struct {
					service.Recorded
					Source   string `json:"source"`             // "registry" or "database"
					Shadowed string `json:"shadowed,omitempty"` // why it is left out
				}
				rows := []row{}
				for _, s := range c.services {
					rows = append(rows, row{Recorded: s, Source: c.source(s.Name)})
				}
				for _, s := range c.shadowed {
					rows = append(rows, row{Recorded: s.Recorded, Source: "database", Shadowed: s.by})
				}
				return a.printJSON(rows)
			}
			if len(c.services)+len(c.shadowed) == 0 {
				fmt.Fprintln(a.stdout, "no service is recorded in this database (a worker, scheduler or API process records its services when it starts)")
				return nil
			}
			w := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(w, "SERVICE\tQUEUES\tKINDS\tSOURCE\tRECORDED BY\tFIRST SEEN\tLAST SEEN")
			line := func(s service.Recorded, source string) {
				first, last := "-", "-"
				if !s.SeenAt.IsZero() {
					first, last = formatTime(s.FirstSeenAt), formatTime(s.SeenAt)
				}
				kinds := make([]string, len(s.Kinds))
				for i, k := range s.Kinds {
					kinds[i] = k.Name
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", termSafe(s.Name), termSafe(strings.Join(s.Queues, " ")),
					termSafe(strings.Join(kinds, " ")), source, cmp.Or(s.RecordedBy, "-"), first, last)
			}
			for _, s := range c.services {
				line(s, c.source(s.Name))
			}
			for _, s := range c.shadowed {
				line(s.Recorded, "left out: "+s.by)
			}
			return w.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// source says where the catalog has service name from.
func (c catalog) source(name string) string {
	if c.fromRegistry[name] {
		return "registry"
	}
	return "database"
}

func (a *app) servicesForgetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "forget NAME",
		Short: "Delete a service's record: tierctl no longer knows it (until a process of it starts again)",
		Long: `Delete the record of service NAME (table tierq_services). Its queues,
jobs and dead letters are left as they are; tierctl no longer escalates
into, replays into or watches its queues. A worker, scheduler or API
process of the service that starts again records it again. A service of
the application's own registry (a tierctl built into its binary) stays
known whatever the record says.`,
		Example: `  tierctl services forget invoices`,
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			_, pool, err := a.connect(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			forgot, err := service.Forget(ctx, pool, args[0])
			if err != nil {
				return err
			}
			if !forgot {
				return fmt.Errorf("%w: no service %q is recorded (tierctl services list)", errUnknownService, args[0])
			}
			fmt.Fprintf(a.stdout, "service %s forgotten: its queues, jobs and dead letters are left as they are\n", termSafe(args[0]))
			return nil
		},
	}
}

// errUnknownService is a service name that is not recorded: exit 1.
var errUnknownService = errors.New("unknown service")
