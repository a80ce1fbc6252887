package ctl

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/escalation"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/tiers"
)

// TestEscalationsList escalates three jobs through the real paths (tierctl
// escalate twice, one an actor and reason full of terminal escapes, and the
// scheduler's sweep), pins their times to 10:00, 11:00 and 12:00 UTC on 2025-06-01, and
// reads the audit back: the table whole and filtered, paged, --json, all
// safe for a terminal.
func TestEscalationsList(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	env := dbEnv(t, db)
	analyzer := testdb.Service(t, jobs.ServiceAnalyzer)

	free, err := db.Producer(t).Insert(ctx, jobs.LoadTestArgs{}, analyzer.InsertOpts(tiers.Free, "", false))
	require.NoError(t, err)
	out, err := runTierctl(t, env, "escalate", fmt.Sprint(free.Job.ID), "--to", "priority", "--actor", "alice", "--reason", "ticket 812")
	require.NoError(t, err, out)
	pro, err := db.Producer(t).Insert(ctx, jobs.LoadTestArgs{}, analyzer.InsertOpts(tiers.Pro, "", false))
	require.NoError(t, err)
	out, err = runTierctl(t, env, "escalate", fmt.Sprint(pro.Job.ID), "--to", "default", "--actor", "eve\x1b]0;pwned\a", "--reason", "clear\x1b[2J\u009b31m\u202eevil")
	require.NoError(t, err, out)
	background := testdb.InsertWaiting(t, db, jobs.LoadTestArgs{}, &river.InsertOpts{Queue: "analysis_scheduled", Priority: 4}, 2*time.Hour)
	swept, err := escalation.Sweep(ctx, db.Pool, testdb.Registry(t).Queues(), escalation.Rules(time.Hour, 0), 10)
	require.NoError(t, err)
	require.Equal(t, 1, swept.Total)
	_, err = db.Pool.Exec(ctx, `UPDATE job_escalations SET escalated_at = '2025-06-01T09:00:00Z'::timestamptz + make_interval(hours => id::int)`)
	require.NoError(t, err)

	// A fresh schema: the jobs are 1, 2 and 3, as are the escalations.
	require.Equal(t, []int64{1, 2, 3}, []int64{free.Job.ID, pro.Job.ID, background})
	const (
		header = "ID  ESCALATED AT (UTC)   JOB  FROM                   TO                    ACTOR              REASON\n"
		row3   = "3   2025-06-01 12:00:00  3    analysis_scheduled p4  analysis_default p4   scheduler          waited more than 1h0m0s in a scheduled queue\n"
		row2   = "2   2025-06-01 11:00:00  2    analysis_priority p4   analysis_default p4   eve\\x1b]0;pwned\\a  clear\\x1b[2J\\u009b31m\\u202eevil\n"
		row1   = "1   2025-06-01 10:00:00  1    analysis_default p4    analysis_priority p1  alice              ticket 812\n"
	)
	out, err = runTierctl(t, env, "escalations", "list")
	require.NoError(t, err, out)
	requireTerminalSafe(t, out, false)
	require.Equal(t, header+row3+row2+row1, out)

	tests := []struct {
		name string
		args []string
		want string
	}{
		{"actor", []string{"--actor", "alice"}, "ID  ESCALATED AT (UTC)   JOB  FROM                 TO                    ACTOR  REASON\n" +
			"1   2025-06-01 10:00:00  1    analysis_default p4  analysis_priority p1  alice  ticket 812\n"},
		{"queue out of or into", []string{"--queue", "analysis_scheduled"}, "ID  ESCALATED AT (UTC)   JOB  FROM                   TO                   ACTOR      REASON\n" +
			"3   2025-06-01 12:00:00  3    analysis_scheduled p4  analysis_default p4  scheduler  waited more than 1h0m0s in a scheduled queue\n"},
		{"since and until", []string{"--since", "2025-06-01T10:30:00Z", "--until", "2025-06-01T11:00:00.5Z", "--actor", "eve\x1b]0;pwned\a"},
			"ID  ESCALATED AT (UTC)   JOB  FROM                  TO                   ACTOR              REASON\n" +
				"2   2025-06-01 11:00:00  2    analysis_priority p4  analysis_default p4  eve\\x1b]0;pwned\\a  clear\\x1b[2J\\u009b31m\\u202eevil\n"},
		{"none", []string{"--queue", "specview_default"}, "no escalations match\n"},
		{"since an age", []string{"--since", "1h"}, "no escalations match\n"}, // pinned in 2025
		{"until an age", []string{"--since", "3650d", "--until", "1h", "--actor", "alice"}, "ID  ESCALATED AT (UTC)   JOB  FROM                 TO                    ACTOR  REASON\n" +
			"1   2025-06-01 10:00:00  1    analysis_default p4  analysis_priority p1  alice  ticket 812\n"},
	}
	for _, tt := range tests {
		out, err := runTierctl(t, env, append([]string{"escalations", "list"}, tt.args...)...)
		require.NoError(t, err, out)
		requireTerminalSafe(t, out, false)
		require.Equal(t, tt.want, out, tt.name)
	}

	// A full page says how to get the next one.
	out, err = runTierctl(t, env, "escalations", "list", "--limit", "2")
	require.NoError(t, err, out)
	require.Equal(t, "ID  ESCALATED AT (UTC)   JOB  FROM                   TO                   ACTOR              REASON\n"+
		"3   2025-06-01 12:00:00  3    analysis_scheduled p4  analysis_default p4  scheduler          waited more than 1h0m0s in a scheduled queue\n"+
		"2   2025-06-01 11:00:00  2    analysis_priority p4   analysis_default p4  eve\\x1b]0;pwned\\a  clear\\x1b[2J\\u009b31m\\u202eevil\n"+
		"more: the same command with --before 2\n", out)
	out, err = runTierctl(t, env, "escalations", "list", "--limit", "2", "--before", "2")
	require.NoError(t, err, out)
	require.Contains(t, out, "\n1   2025-06-01 10:00:00  ")
	require.NotContains(t, out, "more:")

	// --json is GET /v1/escalations's answer, escapes as \u.
	out, err = runTierctl(t, env, "escalations", "list", "--queue", "analysis_priority", "--until", "2025-06-01T11:30:00+00:00", "--limit", "1", "--json")
	require.NoError(t, err, out)
	requireTerminalSafe(t, out, true)
	require.JSONEq(t, fmt.Sprintf(`{"escalations": [{"id": 2, "job_id": %d, "from_queue": "analysis_priority", "to_queue": "analysis_default",
		"from_priority": 4, "to_priority": 4, "actor": "eve\u001b]0;pwned\u0007", "reason": "clear\u001b[2J\u009b31m\u202eevil",
		"escalated_at": "2025-06-01T11:00:00Z"}], "next_cursor": "2"}`, pro.Job.ID), out)
	require.Contains(t, out, `"actor": "eve\u001b]0;pwned\u0007"`, "escaped in the JSON text itself")
}

func TestEscalationsListUsageErrors(t *testing.T) {
	t.Parallel()
	requireUsageErrors(t, []usageCase{
		{name: "no subcommand", args: []string{"escalations"}, want: "escalations needs a subcommand: list"},
		{name: "bad since", args: []string{"escalations", "list", "--since", "yesterday"},
			want: `--since "yesterday": want an RFC 3339 time such as 2026-11-27T10:00:00Z, or an age such as 90m, 24h or 7d`},
		{name: "date only", args: []string{"escalations", "list", "--until", "2026-11-27"}, want: `--until "2026-11-27": want an RFC 3339 time`},
		{name: "empty range", args: []string{"escalations", "list", "--since", "2025-06-01T11:00:00Z", "--until", "2025-06-01T10:00:00Z"},
			want: "invalid escalation request: since must be before until"},
		{name: "limit", args: []string{"escalations", "list", "--limit", "0"}, want: "--limit must be between 1 and 1000, not 0"},
		{name: "before", args: []string{"escalations", "list", "--before=-3"}, want: "--before -3 is not an id"},
		{name: "before not a number", args: []string{"escalations", "list", "--before", "x"}, want: `invalid argument "x" for "--before"`},
		{name: "actor too long", args: []string{"escalations", "list", "--actor", string(make([]byte, 201))}, want: "actor is at most 200 bytes"},
		{name: "queue not UTF-8", args: []string{"escalations", "list", "--queue", "q\xff"}, want: "queue is not UTF-8"},
		{name: "extra argument", args: []string{"escalations", "list", "x"}, want: `unknown command "x"`},
	})
}
