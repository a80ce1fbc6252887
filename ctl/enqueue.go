package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/riverqueue/river"
	"github.com/spf13/cobra"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/jobs/scan"
	"github.com/tierq/tierq/routing"
	"github.com/tierq/tierq/subscriptions"
	"github.com/tierq/tierq/tiers"
)

// enqueueBatch is how many jobs go into one InsertMany statement.
const enqueueBatch = 100

func (a *app) enqueueCommand() *cobra.Command {
	var (
		count     int
		targets   []string
		mix       string
		scheduled float64
		userID    string
		kind      string
		argsJSON  string
	)
	cmd := &cobra.Command{
		Use:   "enqueue",
		Short: "Insert demo analysis jobs, or jobs of any known kind (--kind), across every tier, routed as a producer would",
		Long: `Insert COUNT analysis jobs for the given target directories, cycling through
the tiers in the proportions of --mix, with a share of them marked as scheduled
(background) work. Each job is routed by the analyzer service's InsertOpts
(routing.InsertOptsFor), exactly as an API service does, and inserted in
batches. A progress bar shows the inserts.

Each target must be in one of ANALYSIS_ROOTS (colon-separated absolute
directories; default /), checked as the API checks it: the analyzer workers
cancel a job whose target is elsewhere.

With --kind, insert COUNT jobs (default 1) of that kind instead, with the
args --args gives (a JSON object), routed by its service's queues: any kind
of a service known in the database (tierctl services list). The stock
tierctl does not have the kind's args type: it checks that each key of
--args is one of the args' JSON fields as the service's processes recorded
them, and inserts the JSON as given; the values are checked by the worker
when it works the job, and the args type's own InsertOpts and unique tags do
not apply. A tierctl built into the application's binary with its registry
(ctl.Config.Registry) decodes --args into the args type as the API does,
every check included, and inserts that.`,
		Example: `  tierctl enqueue --count 200 --target . --target ./jobs --mix free=5,pro=3,enterprise=2
  tierctl enqueue --kind invoice_send --args '{"invoice_id": 42}' --mix pro=1 --user-prefix acme`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cycle, err := parseMix(mix)
			if err != nil {
				return &usageError{fmt.Errorf("--mix: %w", err)}
			}
			if count < 1 || count > 1_000_000 {
				return &usageError{fmt.Errorf("--count must be between 1 and 1000000, not %d", count)}
			}
			if scheduled < 0 || scheduled > 1 {
				return &usageError{fmt.Errorf("--scheduled must be between 0 and 1, not %g", scheduled)}
			}
			if cmd.Flags().Changed("args") && kind == "" {
				return &usageError{errors.New("--args is for --kind")}
			}
			if kind != "" {
				if cmd.Flags().Changed("target") {
					return &usageError{errors.New("--target is for the demo analysis jobs; with --kind, give the args with --args")}
				}
				if !cmd.Flags().Changed("count") {
					count = 1
				}
				if err := checkUserPrefix(userID, cycle); err != nil {
					return &usageError{err}
				}
				return a.enqueueKind(cmd.Context(), kind, []byte(argsJSON), count, cycle, scheduled, userID)
			}
			analysis, err := config.LoadSection[jobs.AnalysisConfig](a.environ)
			if err != nil {
				return err
			}
			absTargets, err := checkTargets(targets, analysis.Roots)
			if err != nil {
				return &usageError{err}
			}
			if err := checkUserPrefix(userID, cycle); err != nil {
				return &usageError{err}
			}

			registry, err := referenceRegistry()
			if err != nil {
				return err
			}
			analyzer, err := registry.Parse(jobs.ServiceAnalyzer)
			if err != nil {
				return err
			}

			ctx := cmd.Context()
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
				args := jobs.AnalysisArgs{
					Target: absTargets[i%len(absTargets)],
					UserID: demoUserID(userID, tier, i),
					Tier:   tier.String(),
				}
				opts := analyzer.InsertOpts(tier, args.UserID, isScheduled)
				batch = append(batch, river.InsertManyParams{Args: args, InsertOpts: opts})
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

			fmt.Fprintf(a.stdout, "enqueued %d analysis jobs:\n", count)
			for _, queue := range slices.Sorted(maps.Keys(perQueue)) {
				fmt.Fprintf(a.stdout, "  %-20s %d\n", queue, perQueue[queue])
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&count, "count", 40, "number of jobs to insert")
	cmd.Flags().StringArrayVar(&targets, "target", []string{"."}, "directory to analyse (repeatable; jobs cycle through them)")
	cmd.Flags().StringVar(&mix, "mix", "free=4,pro=3,pro_plus=2,enterprise=1", "tier weights, tier=weight,...")
	cmd.Flags().Float64Var(&scheduled, "scheduled", 0.1, "share of jobs enqueued as scheduled (background) work, 0 to 1")
	cmd.Flags().StringVar(&userID, "user-prefix", "demo", "prefix of the demo user ids")
	cmd.Flags().StringVar(&kind, "kind", "", "insert jobs of this kind, of any service known in the database, instead of demo analysis jobs")
	cmd.Flags().StringVar(&argsJSON, "args", "{}", "the args of the --kind jobs, a JSON object")
	return cmd
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

// checkTargets makes each target absolute and checks that it is a
// directory here and, lexically as the API does, in one of roots.
func checkTargets(targets []string, roots jobs.AnalysisRoots) ([]string, error) {
	if len(targets) == 0 {
		return nil, errors.New("--target: at least one directory is needed")
	}
	abs := make([]string, len(targets))
	for i, target := range targets {
		info, err := os.Stat(target)
		if err != nil || !info.IsDir() {
			return nil, fmt.Errorf("--target %q is not a directory", target)
		}
		if abs[i], err = filepath.Abs(target); err != nil {
			return nil, fmt.Errorf("--target %q: %w", target, err)
		}
		if !scan.Within(abs[i], roots) {
			return nil, fmt.Errorf("--target %q (%s) is outside the analysis roots %s (ANALYSIS_ROOTS)", target, abs[i], roots)
		}
	}
	return abs, nil
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

// kindArgs makes the args of a job of kind from data: decoded into the
// kind's args type when Config.Registry has the kind (service.Kind.DecodeArgs,
// every check the API runs), else checked against the kind's recorded JSON
// fields and kept as given (rawArgs). It returns the base queue of the
// kind's service too.
func (a *app) kindArgs(c catalog, kind string, data []byte) (river.JobArgs, string, error) {
	if a.registry != nil {
		if s, k, ok := a.registry.ForKind(kind); ok {
			args, err := k.DecodeArgs(data)
			if err != nil {
				return nil, "", &usageError{fmt.Errorf("--args of kind %s: %w", kind, err)}
			}
			return args, s.BaseQueue(), nil
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
			return nil, "", &usageError{fmt.Errorf("--kind %q: %w", kind, errNoServices)}
		}
		return nil, "", &usageError{fmt.Errorf("--kind %q is not a kind of a service known in this database (%s)", kind, strings.Join(known, ", "))}
	}
	var object map[string]json.RawMessage
	if err := json.Unmarshal(data, &object); err != nil || object == nil {
		return nil, "", &usageError{fmt.Errorf("--args of kind %s must be a JSON object", kind)}
	}
	if k.Fields != nil {
		for _, key := range slices.Sorted(maps.Keys(object)) {
			if !slices.Contains(k.Fields, key) {
				return nil, "", &usageError{fmt.Errorf("--args of kind %s: unknown field %q (its fields are %s)", kind, key, strings.Join(k.Fields, ", "))}
			}
		}
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, data); err != nil {
		return nil, "", &usageError{fmt.Errorf("--args of kind %s: %w", kind, err)}
	}
	return rawArgs{kind: kind, json: compact.Bytes()}, s.BaseQueue, nil
}

// enqueueKind inserts count jobs of kind with the args data, tiers cycling
// through cycle, a share scheduled of them as background work, the user
// ids demoUserID's, each routed by its service's queues
// (routing.InsertOptsFor, as service.Service.InsertOpts does).
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
	args, baseQueue, err := a.kindArgs(c, kind, data)
	if err != nil {
		return err
	}
	perQueue := map[string]int{}
	batch := make([]river.InsertManyParams, 0, min(count, enqueueBatch))
	rng := rand.New(rand.NewPCG(1, 2)) //nolint:gosec // routing of demo work, not secrets
	for i := range count {
		tier := cycle[i%len(cycle)]
		opts := routing.InsertOptsFor(baseQueue, tier, demoUserID(userPrefix, tier, i), rng.Float64() < scheduled)
		batch = append(batch, river.InsertManyParams{Args: args, InsertOpts: opts})
		perQueue[opts.Queue]++
		if len(batch) == enqueueBatch || i == count-1 {
			if _, err := client.InsertMany(ctx, batch); err != nil {
				return fmt.Errorf("insert jobs: %w", err)
			}
			batch = batch[:0]
		}
	}
	fmt.Fprintf(a.stdout, "enqueued %d %s jobs:\n", count, termSafe(kind))
	for _, queue := range slices.Sorted(maps.Keys(perQueue)) {
		fmt.Fprintf(a.stdout, "  %-20s %d\n", termSafe(queue), perQueue[queue])
	}
	return nil
}
