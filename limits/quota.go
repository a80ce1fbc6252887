package limits

// Daily enqueue quotas: the count of a tenant's jobs per service and UTC
// day (table tenant_quota_usage, migration 00012), kept in the inserting
// transaction.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/tierq/tierq/internal/db"
	"github.com/tierq/tierq/tiers"
)

// ErrQuotaExceeded matches (errors.Is) every *QuotaError.
var ErrQuotaExceeded = errors.New("daily quota reached")

// QuotaError is a job refused because its tenant's jobs inserted today
// (UTC) for its service have reached the tenant's daily quota. Find it with
// errors.As; producer.Insert returns it wrapped, and POST /v1/jobs answers
// it with 429 and Retry-After.
type QuotaError struct {
	// Service and Tenant are whose quota it is.
	Service string
	Tenant  string
	// Tier is the tier the job was inserted for, whose default applied
	// unless the tenant has an override.
	Tier tiers.Tier
	// Quota is the daily quota reached (the tenant's override, else the
	// tier's default).
	Quota int64
	// Day is the UTC day counted, at its midnight (UTC).
	Day time.Time
	// ResetAt is the next midnight UTC: from then on the tenant's jobs count
	// on a new day.
	ResetAt time.Time
	// RetryAfter is how long until ResetAt from the clock of the refused
	// charge (the transaction's now()): never less than a second.
	RetryAfter time.Duration
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("%s: tenant %q has inserted its %d jobs of service %s for %s (UTC); the quota resets at %s",
		ErrQuotaExceeded, e.Tenant, e.Quota, e.Service, e.Day.Format(time.DateOnly), e.ResetAt.UTC().Format(time.RFC3339))
}

// Is makes errors.Is(err, ErrQuotaExceeded) true.
func (e *QuotaError) Is(target error) bool { return target == ErrQuotaExceeded }

// Job is what Charge needs of a job to charge it against its tenant's
// daily quota.
type Job struct {
	// Service is the name of the job's service.
	Service string
	// Tier is the tier the job is inserted for: its default quota applies
	// unless the tenant has an override. A tier that is not one of the four
	// reads as free.
	Tier tiers.Tier
	// Tenant is the job's tenant id. Charge counts nothing for the empty
	// tenant (a job without one has no per-tenant limit).
	Tenant string
	// At, when set, is the time whose UTC day is charged. Default: zero,
	// the transaction's now(), the database's clock: the same for every
	// replica. Tests set it to cross midnight without waiting.
	At time.Time
}

// Charged is what Charge counted, for Refund.
type Charged struct {
	// Service and Tenant are the job's.
	Service string
	Tenant  string
	// Quota is the daily quota that applies (the tenant's override, else the
	// tier's default); 0 when none does, and then nothing was counted.
	Quota int64
	// Used is the day's count with this charge; 0 when nothing was counted.
	Used int64
	// Day is the UTC day counted, at its midnight (UTC).
	Day time.Time
	// ResetAt is the next midnight UTC.
	ResetAt time.Time
}

// Counted reports whether the charge counted a job (a quota applied).
func (c Charged) Counted() bool { return c.Used > 0 }

// chargeSQL counts one job of tenant $3 of service $1 (tier $2) on the UTC
// day of $4 (NULL: the transaction's now()), when a daily quota applies
// (lim: the tenant's override, else the tier's default, else none), and
// only while the day's count is below it: one upsert, which waits for a
// concurrent charge's row lock and then re-checks the count it committed,
// so racing charges never pass the quota; a refused charge leaves the
// count as it is (used NULL). It also deletes the tenant's counts older
// than $5 days, skipping rows another charge holds, so that it never waits
// for them. Three primary-key probes; without a quota, two.
const chargeSQL = `
WITH day AS (
    SELECT (c.t AT TIME ZONE 'UTC')::date AS d, c.t FROM (SELECT coalesce($4::timestamptz, now()) AS t) AS c
), lim AS (
    SELECT coalesce(
        (SELECT o.daily_quota FROM tenant_limits AS o WHERE o.service = $1 AND o.tenant = $3),
        (SELECT l.daily_quota FROM tier_limits AS l WHERE l.service = $1 AND l.tier = $2),
        0) AS quota
), charged AS (
    INSERT INTO tenant_quota_usage AS u (service, tenant, day, used)
    SELECT $1, $3, day.d, 1 FROM day, lim WHERE lim.quota > 0
    ON CONFLICT (service, tenant, day) DO UPDATE SET used = u.used + 1
    WHERE u.used < (SELECT quota FROM lim)
    RETURNING u.used
), purged AS (
    DELETE FROM tenant_quota_usage AS p
    WHERE (p.service, p.tenant, p.day) IN (
        SELECT x.service, x.tenant, x.day FROM tenant_quota_usage AS x
        WHERE x.service = $1 AND x.tenant = $3 AND x.day < (SELECT d FROM day) - $5::int
          AND (SELECT quota FROM lim) > 0
        FOR UPDATE OF x SKIP LOCKED)
)
SELECT lim.quota, (SELECT used FROM charged), day.d::timestamp AT TIME ZONE 'UTC',
       (day.d + 1)::timestamp AT TIME ZONE 'UTC', extract(epoch FROM ((day.d + 1)::timestamp AT TIME ZONE 'UTC') - day.t)::float8
FROM day, lim`

// Charge counts job c of c.Tenant of c.Service against its daily quota,
// in q, which must be the transaction that inserts the job (producer.Insert
// calls it there): the count is committed with the job, or rolled back
// with it, and the count's row stays locked until then, so concurrent
// inserts of the tenant for the service wait for one another and never pass
// the quota. When the day's count has reached the quota, nothing is counted
// and the error is a *QuotaError. When no quota applies (the tenant's
// override and its tier's default both 0, or none recorded), or the tenant
// is empty, nothing is counted (Charged.Counted is false). A job the
// insert turns out not to add (a duplicate River's uniqueness found) is
// given back with Refund, in the same transaction.
//
// A transaction that charges several tenants can deadlock with another
// that charges the same tenants in another order: PostgreSQL aborts one of
// them (SQLSTATE 40P01). Charge in a fixed order (or one tenant per
// transaction, as the API does).
func Charge(ctx context.Context, q db.Querier, c Job) (Charged, error) {
	out := Charged{Service: c.Service, Tenant: c.Tenant}
	if c.Tenant == "" {
		return out, nil
	}
	if err := errors.Join(checkService(c.Service), checkTenant(c.Tenant)); err != nil {
		return out, err
	}
	var (
		at         *time.Time
		used       *int64
		retryAfter float64
	)
	if !c.At.IsZero() {
		at = &c.At
	}
	err := q.QueryRow(ctx, chargeSQL, c.Service, tierKey(c.Tier), c.Tenant, at, UsageRetentionDays).
		Scan(&out.Quota, &used, &out.Day, &out.ResetAt, &retryAfter)
	if err != nil {
		return out, fmt.Errorf("charge daily quota: %w", err)
	}
	out.Day, out.ResetAt = out.Day.UTC(), out.ResetAt.UTC()
	switch {
	case out.Quota == 0:
		return out, nil
	case used == nil:
		return out, &QuotaError{
			Service: c.Service, Tenant: c.Tenant, Tier: c.Tier, Quota: out.Quota, Day: out.Day, ResetAt: out.ResetAt,
			RetryAfter: max(time.Second, time.Duration(math.Ceil(retryAfter))*time.Second),
		}
	}
	out.Used = *used
	return out, nil
}

// refundSQL gives back one counted job.
const refundSQL = `
UPDATE tenant_quota_usage SET used = used - 1
WHERE service = $1 AND tenant = $2 AND day = $3 AND used > 0`

// Refund gives back what ch counted (nothing when it counted nothing), in
// the transaction that charged it: for an insert that did not add a job (a
// duplicate), so that dedup hits do not count. The count's row is still
// locked by the charge, so no other charge saw the job counted.
func Refund(ctx context.Context, q db.Querier, ch Charged) error {
	if !ch.Counted() {
		return nil
	}
	if _, err := q.Exec(ctx, refundSQL, ch.Service, ch.Tenant, ch.Day); err != nil {
		return fmt.Errorf("refund daily quota: %w", err)
	}
	return nil
}
