package limits

// Per-tenant overrides (table tenant_limits, migration 00012): an
// operator's, set with tierctl limits or the API.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tierq/tierq/internal/db"
)

// Override is a tenant's override of its tier's limits in one service. A
// nil field inherits the tier's default; a set one beats it, whatever the
// tenant's tier, 0 (a zero Rate) being no limit for this tenant. In JSON
// a nil field is null.
type Override struct {
	MaxRunning *int   `json:"max_running"`
	Rate       *Rate  `json:"rate"`
	DailyQuota *int64 `json:"daily_quota"`
}

// IsZero reports whether o overrides nothing.
func (o Override) IsZero() bool { return o.MaxRunning == nil && o.Rate == nil && o.DailyQuota == nil }

// Apply is tier's limits with o's set fields instead.
func (o Override) Apply(tier Values) Values {
	if o.MaxRunning != nil {
		tier.MaxRunning = *o.MaxRunning
	}
	if o.Rate != nil {
		tier.Rate = *o.Rate
	}
	if o.DailyQuota != nil {
		tier.DailyQuota = *o.DailyQuota
	}
	return tier
}

// Validate checks the ranges of o's set fields, as Values.Validate does,
// every problem at once. It changes nothing.
func (o Override) Validate() error {
	var errs []error
	if o.MaxRunning != nil && (*o.MaxRunning < 0 || *o.MaxRunning > MaxMaxRunning) {
		errs = append(errs, invalid("max_running is %d: must be between 0 and %d (0: no cap)", *o.MaxRunning, MaxMaxRunning))
	}
	if o.Rate != nil {
		if err := o.Rate.validate("rate"); err != nil {
			errs = append(errs, err)
		}
	}
	if o.DailyQuota != nil && (*o.DailyQuota < 0 || *o.DailyQuota > MaxDailyQuota) {
		errs = append(errs, invalid("daily_quota is %d: must be between 0 and %d (0: no quota)", *o.DailyQuota, MaxDailyQuota))
	}
	return errors.Join(errs...)
}

// TenantOverride is one tenant's override as it is stored.
type TenantOverride struct {
	Service string `json:"service"`
	Tenant  string `json:"tenant"`
	Override
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Kind is one kind of limit, for UnsetOverride.
type Kind string

// The three kinds of limit.
const (
	KindMaxRunning Kind = "max_running"
	KindRate       Kind = "rate"
	KindDailyQuota Kind = "daily_quota"
)

// overrideColumns are a tenant_limits row's columns as scanOverride reads
// them.
const overrideColumns = `t.service, t.tenant, t.max_running, t.rate_count, extract(epoch FROM t.rate_interval)::float8,
       t.daily_quota, t.created_at, t.updated_at`

func scanOverride(row pgx.Row) (TenantOverride, error) {
	var (
		o           TenantOverride
		rateCount   *int
		rateSeconds *float64
	)
	if err := row.Scan(&o.Service, &o.Tenant, &o.MaxRunning, &rateCount, &rateSeconds, &o.DailyQuota, &o.CreatedAt, &o.UpdatedAt); err != nil {
		return TenantOverride{}, err
	}
	if rateCount != nil {
		r := rateOf(rateCount, rateSeconds)
		o.Rate = &r
	}
	return o, nil
}

// setOverrideSQL sets the given fields ($3 to $6; NULL: not given) of a
// tenant's override, keeping the others. A given field is never NULL (0
// is no limit), so coalesce keeps exactly the fields not given. By primary
// key.
const setOverrideSQL = `
INSERT INTO tenant_limits AS t (service, tenant, max_running, rate_count, rate_interval, daily_quota)
VALUES ($1, $2, $3, $4, CASE WHEN $4 > 0 THEN make_interval(secs => $5) END, $6)
ON CONFLICT (service, tenant) DO UPDATE
SET max_running = coalesce(excluded.max_running, t.max_running),
    rate_count = coalesce(excluded.rate_count, t.rate_count),
    rate_interval = CASE WHEN excluded.rate_count IS NOT NULL THEN excluded.rate_interval ELSE t.rate_interval END,
    daily_quota = coalesce(excluded.daily_quota, t.daily_quota),
    updated_at = now()
RETURNING ` + overrideColumns

// SetOverride sets the fields o sets in tenant's override of service's
// limits, keeping the fields it leaves nil as they are (set or inherited),
// and returns the override as it is now. o must set at least one field,
// within Values' bounds; service must be a service name and tenant a
// tenant id (1 to 200 bytes of UTF-8, no control character): else an error
// matching ErrInvalid, before anything is written. The service is not
// checked against any registry: the caller (the API, tierctl) does that.
func SetOverride(ctx context.Context, q db.Querier, service, tenant string, o Override) (TenantOverride, error) {
	if err := errors.Join(checkService(service), checkTenant(tenant), o.Validate()); err != nil {
		return TenantOverride{}, err
	}
	if o.IsZero() {
		return TenantOverride{}, invalid("nothing to set: give max_running, rate or daily_quota")
	}
	var rateCount *int
	var rateSeconds float64
	if o.Rate != nil {
		rateCount, rateSeconds = &o.Rate.Count, o.Rate.Per.Seconds()
	}
	out, err := scanOverride(q.QueryRow(ctx, setOverrideSQL, service, tenant, o.MaxRunning, rateCount, rateSeconds, o.DailyQuota))
	if err != nil {
		return TenantOverride{}, fmt.Errorf("set tenant limits: %w", err)
	}
	return out, nil
}

// unsetOverrideSQL clears the fields $3, $4, $5 (max_running, rate,
// daily_quota) of a tenant's override: the row is deleted when nothing
// would be left set (del), else updated. One statement: the update reads
// del's outcome, so it runs only when del deleted nothing.
const unsetOverrideSQL = `
WITH del AS (
    DELETE FROM tenant_limits AS t
    WHERE t.service = $1 AND t.tenant = $2
      AND (t.max_running IS NULL OR $3) AND (t.rate_count IS NULL OR $4) AND (t.daily_quota IS NULL OR $5)
    RETURNING 1
), upd AS (
    UPDATE tenant_limits AS t
    SET max_running = CASE WHEN $3 THEN NULL ELSE t.max_running END,
        rate_count = CASE WHEN $4 THEN NULL ELSE t.rate_count END,
        rate_interval = CASE WHEN $4 THEN NULL ELSE t.rate_interval END,
        daily_quota = CASE WHEN $5 THEN NULL ELSE t.daily_quota END,
        updated_at = now()
    WHERE t.service = $1 AND t.tenant = $2 AND NOT EXISTS (SELECT 1 FROM del)
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM del) OR EXISTS (SELECT 1 FROM upd)`

// UnsetOverride clears kinds of tenant's override of service's limits
// (every kind when none is given), so that they inherit the tier's
// defaults again; an override left with nothing set is deleted. It reports
// whether the tenant had an override. Bad input is an error matching
// ErrInvalid, as for SetOverride.
func UnsetOverride(ctx context.Context, q db.Querier, service, tenant string, kinds ...Kind) (bool, error) {
	if err := errors.Join(checkService(service), checkTenant(tenant)); err != nil {
		return false, err
	}
	clear := map[Kind]bool{}
	for _, k := range kinds {
		switch k {
		case KindMaxRunning, KindRate, KindDailyQuota:
			clear[k] = true
		default:
			return false, invalid("%.40q is not a kind of limit (max_running, rate or daily_quota)", string(k))
		}
	}
	all := len(kinds) == 0
	var had bool
	err := q.QueryRow(ctx, unsetOverrideSQL, service, tenant,
		all || clear[KindMaxRunning], all || clear[KindRate], all || clear[KindDailyQuota]).Scan(&had)
	if err != nil {
		return false, fmt.Errorf("unset tenant limits: %w", err)
	}
	return had, nil
}

// GetOverride reads tenant's override of service's limits; ok is false when
// it has none.
func GetOverride(ctx context.Context, q db.Querier, service, tenant string) (o TenantOverride, ok bool, err error) {
	if err := errors.Join(checkService(service), checkTenant(tenant)); err != nil {
		return TenantOverride{}, false, err
	}
	o, err = scanOverride(q.QueryRow(ctx, `SELECT `+overrideColumns+` FROM tenant_limits AS t WHERE t.service = $1 AND t.tenant = $2`, service, tenant))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return TenantOverride{}, false, nil
	case err != nil:
		return TenantOverride{}, false, fmt.Errorf("read tenant limits: %w", err)
	}
	return o, true, nil
}

// MaxListLimit is the most overrides one ListOverrides returns.
const MaxListLimit = 10_000

// ListParams select the overrides ListOverrides returns.
type ListParams struct {
	// Service, when set, lists only this service's overrides; After is then
	// allowed. Default "": every service's.
	Service string
	// After lists the tenants after this one (by byte order), for paging;
	// only with Service. Default "": from the first.
	After string
	// Limit is the most overrides returned, 1 to MaxListLimit. Default 100.
	Limit int
}

// listOverridesSQL lists overrides in key order, through the primary key.
const listOverridesSQL = `
SELECT ` + overrideColumns + ` FROM tenant_limits AS t
WHERE ($1 = '' OR t.service = $1) AND t.tenant > $2
ORDER BY t.service, t.tenant LIMIT $3`

// ListOverrides lists the overrides p selects, by service and tenant.
func ListOverrides(ctx context.Context, q db.Querier, p ListParams) ([]TenantOverride, error) {
	if p.Limit == 0 {
		p.Limit = 100
	}
	var errs []error
	if p.Service != "" {
		errs = append(errs, checkService(p.Service))
	}
	if p.After != "" && p.Service == "" {
		errs = append(errs, invalid("after needs a service: tenants are listed in order within one service"))
	}
	if p.After != "" {
		errs = append(errs, checkTenantField("after", p.After))
	}
	if p.Limit < 1 || p.Limit > MaxListLimit {
		errs = append(errs, invalid("limit is %d: must be between 1 and %d", p.Limit, MaxListLimit))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	rows, err := q.Query(ctx, listOverridesSQL, p.Service, p.After, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("list tenant limits: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (TenantOverride, error) { return scanOverride(row) })
	if err != nil {
		return nil, fmt.Errorf("list tenant limits: %w", err)
	}
	return out, nil
}
