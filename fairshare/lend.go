package fairshare

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tierq/tierq/routing"
)

// finishedFor is how long a job this process finished counts as finished
// although River may not have written its completion yet: River batches
// completions for up to 250ms; twice that and a margin.
const finishedFor = time.Second

// maxFinished bounds the finished jobs a lending pass names.
const maxFinished = 10_000

// lendState is what the hook and the lending loop share.
type lendState struct {
	cfg  Lend
	wake chan struct{}

	mu       sync.Mutex
	finished []finishedJob // oldest first

	took time.Duration // how long the last lending pass that ran took; under mu
}

type finishedJob struct {
	id int64
	at time.Time
}

func (l *lendState) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// finish records that this process finished job id of the lending queue,
// and wakes the lending loop.
func (l *lendState) finish(id int64) {
	l.mu.Lock()
	if len(l.finished) >= maxFinished {
		l.finished = l.finished[1:]
	}
	l.finished = append(l.finished, finishedJob{id: id, at: time.Now()})
	l.mu.Unlock()
	l.signal()
}

// recent is the ids of the jobs finished in the last finishedFor.
func (l *lendState) recent(now time.Time) []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	keep := 0
	for keep < len(l.finished) && now.Sub(l.finished[keep].at) > finishedFor {
		keep++
	}
	l.finished = l.finished[keep:]
	ids := make([]int64, len(l.finished))
	for i, f := range l.finished {
		ids[i] = f.id
	}
	return ids
}

// LendPass is what one lending pass did.
type LendPass struct {
	// Ran is false when another process was running a lending pass over
	// the queue, or either queue is paused.
	Ran bool
	// Paused is true when either queue is paused in River: nothing was
	// done, and the loop waits for its next tick instead of trying again.
	Paused bool
	// Lent counts the jobs moved into the lending queue, Returned the lent
	// jobs moved back unstarted because paid work waits.
	Lent, Returned int
	// PaidWaiting: paid work waited in the lending queue.
	PaidWaiting bool
}

// LendPass runs one lending pass. It is an error without Config.Lend.
func (a *Admitter) LendPass(ctx context.Context) (LendPass, error) {
	if a.lend == nil {
		return LendPass{}, fmt.Errorf("fair share: no lending configured")
	}
	l := a.lend
	var (
		p        LendPass
		notified int
	)
	began := time.Now()
	locked, err := a.locked(ctx, "lend:"+l.cfg.Queue, false, func(tx pgx.Tx) error {
		// Planned for its arguments at each execution (pgx's unnamed
		// statement): see locked.
		q := a.queues[l.cfg.Queue]
		return tx.QueryRow(ctx, lendSQL, pgx.QueryExecModeCacheDescribe, l.cfg.Queue, l.cfg.From, q.cfg.Workers, l.cfg.Floor,
			l.recent(time.Now()), routing.PriorityLowest, q.localKinds(), q.every).Scan(&p.Ran, &p.Lent, &p.Returned, &p.PaidWaiting, &notified)
	})
	if err != nil {
		return LendPass{}, fmt.Errorf("lending pass over %s: %w", l.cfg.Queue, err)
	}
	p.Paused = !p.Ran && locked // the lock was this process's: a queue is paused
	if p.Ran {
		l.mu.Lock()
		l.took = time.Since(began)
		l.mu.Unlock()
	}
	if p.Ran && a.cfg.Observer != nil {
		a.cfg.Observer.Lend(l.cfg.Queue, p.Lent, p.Returned)
	}
	if from, ok := a.queues[l.cfg.From]; ok && p.Lent > 0 {
		from.signal() // the lent jobs' places in line are free: refill them
	}
	return p, nil
}

// lendLoop runs the lending passes: on a wake-up from the hook (a worker
// of the lending queue finished, or the borrowing queue's workers here are
// all busy), on its own retry, and every Tick.
func (a *Admitter) lendLoop(ctx context.Context) {
	tick := time.NewTicker(a.cfg.Tick)
	defer tick.Stop()
	a.lend.signal()
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.lend.wake:
		case <-tick.C:
		}
		p, err := a.LendPass(ctx)
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			a.cfg.Logger.ErrorContext(ctx, "lending pass", slog.String("queue", a.lend.cfg.Queue), slog.String("error", err.Error()))
		case !p.Ran && !p.Paused:
			a.lend.signal() // another process's pass may have missed what woke this one
		}
		// As after a pass (passRest): a lending pass is planned for its
		// arguments each time, and woken by every paid job that ends, so
		// back to back the lending loops of a busy application kept one
		// to two database backends busy (tierctl bench traffic).
		wait := a.cfg.PassInterval
		if p.Ran {
			a.lend.mu.Lock()
			wait = max(wait, passRest*a.lend.took)
			a.lend.mu.Unlock()
		}
		if wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
	}
}
