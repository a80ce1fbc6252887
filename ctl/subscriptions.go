package ctl

import (
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tierq/tierq/subscriptions"
	"github.com/tierq/tierq/tiers"
)

func (a *app) subscriptionsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "subscriptions",
		Short: "Set and list the tier each user pays for (the API reads it before every insert)",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(*cobra.Command, []string) error {
			return &UsageError{errors.New("subscriptions needs a subcommand: set or list")}
		},
	}
	cmd.AddCommand(&cobra.Command{
		Use:     "set USER TIER",
		Short:   "Set a user's tier (free, pro, pro_plus, enterprise)",
		Example: "  tierctl subscriptions set u_1842 enterprise",
		Args:    usageArgs(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := subscriptions.CheckUserID(args[0]); err != nil {
				return &UsageError{err}
			}
			tier, err := tiers.Parse(args[1])
			if err != nil {
				return &UsageError{err}
			}
			ctx := cmd.Context()
			_, pool, err := a.connect(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			if err := subscriptions.Set(ctx, pool, args[0], tier); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "%s: %s\n", args[0], tier)
			return nil
		},
	})
	var (
		after string
		limit int
	)
	list := &cobra.Command{
		Use:   "list",
		Short: "List subscriptions by user id (users without one are free)",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkRange("--limit", limit, 1, 10_000); err != nil {
				return err
			}
			if len(after) > subscriptions.MaxUserIDLen {
				return &UsageError{fmt.Errorf("--after is longer than a user id (%d bytes)", subscriptions.MaxUserIDLen)}
			}
			ctx := cmd.Context()
			_, pool, err := a.connect(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			subs, err := subscriptions.List(ctx, pool, after, limit)
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(w, "USER\tTIER\tUPDATED AT")
			for _, s := range subs {
				fmt.Fprintf(w, "%s\t%s\t%s\n", termSafe(s.UserID), s.Tier, s.UpdatedAt.UTC().Format(time.DateTime))
			}
			return w.Flush()
		},
	}
	list.Flags().StringVar(&after, "after", "", "start after this user id")
	list.Flags().IntVar(&limit, "limit", 100, "most rows to show")
	cmd.AddCommand(list)
	return cmd
}
