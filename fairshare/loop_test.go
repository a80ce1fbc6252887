package fairshare

import (
	"context"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/jobmeta"
)

// statementCounter counts the executions of one statement on a pool, alone
// or in a batch.
type statementCounter struct {
	sql string
	n   atomic.Int64
}

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if data.SQL == c.sql {
		c.n.Add(1)
	}
	return ctx
}

func (*statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *statementCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (c *statementCounter) TraceBatchQuery(_ context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	if data.SQL == c.sql {
		c.n.Add(1)
	}
}

func (*statementCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// contendedLoop sets up a queue of two tenants (5 jobs each, capacity 2:
// contended) and an Admitter over it whose pool counts the executions of
// sql, ticking once an hour (only wake-ups and retries run passes).
func contendedLoop(t *testing.T, sql string) (*testdb.DB, *Admitter, *statementCounter) {
	t.Helper()
	db := testdb.New(t)
	counter := &statementCounter{sql: sql}
	config := db.Pool.Config().Copy()
	config.ConnConfig.Tracer = counter
	a, err := New(testdb.PoolFor(t, config), &Config{Queues: map[string]Queue{loopQueue: {Workers: 2, Fair: true}}, Tick: time.Hour})
	require.NoError(t, err)
	insertAvailable(t, db, loopQueue, "a", 5)
	insertAvailable(t, db, loopQueue, "b", 5)
	return db, a, counter
}

// runLoop runs a's loop over loopQueue until the test ends.
func runLoop(t *testing.T, a *Admitter) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.loop(ctx, a.queues[loopQueue], 0) }()
	t.Cleanup(func() { cancel(); <-done })
}

const loopQueue = "fair_priority"

// TestLockMissesBackOff: while another process holds a queue's pass lock,
// this process tries again after a PassInterval, then twice as late after
// each further miss, up to 16 PassIntervals: with many replicas most
// attempts miss, and each would cost a transaction. Released, the lock is
// taken by the next attempt.
func TestLockMissesBackOff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, a, attempts := contendedLoop(t, lockSQL)
	const queue = loopQueue

	// Another process's pass, holding the lock.
	other, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Rollback(ctx) })
	var locked bool
	require.NoError(t, other.QueryRow(ctx, lockSQL, queue).Scan(&locked))
	require.True(t, locked)

	runLoop(t, a)
	started := time.Now()
	testdb.WaitFor(t, 10*time.Second, "a first attempt", func() bool { return attempts.n.Load() >= 1 })
	time.Sleep(500 * time.Millisecond)
	n := attempts.n.Load()
	// Waits of 2, 4, 8, 16 ms, then 32 ms each: at most 5 + 500/32 ≈ 21
	// attempts in 500 ms (fewer on a slow machine, never more); without
	// the back-off, one per 2 ms: about 250.
	require.LessOrEqual(t, n, int64(21), "attempts in %s", time.Since(started))
	require.Equal(t, 10, db.Count(t, `SELECT count(*) FROM river_job WHERE state = 'available'`), "nothing done without the lock")

	require.NoError(t, other.Rollback(ctx))
	testdb.WaitFor(t, 10*time.Second, "a pass once the lock is free", func() bool {
		return db.Count(t, `SELECT count(*) FROM river_job WHERE state = 'pending'`) == 8
	})
}

// TestAPausedQueueWaitsForItsTick: a pass over a queue paused in River does
// nothing and says so (Paused), and the loop does not try again at once
// (as it does when another process holds the pass's lock): a queue paused
// for an hour must not cost a transaction every PassInterval. Resumed, the
// next wake-up runs a pass.
func TestAPausedQueueWaitsForItsTick(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, a, passes := contendedLoop(t, passSQL)
	const queue = loopQueue
	_, err := db.Pool.Exec(ctx, `INSERT INTO river_queue (name, paused_at, updated_at) VALUES ($1, now(), now())`, queue)
	require.NoError(t, err)

	p, err := a.Pass(ctx, queue)
	require.NoError(t, err)
	require.Equal(t, Pass{Paused: true, Capacity: 2}, p)
	require.Equal(t, 5, db.Count(t, `SELECT count(*) FROM river_job WHERE metadata->>'tierq:tenant' = 'a' AND state = 'available'`), "nothing held")

	runLoop(t, a)
	testdb.WaitFor(t, 10*time.Second, "the loop's first pass", func() bool { return passes.n.Load() >= 2 })
	time.Sleep(200 * time.Millisecond) // 100 PassIntervals: a retrying loop would run about 100 passes
	require.Equal(t, int64(2), passes.n.Load(), "the loop tried again while the queue was paused")

	_, err = db.Pool.Exec(ctx, `UPDATE river_queue SET paused_at = NULL WHERE name = $1`, queue)
	require.NoError(t, err)
	a.queues[queue].signal()
	testdb.WaitFor(t, 10*time.Second, "a pass after the resume", func() bool {
		return db.Count(t, `SELECT count(*) FROM river_job WHERE state = 'pending'`) == 8
	})
}

// checkTimes records when each queue's lone check starts, by queue.
type checkTimes struct {
	mu    sync.Mutex
	first map[string][]time.Time
}

func (c *checkTimes) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if data.SQL == loneCheckSQL {
		c.mu.Lock()
		queue, _ := data.Args[1].(string) // after the QueryExecMode
		c.first[queue] = append(c.first[queue], time.Now())
		c.mu.Unlock()
	}
	return ctx
}

func (*checkTimes) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestQueueLoopsTickApart: the loops of a process's queues tick at even
// intervals of a Tick, not at once: with Tick 400ms and two queues, their
// first ticked looks are about 200ms apart (before, they came within a
// millisecond of each other, and so did their full passes, every fifth
// Tick).
func TestQueueLoopsTickApart(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	times := &checkTimes{first: map[string][]time.Time{}}
	config := db.Pool.Config().Copy()
	config.ConnConfig.Tracer = times
	a, err := New(testdb.PoolFor(t, config), &Config{
		Queues: map[string]Queue{"fair_priority": {Workers: 2, Fair: true}, "fair_default": {Workers: 2, Fair: true}},
		Tick:   400 * time.Millisecond,
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	firstLook := func() (time.Time, time.Time, bool) {
		times.mu.Lock()
		defer times.mu.Unlock()
		p, d := times.first["fair_priority"], times.first["fair_default"]
		if len(p) == 0 || len(d) == 0 {
			return time.Time{}, time.Time{}, false
		}
		return p[0], d[0], true
	}
	require.Eventually(t, func() bool { _, _, ok := firstLook(); return ok }, 5*time.Second, 10*time.Millisecond)
	p, d, _ := firstLook()
	require.GreaterOrEqual(t, max(p.Sub(d), d.Sub(p)), 100*time.Millisecond, "first looks at %s and %s", p, d)
}

// TestPassIsPlannedOnce: a connection plans a pass's statement once (a
// generic plan), not afresh at each of its first five executions.
func TestPassIsPlannedOnce(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	a, pool := oneConnection(t, db, &Config{Queues: map[string]Queue{loopQueue: {Workers: 2, Fair: true}}})
	insertAvailable(t, db, loopQueue, "a", 5)
	insertAvailable(t, db, loopQueue, "b", 5)
	ctx := context.Background()
	for range 7 {
		p, err := a.Pass(ctx, loopQueue)
		require.NoError(t, err)
		require.True(t, p.Ran)
	}
	var generic, custom int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1`, passSQL).
		Scan(&generic, &custom))
	require.Equal(t, []int64{7, 0}, []int64{generic, custom}, "generic plans, custom plans")
}

// TestLooksArePlannedForTheirQueue: the look and the check are planned
// for the queue they read at every execution, never with a generic plan.
// Generic, the look's EXISTS over "this queue's jobs made available since
// the watermark" was costed as finding a row early and became a scan of
// every job of every queue: over a backlog of 20,000 in another queue it
// read all of them at each look of an empty queue (5–20 ms instead of
// 0.03, on the development machine, every look of every queue).
func TestLooksArePlannedForTheirQueue(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	a, pool := oneConnection(t, db, &Config{Queues: map[string]Queue{loopQueue: {Workers: 2, Fair: true}}})
	insertAvailable(t, db, "another_queue", "a", 20_000)
	insertAvailable(t, db, loopQueue, "a", 1)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `ANALYZE river_job`)
	require.NoError(t, err)
	p, err := a.Pass(ctx, loopQueue)
	require.NoError(t, err)
	require.True(t, p.Lone)
	for range 7 {
		for _, kind := range []passKind{look, check} {
			p, err := a.pass(ctx, a.queues[loopQueue], kind)
			require.NoError(t, err)
			require.True(t, p.Checked)
		}
	}
	require.Zero(t, genericPlans(t, pool, loneCheckSQL, checkSQL), "generic plans of the look and the check")
}

// TestLendingIsPlannedForItsQueues: a lending pass's statement is neither
// forced onto a generic plan as a fair-share pass's is (locked), nor left
// to PostgreSQL's choice after five executions. Generic, its EXISTS over
// the paid work waiting was costed as finding a row early and read every
// job of every queue.
func TestLendingIsPlannedForItsQueues(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	a, pool := oneConnection(t, db, &Config{
		Queues: map[string]Queue{"fair_priority": {Workers: 5, Fair: true}, "fair_default": {Workers: 3, Fair: true}},
		Lend:   &Lend{Queue: "fair_priority", From: "fair_default", Floor: 1},
	})
	insertAvailable(t, db, "fair_default", "f", 20)
	ctx := context.Background()
	for range 7 {
		p, err := a.LendPass(ctx)
		require.NoError(t, err)
		require.True(t, p.Ran)
	}
	require.Equal(t, 4, db.Count(t, `SELECT count(*) FROM river_job WHERE metadata ? 'tierq:lent_from'`), "capacity 5 less the floor")
	require.Zero(t, genericPlans(t, pool, lendSQL), "generic plans of the lending pass")
}

// oneConnection is an Admitter of cfg (Tick an hour: nothing runs unless
// the test runs it) on a pool of one connection, and that pool: every
// statement it sends, and a count of pg_prepared_statements, are on the
// same connection.
func oneConnection(t *testing.T, db *testdb.DB, cfg *Config) (*Admitter, *pgxpool.Pool) {
	t.Helper()
	config := db.Pool.Config().Copy()
	config.MaxConns = 1
	pool := testdb.PoolFor(t, config)
	cfg.Tick = time.Hour
	a, err := New(pool, cfg)
	require.NoError(t, err)
	return a, pool
}

// genericPlans is how many times pool's connection ran statements among
// sqls on a generic plan.
func genericPlans(t *testing.T, pool *pgxpool.Pool, sqls ...string) int64 {
	t.Helper()
	var generic int64
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT coalesce(sum(generic_plans), 0) FROM pg_prepared_statements WHERE statement = ANY($1)`, sqls).Scan(&generic))
	return generic
}

// TestPassPlanReadsTheHeldIndexByTenantKey: a pass's generic plan (how a
// pass runs: locked) finds each tenant's held jobs through
// river_job_tierq_held_idx by the bounded tenant key of migration 00009 (the
// Index Cond names its CASE expression; a key the index was not built on
// would sort every held job of the queue per probe), and holds a backlog
// back with one probe per job by id, not a join of the held jobs with
// river_job (a nested loop over the CTE, estimated at one row: 35 s to
// hold a lone tenant's 10,000 jobs back, 2 min 28 s for 20,000); and reads
// every row it found by id through the primary key (stillAvailableSQL).
func TestPassPlanReadsTheHeldIndexByTenantKey(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	_, pool := oneConnection(t, db, &Config{Queues: map[string]Queue{loopQueue: {Workers: 2, Fair: true}}})
	insertAvailable(t, db, loopQueue, "a", 50)
	ctx := context.Background()
	testdb.SeedFinished(t, db, 20_000)
	_, err := db.Pool.Exec(ctx, `
		INSERT INTO river_job (kind, args, queue, priority, state, scheduled_at, max_attempts, metadata)
		SELECT 'fair_test', '{}', $1, 2, 'pending', now() - interval '1 hour' + i * interval '1 millisecond', 25,
		       jsonb_build_object('tierq:tenant', 't' || i % 100, 'tierq:held_at', now())
		FROM generate_series(1, 5000) AS i`, loopQueue)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `ANALYZE river_job`)
	require.NoError(t, err)
	lines := genericPlan(t, pool, `pass (text, int, bool, text[], bool) AS `+passSQL, `pass('`+loopQueue+`', 2, true, '{fair_test}', false)`)
	plan := strings.Join(lines, "\n")

	var keyed int
	for i, l := range lines {
		if strings.Contains(l, " using river_job_tierq_held_idx") || strings.Contains(l, "Bitmap Index Scan on river_job_tierq_held_idx") {
			for _, c := range lines[i+1 : min(i+4, len(lines))] {
				if strings.Contains(c, "Index Cond:") && strings.Contains(c, "CASE WHEN (octet_length(") {
					keyed++
				}
			}
		}
	}
	// The loose scan's step (its anchor reads the queue's range) and the
	// admission's probe.
	require.GreaterOrEqual(t, keyed, 2, "held index reads by the tenant key:\n%s", plan)
	require.Equal(t, 1, strings.Count(plan, "CTE Scan on excess"), "the held-back jobs read once, for their ids:\n%s", plan)
	// Rows found by id are read by id (the primary key), never by
	// filtering an index scan of every available job of every queue.
	requireIDsByKey(t, lines)
}

// genericPlan prepares statement (its name, parameter types and "AS" SQL)
// on pool's one connection and returns the lines of EXPLAIN of execute
// (the name and arguments) with the generic plan, as the processes run it.
func genericPlan(t *testing.T, pool *pgxpool.Pool, statement, execute string) []string {
	t.Helper()
	ctx := context.Background()
	_, err := pool.Exec(ctx, `PREPARE `+statement)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `SET plan_cache_mode = force_generic_plan`)
	require.NoError(t, err)
	rows, err := pool.Query(ctx, `EXPLAIN EXECUTE `+execute)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return lines
}

// staleStatistics seeds 20,000 finished jobs and analyzes river_job, as a
// service's table is analyzed while nothing waits (tierctl bench traffic
// analyzes its finished jobs first): the planner then takes the jobs that
// come later, available or pending, for rare.
func staleStatistics(t *testing.T, db *testdb.DB) {
	t.Helper()
	testdb.SeedFinished(t, db, 20_000)
	_, err := db.Pool.Exec(context.Background(), `ANALYZE river_job`)
	require.NoError(t, err)
}

// TestTurnLookupsPlanOnce: the turn trigger and the tag function plan
// their statements once per connection (migration 00018), and the generic
// plans of the tag's two look-ups, taken from the function's own source,
// read the line's head through River's fetching index and the tenant's
// last turn through river_job_tierq_turn_last_idx, on statistics taken
// before the backlog arrived (through river_job_tierq_turn_idx, with the
// state written state = 'available', the generic plan read the fetching
// index and filtered the whole line for a tenant with no job in it: 5,000
// rows, 2.5 ms, against 0.03 ms).
func TestTurnLookupsPlanOnce(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	_, pool := oneConnection(t, db, &Config{Queues: map[string]Queue{loopQueue: {Workers: 2, Fair: true}}})
	ctx := context.Background()

	rows, err := pool.Query(ctx, `SELECT proname::text, array_to_string(proconfig, ' ') FROM pg_proc
		WHERE proname IN ('tierq_tenant_turn', 'tierq_turn_tag') AND pronamespace = current_schema()::regnamespace ORDER BY proname`)
	require.NoError(t, err)
	type fn struct{ Name, Config string }
	fns, err := pgx.CollectRows(rows, pgx.RowToStructByPos[fn])
	require.NoError(t, err)
	require.Len(t, fns, 2)
	for _, f := range fns {
		// No search_path of their own (migration 00019: setting it at
		// every call cost more than either function's look-ups): they name
		// the schema themselves.
		require.Equal(t, "plan_cache_mode=force_generic_plan", f.Config, f.Name)
	}

	staleStatistics(t, db)
	insertLine(t, db, "available", 5000, `m`)
	var src string
	require.NoError(t, pool.QueryRow(ctx, `SELECT prosrc FROM pg_proc WHERE proname = 'tierq_turn_tag' AND pronamespace = current_schema()::regnamespace`).Scan(&src))
	lookups := regexp.MustCompile(`(?s)SELECT j\.scheduled_at INTO (head|last) (FROM .*?);`).FindAllStringSubmatch(src, -1)
	require.Len(t, lookups, 2, src)
	require.Equal(t, 2, strings.Count(src, "FROM "+db.Schema+".river_job AS j"), src)
	params := strings.NewReplacer("p_queue", "$1", "p_priority", "$2", "p_tenant", "$3")
	plans := map[string]string{}
	for _, l := range lookups {
		stmt := `SELECT j.scheduled_at ` + params.Replace(l[2])
		if l[1] == "head" {
			plans[l[1]] = strings.Join(genericPlan(t, pool, `head (text, smallint) AS `+stmt, `head('`+loopQueue+`', 2)`), "\n")
		} else {
			plans[l[1]] = strings.Join(genericPlan(t, pool, `last (text, smallint, text) AS `+stmt, `last('`+loopQueue+`', 2, 'absent')`), "\n")
		}
	}
	require.Contains(t, plans["head"], "river_job_prioritized_fetching_index", plans["head"])
	require.Contains(t, plans["last"], "river_job_tierq_turn_last_idx", plans["last"])
	require.NotContains(t, plans["last"], "river_job_prioritized_fetching_index", plans["last"])
}

// insertLine inserts n jobs into loopQueue at priority 2 in state, 1 ms
// apart from an hour ago, of 100 tenants, with metadata meta: an SQL
// expression of i (1 to n) and m (the job's tenant as metadata).
func insertLine(t *testing.T, db *testdb.DB, state string, n int, meta string) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), `
		INSERT INTO river_job (kind, args, queue, priority, state, scheduled_at, max_attempts, metadata)
		SELECT 'fair_test', '{}', $1, 2, $2::river_job_state, now() - interval '1 hour' + i * interval '1 millisecond', 25, `+meta+`
		FROM generate_series(1, $3) AS i
		CROSS JOIN LATERAL (SELECT jsonb_build_object('tierq:tenant', 't' || i % 100) AS m) AS t`, loopQueue, state, n)
	require.NoError(t, err)
}

// requireIDsByKey fails when a plan's line filters rows by "id = ANY":
// rows a statement found by id read through another index than the
// primary key, whatever the filter's other conditions.
func requireIDsByKey(t *testing.T, lines []string) {
	t.Helper()
	for _, l := range lines {
		if strings.Contains(l, "Filter:") {
			require.NotContains(t, l, "id = ANY", "rows found by id read through another index:\n%s", strings.Join(lines, "\n"))
		}
	}
}

// TestRestsAfter: the loop rests after a pass that moved nothing, and
// follows one that moved jobs at once, however many tenants have a place in
// line (20 tenants of one place each over 5 workers of 20 ms jobs drain the
// line in 80 ms: resting three slow passes left it dry).
func TestRestsAfter(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		p    Pass
		rest bool
	}{
		{"moved nothing", Pass{Ran: true, Tenants: 2, Capacity: 4}, true},
		{"moved nothing, 20 tenants", Pass{Ran: true, Tenants: 20, Capacity: 5}, true},
		{"admitted, 2 tenants", Pass{Ran: true, Admitted: 2, Tenants: 2, HeldTenants: 2, Capacity: 4}, false},
		{"held back, 2 tenants", Pass{Ran: true, Held: 30, Tenants: 2, Capacity: 4}, false},
		{"yielded", Pass{Ran: true, Yielded: 1, Tenants: 3, Capacity: 4}, false},
		{"admitted, 20 tenants over 5 workers", Pass{Ran: true, Admitted: 1, Tenants: 20, HeldTenants: 20, Capacity: 5}, false},
		{"another process's pass", Pass{}, false},
		{"paused", Pass{Paused: true, Capacity: 2}, false},
		{"a look", Pass{Ran: true, Lone: true, Checked: true}, false},
		{"a pass that found a tenant alone: looks follow", Pass{Ran: true, Lone: true, Tenants: 1, Capacity: 2}, false},
		{"a pass over an empty queue: looks follow", Pass{Ran: true, Lone: true, Capacity: 2}, false},
	} {
		require.Equal(t, c.rest, restsAfter(c.p), c.name)
	}
}

// TestRefillPlanReadsRowsByID: the limits' refill locks the jobs it picked
// by their ids through the primary key, as a pass does (stillHeldSQL).
// Written as jobmetasql.HeldSQL, the generic plan read them through River's
// fetching index, whose first column is the state, filtering every pending
// job by id, once the statistics were taken before anything was held (the
// same shape read 2,547 rows for one id, 5 ms, in an experiment's refill
// under tierctl bench traffic).
func TestRefillPlanReadsRowsByID(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	_, pool := oneConnection(t, db, &Config{Queues: map[string]Queue{loopQueue: {Workers: 2, Fair: true}}})
	// Statistics taken before anything was held: the planner takes
	// pending jobs for rare.
	staleStatistics(t, db)
	insertLine(t, db, "pending", 2500, `m || jsonb_build_object('tierq:held_at', now())`)
	lines := genericPlan(t, pool, `refill (jsonb[], text[]) AS `+refillSQL, `refill(ARRAY['{"tierq:tenant": "t1"}']::jsonb[], ARRAY['`+loopQueue+`'])`)
	plan := strings.Join(lines, "\n")
	requireIDsByKey(t, lines)
	require.Equal(t, 2, strings.Count(plan, "Index Cond: (id = ANY"), "rows found by id read by the primary key (locked, admitted):\n%s", plan)
}

// TestPlacingLooksThroughTheTurnIndex: the placing loop's look for marked
// jobs due (dueSQL, sent after sortsOffSQL in one batch, as place sends
// it) reads river_job_tierq_turn_due_idx on statistics taken before the
// backlog arrived, where with sorts on it read River's fetching index
// (every available job of the queue at each look: this test failed so with
// the batch's first statement a plain SELECT); the placing statement
// reads the jobs it is given by primary key; and it computes one tag per
// tenant it places jobs of (three for three jobs of one tenant before
// 2026-11-28's backlog change, six with its tagged CTE inlined).
func TestPlacingLooksThroughTheTurnIndex(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	_, pool := oneConnection(t, db, &Config{Queues: map[string]Queue{loopQueue: {Workers: 2, Fair: true}}})
	ctx := context.Background()
	staleStatistics(t, db)
	insertLine(t, db, "available", 5000, `CASE WHEN i % 100 = 0 THEN m || jsonb_build_object('`+jobmeta.TurnDue+`', true) ELSE m END`)
	// In place's batch, after its settings (EXPLAIN with the parameter
	// bound shows the custom plan; the generic one is below).
	batch := placingBatch(true)
	var lines []string
	batch.Queue(`EXPLAIN `+dueSQL, []string{loopQueue}).Query(func(rows pgx.Rows) error {
		var err error
		lines, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	require.NoError(t, pool.SendBatch(ctx, batch).Close())
	require.Equal(t, 2, strings.Count(strings.Join(lines, "\n"), "river_job_tierq_turn_due_idx"), strings.Join(lines, "\n"))
	require.NotContains(t, strings.Join(lines, "\n"), "river_job_prioritized_fetching_index")

	// Its generic plan too (pgx prepares it), with the setting for the
	// session rather than the batch's transaction.
	_, err := pool.Exec(ctx, `SELECT `+strings.Replace(sortsOffSQL, "true", "false", 1))
	require.NoError(t, err)
	plan := strings.Join(genericPlan(t, pool, `due (text[]) AS `+dueSQL, `due(ARRAY['`+loopQueue+`'])`), "\n")
	require.Equal(t, 2, strings.Count(plan, "river_job_tierq_turn_due_idx"), plan)
	require.NotContains(t, plan, "river_job_prioritized_fetching_index", plan)

	// The jobs it found are placed by id, through the primary key.
	_, err = pool.Exec(ctx, `RESET enable_sort`)
	require.NoError(t, err)
	lines = genericPlan(t, pool, `place (text[], bigint[]) AS `+placeSQL, `place(ARRAY['`+loopQueue+`'], ARRAY[100, 200]::bigint[])`)
	requireIDsByKey(t, lines)
	require.Contains(t, strings.Join(lines, "\n"), "Index Cond: (id = ANY", strings.Join(lines, "\n"))

	// Placing three jobs of one tenant computes one tag, its first's: the
	// others follow it by steps (three when each job's was computed; six
	// when, besides, the tagged CTE was inlined and evaluated for each use
	// of the tag in the update).
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // read-only check, rolled back
	_, err = tx.Exec(ctx, `SET LOCAL track_functions = 'pl'`)
	require.NoError(t, err)
	var ids []int64
	require.NoError(t, tx.QueryRow(ctx, `SELECT array_agg(id) FROM (SELECT id FROM river_job WHERE metadata ? '`+jobmeta.TurnDue+`' ORDER BY id LIMIT 3) AS s`).Scan(&ids))
	var placed int
	require.NoError(t, tx.QueryRow(ctx, placeSQL, []string{loopQueue}, ids).Scan(&placed, nil))
	var calls int64
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_stat_get_xact_function_calls('tierq_turn_tag(text, smallint, text, timestamptz)'::regprocedure)`).Scan(&calls))
	require.Equal(t, []int64{3, 1}, []int64{int64(placed), calls})
}
