package pauserepair_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/pauserepair"
	"github.com/tierq/tierq/internal/proctest"
	"github.com/tierq/tierq/internal/riverschema"
	"github.com/tierq/tierq/internal/testdb"
)

// TestRepairer drives a Repairer's rounds by hand over a river_queue row
// and its Hook fed with job rows, and listens to River's control channel:
// what a round sends, and what a resume racing with it leaves.
func TestRepairer(t *testing.T) {
	t.Parallel()

	const queue = "repair_q"

	type testBundle struct {
		db       *testdb.DB
		repairer *pauserepair.Repairer
		out      *proctest.Buffer
		channel  string
		listener *pgx.Conn
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		ctx := context.Background()
		db := testdb.NewCore(t)
		_, err := db.Pool.Exec(ctx,
			`INSERT INTO river_queue (name, created_at, updated_at) VALUES ($1, now(), now())`, queue)
		require.NoError(t, err)
		out := &proctest.Buffer{}
		repairer, err := pauserepair.New(db.Pool, pauserepair.Config{
			Queues: []string{queue},
			Logger: slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelDebug})),
		})
		require.NoError(t, err)

		channel := riverschema.Channel(db.Schema, riverschema.ControlTopic)
		listener, err := pgx.Connect(ctx, db.URL)
		require.NoError(t, err)
		t.Cleanup(func() { _ = listener.Close(context.Background()) })
		_, err = listener.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize())
		require.NoError(t, err)
		return &testBundle{db: db, repairer: repairer, out: out, channel: channel, listener: listener}
	}

	// pause sets the queue's paused_at, as a pause whose notification was
	// lost, and returns it.
	pause := func(t *testing.T, b *testBundle) time.Time {
		t.Helper()
		var pausedAt time.Time
		require.NoError(t, b.db.Pool.QueryRow(context.Background(),
			`UPDATE river_queue SET paused_at = now() - interval '10 seconds' WHERE name = $1 RETURNING paused_at`,
			queue).Scan(&pausedAt))
		return pausedAt
	}

	// start tells the Hook that a job of queue started at at.
	start := func(t *testing.T, b *testBundle, at time.Time) {
		t.Helper()
		hook, ok := b.repairer.Hook().(rivertype.HookWorkBegin)
		require.True(t, ok)
		require.NoError(t, hook.WorkBegin(context.Background(), &rivertype.JobRow{Queue: queue, AttemptedAt: &at}))
	}

	// next is the next control message, failing after 10 s.
	next := func(t *testing.T, b *testBundle) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		n, err := b.listener.WaitForNotification(ctx)
		require.NoError(t, err)
		require.Equal(t, b.channel, n.Channel)
		return n.Payload
	}

	// requireNothingSent sends a marker on the channel and requires it to
	// be the next message: notifications arrive in commit order, so a
	// pause a round had sent would come first.
	requireNothingSent := func(t *testing.T, b *testBundle) {
		t.Helper()
		_, err := b.db.Pool.Exec(context.Background(), `SELECT pg_notify($1, 'marker')`, b.channel)
		require.NoError(t, err)
		require.Equal(t, "marker", next(t, b))
	}

	requireAction := func(t *testing.T, payload, action string) {
		t.Helper()
		var n riverschema.ControlNotification
		require.NoError(t, json.Unmarshal([]byte(payload), &n), payload)
		require.Equal(t, riverschema.ControlNotification{Action: action, Queue: queue}, n)
	}

	// round is one round of the repairer's, and what it sent.
	round := func(t *testing.T, b *testBundle) []pauserepair.Missed {
		t.Helper()
		missed, err := b.repairer.RunOnce(context.Background())
		require.NoError(t, err)
		return missed
	}

	// requireSent requires a round's result to be the queue, and its pause
	// to be the next control message.
	requireSent := func(t *testing.T, b *testBundle, missed []pauserepair.Missed) {
		t.Helper()
		require.Len(t, missed, 1)
		require.Equal(t, queue, missed[0].Queue)
		requireAction(t, next(t, b), riverschema.ActionPause)
	}

	// setPausedAt sets the queue's paused_at to the SQL expression at
	// (NULL: resumed), as a pause or resume whose message was lost.
	setPausedAt := func(t *testing.T, b *testBundle, at string) {
		t.Helper()
		_, err := b.db.Pool.Exec(context.Background(), `UPDATE river_queue SET paused_at = `+at+` WHERE name = $1`, queue)
		require.NoError(t, err)
	}

	// waitBlocked waits until a session is blocked by the backend pid.
	waitBlocked := func(t *testing.T, b *testBundle, pid uint32) {
		t.Helper()
		testdb.WaitFor(t, 10*time.Second, "a session blocked by the lock", func() bool {
			return b.db.Count(t, `SELECT count(*) FROM pg_stat_activity WHERE $1::int = ANY(pg_blocking_pids(pid))`, pid) > 0
		})
	}

	t.Run("RepairsMissedPause", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := context.Background()
		pausedAt := pause(t, b)
		late := pausedAt.Add(2 * time.Second)
		start(t, b, pausedAt.Add(-time.Second))
		start(t, b, late)

		missed, err := b.repairer.RunOnce(ctx)
		require.NoError(t, err)
		require.Len(t, missed, 1)
		require.Equal(t, queue, missed[0].Queue)
		require.True(t, pausedAt.Equal(missed[0].PausedAt))
		require.True(t, late.Equal(missed[0].LastStart))
		requireAction(t, next(t, b), riverschema.ActionPause)
		require.Contains(t, b.out.String(), `level=WARN msg="pause repair: a queue paused in River still had jobs started here`)
		require.Contains(t, b.out.String(), "queue="+queue)

		// No start since: the message may have been lost too, and the
		// producer may start nothing more that would show it (chaos
		// scenario database-failover): sent again, at debug level.
		missed = round(t, b)
		require.Len(t, missed, 1)
		require.True(t, late.Equal(missed[0].LastStart))
		requireAction(t, next(t, b), riverschema.ActionPause)
		require.Equal(t, 1, strings.Count(b.out.String(), "level=WARN"))
		require.Contains(t, b.out.String(), `level=DEBUG msg="pause repair: sent a missed pause again (no job of the queue started since)" queue=`+queue)

		// Another late start: sent again, and warned of again.
		start(t, b, late.Add(time.Second))
		requireSent(t, b, round(t, b))
		require.Equal(t, 2, strings.Count(b.out.String(), "level=WARN"))

		// Resumed: nothing sent, and the repeats end.
		setPausedAt(t, b, "NULL")
		require.Empty(t, round(t, b))
		requireNothingSent(t, b)
	})

	// Resumed and paused again between two rounds: the late starts were
	// before the new pause, so the repeats end and nothing is sent.
	t.Run("PausedAgainEndsRepeats", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		pausedAt := pause(t, b)
		start(t, b, pausedAt.Add(2*time.Second))
		requireSent(t, b, round(t, b))

		setPausedAt(t, b, "NULL")
		setPausedAt(t, b, "now()")
		require.Empty(t, round(t, b))
		requireNothingSent(t, b)
	})

	// The repeats end RepeatFor (2 minutes) after the round that saw the
	// last late start: a repeat does not extend them, a late start does.
	t.Run("RepeatsEnd", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		base := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
		clock := base
		b.repairer.SetNow(func() time.Time { return clock })
		roundAt := func(t *testing.T, at time.Duration) []pauserepair.Missed {
			t.Helper()
			clock = base.Add(at)
			return round(t, b)
		}
		pausedAt := pause(t, b)
		start(t, b, pausedAt.Add(2*time.Second))
		requireSent(t, b, roundAt(t, 0))
		requireSent(t, b, roundAt(t, 119*time.Second)) // a repeat
		require.Empty(t, roundAt(t, 120*time.Second))
		requireNothingSent(t, b)

		// A late start again: repeats for two minutes from that round.
		start(t, b, pausedAt.Add(3*time.Second))
		requireSent(t, b, roundAt(t, 150*time.Second))
		requireSent(t, b, roundAt(t, 269*time.Second))
		require.Empty(t, roundAt(t, 270*time.Second))
		requireNothingSent(t, b)
	})

	t.Run("NotMissed", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := context.Background()

		// Not paused.
		start(t, b, time.Now())
		missed, err := b.repairer.RunOnce(ctx)
		require.NoError(t, err)
		require.Empty(t, missed)

		// Paused, the last start within the margin (1 s) of paused_at.
		pausedAt := pause(t, b)
		start(t, b, pausedAt.Add(900*time.Millisecond))
		missed, err = b.repairer.RunOnce(ctx)
		require.NoError(t, err)
		require.Empty(t, missed)
		requireNothingSent(t, b)
		require.NotContains(t, b.out.String(), "pause repair")
	})

	// A resume committed between the round's read and its lock: the
	// locking statement sees the queue resumed and nothing is sent.
	t.Run("ResumedBeforeLock", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		pausedAt := pause(t, b)
		start(t, b, pausedAt.Add(2*time.Second))
		b.repairer.SetBeforeLock(func() {
			_, err := b.db.Pool.Exec(context.Background(), `UPDATE river_queue SET paused_at = NULL WHERE name = $1`, queue)
			require.NoError(t, err)
		})
		missed, err := b.repairer.RunOnce(context.Background())
		require.NoError(t, err)
		require.Empty(t, missed)
		requireNothingSent(t, b)
	})

	// A resume under way (its row updated, not committed) when the round
	// locks: the lock waits for it, the recheck sees the queue resumed,
	// and only the resume's own message is delivered.
	t.Run("ResumeUnderWay", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := context.Background()
		pausedAt := pause(t, b)
		start(t, b, pausedAt.Add(2*time.Second))

		resume, err := b.db.Pool.Begin(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = resume.Rollback(context.Background()) })
		var pid uint32
		require.NoError(t, resume.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
		_, err = resume.Exec(ctx, `UPDATE river_queue SET paused_at = NULL WHERE name = $1`, queue)
		require.NoError(t, err)
		_, err = resume.Exec(ctx, `SELECT pg_notify($1, $2)`, b.channel, `{"action":"resume","queue":"`+queue+`"}`)
		require.NoError(t, err)

		committed := make(chan error, 1)
		b.repairer.SetBeforeLock(func() {
			go func() {
				waitBlocked(t, b, pid)
				committed <- resume.Commit(ctx)
			}()
		})
		missed, err := b.repairer.RunOnce(ctx)
		require.NoError(t, err)
		require.NoError(t, <-committed)
		require.Empty(t, missed)
		requireAction(t, next(t, b), riverschema.ActionResume)
		requireNothingSent(t, b)
	})

	// A resume begun once the round holds its lock (River's QueueResume):
	// its update waits for the round's commit, so the producers get the
	// pause first and the resume last.
	t.Run("ResumeAfterLock", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := context.Background()
		pausedAt := pause(t, b)
		start(t, b, pausedAt.Add(2*time.Second))
		client, err := river.NewClient(riverpgxv5.New(b.db.Pool), &river.Config{Schema: b.db.Schema})
		require.NoError(t, err)

		resumed := make(chan error, 1)
		b.repairer.SetAfterLock(func(tx pgx.Tx) {
			var pid uint32
			require.NoError(t, tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
			go func() { resumed <- client.QueueResume(ctx, queue, nil) }()
			waitBlocked(t, b, pid)
		})
		missed, err := b.repairer.RunOnce(ctx)
		require.NoError(t, err)
		require.Len(t, missed, 1)
		require.NoError(t, <-resumed)
		requireAction(t, next(t, b), riverschema.ActionPause)
		requireAction(t, next(t, b), riverschema.ActionResume)
		require.Equal(t, 0, b.db.Count(t, `SELECT count(*) FROM river_queue WHERE name = $1 AND paused_at IS NOT NULL`, queue))
	})
}
