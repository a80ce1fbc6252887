package limits

// The tiers' defaults in the database (table tier_limits, migration
// 00012): what the scheduler's environment says, for every replica.

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/tierq/tierq/internal/db"
	"github.com/tierq/tierq/tiers"
)

// UsageRetentionDays is how many days of quota counts (table
// tenant_quota_usage) are kept before today: a month of daily counts to
// compare with what was billed. Older rows are deleted by the tenant's next
// charge under a quota (Charge) and by Record, at every scheduler start.
const UsageRetentionDays = 31

// recordRow is one row of tier_limits as Record sends it.
type recordRow struct {
	Service     string  `json:"service"`
	Tier        string  `json:"tier"`
	MaxRunning  int     `json:"max_running"`
	RateCount   int     `json:"rate_count"`
	RateSeconds float64 `json:"rate_seconds"`
	DailyQuota  int64   `json:"daily_quota"`
}

// recordSQL replaces the rows of the services of $1 (a JSON array of
// recordRow, four per service), in key order so that schedulers starting
// at once lock the rows in the same order and never deadlock. By primary
// key: a handful of rows.
const recordSQL = `
INSERT INTO tier_limits AS l (service, tier, max_running, rate_count, rate_interval, daily_quota, recorded_by)
SELECT r.service, r.tier, r.max_running, r.rate_count,
       CASE WHEN r.rate_count > 0 THEN make_interval(secs => r.rate_seconds) END, r.daily_quota, $2
FROM jsonb_to_recordset($1::jsonb) AS r(service text, tier text, max_running int, rate_count int, rate_seconds float8, daily_quota bigint)
ORDER BY r.service, r.tier
ON CONFLICT (service, tier) DO UPDATE
SET max_running = excluded.max_running, rate_count = excluded.rate_count, rate_interval = excluded.rate_interval,
    daily_quota = excluded.daily_quota, recorded_by = excluded.recorded_by, recorded_at = now()`

// purgeUsageSQL deletes every quota count older than UsageRetentionDays
// before today (UTC), skipping rows a charge holds.
const purgeUsageSQL = `
DELETE FROM tenant_quota_usage
WHERE (service, tenant, day) IN (
    SELECT service, tenant, day FROM tenant_quota_usage
    WHERE day < (now() AT TIME ZONE 'UTC')::date - $1::int
    FOR UPDATE SKIP LOCKED)`

// Record writes cfg's limits by tier of each of services (the names of
// the scheduler's registry's services) to table tier_limits, by recordedBy
// (the process: "scheduler"): four rows per service, one per tier, each
// replacing what was recorded before; a service or tier cfg does not name
// gets zeros, no limits. Services cfg names that are not among services are
// not written. It then deletes the quota counts older than
// UsageRetentionDays. scheduler.Run calls it when it starts, so the table
// says what the scheduler's environment says; with two replicas whose
// environments differ, the one that started last wins. Every other process
// reads the table (ReadTiers, Lookup).
//
// cfg is validated first (Config.Validate); an invalid one writes nothing.
func Record(ctx context.Context, q db.Querier, cfg Config, services []string, recordedBy string) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("record tenant limits: %w", err)
	}
	rows := make([]recordRow, 0, 4*len(services))
	for _, name := range services {
		if err := checkService(name); err != nil {
			return fmt.Errorf("record tenant limits: %w", err)
		}
		for _, tier := range tiers.All() {
			v := cfg.Services[name][tier]
			rows = append(rows, recordRow{
				Service: name, Tier: tier.String(), MaxRunning: v.MaxRunning,
				RateCount: v.Rate.Count, RateSeconds: v.Rate.Per.Seconds(), DailyQuota: v.DailyQuota,
			})
		}
	}
	if len(rows) > 0 {
		doc, err := json.Marshal(rows)
		if err != nil {
			return fmt.Errorf("record tenant limits: %w", err)
		}
		if _, err := q.Exec(ctx, recordSQL, doc, recordedBy); err != nil {
			return fmt.Errorf("record tenant limits: %w", err)
		}
	}
	if _, err := q.Exec(ctx, purgeUsageSQL, UsageRetentionDays); err != nil {
		return fmt.Errorf("purge quota counts: %w", err)
	}
	return nil
}

// Recorded is one service's limits by tier as a scheduler recorded them.
type Recorded struct {
	// Service is the service's name.
	Service string `json:"service"`
	// Tiers are its four tiers' limits.
	Tiers Tiers `json:"tiers"`
	// RecordedBy is the process that recorded them ("scheduler").
	RecordedBy string `json:"recorded_by"`
	// RecordedAt is when it did (the latest of the four rows).
	RecordedAt time.Time `json:"recorded_at"`
}

// readTiersSQL reads the recorded rows of every service ($1 NULL) or of
// one: by primary key. A rate is read as its count and its interval's
// seconds.
const readTiersSQL = `
SELECT l.service, l.tier, l.max_running, l.rate_count, extract(epoch FROM l.rate_interval)::float8, l.daily_quota,
       l.recorded_by, l.recorded_at
FROM tier_limits AS l WHERE $1::text IS NULL OR l.service = $1 ORDER BY l.service, l.tier`

// ReadTiers reads every service's recorded limits by tier, by service name.
// A service no scheduler recorded is not listed: it has no limits.
func ReadTiers(ctx context.Context, q db.Querier) ([]Recorded, error) {
	return readTiers(ctx, q, nil)
}

// ReadService reads one service's recorded limits by tier; ok is false when
// no scheduler recorded the service (it has no limits).
func ReadService(ctx context.Context, q db.Querier, service string) (rec Recorded, ok bool, err error) {
	if err := checkService(service); err != nil {
		return Recorded{}, false, err
	}
	all, err := readTiers(ctx, q, &service)
	if err != nil || len(all) == 0 {
		return Recorded{Service: service, Tiers: Tiers{}}, false, err
	}
	return all[0], true, nil
}

func readTiers(ctx context.Context, q db.Querier, service *string) ([]Recorded, error) {
	rows, err := q.Query(ctx, readTiersSQL, service)
	if err != nil {
		return nil, fmt.Errorf("read tier limits: %w", err)
	}
	defer rows.Close()
	var out []Recorded
	for rows.Next() {
		var (
			name, tierName, by string
			v                  Values
			rateCount          *int
			rateSeconds        *float64
			at                 time.Time
		)
		if err := rows.Scan(&name, &tierName, &v.MaxRunning, &rateCount, &rateSeconds, &v.DailyQuota, &by, &at); err != nil {
			return nil, fmt.Errorf("read tier limits: %w", err)
		}
		tier, err := tiers.Parse(tierName)
		if err != nil {
			return nil, fmt.Errorf("read tier limits: %w", err)
		}
		v.Rate = rateOf(rateCount, rateSeconds)
		if len(out) == 0 || out[len(out)-1].Service != name {
			out = append(out, Recorded{Service: name, Tiers: Tiers{}})
		}
		r := &out[len(out)-1]
		r.Tiers[tier] = v
		if at.After(r.RecordedAt) {
			r.RecordedAt, r.RecordedBy = at, by
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read tier limits: %w", err)
	}
	return out, nil
}

// rateOf is the Rate of a row's rate columns (NULL or 0 count: none).
func rateOf(count *int, seconds *float64) Rate {
	if count == nil || *count == 0 || seconds == nil {
		return Rate{}
	}
	return Rate{Count: *count, Per: time.Duration(*seconds * float64(time.Second))}
}
