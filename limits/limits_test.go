package limits_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/limits"
	"github.com/tierq/tierq/tiers"
)

func TestParseRate(t *testing.T) {
	t.Parallel()
	const notARate = "not a rate (jobs per second, minute or hour, such as 10/s, 100/m or 1000/h; 0 for no limit)"
	tests := []struct {
		give    string
		want    limits.Rate
		wantErr string
	}{
		{give: "10/s", want: limits.Rate{Count: 10, Per: time.Second}},
		{give: "100/m", want: limits.Rate{Count: 100, Per: time.Minute}},
		{give: "1000/h", want: limits.Rate{Count: 1000, Per: time.Hour}},
		{give: "1/s", want: limits.Rate{Count: 1, Per: time.Second}},
		{give: "1000000/h", want: limits.Rate{Count: 1_000_000, Per: time.Hour}},
		{give: "0", want: limits.Rate{}},
		{give: "0/m", want: limits.Rate{}},
		{give: "1000001/h", wantErr: "more than 1000000 jobs per interval"},
		{give: "99999999999999999999/s", wantErr: "more than 1000000 jobs per interval"},
		{give: "", wantErr: notARate},
		{give: "10", wantErr: notARate},
		{give: "10/", wantErr: notARate},
		{give: "/s", wantErr: notARate},
		{give: "10/d", wantErr: notARate},
		{give: "10/S", wantErr: notARate},
		{give: "10/sec", wantErr: notARate},
		{give: "10 /s", wantErr: notARate},
		{give: " 10/s", wantErr: notARate},
		{give: "-1/s", wantErr: notARate},
		{give: "+1/s", wantErr: notARate},
		{give: "1.5/s", wantErr: notARate},
		{give: "10/1s", wantErr: notARate},
		{give: "10/s/s", wantErr: notARate},
		{give: "ten/s", wantErr: notARate},
		{give: "1\x00/s", wantErr: notARate},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			t.Parallel()
			got, err := limits.ParseRate(tt.give)
			if tt.wantErr != "" {
				require.EqualError(t, err, tt.wantErr)
				require.ErrorIs(t, err, limits.ErrInvalid)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestRateString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		give limits.Rate
		want string
	}{
		{limits.Rate{}, "0"},
		{limits.Rate{Count: 10, Per: time.Second}, "10/s"},
		{limits.Rate{Count: 100, Per: time.Minute}, "100/m"},
		{limits.Rate{Count: 1000, Per: time.Hour}, "1000/h"},
		{limits.Rate{Count: 5, Per: 30 * time.Second}, "5/30s"}, // a row written by hand
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.give.String())
			data, err := json.Marshal(tt.give)
			require.NoError(t, err)
			require.Equal(t, `"`+tt.want+`"`, string(data))
		})
	}
}

func TestValuesValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		give limits.Values
		want string
	}{
		{name: "none", give: limits.Values{}},
		{name: "all at their bounds", give: limits.Values{MaxRunning: 1_000_000, Rate: limits.Rate{Count: 1_000_000, Per: time.Hour}, DailyQuota: 1_000_000_000}},
		{name: "negative cap", give: limits.Values{MaxRunning: -1}, want: "max_running is -1: must be between 0 and 1000000 (0: no cap)"},
		{name: "cap too large", give: limits.Values{MaxRunning: 1_000_001}, want: "max_running is 1000001: must be between 0 and 1000000 (0: no cap)"},
		{name: "negative rate", give: limits.Values{Rate: limits.Rate{Count: -1, Per: time.Second}}, want: "rate count is -1: must be between 0 and 1000000 (0: no limit)"},
		{name: "rate per day", give: limits.Values{Rate: limits.Rate{Count: 1, Per: 24 * time.Hour}}, want: "rate interval is 24h0m0s: must be a second, a minute or an hour"},
		{name: "rate without interval", give: limits.Values{Rate: limits.Rate{Count: 1}}, want: "rate interval is 0s: must be a second, a minute or an hour"},
		{name: "zero rate, any interval", give: limits.Values{Rate: limits.Rate{Per: 7 * time.Second}}},
		{name: "negative quota", give: limits.Values{DailyQuota: -1}, want: "daily_quota is -1: must be between 0 and 1000000000 (0: no quota)"},
		{name: "every problem", give: limits.Values{MaxRunning: -2, Rate: limits.Rate{Count: 2_000_000, Per: time.Second}, DailyQuota: 1_000_000_001},
			want: "max_running is -2: must be between 0 and 1000000 (0: no cap)\nrate count is 2000000: must be between 0 and 1000000 (0: no limit)\ndaily_quota is 1000000001: must be between 0 and 1000000000 (0: no quota)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.give.Validate()
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, tt.want)
			require.ErrorIs(t, err, limits.ErrInvalid)
		})
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		give limits.Config
		want string
	}{
		{name: "zero", give: limits.Config{}},
		{name: "valid", give: limits.Config{Services: map[string]limits.Tiers{
			"analyzer": {tiers.Free: {MaxRunning: 1, DailyQuota: 100}, tiers.Pro: {Rate: limits.Rate{Count: 10, Per: time.Second}}},
		}}},
		{name: "bad service name", give: limits.Config{Services: map[string]limits.Tiers{"Analyzer": {}}},
			want: `service "Analyzer" is not a service name (1 to 40 lower-case letters, digits and underscores, a letter first)`},
		{name: "not a tier", give: limits.Config{Services: map[string]limits.Tiers{"analyzer": {tiers.Tier(9): {MaxRunning: 1}}}},
			want: "service analyzer: unknown(9) is not a tier"},
		{name: "bad values, in order", give: limits.Config{Services: map[string]limits.Tiers{
			"specgen":  {tiers.Enterprise: {DailyQuota: -1}},
			"analyzer": {tiers.Pro: {MaxRunning: -1}, tiers.Free: {Rate: limits.Rate{Count: 1, Per: 2 * time.Second}}},
		}}, want: "service analyzer, tier free: rate interval is 2s: must be a second, a minute or an hour\n" +
			"service analyzer, tier pro: max_running is -1: must be between 0 and 1000000 (0: no cap)\n" +
			"service specgen, tier enterprise: daily_quota is -1: must be between 0 and 1000000000 (0: no quota)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			before := tt.give.String()
			err := tt.give.Validate()
			require.Equal(t, before, tt.give.String(), "Validate changes nothing")
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, tt.want)
			require.True(t, errors.Is(err, limits.ErrInvalid))
		})
	}
}

func TestConfigString(t *testing.T) {
	t.Parallel()
	cfg := limits.Config{Services: map[string]limits.Tiers{
		"specgen":  {tiers.Pro: {Rate: limits.Rate{Count: 10, Per: time.Second}}, tiers.Free: {}},
		"analyzer": {tiers.Free: {MaxRunning: 1, DailyQuota: 100}, tiers.Enterprise: {MaxRunning: 50}},
	}}
	require.Equal(t, "analyzer free max_running=1 daily_quota=100; analyzer enterprise max_running=50; specgen pro rate=10/s", cfg.String())
	require.Equal(t, "none", limits.Config{}.String())
}

func TestOverrideApply(t *testing.T) {
	t.Parallel()
	one, zero, hundred := 1, int64(0), int64(100)
	tier := limits.Values{MaxRunning: 3, Rate: limits.Rate{Count: 10, Per: time.Second}, DailyQuota: 50}
	require.Equal(t, tier, limits.Override{}.Apply(tier), "nothing set: the tier's")
	require.Equal(t, limits.Values{MaxRunning: 1, Rate: limits.Rate{Count: 10, Per: time.Second}, DailyQuota: 0},
		limits.Override{MaxRunning: &one, DailyQuota: &zero}.Apply(tier), "0 is no limit, whatever the tier's")
	require.Equal(t, limits.Values{MaxRunning: 3, Rate: limits.Rate{}, DailyQuota: 100},
		limits.Override{Rate: &limits.Rate{}, DailyQuota: &hundred}.Apply(tier))
}
