package limits

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tierq/tierq/internal/db"
	"github.com/tierq/tierq/tiers"
)

// Tenant is one tenant's limits in one service and its quota's use today:
// what tierctl limits show and GET /v1/limits/{service}/tenant show.
type Tenant struct {
	Service string `json:"service"`
	Tenant  string `json:"tenant"`
	// Tier is the tier whose defaults apply (free for a tier that is not
	// one of the four).
	Tier tiers.Tier `json:"tier"`
	// Limits are the limits that apply: the override's fields where it
	// sets them, else the tier's.
	Limits Values `json:"limits"`
	// TierLimits are the tier's defaults as the scheduler recorded them;
	// TierRecordedAt is when, nil when no scheduler recorded the service's
	// limits (it has none by tier).
	TierLimits     Values     `json:"tier_limits"`
	TierRecordedAt *time.Time `json:"tier_recorded_at"`
	// Override is the tenant's override (nil fields inherit);
	// OverrideUpdatedAt is when it last changed, nil when it has none.
	Override          Override   `json:"override"`
	OverrideUpdatedAt *time.Time `json:"override_updated_at"`
	// Quota is today's use of the daily quota.
	Quota Usage `json:"quota"`
}

// Usage is a tenant's count of jobs inserted on one UTC day.
type Usage struct {
	// Day is the UTC day, YYYY-MM-DD.
	Day string `json:"day"`
	// Used is how many jobs were counted on it. Jobs are counted only while
	// a quota applies: a tenant without one shows 0, or what was counted
	// while it had one.
	Used int64 `json:"used"`
	// Remaining is how many more jobs the quota lets in today (never
	// negative); nil when no quota applies.
	Remaining *int64 `json:"remaining"`
	// ResetAt is the next midnight UTC, when a new day's count starts.
	ResetAt time.Time `json:"reset_at"`
}

// lookupSQL reads a tenant's tier defaults, override and count for the UTC
// day of $4 (NULL: now()): three primary-key probes.
const lookupSQL = `
WITH day AS (SELECT (coalesce($4::timestamptz, now()) AT TIME ZONE 'UTC')::date AS d)
SELECT l.max_running, l.rate_count, extract(epoch FROM l.rate_interval)::float8, l.daily_quota, l.recorded_at,
       o.max_running, o.rate_count, extract(epoch FROM o.rate_interval)::float8, o.daily_quota, o.updated_at,
       coalesce(u.used, 0), to_char(day.d, 'YYYY-MM-DD'), (day.d + 1)::timestamp AT TIME ZONE 'UTC'
FROM day
LEFT JOIN tier_limits AS l ON l.service = $1 AND l.tier = $2
LEFT JOIN tenant_limits AS o ON o.service = $1 AND o.tenant = $3
LEFT JOIN tenant_quota_usage AS u ON u.service = $1 AND u.tenant = $3 AND u.day = day.d`

// Lookup reads tenant's limits in service for tier (its tier defaults,
// its override and the limits that apply) and its quota's use on the UTC
// day of at (zero: the database's now()). Bad input (a service name or
// tenant id that cannot be a key) is an error matching ErrInvalid. The
// service is not checked against any registry: one nothing recorded has no
// limits.
func Lookup(ctx context.Context, q db.Querier, service string, tier tiers.Tier, tenant string, at time.Time) (Tenant, error) {
	if err := errors.Join(checkService(service), checkTenant(tenant)); err != nil {
		return Tenant{}, err
	}
	if !tier.Valid() {
		tier = tiers.Free
	}
	out := Tenant{Service: service, Tenant: tenant, Tier: tier}
	var (
		atParam             *time.Time
		tierMax, tierRate   *int
		tierRateSeconds     *float64
		tierQuota           *int64
		overrideRate        *int
		overrideRateSeconds *float64
	)
	if !at.IsZero() {
		atParam = &at
	}
	err := q.QueryRow(ctx, lookupSQL, service, tierKey(tier), tenant, atParam).Scan(
		&tierMax, &tierRate, &tierRateSeconds, &tierQuota, &out.TierRecordedAt,
		&out.Override.MaxRunning, &overrideRate, &overrideRateSeconds, &out.Override.DailyQuota, &out.OverrideUpdatedAt,
		&out.Quota.Used, &out.Quota.Day, &out.Quota.ResetAt)
	if err != nil {
		return Tenant{}, fmt.Errorf("read tenant limits: %w", err)
	}
	if tierMax != nil {
		out.TierLimits.MaxRunning = *tierMax
	}
	if tierQuota != nil {
		out.TierLimits.DailyQuota = *tierQuota
	}
	out.TierLimits.Rate = rateOf(tierRate, tierRateSeconds)
	if overrideRate != nil {
		r := rateOf(overrideRate, overrideRateSeconds)
		out.Override.Rate = &r
	}
	out.Limits = out.Override.Apply(out.TierLimits)
	out.Quota.ResetAt = out.Quota.ResetAt.UTC()
	if out.Limits.DailyQuota > 0 {
		remaining := max(0, out.Limits.DailyQuota-out.Quota.Used)
		out.Quota.Remaining = &remaining
	}
	return out, nil
}
