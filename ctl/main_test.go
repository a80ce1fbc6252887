package ctl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/escalation"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/tiers"
)

func runTierctl(t *testing.T, environ []string, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := Main(context.Background(), append([]string{"tierctl"}, args...), environ, &out)
	return out.String(), err
}

// dbEnv is tierctl's environment on db, where the reference app's services
// are recorded as its processes record them when they start.
func dbEnv(t testing.TB, db *testdb.DB) []string {
	t.Helper()
	require.NoError(t, testdb.Registry(t).Record(context.Background(), db.Pool, "worker"))
	return bareEnv(db)
}

// bareEnv is tierctl's environment on db as it is: no service recorded
// unless the test recorded one.
func bareEnv(db *testdb.DB) []string {
	return []string{"DATABASE_URL=" + db.URL, "DATABASE_SCHEMA=" + db.Schema}
}

func TestMigrateFreshSchemaThenIdempotent(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	schema := db.Schema + "_fresh"
	t.Cleanup(func() { _, _ = db.Pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
	environ := []string{"DATABASE_URL=" + db.URL, "DATABASE_SCHEMA=" + schema}

	out, err := runTierctl(t, environ, "migrate")
	require.NoError(t, err, out)
	require.Contains(t, out, "tierq migrations applied: [1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19]")
	require.Contains(t, out, "tierq schema version: 19")

	out, err = runTierctl(t, environ, "migrate")
	require.NoError(t, err, out)
	require.Contains(t, out, "river migrations applied: none (up to date)")
	require.Contains(t, out, "tierq migrations applied: none (up to date)")
}

// usageCase is a tierctl command line that must fail as a usage error
// (exit 2) with a message containing want.
type usageCase struct {
	name string
	args []string
	want string
}

// requireUsageErrors runs each case against a database that is never
// reached (usage errors come first).
func requireUsageErrors(t *testing.T, tests []usageCase) {
	t.Helper()
	environ := []string{"DATABASE_URL=postgres://127.0.0.1:1/none"}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := runTierctl(t, environ, tt.args...)
			var usage *UsageError
			require.True(t, errors.As(err, &usage), "%v", err)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestUsageErrorsExitTwo(t *testing.T) {
	t.Parallel()
	requireUsageErrors(t, []usageCase{
		{name: "unknown command", args: []string{"frobnicate"}, want: "unknown command"},
		{name: "bad flag value", args: []string{"enqueue", "--count", "many"}, want: "--count"},
		{name: "count out of range", args: []string{"enqueue", "--count", "0"}, want: "--count must be"},
		{name: "bad tier in mix", args: []string{"enqueue", "--mix", "gold=1"}, want: `unknown tier "gold"`},
		{name: "enqueue without kind", args: []string{"enqueue", "--count", "4"}, want: "--kind is required"},
		{name: "extra argument", args: []string{"migrate", "now"}, want: "unknown command"},
		{name: "escalate without job", args: []string{"escalate", "--to", "priority"}, want: "accepts 1 arg"},
		{name: "escalate bad id", args: []string{"escalate", "abc", "--to", "priority", "--actor", "a", "--reason", "r"}, want: `JOB_ID "abc"`},
		{name: "escalate bad class", args: []string{"escalate", "7", "--to", "urgent", "--actor", "a", "--reason", "r"}, want: `unknown queue class "urgent"`},
		{name: "escalate no actor", args: []string{"escalate", "7", "--to", "priority", "--reason", "r"}, want: "actor is required"},
		{name: "escalate bad priority", args: []string{"escalate", "7", "--to", "default", "--priority", "9", "--actor", "a", "--reason", "r"}, want: "priority 9 not in 1..4"},
		{name: "dlq show bad id", args: []string{"dlq", "show", "12x"}, want: `ID "12x" is not an id`},
		{name: "dlq show huge id", args: []string{"dlq", "show", "99999999999999999999"}, want: `is not an id`},
		{name: "dlq list bad since", args: []string{"dlq", "list", "--since", "yesterday"}, want: `--since "yesterday"`},
		{name: "dlq list limit", args: []string{"dlq", "list", "--limit", "0"}, want: "--limit must be between 1 and 1000"},
		{name: "dlq replay nothing", args: []string{"dlq", "replay"}, want: "IDs, or --all"},
		{name: "dlq replay ids and all", args: []string{"dlq", "replay", "3", "--all"}, want: "not both"},
		{name: "dlq replay filter with ids", args: []string{"dlq", "replay", "3", "--queue", "analysis_default"}, want: "select rows for --all"},
		{name: "dlq replay negative id", args: []string{"dlq", "replay", "--", "-3"}, want: `ID "-3"`},
		{name: "dlq purge without age", args: []string{"dlq", "purge"}, want: "--older-than is required"},
		{name: "dlq purge bad age", args: []string{"dlq", "purge", "--older-than", "-5d"}, want: `--older-than "-5d"`},
		{name: "dlq drain batch", args: []string{"dlq", "drain", "--batch", "0"}, want: "--batch must be"},
		{name: "dlq unknown subcommand", args: []string{"dlq", "lsit"}, want: `unknown command "lsit"`},
		{name: "dlq without subcommand", args: []string{"dlq"}, want: "needs a subcommand"},
		{name: "dlq purge empty age", args: []string{"dlq", "purge", "--older-than", ""}, want: "--older-than is required"},
		{name: "subscription bad tier", args: []string{"subscriptions", "set", "u1", "gold"}, want: "unknown tier"},
		{name: "subscription empty user", args: []string{"subscriptions", "set", "", "pro"}, want: "invalid user id"},
		{name: "dlq delete nothing", args: []string{"dlq", "delete"}, want: "accepts between 1 and 1000 arg(s)"},
		{name: "user prefix too long", args: []string{"enqueue", "--kind", "k", "--user-prefix", strings.Repeat("u", 190)},
			want: `--user-prefix: invalid user id: 201 bytes, longer than 200 (the prefix is 190 bytes of it, then "_pro_plus_6")`},
		{name: "user prefix control character", args: []string{"enqueue", "--kind", "k", "--user-prefix", "a\nb"}, want: "--user-prefix: invalid user id: control character U+000A at byte 1"},
		{name: "user prefix C1 control character", args: []string{"enqueue", "--kind", "k", "--user-prefix", "ab\u0085"}, want: "--user-prefix: invalid user id: control character U+0085 at byte 2"},
		{name: "user prefix invalid UTF-8", args: []string{"enqueue", "--kind", "k", "--user-prefix", "ab\xff"}, want: "--user-prefix: invalid user id: invalid UTF-8 at byte 2"},
		{name: "subscription user too long", args: []string{"subscriptions", "set", strings.Repeat("u", 201), "pro"}, want: "invalid user id: 201 bytes, longer than 200"},
		{name: "subscription user escape", args: []string{"subscriptions", "set", "a\x1bb", "pro"}, want: "invalid user id: control character U+001B at byte 1"},
		{name: "subscription list after too long", args: []string{"subscriptions", "list", "--after", strings.Repeat("u", 201)}, want: "--after is longer"},
		{name: "subscription list limit", args: []string{"subscriptions", "list", "--limit", "10001"}, want: "--limit must be between 1 and 10000"},
		{name: "dlq replay too many ids", args: append([]string{"dlq", "replay"}, manyIDs(1001)...), want: "at most 1000 IDs"},
		{name: "dlq delete too many ids", args: append([]string{"dlq", "delete"}, manyIDs(1001)...), want: "accepts between 1 and 1000 arg(s)"},
		{name: "dlq replay actor too long", args: []string{"dlq", "replay", "3", "--actor", strings.Repeat("a", 201)}, want: "actor"},
		{name: "dlq list queue too long", args: []string{"dlq", "list", "--queue", strings.Repeat("q", 129)}, want: "at most 128 bytes"},
		{name: "dlq purge batch", args: []string{"dlq", "purge", "--older-than", "1d", "--batch", "100001"}, want: "--batch must be"},
		{name: "dlq replay batch", args: []string{"dlq", "replay", "--all", "--batch", "10001"}, want: "--batch must be"},
	})

	_, err := runTierctl(t, nil, "migrate")
	require.ErrorIs(t, err, config.ErrInvalid)
	require.ErrorContains(t, err, "DATABASE_URL")
}

func TestEscalate(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	env := dbEnv(t, db)

	res, err := db.Producer(t).Insert(ctx, jobs.LoadTestArgs{}, testdb.Service(t, jobs.ServiceAnalyzer).InsertOpts(tiers.Free, "", false))
	require.NoError(t, err)
	id := fmt.Sprint(res.Job.ID)

	out, err := runTierctl(t, env, "escalate", id, "--to", "priority", "--actor", "alice", "--reason", "ticket 812")
	require.NoError(t, err)
	require.Equal(t, "job "+id+" (loadtest, available): analysis_default priority 4 -> analysis_priority priority 1\n", out)

	out, err = runTierctl(t, env, "escalate", id, "--to", "priority", "--actor", "alice", "--reason", "again")
	require.NoError(t, err)
	require.Contains(t, out, "already in analysis_priority at priority 1; nothing changed")

	_, err = db.Pool.Exec(ctx, `UPDATE river_job SET state = 'completed', finalized_at = now(), attempt = 1, attempted_at = now() WHERE id = $1`, res.Job.ID)
	require.NoError(t, err)
	_, err = runTierctl(t, env, "escalate", id, "--to", "default", "--actor", "alice", "--reason", "too late")
	require.ErrorIs(t, err, escalation.ErrNotQueued)
	require.ErrorContains(t, err, "is completed")
	require.Equal(t, "analysis_priority", db.Jobs(t, "id = $1", res.Job.ID)[0].Queue)

	_, err = runTierctl(t, env, "escalate", "987654", "--to", "default", "--actor", "alice", "--reason", "missing")
	require.ErrorIs(t, err, escalation.ErrNotFound)
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM job_escalations`))
}

func TestSubscriptions(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)

	for _, args := range [][]string{{"u_b", "pro"}, {"u_a", "enterprise"}, {"u_b", "pro_plus"}} {
		out, err := runTierctl(t, dbEnv(t, db), append([]string{"subscriptions", "set"}, args...)...)
		require.NoError(t, err, out)
	}
	out, err := runTierctl(t, dbEnv(t, db), "subscriptions", "list")
	require.NoError(t, err, out)
	require.Regexp(t, `(?s)USER\s+TIER.*u_a\s+enterprise.*u_b\s+pro_plus`, out)
	require.NotContains(t, out, " pro ")
}

// manyIDs is n distinct ids as arguments.
func manyIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = strconv.Itoa(i + 1)
	}
	return ids
}

// TestConnectErrorsHideThePassword runs commands against a database that
// refuses the connection (nothing listens) and one that fails it (no such
// database), with the password in the URL's user info and in its query:
// pgx's errors name the host, user and database, never the password.
func TestConnectErrorsHideThePassword(t *testing.T) {
	t.Parallel()

	const password = "hunter2-secret"
	server, err := url.Parse(testdb.URL())
	require.NoError(t, err)
	urls := map[string]string{
		"refused, user info": "postgres://tierq:" + password + "@127.0.0.1:1/x?sslmode=disable&connect_timeout=5",
		"refused, query":     "postgres://tierq@127.0.0.1:1/x?sslmode=disable&connect_timeout=5&password=" + password,
		"no database, user info": (&url.URL{Scheme: "postgres", User: url.UserPassword(server.User.Username(), password),
			Host: server.Host, Path: "/tierq_no_such_db", RawQuery: "sslmode=disable"}).String(),
		"no database, query": (&url.URL{Scheme: "postgres", User: url.User(server.User.Username()),
			Host: server.Host, Path: "/tierq_no_such_db", RawQuery: "sslmode=disable&password=" + password}).String(),
	}
	commands := [][]string{
		{"migrate"}, {"watch", "--once"}, {"enqueue", "--kind", "k", "--count", "1"}, {"escalate", "1", "--to", "priority", "--actor", "a", "--reason", "r"},
		{"dlq", "list"}, {"dlq", "show", "1"}, {"dlq", "replay", "1"}, {"dlq", "replay", "--all"}, {"dlq", "purge", "--older-than", "1d"},
		{"dlq", "delete", "1"}, {"dlq", "drain"}, {"subscriptions", "set", "u", "pro"}, {"subscriptions", "list"},
	}
	for name, u := range urls {
		for _, args := range commands {
			t.Run(name+"/"+strings.Join(args[:min(2, len(args))], " "), func(t *testing.T) {
				t.Parallel()
				out, err := runTierctl(t, []string{"DATABASE_URL=" + u, "LOG_LEVEL=debug"}, args...)
				require.Error(t, err, out)
				require.ErrorContains(t, err, "connect")
				require.NotContains(t, err.Error(), password)
				require.NotContains(t, out, password)
			})
		}
	}
}
