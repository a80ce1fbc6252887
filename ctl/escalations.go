package ctl

// tierctl escalations list: the escalation audit (job_escalations) through
// escalation.List, the query GET /v1/escalations runs.

import (
	"errors"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tierq/tierq/escalation"
)

func (a *app) escalationsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "escalations",
		Short: "Read the escalation audit: every move of a queued job to another queue or priority",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(*cobra.Command, []string) error {
			return &UsageError{errors.New("escalations needs a subcommand: list")}
		},
	}
	cmd.AddCommand(a.escalationsListCommand())
	return cmd
}

// escalationsJSON is `escalations list --json`: GET /v1/escalations's
// answer, next_cursor being the --before of the next page.
type escalationsJSON struct {
	Escalations []escalation.Escalation `json:"escalations"`
	NextCursor  *string                 `json:"next_cursor"`
}

func (a *app) escalationsListCommand() *cobra.Command {
	var (
		p            escalation.ListParams
		since, until string
		asJSON       bool
	)
	cmd := &cobra.Command{
		Use:   "list [--queue Q] [--actor NAME] [--since T] [--until T] [--limit N] [--before ID] [--json]",
		Short: "List escalations newest first: by operators, the scheduler's sweep and dedup upgrades",
		Long: `List the rows of job_escalations, newest first: each move of a queued job to
another queue or priority by an operator (tierctl escalate, PATCH
/v1/jobs/{id}: the actor is the name given), by the scheduler's escalation
sweep (actor scheduler) or by a duplicate insert of a higher tier (actor
dedup). Rows outlive their jobs.

--queue keeps the moves out of or into the queue, --actor the moves by that
actor exactly; --since (at or after) and --until (before) take an RFC 3339
time (2026-11-27T10:00:00Z) or an age (90m, 24h, 7d: that long ago). When a
page is full, the last line gives the --before ID of the next one.`,
		Example: `  tierctl escalations list --actor alice --since 7d
  tierctl escalations list --queue analysis_default --since 2026-11-27T00:00:00Z --until 2026-11-28T00:00:00Z --json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			now := time.Now()
			var err error
			if p.Since, err = parseTimeOrAge("--since", since, now); err != nil {
				return err
			}
			if p.Until, err = parseTimeOrAge("--until", until, now); err != nil {
				return err
			}
			if err := checkRange("--limit", p.Limit, 1, escalation.MaxListLimit); err != nil {
				return err
			}
			if p.BeforeID < 0 {
				return &UsageError{fmt.Errorf("--before %d is not an id (a positive integer)", p.BeforeID)}
			}
			if err := p.Validate(); err != nil {
				return &UsageError{err}
			}
			ctx := cmd.Context()
			_, pool, err := a.connect(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			rows, err := escalation.List(ctx, pool, p)
			if err != nil {
				return err
			}
			var next *string
			if len(rows) == p.Limit {
				s := strconv.FormatInt(rows[len(rows)-1].ID, 10)
				next = &s
			}
			if asJSON {
				return a.printJSON(escalationsJSON{Escalations: rows, NextCursor: next})
			}
			if len(rows) == 0 {
				fmt.Fprintln(a.stdout, "no escalations match")
				return nil
			}
			w := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tESCALATED AT (UTC)\tJOB\tFROM\tTO\tACTOR\tREASON")
			for _, e := range rows {
				fmt.Fprintf(w, "%d\t%s\t%d\t%s p%d\t%s p%d\t%s\t%s\n", e.ID, e.EscalatedAt.UTC().Format(time.DateTime), e.JobID,
					oneLine(e.FromQueue, 40), e.FromPriority, oneLine(e.ToQueue, 40), e.ToPriority, oneLine(e.Actor, 24), oneLine(e.Reason, 60))
			}
			if err := w.Flush(); err != nil {
				return err
			}
			if next != nil {
				fmt.Fprintf(a.stdout, "more: the same command with --before %s\n", *next)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&p.Queue, "queue", "", "only moves out of or into this queue")
	f.StringVar(&p.Actor, "actor", "", "only moves by this actor (an operator's name, scheduler, dedup)")
	f.StringVar(&since, "since", "", "only moves at or after this RFC 3339 time or age (90m, 24h, 7d)")
	f.StringVar(&until, "until", "", "only moves before this RFC 3339 time or age")
	f.IntVar(&p.Limit, "limit", escalation.DefaultListLimit, fmt.Sprintf("most rows to show, 1 to %d", escalation.MaxListLimit))
	f.Int64Var(&p.BeforeID, "before", 0, "only rows with a smaller id: the next page after the one ending at this id")
	f.BoolVar(&asJSON, "json", false, "print JSON (GET /v1/escalations's answer) instead of a table")
	return cmd
}

// parseTimeOrAge reads an RFC 3339 time or an age before now (parseAge's:
// 90m, 24h, 30d); "" is the zero time.
func parseTimeOrAge(flag, s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	age, err := parseAge(flag, s)
	if err != nil {
		return time.Time{}, &UsageError{fmt.Errorf("%s %q: want an RFC 3339 time such as 2026-11-27T10:00:00Z, or an age such as 90m, 24h or 7d", flag, s)}
	}
	return now.Add(-age), nil
}
