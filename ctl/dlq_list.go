package ctl

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tierq/tierq/dlq"
	"github.com/tierq/tierq/jobmeta"
)

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
  tierctl dlq list --kind specview --limit 200 --json
  tierctl dlq list --tier pro --tenant acme`,
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
			fmt.Fprintln(w, "ID\tJOB ID\tKIND\tQUEUE\tTIER\tTENANT\tATTEMPTS\tLAST ERROR\tMOVED AT\tREPLAYED AS")
			for _, d := range rows {
				replayed := "-"
				if d.ReplayJobID != nil {
					replayed = "job " + strconv.FormatInt(*d.ReplayJobID, 10)
				}
				tier, tenant := tierAndTenant(d)
				fmt.Fprintf(w, "%d\t%d\t%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\n", d.ID, d.JobID,
					oneLine(d.Kind, 40), oneLine(d.Queue, 40), tier, oneLine(tenant, tenantWidth),
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
	cmd.Flags().StringVar(&filter.Tier, "tier", "", "only this tier (free, pro, pro_plus, enterprise, or unknown: none)")
	cmd.Flags().StringVar(&filter.Tenant, "tenant", "", "only this tenant id")
	cmd.Flags().StringVar(&since, "since", "", "only rows moved in this long ago (e.g. 90m, 24h, 7d)")
	cmd.Flags().BoolVar(&filter.Pending, "pending", false, "only rows not replayed yet")
	cmd.Flags().IntVar(&limit, "limit", 50, fmt.Sprintf("most rows to show (1-%d)", dlq.MaxListLimit))
	cmd.Flags().Int64Var(&beforeID, "before", 0, "continue a listing: only ids below this one")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array with every field")
	return cmd
}

// tenantWidth is the widest TENANT cell of dlq list, in runes; a longer
// tenant id ends in "…" (dlq show and --json print it whole).
const tenantWidth = 24

// tierAndTenant is what dlq list shows of a dead letter's tier and tenant:
// the tier from its metadata, else its args (jobmeta.TierOf), and the
// tenant from its metadata; "-" for either when the job has none.
func tierAndTenant(d dlq.DeadLetter) (tier, tenant string) {
	tier, tenant = "-", "-"
	if t, ok := jobmeta.TierOf(d.Metadata, d.Args); ok {
		tier = t.String()
	}
	if t := jobmeta.Read(d.Metadata).Tenant; t != "" {
		tenant = t
	}
	return tier, tenant
}

// checkList turns dlq's validation of a listing into a usage error.
func checkList(f dlq.Filter, page dlq.Page) error {
	if err := f.Validate(); err != nil {
		return &UsageError{err}
	}
	if err := checkRange("--limit", page.Limit, 1, dlq.MaxListLimit); err != nil {
		return err
	}
	if page.BeforeID < 0 {
		return &UsageError{fmt.Errorf("--before must not be negative, not %d", page.BeforeID)}
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
	// Everything but ids, counts and times comes from the job: termSafe.
	fmt.Fprintf(out, "dead letter %d: job %d, kind %s\n", d.ID, d.JobID, termSafe(d.Kind))
	fmt.Fprintf(out, "  queue         %s (priority %d)\n", termSafe(d.Queue), d.Priority)
	tier, tenant := tierAndTenant(d)
	fmt.Fprintf(out, "  tier          %s\n", tier)
	fmt.Fprintf(out, "  tenant        %s\n", termSafe(tenant))
	fmt.Fprintf(out, "  attempts      %d of %d\n", d.Attempt, d.MaxAttempts)
	fmt.Fprintf(out, "  enqueued      %s\n", d.CreatedAt.UTC().Format(time.RFC3339))
	if d.FinalizedAt != nil {
		fmt.Fprintf(out, "  discarded     %s\n", d.FinalizedAt.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(out, "  moved         %s\n", d.MovedAt.UTC().Format(time.RFC3339))
	if d.ReplayedAt != nil {
		fmt.Fprintf(out, "  replayed      %s as job %d by %s\n", d.ReplayedAt.UTC().Format(time.RFC3339), *d.ReplayJobID, termSafe(*d.ReplayedBy))
	} else {
		fmt.Fprintf(out, "  replayed      no\n")
	}
	if len(d.Tags) > 0 {
		tags := make([]string, len(d.Tags))
		for i, tag := range d.Tags {
			tags[i] = termSafe(tag)
		}
		fmt.Fprintf(out, "  tags          %s\n", strings.Join(tags, ", "))
	}
	fmt.Fprintf(out, "  args          %s\n", indentJSON(d.Args, "                "))
	fmt.Fprintf(out, "  metadata      %s\n", indentJSON(d.Metadata, "                "))
	fmt.Fprintf(out, "  errors (%d):\n", len(d.Errors))
	for _, e := range d.Errors {
		fmt.Fprintf(out, "    attempt %d at %s: %s\n", e.Attempt, e.At.UTC().Format(time.RFC3339), termSafe(e.Error))
		if trace && e.Trace != "" {
			for line := range strings.SplitSeq(strings.TrimRight(e.Trace, "\n"), "\n") {
				fmt.Fprintf(out, "      %s\n", termSafeLines(line))
			}
		}
	}
}
