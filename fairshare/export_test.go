package fairshare

import "context"

// PassSQL is the pass statement, for EXPLAIN in benchmarks.
var PassSQL = passSQL

// CheckSQL is a tick's check of a queue of one tenant, for benchmarks.
var CheckSQL = checkSQL

// LoneCheckSQL is a look at a queue of one tenant, for benchmarks.
var LoneCheckSQL = loneCheckSQL

// Release runs the release of held jobs of unknown kinds over queue.
func (a *Admitter) Release(ctx context.Context, queue string) (int, error) {
	return a.release(ctx, a.queues[queue])
}

// Waiting tells whether the hook wakes queue's loop for a pass when a job
// of the queue starts or ends.
func (a *Admitter) Waiting(queue string) bool { return a.queues[queue].waiting() }

// Woken reports whether queue's loop has a wake-up waiting, and takes it
// (no loop runs in these tests).
func (a *Admitter) Woken(queue string) bool {
	select {
	case <-a.queues[queue].wake:
		return true
	default:
		return false
	}
}

// EndLimited ends the quiet time of queue after a pass that found only
// limits holding its jobs, as limitedFor passing does.
func (a *Admitter) EndLimited(queue string) { a.queues[queue].limitedUntil.Store(1) }

// PlaceBacklog places the backlog of the queues placed by turns that no
// other live process places (the placing loop's first step).
func (a *Admitter) PlaceBacklog(ctx context.Context) (int64, error) {
	return a.placeBacklog(ctx, a.pool)
}
