package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/tierq/tierq/dlq"
	"github.com/tierq/tierq/internal/process"
	"github.com/tierq/tierq/producer"
)

func (a *app) dlqCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "Inspect, replay and purge dead letters (jobs River gave up on)",
		Long: `Dead letters are River jobs that were discarded (every attempt failed, or the
rescuer found them stuck after their last attempt). The scheduler moves them
from river_job into the dead_letter_jobs table every DLQ_DRAIN_INTERVAL; these
commands work on that table. See docs/dead-letters.md.`,
		// A mistyped subcommand ("tierctl dlq lsit") is a usage error, not help.
		Args: usageArgs(cobra.NoArgs),
		RunE: func(*cobra.Command, []string) error {
			return &usageError{errors.New("dlq needs a subcommand: list, show, replay, purge, delete or drain")}
		},
	}
	cmd.AddCommand(a.dlqListCommand(), a.dlqShowCommand(), a.dlqReplayCommand(), a.dlqPurgeCommand(),
		a.dlqDeleteCommand(), a.dlqDrainCommand())
	return cmd
}

func (a *app) dlqListCommand() *cobra.Command {
	var (
		filter   dlq.Filter
		since    string
		limit    int
		beforeID int64
		asJSON   bool
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List dead letters, newest first",
		Example: `  tierctl dlq list
  tierctl dlq list --queue analysis_default --since 24h --pending
  tierctl dlq list --kind specview --limit 200 --json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if filter.Since, err = parseAge("--since", since); err != nil {
				return err
			}
			page := dlq.Page{Limit: limit, BeforeID: beforeID}
			if err := checkList(filter, page); err != nil {
				return err
			}
			ctx := cmd.Context()
			_, pool, err := a.connect(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()

			rows, err := dlq.List(ctx, pool, filter, page)
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(rows)
			}
			if len(rows) == 0 {
				fmt.Fprintln(a.stdout, "no dead letters match")
				return nil
			}
			w := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tJOB ID\tKIND\tQUEUE\tATTEMPTS\tLAST ERROR\tMOVED AT\tREPLAYED AS")
			for _, d := range rows {
				replayed := "-"
				if d.ReplayJobID != nil {
					replayed = "job " + strconv.FormatInt(*d.ReplayJobID, 10)
				}
				fmt.Fprintf(w, "%d\t%d\t%s\t%s\t%d/%d\t%s\t%s\t%s\n", d.ID, d.JobID, d.Kind, d.Queue,
					d.Attempt, d.MaxAttempts, oneLine(d.LastError(), 60), d.MovedAt.UTC().Format(time.DateTime), replayed)
			}
			if err := w.Flush(); err != nil {
				return err
			}
			if len(rows) == limit {
				fmt.Fprintf(a.stdout, "(first %d; next page: --before %d)\n", limit, rows[len(rows)-1].ID)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&filter.Queue, "queue", "", "only this original queue")
	cmd.Flags().StringVar(&filter.Kind, "kind", "", "only this job kind")
	cmd.Flags().StringVar(&since, "since", "", "only rows moved in this long ago (e.g. 90m, 24h, 7d)")
	cmd.Flags().BoolVar(&filter.Pending, "pending", false, "only rows not replayed yet")
	cmd.Flags().IntVar(&limit, "limit", 50, fmt.Sprintf("most rows to show (1-%d)", dlq.MaxListLimit))
	cmd.Flags().Int64Var(&beforeID, "before", 0, "continue a listing: only ids below this one")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array with every field")
	return cmd
}

// checkList turns dlq's validation of a listing into a usage error.
func checkList(f dlq.Filter, page dlq.Page) error {
	if err := f.Validate(); err != nil {
		return &usageError{err}
	}
	if err := checkRange("--limit", page.Limit, 1, dlq.MaxListLimit); err != nil {
		return err
	}
	if page.BeforeID < 0 {
		return &usageError{fmt.Errorf("--before must not be negative, not %d", page.BeforeID)}
	}
	return nil
}

func (a *app) dlqShowCommand() *cobra.Command {
	var asJSON, trace bool
	cmd := &cobra.Command{
		Use:     "show ID",
		Short:   "Show one dead letter: its args and every attempt's error",
		Example: "  tierctl dlq show 42\n  tierctl dlq show 42 --trace",
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseID("ID", args[0])
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			_, pool, err := a.connect(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()

			d, err := dlq.Get(ctx, pool, id)
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(d)
			}
			a.printDeadLetter(d, trace)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the row as JSON")
	cmd.Flags().BoolVar(&trace, "trace", false, "print each error's stack trace too")
	return cmd
}

func (a *app) printDeadLetter(d dlq.DeadLetter, trace bool) {
	out := a.stdout
	fmt.Fprintf(out, "dead letter %d: job %d, kind %s\n", d.ID, d.JobID, d.Kind)
	fmt.Fprintf(out, "  queue         %s (priority %d)\n", d.Queue, d.Priority)
	fmt.Fprintf(out, "  attempts      %d of %d\n", d.Attempt, d.MaxAttempts)
	fmt.Fprintf(out, "  enqueued      %s\n", d.CreatedAt.UTC().Format(time.RFC3339))
	if d.FinalizedAt != nil {
		fmt.Fprintf(out, "  discarded     %s\n", d.FinalizedAt.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(out, "  moved         %s\n", d.MovedAt.UTC().Format(time.RFC3339))
	if d.ReplayedAt != nil {
		fmt.Fprintf(out, "  replayed      %s as job %d by %s\n", d.ReplayedAt.UTC().Format(time.RFC3339), *d.ReplayJobID, *d.ReplayedBy)
	} else {
		fmt.Fprintf(out, "  replayed      no\n")
	}
	if len(d.Tags) > 0 {
		fmt.Fprintf(out, "  tags          %s\n", strings.Join(d.Tags, ", "))
	}
	fmt.Fprintf(out, "  args          %s\n", indentJSON(d.Args, "                "))
	fmt.Fprintf(out, "  metadata      %s\n", indentJSON(d.Metadata, "                "))
	fmt.Fprintf(out, "  errors (%d):\n", len(d.Errors))
	for _, e := range d.Errors {
		fmt.Fprintf(out, "    attempt %d at %s: %s\n", e.Attempt, e.At.UTC().Format(time.RFC3339), e.Error)
		if trace && e.Trace != "" {
			for line := range strings.SplitSeq(strings.TrimRight(e.Trace, "\n"), "\n") {
				fmt.Fprintf(out, "      %s\n", line)
			}
		}
	}
}

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
		Use:   "replay ID... | --all [--queue Q] [--kind K]",
		Short: "Insert a dead letter's job again, with fresh attempts, and mark it replayed",
		Long: `Insert a new River job with the dead letter's kind, args, tags and max
attempts, with fresh attempts, into its original queue (or --to-queue, which
must be a queue of the same service), at the priority it started with; mark
the dead letter replayed (when, by whom, the new job's id) in the same
transaction. A dead letter that was replayed before is refused unless
--force. With IDs, each is reported and the command exits 1 if any was not
replayed. With --all, every dead letter not replayed yet that matches
--queue and --kind is replayed in batches, with a progress bar.`,
		Example: `  tierctl dlq replay 42 43
  tierctl dlq replay 42 --to-queue analysis_priority --actor alice
  tierctl dlq replay --all --queue analysis_default --kind analysis`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.Actor == "" {
				opts.Actor = a.user()
			}
			queues, err := a.serviceQueues()
			if err != nil {
				return err
			}
			if err := opts.Validate(queues); err != nil {
				return &usageError{err}
			}
			var ids []int64
			switch {
			case all && len(args) > 0:
				return &usageError{errors.New("give dead-letter IDs or --all, not both")}
			case !all && len(args) == 0:
				return &usageError{errors.New("give one or more dead-letter IDs, or --all")}
			case !all && (filter.Queue != "" || filter.Kind != ""):
				return &usageError{errors.New("--queue and --kind select rows for --all; with IDs, leave them out")}
			case !all && len(args) > dlq.MaxReplayIDs:
				return &usageError{fmt.Errorf("at most %d IDs at once; use --all with filters for more", dlq.MaxReplayIDs)}
			case all:
				if err := filter.Validate(); err != nil {
					return &usageError{err}
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
					fmt.Fprintf(a.stdout, "  %-20s %d\n", q, res.ByQueue[q])
				}
				if len(res.Invalid) > 0 {
					fmt.Fprintf(a.stdout, "not replayed: %d dead letters River refuses to insert as they are (they stay pending)\n", len(res.Invalid))
					for _, id := range slices.Sorted(maps.Keys(res.Invalid)) {
						fmt.Fprintf(a.stdout, "  dead letter %d: %s\n", id, res.Invalid[id])
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
	cmd.Flags().BoolVar(&all, "all", false, "replay every dead letter not replayed yet (narrowed by --queue and --kind)")
	cmd.Flags().StringVar(&filter.Queue, "queue", "", "with --all: only dead letters from this queue")
	cmd.Flags().StringVar(&filter.Kind, "kind", "", "with --all: only this job kind")
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
				fmt.Fprintf(a.stdout, "dead letter %d: not replayed: %v\n", o.ID, o.Err)
			} else {
				fmt.Fprintf(a.stdout, "dead letter %d: replayed as job %d in %s\n", o.ID, o.JobID, o.Queue)
			}
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d dead letters not replayed", failed, len(outcomes))
	}
	return nil
}

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
				return &usageError{errors.New("--older-than is required (e.g. --older-than 30d; 0s purges every row)")}
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
				fmt.Fprintf(a.stdout, "  %-20s %d\n", q, res.ByQueue[q])
			}
			return err
		},
	}
	cmd.Flags().IntVar(&batch, "batch", 1000, "jobs per drain statement")
	return cmd
}

// connectProducer connects (a.connect) and builds an insert-only River
// client (no queues, never a leader) on the pool; the caller closes the pool.
func (a *app) connectProducer(ctx context.Context) (*pgxpool.Pool, *river.Client[pgx.Tx], error) {
	cfg, pool, err := a.connect(ctx)
	if err != nil {
		return nil, nil, err
	}
	client, err := process.NewClient(pool, producer.ClientConfig(cfg.Schema, nil))
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, client, nil
}

// checkRange is a usage error unless lo <= n <= hi.
func checkRange(flag string, n, lo, hi int) error {
	if n < lo || n > hi {
		return &usageError{fmt.Errorf("%s must be between %d and %d, not %d", flag, lo, hi, n)}
	}
	return nil
}

// parseIDs reads positive ids from arguments.
func parseIDs(args []string) ([]int64, error) {
	ids := make([]int64, len(args))
	for i, arg := range args {
		id, err := parseID("ID", arg)
		if err != nil {
			return nil, err
		}
		ids[i] = id
	}
	return ids, nil
}

func (a *app) progressBar(total int, what string) *progressbar.ProgressBar {
	return progressbar.NewOptions(total,
		progressbar.OptionSetWriter(a.stdout),
		progressbar.OptionSetDescription(what),
		progressbar.OptionShowCount(),
		progressbar.OptionSetWidth(30),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(a.stdout) }),
	)
}

func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// user is who runs tierctl, from $USER, for the replay audit.
func (a *app) user() string {
	for _, kv := range a.environ {
		if name, ok := strings.CutPrefix(kv, "USER="); ok && name != "" {
			return name
		}
	}
	return "tierctl"
}

// parseID reads a positive row or job id.
func parseID(what, s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, &usageError{fmt.Errorf("%s %q is not an id (a positive integer)", what, s)}
	}
	return id, nil
}

// parseAge reads a Go duration or a whole number of days ("30d"); "" is 0.
func parseAge(flag, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 || n > 100*365 {
			return 0, &usageError{fmt.Errorf("%s %q: want a duration such as 90m, 24h or 30d", flag, s)}
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil || d < 0 {
			return 0, &usageError{fmt.Errorf("%s %q: want a duration such as 90m, 24h or 30d", flag, s)}
		}
	}
	return d, nil
}

// oneLine shortens s to n runes on one line, for a table cell.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// indentJSON pretty-prints a JSON document, continuation lines prefixed.
func indentJSON(doc json.RawMessage, prefix string) string {
	var buf bytes.Buffer
	if json.Indent(&buf, doc, prefix, "  ") != nil {
		return string(doc)
	}
	return buf.String()
}
