package limits_test

import (
	"fmt"
	"time"

	"github.com/tierq/tierq/limits"
	"github.com/tierq/tierq/tiers"
)

// A scheduler configured in Go records its services' limits by tier
// (scheduler.Config.Limits): here one concurrent analysis and 100 a day
// for a free tenant, 10 started a second for a pro tenant, and no limit for
// the other tiers. config.LoadLimits builds the same from
// ANALYZER_FREE_TENANT_MAX_RUNNING=1, ANALYZER_FREE_TENANT_DAILY_QUOTA=100
// and ANALYZER_PRO_TENANT_RATE=10/s.
func ExampleConfig() {
	cfg := limits.Config{Services: map[string]limits.Tiers{
		"analyzer": {
			tiers.Free: {MaxRunning: 1, DailyQuota: 100},
			tiers.Pro:  {Rate: limits.Rate{Count: 10, Per: time.Second}},
		},
	}}
	fmt.Println(cfg.Validate())
	fmt.Println(cfg)

	cfg.Services["analyzer"][tiers.Enterprise] = limits.Values{DailyQuota: -1}
	fmt.Println(cfg.Validate())
	// Output:
	// <nil>
	// analyzer free max_running=1 daily_quota=100; analyzer pro rate=10/s
	// service analyzer, tier enterprise: daily_quota is -1: must be between 0 and 1000000000 (0: no quota)
}

func ExampleParseRate() {
	for _, s := range []string{"10/s", "100/m", "1000/h", "0", "10 per second"} {
		rate, err := limits.ParseRate(s)
		fmt.Printf("%q: %d per %s, %v\n", s, rate.Count, rate.Per, err)
	}
	// Output:
	// "10/s": 10 per 1s, <nil>
	// "100/m": 100 per 1m0s, <nil>
	// "1000/h": 1000 per 1h0m0s, <nil>
	// "0": 0 per 0s, <nil>
	// "10 per second": 0 per 0s, not a rate (jobs per second, minute or hour, such as 10/s, 100/m or 1000/h; 0 for no limit)
}
