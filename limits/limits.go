package limits

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tierq/tierq/jobmeta"
	"github.com/tierq/tierq/tiers"
)

// Bounds of the limits (the checks of migration 00012's tables).
const (
	// MaxMaxRunning is the largest MaxRunning.
	MaxMaxRunning = 1_000_000
	// MaxRateCount is the largest Rate.Count.
	MaxRateCount = 1_000_000
	// MaxDailyQuota is the largest DailyQuota.
	MaxDailyQuota = 1_000_000_000
)

// ErrInvalid matches (errors.Is) every error of this package about its
// input: a limit out of range, a rate that does not parse, a service name or
// tenant id that cannot be a key. An API answers it with a 400.
var ErrInvalid = errors.New("invalid limit")

// InvalidError is what is wrong with an input; it matches ErrInvalid.
type InvalidError struct {
	// Reason says what is wrong, for a person: "daily_quota is -1: must be
	// between 0 and 1000000000 (0: no quota)".
	Reason string
}

func (e *InvalidError) Error() string { return e.Reason }

// Is makes errors.Is(err, ErrInvalid) true.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

func invalid(format string, args ...any) error {
	return &InvalidError{Reason: fmt.Sprintf(format, args...)}
}

// Rate is a rate limit: at most Count jobs started per Per, a token bucket
// whose burst is Count. The zero Rate (Count 0) is no limit.
type Rate struct {
	// Count is how many jobs, 0 to MaxRateCount; 0: no limit.
	Count int
	// Per is the interval: time.Second, time.Minute or time.Hour (ParseRate's
	// s, m and h). Ignored when Count is 0.
	Per time.Duration
}

// rateUnits are the intervals ParseRate reads, by unit.
var rateUnits = map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour}

// rateSyntax says what ParseRate reads.
const rateSyntax = "jobs per second, minute or hour, such as 10/s, 100/m or 1000/h; 0 for no limit"

// ParseRate reads a rate as the variables <NAME>_<TIER>_TENANT_RATE, tierctl
// and the API write it: COUNT/UNIT, UNIT s, m or h ("10/s", "100/m",
// "1000/h"), COUNT 1 to MaxRateCount; "0" (or "0/s", any unit) is no limit.
// Nothing else is accepted: no spaces, no sign, no other unit. The error
// matches ErrInvalid and says what a rate is, without repeating s.
func ParseRate(s string) (Rate, error) {
	if s == "0" {
		return Rate{}, nil
	}
	count, unit, ok := strings.Cut(s, "/")
	per, known := rateUnits[unit]
	if !ok || !known || count == "" || strings.TrimLeft(count, "0123456789") != "" {
		return Rate{}, invalid("not a rate (%s)", rateSyntax)
	}
	n, err := strconv.Atoi(count)
	if err != nil || n > MaxRateCount {
		return Rate{}, invalid("more than %d jobs per interval", MaxRateCount)
	}
	if n == 0 {
		return Rate{}, nil
	}
	return Rate{Count: n, Per: per}, nil
}

// IsZero reports whether r is no limit.
func (r Rate) IsZero() bool { return r.Count == 0 }

// String is r as ParseRate reads it ("10/s"), "0" for no limit; an interval
// other than a second, a minute or an hour (a row written by hand) is
// written as a duration ("5/30s"), which ParseRate does not read.
func (r Rate) String() string {
	if r.IsZero() {
		return "0"
	}
	for unit, per := range rateUnits {
		if r.Per == per {
			return strconv.Itoa(r.Count) + "/" + unit
		}
	}
	return strconv.Itoa(r.Count) + "/" + r.Per.String()
}

// MarshalText is String: a rate is a JSON string ("10/s", "0").
func (r Rate) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText is ParseRate.
func (r *Rate) UnmarshalText(text []byte) error {
	parsed, err := ParseRate(string(text))
	if err != nil {
		return err
	}
	*r = parsed
	return nil
}

func (r Rate) validate(field string) error {
	switch {
	case r.Count < 0 || r.Count > MaxRateCount:
		return invalid("%s count is %d: must be between 0 and %d (0: no limit)", field, r.Count, MaxRateCount)
	case r.Count > 0 && !slices.Contains(slices.Collect(maps.Values(rateUnits)), r.Per):
		return invalid("%s interval is %s: must be a second, a minute or an hour", field, r.Per)
	}
	return nil
}

// Values are the three limits of a tier of a service (its defaults) or of
// one tenant. Each zero value is no limit.
type Values struct {
	// MaxRunning is the most jobs of one tenant of the service running at
	// once, across every replica and the service's three queues, 0 to
	// MaxMaxRunning. 0: no cap. Enforced by the database (migration
	// 00013): the tenant's jobs beyond it wait held.
	MaxRunning int `json:"max_running"`
	// Rate is how many jobs of one tenant of the service start per second,
	// minute or hour. Zero: no limit. Enforced by migration 00015's trigger
	// and fair share's pass (package fairshare).
	Rate Rate `json:"rate"`
	// DailyQuota is the most jobs of one tenant of the service that
	// producer.Insert inserts per UTC day, 0 to MaxDailyQuota. 0: no quota.
	DailyQuota int64 `json:"daily_quota"`
}

// IsZero reports whether v limits nothing.
func (v Values) IsZero() bool { return v.MaxRunning == 0 && v.Rate.IsZero() && v.DailyQuota == 0 }

// Validate checks v's ranges and reports every problem at once
// (errors.Join), each matching ErrInvalid. It changes nothing.
func (v Values) Validate() error {
	var errs []error
	if v.MaxRunning < 0 || v.MaxRunning > MaxMaxRunning {
		errs = append(errs, invalid("max_running is %d: must be between 0 and %d (0: no cap)", v.MaxRunning, MaxMaxRunning))
	}
	if err := v.Rate.validate("rate"); err != nil {
		errs = append(errs, err)
	}
	if v.DailyQuota < 0 || v.DailyQuota > MaxDailyQuota {
		errs = append(errs, invalid("daily_quota is %d: must be between 0 and %d (0: no quota)", v.DailyQuota, MaxDailyQuota))
	}
	return errors.Join(errs...)
}

// String is v as "max_running=1 rate=10/s daily_quota=100", the limits set
// only; "none" when v limits nothing.
func (v Values) String() string {
	var parts []string
	if v.MaxRunning != 0 {
		parts = append(parts, "max_running="+strconv.Itoa(v.MaxRunning))
	}
	if !v.Rate.IsZero() {
		parts = append(parts, "rate="+v.Rate.String())
	}
	if v.DailyQuota != 0 {
		parts = append(parts, "daily_quota="+strconv.FormatInt(v.DailyQuota, 10))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

// Tiers are one service's limits by tier. A tier missing has no limits.
type Tiers map[tiers.Tier]Values

// Config is the configuration of the tenant limits of an application's
// services, as its scheduler records them (Record; scheduler.Config.Limits).
// Build it in Go, or from the environment with package config
// (config.LoadLimits). Its zero value records no limits. Every field's
// default is its zero value, so there is no WithDefaults; Validate checks
// it without changing it.
type Config struct {
	// Services are the limits by tier of each service, by the service's
	// name (service.Config.Name): the tier defaults every tenant of the
	// service gets unless it has an override. A service of the scheduler's
	// registry missing here, or a tier missing from its Tiers, has no
	// limits: Record writes zeros for it. Default: nil, no limits.
	Services map[string]Tiers
}

// Validate checks every service name and tier of c and every value's range,
// and reports every problem at once (errors.Join), each matching ErrInvalid,
// in service and tier order. It changes nothing.
func (c Config) Validate() error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(c.Services)) {
		if err := checkService(name); err != nil {
			errs = append(errs, err)
			continue
		}
		byTier := c.Services[name]
		for _, tier := range slices.Sorted(maps.Keys(byTier)) {
			if !tier.Valid() {
				errs = append(errs, invalid("service %s: %s is not a tier", name, tier))
				continue
			}
			if err := byTier[tier].Validate(); err != nil {
				errs = append(errs, fmt.Errorf("service %s, tier %s: %w", name, tier, err))
			}
		}
	}
	return errors.Join(errs...)
}

// String lists the limits c sets, service by service and tier by tier
// ("analyzer free max_running=1 daily_quota=100; specgen pro rate=10/s"),
// or "none"; for a log line.
func (c Config) String() string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(c.Services)) {
		byTier := c.Services[name]
		for _, tier := range slices.Sorted(maps.Keys(byTier)) {
			if v := byTier[tier]; !v.IsZero() {
				parts = append(parts, name+" "+tier.String()+" "+v.String())
			}
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}

// maxServiceLen is the longest service name (service.Config.Name's rule).
const maxServiceLen = 40

// checkService checks a service name against the rule of service names
// (lower-case letters, digits and underscores, a letter first, at most 40),
// which the tables' keys enforce too.
func checkService(name string) error {
	ok := name != "" && len(name) <= maxServiceLen && name[0] >= 'a' && name[0] <= 'z'
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		ok = c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_'
	}
	if !ok {
		return invalid("service %.60q is not a service name (1 to %d lower-case letters, digits and underscores, a letter first)", name, maxServiceLen)
	}
	return nil
}

// checkTenant checks a tenant id as a key: not empty (a job without a
// tenant has no per-tenant limit), and jobmeta.CheckTenant's rule.
func checkTenant(tenant string) error { return checkTenantField("tenant", tenant) }

// checkTenantField is checkTenant for the input named field.
func checkTenantField(field, tenant string) error {
	if tenant == "" {
		return invalid("%s: empty (a job without a tenant has no per-tenant limit)", field)
	}
	if err := jobmeta.CheckTenant(tenant); err != nil {
		return invalid("%s: %v", field, err)
	}
	return nil
}

// tierKey is the tier a limit is looked up by: the tier's name, free for
// any tier that is not one of the four (as routing sends it to the default
// queue).
func tierKey(t tiers.Tier) string {
	if !t.Valid() {
		return tiers.Free.String()
	}
	return t.String()
}
