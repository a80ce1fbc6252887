package ctl

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/tierq/tierq/dlq"
)

// replayBatch is how many dead letters one transaction of a bulk replay
// takes: 2000 replayed about 30% faster than 500 (docs/dead-letters.md).
const replayBatch = 2000

func (a *app) dlqReplayCommand() *cobra.Command {
	var (
		all    bool
		filter dlq.Filter
		opts   dlq.ReplayOptions
		batch  int
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "replay ID... | --all [--queue Q] [--kind K] [--tier T] [--tenant ID]",
		Short: "Insert a dead letter's job again, with fresh attempts, and mark it replayed",
		Long: `Insert a new River job with the dead letter's kind, args, tags and max
attempts, with fresh attempts, into its original queue (or --to-queue, which
must be a queue of the same service: any service known in the database,
tierctl services list), at the priority it started with; mark
the dead letter replayed (when, by whom, the new job's id) in the same
transaction. A dead letter that was replayed before is refused unless
--force. With IDs, each is reported and the command exits 1 if any was not
replayed. With --all, every dead letter not replayed yet that matches
--queue, --kind, --tier and --tenant is replayed in batches, with a progress bar.`,
		Example: `  tierctl dlq replay 42 43
  tierctl dlq replay 42 --to-queue analysis_priority --actor alice
  tierctl dlq replay --all --queue analysis_default --kind analysis`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.Actor == "" {
				opts.Actor = a.user()
			}
			// --to-queue is checked once the services are read.
			withoutTo := opts
			withoutTo.ToQueue = ""
			if err := withoutTo.Validate(nil); err != nil {
				return &UsageError{err}
			}
			var (
				ids []int64
				err error
			)
			switch {
			case all && len(args) > 0:
				return &UsageError{errors.New("give dead-letter IDs or --all, not both")}
			case !all && len(args) == 0:
				return &UsageError{errors.New("give one or more dead-letter IDs, or --all")}
			case !all && filter != (dlq.Filter{}):
				return &UsageError{errors.New("--queue, --kind, --tier and --tenant select rows for --all; with IDs, leave them out")}
			case !all && len(args) > dlq.MaxReplayIDs:
				return &UsageError{fmt.Errorf("at most %d IDs at once; use --all with filters for more", dlq.MaxReplayIDs)}
			case all:
				if err := filter.Validate(); err != nil {
					return &UsageError{err}
				}
				if err := checkRange("--batch", batch, 1, 10_000); err != nil {
					return err
				}
			}
			ids, err = parseIDs(args)
			if err != nil {
				return err
			}

			ctx := cmd.Context()
			pool, client, err := a.connectProducer(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			services, err := a.catalog(ctx, pool)
			if err != nil {
				return err
			}
			queues := services.queues()
			if opts.ToQueue != "" && len(queues) == 0 {
				return &UsageError{fmt.Errorf("--to-queue %.128q: %w", opts.ToQueue, errNoServices)}
			}
			if err := opts.Validate(queues); err != nil {
				return &UsageError{err}
			}

			if !all {
				outcomes, err := dlq.Replay(ctx, client, pool, queues, ids, opts)
				if err != nil {
					return err
				}
				return a.reportReplays(outcomes, asJSON)
			}

			var (
				bar      *progressbar.ProgressBar
				progress func(int)
			)
			if !asJSON { // stdout is for the JSON document alone
				total, err := dlq.CountReplayable(ctx, pool, queues, filter, opts)
				if err != nil {
					return err
				}
				bar = a.progressBar(total, "replay")
				progress = func(n int) { _ = bar.Add(n) }
			}
			res, err := dlq.ReplayAll(ctx, client, pool, queues, filter, opts, batch, progress)
			if bar != nil {
				_ = bar.Finish()
			}
			if asJSON {
				if jsonErr := a.printJSON(res); jsonErr != nil {
					return jsonErr
				}
			} else {
				fmt.Fprintf(a.stdout, "replayed %d dead letters\n", res.Replayed)
				for _, q := range slices.Sorted(maps.Keys(res.ByQueue)) {
					fmt.Fprintf(a.stdout, "  %-20s %d\n", termSafe(q), res.ByQueue[q])
				}
				if len(res.Invalid) > 0 {
					fmt.Fprintf(a.stdout, "not replayed: %d dead letters River refuses to insert as they are (they stay pending)\n", len(res.Invalid))
					for _, id := range slices.Sorted(maps.Keys(res.Invalid)) {
						fmt.Fprintf(a.stdout, "  dead letter %d: %s\n", id, termSafe(res.Invalid[id]))
					}
				}
				if res.Duplicates > 0 {
					fmt.Fprintf(a.stdout, "not replayed: %d dead letters whose unique key another job holds (they stay pending)\n", res.Duplicates)
					for _, id := range slices.Sorted(maps.Keys(res.DuplicateOf)) {
						fmt.Fprintf(a.stdout, "  dead letter %d: job %d\n", id, res.DuplicateOf[id])
					}
				}
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "replay every dead letter not replayed yet (narrowed by --queue, --kind, --tier and --tenant)")
	cmd.Flags().StringVar(&filter.Queue, "queue", "", "with --all: only dead letters from this queue")
	cmd.Flags().StringVar(&filter.Kind, "kind", "", "with --all: only this job kind")
	cmd.Flags().StringVar(&filter.Tier, "tier", "", "with --all: only this tier (free, pro, pro_plus, enterprise, or unknown)")
	cmd.Flags().StringVar(&filter.Tenant, "tenant", "", "with --all: only this tenant id")
	cmd.Flags().StringVar(&opts.ToQueue, "to-queue", "", "insert into this queue of the same service instead of the original one")
	cmd.Flags().BoolVar(&opts.Force, "force", false, "replay dead letters that were replayed before, again (never while a live job holds the same unique key)")
	cmd.Flags().StringVar(&opts.Actor, "actor", "", "who replays, recorded in replayed_by (default: $USER)")
	cmd.Flags().IntVar(&batch, "batch", replayBatch, "with --all: dead letters per transaction")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the outcome as JSON")
	return cmd
}

func (a *app) reportReplays(outcomes []dlq.Outcome, asJSON bool) error {
	failed := 0
	for _, o := range outcomes {
		if o.Err != nil {
			failed++
		}
	}
	if asJSON {
		if err := a.printJSON(outcomes); err != nil {
			return err
		}
	} else {
		for _, o := range outcomes {
			if o.Err != nil {
				fmt.Fprintf(a.stdout, "dead letter %d: not replayed: %s\n", o.ID, termSafe(o.Err.Error()))
			} else {
				fmt.Fprintf(a.stdout, "dead letter %d: replayed as job %d in %s\n", o.ID, o.JobID, termSafe(o.Queue))
			}
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d dead letters not replayed", failed, len(outcomes))
	}
	return nil
}
