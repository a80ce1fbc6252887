package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/ctl"
	"github.com/tierq/tierq/internal/proctest"
	"github.com/tierq/tierq/internal/testdb"
)

func TestMain(m *testing.M) {
	proctest.RunMain(main) // the processes the bench tests start (proctest.Command)
	os.Exit(m.Run())
}

// runTierctl runs the stock tierctl (run) with args in environ.
func runTierctl(t *testing.T, environ []string, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := run(context.Background(), append([]string{"tierctl"}, args...), environ, &out)
	return out.String(), err
}

// dbEnv is tierctl's environment on db, where the reference app's services
// are recorded as its processes record them when they start.
func dbEnv(t testing.TB, db *testdb.DB) []string {
	t.Helper()
	require.NoError(t, testdb.Registry(t).Record(context.Background(), db.Pool, "worker"))
	return []string{"DATABASE_URL=" + db.URL, "DATABASE_SCHEMA=" + db.Schema}
}

func TestEnqueueRoutesEveryTier(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)

	out, err := runTierctl(t, dbEnv(t, db), "enqueue", "--count", "40",
		"--mix", "free=1,pro=1,pro_plus=1,enterprise=1", "--scheduled", "0.25",
		"--target", "../../jobs/scan/testdata/fixture", "--target", ".")
	require.NoError(t, err, out)
	require.Contains(t, out, "enqueued 40 analysis jobs")

	rows, err := db.Pool.Query(context.Background(), `
		SELECT args->>'tier', queue, priority, count(*) FROM river_job
		WHERE kind = 'analysis' GROUP BY 1, 2, 3 ORDER BY 1, 2`)
	require.NoError(t, err)
	type group struct {
		Tier     string
		Queue    string
		Priority int
		N        int
	}
	groups, err := pgx.CollectRows(rows, pgx.RowToStructByPos[group])
	require.NoError(t, err)

	byQueue := map[string]int{}
	for _, g := range groups {
		byQueue[g.Queue] += g.N
		switch g.Queue {
		case "analysis_priority":
			require.Contains(t, []string{"pro", "pro_plus", "enterprise"}, g.Tier)
		case "analysis_default":
			require.Equal(t, "free", g.Tier)
		case "analysis_scheduled":
		default:
			t.Fatalf("unexpected queue %q", g.Queue)
		}
		want := map[string]int{"free": 4, "pro": 4, "pro_plus": 3, "enterprise": 2}[g.Tier]
		require.Equal(t, want, g.Priority, g.Tier)
	}
	byTier := map[string]int{}
	for _, g := range groups {
		byTier[g.Tier] += g.N
	}
	require.Equal(t, map[string]int{"free": 10, "pro": 10, "pro_plus": 10, "enterprise": 10}, byTier)
	require.Equal(t, 40, byQueue["analysis_priority"]+byQueue["analysis_default"]+byQueue["analysis_scheduled"])
	require.Positive(t, byQueue["analysis_scheduled"])
	require.Less(t, byQueue["analysis_scheduled"], 20, "about a quarter scheduled")

	out, err = runTierctl(t, dbEnv(t, db), "watch", "--once")
	require.NoError(t, err, out)
	// SCHEDULED PENDING HELD AVAILABLE RETRYABLE RUNNING OLDEST DEAD
	require.Regexp(t, fmt.Sprintf(`(?m)^\s*analysis_priority\s+0\s+0\s+0\s+%d\s+0\s+0\s+(\d+ms|\d+\.\ds)\s+0$`, byQueue["analysis_priority"]), out)
}

// TestUsageErrorsExitTwo: the stock tierctl's own command lines (bench,
// enqueue's demo analysis jobs) that it cannot run are usage errors (exit
// 2), reported before the database is reached.
func TestUsageErrorsExitTwo(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{name: "target not a directory", args: []string{"enqueue", "--target", "main.go"}, want: `--target "main.go" is not a directory`},
		{name: "bench unknown scenario", args: []string{"bench", "latency"}, want: `unknown scenario "latency"`},
		{name: "bench no scenario", args: []string{"bench"}, want: "accepts 1 arg"},
		{name: "bench runs", args: []string{"bench", "insert", "--runs", "1000"}, want: "--runs must be between 0 and 100"},
		{name: "bench bad set", args: []string{"bench", "isolation", "--set", "QUEUE_PRIORITY_FETCH_COOLDOWN"}, want: "--set wants NAME=value"},
		{name: "bench set schema", args: []string{"bench", "isolation", "--set", "DATABASE_SCHEMA=public"}, want: "only worker counts and fetch tuning"},
		{name: "bench set service", args: []string{"bench", "isolation", "--set", "WORKER_SERVICE=specgen"}, want: "only worker counts and fetch tuning"},
		{name: "bench limits set service", args: []string{"bench", "limits", "--quick", "--set", "WORKER_SERVICE=specgen"}, want: "only worker counts and fetch tuning"},
		{name: "user prefix too long", args: []string{"enqueue", "--user-prefix", strings.Repeat("u", 190)},
			want: `--user-prefix: invalid user id: 201 bytes, longer than 200 (the prefix is 190 bytes of it, then "_pro_plus_6")`},
		{name: "user prefix control character", args: []string{"enqueue", "--user-prefix", "a\nb"}, want: "--user-prefix: invalid user id: control character U+000A at byte 1"},
		{name: "user prefix C1 control character", args: []string{"enqueue", "--user-prefix", "ab\u0085"}, want: "--user-prefix: invalid user id: control character U+0085 at byte 2"},
		{name: "user prefix invalid UTF-8", args: []string{"enqueue", "--user-prefix", "ab\xff"}, want: "--user-prefix: invalid user id: invalid UTF-8 at byte 2"},
		{name: "target with kind", args: []string{"enqueue", "--kind", "k", "--target", "."}, want: "--target is for the demo analysis jobs; with --kind, give the args with --args"},
	}
	environ := []string{"DATABASE_URL=postgres://127.0.0.1:1/none"}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := runTierctl(t, environ, tt.args...)
			var usage *ctl.UsageError
			require.True(t, errors.As(err, &usage), "%v", err)
			require.ErrorContains(t, err, tt.want)
			require.Equal(t, 2, ctl.ExitCode(err))
		})
	}
}

// TestHelp: the stock tierctl lists the reference app's commands beside
// ctl's, and enqueue's help says what it inserts without --kind.
func TestHelp(t *testing.T) {
	t.Parallel()
	out, err := runTierctl(t, nil, "--help")
	require.NoError(t, err, out)
	require.Regexp(t, `(?m)^  demo\s+Flood the free queues`, out)
	require.Regexp(t, `(?m)^  bench\s+Measure tierq`, out)
	out, err = runTierctl(t, nil, "bench", "--help")
	require.NoError(t, err, out)
	require.Regexp(t, `(?m)^  limits\s+per-tenant limits: a cap of 2 never exceeded`, out)
	out, err = runTierctl(t, nil, "enqueue", "--help")
	require.NoError(t, err, out)
	require.Contains(t, out, "Insert COUNT analysis jobs for the given target directories")
	require.Contains(t, out, "With --kind, insert COUNT jobs (default 1) of that kind instead")
	require.Contains(t, out, "--target stringArray")
	require.Contains(t, out, "number of jobs to insert (default 40)")
}
