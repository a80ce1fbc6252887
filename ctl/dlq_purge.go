package ctl

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tierq/tierq/dlq"
)

func (a *app) dlqPurgeCommand() *cobra.Command {
	var (
		olderThan    string
		replayedOnly bool
		batch        int
	)
	cmd := &cobra.Command{
		Use:   "purge --older-than D [--replayed-only]",
		Short: "Delete dead letters moved in more than D ago, in batches",
		Long: `Delete dead letters moved into the table more than D ago (a Go duration or
days: 90m, 72h, 30d), in batches of --batch rows, and print how many. Without
--replayed-only this deletes jobs nobody replayed: they are gone for good.`,
		Example: "  tierctl dlq purge --older-than 30d --replayed-only\n  tierctl dlq purge --older-than 90d",
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if strings.TrimSpace(olderThan) == "" {
				return &UsageError{errors.New("--older-than is required (e.g. --older-than 30d; 0s purges every row)")}
			}
			age, err := parseAge("--older-than", olderThan)
			if err != nil {
				return err
			}
			if err := checkRange("--batch", batch, 1, 100_000); err != nil {
				return err
			}
			ctx := cmd.Context()
			_, pool, err := a.connect(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()

			n, err := dlq.Purge(ctx, pool, dlq.PurgeRequest{OlderThan: age, ReplayedOnly: replayedOnly, Batch: batch}, nil)
			what := "dead letters"
			if replayedOnly {
				what = "replayed dead letters"
			}
			fmt.Fprintf(a.stdout, "purged %d %s moved in more than %s ago\n", n, what, olderThan)
			return err
		},
	}
	cmd.Flags().StringVar(&olderThan, "older-than", "", "age of the rows to delete, by when they were moved (required)")
	cmd.Flags().BoolVar(&replayedOnly, "replayed-only", false, "delete only dead letters that were replayed")
	cmd.Flags().IntVar(&batch, "batch", 1000, "rows per delete statement")
	return cmd
}

func (a *app) dlqDeleteCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "delete ID...",
		Short: "Delete dead letters one by one (dismiss a job that will never be replayed)",
		Long: `Delete the given dead letters for good, for a job that must not run again
(so that it stops counting towards the depth alert). Each ID is reported; the
command exits 1 if any was not found.`,
		Example: "  tierctl dlq delete 42 43",
		Args:    usageArgs(cobra.RangeArgs(1, dlq.MaxReplayIDs)),
		RunE: func(cmd *cobra.Command, args []string) error {
			ids, err := parseIDs(args)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			_, pool, err := a.connect(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()

			missing := 0
			for _, id := range ids {
				switch err := dlq.Delete(ctx, pool, id); {
				case errors.Is(err, dlq.ErrNotFound):
					missing++
					fmt.Fprintf(a.stdout, "dead letter %d: not found\n", id)
				case err != nil:
					return err
				default:
					fmt.Fprintf(a.stdout, "dead letter %d: deleted\n", id)
				}
			}
			if missing > 0 {
				return fmt.Errorf("%d of %d dead letters not found", missing, len(ids))
			}
			return nil
		},
	}
}

func (a *app) dlqDrainCommand() *cobra.Command {
	var batch int
	cmd := &cobra.Command{
		Use:   "drain",
		Short: "Move discarded River jobs into dead_letter_jobs now (the scheduler does this every DLQ_DRAIN_INTERVAL)",
		Long: `Run the scheduler's dead-letter drain once from here: useful while no
scheduler runs, or to empty river_job of discarded jobs before an inspection.
It is safe next to a running scheduler: concurrent drains never copy a job twice.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkRange("--batch", batch, 1, 100_000); err != nil {
				return err
			}
			ctx := cmd.Context()
			_, pool, err := a.connect(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()

			res, err := dlq.Drain(ctx, pool, batch)
			if res.Conflicts > 0 {
				fmt.Fprintf(a.stdout, "%d discarded jobs left in river_job: their ids are already in dead_letter_jobs (river_job ids reused?)\n", res.Conflicts)
			}
			statements := "statements"
			if res.Batches == 1 {
				statements = "statement"
			}
			fmt.Fprintf(a.stdout, "moved %d discarded jobs into dead_letter_jobs in %d %s\n", res.Moved, res.Batches, statements)
			for _, q := range slices.Sorted(maps.Keys(res.ByQueue)) {
				fmt.Fprintf(a.stdout, "  %-20s %d\n", termSafe(q), res.ByQueue[q])
			}
			return err
		},
	}
	cmd.Flags().IntVar(&batch, "batch", 1000, "jobs per drain statement")
	return cmd
}
