package config

import (
	"errors"
	"reflect"
	"strconv"
	"strings"

	"github.com/caarlos0/env/v11"

	"github.com/tierq/tierq/limits"
	"github.com/tierq/tierq/service"
	"github.com/tierq/tierq/tiers"
)

// Suffixes of the tenant limits' variables, after a service's EnvPrefix
// and a tier's upper-case name: ANALYZER_FREE_TENANT_MAX_RUNNING.
const (
	tenantMaxRunningVar = "_TENANT_MAX_RUNNING"
	tenantRateVar       = "_TENANT_RATE"
	tenantDailyQuotaVar = "_TENANT_DAILY_QUOTA"
)

// LimitVars are the names of the tenant limits' variables of svc for tier:
// <NAME>_<TIER>_TENANT_MAX_RUNNING, <NAME>_<TIER>_TENANT_RATE and
// <NAME>_<TIER>_TENANT_DAILY_QUOTA, where <NAME>_ is the service's
// EnvPrefix and <TIER> is FREE, PRO, PRO_PLUS or ENTERPRISE.
func LimitVars(svc *service.Service, tier tiers.Tier) (maxRunning, rate, dailyQuota string) {
	prefix := svc.EnvPrefix() + strings.ToUpper(tier.String())
	return prefix + tenantMaxRunningVar, prefix + tenantRateVar, prefix + tenantDailyQuotaVar
}

// LoadLimits parses environ (KEY=VALUE strings) into the tenant limits by
// tier of every service of services, the limits.Config the scheduler
// records in the database when it starts (scheduler.Config.Limits; docs/
// fairness.md, "Limits"). Each service has, per tier (FREE, PRO, PRO_PLUS,
// ENTERPRISE), three variables named after it (LimitVars):
//
//   - <NAME>_<TIER>_TENANT_MAX_RUNNING: the most jobs of one tenant
//     running at once, 0 to 1000000; 0 (the default): no cap.
//   - <NAME>_<TIER>_TENANT_RATE: jobs of one tenant started per second,
//     minute or hour, "10/s", "100/m", "1000/h" (limits.ParseRate); 0 (the
//     default): no limit.
//   - <NAME>_<TIER>_TENANT_DAILY_QUOTA: jobs of one tenant inserted per UTC
//     day, 0 to 1000000000; 0 (the default): no quota.
//
// A variable unset or empty has its default. Every bad one is an *Error
// naming it and its value, in service, tier and variable order, and the
// error (an Errors) matches ErrInvalid, as Load's: Join it with the
// scheduler's. Only the scheduler reads these variables: every other
// process reads the limits from the database, whatever its environment
// says.
func LoadLimits(environ []string, services *service.Registry) (limits.Config, error) {
	if services == nil {
		panic("config: LoadLimits needs the application's services")
	}
	vars := env.ToMap(environ)
	var errs Errors
	fail := func(key, reason string) {
		errs = append(errs, &Error{Var: key, Value: vars[key], Reason: reason})
	}
	integer := func(key string, bits, hi int, none string) int64 {
		raw := vars[key]
		if raw == "" {
			return 0
		}
		n, err := strconv.ParseInt(raw, 10, bits) // as caarlos0/env parses an int
		switch {
		case err != nil:
			fail(key, reasonOf(reflect.TypeFor[int](), err))
			return 0
		case n < 0 || n > int64(hi):
			fail(key, "must be between 0 and "+strconv.Itoa(hi)+" (0: "+none+")")
			return 0
		}
		return n
	}

	cfg := limits.Config{Services: map[string]limits.Tiers{}}
	for _, svc := range services.Services() {
		byTier := limits.Tiers{}
		for _, tier := range tiers.All() {
			maxRunningKey, rateKey, quotaKey := LimitVars(svc, tier)
			var v limits.Values
			v.MaxRunning = int(integer(maxRunningKey, 32, limits.MaxMaxRunning, "no cap"))
			if raw := vars[rateKey]; raw != "" {
				rate, err := limits.ParseRate(raw)
				if err != nil {
					fail(rateKey, rateReason(err))
				}
				v.Rate = rate
			}
			v.DailyQuota = integer(quotaKey, 64, limits.MaxDailyQuota, "no quota")
			if !v.IsZero() {
				byTier[tier] = v
			}
		}
		if len(byTier) > 0 {
			cfg.Services[svc.Name()] = byTier
		}
	}
	if len(errs) > 0 {
		return limits.Config{}, errs
	}
	return cfg, nil
}

// rateReason is what is wrong with a rate variable: limits.ParseRate's
// reason, which does not repeat the value.
func rateReason(err error) string {
	var invalid *limits.InvalidError
	if errors.As(err, &invalid) {
		return invalid.Reason
	}
	return err.Error()
}
