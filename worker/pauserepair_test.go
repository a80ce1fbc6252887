package worker_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/proctest"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/tiers"
)

// controlHandler is a text handler that also lets through River's debug
// records of a producer applying a pause or a resume ("producer: Paused",
// "…: Resumed"), and no other debug record: the test waits on them.
type controlHandler struct{ slog.Handler }

func (h controlHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h controlHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelInfo && !strings.HasSuffix(r.Message, ": Paused") && !strings.HasSuffix(r.Message, ": Resumed") {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h controlHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return controlHandler{h.Handler.WithAttrs(attrs)}
}

func (h controlHandler) WithGroup(name string) slog.Handler {
	return controlHandler{h.Handler.WithGroup(name)}
}

// TestPauseRepair: a worker busy with a stream of short jobs whose queue is
// paused without River's notification (a pause sent while its LISTEN
// connection was down: the row's paused_at set, nothing sent) stops
// starting jobs of it within 5 s of paused_at, instead of at River's poll
// a minute later, and logs the repair; River's resume starts it again.
func TestPauseRepair(t *testing.T) {
	t.Parallel()
	b := setupFair(t)
	ctx := context.Background()
	out := b.startReplicaLogging(t, func(w io.Writer) slog.Handler {
		return controlHandler{slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug})}
	}, "MAILER_QUEUE_PRIORITY_WORKERS=2")
	b.waitCapacity(t, 2)
	b.queue(t, "a", tiers.Pro, 3000, 10)
	testdb.WaitFor(t, 20*time.Second, "jobs started", func() bool {
		return b.db.Count(t, `SELECT count(*) FROM river_job WHERE queue = 'mail_priority' AND attempted_at IS NOT NULL`) >= 20
	})

	// The lost pause.
	var pausedAt time.Time
	require.NoError(t, b.db.Pool.QueryRow(ctx,
		`UPDATE river_queue SET paused_at = now() WHERE name = 'mail_priority' RETURNING paused_at`).Scan(&pausedAt))

	proctest.WaitOutput(t, out, `level=WARN msg="pause repair: a queue paused in River still had jobs started here`, 10*time.Second)
	require.Contains(t, out.String(), "queue=mail_priority")
	// River's producer applied it: it starts nothing more (it has started
	// what its last fetch returned: their attempted_at is written).
	proctest.WaitOutput(t, out, `: Paused" queue=mail_priority`, 10*time.Second)

	lastStart := func() time.Time {
		var last time.Time
		require.NoError(t, b.db.Pool.QueryRow(ctx,
			`SELECT max(attempted_at) FROM river_job WHERE queue = 'mail_priority'`).Scan(&last))
		return last
	}
	last := lastStart()
	afterPause := b.db.Count(t, `SELECT count(*) FROM river_job WHERE queue = 'mail_priority' AND attempted_at > $1`, pausedAt)
	t.Logf("jobs started until %s after paused_at (%d after it)", last.Sub(pausedAt).Round(time.Millisecond), afterPause)
	require.Less(t, last.Sub(pausedAt), 5*time.Second, "the worker went on starting jobs of the paused queue")
	require.Positive(t, b.db.Count(t, `SELECT count(*) FROM river_job WHERE queue = 'mail_priority' AND state = 'available'`),
		"jobs are left: the queue is paused, not empty")

	// River's own resume (which notifies): the jobs flow again.
	var resumedAt time.Time
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT now()`).Scan(&resumedAt))
	require.True(t, lastStart().Equal(last), "a job started while paused")
	require.NoError(t, b.db.Producer(t).QueueResume(ctx, "mail_priority", nil))
	proctest.WaitOutput(t, out, `: Resumed" queue=mail_priority`, 10*time.Second)
	testdb.WaitFor(t, 10*time.Second, "a job started after the resume", func() bool {
		return lastStart().After(resumedAt)
	})
}
