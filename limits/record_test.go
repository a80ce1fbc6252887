package limits_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/limits"
	"github.com/tierq/tierq/tiers"
)

// TestRecord: Record writes four tiers per service of the registry, zeros
// for what the Config leaves out, replaces them at the next start, leaves
// services it is not given alone, and writes nothing for an invalid
// Config.
func TestRecord(t *testing.T) {
	t.Parallel()
	db := testdb.NewCore(t)
	ctx := t.Context()

	cfg := limits.Config{Services: map[string]limits.Tiers{
		"analyzer": {
			tiers.Free:       {MaxRunning: 1, Rate: limits.Rate{Count: 10, Per: time.Second}, DailyQuota: 100},
			tiers.Enterprise: {Rate: limits.Rate{Count: 1000, Per: time.Hour}},
		},
		"ghost": {tiers.Free: {MaxRunning: 9}}, // not a service of the registry: not written
	}}
	require.NoError(t, limits.Record(ctx, db.Pool, cfg, []string{"analyzer", "specgen"}, "scheduler"))
	recorded, err := limits.ReadTiers(ctx, db.Pool)
	require.NoError(t, err)
	require.Len(t, recorded, 2)
	require.Equal(t, "analyzer", recorded[0].Service)
	require.Equal(t, "scheduler", recorded[0].RecordedBy)
	require.False(t, recorded[0].RecordedAt.IsZero())
	require.Equal(t, limits.Tiers{
		tiers.Free:       {MaxRunning: 1, Rate: limits.Rate{Count: 10, Per: time.Second}, DailyQuota: 100},
		tiers.Pro:        {},
		tiers.ProPlus:    {},
		tiers.Enterprise: {Rate: limits.Rate{Count: 1000, Per: time.Hour}},
	}, recorded[0].Tiers)
	require.Equal(t, "specgen", recorded[1].Service)
	require.Equal(t, limits.Tiers{tiers.Free: {}, tiers.Pro: {}, tiers.ProPlus: {}, tiers.Enterprise: {}}, recorded[1].Tiers)

	// The next start replaces the analyzer's; specgen, not given, stays.
	require.NoError(t, limits.Record(ctx, db.Pool, limits.Config{Services: map[string]limits.Tiers{
		"analyzer": {tiers.Pro: {DailyQuota: 5000}},
	}}, []string{"analyzer"}, "scheduler"))
	analyzer, ok, err := limits.ReadService(ctx, db.Pool, "analyzer")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, limits.Tiers{tiers.Free: {}, tiers.Pro: {DailyQuota: 5000}, tiers.ProPlus: {}, tiers.Enterprise: {}}, analyzer.Tiers)
	require.Equal(t, 8, db.Count(t, `SELECT count(*) FROM tier_limits`))
	_, ok, err = limits.ReadService(ctx, db.Pool, "ghost")
	require.NoError(t, err)
	require.False(t, ok)

	err = limits.Record(ctx, db.Pool, limits.Config{Services: map[string]limits.Tiers{"analyzer": {tiers.Pro: {DailyQuota: -1}}}}, []string{"analyzer"}, "scheduler")
	require.EqualError(t, err, "record tenant limits: service analyzer, tier pro: daily_quota is -1: must be between 0 and 1000000000 (0: no quota)")
	require.ErrorIs(t, err, limits.ErrInvalid)
	analyzer, _, err = limits.ReadService(ctx, db.Pool, "analyzer")
	require.NoError(t, err)
	require.Equal(t, int64(5000), analyzer.Tiers[tiers.Pro].DailyQuota, "nothing written")
}

// TestOverrides: set merges the fields given, unset clears some (the row
// stays while anything is set) or all, list pages by service and tenant,
// and bad input is refused before the database.
func TestOverrides(t *testing.T) {
	t.Parallel()
	db := testdb.NewCore(t)
	ctx := t.Context()
	two, zero := 2, 0
	quota := int64(500)

	o, err := limits.SetOverride(ctx, db.Pool, "analyzer", "acme", limits.Override{MaxRunning: &two})
	require.NoError(t, err)
	require.Equal(t, limits.Override{MaxRunning: &two}, o.Override)
	o, err = limits.SetOverride(ctx, db.Pool, "analyzer", "acme", limits.Override{Rate: &limits.Rate{Count: 100, Per: time.Minute}, DailyQuota: &quota})
	require.NoError(t, err)
	require.Equal(t, limits.Override{MaxRunning: &two, Rate: &limits.Rate{Count: 100, Per: time.Minute}, DailyQuota: &quota}, o.Override, "merged")
	o, err = limits.SetOverride(ctx, db.Pool, "analyzer", "acme", limits.Override{MaxRunning: &zero, Rate: &limits.Rate{}})
	require.NoError(t, err)
	require.Equal(t, limits.Override{MaxRunning: &zero, Rate: &limits.Rate{}, DailyQuota: &quota}, o.Override, "0: no limit, kept as set")
	require.True(t, o.UpdatedAt.After(o.CreatedAt) || o.UpdatedAt.Equal(o.CreatedAt))

	had, err := limits.UnsetOverride(ctx, db.Pool, "analyzer", "acme", limits.KindMaxRunning, limits.KindRate)
	require.NoError(t, err)
	require.True(t, had)
	got, ok, err := limits.GetOverride(ctx, db.Pool, "analyzer", "acme")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, limits.Override{DailyQuota: &quota}, got.Override)
	had, err = limits.UnsetOverride(ctx, db.Pool, "analyzer", "acme", limits.KindDailyQuota)
	require.NoError(t, err)
	require.True(t, had)
	require.Zero(t, db.Count(t, `SELECT count(*) FROM tenant_limits`), "nothing left set: the row goes")
	had, err = limits.UnsetOverride(ctx, db.Pool, "analyzer", "acme")
	require.NoError(t, err)
	require.False(t, had)

	for _, tenant := range []string{"t3", "t1", "t2", "a/b ü"} {
		_, err := limits.SetOverride(ctx, db.Pool, "analyzer", tenant, limits.Override{DailyQuota: &quota})
		require.NoError(t, err)
	}
	_, err = limits.SetOverride(ctx, db.Pool, "specgen", "t1", limits.Override{MaxRunning: &two})
	require.NoError(t, err)
	had, err = limits.UnsetOverride(ctx, db.Pool, "analyzer", "t2")
	require.NoError(t, err)
	require.True(t, had)
	keys := func(p limits.ListParams) []string {
		t.Helper()
		list, err := limits.ListOverrides(ctx, db.Pool, p)
		require.NoError(t, err)
		var out []string
		for _, o := range list {
			out = append(out, o.Service+"/"+o.Tenant)
		}
		return out
	}
	require.Equal(t, []string{"analyzer/a/b ü", "analyzer/t1", "analyzer/t3", "specgen/t1"}, keys(limits.ListParams{}))
	require.Equal(t, []string{"analyzer/a/b ü", "analyzer/t1"}, keys(limits.ListParams{Service: "analyzer", Limit: 2}))
	require.Equal(t, []string{"analyzer/t3"}, keys(limits.ListParams{Service: "analyzer", After: "t1"}))

	tests := []struct {
		name string
		err  error
		want string
	}{
		{"nothing to set", func() error {
			_, err := limits.SetOverride(ctx, db.Pool, "analyzer", "acme", limits.Override{})
			return err
		}(),
			"nothing to set: give max_running, rate or daily_quota"},
		{"out of range", func() error {
			n := int64(-5)
			_, err := limits.SetOverride(ctx, db.Pool, "analyzer", "acme", limits.Override{DailyQuota: &n})
			return err
		}(), "daily_quota is -5: must be between 0 and 1000000000 (0: no quota)"},
		{"NUL tenant", func() error {
			_, err := limits.SetOverride(ctx, db.Pool, "analyzer", "ac\x00me", limits.Override{MaxRunning: &two})
			return err
		}(), "tenant: invalid tenant id: control character U+0000 at byte 2"},
		{"empty tenant", func() error { _, err := limits.UnsetOverride(ctx, db.Pool, "analyzer", ""); return err }(),
			"tenant: empty (a job without a tenant has no per-tenant limit)"},
		{"bad service", func() error { _, _, err := limits.GetOverride(ctx, db.Pool, "an alyzer", "acme"); return err }(),
			`service "an alyzer" is not a service name (1 to 40 lower-case letters, digits and underscores, a letter first)`},
		{"bad kind", func() error { _, err := limits.UnsetOverride(ctx, db.Pool, "analyzer", "acme", "quota"); return err }(),
			`"quota" is not a kind of limit (max_running, rate or daily_quota)`},
		{"after without service", func() error { _, err := limits.ListOverrides(ctx, db.Pool, limits.ListParams{After: "t1"}); return err }(),
			"after needs a service: tenants are listed in order within one service"},
		{"after not UTF-8", func() error {
			_, err := limits.ListOverrides(ctx, db.Pool, limits.ListParams{Service: "analyzer", After: "\xff"})
			return err
		}(), "after: invalid tenant id: invalid UTF-8 at byte 0"},
		{"limit", func() error {
			_, err := limits.ListOverrides(ctx, db.Pool, limits.ListParams{Limit: 10_001})
			return err
		}(),
			"limit is 10001: must be between 1 and 10000"},
	}
	for _, tt := range tests {
		require.EqualError(t, tt.err, tt.want, tt.name)
		require.ErrorIs(t, tt.err, limits.ErrInvalid, tt.name)
	}
}

// TestLookup: a tenant's view is its tier's recorded defaults, its
// override over them, and its count of the day with what remains of the
// quota.
func TestLookup(t *testing.T) {
	t.Parallel()
	db := testdb.NewCore(t)
	ctx := t.Context()
	require.NoError(t, limits.Record(ctx, db.Pool, limits.Config{Services: map[string]limits.Tiers{
		"analyzer": {tiers.Free: {MaxRunning: 1, Rate: limits.Rate{Count: 10, Per: time.Second}, DailyQuota: 3}},
	}}, []string{"analyzer"}, "scheduler"))
	at := time.Date(2026, 12, 5, 18, 0, 0, 0, time.UTC)
	for range 2 {
		_, err := limits.Charge(ctx, db.Pool, limits.Job{Service: "analyzer", Tier: tiers.Free, Tenant: "u_1", At: at})
		require.NoError(t, err)
	}

	got, err := limits.Lookup(ctx, db.Pool, "analyzer", tiers.Free, "u_1", at)
	require.NoError(t, err)
	require.NotNil(t, got.TierRecordedAt)
	require.Nil(t, got.OverrideUpdatedAt)
	one := int64(1)
	free := limits.Values{MaxRunning: 1, Rate: limits.Rate{Count: 10, Per: time.Second}, DailyQuota: 3}
	got.TierRecordedAt = nil
	require.Equal(t, limits.Tenant{
		Service: "analyzer", Tenant: "u_1", Tier: tiers.Free, Limits: free, TierLimits: free,
		Quota: limits.Usage{Day: "2026-12-05", Used: 2, Remaining: &one, ResetAt: time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)},
	}, got)

	five := 5
	_, err = limits.SetOverride(ctx, db.Pool, "analyzer", "u_1", limits.Override{MaxRunning: &five, Rate: &limits.Rate{}})
	require.NoError(t, err)
	got, err = limits.Lookup(ctx, db.Pool, "analyzer", tiers.Free, "u_1", at)
	require.NoError(t, err)
	require.NotNil(t, got.OverrideUpdatedAt)
	require.Equal(t, limits.Values{MaxRunning: 5, DailyQuota: 3}, got.Limits)
	require.Equal(t, free, got.TierLimits)
	require.Equal(t, limits.Override{MaxRunning: &five, Rate: &limits.Rate{}}, got.Override)

	// The next day, another tier, a service nothing recorded.
	got, err = limits.Lookup(ctx, db.Pool, "analyzer", tiers.Pro, "u_1", at.Add(24*time.Hour))
	require.NoError(t, err)
	require.Equal(t, limits.Values{MaxRunning: 5}, got.Limits)
	require.Equal(t, limits.Usage{Day: "2026-12-06", ResetAt: time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)}, got.Quota)
	got, err = limits.Lookup(ctx, db.Pool, "nothing", tiers.Enterprise, "u_1", time.Time{})
	require.NoError(t, err)
	require.Nil(t, got.TierRecordedAt)
	require.True(t, got.Limits.IsZero())
}
