package ctl

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tierq/tierq/escalation"
	"github.com/tierq/tierq/routing"
)

func (a *app) escalateCommand() *cobra.Command {
	var (
		to       string
		priority int
		actor    string
		reason   string
	)
	cmd := &cobra.Command{
		Use:   "escalate JOB_ID --to priority|default|scheduled --actor NAME --reason TEXT [--priority N]",
		Short: "Move a queued job to another queue of its service (audited in job_escalations)",
		Long: `Move a queued job (available, scheduled, retryable or pending) to the priority,
default or scheduled queue of its own service, any service known in the
database (tierctl services list). Moving to priority sets River
priority 1 unless --priority says otherwise; other moves keep the priority.
A running or finished job, or a missing one, is left alone and the command
exits 1 saying why.`,
		Example: `  tierctl escalate 4211 --to priority --actor alice --reason "customer escalation #812"`,
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseID("JOB_ID", args[0])
			if err != nil {
				return err
			}
			class, err := routing.ParseClass(to)
			if err != nil {
				return &UsageError{fmt.Errorf("--to: %w", err)}
			}
			req := escalation.Request{JobID: id, To: class, Priority: priority, Actor: actor, Reason: reason}
			if err := req.Validate(); err != nil {
				return &UsageError{err}
			}

			ctx := cmd.Context()
			_, pool, err := a.connect(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			queues, err := a.serviceQueues(ctx, pool)
			if err != nil {
				return err
			}

			res, err := escalation.Escalate(ctx, pool, queues, req)
			if err != nil {
				return err
			}
			if !res.Changed {
				fmt.Fprintf(a.stdout, "job %d (%s) is already in %s at priority %d; nothing changed\n",
					res.JobID, termSafe(res.Kind), termSafe(res.ToQueue), res.ToPriority)
				return nil
			}
			fmt.Fprintf(a.stdout, "job %d (%s, %s): %s priority %d -> %s priority %d\n",
				res.JobID, termSafe(res.Kind), res.State, termSafe(res.FromQueue), res.FromPriority, termSafe(res.ToQueue), res.ToPriority)
			if res.ToQueuePaused {
				fmt.Fprintf(a.stdout, "queue %s is paused: the job waits there until the queue is resumed\n", termSafe(res.ToQueue))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "queue class to move to: priority, default or scheduled (required)")
	cmd.Flags().IntVar(&priority, "priority", 0, "River priority after the move, 1 (first) to 4; default 1 for --to priority, else unchanged")
	cmd.Flags().StringVar(&actor, "actor", "", "who asks, recorded in the audit (required)")
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded in the audit (required)")
	return cmd
}
