package fairshare_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/fairshare"
	"github.com/tierq/tierq/internal/testdb"
)

const queue = "fair_priority"

type bundle struct {
	db       *testdb.DB
	admitter *fairshare.Admitter
}

func setup(t *testing.T, workers int, fair bool) *bundle {
	t.Helper()
	db := testdb.New(t)
	a, err := fairshare.New(db.Pool, &fairshare.Config{
		Queues: map[string]fairshare.Queue{queue: {Workers: workers, Fair: fair}},
	})
	require.NoError(t, err)
	return &bundle{db: db, admitter: a}
}

// insert queues n available jobs of tenant at priority, scheduled at
// ago before now, each a microsecond apart (in insert order).
func (b *bundle) insert(t *testing.T, tenant string, priority, n int, ago time.Duration) {
	t.Helper()
	meta := `'{}'::jsonb`
	if tenant != "" {
		meta = fmt.Sprintf(`jsonb_build_object('tierq:tenant', %s::text)`, quote(tenant))
	}
	_, err := b.db.Pool.Exec(context.Background(), `
		INSERT INTO river_job (kind, args, queue, priority, state, scheduled_at, max_attempts, metadata)
		SELECT 'fair_test', '{}', $1, $2, 'available', now() - $3::interval + i * interval '1 microsecond', 25, `+meta+`
		FROM generate_series(1, $4) AS i`, queue, priority, ago.String(), n)
	require.NoError(t, err)
}

func quote(s string) string { return "'" + s + "'" }

// counts is the number of the queue's jobs per tenant and state.
func (b *bundle) counts(t *testing.T) map[string]int {
	t.Helper()
	rows, err := b.db.Pool.Query(context.Background(), `
		SELECT coalesce(metadata->>'tierq:tenant', '') || '/' || state, count(*)
		FROM river_job WHERE queue = $1 GROUP BY 1`, queue)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var (
			k string
			n int
		)
		require.NoError(t, rows.Scan(&k, &n))
		out[k] = n
	}
	require.NoError(t, rows.Err())
	return out
}

// fetch takes the n first available jobs in River's fetch order, as a
// worker's fetch would, and returns their tenants in that order.
func (b *bundle) fetch(t *testing.T, n int) []string {
	t.Helper()
	rows, err := b.db.Pool.Query(context.Background(), `
		WITH f AS (
			SELECT id FROM river_job WHERE state = 'available' AND queue = $1 AND scheduled_at <= now()
			ORDER BY priority, scheduled_at, id LIMIT $2 FOR UPDATE SKIP LOCKED)
		UPDATE river_job AS j SET state = 'running', attempted_at = now(), attempt = attempt + 1
		FROM f WHERE j.id = f.id
		RETURNING coalesce(j.metadata->>'tierq:tenant', ''), j.priority, j.scheduled_at, j.id`, queue, n)
	require.NoError(t, err)
	defer rows.Close()
	type row struct {
		tenant   string
		priority int
		at       time.Time
		id       int64
	}
	var got []row
	for rows.Next() {
		var r row
		require.NoError(t, rows.Scan(&r.tenant, &r.priority, &r.at, &r.id))
		got = append(got, r)
	}
	require.NoError(t, rows.Err())
	// RETURNING has no order: put them in fetch order.
	for i := range got {
		for j := i + 1; j < len(got); j++ {
			a, c := got[i], got[j]
			if c.priority < a.priority || (c.priority == a.priority && (c.at.Before(a.at) || (c.at.Equal(a.at) && c.id < a.id))) {
				got[i], got[j] = got[j], got[i]
			}
		}
	}
	tenants := make([]string, len(got))
	for i, r := range got {
		tenants[i] = r.tenant
	}
	return tenants
}

func TestPass(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("HoldsAFloodBackToItsWindow", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 4, true)
		b.insert(t, "a", 2, 100, time.Minute)
		b.insert(t, "b", 2, 1, time.Second)

		p, err := b.admitter.Pass(ctx, queue)
		require.NoError(t, err)
		// Capacity 4, two tenants: b needs one place, a has the other
		// three (the capacity is shared by demand: max-min fairness).
		require.Equal(t, fairshare.Pass{Ran: true, Held: 97, Admitted: 0, Tenants: 2, HeldTenants: 0, Capacity: 4}, p)
		require.Equal(t, map[string]int{"a/available": 3, "a/pending": 97, "b/available": 1}, b.counts(t))

		// b's job is fourth in line, not 101st.
		require.Equal(t, []string{"a", "a", "a", "b"}, b.fetch(t, 4))

		// b has nothing waiting (a running job takes no place in line): a,
		// alone again, has the whole capacity for its window, which, not a
		// limit, keeps its other 93 jobs held.
		p, err = b.admitter.Pass(ctx, queue)
		require.NoError(t, err)
		require.Equal(t, fairshare.Pass{Ran: true, Held: 0, Admitted: 4, Tenants: 1, HeldTenants: 1, Capacity: 4, WindowHeld: 1}, p)
		require.Equal(t, map[string]int{"a/available": 4, "a/pending": 93, "a/running": 3, "b/running": 1}, b.counts(t))
	})

	t.Run("TenantsTakeTurns", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 2, true)
		b.insert(t, "a", 2, 50, 3*time.Minute)
		b.insert(t, "b", 2, 50, 2*time.Minute)
		b.insert(t, "c", 2, 50, time.Minute)
		var order []string
		for range 12 {
			_, err := b.admitter.Pass(ctx, queue)
			require.NoError(t, err)
			order = append(order, b.fetch(t, 1)...)
		}
		// Windows of 1 (capacity 2 over 3 tenants, at least 1): round robin.
		require.Equal(t, []string{"a", "b", "c", "a", "b", "c", "a", "b", "c", "a", "b", "c"}, order)
	})

	t.Run("WeightsSizeTheWindows", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 4, true)
		_, err := b.db.Pool.Exec(ctx, `INSERT INTO fair_share_weights (tenant, weight) VALUES ('a', 3)`)
		require.NoError(t, err)
		b.insert(t, "a", 2, 30, 2*time.Minute)
		b.insert(t, "b", 2, 30, time.Minute)
		var order []string
		for range 16 {
			_, err := b.admitter.Pass(ctx, queue)
			require.NoError(t, err)
			order = append(order, b.fetch(t, 1)...)
		}
		// Windows 3 and 1 (capacity 4, weights 3:1): a has three places in
		// line for b's one, and so three starts for b's one. (b's first
		// comes second: once a is under way, b, with nothing running, has
		// not had its turn, and a's places yield to it.)
		require.Equal(t, []string{
			"a", "b",
			"a", "a", "a", "b",
			"a", "a", "a", "b",
			"a", "a", "a", "b",
			"a", "a",
		}, order)
	})

	t.Run("PriorityStaysStrict", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 4, true)
		b.insert(t, "a", 4, 30, 2*time.Minute) // pro, queued first
		b.insert(t, "b", 2, 10, time.Minute)   // enterprise
		p, err := b.admitter.Pass(ctx, queue)
		require.NoError(t, err)
		// b is alone at its priority: a window of the whole capacity (4),
		// its 6 others held. a, at a worse priority while b wants all of
		// the capacity, keeps one place, its best job, behind b's: 29
		// held. River fetches it only when b has nothing in line, and
		// then it, not a later insert of a worse priority still.
		require.Equal(t, fairshare.Pass{Ran: true, Held: 35, Tenants: 2, Capacity: 4}, p)
		var order []string
		for range 4 {
			_, err := b.admitter.Pass(ctx, queue)
			require.NoError(t, err)
			order = append(order, b.fetch(t, 3)...)
		}
		// b's ten jobs first, three at a time, its places refilled between
		// fetches; a's only when b has nothing left.
		require.Equal(t, []string{"b", "b", "b", "b", "b", "b", "b", "b", "b", "b", "a", "a"}, order)
	})

	t.Run("AWorsePriorityKeepsItsTurnBeforeFresherWork", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 4, true)
		b.insert(t, "a", 2, 3, time.Minute)  // pro_plus, waiting first
		b.insert(t, "b", 1, 10, time.Second) // an enterprise flood
		p, err := b.admitter.Pass(ctx, queue)
		require.NoError(t, err)
		// b's window is the capacity, 6 held; a keeps its best job in
		// line, 2 held.
		require.Equal(t, fairshare.Pass{Ran: true, Held: 8, Tenants: 2, Capacity: 4}, p)
		b.insert(t, "c", 3, 1, 0) // pro, just now, available at once

		// The workers empty b's line before the next pass: the next worker
		// takes a's job, which waited longest at the better priority, not
		// c's. (With every job of a held, it took c's: a worse priority,
		// inserted after a's, ran first.)
		require.Equal(t, []string{"b", "b", "b", "b", "a"}, b.fetch(t, 5))
	})

	t.Run("ANewcomerGoesFirst", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 4, true)
		b.insert(t, "a", 2, 20, time.Minute)
		require.Equal(t, []string{"a"}, b.fetch(t, 1), "a is under way")
		b.insert(t, "b", 2, 1, 0)

		p, err := b.admitter.Pass(ctx, queue)
		require.NoError(t, err)
		// b needs one place, a has three: a's 16 beyond them held; b,
		// with nothing running, has not had its turn: a's three places go
		// behind its job.
		require.Equal(t, fairshare.Pass{Ran: true, Held: 16, Tenants: 2, Capacity: 4, Yielded: 3}, p)
		require.Equal(t, []string{"b"}, b.fetch(t, 1))

		// b's next job, with b's first running, waits its turn behind a's
		// places, as round robin has it.
		b.insert(t, "b", 2, 1, 0)
		p, err = b.admitter.Pass(ctx, queue)
		require.NoError(t, err)
		require.Zero(t, p.Yielded)
		require.Equal(t, []string{"a", "a", "a", "b"}, b.fetch(t, 4))
	})

	t.Run("TheCapacityGoesWhereTheDemandIs", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 10, true)
		b.insert(t, "a", 2, 100, time.Minute)
		for _, x := range []string{"b", "c", "d"} {
			b.insert(t, x, 2, 1, time.Second)
		}
		b.insert(t, "e", 2, 2, time.Second)

		p, err := b.admitter.Pass(ctx, queue)
		require.NoError(t, err)
		// Capacity 10 over five tenants would be windows of 2; but b, c
		// and d need one place each and e two: a has the other five, and
		// the line holds ten jobs for ten workers. (With windows of 2 it
		// held seven: three workers idle until the next pass.)
		require.Equal(t, fairshare.Pass{Ran: true, Held: 95, Tenants: 5, Capacity: 10}, p)
		require.Equal(t, map[string]int{"a/available": 5, "a/pending": 95, "b/available": 1, "c/available": 1, "d/available": 1, "e/available": 2}, b.counts(t))
	})

	t.Run("HeldNewcomersAreAdmittedInTheirArrivalOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 2, true)
		arrivals := []struct {
			tenant string
			ago    time.Duration
		}{{"n2", 10 * time.Second}, {"n6", 5 * time.Second}, {"n3", 40 * time.Second}, {"n4", 20 * time.Second}, {"n1", 50 * time.Second}, {"n5", 30 * time.Second}}
		for _, n := range arrivals {
			b.insert(t, n.tenant, 2, 2, n.ago)
		}
		// Capacity 2 over six tenants: windows of 1, each second job held.
		p, err := b.admitter.Pass(ctx, queue)
		require.NoError(t, err)
		require.Equal(t, 6, p.Held)
		require.Equal(t, []string{"n1", "n3", "n5", "n4", "n2", "n6"}, b.fetch(t, 6))
		_, err = b.db.Pool.Exec(ctx, `UPDATE river_job SET state = 'completed', finalized_at = now() WHERE state = 'running'`)
		require.NoError(t, err)

		// Nothing of theirs is running or in line: their held jobs are
		// admitted in one pass, in the order they became due (the order
		// the tenants arrived), not at random.
		p, err = b.admitter.Pass(ctx, queue)
		require.NoError(t, err)
		require.Equal(t, 6, p.Admitted)
		require.Equal(t, []string{"n1", "n3", "n5", "n4", "n2", "n6"}, b.fetch(t, 6))
	})

	t.Run("NeverWaitsForARowLock", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 4, true)
		b.insert(t, "a", 2, 20, time.Minute)
		require.Equal(t, []string{"a"}, b.fetch(t, 1), "a is under way")
		b.insert(t, "b", 2, 1, 0)

		// Another transaction (River's fetch or completer, a sweep) holds
		// the row lock of a's first place in line, which the pass would
		// move behind b's job.
		tx, err := b.db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		var locked int64
		require.NoError(t, tx.QueryRow(ctx, `SELECT id FROM river_job WHERE queue = $1 AND state = 'available'
			ORDER BY priority, scheduled_at, id LIMIT 1 FOR UPDATE`, queue).Scan(&locked))

		// The pass does not wait for it: it moves the other two places and
		// leaves the locked one where it is. (Its UPDATE waited for the
		// lock, for as long as the other transaction held it: 20 ms and
		// more under production traffic, and once a deadlock with River's
		// completer.)
		passCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		p, err := b.admitter.Pass(passCtx, queue)
		require.NoError(t, err)
		require.Equal(t, fairshare.Pass{Ran: true, Held: 16, Tenants: 2, Capacity: 4, Yielded: 2}, p)
		require.NoError(t, tx.Rollback(ctx))
		require.Equal(t, []string{"a", "b", "a", "a"}, b.fetch(t, 4))
	})

	t.Run("OffReleasesEverythingHeld", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 2, true)
		b.insert(t, "a", 2, 20, time.Minute)
		b.insert(t, "b", 2, 1, time.Second)
		_, err := b.admitter.Pass(ctx, queue)
		require.NoError(t, err)
		require.Equal(t, map[string]int{"a/available": 1, "a/pending": 19, "b/available": 1}, b.counts(t))

		off, err := fairshare.New(b.db.Pool, &fairshare.Config{Queues: map[string]fairshare.Queue{queue: {Workers: 2}}})
		require.NoError(t, err)
		p, err := off.Pass(ctx, queue)
		require.NoError(t, err)
		require.Equal(t, 19, p.Admitted)
		require.Equal(t, map[string]int{"a/available": 20, "b/available": 1}, b.counts(t))
	})
}

func TestLendPass(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const from = "fair_default"
	db := testdb.New(t)
	a, err := fairshare.New(db.Pool, &fairshare.Config{
		Queues: map[string]fairshare.Queue{queue: {Workers: 5, Fair: true}, from: {Workers: 3, Fair: true}},
		Lend:   &fairshare.Lend{Queue: queue, From: from, Floor: 1},
	})
	require.NoError(t, err)
	b := &bundle{db: db, admitter: a}
	_, err = db.Pool.Exec(ctx, `
		INSERT INTO river_job (kind, args, queue, priority, state, scheduled_at, max_attempts, metadata)
		SELECT 'fair_test', '{}', $1, 3, 'available', now() - interval '1 minute' + i * interval '1 millisecond', 25, '{"tierq:tenant": "f"}'
		FROM generate_series(1, 20) AS i`, from)
	require.NoError(t, err)
	lentIn := func() []testdb.Job { return db.Jobs(t, `queue = $1 AND metadata ? 'tierq:lent_from'`, queue) }

	// Capacity 5, floor 1: four lent, at the lowest priority.
	p, err := a.LendPass(ctx)
	require.NoError(t, err)
	require.Equal(t, fairshare.LendPass{Ran: true, Lent: 4}, p)
	lent := lentIn()
	require.Len(t, lent, 4)
	for _, j := range lent {
		require.Equal(t, 4, j.Priority)
	}

	// Three start: one free worker left, but only capacity − floor may be
	// lent and four are: nothing more.
	require.Equal(t, []string{"f", "f", "f"}, b.fetch(t, 3))
	p, err = a.LendPass(ctx)
	require.NoError(t, err)
	require.Equal(t, fairshare.LendPass{Ran: true}, p)

	// They finish here (River writes the completions later): their
	// workers are free at once, and lent again.
	hook := a.Hook().(interface {
		WorkEnd(context.Context, *rivertype.JobRow, error) error
	})
	for _, j := range db.Jobs(t, `queue = $1 AND state = 'running'`, queue) {
		require.NoError(t, hook.WorkEnd(ctx, &rivertype.JobRow{ID: j.ID, Queue: queue}, nil))
	}
	p, err = a.LendPass(ctx)
	require.NoError(t, err)
	require.Equal(t, fairshare.LendPass{Ran: true, Lent: 3}, p)

	// A paid job arrives: lending stops, and the lent jobs not started go
	// home at their own priority.
	b.insert(t, "p", 4, 1, 0)
	p, err = a.LendPass(ctx)
	require.NoError(t, err)
	require.Equal(t, fairshare.LendPass{Ran: true, Returned: 4, PaidWaiting: true}, p)
	require.Equal(t, 17, db.Count(t, `SELECT count(*) FROM river_job WHERE queue = $1 AND state = 'available' AND priority = 3
		AND NOT metadata ? 'tierq:lent_from'`, from))
	require.Equal(t, 3, db.Count(t, `SELECT count(*) FROM river_job WHERE queue = $1 AND state = 'running'`, queue))

	// The lending queue paused in River: nothing moves, and the pass says
	// why (its loop then waits for its tick).
	_, err = db.Pool.Exec(ctx, `INSERT INTO river_queue (name, paused_at, updated_at) VALUES ($1, now(), now())`, queue)
	require.NoError(t, err)
	p, err = a.LendPass(ctx)
	require.NoError(t, err)
	require.Equal(t, fairshare.LendPass{Paused: true}, p)
}
