package fairshare_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/fairshare"
	"github.com/tierq/tierq/internal/jobmetasql"
	"github.com/tierq/tierq/internal/testdb"
)

// runTurns starts an Admitter placing queue by turns and waits for its
// heartbeat: from then on the trigger places the queue's jobs.
func runTurns(t *testing.T, workers int) *bundle {
	t.Helper()
	b := setupTurns(t, workers)
	b.run(t)
	return b
}

// setupTurns is runTurns without starting the Admitter.
func setupTurns(t *testing.T, workers int) *bundle {
	t.Helper()
	db := testdb.New(t)
	a, err := fairshare.New(db.Pool, &fairshare.Config{
		Queues: map[string]fairshare.Queue{queue: {Workers: workers, Fair: true, Turns: true}},
	})
	require.NoError(t, err)
	return &bundle{db: db, admitter: a}
}

// run starts b's Admitter and waits for its heartbeat.
func (b *bundle) run(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); b.admitter.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	require.Eventually(t, func() bool {
		var on bool
		err := b.db.Pool.QueryRow(context.Background(), `SELECT coalesce(bool_or(turns), false) FROM fair_share_slots WHERE queue = $1 AND client_id = $2`,
			queue, b.admitter.ClientID()).Scan(&on)
		return err == nil && on
	}, 10*time.Second, 5*time.Millisecond)
}

// insertTenants inserts, in one statement, one available job per entry of
// tenants (in that order) at priority 2, due now.
func (b *bundle) insertTenants(t *testing.T, tenants ...string) {
	t.Helper()
	_, err := b.db.Pool.Exec(context.Background(), `
		INSERT INTO river_job (kind, args, queue, priority, state, max_attempts, metadata)
		SELECT 'fair_test', '{}', $1, 2, 'available', 25, jsonb_build_object('tierq:tenant', t)
		FROM unnest($2::text[]) WITH ORDINALITY AS u(t, n) ORDER BY n`, queue, tenants)
	require.NoError(t, err)
}

func TestTurns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("TenantsTakeTurnsInRiversOwnOrder", func(t *testing.T) {
		t.Parallel()
		b := runTurns(t, 4)
		b.insertTenants(t, "a", "a", "a", "a", "a", "b", "b", "b", "c")
		// Nothing held: every job is available, in turns.
		require.Equal(t, map[string]int{"a/available": 5, "b/available": 3, "c/available": 1}, b.counts(t))
		// Due at their insert: River's tag says so, no key is written, and
		// their due time reads as their created_at, not their turn.
		var tagged, keyed, dueAtCreation int
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE '`+jobmetasql.TurnTag+`' = ANY (j.tags)),
				count(*) FILTER (WHERE j.metadata ? 'tierq:moved_at'),
				count(*) FILTER (WHERE `+jobmetasql.DueAtSQL("j")+` = j.created_at AND j.scheduled_at < j.created_at - interval '59 minutes')
			FROM river_job AS j`).Scan(&tagged, &keyed, &dueAtCreation))
		require.Equal(t, []int{9, 0, 9}, []int{tagged, keyed, dueAtCreation})
		require.Equal(t, []string{"a", "b", "c", "a", "b"}, b.fetch(t, 5))

		// A newcomer takes the turn of the head of the line: after at most
		// one job of each tenant already there (a and b at that turn),
		// ahead of the rest of every backlog.
		b.insertTenants(t, "d")
		require.Equal(t, []string{"a", "b", "d", "a", "a"}, b.fetch(t, 5))
	})

	t.Run("WeightsGiveMoreTurns", func(t *testing.T) {
		t.Parallel()
		b := runTurns(t, 4)
		_, err := b.db.Pool.Exec(ctx, `INSERT INTO fair_share_weights (tenant, weight) VALUES ('w', 2)`)
		require.NoError(t, err)
		b.insertTenants(t, "w", "w", "w", "w", "a", "a", "a", "a")
		// w's turns come every half step: w a w w a w a a.
		require.Equal(t, []string{"w", "a", "w", "w", "a", "w", "a", "a"}, b.fetch(t, 8))
	})

	t.Run("ASessionWhoseSearchPathLeadsElsewhereTakesTurns", func(t *testing.T) {
		t.Parallel()
		b := runTurns(t, 4)
		// A producer whose search_path names no schema of tierq's (River's
		// Schema setting names the table instead): the trigger and the tag
		// function read this schema's rows all the same (migration 00019
		// writes the schema into them).
		config := b.db.Pool.Config().Copy()
		config.MaxConns = 1
		config.ConnConfig.RuntimeParams["search_path"] = "tierq_no_such_schema"
		other := testdb.PoolFor(t, config)
		for _, tenant := range []string{"a", "a", "a", "b"} {
			_, err := other.Exec(ctx, `INSERT INTO `+b.db.Schema+`.river_job (kind, args, queue, priority, state, max_attempts, metadata)
				VALUES ('fair_test', '{}', $1, 2, 'available', 25, jsonb_build_object('tierq:tenant', $2::text))`, queue, tenant)
			require.NoError(t, err)
		}
		require.Equal(t, []string{"a", "b", "a", "a"}, b.fetch(t, 4))
	})

	t.Run("AMarkedJobDueButNotYetPlacedIsNoTurnOfItsTenant", func(t *testing.T) {
		t.Parallel()
		// No placing loop: the slot says the queue is placed by turns, as
		// a live process's heartbeat does, so the trigger places.
		b := setupTurns(t, 4)
		_, err := b.db.Pool.Exec(ctx, `INSERT INTO fair_share_slots (client_id, queue, slots, expires_at, turns)
			VALUES ('another process', $1, 4, now() + interval '1 hour', true)`, queue)
		require.NoError(t, err)
		b.insertTenants(t, "a", "a", "a")
		// A retry of r's, moved once before (it keeps tierq:moved_at),
		// made available 100 ms ahead: marked, and due once that passes
		// while no placing loop has given it its turn yet.
		_, err = b.db.Pool.Exec(ctx, `
			INSERT INTO river_job (kind, args, queue, priority, state, max_attempts, metadata, scheduled_at)
			VALUES ('fair_test', '{}', $1, 2, 'available', 25,
			        '{"tierq:tenant": "r", "tierq:moved_at": 1, "tierq:due_at": 1}', now() + interval '100 milliseconds')`, queue)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			var due bool
			err := b.db.Pool.QueryRow(ctx, `SELECT bool_and(scheduled_at <= now()) FROM river_job WHERE metadata ? 'tierq:turn_due'`).Scan(&due)
			return err == nil && due
		}, 10*time.Second, 10*time.Millisecond)
		// r's next job takes the head's turn: the marked job is no turn of
		// r's (00018's tag counted it and put the job behind it, at the
		// back of the line: a a a r r).
		b.insertTenants(t, "r")
		require.Equal(t, []string{"a", "r", "a", "a", "r"}, b.fetch(t, 5))
	})

	t.Run("TheDueTimeIsKept", func(t *testing.T) {
		t.Parallel()
		b := runTurns(t, 4)
		// Two rows a producer wrote with a scheduled_at of its own, in the
		// past: z's is the head of the line (nothing older waits: it keeps
		// its own time), a's is placed at z's turn, before its own time,
		// and keeps its due time in its metadata.
		_, err := b.db.Pool.Exec(ctx, `
			INSERT INTO river_job (kind, args, queue, priority, state, max_attempts, metadata, scheduled_at)
			VALUES ('fair_test', '{}', $1, 2, 'available', 25, '{"tierq:tenant": "z"}', '2026-11-27T09:00:00Z')`, queue)
		require.NoError(t, err)
		_, err = b.db.Pool.Exec(ctx, `
			INSERT INTO river_job (kind, args, queue, priority, state, max_attempts, metadata, scheduled_at)
			VALUES ('fair_test', '{}', $1, 2, 'available', 25, '{"tierq:tenant": "a"}', '2026-11-27T10:00:00.123456Z')`, queue)
		require.NoError(t, err)
		var (
			due, scheduled time.Time
			keyed          bool
		)
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT `+jobmetasql.DueAtSQL("j")+`, j.scheduled_at, j.metadata ? 'tierq:moved_at'
			FROM river_job AS j WHERE j.metadata->>'tierq:tenant' = 'a'`).Scan(&due, &scheduled, &keyed))
		require.Equal(t, time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC), scheduled.UTC(), "a's turn")
		require.Equal(t, time.Date(2026, 11, 27, 10, 0, 0, 123456000, time.UTC), due.UTC(), "a's due time")
		require.True(t, keyed)
		require.Equal(t, []string{"z", "a"}, b.fetch(t, 2))
	})

	t.Run("JobsNotDueYetArePlacedWhenDue", func(t *testing.T) {
		t.Parallel()
		b := runTurns(t, 4)
		b.insertTenants(t, "a", "a", "a", "a", "a", "a")
		// Three retries of one tenant River wrote available 300 ms ahead:
		// left where River put them, marked, and placed by the placing
		// loop once due, in consecutive turns (not all at the head's).
		_, err := b.db.Pool.Exec(ctx, `
			INSERT INTO river_job (kind, args, queue, priority, state, max_attempts, metadata, scheduled_at)
			SELECT 'fair_test', '{}', $1, 2, 'available', 25, '{"tierq:tenant": "r"}', now() + interval '300 milliseconds'
			FROM generate_series(1, 3)`, queue)
		require.NoError(t, err)
		var marked int
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE metadata ? 'tierq:turn_due'`).Scan(&marked))
		require.Equal(t, 3, marked)
		require.Eventually(t, func() bool {
			var placed int
			err := b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job
				WHERE metadata->>'tierq:tenant' = 'r' AND NOT metadata ? 'tierq:turn_due' AND scheduled_at < now() - interval '59 minutes'`).Scan(&placed)
			return err == nil && placed == 3
		}, 10*time.Second, 10*time.Millisecond)
		// Due 300 ms after their insert, not at their turn, an hour back.
		var recent int
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job AS j
			WHERE j.metadata->>'tierq:tenant' = 'r' AND `+jobmetasql.DueAtSQL("j")+` > j.created_at + interval '299 milliseconds'
			  AND `+jobmetasql.DueAtSQL("j")+` < j.created_at + interval '1 second'`).Scan(&recent))
		require.Equal(t, 3, recent)
		require.Equal(t, []string{"a", "r", "a", "r", "a", "r", "a"}, b.fetch(t, 7))
	})

	t.Run("AJobAgedToABetterPriorityTakesATurnThere", func(t *testing.T) {
		t.Parallel()
		b := runTurns(t, 4)
		b.insertTenants(t, "a", "a", "a", "a")
		_, err := b.db.Pool.Exec(ctx, `
			INSERT INTO river_job (kind, args, queue, priority, state, max_attempts, metadata)
			VALUES ('fair_test', '{}', $1, 3, 'available', 25, '{"tierq:tenant": "g"}')`, queue)
		require.NoError(t, err)
		// Aging raises g's job to priority 2: it takes a turn in that line
		// (the head's, after a's first), its due time (its insert) kept.
		_, err = b.db.Pool.Exec(ctx, `UPDATE river_job SET priority = 2 WHERE metadata->>'tierq:tenant' = 'g'`)
		require.NoError(t, err)
		var atInsert bool
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT `+jobmetasql.DueAtSQL("j")+` = j.created_at FROM river_job AS j WHERE j.metadata->>'tierq:tenant' = 'g'`).Scan(&atInsert))
		require.True(t, atInsert)
		require.Equal(t, []string{"a", "g", "a"}, b.fetch(t, 3))
	})

	t.Run("AJobMovedToAnotherQueueWaitsAtTheBack", func(t *testing.T) {
		t.Parallel()
		b := runTurns(t, 4)
		b.insertTenants(t, "a", "a", "a")
		// Escalation's move from another queue: scheduled_at now(), the back
		// of the line, as under windows (escalation counts a job's time in
		// its queue from there), the due time kept in the metadata.
		_, err := b.db.Pool.Exec(ctx, `
			INSERT INTO river_job (kind, args, queue, priority, state, max_attempts, metadata, scheduled_at)
			VALUES ('fair_test', '{}', 'fair_other', 2, 'available', 25, '{"tierq:tenant": "e"}', '2026-11-27T10:00:00Z')`)
		require.NoError(t, err)
		_, err = b.db.Pool.Exec(ctx, `
			UPDATE river_job SET queue = $1, scheduled_at = now(),
				metadata = metadata || jsonb_build_object('tierq:due_at', 1795773600000000, 'tierq:moved_at', (extract(epoch FROM now()) * 1000000)::bigint)
			WHERE queue = 'fair_other'`, queue)
		require.NoError(t, err)
		var due time.Time
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT `+jobmetasql.DueAtSQL("j")+` FROM river_job AS j WHERE j.metadata->>'tierq:tenant' = 'e'`).Scan(&due))
		require.Equal(t, time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC), due.UTC())
		require.Equal(t, []string{"a", "a", "a", "e"}, b.fetch(t, 4))
	})

	t.Run("ARowWhoseMetadataIsNotAnObjectTakesATurn", func(t *testing.T) {
		t.Parallel()
		b := runTurns(t, 4)
		b.insertTenants(t, "a", "a", "a")
		// Written directly by another producer: no tenant (the key of none),
		// nowhere to mark; due at its insert, it takes the head's turn.
		_, err := b.db.Pool.Exec(ctx, `
			INSERT INTO river_job (kind, args, queue, priority, state, max_attempts, metadata)
			VALUES ('fair_test', '{}', $1, 2, 'available', 25, '[1]')`, queue)
		require.NoError(t, err)
		require.Equal(t, []string{"a", "", "a", "a"}, b.fetch(t, 4))
	})

	t.Run("ABacklogQueuedWhileNoProcessPlacedTakesTurns", func(t *testing.T) {
		t.Parallel()
		b := setupTurns(t, 4)
		// Queued before any process placed the queue (the first start, every
		// worker down, a switch from windows): River's time, first in first
		// out.
		b.insertTenants(t, "a", "a", "a", "a", "a", "b", "b", "b", "c")
		b.run(t)
		// The first process to place the queue places the backlog: the
		// tenants take turns as if it had been inserted now.
		// The first job of each tenant takes the head's turn, which is its
		// own time (all nine were inserted at once): left as is. The six
		// others are moved, their due time kept.
		require.Eventually(t, func() bool {
			return b.db.Count(t, `SELECT count(*) FROM river_job WHERE metadata ? 'tierq:moved_at'`) == 6
		}, 10*time.Second, 10*time.Millisecond)
		// Each still due at its insert (its created_at: River wrote both
		// times the same), not at its turn.
		require.Equal(t, 9, b.db.Count(t, `SELECT count(*) FROM river_job AS j WHERE `+jobmetasql.DueAtSQL("j")+` = j.created_at`))
		require.Equal(t, []string{"a", "b", "c", "a", "b", "a", "b", "a", "a"}, b.fetch(t, 9))
	})

	t.Run("ABacklogLargerThanABatchIsPlacedWhole", func(t *testing.T) {
		t.Parallel()
		b := setupTurns(t, 4)
		// 2,100 jobs, three batches: a's 700 queued first, then b's 100.5 ms
		// later, then c's 100.5 ms after b's (never a whole number of turn
		// steps apart, so that no job of b or c has its own time as its
		// turn).
		for i, tenant := range []string{"a", "b", "c"} {
			_, err := b.db.Pool.Exec(ctx, `
				INSERT INTO river_job (kind, args, queue, priority, state, max_attempts, metadata, scheduled_at, created_at)
				SELECT 'fair_test', '{}', $1, 2, 'available', 25, jsonb_build_object('tierq:tenant', $2::text), at, at
				FROM generate_series(1, 700), (SELECT now() - interval '10 seconds' + $3 * interval '100.5 milliseconds' AS at) AS t`, queue, tenant, i)
			require.NoError(t, err)
		}
		b.run(t)
		// Every job but the head (a's first, whose turn is its own time) is
		// moved to its turn.
		require.Eventually(t, func() bool {
			return b.db.Count(t, `SELECT count(*) FROM river_job WHERE metadata ? 'tierq:moved_at'`) == 2099
		}, 20*time.Second, 20*time.Millisecond)
		require.Equal(t, []string{"a", "b", "c", "a", "b", "c", "a", "b", "c"}, b.fetch(t, 9))
	})

	t.Run("ABacklogBesideAnotherLiveProcessIsLeftAlone", func(t *testing.T) {
		t.Parallel()
		b := setupTurns(t, 4)
		// Another process places the queue by turns: what it did not place,
		// it left where it is on purpose (a tenant's turn later than the
		// job's own time keeps the job at its own time).
		_, err := b.db.Pool.Exec(ctx, `
			INSERT INTO fair_share_slots (client_id, queue, slots, heartbeat_at, expires_at, turns)
			VALUES ('other', $1, 4, now(), now() + interval '1 hour', true)`, queue)
		require.NoError(t, err)
		_, err = b.db.Pool.Exec(ctx, `ALTER TABLE river_job DISABLE TRIGGER tierq_tenant_turn`)
		require.NoError(t, err)
		b.insertTenants(t, "a", "a", "b")
		_, err = b.db.Pool.Exec(ctx, `ALTER TABLE river_job ENABLE TRIGGER tierq_tenant_turn`)
		require.NoError(t, err)
		n, err := b.admitter.PlaceBacklog(ctx)
		require.NoError(t, err)
		require.Zero(t, n)
		require.Equal(t, []string{"a", "a", "b"}, b.fetch(t, 3))
	})

	t.Run("AQueueNotPlacedByTurnsIsLeftAlone", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 4, true)
		b.insertTenants(t, "a", "a", "b")
		var moved int
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE metadata ? 'tierq:moved_at' OR scheduled_at < now() - interval '1 minute'`).Scan(&moved))
		require.Equal(t, 0, moved)
		require.Equal(t, []string{"a", "a", "b"}, b.fetch(t, 3))
	})
}

// TestPlacingKeepsOneConnection: the placing loop sends its looks and
// placings on one connection of the pool, held while it runs, so that they
// and the tag function are planned once per process: here, five jobs
// placed one after the other, with the pool's idle connections handed out
// in a new order before each (the pool gives the last released first), are
// looked for and placed by one backend (every statement naming
// tierq:turn_due, traced by the backend that ran it; two backends with the
// loop on the pool).
func TestPlacingKeepsOneConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	config := db.Pool.Config().Copy()
	config.MaxConns = 4
	tracer := &placingTracer{pids: map[uint32]bool{}}
	config.ConnConfig.Tracer = tracer
	pool := testdb.PoolFor(t, config)
	a, err := fairshare.New(pool, &fairshare.Config{
		Queues: map[string]fairshare.Queue{queue: {Workers: 2, Fair: true, Turns: true}},
	})
	require.NoError(t, err)
	b := &bundle{db: db, admitter: a}
	b.run(t)
	for i := range 5 {
		// Every idle connection taken and given back in a new order: the
		// next acquire gets another one than the last.
		idle := pool.AcquireAllIdle(ctx)
		for j := range idle {
			idle[(i+j)%len(idle)].Release()
		}
		_, err := db.Pool.Exec(ctx, `
			INSERT INTO river_job (kind, args, queue, priority, state, max_attempts, metadata, scheduled_at)
			VALUES ('fair_test', '{}', $1, 2, 'available', 25, '{"tierq:tenant": "r"}', now() + interval '100 milliseconds')`, queue)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			var marked int
			err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE metadata ? 'tierq:turn_due'`).Scan(&marked)
			return err == nil && marked == 0
		}, 10*time.Second, 10*time.Millisecond, "job %d placed", i)
	}
	require.Equal(t, 1, tracer.backends())
}

// placingTracer records the backends that ran a statement naming
// tierq:turn_due (the placing loop's looks and placings), alone or in a
// batch.
type placingTracer struct {
	mu   sync.Mutex
	pids map[uint32]bool
}

func (p *placingTracer) saw(conn *pgx.Conn, sql string) {
	if strings.Contains(sql, "tierq:turn_due") {
		p.mu.Lock()
		p.pids[conn.PgConn().PID()] = true
		p.mu.Unlock()
	}
}

func (p *placingTracer) backends() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pids)
}

func (p *placingTracer) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	p.saw(conn, data.SQL)
	return ctx
}

func (p *placingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (p *placingTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (p *placingTracer) TraceBatchQuery(_ context.Context, conn *pgx.Conn, data pgx.TraceBatchQueryData) {
	p.saw(conn, data.SQL)
}

func (p *placingTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
