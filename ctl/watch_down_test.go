package ctl

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/x/ansi"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/routing"
	"github.com/tierq/tierq/tiers"
)

// frames is a writer that hands each write (watch appends one frame per
// write when stdout is not a terminal) to the test.
type frames chan string

func (f frames) Write(p []byte) (int, error) {
	f <- string(p)
	return len(p), nil
}

// next returns the first frame from f that matches re, failing after a
// timeout; frames before it are passed over.
func (f frames) next(t *testing.T, re string) []string {
	t.Helper()
	pattern := regexp.MustCompile(re)
	timeout := time.After(20 * time.Second)
	var last string
	for {
		select {
		case frame := <-f:
			if m := pattern.FindStringSubmatch(frame); m != nil {
				return m
			}
			last = frame
		case <-timeout:
			t.Fatalf("no frame matching %s in 20s; the last:\n%s", re, last)
		}
	}
}

// TestWatchSurvivesDatabaseBlips runs a live watch as its own database role
// and takes the database away from it for real: the role's connections are
// terminated (pg_terminate_backend) and it may not log in again (NOLOGIN),
// then its read of one table is revoked. Watch keeps running through both,
// saying since when the database has been unreachable (or failing) and why,
// and shows the live view again once the role may log in and read again.
func TestWatchSurvivesDatabaseBlips(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	exec := func(sql string) {
		t.Helper()
		_, err := db.Pool.Exec(ctx, sql)
		require.NoError(t, err)
	}
	role := db.Schema + "_watch"
	terminate := `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE usename = '` + role + `'`
	exec(`CREATE ROLE ` + role + ` LOGIN`)
	t.Cleanup(func() {
		for _, sql := range []string{terminate, `DROP OWNED BY ` + role, `DROP ROLE ` + role} {
			_, err := db.Pool.Exec(context.Background(), sql)
			require.NoError(t, err, sql)
		}
	})
	exec(`GRANT USAGE ON SCHEMA ` + db.Schema + ` TO ` + role)
	exec(`GRANT SELECT ON ALL TABLES IN SCHEMA ` + db.Schema + ` TO ` + role)
	u, err := url.Parse(db.URL)
	require.NoError(t, err)
	u.User = url.User(role)

	out := make(frames, 1000)
	watchCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- Main(watchCtx, []string{"tierctl", "watch", "--interval", "100ms"},
			[]string{"DATABASE_URL=" + u.String(), "DATABASE_SCHEMA=" + db.Schema}, out)
	}()
	out.next(t, `^\d\d:\d\d:\d\d  leader: none  dead letters pending: 0\n`)

	// The database goes away: the connections the pool holds are ended
	// and new ones are refused.
	exec(`ALTER ROLE ` + role + ` NOLOGIN`)
	exec(terminate)
	since := out.next(t, `^\d\d:\d\d:\d\d  database unreachable since (\d\d:\d\d:\d\d) \(\d+s\): `)[1]
	m := out.next(t, `^\d\d:\d\d:\d\d  database unreachable since (\d\d:\d\d:\d\d) \((\d+)s\): (.*)\n  retrying every 100ms; Ctrl-C stops\n\n$`)
	require.Equal(t, since, m[1], "since the first failed refresh")
	if !strings.Contains(m[3], "is not permitted to log in") {
		// The first failures may still be the ended connections'.
		m = out.next(t, `^\d\d:\d\d:\d\d  database unreachable since `+since+` \(\d+s\): (failed to connect to .*role "`+role+`" is not permitted to log in \(SQLSTATE 28000\))\n`)
	}

	t.Log("\n" + m[0])

	exec(`ALTER ROLE ` + role + ` LOGIN`)
	out.next(t, `^\d\d:\d\d:\d\d  leader: none  dead letters pending: 0\n`)

	// The server answers, with an error: "database error".
	exec(`REVOKE SELECT ON dead_letter_jobs FROM ` + role)
	m = out.next(t, `^\d\d:\d\d:\d\d  database error since \d\d:\d\d:\d\d \(\d+s\): (.*)\n`)
	t.Log("\n" + m[0])
	require.Equal(t, "ERROR: permission denied for table dead_letter_jobs (SQLSTATE 42501)", m[1][strings.LastIndex(m[1], ": ERROR")+2:])
	exec(`GRANT SELECT ON dead_letter_jobs TO ` + role)
	out.next(t, `^\d\d:\d\d:\d\d  leader: none  dead letters pending: 0\n`)

	stop()
	select {
	case err := <-done:
		require.NoError(t, err, "interrupted: watch ends cleanly")
	case <-time.After(20 * time.Second):
		t.Fatal("watch did not stop")
	}
}

// TestWatchOnceFailsOnDatabaseError: with --once there is no next refresh,
// so a database error ends watch with status 1, as before.
func TestWatchOnceFailsOnDatabaseError(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	_, err := db.Pool.Exec(context.Background(), `DROP TABLE dead_letter_jobs`)
	require.NoError(t, err)
	out, err := runTierctl(t, dbEnv(t, db), "watch", "--once")
	require.ErrorContains(t, err, `relation "dead_letter_jobs" does not exist`)
	require.Empty(t, out)
}

// TestWatchShowsPausedQueues pauses analysis_default with tierctl queues
// pause (River's pause): its row is marked "(paused)" and a line under the
// table says since when and how to resume it; resumed, the marks go.
func TestWatchShowsPausedQueues(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	env := dbEnv(t, db)
	// As a worker serving the queue registers it.
	_, err := db.Pool.Exec(ctx, `INSERT INTO river_queue (name, created_at, updated_at) VALUES ('analysis_default', now(), now())`)
	require.NoError(t, err)
	out, err := runTierctl(t, env, "queues", "pause", "analysis_default")
	require.NoError(t, err, out)
	for range 2 {
		_, err := db.Producer(t).Insert(ctx, jobs.LoadTestArgs{}, testdb.Service(t, jobs.ServiceAnalyzer).InsertOpts(tiers.Free, "", false))
		require.NoError(t, err)
	}
	var pausedAt time.Time
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT paused_at FROM river_queue WHERE name = 'analysis_default'`).Scan(&pausedAt))

	out, err = runTierctl(t, env, "watch", "--once")
	require.NoError(t, err, out)
	t.Log("\n" + out)
	require.Regexp(t, `(?m)^\s*QUEUE\s+SCHEDULED\s+PENDING\s+HELD\s+AVAILABLE\s+RETRYABLE\s+RUNNING\s+OLDEST\s+DEAD$`, out)
	require.Regexp(t, `(?m)^\s*analysis_default \(paused\)\s+0\s+0\s+0\s+2\s+0\s+0\s+\d+ms\s+0$`, out)
	require.Regexp(t, `(?m)^\s*analysis_priority\s+0\s+0\s+0\s+0\s+0\s+0\s+0ms\s+0$`, out)
	require.Contains(t, out, "\npaused (River's pause: no worker fetches from it until `tierctl queues resume QUEUE`):\n"+
		"  analysis_default since "+pausedAt.Local().Format("15:04:05")+"\n\n")

	out, err = runTierctl(t, env, "queues", "resume", "analysis_default")
	require.NoError(t, err, out)
	out, err = runTierctl(t, env, "watch", "--once")
	require.NoError(t, err, out)
	require.Regexp(t, `(?m)^\s*analysis_default\s+0\s+0\s+0\s+2\s+0\s+0\s+\S+\s+0$`, out)
	require.NotContains(t, out, "paused")
}

// TestWatchKeepsTheLastViewOnATerminal: on a terminal the failing
// refresh's message is drawn above the last good view, which stays on
// screen; here the failure is a table dropped from the test's schema.
func TestWatchKeepsTheLastViewOnATerminal(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	out := make(frames, 1000)
	s := &screen{w: out, fd: math.MaxInt32} // "a terminal" with no width to cut to
	queues := watchQueues{Service: testdb.Registry(t).Queues(), Tiered: testdb.Registry(t).QueuesOf(routing.Priority, routing.Default)}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- watchLoop(ctx, db.Pool, fixedQueues(queues), s, 100*time.Millisecond, time.Now) }()
	good := out.next(t, `^\d\d:\d\d:\d\d  leader: none  dead letters pending: 0\n(?s:.*)$`)[0]

	_, err := db.Pool.Exec(context.Background(), `DROP TABLE dead_letter_jobs`)
	require.NoError(t, err)
	m := out.next(t, `^\d\d:\d\d:\d\d  database error since \d\d:\d\d:\d\d \(\d+s\): dead-letter depth: ERROR: relation "dead_letter_jobs" does not exist \(SQLSTATE 42P01\)\n  retrying every 100ms; Ctrl-C stops\n\nthe last view, from before:\n\n((?s:.*))$`)
	require.Equal(t, good, m[1])

	stop()
	require.NoError(t, <-done)
}

func TestClockOrDate(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 27, 4, 5, 6, 0, time.Local)
	tests := []struct {
		name string
		give time.Time
		want string
	}{
		{name: "today", give: now.Add(-time.Hour), want: "03:05:06"},
		{name: "yesterday", give: now.Add(-5 * time.Hour), want: "2026-11-26 23:05:06"},
		{name: "another zone, same local day", give: now.Add(-time.Minute).In(time.FixedZone("", 14*3600)), want: "04:04:06"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, clockOrDate(tt.give, now))
		})
	}
}

func TestRenderDown(t *testing.T) {
	t.Parallel()
	since := time.Date(2026, 11, 27, 4, 0, 0, 0, time.Local)
	at := since.Add(12 * time.Second)
	tests := []struct {
		name  string
		give  error
		width int
		want  string
	}{
		{name: "network", give: errors.New("dial tcp 127.0.0.1:5432: connect: connection refused"),
			want: "04:00:12  database unreachable since 04:00:00 (12s): dial tcp 127.0.0.1:5432: connect: connection refused\n  retrying every 1s; Ctrl-C stops\n\n"},
		{name: "ended by an administrator", give: fmt.Errorf("summarize queues: %w", &pgconn.PgError{Severity: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command"}),
			want: "04:00:12  database unreachable since 04:00:00 (12s): summarize queues: FATAL: terminating connection due to administrator command (SQLSTATE 57P01)\n  retrying every 1s; Ctrl-C stops\n\n"},
		{name: "an SQL error", give: &pgconn.PgError{Severity: "ERROR", Code: "42P01", Message: "relation \"river_queue\" does not exist"},
			want: "04:00:12  database error since 04:00:00 (12s): ERROR: relation \"river_queue\" does not exist (SQLSTATE 42P01)\n  retrying every 1s; Ctrl-C stops\n\n"},
		{name: "no code", give: &pgconn.PgError{Severity: "ERROR", Message: "odd"},
			want: "04:00:12  database error since 04:00:00 (12s): ERROR: odd (SQLSTATE )\n  retrying every 1s; Ctrl-C stops\n\n"},
		// Escapes and invalid bytes visible; a line break is a space (it would
		// break the frame).
		{name: "escapes and newlines", give: errors.New("bad\x1b[2J\nthing\r\x85end"),
			want: "04:00:12  database unreachable since 04:00:00 (12s): bad\\x1b[2J thing \\x85end\n  retrying every 1s; Ctrl-C stops\n\n"},
		// pgx's connect errors put "\n\t" before each address tried: spaces,
		// not visible escapes (a hostile value's are still escaped above).
		{name: "pgx's line breaks", give: errors.New("read recorded services: failed to connect to `user=postgres database=tierq`:\n\t127.0.0.1:1 (127.0.0.1): dial error: dial tcp 127.0.0.1:1: connect: connection refused"),
			want: "04:00:12  database unreachable since 04:00:00 (12s): read recorded services: failed to connect to `user=postgres database=tierq`: 127.0.0.1:1 (127.0.0.1): dial error: dial tcp 127.0.0.1:1: connect: connection refused\n  retrying every 1s; Ctrl-C stops\n\n"},
		// On an 80-column terminal (which cuts lines at 79) the reason at
		// the end stays on screen: folded, indented.
		{name: "folded to a terminal's width", width: 80,
			give: errors.New("read recorded services: failed to connect to `user=postgres database=tierq`:\n\t127.0.0.1:1 (127.0.0.1): dial error: dial tcp 127.0.0.1:1: connect: connection refused"),
			want: "04:00:12  database unreachable since 04:00:00 (12s): read recorded services:\n" +
				"  failed to connect to `user=postgres database=tierq`: 127.0.0.1:1 (127.0.0.1):\n" +
				"  dial error: dial tcp 127.0.0.1:1: connect: connection refused\n" +
				"  retrying every 1s; Ctrl-C stops\n\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := renderDown(at, since, time.Second, tt.give, tt.width)
			require.Equal(t, tt.want, got)
			if tt.width > 0 {
				for _, line := range strings.Split(got, "\n") {
					require.LessOrEqual(t, ansi.StringWidth(line), tt.width-1, "line %q", line)
				}
			}
		})
	}
}
