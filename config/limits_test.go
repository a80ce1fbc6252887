package config_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/limits"
	"github.com/tierq/tierq/tiers"
)

func TestLoadLimits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		environ []string
		want    limits.Config
		wantErr string
	}{
		{name: "nothing set: no limits", want: limits.Config{Services: map[string]limits.Tiers{}}},
		{name: "empty and 0 are no limit", environ: []string{
			"ANALYZER_FREE_TENANT_MAX_RUNNING=", "ANALYZER_FREE_TENANT_RATE=0", "ANALYZER_FREE_TENANT_DAILY_QUOTA=0",
		}, want: limits.Config{Services: map[string]limits.Tiers{}}},
		{name: "every kind, tier and service", environ: []string{
			"ANALYZER_FREE_TENANT_MAX_RUNNING=1", "ANALYZER_FREE_TENANT_RATE=10/s", "ANALYZER_FREE_TENANT_DAILY_QUOTA=100",
			"ANALYZER_PRO_TENANT_RATE=100/m", "ANALYZER_PRO_PLUS_TENANT_DAILY_QUOTA=1000000000",
			"ANALYZER_ENTERPRISE_TENANT_MAX_RUNNING=1000000",
			"SPECGEN_PRO_TENANT_RATE=1000/h",
			"MAILER_FREE_TENANT_MAX_RUNNING=x", // no such service: not read
		}, want: limits.Config{Services: map[string]limits.Tiers{
			"analyzer": {
				tiers.Free:       {MaxRunning: 1, Rate: limits.Rate{Count: 10, Per: time.Second}, DailyQuota: 100},
				tiers.Pro:        {Rate: limits.Rate{Count: 100, Per: time.Minute}},
				tiers.ProPlus:    {DailyQuota: 1_000_000_000},
				tiers.Enterprise: {MaxRunning: 1_000_000},
			},
			"specgen": {tiers.Pro: {Rate: limits.Rate{Count: 1000, Per: time.Hour}}},
		}}},
		{name: "not an integer", environ: []string{"ANALYZER_FREE_TENANT_MAX_RUNNING=one"},
			wantErr: `invalid configuration: ANALYZER_FREE_TENANT_MAX_RUNNING="one": not an integer`},
		{name: "negative cap", environ: []string{"SPECGEN_ENTERPRISE_TENANT_MAX_RUNNING=-1"},
			wantErr: `invalid configuration: SPECGEN_ENTERPRISE_TENANT_MAX_RUNNING="-1": must be between 0 and 1000000 (0: no cap)`},
		{name: "cap out of range", environ: []string{"ANALYZER_PRO_TENANT_MAX_RUNNING=99999999999"},
			wantErr: `invalid configuration: ANALYZER_PRO_TENANT_MAX_RUNNING="99999999999": out of range for an integer`},
		{name: "rate unit", environ: []string{"ANALYZER_PRO_PLUS_TENANT_RATE=10/d"},
			wantErr: `invalid configuration: ANALYZER_PRO_PLUS_TENANT_RATE="10/d": not a rate (jobs per second, minute or hour, such as 10/s, 100/m or 1000/h; 0 for no limit)`},
		{name: "rate without unit", environ: []string{"ANALYZER_FREE_TENANT_RATE=10"},
			wantErr: `invalid configuration: ANALYZER_FREE_TENANT_RATE="10": not a rate (jobs per second, minute or hour, such as 10/s, 100/m or 1000/h; 0 for no limit)`},
		{name: "rate too high", environ: []string{"ANALYZER_FREE_TENANT_RATE=2000000/s"},
			wantErr: `invalid configuration: ANALYZER_FREE_TENANT_RATE="2000000/s": more than 1000000 jobs per interval`},
		{name: "quota too high", environ: []string{"SPECGEN_FREE_TENANT_DAILY_QUOTA=1000000001"},
			wantErr: `invalid configuration: SPECGEN_FREE_TENANT_DAILY_QUOTA="1000000001": must be between 0 and 1000000000 (0: no quota)`},
		{name: "quota with a unit", environ: []string{"ANALYZER_FREE_TENANT_DAILY_QUOTA=100/d"},
			wantErr: `invalid configuration: ANALYZER_FREE_TENANT_DAILY_QUOTA="100/d": not an integer`},
		{name: "every bad variable, in order", environ: []string{
			"SPECGEN_FREE_TENANT_RATE=fast", "ANALYZER_ENTERPRISE_TENANT_DAILY_QUOTA=-5", "ANALYZER_FREE_TENANT_RATE=1/s ",
		}, wantErr: `invalid configuration: ANALYZER_FREE_TENANT_RATE="1/s ": not a rate (jobs per second, minute or hour, such as 10/s, 100/m or 1000/h; 0 for no limit); ` +
			`ANALYZER_ENTERPRISE_TENANT_DAILY_QUOTA="-5": must be between 0 and 1000000000 (0: no quota); ` +
			`SPECGEN_FREE_TENANT_RATE="fast": not a rate (jobs per second, minute or hour, such as 10/s, 100/m or 1000/h; 0 for no limit)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := config.LoadLimits(tt.environ, referenceServices(t))
			if tt.wantErr != "" {
				require.EqualError(t, err, tt.wantErr)
				require.ErrorIs(t, err, config.ErrInvalid)
				var one *config.Error
				require.True(t, errors.As(err, &one))
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
			require.NoError(t, got.Validate())
		})
	}
}

// TestLoadLimitsJoinsTheSchedulers: a scheduler's main reports bad limit
// variables with its other bad variables, in one line (config.Join).
func TestLoadLimitsJoinsTheSchedulers(t *testing.T) {
	t.Parallel()
	environ := []string{"DATABASE_URL=postgres://localhost/tierq", "AGING_STEP=5 minutes", "ANALYZER_FREE_TENANT_MAX_RUNNING=1.5"}
	_, err := config.Load[config.Scheduler](environ)
	_, limitsErr := config.LoadLimits(environ, referenceServices(t))
	require.EqualError(t, config.Join(err, limitsErr),
		`invalid configuration: AGING_STEP="5 minutes": not a duration (examples: 250ms, 30s, 5m, 1h); ANALYZER_FREE_TENANT_MAX_RUNNING="1.5": not an integer`)
}

func TestLimitVars(t *testing.T) {
	t.Parallel()
	analyzer, ok := referenceServices(t).Lookup("analyzer")
	require.True(t, ok)
	maxRunning, rate, quota := config.LimitVars(analyzer, tiers.ProPlus)
	require.Equal(t, []string{"ANALYZER_PRO_PLUS_TENANT_MAX_RUNNING", "ANALYZER_PRO_PLUS_TENANT_RATE", "ANALYZER_PRO_PLUS_TENANT_DAILY_QUOTA"},
		[]string{maxRunning, rate, quota})
}
