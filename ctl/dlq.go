package ctl

import (
	"errors"

	"github.com/spf13/cobra"
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
			return &UsageError{errors.New("dlq needs a subcommand: list, show, replay, purge, delete or drain")}
		},
	}
	cmd.AddCommand(a.dlqListCommand(), a.dlqShowCommand(), a.dlqReplayCommand(), a.dlqPurgeCommand(),
		a.dlqDeleteCommand(), a.dlqDrainCommand())
	return cmd
}
