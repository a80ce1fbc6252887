package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tierq/tierq/producer"
	"github.com/tierq/tierq/routing"
	"github.com/tierq/tierq/service"
	"github.com/tierq/tierq/subscriptions"
	"github.com/tierq/tierq/tiers"
)

// enqueueBatch is how many jobs go into one InsertMany statement.
const enqueueBatch = 100

// Enqueue is what enqueue inserts without --kind (Config.Enqueue): COUNT
// jobs that the args func Prepare returns makes, tiers cycling through
// --mix, routed by its service's InsertOpts (a share --scheduled of them as
// background work) and inserted in batches under a progress bar. The stock
// tierctl's (cmd/tierctl) are the reference app's demo analysis jobs.
type Enqueue struct {
	// Name is what the jobs are called in enqueue's summary ("enqueued 40
	// analysis jobs") and in the error for one of Flags' flags given with
	// --kind ("--target is for the demo analysis jobs").
	Name string

	// Short replaces enqueue's one-line help; Long and Example, saying
	// what the jobs are, come before the help and example of --kind.
	Short, Long, Example string

	// Flags, when set, adds enqueue's flags for these jobs alone (the
	// stock tierctl's --target) to flags; each is a usage error with
	// --kind. Default: nil, no flags of their own.
	Flags func(flags *pflag.FlagSet)

	// Prepare reads Flags' flags and the commands' environment
	// (Config.Environ) once enqueue's own flags are checked, before
	// anything is inserted, and returns the service whose InsertOpts route
	// the jobs and the func that makes the args of the i-th job, for its
	// tier and user id. A *UsageError or config.ErrInvalid it returns
	// exits 2.
	Prepare func(environ []string) (*service.Service, func(i int, tier tiers.Tier, userID string) river.JobArgs, error)
}

// enqueueKindHelp is enqueue's help about --kind, after Enqueue's.
const enqueueKindHelp = `With --kind, insert COUNT jobs (default 1) of that kind instead, with the
args --args gives (a JSON object), routed by its service's queues: any kind
of a service known in the database (tierctl services list), with the
attempts the kind declares (service.MaxAttempts; else 10). The stock
tierctl does not have the kind's args type: it checks that each key of
--args is one of the args' JSON fields as the service's processes recorded
them, and inserts the JSON as given, without dedup; the values are checked
by the worker when it works the job, and the args type's own InsertOpts and
unique tags do not apply. A tierctl built into the application's binary
with its registry (ctl.Config.Registry) decodes --args into the args type
as the API does, every check included, and inserts that as the API does
(producer.Insert): a job with the same args as one already queued or
running is a duplicate of it, not inserted (moved up when this tier places
it better), so with one --args COUNT makes one job. Either way idle
workers are woken at once.`

// enqueueKindExample is enqueue's example of --kind, after Enqueue's.
const enqueueKindExample = `  tierctl enqueue --kind invoice_send --args '{"invoice_id": 42, "email": "billing@example.com"}' --mix pro=1 --user-prefix acme`

func (a *app) enqueueCommand() *cobra.Command {
	var (
		count     int
		mix       string
		scheduled float64
		userID    string
		kind      string
		argsJSON  string
	)
	cmd := &cobra.Command{
		Use:   "enqueue",
		Short: "Insert jobs of any known kind (--kind) across every tier, routed as a producer would",
		Long: `Insert COUNT jobs (default 1) of the kind --kind gives, cycling through the
tiers in the proportions of --mix, with a share of them marked as scheduled
(background) work.

` + enqueueKindHelp,
		Example: enqueueKindExample,
		Args:    usageArgs(cobra.NoArgs),
	}
	countDefault, kindHelp := 1, "insert jobs of this kind, of any service known in the database (required)"
	var own []string // the flags of a.enqueue
	if e := a.enqueue; e != nil {
		cmd.Short, cmd.Long, cmd.Example = e.Short, e.Long+"\n\n"+enqueueKindHelp, e.Example+"\n"+enqueueKindExample
		countDefault, kindHelp = 40, "insert jobs of this kind, of any service known in the database, instead of demo "+e.Name+" jobs"
		if e.Flags != nil {
			var before []string
			cmd.Flags().VisitAll(func(f *pflag.Flag) { before = append(before, f.Name) })
			e.Flags(cmd.Flags())
			cmd.Flags().VisitAll(func(f *pflag.Flag) {
				if !slices.Contains(before, f.Name) {
					own = append(own, f.Name)
				}
			})
		}
	}
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cycle, err := parseMix(mix)
		if err != nil {
			return &UsageError{fmt.Errorf("--mix: %w", err)}
		}
		if count < 1 || count > 1_000_000 {
			return &UsageError{fmt.Errorf("--count must be between 1 and 1000000, not %d", count)}
		}
		if scheduled < 0 || scheduled > 1 {
			return &UsageError{fmt.Errorf("--scheduled must be between 0 and 1, not %g", scheduled)}
		}
		if cmd.Flags().Changed("args") && kind == "" {
			return &UsageError{errors.New("--args is for --kind")}
		}
		if kind != "" {
			for _, name := range own {
				if cmd.Flags().Changed(name) {
					return &UsageError{fmt.Errorf("--%s is for the demo %s jobs; with --kind, give the args with --args", name, a.enqueue.Name)}
				}
			}
			if !cmd.Flags().Changed("count") {
				count = 1
			}
			if err := checkUserPrefix(userID, cycle); err != nil {
				return &UsageError{err}
			}
			return a.enqueueKind(cmd.Context(), kind, []byte(argsJSON), count, cycle, scheduled, userID)
		}
		if a.enqueue == nil {
			return &UsageError{fmt.Errorf("--kind is required (%s --kind KIND --args JSON)", cmd.CommandPath())}
		}
		svc, makeArgs, err := a.enqueue.Prepare(a.environ)
		if err != nil {
			return err
		}
		if err := checkUserPrefix(userID, cycle); err != nil {
			return &UsageError{err}
		}
		return a.enqueueDefault(cmd.Context(), svc, makeArgs, count, cycle, scheduled, userID)
	}
	cmd.Flags().IntVar(&count, "count", countDefault, "number of jobs to insert")
	cmd.Flags().StringVar(&mix, "mix", "free=4,pro=3,pro_plus=2,enterprise=1", "tier weights, tier=weight,...")
	cmd.Flags().Float64Var(&scheduled, "scheduled", 0.1, "share of jobs enqueued as scheduled (background) work, 0 to 1")
	cmd.Flags().StringVar(&userID, "user-prefix", "demo", "prefix of the demo user ids")
	cmd.Flags().StringVar(&kind, "kind", "", kindHelp)
	cmd.Flags().StringVar(&argsJSON, "args", "{}", "the args of the --kind jobs, a JSON object")
	return cmd
}

// enqueueDefault inserts count jobs of Config.Enqueue (makeArgs), tiers
// cycling through cycle, a share scheduled of them as background work, the
// user ids demoUserID's, each routed by svc's InsertOpts.
func (a *app) enqueueDefault(ctx context.Context, svc *service.Service, makeArgs func(int, tiers.Tier, string) river.JobArgs, count int, cycle []tiers.Tier, scheduled float64, userPrefix string) error {
	pool, client, err := a.connectProducer(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()

	bar := a.progressBar(count, "enqueue")
	perQueue := map[string]int{}
	batch := make([]river.InsertManyParams, 0, enqueueBatch)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if _, err := client.InsertMany(ctx, batch); err != nil {
			return fmt.Errorf("insert jobs: %w", err)
		}
		_ = bar.Add(len(batch))
		batch = batch[:0]
		return nil
	}
	// A fixed seed: the same command line enqueues the same mix.
	rng := rand.New(rand.NewPCG(1, 2)) //nolint:gosec // demo data, not secrets
	for i := range count {
		tier := cycle[i%len(cycle)]
		isScheduled := rng.Float64() < scheduled
		userID := demoUserID(userPrefix, tier, i)
		opts := svc.InsertOpts(tier, userID, isScheduled)
		batch = append(batch, river.InsertManyParams{Args: makeArgs(i, tier, userID), InsertOpts: opts})
		perQueue[opts.Queue]++
		if len(batch) == enqueueBatch {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}

	fmt.Fprintf(a.stdout, "enqueued %d %s jobs:\n", count, a.enqueue.Name)
	for _, queue := range slices.Sorted(maps.Keys(perQueue)) {
		fmt.Fprintf(a.stdout, "  %-20s %d\n", queue, perQueue[queue])
	}
	return nil
}

// parseMix turns "free=4,pro=1" into a cycle of tiers: [free free free free pro].
func parseMix(mix string) ([]tiers.Tier, error) {
	var cycle []tiers.Tier
	for part := range strings.SplitSeq(mix, ",") {
		name, weightText, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("%q is not tier=weight", part)
		}
		tier, err := tiers.Parse(name)
		if err != nil {
			return nil, err
		}
		weight, err := strconv.Atoi(strings.TrimSpace(weightText))
		if err != nil || weight < 0 || weight > 1000 {
			return nil, fmt.Errorf("weight of %s must be an integer from 0 to 1000, not %q", tier, weightText)
		}
		for range weight {
			cycle = append(cycle, tier)
		}
	}
	if len(cycle) == 0 {
		return nil, errors.New("every weight is 0")
	}
	return cycle, nil
}

// demoUserID is the user id of the i-th demo job: 7 users per tier.
func demoUserID(prefix string, tier tiers.Tier, i int) string {
	return fmt.Sprintf("%s_%s_%d", prefix, tier, i%7)
}

// checkUserPrefix checks that every user id enqueue makes from prefix is one
// the API would accept, and so a tenant id producer.TenantHook lets through
// (jobmeta.CheckTenant: at most 200 bytes of UTF-8, no control characters).
// A user id is the prefix and a suffix ("_enterprise_6"), named in the
// error when the id is too long.
func checkUserPrefix(prefix string, cycle []tiers.Tier) error {
	for _, tier := range cycle {
		id := demoUserID(prefix, tier, 6)
		if err := subscriptions.CheckUserID(id); err != nil {
			if len(id) > subscriptions.MaxUserIDLen {
				return fmt.Errorf("--user-prefix: %w (the prefix is %d bytes of it, then %q)", err, len(prefix), id[len(prefix):])
			}
			return fmt.Errorf("--user-prefix: %w", err)
		}
	}
	return nil
}

// rawArgs are a job's args as JSON, inserted as given: what the stock
// tierctl inserts for a kind whose args type it does not have.
type rawArgs struct {
	kind string
	json json.RawMessage
}

func (r rawArgs) Kind() string                 { return r.kind }
func (r rawArgs) MarshalJSON() ([]byte, error) { return r.json, nil }

// kindJobs are the jobs enqueue --kind inserts: their args, and where
// their options come from.
type kindJobs struct {
	args river.JobArgs
	// service is Config.Registry's service of the kind, when it has the
	// kind: the jobs go in with producer.Insert, as the API inserts them.
	service *service.Service
	// baseQueue and maxAttempts are the recorded service's base queue and
	// the recorded kind's attempts (0: none declared, or recorded by an
	// older build), when Config.Registry does not have the kind.
	baseQueue   string
	maxAttempts int
}

// kindArgs makes the args of a job of kind from data: decoded into the
// kind's args type when Config.Registry has the kind (service.Kind.DecodeArgs,
// every check the API runs), else checked against the kind's recorded JSON
// fields and kept as given (rawArgs).
func (a *app) kindArgs(c catalog, kind string, data []byte) (kindJobs, error) {
	if a.registry != nil {
		if s, k, ok := a.registry.ForKind(kind); ok {
			args, err := k.DecodeArgs(data)
			if err != nil {
				return kindJobs{}, &UsageError{fmt.Errorf("--args of kind %s: %w", kind, err)}
			}
			return kindJobs{args: args, service: s}, nil
		}
	}
	s, k, ok := c.forKind(kind)
	if !ok {
		var known []string
		for _, s := range c.services {
			for _, k := range s.Kinds {
				known = append(known, k.Name)
			}
		}
		if len(known) == 0 {
			return kindJobs{}, &UsageError{fmt.Errorf("--kind %q: %w", kind, errNoServices)}
		}
		return kindJobs{}, &UsageError{fmt.Errorf("--kind %q is not a kind of a service known in this database (%s)", kind, strings.Join(known, ", "))}
	}
	var object map[string]json.RawMessage
	if err := json.Unmarshal(data, &object); err != nil || object == nil {
		return kindJobs{}, &UsageError{fmt.Errorf("--args of kind %s must be a JSON object", kind)}
	}
	if k.Fields != nil {
		for _, key := range slices.Sorted(maps.Keys(object)) {
			if !slices.Contains(k.Fields, key) {
				return kindJobs{}, &UsageError{fmt.Errorf("--args of kind %s: unknown field %q (its fields are %s)", kind, key, strings.Join(k.Fields, ", "))}
			}
		}
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, data); err != nil {
		return kindJobs{}, &UsageError{fmt.Errorf("--args of kind %s: %w", kind, err)}
	}
	return kindJobs{args: rawArgs{kind: kind, json: compact.Bytes()}, baseQueue: s.BaseQueue, maxAttempts: k.MaxAttempts}, nil
}

// enqueueKind inserts count jobs of kind with the args data, tiers cycling
// through cycle, a share scheduled of them as background work, the user
// ids demoUserID's, in transactions of enqueueBatch jobs. A kind of
// Config.Registry goes in with producer.Insert, as the API inserts it: the
// kind's attempts (service.MaxAttempts), dedup that upgrades (so jobs
// with the same args after the first are duplicates of it) and River's
// insert notification for each job. A recorded kind goes in routed by its
// service's queues (routing.InsertOptsFor, as service.Service.InsertOpts
// does), with its recorded attempts, no dedup, and River's insert
// notification for each queue of a batch (producer.NotifyInsert).
func (a *app) enqueueKind(ctx context.Context, kind string, data []byte, count int, cycle []tiers.Tier, scheduled float64, userPrefix string) error {
	pool, client, err := a.connectProducer(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	c, err := a.catalog(ctx, pool)
	if err != nil {
		return err
	}
	jobs, err := a.kindArgs(c, kind, data)
	if err != nil {
		return err
	}
	var (
		perQueue          = map[string]int{}
		placed            = map[int64]string{} // job inserted through producer.Insert → its queue
		inserted          int
		duplicates, moved int
		batch             = make([]producer.Job, 0, min(count, enqueueBatch))
		rng               = rand.New(rand.NewPCG(1, 2)) //nolint:gosec // routing of demo work, not secrets
	)
	insert := func(tx pgx.Tx) error {
		if jobs.service != nil {
			for _, job := range batch {
				res, err := producer.Insert(ctx, client, tx, job)
				switch {
				case err != nil:
					return err
				case !res.Duplicate:
					inserted++
					placed[res.Job.ID] = res.Job.Queue
				default:
					duplicates++
					if res.Upgraded {
						moved++
					}
					if _, ours := placed[res.Job.ID]; ours {
						placed[res.Job.ID] = res.Job.Queue // where it is now
					}
				}
			}
			return nil
		}
		params := make([]river.InsertManyParams, 0, len(batch))
		var queues []string
		for _, job := range batch {
			opts := routing.InsertOptsFor(jobs.baseQueue, job.Tier, job.Tenant, job.Scheduled)
			opts.MaxAttempts = jobs.maxAttempts // 0: the client's, producer.DefaultMaxAttempts
			params = append(params, river.InsertManyParams{Args: job.Args, InsertOpts: opts})
			queues = append(queues, opts.Queue)
		}
		if _, err := client.InsertManyTx(ctx, tx, params); err != nil {
			return err
		}
		for _, queue := range queues {
			perQueue[queue]++
		}
		inserted += len(params)
		slices.Sort(queues)
		for _, queue := range slices.Compact(queues) {
			if err := producer.NotifyInsert(ctx, tx, queue); err != nil {
				return err
			}
		}
		return nil
	}
	for i := range count {
		tier := cycle[i%len(cycle)]
		batch = append(batch, producer.Job{Args: jobs.args, Service: jobs.service, Tier: tier,
			Tenant: demoUserID(userPrefix, tier, i), Scheduled: rng.Float64() < scheduled})
		if len(batch) < enqueueBatch && i < count-1 {
			continue
		}
		if err := pgx.BeginFunc(ctx, pool, insert); err != nil {
			return fmt.Errorf("insert jobs: %w", err)
		}
		batch = batch[:0]
	}
	for _, queue := range placed {
		perQueue[queue]++
	}
	fmt.Fprintf(a.stdout, "enqueued %d %s jobs:\n", inserted, termSafe(kind))
	for _, queue := range slices.Sorted(maps.Keys(perQueue)) {
		fmt.Fprintf(a.stdout, "  %-20s %d\n", termSafe(queue), perQueue[queue])
	}
	if duplicates > 0 {
		fmt.Fprintf(a.stdout, "%d more were duplicates of a job already queued or running, not inserted (%d of them moved it to a better place)\n", duplicates, moved)
	}
	return nil
}
