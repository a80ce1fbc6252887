// Package pauserepair repairs a queue pause that a worker process's River
// producers missed.
//
// River tells producers that a queue was paused by a notification on its
// control channel (riverschema.ControlTopic), sent in the transaction that
// sets river_queue.paused_at. A notification sent while a process's LISTEN
// connection is down (a database failover, a network blip) is lost for
// that process, and River's fallback, a read of the queue's row by each
// producer, runs only every minute (River's NotificationPollInterval, not
// settable through river.Config): the process goes on fetching from a
// queue that is paused (chaos scenario database-failover: about 40 s, and
// hundreds of jobs started, after a pause sent around the failover).
//
// A Repairer watches for that: its Hook records, per queue the process
// serves, the latest attempted_at of the jobs it started (database time,
// set by River's fetch). Every Config.Interval it reads river_queue for the
// queues with starts it has not checked yet; a start later than the
// queue's paused_at by more than Config.Margin is a fetch made after the
// pause by a producer that did not know of it. For such a queue it sends
// River's pause message again (riverschema.NotifyPauseSQL) and logs a
// warning (queue, paused_at, last_start). River's producers apply a pause
// once: those that have it already ignore the message. When the notifier
// is still down the message is lost too, and the producer may start
// nothing more of the queue (its jobs ran out, or were cancelled) that
// would show it: so every round sends it again, while the queue stays
// paused, for Config.RepeatFor (two minutes) after the round that saw the
// last late start (by then two of River's polls of the queue's row have
// come, one of which may have failed with the database). A missed pause
// holds within about one Interval of the LISTEN connection's return, when
// that is within RepeatFor, instead of up to River's minute (chaos
// scenario database-failover).
//
// The message is sent only while the queue is still paused, and a resume
// cannot be overtaken by it: see Repairer.repair.
//
// A lost resume is not repaired: a producer's paused state leaves no trace
// in the database (a paused producer starts nothing, as one with an empty
// queue), so a process that missed a resume stays idle on that queue until
// River's poll, up to a minute. Cancellation of running jobs is not
// repaired either (River's poll of cancel requests, every minute).
package pauserepair

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/tierq/tierq/internal/riverschema"
)

// Defaults of Config.
const (
	// DefaultInterval is Config.Interval's default.
	DefaultInterval = 2 * time.Second
	// DefaultMargin is Config.Margin's default.
	DefaultMargin = time.Second
	// DefaultRepeatFor is Config.RepeatFor's default: twice River's
	// NotificationPollInterval (a minute), the period of each producer's
	// read of its queue's row, so that one failed read is covered.
	DefaultRepeatFor = 2 * time.Minute
)

// Config configures a Repairer.
type Config struct {
	// Queues are the queues the process serves: the Hook records the
	// starts of their jobs, others are ignored. Required.
	Queues []string
	// Interval is how often the Repairer checks the queues whose jobs
	// started since its last check. Default DefaultInterval (2 s).
	Interval time.Duration
	// Margin is how long after a queue's paused_at a job of it may still
	// start without the pause having been missed: the pause notification's
	// way to the producers, and a fetch already under way when it arrived.
	// Default DefaultMargin (1 s).
	Margin time.Duration
	// RepeatFor is how long after the round that saw the last late start
	// of a queue the rounds go on sending its pause, while the queue
	// stays paused (since before that start): the process's LISTEN
	// connection may come back after the first message, with no job
	// started since. Default DefaultRepeatFor (2 minutes).
	RepeatFor time.Duration
	// Logger logs the repairs (warnings) and failed checks. Default
	// slog.Default().
	Logger *slog.Logger
}

// WithDefaults is cfg with the defaults of its unset fields.
func (cfg Config) WithDefaults() Config {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Margin <= 0 {
		cfg.Margin = DefaultMargin
	}
	if cfg.RepeatFor <= 0 {
		cfg.RepeatFor = DefaultRepeatFor
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg
}

// Repairer re-sends River's pause message for the queues whose producers
// in this process missed it. Add its Hook to the River client's
// Config.Hooks and run Run beside the client.
type Repairer struct {
	pool *pgxpool.Pool
	cfg  Config
	hook *hook
	// checked is, per queue, the latest start (unix microseconds) a round
	// has checked. Owned by the goroutine that runs the rounds.
	checked map[string]int64
	// repeating is, per queue whose missed pause a round sent, the start
	// that showed the miss and until when the rounds send it again. Owned
	// by the goroutine that runs the rounds.
	repeating map[string]repeat
	// beforeLock and afterLock, when set (tests), run in repair before
	// the transaction takes its row locks and after it has them.
	// now is the clock of the repeats' ends (tests set it).
	beforeLock func()
	afterLock  func(tx pgx.Tx)
	now        func() time.Time
}

// New returns a Repairer of cfg (with its defaults) on pool, whose
// connections' search_path is the schema of River's tables.
func New(pool *pgxpool.Pool, cfg Config) (*Repairer, error) {
	cfg = cfg.WithDefaults()
	if len(cfg.Queues) == 0 {
		return nil, errors.New("pauserepair: Config.Queues is empty")
	}
	h := &hook{latest: map[string]*atomic.Int64{}}
	for _, q := range cfg.Queues {
		h.latest[q] = &atomic.Int64{}
	}
	return &Repairer{pool: pool, cfg: cfg, hook: h, checked: map[string]int64{}, repeating: map[string]repeat{}, now: time.Now}, nil
}

// repeat is a missed pause the rounds send again.
type repeat struct {
	start time.Time // the latest start that showed the miss
	until time.Time // the end of the repeats (Repairer.now)
}

// Hook is the River hook that records the jobs' starts: add it to the
// River client's Config.Hooks.
func (r *Repairer) Hook() rivertype.Hook { return r.hook }

// hook records per queue the latest attempted_at of the jobs started.
type hook struct {
	river.HookDefaults
	// latest is, per queue served (fixed at New), the latest attempted_at
	// seen, in unix microseconds (PostgreSQL's precision).
	latest map[string]*atomic.Int64
}

var _ rivertype.HookWorkBegin = (*hook)(nil)

// WorkBegin records job's attempted_at, when later than its queue's latest.
func (h *hook) WorkBegin(_ context.Context, job *rivertype.JobRow) error {
	latest, ok := h.latest[job.Queue]
	if !ok || job.AttemptedAt == nil {
		return nil
	}
	at := job.AttemptedAt.UnixMicro()
	for {
		old := latest.Load()
		if at <= old || latest.CompareAndSwap(old, at) {
			return nil
		}
	}
}

// Run checks every Config.Interval until ctx ends, then returns nil. A
// failed check is logged and tried again at the next tick.
func (r *Repairer) Run(ctx context.Context) error {
	ticker := time.NewTicker(r.cfg.Interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
		if _, err := r.runOnce(ctx); err != nil && ctx.Err() == nil {
			r.cfg.Logger.ErrorContext(ctx, "pause repair: check failed", slog.String("error", err.Error()))
		}
	}
}

// missedSQL selects the queues of $1 that are paused and whose latest
// start, in $2, is later than their paused_at by more than $3
// microseconds. river_queue's primary key (name) finds each row.
const missedSQL = `
SELECT q.` + riverschema.QueueName + `, q.` + riverschema.QueuePausedAt + `, s.started_at
FROM unnest($1::text[], $2::timestamptz[]) AS s (name, started_at)
JOIN ` + riverschema.QueueTable + ` AS q ON q.` + riverschema.QueueName + ` = s.name
WHERE q.` + riverschema.QueuePausedAt + ` IS NOT NULL
  AND s.started_at > q.` + riverschema.QueuePausedAt + ` + $3::bigint * interval '1 microsecond'`

// lockMissedSQL is missedSQL locking the rows it selects FOR SHARE. A
// row that a concurrent transaction (a resume) updated is waited for,
// and then selected only if its new version still matches (READ
// COMMITTED's recheck of the WHERE clause).
const lockMissedSQL = missedSQL + `
ORDER BY q.` + riverschema.QueueName + `
FOR SHARE OF q`

// notifySQL is the statement that sends River's pause message for each
// queue of $1 (a function: riverschema.NotifyPauseSQL builds SQL of its
// argument).
func notifySQL() string {
	return `SELECT ` + riverschema.NotifyPauseSQL("n.name") + ` FROM unnest($1::text[]) AS n (name)`
}

// Missed is one queue whose producer here missed its pause.
type Missed struct {
	Queue     string
	PausedAt  time.Time
	LastStart time.Time
}

// runOnce checks the queues with starts since the last round, and those
// whose missed pause is repeated, and repairs those that missed their
// pause; it returns them.
func (r *Repairer) runOnce(ctx context.Context) ([]Missed, error) {
	now := r.now()
	var names []string
	var starts []time.Time
	seen := map[string]int64{}
	for q, latest := range r.hook.latest {
		at := latest.Load()
		if at == 0 || at <= r.checked[q] {
			continue
		}
		names = append(names, q)
		starts = append(starts, time.UnixMicro(at))
		seen[q] = at
	}
	for q, rep := range r.repeating {
		switch {
		case !now.Before(rep.until):
			delete(r.repeating, q)
		case seen[q] == 0:
			names = append(names, q)
			starts = append(starts, rep.start)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	rows, err := r.pool.Query(ctx, missedSQL, names, starts, r.cfg.Margin.Microseconds())
	if err != nil {
		return nil, fmt.Errorf("pause repair: read queues: %w", err)
	}
	missed, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Missed])
	if err != nil {
		return nil, fmt.Errorf("pause repair: read queues: %w", err)
	}
	if len(missed) > 0 {
		if missed, err = r.repair(ctx, names, starts); err != nil {
			return nil, err
		}
	}
	for q, at := range seen {
		r.checked[q] = at
	}
	// A queue resumed, or paused again after the start that showed the
	// miss, is repeated no more.
	sent := map[string]bool{}
	for _, m := range missed {
		sent[m.Queue] = true
	}
	for q := range r.repeating {
		if !sent[q] {
			delete(r.repeating, q)
		}
	}
	for _, m := range missed {
		if seen[m.Queue] == 0 {
			r.cfg.Logger.DebugContext(ctx, "pause repair: sent a missed pause again (no job of the queue started since)",
				slog.String("queue", m.Queue), slog.Time("paused_at", m.PausedAt), slog.Time("last_start", m.LastStart))
			continue
		}
		r.repeating[m.Queue] = repeat{start: m.LastStart, until: now.Add(r.cfg.RepeatFor)}
		r.cfg.Logger.WarnContext(ctx, "pause repair: a queue paused in River still had jobs started here: this process missed River's pause notification (its LISTEN connection was down?); sent it again",
			slog.String("queue", m.Queue), slog.Time("paused_at", m.PausedAt), slog.Time("last_start", m.LastStart),
			slog.Duration("started_after_pause", m.LastStart.Sub(m.PausedAt)))
	}
	return missed, nil
}

// repair sends River's pause message for the queues of names that still
// missed their pause (starts are their latest starts), in one transaction
// that first locks their river_queue rows FOR SHARE, and returns them.
//
// The lock is what keeps a stale pause from undoing a resume. A NOTIFY is
// delivered when its transaction commits, and PostgreSQL delivers the
// notifications of transactions in their commit order. A resume
// (River's QueueResume) updates the row and notifies in one transaction:
//   - committed before the lock is taken: the locking statement sees
//     paused_at NULL and nothing is sent;
//   - under way when the lock is taken: the statement waits for it, then
//     rechecks the new row, sees paused_at NULL and sends nothing;
//   - begun after the lock is taken: its UPDATE waits for this
//     transaction to end, so its resume message is delivered after the
//     pause message, and the producers end resumed.
//
// The first read in runOnce takes no lock and may be stale: it only
// decides whether to come here.
func (r *Repairer) repair(ctx context.Context, names []string, starts []time.Time) ([]Missed, error) {
	if r.beforeLock != nil {
		r.beforeLock()
	}
	var missed []Missed
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, lockMissedSQL, names, starts, r.cfg.Margin.Microseconds())
		if err != nil {
			return err
		}
		if missed, err = pgx.CollectRows(rows, pgx.RowToStructByPos[Missed]); err != nil {
			return err
		}
		if r.afterLock != nil {
			r.afterLock(tx)
		}
		if len(missed) == 0 {
			return nil
		}
		queues := make([]string, len(missed))
		for i, m := range missed {
			queues[i] = m.Queue
		}
		_, err = tx.Exec(ctx, notifySQL(), queues)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pause repair: notify: %w", err)
	}
	return missed, nil
}
