package ctl

// tierctl limits: the tenant limits by tier (package limits) the scheduler
// recorded, one tenant's limits and its daily quota's use, and per-tenant
// overrides.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tierq/tierq/internal/db"
	"github.com/tierq/tierq/jobmeta"
	"github.com/tierq/tierq/limits"
	"github.com/tierq/tierq/subscriptions"
	"github.com/tierq/tierq/tiers"
)

// errNoOverride: unset of a tenant that has no override (exit 1).
var errNoOverride = errors.New("no override")

func (a *app) limitsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "limits",
		Short: "Show tenant limits by tier; set and unset a tenant's override",
		Long: `Each service's tiers have limits per tenant, which the scheduler records from
its environment when it starts (<NAME>_<TIER>_TENANT_MAX_RUNNING, _RATE and
_DAILY_QUOTA): a concurrency cap, a rate (jobs started per second, minute or
hour: 10/s, 100/m, 1000/h) and a daily quota (jobs inserted per UTC day). A
tenant's override beats its tier's default, whatever its tier: 0 is no limit
for that tenant; an unset field inherits the tier's. 0 is no limit.

Daily quotas are enforced (POST /v1/jobs answers 429 past one, producer.Insert
returns a *limits.QuotaError); caps and rates hold the jobs beyond them
(docs/fairness.md, "Limits").`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(*cobra.Command, []string) error {
			return &UsageError{errors.New("limits needs a subcommand: list, show, set or unset")}
		},
	}
	cmd.AddCommand(a.limitsListCommand(), a.limitsShowCommand(), a.limitsSetCommand(), a.limitsUnsetCommand())
	return cmd
}

// limitsTarget checks a command's SERVICE and TENANT arguments: a service
// tierctl knows (exit 2 naming the known ones) and a tenant id (exit 2).
func (a *app) limitsTarget(ctx context.Context, q db.Querier, service, tenant string) error {
	if tenant == "" {
		return &UsageError{errors.New("TENANT must not be empty (a job without a tenant has no per-tenant limit)")}
	}
	if err := jobmeta.CheckTenant(tenant); err != nil {
		return &UsageError{fmt.Errorf("TENANT: %w", err)}
	}
	c, err := a.catalog(ctx, q)
	if err != nil {
		return err
	}
	var known []string
	for _, s := range c.services {
		known = append(known, s.Name)
	}
	if !slices.Contains(known, service) {
		if len(known) == 0 {
			return errNoServices
		}
		return &UsageError{fmt.Errorf("unknown service %q (known: %s)", termSafe(truncate(service, 60)), strings.Join(known, ", "))}
	}
	return nil
}

func (a *app) limitsListCommand() *cobra.Command {
	var (
		service, after string
		limit          int
		asJSON         bool
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the limits by tier the scheduler recorded, then the tenants' overrides",
		Long: `List every service's limits by tier, as the scheduler recorded them when it
started, then the tenants' overrides, by service and tenant ("-": the tier's
default applies). --service lists one service's; --after pages through its
tenants.`,
		Example: `  tierctl limits list
  tierctl limits list --service analyzer --after acme --limit 50
  tierctl limits list --json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkRange("--limit", limit, 1, limits.MaxListLimit); err != nil {
				return err
			}
			params := limits.ListParams{Service: service, After: after, Limit: limit}
			if after != "" && service == "" {
				return &UsageError{errors.New("--after needs --service: tenants are listed in order within one service")}
			}
			if after != "" {
				if err := jobmeta.CheckTenant(after); err != nil {
					return &UsageError{fmt.Errorf("--after: %w", err)}
				}
			}
			ctx := cmd.Context()
			_, pool, err := a.connect(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			recorded, err := limits.ReadTiers(ctx, pool)
			if err != nil {
				return err
			}
			if service != "" {
				recorded = slices.DeleteFunc(recorded, func(r limits.Recorded) bool { return r.Service != service })
			}
			overrides, err := limits.ListOverrides(ctx, pool, params)
			if errors.Is(err, limits.ErrInvalid) {
				return &UsageError{err}
			}
			if err != nil {
				return err
			}
			if asJSON {
				if recorded == nil {
					recorded = []limits.Recorded{}
				}
				if overrides == nil {
					overrides = []limits.TenantOverride{}
				}
				return a.printJSON(map[string]any{"tiers": recorded, "overrides": overrides})
			}
			w := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
			if len(recorded) == 0 {
				fmt.Fprintln(w, "no limits by tier recorded (a scheduler records its environment's when it starts): none apply by tier")
			} else {
				fmt.Fprintln(w, "SERVICE\tTIER\tMAX RUNNING\tRATE\tDAILY QUOTA\tRECORDED")
				for _, r := range recorded {
					for _, tier := range tiers.All() {
						v := r.Tiers[tier]
						fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%d\t%s by %s\n", termSafe(r.Service), tier, v.MaxRunning, v.Rate, v.DailyQuota,
							formatTime(r.RecordedAt), termSafe(r.RecordedBy))
					}
				}
			}
			fmt.Fprintln(w)
			if len(overrides) == 0 {
				fmt.Fprintln(w, "no tenant overrides")
				return w.Flush()
			}
			fmt.Fprintln(w, "SERVICE\tTENANT\tMAX RUNNING\tRATE\tDAILY QUOTA\tUPDATED")
			for _, o := range overrides {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", termSafe(o.Service), termSafe(o.Tenant),
					optional(o.MaxRunning), optional(o.Rate), optional(o.DailyQuota), formatTime(o.UpdatedAt))
			}
			if len(overrides) == limit && service != "" {
				fmt.Fprintf(w, "(more: --after %s)\n", strconv.Quote(overrides[len(overrides)-1].Tenant))
			}
			return w.Flush()
		},
	}
	cmd.Flags().StringVar(&service, "service", "", "only this service's")
	cmd.Flags().StringVar(&after, "after", "", "overrides of tenants after this one (with --service)")
	cmd.Flags().IntVar(&limit, "limit", 100, "most overrides to show")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// optional is an override's field: "-" when it inherits the tier's.
func optional[T any](v *T) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprint(*v)
}

func (a *app) limitsShowCommand() *cobra.Command {
	var (
		tierName string
		asJSON   bool
	)
	cmd := &cobra.Command{
		Use:   "show SERVICE TENANT",
		Short: "Show a tenant's limits in a service, its daily quota's use today and its jobs now",
		Long: `Show TENANT's limits in SERVICE: its tier's defaults (the tier of its
subscription, free without one, or --tier), its override, the limits that
apply, its jobs counted today (UTC) against its daily quota, and its jobs in
the service's queues now: running and available counted against its
concurrency cap (what the cap bounds), and held, by fair share, the cap or
the rate. Jobs are counted against a quota only while one applies, and against a
cap only while one applies.`,
		Example: `  tierctl limits show analyzer u_1842
  tierctl limits show analyzer u_1842 --tier pro --json`,
		Args: usageArgs(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			var tier tiers.Tier
			if tierName != "" {
				var err error
				if tier, err = tiers.Parse(tierName); err != nil {
					return &UsageError{fmt.Errorf("--tier: %w", err)}
				}
			}
			ctx := cmd.Context()
			_, pool, err := a.connect(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			if err := a.limitsTarget(ctx, pool, args[0], args[1]); err != nil {
				return err
			}
			return a.showLimits(ctx, pool, args[0], args[1], tier, asJSON)
		},
	}
	cmd.Flags().StringVar(&tierName, "tier", "", "the tier whose defaults apply (default: the tenant's subscription, free without one)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (GET /v1/limits/{service}/tenant's answer)")
	return cmd
}

// showLimits prints tenant's limits in service for tier (0: its
// subscription's), its quota's use today and its jobs now.
func (a *app) showLimits(ctx context.Context, q db.Querier, service, tenant string, tier tiers.Tier, asJSON bool) error {
	if tier == 0 {
		var err error
		if tier, err = subscriptions.Lookup(ctx, q, tenant); err != nil {
			return err
		}
	}
	t, err := limits.Lookup(ctx, q, service, tier, tenant, time.Time{})
	if err != nil {
		return err
	}
	if asJSON {
		return a.printJSON(t)
	}
	fmt.Fprintf(a.stdout, "service %s, tenant %s, tier %s\n", termSafe(t.Service), termSafe(t.Tenant), t.Tier)
	w := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "LIMIT\tAPPLIES\tTIER\tOVERRIDE\tENFORCED")
	fmt.Fprintf(w, "max_running\t%d\t%d\t%s\tyes\n", t.Limits.MaxRunning, t.TierLimits.MaxRunning, optional(t.Override.MaxRunning))
	fmt.Fprintf(w, "rate\t%s\t%s\t%s\tyes\n", t.Limits.Rate, t.TierLimits.Rate, optional(t.Override.Rate))
	fmt.Fprintf(w, "daily_quota\t%d\t%d\t%s\tyes\n", t.Limits.DailyQuota, t.TierLimits.DailyQuota, optional(t.Override.DailyQuota))
	if err := w.Flush(); err != nil {
		return err
	}
	if t.TierRecordedAt == nil {
		fmt.Fprintf(a.stdout, "no scheduler has recorded %s's limits by tier: none apply by tier\n", termSafe(t.Service))
	}
	quota := fmt.Sprintf("%d used, no quota", t.Quota.Used)
	if t.Quota.Remaining != nil {
		quota = fmt.Sprintf("%d used of %d, %d remaining", t.Quota.Used, t.Limits.DailyQuota, *t.Quota.Remaining)
	}
	fmt.Fprintf(a.stdout, "today (%s UTC): %s; the count restarts at %s\n", t.Quota.Day, quota, formatTime(t.Quota.ResetAt))
	counted := "no cap, running and available jobs not counted"
	if t.Limits.MaxRunning > 0 {
		counted = fmt.Sprintf("%d running + %d available of its cap of %d", t.Jobs.Running, t.Jobs.Available, t.Limits.MaxRunning)
	}
	fmt.Fprintf(a.stdout, "jobs now: %s; %d held, %d of them by the cap, %d by the rate\n", counted, t.Jobs.Held, t.Jobs.HeldByCap, t.Jobs.HeldByRate)
	return nil
}

func (a *app) limitsSetCommand() *cobra.Command {
	var (
		maxRunning int
		rate       string
		dailyQuota int64
	)
	cmd := &cobra.Command{
		Use:   "set SERVICE TENANT",
		Short: "Set a tenant's override of its tier's limits (the flags given; 0: no limit for it)",
		Long: `Set the limits the flags give in TENANT's override for SERVICE; the others
stay as they are (set, or inherited from the tier). An override beats the
tier's default whatever the tenant's tier; 0 is no limit for this tenant.
Prints the tenant's limits as they are then.`,
		Example: `  tierctl limits set analyzer acme --daily-quota 5000
  tierctl limits set analyzer acme --max-running 4 --rate 100/m
  tierctl limits set analyzer trial_42 --daily-quota 0   # no quota, whatever the tier's`,
		Args: usageArgs(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			var o limits.Override
			flags := cmd.Flags()
			if flags.Changed("max-running") {
				o.MaxRunning = &maxRunning
			}
			if flags.Changed("rate") {
				r, err := limits.ParseRate(rate)
				if err != nil {
					return &UsageError{fmt.Errorf("--rate %q: %w", termSafe(truncate(rate, 40)), err)}
				}
				o.Rate = &r
			}
			if flags.Changed("daily-quota") {
				o.DailyQuota = &dailyQuota
			}
			if o.IsZero() {
				return &UsageError{errors.New("give at least one of --max-running, --rate, --daily-quota")}
			}
			if err := o.Validate(); err != nil {
				return &UsageError{errors.New(strings.ReplaceAll(err.Error(), "\n", "; "))}
			}
			ctx := cmd.Context()
			_, pool, err := a.connect(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			if err := a.limitsTarget(ctx, pool, args[0], args[1]); err != nil {
				return err
			}
			if _, err := limits.SetOverride(ctx, pool, args[0], args[1], o); err != nil {
				return err
			}
			return a.showLimits(ctx, pool, args[0], args[1], 0, false)
		},
	}
	cmd.Flags().IntVar(&maxRunning, "max-running", 0, "most jobs of the tenant running at once, across the service's queues (0: no cap)")
	cmd.Flags().StringVar(&rate, "rate", "", "jobs of the tenant started per second, minute or hour: 10/s, 100/m, 1000/h (0: no limit)")
	cmd.Flags().Int64Var(&dailyQuota, "daily-quota", 0, "most jobs of the tenant inserted per UTC day (0: no quota)")
	return cmd
}

func (a *app) limitsUnsetCommand() *cobra.Command {
	var maxRunning, rate, dailyQuota bool
	cmd := &cobra.Command{
		Use:   "unset SERVICE TENANT",
		Short: "Clear fields of a tenant's override (all without flags): its tier's defaults apply again",
		Long: `Clear the fields the flags name (every field without a flag) of TENANT's
override for SERVICE, so that its tier's defaults apply again; an override
left with nothing set is deleted. Exits 1 when the tenant has no override.`,
		Example: `  tierctl limits unset analyzer acme --daily-quota
  tierctl limits unset analyzer acme`,
		Args: usageArgs(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			var kinds []limits.Kind
			for _, k := range []struct {
				set  bool
				kind limits.Kind
			}{{maxRunning, limits.KindMaxRunning}, {rate, limits.KindRate}, {dailyQuota, limits.KindDailyQuota}} {
				if k.set {
					kinds = append(kinds, k.kind)
				}
			}
			ctx := cmd.Context()
			_, pool, err := a.connect(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			if err := a.limitsTarget(ctx, pool, args[0], args[1]); err != nil {
				return err
			}
			had, err := limits.UnsetOverride(ctx, pool, args[0], args[1], kinds...)
			if err != nil {
				return err
			}
			if !had {
				return fmt.Errorf("%w: tenant %s has no override of service %s's limits", errNoOverride, termSafe(args[1]), args[0])
			}
			return a.showLimits(ctx, pool, args[0], args[1], 0, false)
		},
	}
	cmd.Flags().BoolVar(&maxRunning, "max-running", false, "clear the cap")
	cmd.Flags().BoolVar(&rate, "rate", false, "clear the rate")
	cmd.Flags().BoolVar(&dailyQuota, "daily-quota", false, "clear the daily quota")
	return cmd
}
