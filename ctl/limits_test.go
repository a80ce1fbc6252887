package ctl

import (
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/limits"
	"github.com/tierq/tierq/subscriptions"
	"github.com/tierq/tierq/tiers"
)

// anyTime stands for the times tierctl prints.
var anyTime = regexp.MustCompile(`\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ`)

// TestLimitsCommands: tierctl limits shows what the scheduler recorded and
// a tenant's limits and quota, sets and unsets the tenant's override, and
// the override beats the tier's default.
func TestLimitsCommands(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	environ := dbEnv(t, db)
	ctx := t.Context()
	require.NoError(t, limits.Record(ctx, db.Pool, limits.Config{Services: map[string]limits.Tiers{
		"analyzer": {tiers.Free: {MaxRunning: 1, DailyQuota: 100}, tiers.Pro: {Rate: limits.Rate{Count: 10, Per: time.Second}}},
	}}, []string{"analyzer", "specgen"}, "scheduler"))
	require.NoError(t, subscriptions.Set(ctx, db.Pool, "acme", tiers.Pro))
	var day string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT to_char((now() AT TIME ZONE 'UTC')::date, 'YYYY-MM-DD')`).Scan(&day))
	run := func(args ...string) string {
		t.Helper()
		out, err := runTierctl(t, environ, args...)
		require.NoError(t, err, out)
		return anyTime.ReplaceAllString(out, "TIME")
	}

	require.Equal(t, `service analyzer, tenant acme, tier pro
LIMIT        APPLIES  TIER  OVERRIDE  ENFORCED
max_running  0        0     -         yes
rate         10/s     10/s  -         yes
daily_quota  0        0     -         yes
today (`+day+` UTC): 0 used, no quota; the count restarts at TIME
jobs now: no cap, running and available jobs not counted; 0 held, 0 of them by the cap, 0 by the rate
`, run("limits", "show", "analyzer", "acme"))

	require.Equal(t, `service analyzer, tenant acme, tier pro
LIMIT        APPLIES  TIER  OVERRIDE  ENFORCED
max_running  0        0     -         yes
rate         100/m    10/s  100/m     yes
daily_quota  5        0     5         yes
today (`+day+` UTC): 0 used of 5, 5 remaining; the count restarts at TIME
jobs now: no cap, running and available jobs not counted; 0 held, 0 of them by the cap, 0 by the rate
`, run("limits", "set", "analyzer", "acme", "--daily-quota", "5", "--rate", "100/m"))

	require.Equal(t, `service analyzer, tenant acme, tier free
LIMIT        APPLIES  TIER  OVERRIDE  ENFORCED
max_running  1        1     -         yes
rate         100/m    0     100/m     yes
daily_quota  5        100   5         yes
today (`+day+` UTC): 0 used of 5, 5 remaining; the count restarts at TIME
jobs now: 0 running + 0 available of its cap of 1; 0 held, 0 of them by the cap, 0 by the rate
`, run("limits", "show", "analyzer", "acme", "--tier", "free"), "the override beats free's defaults too")

	run("limits", "set", "specgen", "zeta", "--max-running", "0")
	require.Equal(t, `SERVICE   TIER        MAX RUNNING  RATE  DAILY QUOTA  RECORDED
analyzer  free        1            0     100          TIME by scheduler
analyzer  pro         0            10/s  0            TIME by scheduler
analyzer  pro_plus    0            0     0            TIME by scheduler
analyzer  enterprise  0            0     0            TIME by scheduler
specgen   free        0            0     0            TIME by scheduler
specgen   pro         0            0     0            TIME by scheduler
specgen   pro_plus    0            0     0            TIME by scheduler
specgen   enterprise  0            0     0            TIME by scheduler

SERVICE   TENANT  MAX RUNNING  RATE   DAILY QUOTA  UPDATED
analyzer  acme    -            100/m  5            TIME
specgen   zeta    0            -      -            TIME
`, run("limits", "list"))
	require.Contains(t, run("limits", "list", "--json"), `"rate": "100/m"`)

	require.Equal(t, `service analyzer, tenant acme, tier pro
LIMIT        APPLIES  TIER  OVERRIDE  ENFORCED
max_running  0        0     -         yes
rate         10/s     10/s  -         yes
daily_quota  5        0     5         yes
today (`+day+` UTC): 0 used of 5, 5 remaining; the count restarts at TIME
jobs now: no cap, running and available jobs not counted; 0 held, 0 of them by the cap, 0 by the rate
`, run("limits", "unset", "analyzer", "acme", "--rate"))
	run("limits", "unset", "analyzer", "acme")
	out, err := runTierctl(t, environ, "limits", "unset", "analyzer", "acme")
	require.True(t, errors.Is(err, errNoOverride), out)
	require.EqualError(t, err, "no override: tenant acme has no override of service analyzer's limits")
	require.Equal(t, 1, ExitCode(err))
	require.Equal(t, `SERVICE  TENANT  MAX RUNNING  RATE  DAILY QUOTA  UPDATED
specgen  zeta    0            -     -            TIME
`, regexp.MustCompile(`(?s)^.*\n\n`).ReplaceAllString(run("limits", "list", "--service", "specgen"), ""))
}

// TestLimitsShowJobs: tierctl limits show says a tenant's jobs in the
// service's queues now: under a cap of 2, of three jobs two were let
// through (one running) and one waits held by the cap, beside one held by
// fair share's window; the same in --json.
func TestLimitsShowJobs(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	environ := dbEnv(t, db)
	ctx := t.Context()
	require.NoError(t, testdb.Registry(t).Record(ctx, db.Pool, "test"))
	require.NoError(t, limits.Record(ctx, db.Pool, limits.Config{Services: map[string]limits.Tiers{
		"analyzer": {tiers.Free: {MaxRunning: 2}},
	}}, []string{"analyzer", "specgen"}, "scheduler"))
	for range 3 { // through migration 00013's trigger: two let through, one held by the cap
		testdb.InsertWaitingJob(t, db, testdb.WaitingJob{Queue: "analysis_default", Tenant: "acme"})
	}
	testdb.InsertWaitingJob(t, db, testdb.WaitingJob{Queue: "analysis_priority", Tenant: "acme", Held: true})
	_, err := db.Pool.Exec(ctx, `UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now()
		WHERE id = (SELECT min(id) FROM river_job WHERE state = 'available')`)
	require.NoError(t, err)

	out, err := runTierctl(t, environ, "limits", "show", "analyzer", "acme")
	require.NoError(t, err, out)
	require.Contains(t, out, "\njobs now: 1 running + 1 available of its cap of 2; 2 held, 1 of them by the cap, 0 by the rate\n")
	out, err = runTierctl(t, environ, "limits", "show", "analyzer", "acme", "--json")
	require.NoError(t, err, out)
	require.Contains(t, out, `"jobs": {
    "running": 1,
    "available": 1,
    "held": 2,
    "held_by_cap": 1,
    "held_by_rate": 0
  }`)
}

// TestLimitsCommandsRefuseBadInput: bad arguments and flags exit 2 with a
// message saying what is wrong, before anything is written.
func TestLimitsCommandsRefuseBadInput(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	environ := dbEnv(t, db)
	const notARate = "not a rate (jobs per second, minute or hour, such as 10/s, 100/m or 1000/h; 0 for no limit)"
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no subcommand", []string{"limits"}, "limits needs a subcommand: list, show, set or unset"},
		{"unknown service", []string{"limits", "set", "mailer", "acme", "--daily-quota", "1"}, `unknown service "mailer" (known: analyzer, specgen)`},
		{"NUL tenant", []string{"limits", "show", "analyzer", "ac\x00me"}, "TENANT: invalid tenant id: control character U+0000 at byte 2"},
		{"not UTF-8", []string{"limits", "unset", "analyzer", "\xff"}, "TENANT: invalid tenant id: invalid UTF-8 at byte 0"},
		{"empty tenant", []string{"limits", "set", "analyzer", "", "--daily-quota", "1"}, "TENANT must not be empty (a job without a tenant has no per-tenant limit)"},
		{"nothing to set", []string{"limits", "set", "analyzer", "acme"}, "give at least one of --max-running, --rate, --daily-quota"},
		{"rate", []string{"limits", "set", "analyzer", "acme", "--rate", "10/d"}, `--rate "10/d": ` + notARate},
		{"negative cap", []string{"limits", "set", "analyzer", "acme", "--max-running", "-1"}, "max_running is -1: must be between 0 and 1000000 (0: no cap)"},
		{"two problems", []string{"limits", "set", "analyzer", "acme", "--max-running", "-1", "--daily-quota", "1000000001"},
			"max_running is -1: must be between 0 and 1000000 (0: no cap); daily_quota is 1000000001: must be between 0 and 1000000000 (0: no quota)"},
		{"not an integer", []string{"limits", "set", "analyzer", "acme", "--daily-quota", "1e3"}, `invalid argument "1e3" for "--daily-quota" flag: strconv.ParseInt: parsing "1e3": invalid syntax`},
		{"tier", []string{"limits", "show", "analyzer", "acme", "--tier", "gold"}, `--tier: unknown tier "gold" (want free, pro, pro_plus or enterprise)`},
		{"after without service", []string{"limits", "list", "--after", "acme"}, "--after needs --service: tenants are listed in order within one service"},
		{"limit", []string{"limits", "list", "--limit", "0"}, "--limit must be between 1 and 10000, not 0"},
		{"arguments", []string{"limits", "show", "analyzer"}, "accepts 2 arg(s), received 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, err := runTierctl(t, environ, tt.args...)
			require.EqualError(t, err, tt.want, out)
			require.Equal(t, 2, ExitCode(err))
		})
	}
	t.Cleanup(func() {
		require.Zero(t, db.Count(t, `SELECT count(*) FROM tenant_limits`))
	})
}
