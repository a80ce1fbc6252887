package limits

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tierq/tierq/internal/db"
	"github.com/tierq/tierq/internal/jobmetasql"
	"github.com/tierq/tierq/internal/riverschema"
	"github.com/tierq/tierq/jobmeta"
	"github.com/tierq/tierq/tiers"
)

// Tenant is one tenant's limits in one service, its quota's use today and
// its jobs now: what tierctl limits show and GET /v1/limits/{service}/tenant
// show.
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
	// Jobs are the tenant's jobs in the service's queues right now.
	Jobs Jobs `json:"jobs"`
}

// Jobs is a tenant's current use of its concurrency cap: its jobs in the
// service's three queues (as tierq_services records them) that count
// against the cap, and those waiting held. Read when asked (Lookup), not
// kept: each count is as of one statement.
type Jobs struct {
	// Running and Available are the tenant's running and available jobs
	// counted against its cap (marked jobmeta.Capped by migration 00013's
	// trigger): their sum is what the cap bounds. Jobs of a tenant under
	// no cap are not counted (0), nor those that became available before
	// its cap was set. A job River has finished counts as running until
	// River writes its end (up to about 250 ms), and a killed worker's
	// until River rescues it.
	Running   int `json:"running"`
	Available int `json:"available"`
	// Held is the tenant's jobs held back (River state pending, marked
	// jobmeta.HeldAt), by fair share's window, its cap or its rate;
	// HeldByCap is those of them held by its cap (jobmeta.CapHeldAt),
	// HeldByRate those held by its rate (jobmeta.RateHeldAt).
	Held       int `json:"held"`
	HeldByCap  int `json:"held_by_cap"`
	HeldByRate int `json:"held_by_rate"`
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
// day of $4 (NULL: now()), three primary-key probes, and its jobs in the
// service's queues (Jobs), through two partial indexes of river_job keyed
// by tenant and queue: river_job_tierq_capped_idx (migration 00013) for
// the running and available jobs counted against caps, and
// river_job_tierq_held_idx (migration 00009) for the held ones. Both are
// built on fair share's tenant key (jobmetasql.TenantKeySQL), which for
// every tenant id Lookup accepts (1 to 200 bytes) is the id itself; their
// predicates are written out as literals so that the planner sees that the
// indexes serve them. Each count reads the tenant's rows only
// (TestLookupJobsPlan).
var lookupSQL = `
WITH day AS (SELECT (coalesce($4::timestamptz, now()) AT TIME ZONE 'UTC')::date AS d),
svc AS (SELECT s.queues FROM tierq_services AS s WHERE s.name = $1)
SELECT l.max_running, l.rate_count, extract(epoch FROM l.rate_interval)::float8, l.daily_quota, l.recorded_at,
       o.max_running, o.rate_count, extract(epoch FROM o.rate_interval)::float8, o.daily_quota, o.updated_at,
       coalesce(u.used, 0), to_char(day.d, 'YYYY-MM-DD'), (day.d + 1)::timestamp AT TIME ZONE 'UTC',
       c.running, c.available, h.held, h.held_by_cap, h.held_by_rate
FROM day
LEFT JOIN tier_limits AS l ON l.service = $1 AND l.tier = $2
LEFT JOIN tenant_limits AS o ON o.service = $1 AND o.tenant = $3
LEFT JOIN tenant_quota_usage AS u ON u.service = $1 AND u.tenant = $3 AND u.day = day.d
CROSS JOIN (
    SELECT (count(*) FILTER (WHERE j.` + riverschema.JobState + ` = '` + riverschema.StateRunning + `'))::int AS running,
           (count(*) FILTER (WHERE j.` + riverschema.JobState + ` = '` + riverschema.StateAvailable + `'))::int AS available
    FROM ` + riverschema.JobTable + ` AS j
    WHERE j.` + riverschema.JobState + ` IN ('` + riverschema.StateAvailable + `', '` + riverschema.StateRunning + `')
      AND j.` + riverschema.JobMetadata + ` ? '` + jobmeta.Capped + `'
      AND ` + jobmetasql.TenantKeySQL("j") + ` = $3::text
      AND j.` + riverschema.JobQueue + ` = ANY ((SELECT queues FROM svc)::text[])
) AS c
CROSS JOIN (
    SELECT count(*)::int AS held,
           (count(*) FILTER (WHERE j.` + riverschema.JobMetadata + ` ? '` + jobmeta.CapHeldAt + `'))::int AS held_by_cap,
           (count(*) FILTER (WHERE j.` + riverschema.JobMetadata + ` ? '` + jobmeta.RateHeldAt + `'))::int AS held_by_rate
    FROM ` + riverschema.JobTable + ` AS j
    WHERE ` + jobmetasql.HeldSQL("j") + `
      AND ` + jobmetasql.TenantKeySQL("j") + ` = $3::text
      AND j.` + riverschema.JobQueue + ` = ANY ((SELECT queues FROM svc)::text[])
) AS h`

// Lookup reads tenant's limits in service for tier (its tier defaults,
// its override and the limits that apply), its quota's use on the UTC
// day of at (zero: the database's now()) and its jobs in the service's
// queues now (Jobs; none when no process recorded the service). Bad input (a service name or
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
		&out.Quota.Used, &out.Quota.Day, &out.Quota.ResetAt,
		&out.Jobs.Running, &out.Jobs.Available, &out.Jobs.Held, &out.Jobs.HeldByCap, &out.Jobs.HeldByRate)
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
