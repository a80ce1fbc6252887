// Package fairshare shares a queue's workers among the tenants whose jobs
// wait in it, across every worker process, with River's own fetch.
//
// River fetches a queue's available jobs by (priority, scheduled_at, id):
// one tenant that queues 5,000 jobs puts every other tenant of the same
// priority behind them. Fair share bounds what each tenant has in that line.
// A tenant's window is its max-min fair share of the queue's capacity (the
// workers of every process serving the queue, from their heartbeats) among
// the active tenants of its priority, by weight, default 1 each, at least
// one job: a tenant that wants less than its share by weight has what it
// wants, and the others share the rest by weight, so the line holds the
// capacity's worth of work whenever there is that much. Better priorities'
// demand comes first; a priority left no capacity keeps one job of each of
// its tenants in line. A tenant is active while it has available or held
// jobs in the queue.
// An Admitter runs in every worker process, beside its River client. A pass
// over a queue holds back each tenant's available jobs beyond its window
// (River state pending, marked with jobmeta.HeldAt, worst first in fetch
// order) and admits held jobs, best first, while their tenant's window has
// room, with scheduled_at now(): the back of the line. Each tenant thus has
// as many places in the line as its window, and a place that is fetched is
// refilled at the back: the tenants take turns, each at a rate proportional
// to its weight. A tenant alone has the whole capacity; a tenant whose first
// job arrives waits behind at most about one capacity's worth of jobs,
// however many another tenant has queued. Priority stays strict: River
// fetches a better priority first whatever the windows.
//
// Passes are cheap when nothing contends: a process runs one when one of its
// queues with fair share on has every worker busy (a tenant may be over its
// window) or the last pass saw held jobs (admit as places free; a pass that
// starts holding runs the next itself, since the hook learns of held work
// only when the pass ends), at most one per Config.PassInterval per queue,
// and after a pass that moved nothing no sooner than three times that
// pass's own time (passRest): a pass costs more as tenants grow.
// A tenant alone is never held: it needs no turns. While the last pass found
// one tenant alone and nothing held, the process only looks, at most every
// 10ms, for a job of another tenant inserted since (one index range over
// the new jobs, not the backlog), and the first it finds holds the backlog
// back to its window. Every Config.Tick it looks anyway, and every fifth
// tick runs a full pass. A pass is one statement in a transaction that
// holds the queue's advisory lock; when a process of another replica is
// running one over the same queue, the process tries again a PassInterval
// later, and after each further miss in a row twice as late, up to
// 16 × PassInterval (maxMissBackoff): with many replicas most attempts
// miss, and every pass covers the whole queue whoever runs it.
//
// Nothing is lost or run twice: every move is one UPDATE of the job's row
// between River's own states pending and available, with SKIP LOCKED against
// River's fetch. River's rescuer, cleaner and scheduler leave pending jobs
// alone; River UI shows them, and its retry button makes one available
// (the next pass holds it back again if its tenant is over its window).
// A queue with fair share off releases whatever is still held.
//
// Concurrency caps (package limits) are kept by the database: migration
// 00013's trigger holds a job that becomes available while its tenant's
// running and available jobs in the service's queues are at its cap
// (jobmeta.CapHeldAt beside jobmeta.HeldAt). A pass admits a capped
// tenant's held jobs only up to its room, counts them as demand only up to
// it (a tenant at its cap is not active, and closes no worse priority), and
// counts the capped jobs its process has finished as ended before River
// writes their completion; the end of a capped job refills its tenant's
// place (Refill) and, when the refill cannot, wakes every queue's loop.
// Rate limits (migration 00015) work the same way: a rate-limited tenant
// has room for one job when it has a token and no job waiting to start;
// the start of a rated job refills likewise, and a pass reports when
// the next token is due (Pass.RateWait). Besides the passes, the refill
// (Refill) admits a limited tenant's next job the moment its job ends or
// starts in this process.
package fairshare

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/tierq/tierq/jobmeta"
)

// Defaults of Config.
const (
	DefaultPassInterval = 2 * time.Millisecond
	DefaultTick         = 2 * time.Second
	DefaultHeartbeat    = 5 * time.Second
)

// Queue is the fair-share setting of one queue a process serves.
type Queue struct {
	// Workers is the process's worker count for the queue (River's
	// MaxWorkers): what its heartbeat adds to the queue's capacity, and
	// when every one of them is busy the process looks for tenants over
	// their window.
	Workers int

	// Fair turns fair share on for the queue. When false the process holds
	// nothing back and admits whatever is still held (fair share was on
	// before, in this process or another).
	Fair bool

	// Turns places the queue's jobs by turns (experimental; migration
	// 00017, docs/fairness.md "Fair share by turns") instead of windows:
	// the trigger tierq_tenant_turn writes each job's start-time fair
	// queuing tag into scheduled_at as it becomes available, and the
	// process's placing loop tags the jobs made available before they were
	// due, once due. Fair is then ignored (nothing is held for its turn);
	// the passes only admit what limits hold. Every process serving the
	// queue must agree: the trigger places a queue's jobs while any live
	// heartbeat says Turns.
	Turns bool

	// Kinds are the job kinds the process's River client fetches in the
	// queue: with River's FetchOnlyKnownKinds, the kinds of its registered
	// workers, aliases included. They travel with the heartbeat: a queue's
	// fetchable kinds are those of every process serving it. An available
	// job of a kind no process fetches holds no place in its tenant's
	// window, is never lent, and a held one is made available again
	// (tierq_unfetchable_jobs counts them): no worker would ever take it.
	// Nil: every kind (FetchOnlyKnownKinds off), and then no job is
	// unfetchable for its kind.
	Kinds []string
}

// Config configures an Admitter.
type Config struct {
	// ClientID names the process in fair_share_slots. Default: "fairshare_"
	// and the host name, process id and start time.
	ClientID string

	// Queues are the queues the process serves, by name. Required: at least
	// one.
	Queues map[string]Queue

	// PassInterval is the shortest time between two passes over one queue
	// in this process: how fast held work is admitted as places free, and
	// at most 1/PassInterval statements per second per queue while the
	// queue is contended. Default: DefaultPassInterval (2ms).
	PassInterval time.Duration

	// Tick is how often the process looks at each queue however quiet it
	// is (held jobs nobody admitted: another replica stopped; a newcomer
	// beside a tenant alone whose workers here are not all busy), and runs a
	// full pass every fifth. Default: DefaultTick (2s).
	Tick time.Duration

	// Heartbeat is how often the process records its workers per queue in
	// fair_share_slots. A row counts for three heartbeats, so the
	// capacity of a crashed process stops counting within 3 × Heartbeat.
	// Default: DefaultHeartbeat (5s).
	Heartbeat time.Duration

	// Logger receives pass errors. Default: slog.Default().
	Logger *slog.Logger

	// Lend, when set, lends idle workers of a priority queue to the free
	// jobs of its service's default queue. Optional; nil lends nothing
	// (ADR-16's behaviour: paid workers idle while free work waits).
	Lend *Lend

	// Observer, when set, is told about every pass that ran (package
	// metrics' FairShare exports them). Optional.
	Observer Observer
}

// Lend says which queue lends its idle workers to which.
//
// While no paid job waits in Queue (none available, none held), its idle
// workers take free jobs from From: a lending pass moves as many of From's
// available jobs into Queue as Queue has free workers, never so many that
// more than capacity − Floor lent jobs are in Queue at once (counted across
// every process, from their heartbeats), at Queue's lowest priority and the
// back of its line, so that they never get ahead of a paid job already
// waiting. When paid work arrives, lending stops and lent jobs not yet
// started go back to From: a paid job waits for a worker only when more paid
// jobs arrive at once than Floor, and then at most until the first lent job
// running finishes.
type Lend struct {
	// Queue is the priority queue that lends; one of Config.Queues with
	// workers. Required.
	Queue string
	// From is the queue whose jobs borrow: the service's default queue.
	// Required.
	From string
	// Floor is how many of Queue's workers, across every process, are
	// never lent: paid work arriving finds them free. At least 0, and
	// below the capacity for anything to be lent. Default 0: the caller
	// sets it (config's <NAME>_LEND_FLOOR defaults to 1).
	Floor int
}

// Observer is told what each pass that ran did: the fields of Pass and
// LendPass.
type Observer interface {
	Pass(queue string, held, admitted, tenants, heldTenants, capacity int)
	Lend(queue string, lent, returned int)
}

// CapObserver is an Observer that is also told, after each pass that ran,
// how many tenants with held jobs were at their concurrency cap
// (Pass.AtCap). Optional: an Observer without it is not told.
type CapObserver interface {
	Caps(queue string, atCap int)
}

func (c *Config) withDefaults() *Config {
	out := *c
	if out.ClientID == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "unknown"
		}
		out.ClientID = fmt.Sprintf("fairshare_%s_%d_%d", host, os.Getpid(), time.Now().UnixNano())
	}
	if out.PassInterval == 0 {
		out.PassInterval = DefaultPassInterval
	}
	if out.Tick == 0 {
		out.Tick = DefaultTick
	}
	if out.Heartbeat == 0 {
		out.Heartbeat = DefaultHeartbeat
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return &out
}

// ErrInvalid is returned, wrapped, for a Config that cannot work.
var ErrInvalid = errors.New("invalid fair-share configuration")

func (c *Config) validate() error {
	var errs []error
	if len(c.Queues) == 0 {
		errs = append(errs, errors.New("no queue"))
	}
	for name, q := range c.Queues {
		if name == "" {
			errs = append(errs, errors.New("a queue has no name"))
		}
		if q.Workers < 0 {
			errs = append(errs, fmt.Errorf("queue %s: workers %d below 0", name, q.Workers))
		}
	}
	if c.Lend != nil {
		if q, ok := c.Queues[c.Lend.Queue]; !ok || q.Workers == 0 {
			errs = append(errs, fmt.Errorf("lend: queue %q is not one of the queues with workers", c.Lend.Queue))
		}
		if c.Lend.From == "" || c.Lend.From == c.Lend.Queue {
			errs = append(errs, fmt.Errorf("lend: from queue %q must be another queue", c.Lend.From))
		}
		if c.Lend.Floor < 0 {
			errs = append(errs, fmt.Errorf("lend: floor %d below 0", c.Lend.Floor))
		}
	}
	if c.PassInterval < 0 || c.Tick <= 0 || c.Heartbeat <= 0 {
		errs = append(errs, fmt.Errorf("intervals must be positive (pass %s, tick %s, heartbeat %s)", c.PassInterval, c.Tick, c.Heartbeat))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalid, errors.Join(errs...))
	}
	return nil
}

// Admitter runs fair share for the queues of one worker process. Add its
// Hook to the process's River client, and Run it beside the client.
type Admitter struct {
	cfg      *Config
	pool     *pgxpool.Pool
	queues   map[string]*queueState
	names    []string
	hook     *hook
	lend     *lendState // nil without Config.Lend
	turns    []string   // queues placed by turns
	turnWake chan struct{}
	beaten   chan struct{} // closed once the first heartbeat is recorded
}

// queueState is what the hook and the queue's loop share.
type queueState struct {
	name    string
	cfg     Queue
	kinds   []string     // cfg.Kinds for SQL: never nil
	every   bool         // cfg.Kinds is nil: every kind is fetched
	running atomic.Int64 // jobs of the queue this process works right now
	held    atomic.Bool  // the last pass saw held jobs
	// limitedUntil: at the last pass a concurrency cap or rate limit, not
	// fair share, kept every tenant's held jobs held (the pass held nothing
	// back, Pass.WindowHeld and Pass.Refused were 0), and until this time
	// (Unix nanoseconds; limitedFor after the pass) a job starting or
	// ending wakes no pass for held work: it gives none of them room.
	// Their room comes from a limited job ending or a rated one starting
	// (the refill, which wakes the passes when it cannot admit), a token
	// (the loop's rate timer), or a change of limits or heartbeats. 0: the
	// last pass found work a start or an end may let in.
	limitedUntil atomic.Int64
	wake         chan struct{}
	// capEnd: a job counted against a concurrency cap ended in this
	// process (its tenant has room): it ends a rest (passRest) at once.
	capEnd chan struct{}

	// What the last full pass found when one tenant alone was active and
	// nothing held (Pass.Lone): the loop then checks for a newcomer
	// (loneCheckSQL) instead of passing. Only the queue's loop and Pass
	// touch them, under mu.
	mu        sync.Mutex
	took      time.Duration // how long the last pass that ran took
	lone      bool
	loneName  *string   // nil: no tenant at all
	watermark time.Time // the database's clock, less loneMargin
}

// loneMargin is how far back a lone check looks before the previous one: an
// insert's scheduled_at is its transaction's start, which may come before
// the previous check although it commits after it.
const loneMargin = 100 * time.Millisecond

// fullPassTicks: every how many Ticks a queue's loop runs a full pass even
// when a look finds nothing to do.
const fullPassTicks = 5

// maxMissBackoff caps the doubling of the wait after passes that found
// another process's lock, in a row: at most 2^4 = 16 PassIntervals (32 ms
// at the default), so that a contended queue served by 100 replicas costs
// each of them at most about 30 attempts a second instead of 500.
const maxMissBackoff = 4

// passRest is how many times as long as a pass over a queue took the
// process waits before its next pass over the queue when that pass moved
// nothing, and before its next lending pass: a pass's cost grows with the
// queue's active tenants (about 10 ms at 1,000 on the development
// machine), and woken by every job that starts or ends, passes that found
// nothing to do ran back to back every PassInterval, as lending passes
// did, and took the workers' CPU (tierctl bench traffic). A pass that
// moved jobs is not made to rest: resting after refills, the line ran dry
// between passes (a newcomer's insert found no job in line in bench's
// TestTenantsMeasuresANewcomer under make test's load; again when passes
// that left twice the capacity in line rested too: 20 tenants of one
// place each over 5 workers of 20 ms jobs drain the line in 80 ms, less
// than three slow passes).
const passRest = 3

// restsAfter tells whether the loop rests (passRest) after pass p: a pass
// that ran and moved nothing, unless it found a tenant alone (or none):
// what follows then is a look (loneCheckSQL, one index range over the jobs
// inserted since), not a pass, and a newcomer must be seen within
// loneCheckInterval. Resting there, a worker's first pass, slow while its
// statements are planned cold (264 ms on a fresh schema), kept it from
// looking for 0.8 s while a flood ran first in first out (worker's
// TestLongTenantIDDoesNotStopFairShare and TestFairShareAcrossReplicas).
func restsAfter(p Pass) bool {
	if !p.Ran || p.Paused || p.Checked || p.Lone {
		return false
	}
	return p.Held == 0 && p.Admitted == 0 && p.Yielded == 0
}

// loneCheckInterval is the shortest time between two lone checks of a
// queue in one process: how long a newcomer may wait, when a tenant alone
// floods the queue, before the pass that starts holding the flood back.
const loneCheckInterval = 10 * time.Millisecond

// localKinds is what this process adds to the queue's known kinds in a
// pass: its own, when it has workers there (before its first heartbeat
// lands).
func (q *queueState) localKinds() []string {
	if q.cfg.Workers == 0 {
		return []string{}
	}
	return q.kinds
}

// waiting tells the hook whether a job starting or ending may let a pass
// admit held work: the last pass saw held jobs, and not only of tenants a
// limit bounds (queueState.limitedUntil), or that pass is more than
// limitedFor old. Woken at every job's start and end while capped tenants'
// jobs waited held, passes raced the refill for the same jobs: in tierctl
// bench limits' reaction phase (quick), 11 passes of 6–66 ms in a 445 ms
// window on a 2-core machine, while each refill waited for the CPU.
func (q *queueState) waiting() bool {
	return q.held.Load() && time.Now().UnixNano() >= q.limitedUntil.Load()
}

// limitedFor is how long a pass's finding that only limits hold its
// queue's jobs keeps the hook from waking passes: what the pass did not
// see (a pass of another replica holding jobs for fair share, a refill
// that dropped tenants, an admission the triggers refused) waits at most
// this long for a pass a start or an end wakes, not a Tick.
const limitedFor = 250 * time.Millisecond

func (q *queueState) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// New returns an Admitter of cfg's queues on pool, whose search_path leads
// to the schema of River's tables and tierq's.
func New(pool *pgxpool.Pool, cfg *Config) (*Admitter, error) {
	if cfg == nil {
		return nil, fmt.Errorf("%w: nil config", ErrInvalid)
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	a := &Admitter{cfg: c, pool: pool, queues: map[string]*queueState{}, turnWake: make(chan struct{}, 1), beaten: make(chan struct{})}
	for name, q := range c.Queues {
		if q.Turns {
			q.Fair = false
			a.turns = append(a.turns, name)
		}
		a.queues[name] = &queueState{name: name, cfg: q, kinds: append([]string{}, q.Kinds...), every: q.Kinds == nil, wake: make(chan struct{}, 1), capEnd: make(chan struct{}, 1)}
		a.names = append(a.names, name)
	}
	slices.Sort(a.names)
	slices.Sort(a.turns)
	a.hook = &hook{queues: a.queues, capped: &cappedFinished{}, refill: newRefill(), turnWake: a.turnWake}
	if c.Lend != nil {
		a.lend = &lendState{cfg: *c.Lend, wake: make(chan struct{}, 1)}
		a.hook.lend = a.lend
	}
	return a, nil
}

// ClientID is the name of the process in fair_share_slots.
func (a *Admitter) ClientID() string { return a.cfg.ClientID }

// Hook is the River hook that tells the Admitter when its process starts
// and ends a job: add it to the River client's Config.Hooks.
func (a *Admitter) Hook() rivertype.Hook { return a.hook }

// hook counts the jobs running per queue and wakes a queue's loop when a
// pass may be due.
type hook struct {
	river.HookDefaults
	queues   map[string]*queueState
	lend     *lendState
	capped   *cappedFinished
	refill   *refill
	turnWake chan struct{}
}

var (
	_ rivertype.HookWorkBegin = (*hook)(nil)
	_ rivertype.HookWorkEnd   = (*hook)(nil)
)

// WorkBegin: a job left the line. With held work its tenant's place is
// refilled; with fair share on and every worker busy the line may hold a
// tenant over its window. A queue with fair share off holds nothing back:
// a pass there only admits what is still held, and its busy workers are
// no reason for one (each would read the queue's whole backlog, every
// PassInterval, for nothing).
func (h *hook) WorkBegin(_ context.Context, job *rivertype.JobRow) error {
	q, ok := h.queues[job.Queue]
	if !ok {
		return nil
	}
	running := q.running.Add(1)
	saturated := running >= int64(q.cfg.Workers)
	if q.waiting() || (q.cfg.Fair && saturated) {
		q.signal()
	}
	if bytes.Contains(job.Metadata, ratedKey) {
		// A job charged against its tenant's rate started: the tenant has
		// no job waiting to start any more, and its next may be admitted if
		// it has a token, in any queue of the service: the refill tries,
		// and wakes every queue's loop when it cannot (refillLoop).
		h.refill.add(job.Queue, job.Metadata)
	}
	if h.lend != nil && job.Queue == h.lend.cfg.From && saturated {
		h.lend.signal() // free work waits: perhaps a paid worker is idle
	}
	return nil
}

// WorkEnd: a worker is free; with held work, make sure the line has a job
// for it.
func (h *hook) WorkEnd(_ context.Context, job *rivertype.JobRow, err error) error {
	q, ok := h.queues[job.Queue]
	if !ok {
		return err
	}
	q.running.Add(-1)
	if q.waiting() {
		q.signal()
	}
	if err != nil && q.cfg.Turns {
		select { // a retry or snooze: perhaps due before the placing loop looks again
		case h.turnWake <- struct{}{}:
		default:
		}
	}
	if bytes.Contains(job.Metadata, cappedKey) {
		// A job counted against its tenant's cap ended: room for one of
		// the tenant's held jobs, in any queue of the service. The refill
		// admits it, and wakes every queue's loop when it cannot
		// (refillLoop).
		h.capped.finish(job.ID)
		h.refill.add(job.Queue, job.Metadata)
	}
	if h.lend != nil && job.Queue == h.lend.cfg.Queue {
		h.lend.finish(job.ID) // a paid worker is free: lend it, or keep it for paid work
	}
	return err
}

// wakeAll wakes every queue's loop, ending a rest (passRest): a job
// counted against its tenant's limits started or ended, the refill did not
// admit the tenant's next job, and the tenant may have room in any queue
// of its service, whether or not the last pass here saw held work (another
// replica may have run the passes since).
func (h *hook) wakeAll() {
	for _, other := range h.queues {
		other.signal()
		select {
		case other.capEnd <- struct{}{}:
		default:
		}
	}
}

// cappedKey is how jobmeta.Capped appears in a job's metadata: the job
// counts against its tenant's concurrency cap. ratedKey: jobmeta.Rated, it
// was charged against its tenant's rate limit.
var (
	cappedKey = []byte(`"` + jobmeta.Capped + `"`)
	ratedKey  = []byte(`"` + jobmeta.Rated + `"`)
)

// cappedFinished is the jobs counted against a concurrency cap that this
// process finished in the last finishedFor, whose completion River may not
// have written yet (it batches completions, up to 250ms): a pass names
// them (finishedJobsSetting) so that the worker they freed counts as free
// at once, and the tenant's next job starts within milliseconds of one
// ending instead of a completion batch later. Another process's finished
// jobs count as running until River writes them (that process's own pass
// names them): the cap errs on the safe side.
type cappedFinished struct {
	mu   sync.Mutex
	jobs []finishedJob // oldest first
}

func (c *cappedFinished) finish(id int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.jobs) >= maxFinished {
		c.jobs = c.jobs[1:]
	}
	c.jobs = append(c.jobs, finishedJob{id: id, at: time.Now()})
}

// setting is the ids of the jobs finished in the last finishedFor, as
// finishedJobsSetting reads them ("12,15"): empty when there are none.
func (c *cappedFinished) setting(now time.Time) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	keep := 0
	for keep < len(c.jobs) && now.Sub(c.jobs[keep].at) > finishedFor {
		keep++
	}
	c.jobs = c.jobs[keep:]
	b := make([]byte, 0, 12*len(c.jobs))
	for i, f := range c.jobs {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, f.id, 10)
	}
	return string(b)
}

// Pass is what one pass over a queue did.
type Pass struct {
	// Ran is false when another process was running a pass over the queue
	// (nothing was done), or the queue is paused in River.
	Ran bool
	// Paused is true when the queue is paused in River: nothing was done,
	// and the loop waits for its next tick instead of trying again at once.
	Paused bool
	// Held and Admitted count the jobs the pass held back and admitted.
	Held, Admitted int
	// Tenants is the number of active tenants, HeldTenants of those with
	// held jobs (before the admission), Capacity the queue's capacity.
	Tenants, HeldTenants, Capacity int
	// Yielded counts the places of tenants with jobs running moved behind
	// a tenant that had not had its turn yet (none of its jobs running).
	Yielded int
	// AtCap counts the tenants with held jobs that are at their
	// concurrency cap (package limits): none of their held jobs could be
	// admitted. They count in HeldTenants, not in Tenants.
	AtCap int
	// RateLimited counts the tenants with held jobs that are under their
	// cap (or have none) but may start no job now by their rate limit: no
	// token left, or a job admitted and not started yet. They count in
	// HeldTenants, not in Tenants.
	RateLimited int
	// WindowHeld counts the tenants with held jobs whose window, not a
	// concurrency cap or rate limit, bounded what the pass admitted of
	// them: a job of the queue starting or ending may give them a place.
	// Refused counts the jobs the pass admitted that the triggers held
	// again (another process's admission of the tenant committed first).
	// After a pass that held nothing back, with both 0, a job starting or
	// ending wakes no pass for held work for a while (limitedFor): the
	// refill gives the tenants their room (a busy queue's saturated
	// workers still wake passes for fair share).
	WindowHeld, Refused int
	// RateWait, when above 0, is how long until the next token of the
	// soonest tenant that lacks only a token: the queue's loop runs a pass
	// then.
	RateWait time.Duration
	// Lone is true when one tenant alone (or none) was active and nothing
	// was held: nothing needs holding, and the next passes only look for
	// a newcomer. Checked is true for such a look or check (no pass ran).
	Lone, Checked bool
}

// Pass runs one pass over queue, which must be one of the Admitter's.
func (a *Admitter) Pass(ctx context.Context, queue string) (Pass, error) {
	q, ok := a.queues[queue]
	if !ok {
		return Pass{}, fmt.Errorf("fair share: queue %q is not one of this admitter's", queue)
	}
	return a.pass(ctx, q, full)
}

// passKind is what a call of pass runs over a queue whose last pass found
// a tenant alone (or whose fair share is off): a pass (full), or first a
// look or a check, and a pass only when that finds something to do. Over
// any other queue every kind runs a pass.
type passKind int

const (
	// look is the lone check (loneCheckSQL): the jobs made available since
	// the last look, through River's fetching index.
	look passKind = iota
	// check reads every available job of the queue (checkSQL), and stops
	// at the first a pass would act on: a large backlog of one tenant
	// costs a scan, not a pass's ranking of all of it.
	check
	full
)

// pass runs a pass over q, or, when the last pass found a tenant alone
// (or fair share is off), only the look or the check of kind, unless it
// finds a newcomer or held work.
func (a *Admitter) pass(ctx context.Context, q *queueState, kind passKind) (Pass, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if kind != full && (q.lone || !q.cfg.Fair) {
		var (
			now       time.Time
			held, act bool
			alone     = q.loneName
			err       error
		)
		// Both are planned for their queue at each execution (pgx's
		// unnamed statement, never a cached generic plan): generic, the
		// look's EXISTS over the jobs made available since the watermark
		// was costed as finding one early, and read every job of every
		// queue instead of the queue's few through River's fetching index
		// (TestLooksArePlannedForTheirQueue).
		if kind == look {
			var newcomer bool
			err = a.pool.QueryRow(ctx, loneCheckSQL, pgx.QueryExecModeCacheDescribe, q.name, q.watermark, q.loneName, q.kinds, q.every).Scan(&now, &held, &newcomer, &alone)
			// Without fair share only held work (left from when it was
			// on) needs a pass: to release it.
			act = newcomer && q.cfg.Fair
		} else {
			err = a.pool.QueryRow(ctx, checkSQL, pgx.QueryExecModeCacheDescribe, q.name, q.loneName, q.cfg.Fair, q.kinds, q.every).Scan(&now, &held, &act)
		}
		if err != nil {
			return Pass{}, fmt.Errorf("fair share check of %s: %w", q.name, err)
		}
		if !held && !act {
			q.watermark, q.loneName = now.Add(-loneMargin), alone
			return Pass{Ran: true, Lone: true, Checked: true}, nil
		}
	}
	var (
		p        Pass
		notified int
		lone     *string
		now      time.Time
		rateWait *float64
	)
	began := time.Now()
	locked, err := a.locked(ctx, q.name, true, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, passSQL, q.name, q.cfg.Workers, q.cfg.Fair, q.localKinds(), q.every && q.cfg.Workers > 0).Scan(
			&p.Ran, &p.Held, &p.Admitted, &p.Tenants, &p.HeldTenants, &p.Capacity, &notified, &lone, &now, &p.Yielded, &p.AtCap, &p.RateLimited, &rateWait, &p.WindowHeld, &p.Refused)
	}, a.hook.capped.setting(time.Now()))
	if err != nil {
		return Pass{}, fmt.Errorf("fair share pass over %s: %w", q.name, err)
	}
	if !p.Ran {
		p.Paused = locked // the lock was this process's: the queue is paused
		return p, nil
	}
	q.took = time.Since(began)
	if rateWait != nil {
		// At least a millisecond: the bucket's refill is computed from the
		// database's clock, and a pass a hair early finds no token.
		p.RateWait = max(time.Duration(*rateWait*float64(time.Second)), 0) + time.Millisecond
	}
	p.Lone = p.Tenants <= 1 && p.Held == 0 && p.HeldTenants == 0
	q.lone, q.loneName, q.watermark = p.Lone, lone, now.Add(-loneMargin)
	if a.cfg.Observer != nil {
		a.cfg.Observer.Pass(q.name, p.Held, p.Admitted, p.Tenants, p.HeldTenants, p.Capacity)
		if c, ok := a.cfg.Observer.(CapObserver); ok {
			c.Caps(q.name, p.AtCap)
		}
	}
	// Held work remains when the pass held some back, or a tenant with
	// held jobs had no room (it may have had room for all of them: the
	// next pass finds out, at the cost of one statement).
	held := p.Held > 0 || p.HeldTenants > 0
	var until int64
	if p.Held == 0 && p.WindowHeld == 0 && p.Refused == 0 && p.HeldTenants > 0 {
		until = time.Now().Add(limitedFor).UnixNano()
	}
	if q.limitedUntil.Swap(until) != 0 && until == 0 && held {
		// As with held below: the hook kept quiet while this pass ran.
		q.signal()
	}
	// The hook wakes the loop on held work only once held is set: while
	// this pass ran, the workers may have fetched and finished every job
	// it left in the line, and woken nobody (short jobs never have every
	// worker busy at once). Nothing else would then run a pass before the
	// next Tick, with work held and the workers idle: look again.
	if !q.held.Swap(held) && held {
		q.signal()
	}
	if a.lend != nil && q.name == a.lend.cfg.From && p.Admitted > 0 {
		a.lend.signal() // jobs to borrow
	}
	return p, nil
}

// locked runs pass in a transaction that holds the advisory lock of key
// (lockSQL) and returns true, or does nothing and returns false when
// another process holds it.
//
// The transaction runs with JIT off (sent in one batch with the lock). A
// pass runs up to 1/PassInterval times a second, but the planner sizes it
// from river_job's statistics, which a flood makes large: above
// jit_above_cost PostgreSQL compiles it with LLVM at every execution, for
// far longer than it runs (tierctl bench throughput, 20,000 queued no-op
// jobs: 1.3–1.8 s a pass, against 4–30 ms without JIT).
//
// With generic true it also plans the pass once per connection (a generic plan): by default
// PostgreSQL plans a prepared statement afresh at each of a connection's
// first five executions before it settles on the generic plan, and a
// pass's statement is large: 2–11 ms of server CPU each (the server's
// statement log), taken from the workers' fetches on a small machine at
// every new connection of the pool. The generic plan is the one
// PostgreSQL picks from the sixth execution on anyway: the passes'
// parameters (a queue, a worker count, a switch) never make one plan
// better than another (TestPassIsPlannedOnce).
//
// Only a pass (generic true) plans that way. A lending pass's statement
// must not, and is sent unnamed so that PostgreSQL plans it for its
// arguments each time: generic, its EXISTS over the paid work waiting in
// the lending queue was costed as finding a row early and read every job
// of every queue (14–19 ms over a 50,000-job free backlog, against
// 0.2–0.4 ms planned for its parameters; TestLendingIsPlannedForItsQueues).
//
// finished, when not empty, is the jobs this process has finished whose
// completion River may not have written yet (capped.setting): set for the
// transaction as finishedJobsSetting, so that they no longer count against
// their tenants' concurrency caps, in the pass and in migration 00013's
// trigger.
func (a *Admitter) locked(ctx context.Context, key string, generic bool, pass func(tx pgx.Tx) error, finished ...string) (bool, error) {
	var ok bool
	err := pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		batch := &pgx.Batch{}
		batch.Queue(`SET LOCAL jit = off`)
		if generic {
			batch.Queue(`SET LOCAL plan_cache_mode = force_generic_plan`)
		}
		if len(finished) > 0 && finished[0] != "" {
			batch.Queue(`SELECT set_config('`+finishedJobsSetting+`', $1, true)`, finished[0])
		}
		batch.Queue(lockSQL, key).QueryRow(func(row pgx.Row) error { return row.Scan(&ok) })
		if err := tx.SendBatch(ctx, batch).Close(); err != nil {
			return err
		}
		if !ok {
			return nil
		}
		return pass(tx)
	})
	return ok, err
}

// Run runs the Admitter until ctx ends: a loop per queue, and the
// heartbeat. It returns when every loop has stopped, after deleting the
// process's heartbeat rows.
func (a *Admitter) Run(ctx context.Context) {
	done := make(chan struct{}, len(a.names)+2)
	for i, name := range a.names {
		go func() {
			defer func() { done <- struct{}{} }()
			a.loop(ctx, a.queues[name], tickOffset(a.cfg.Tick, i, len(a.names)))
		}()
	}
	if a.lend != nil {
		go func() {
			defer func() { done <- struct{}{} }()
			a.lendLoop(ctx)
		}()
	}
	go func() {
		defer func() { done <- struct{}{} }()
		a.refillLoop(ctx)
	}()
	if len(a.turns) > 0 {
		go func() {
			defer func() { done <- struct{}{} }()
			a.placeLoop(ctx)
		}()
	}
	a.heartbeat(ctx)
	for range a.names {
		<-done
	}
	if a.lend != nil {
		<-done
	}
	<-done // the refill loop
	if len(a.turns) > 0 {
		<-done
	}
	leaveCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := a.pool.Exec(leaveCtx, leaveSQL, a.cfg.ClientID); err != nil {
		a.cfg.Logger.WarnContext(leaveCtx, "fair share: delete heartbeat", slog.String("error", err.Error()))
	}
}

// tickOffset is how much later than the first queue's the i-th of n
// queues' loop ticks: the loops of one process tick at even intervals, not
// all at once. A full pass plans a large statement (3–7 ms of server CPU
// at bind on the development machine, from the server's statement log);
// with every loop on one ticker phase, a process's queues ran their full
// passes at the same instant, every fifth Tick, and took both cores of a
// 2-core machine together.
func tickOffset(tick time.Duration, i, n int) time.Duration {
	if n <= 1 {
		return 0
	}
	return tick * time.Duration(i) / time.Duration(n)
}

// loop runs the passes over one queue: on a wake-up from the hook, on its
// own retry, and every Tick, the first Tick offset later.
func (a *Admitter) loop(ctx context.Context, q *queueState, offset time.Duration) {
	tick := time.NewTicker(a.cfg.Tick + offset)
	defer tick.Stop()
	offsetDone := offset == 0
	q.signal() // a first pass at start: held work left by a stopped process
	ticks, first := 0, true
	misses := 0 // lock misses in a row
	// rate fires when the soonest rate-limited tenant's next token is due
	// (Pass.RateWait); nil channel while none waits for one.
	var (
		rateTimer *time.Timer
		rate      <-chan time.Time
	)
	defer func() {
		if rateTimer != nil {
			rateTimer.Stop()
		}
	}()
	for {
		kind := look
		if first { // nothing known yet
			kind, first = full, false
		}
		select {
		case <-ctx.Done():
			return
		case <-q.wake:
		case <-rate:
			rate = nil
		case <-tick.C:
			if !offsetDone {
				tick.Reset(a.cfg.Tick)
				offsetDone = true
			}
			// A tick looks (a newcomer, held work); every fullPassTicks-th
			// checks the whole queue: what a look misses, a job made
			// available with an old scheduled_at.
			ticks++
			if ticks%fullPassTicks == 0 {
				if kind == look {
					kind = check
				}
				if n, err := a.release(ctx, q); err != nil && ctx.Err() == nil {
					a.cfg.Logger.ErrorContext(ctx, "fair share release", slog.String("queue", q.name), slog.String("error", err.Error()))
				} else if n > 0 {
					a.cfg.Logger.WarnContext(ctx, "fair share: held jobs of kinds no worker of the queue fetches made available",
						slog.String("queue", q.name), slog.Int("num_released", n))
				}
			}
		}
		p, err := a.pass(ctx, q, kind)
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			a.cfg.Logger.ErrorContext(ctx, "fair share pass", slog.String("queue", q.name), slog.String("error", err.Error()))
		case !p.Ran && !p.Paused:
			q.signal() // another process's pass may have missed what woke this one
			misses++
		default:
			misses = 0
		}
		if err == nil && p.Ran && !p.Checked {
			rate = nil
			if rateTimer != nil {
				rateTimer.Stop()
			}
			if p.RateWait > 0 {
				rateTimer = time.NewTimer(p.RateWait)
				rate = rateTimer.C
			}
		}
		wait := a.cfg.PassInterval << min(misses, maxMissBackoff)
		if p.Checked {
			wait = max(wait, loneCheckInterval)
		} else if restsAfter(p) {
			// A pass that moved nothing rests (passRest): one that refilled
			// the line is followed by the next as soon as a job starts or
			// ends, so that the line never runs dry for want of a pass.
			q.mu.Lock()
			took := q.took
			q.mu.Unlock()
			wait = max(wait, passRest*took)
		}
		if wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			case <-q.capEnd:
				// A limited job started or ended: its tenant's next job
				// should start within milliseconds, not after a rest.
			case <-rate:
				rate = nil // a token is due: pass now
				q.signal()
			}
		}
	}
}

// release makes available the held jobs of q of kinds no worker of q
// fetches (releaseSQL) and returns how many.
func (a *Admitter) release(ctx context.Context, q *queueState) (int, error) {
	if q.every {
		return 0, nil // this process fetches every kind: none is unknown
	}
	var n int
	// Planned for its arguments (pgx's unnamed statement): generic, the
	// planner may not see that every=true reads nothing.
	err := a.pool.QueryRow(ctx, releaseSQL, pgx.QueryExecModeCacheDescribe, q.name, q.localKinds(), false).Scan(&n)
	return n, err
}

// heartbeat records the process's workers per queue every Heartbeat until
// ctx ends.
func (a *Admitter) heartbeat(ctx context.Context) {
	slots := make([]int32, len(a.names))
	kinds := make([]string, len(a.names))
	turns := make([]bool, len(a.names))
	for i, name := range a.names {
		q := a.queues[name]
		turns[i] = q.cfg.Turns
		slots[i] = int32(q.cfg.Workers) //nolint:gosec // at most service.MaxQueueWorkers
		k := []byte("null")
		if !q.every {
			k, _ = json.Marshal(q.kinds) // strings: never fails
		}
		kinds[i] = string(k)
	}
	lease := (3 * a.cfg.Heartbeat).Seconds()
	ticker := time.NewTicker(a.cfg.Heartbeat)
	defer ticker.Stop()
	beaten := false
	for {
		if _, err := a.pool.Exec(ctx, heartbeatSQL, a.cfg.ClientID, a.names, slots, lease, kinds, turns); err != nil && ctx.Err() == nil {
			a.cfg.Logger.ErrorContext(ctx, "fair share heartbeat", slog.String("error", err.Error()))
		} else if err == nil && !beaten {
			beaten = true
			close(a.beaten)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
