package ctl

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tierq/tierq/migrate"
)

func (a *app) migrateCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "migrate",
		Short: "Apply River's and tierq's migrations (idempotent, safe to run concurrently)",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			cfg, pool, err := a.open(ctx) // not connect: its schema check is what this command fixes
			if err != nil {
				return err
			}
			defer pool.Close()

			res, err := migrate.Up(ctx, pool, cfg.Schema, cfg.NewLogger(cmd.ErrOrStderr()))
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "river migrations applied: %v\ntierq migrations applied: %v\ntierq schema version: %d\n",
				orNone(res.RiverApplied), orNone(res.TierqApplied), res.TierqVersion)
			return nil
		},
	}
}

func orNone[T any](versions []T) any {
	if len(versions) == 0 {
		return "none (up to date)"
	}
	return versions
}
