package fairshare_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/fairshare"
	"github.com/tierq/tierq/internal/testdb"
)

// The rows production sends beside the load-test workload's: retries and
// snoozes River wrote available a few seconds ahead, jobs of kinds no
// worker of the queue fetches, jobs held before they were due, tenant ids
// of any length.

// fetchedKind is the one kind the admitters of these tests fetch.
const fetchedKind = "fair_test"

// setupKinds is setup with the admitter fetching only fetchedKind, as a
// worker deployment does (River's FetchOnlyKnownKinds).
func setupKinds(t *testing.T, workers int) *bundle {
	t.Helper()
	db := testdb.New(t)
	a, err := fairshare.New(db.Pool, &fairshare.Config{
		Queues: map[string]fairshare.Queue{queue: {Workers: workers, Fair: true, Kinds: []string{fetchedKind}}},
	})
	require.NoError(t, err)
	return &bundle{db: db, admitter: a}
}

// row is one river_job row of the queue, written directly.
type row struct {
	tenant   string
	kind     string // fetchedKind when empty
	state    string // available when empty
	held     bool   // pending, marked held by fair share
	priority int    // 2 when 0
	at       string // scheduled_at, an SQL expression; now() - 1 minute when empty
}

// add inserts n copies of r.
func (b *bundle) add(t *testing.T, r row, n int) {
	t.Helper()
	if r.kind == "" {
		r.kind = fetchedKind
	}
	if r.state == "" {
		r.state = "available"
	}
	if r.priority == 0 {
		r.priority = 2
	}
	if r.at == "" {
		r.at = "now() - interval '1 minute'"
	}
	meta := `jsonb_build_object('tierq:tenant', $3::text)`
	if r.held {
		r.state = "pending"
		meta += ` || jsonb_build_object('tierq:held_at', now())`
	}
	attempted := "NULL"
	if r.state == "running" {
		attempted = "now()"
	}
	_, err := b.db.Pool.Exec(context.Background(), `
		INSERT INTO river_job (kind, args, queue, priority, state, scheduled_at, attempted_at, max_attempts, metadata)
		SELECT $1, '{}', $2, $4, $5::river_job_state, `+r.at+` + i * interval '1 microsecond', `+attempted+`, 25, `+meta+`
		FROM generate_series(1, $6) AS i`, r.kind, queue, r.tenant, r.priority, r.state, n)
	require.NoError(t, err)
}

// fetchable is how many of the queue's jobs River's fetch would take now.
func (b *bundle) fetchable(t *testing.T) int {
	t.Helper()
	return b.db.Count(t, `SELECT count(*) FROM river_job
		WHERE state = 'available' AND queue = $1 AND scheduled_at <= now() AND kind = $2`, queue, fetchedKind)
}

func TestPassCountsOnlyFetchableWork(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// Before: the two retries filled a's window (capacity 2, a alone: 2),
	// nothing was admitted, and both workers idled until they were due.
	t.Run("RetriesNotDueHoldNoPlace", func(t *testing.T) {
		t.Parallel()
		b := setupKinds(t, 2)
		b.add(t, row{tenant: "a", at: "now() + interval '4 seconds'"}, 2)
		b.add(t, row{tenant: "a", held: true}, 5)

		p, err := b.admitter.Pass(ctx, queue)
		require.NoError(t, err)
		require.Equal(t, 2, p.Admitted)
		require.Equal(t, 2, b.fetchable(t))
	})

	// Before: the misrouted rows filled a's window for good (no worker of
	// the queue fetches them), and a's own jobs stayed held.
	t.Run("UnknownKindsHoldNoPlace", func(t *testing.T) {
		t.Parallel()
		b := setupKinds(t, 2)
		b.add(t, row{tenant: "x", kind: "misrouted"}, 2)
		b.add(t, row{tenant: "x", held: true}, 5)
		b.add(t, row{tenant: "y", held: true}, 5)

		p, err := b.admitter.Pass(ctx, queue)
		require.NoError(t, err)
		// Two tenants with work: windows of 1 each, both empty.
		require.Equal(t, fairshare.Pass{Ran: true, Admitted: 2, Tenants: 2, HeldTenants: 2, Capacity: 2, WindowHeld: 2}, p)
		require.Equal(t, 2, b.fetchable(t))
		// The misrouted rows stay where they are, available.
		require.Equal(t, 2, b.db.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'misrouted' AND state = 'available'`))
	})

	// A flood of rows no worker fetches is neither held back nor a tenant.
	t.Run("UnfetchableRowsAreNotHeldBack", func(t *testing.T) {
		t.Parallel()
		b := setupKinds(t, 2)
		b.add(t, row{tenant: "x", kind: "misrouted"}, 50)
		b.add(t, row{tenant: "y", at: "now() + interval '3 seconds'"}, 50)
		b.add(t, row{tenant: "z"}, 1)

		p, err := b.admitter.Pass(ctx, queue)
		require.NoError(t, err)
		require.Equal(t, fairshare.Pass{Ran: true, Tenants: 1, Capacity: 2, Lone: true}, p)
		require.Equal(t, map[string]int{"x/available": 50, "y/available": 50, "z/available": 1}, b.counts(t))
	})

	// A job held before it was due (written held, or held by an older
	// release) stays held until it is due, and takes no place before: a
	// retry must not run early, and a job that cannot start holds no window.
	t.Run("HeldJobsWaitForTheirDueTime", func(t *testing.T) {
		t.Parallel()
		b := setupKinds(t, 2)
		b.add(t, row{tenant: "a", held: true, priority: 1, at: "now() + interval '1 hour'"}, 3)
		b.add(t, row{tenant: "b", held: true, priority: 2}, 5)

		// Before: a's three jobs, not due, were its level (priority 1), took
		// its window and closed b's (a worse level): nothing fetchable.
		p, err := b.admitter.Pass(ctx, queue)
		require.NoError(t, err)
		require.Equal(t, fairshare.Pass{Ran: true, Admitted: 2, Tenants: 1, HeldTenants: 1, Capacity: 2, WindowHeld: 1}, p)
		require.Equal(t, 2, b.fetchable(t))
		require.Equal(t, 3, b.db.Count(t, `SELECT count(*) FROM river_job
			WHERE queue = $1 AND state = 'pending' AND metadata->>'tierq:tenant' = 'a' AND scheduled_at > now() + interval '59 minutes'`, queue))

		// Their time comes: admitted, at their own priority, first in line
		// (a's window is the capacity, 2; b keeps one place behind them,
		// as every active tenant does).
		_, err = b.db.Pool.Exec(ctx, `UPDATE river_job SET scheduled_at = now() - interval '1 second'
			WHERE queue = $1 AND metadata->>'tierq:tenant' = 'a'`, queue)
		require.NoError(t, err)
		require.Equal(t, []string{"b", "b"}, b.fetch(t, 2))
		p, err = b.admitter.Pass(ctx, queue)
		require.NoError(t, err)
		require.Equal(t, 3, p.Admitted)
		require.Equal(t, []string{"a"}, b.fetch(t, 1))
	})

	// A pending row whose metadata is the JSON string "tierq:held_at"
	// matches the held index's predicate; removing the key from it failed
	// every pass ("cannot delete from scalar").
	t.Run("AHeldMarkThatIsNotAnObject", func(t *testing.T) {
		t.Parallel()
		b := setupKinds(t, 2)
		_, err := b.db.Pool.Exec(ctx, `INSERT INTO river_job (kind, args, queue, priority, state, scheduled_at, max_attempts, metadata)
			VALUES ($1, '{}', $2, 2, 'pending', now() - interval '1 minute', 25, '"tierq:held_at"')`, fetchedKind, queue)
		require.NoError(t, err)
		b.add(t, row{tenant: "a", held: true}, 3)
		p, err := b.admitter.Pass(ctx, queue)
		require.NoError(t, err)
		require.Equal(t, 2, p.Admitted)
		require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM river_job WHERE queue = $1 AND state = 'pending' AND jsonb_typeof(metadata) = 'string'`, queue))
	})

	// A held job of a kind no worker fetches takes no tenant's places: at
	// the best priority it made every other tenant's window 0.
	t.Run("UnknownHeldKindsDoNotBlockOthers", func(t *testing.T) {
		t.Parallel()
		b := setupKinds(t, 2)
		b.add(t, row{tenant: "x", kind: "gone", held: true, priority: 1}, 3)
		b.add(t, row{tenant: "y", held: true, priority: 3}, 3)

		p, err := b.admitter.Pass(ctx, queue)
		require.NoError(t, err)
		require.Equal(t, fairshare.Pass{Ran: true, Admitted: 2, Tenants: 1, HeldTenants: 1, Capacity: 2, WindowHeld: 1}, p)
		require.Equal(t, 2, b.fetchable(t))

		// The release makes them available, where they wait in plain sight
		// for a worker of their kind.
		n, err := b.admitter.Release(ctx, queue)
		require.NoError(t, err)
		require.Equal(t, 3, n)
		require.Equal(t, 3, b.db.Count(t, `SELECT count(*) FROM river_job
			WHERE kind = 'gone' AND state = 'available' AND NOT metadata ? 'tierq:held_at'`))
		n, err = b.admitter.Release(ctx, queue)
		require.NoError(t, err)
		require.Equal(t, 0, n)
	})

	// Another process serving the queue fetches kind "other": its
	// heartbeat makes those jobs fetchable here too.
	t.Run("KindsComeWithHeartbeats", func(t *testing.T) {
		t.Parallel()
		b := setupKinds(t, 2)
		_, err := b.db.Pool.Exec(ctx, `INSERT INTO fair_share_slots (client_id, queue, slots, expires_at, kinds)
			VALUES ('other', $1, 2, now() + interval '1 minute', '{other}')`, queue)
		require.NoError(t, err)
		b.add(t, row{tenant: "a", kind: "other"}, 4)
		b.add(t, row{tenant: "a", held: true}, 5)

		// Capacity 2 (this process has no heartbeat yet: its own 2 count),
		// a alone: its window of 2 is full, with jobs the other process
		// fetches.
		p, err := b.admitter.Pass(ctx, queue)
		require.NoError(t, err)
		require.Equal(t, 0, p.Admitted)
		require.Equal(t, 2, p.Capacity)

		// Its lease runs out: those jobs are nobody's now.
		_, err = b.db.Pool.Exec(ctx, `UPDATE fair_share_slots SET expires_at = now() - interval '1 second' WHERE client_id = 'other'`)
		require.NoError(t, err)
		p, err = b.admitter.Pass(ctx, queue)
		require.NoError(t, err)
		require.Equal(t, 2, p.Admitted)
		require.Equal(t, 2, p.Capacity)
	})
}

// TestLongTenantIDs: a tenant id of any length written into a row
// directly. Before: every pass over the queue failed with "index row size
// 3256 exceeds btree version 4 maximum 2704 for index
// river_job_tierq_held_idx", and the newcomer waited behind the whole flood.
func TestLongTenantIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupKinds(t, 2)
	long := strings.Repeat("é", 1600) // 3,200 bytes
	twin := strings.Repeat("é", 200) + "another tail"
	b.add(t, row{tenant: long}, 20)
	b.add(t, row{tenant: twin}, 1)
	b.add(t, row{tenant: "newcomer", at: "now()"}, 1)

	p, err := b.admitter.Pass(ctx, queue)
	require.NoError(t, err)
	// Three tenants (the twin shares the long id's first 200 characters, not
	// its key), a window of 1 each: 19 of the long id's held.
	require.Equal(t, fairshare.Pass{Ran: true, Held: 19, Tenants: 3, Capacity: 2}, p)
	require.Equal(t, []string{long, twin, "newcomer"}, b.fetch(t, 3))

	// Its held jobs are admitted in turn.
	p, err = b.admitter.Pass(ctx, queue)
	require.NoError(t, err)
	require.Equal(t, 2, p.Admitted)
}

// TestPassAdmitsForAnIdleWorker holds the invariant of docs/fairness.md:
// unless the queue is paused, a pass that finds a worker idle (nothing
// fetchable in line, fewer jobs running than the capacity) and held work
// that River could fetch leaves at least one job River fetches at once.
// Random mixes of the rows production writes, a seed per case.
func TestPassAdmitsForAnIdleWorker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for seed := range uint64(120) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 27))
			workers := 1 + rng.IntN(4)
			b := setupKinds(t, workers)
			tenants := 1 + rng.IntN(5)
			heldFetchable := 0
			for i := range tenants {
				tenant := fmt.Sprintf("t%d", i)
				if i == 0 && rng.IntN(2) == 0 {
					tenant = strings.Repeat("L", 3000)
				}
				priority := 1 + rng.IntN(4)
				n := rng.IntN(3)
				b.add(t, row{tenant: tenant, priority: priority, at: "now() + interval '5 seconds'"}, n)                    // retries ahead
				b.add(t, row{tenant: tenant, priority: priority, kind: "misrouted"}, rng.IntN(3))                           // no worker
				b.add(t, row{tenant: tenant, priority: 1 + rng.IntN(4), kind: "gone", held: true}, rng.IntN(3))             // held, no worker
				b.add(t, row{tenant: tenant, priority: priority, held: true, at: "now() + interval '1 hour'"}, rng.IntN(2)) // held, not due
				h := rng.IntN(4)
				heldFetchable += h
				b.add(t, row{tenant: tenant, priority: priority, held: true}, h)
			}
			running := rng.IntN(workers) // at least one worker idle
			b.add(t, row{tenant: "t0", state: "running"}, running)
			if heldFetchable == 0 {
				b.add(t, row{tenant: "t0", held: true}, 1)
			}
			require.Equal(t, 0, b.fetchable(t))

			p, err := b.admitter.Pass(ctx, queue)
			require.NoError(t, err)
			require.True(t, p.Ran)
			require.GreaterOrEqual(t, b.fetchable(t), 1, "after %+v", p)
		})
	}
}

// TestLendingSkipsUnfetchableRows: before, one misrouted row in the
// priority queue read as paid work waiting and stopped lending for good,
// and a lent job no priority worker fetches held its slot for good.
func TestLendingSkipsUnfetchableRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const from = "fair_default"
	db := testdb.New(t)
	a, err := fairshare.New(db.Pool, &fairshare.Config{
		Queues: map[string]fairshare.Queue{
			queue: {Workers: 3, Fair: true, Kinds: []string{fetchedKind}},
			from:  {Workers: 1, Fair: true, Kinds: []string{fetchedKind}},
		},
		Lend: &fairshare.Lend{Queue: queue, From: from, Floor: 1},
	})
	require.NoError(t, err)
	insert := func(q, kind, at string, n int, meta string) {
		t.Helper()
		_, err := db.Pool.Exec(ctx, `
			INSERT INTO river_job (kind, args, queue, priority, state, scheduled_at, max_attempts, metadata)
			SELECT $1, '{}', $2, 3, 'available', `+at+` + i * interval '1 millisecond', 25, $4::jsonb
			FROM generate_series(1, $3) AS i`, kind, q, n, meta)
		require.NoError(t, err)
	}
	insert(queue, "misrouted", "now() - interval '1 minute'", 1, `{"tierq:tenant": "p"}`)
	insert(queue, fetchedKind, "now() + interval '4 seconds'", 1, `{"tierq:tenant": "p"}`)
	// A job lent before its kind's worker left the priority queue.
	insert(queue, "gone", "now() - interval '1 minute'", 1, `{"tierq:tenant": "f", "tierq:lent_from": "fair_default", "tierq:lent_priority": 2}`)
	insert(from, "misrouted", "now() - interval '2 minutes'", 3, `{"tierq:tenant": "f"}`)
	insert(from, fetchedKind, "now() - interval '1 minute'", 10, `{"tierq:tenant": "f"}`)

	// Capacity 3, floor 1: two lent, of the kind the priority workers run;
	// the lent job no worker takes goes home.
	p, err := a.LendPass(ctx)
	require.NoError(t, err)
	require.Equal(t, fairshare.LendPass{Ran: true, Lent: 2, Returned: 1}, p)
	require.Equal(t, 2, db.Count(t, `SELECT count(*) FROM river_job WHERE queue = $1 AND kind = $2 AND metadata ? 'tierq:lent_from'`, queue, fetchedKind))
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM river_job WHERE queue = $1 AND kind = 'gone' AND NOT metadata ? 'tierq:lent_from'`, from))
	require.Equal(t, 3, db.Count(t, `SELECT count(*) FROM river_job WHERE queue = $1 AND kind = 'misrouted'`, from))

	// The retry becomes due: paid work waits, and the lent jobs go home.
	_, err = db.Pool.Exec(ctx, `UPDATE river_job SET scheduled_at = now() - interval '1 second' WHERE queue = $1 AND NOT metadata ? 'tierq:lent_from' AND kind = $2`, queue, fetchedKind)
	require.NoError(t, err)
	p, err = a.LendPass(ctx)
	require.NoError(t, err)
	require.Equal(t, fairshare.LendPass{Ran: true, Returned: 2, PaidWaiting: true}, p)
}
