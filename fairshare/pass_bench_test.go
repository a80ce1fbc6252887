package fairshare_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/fairshare"
	"github.com/tierq/tierq/internal/seed"
	"github.com/tierq/tierq/internal/testdb"
)

// BenchmarkPass times one fair-share pass that admits the same 5 jobs.
//
// rows=N: with 10k and with 1M rows in river_job: mostly finished work, and
// a tenth of the rows (1k, 100k) held for 100 tenants, each with one job in
// line, five of which have just started. Its cost should follow the line,
// the tenants and the 5, not the table or the held rows.
//
// tenants=N: with 10, 100, 1,000 and 10,000 active tenants in one queue of
// passTenantsWorkers (50) workers, each tenant with its window in line
// (max(1, ceil(50/N)) jobs: 5 with 10 tenants, 1 from 50 on) and 5 more
// held, and every worker busy (a job of each of the first 50 tenants, or 5
// of each of 10). Each round the 5 oldest running jobs end and the first 5
// of the line start, as a queue in steady state does, and the pass refills
// the 5 places: what a pass costs as the tenants grow, with the line
// growing with them (a place each once they outnumber the workers). The
// table is vacuumed and analyzed after the first pass holds the excess, as
// autovacuum would after a hold that size. docs/fairness.md, "Many
// tenants".
//
//	go test -run '^$' -bench Pass -benchtime 200x ./fairshare/
//	go test -run '^$' -bench 'Pass/tenants' -benchtime 100x -count 3 ./fairshare/
//
// With TIERQ_EXPLAIN=DIR it writes EXPLAIN (ANALYZE, BUFFERS) of the pass
// to DIR/fairshare-pass-rows=N.txt and DIR/fairshare-pass-tenants=N.txt.
func BenchmarkPass(b *testing.B) {
	for _, total := range []int{10_000, 1_000_000} {
		b.Run(fmt.Sprintf("rows=%d", total), func(b *testing.B) {
			ctx := context.Background()
			db := testdb.New(b)
			testdb.SeedFinished(b, db, total-total/10)
			_, err := db.Pool.Exec(ctx, `
				INSERT INTO river_job (kind, args, queue, priority, state, scheduled_at, max_attempts, metadata)
				SELECT 'fair_test', '{}', $1, 2, 'pending', now() - interval '1 hour' + i * interval '1 millisecond', 25,
				       jsonb_build_object('tierq:tenant', 't' || i % 100, 'tierq:held_at', now())
				FROM generate_series(1, $2) AS i`, queue, total/10)
			require.NoError(b, err)
			require.NoError(b, seed.Analyze(ctx, db.Pool))
			// 100 tenants over a capacity of 100: a window of one each.
			a, err := fairshare.New(db.Pool, &fairshare.Config{Queues: map[string]fairshare.Queue{queue: {Workers: 100, Fair: true}}})
			require.NoError(b, err)
			p, err := a.Pass(ctx, queue)
			require.NoError(b, err)
			require.Equal(b, 100, p.Admitted)
			testdb.WriteExplain(b, db, fmt.Sprintf("fairshare-pass-rows=%d.txt", total), fairshare.PassSQL, passArgs(100)...)

			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				// Five of the line start (and go back to the held ones, so that
				// every round has as many): five places to refill.
				_, err := db.Pool.Exec(ctx, `UPDATE river_job SET state = 'pending', metadata = metadata || '{"tierq:held_at": "x"}'
					WHERE id IN (SELECT id FROM river_job WHERE state = 'available' AND queue = $1 ORDER BY priority, scheduled_at, id LIMIT 5)`, queue)
				require.NoError(b, err)
				b.StartTimer()
				p, err := a.Pass(ctx, queue)
				require.NoError(b, err)
				require.Equal(b, 5, p.Admitted)
			}
		})
	}
	for _, tenants := range []int{10, 100, 1_000, 10_000} {
		b.Run(fmt.Sprintf("tenants=%d", tenants), func(b *testing.B) {
			ctx := context.Background()
			db := testdb.New(b)
			window := max(1, (passTenantsWorkers+tenants-1)/tenants)
			// Every tenant's window and 5 more, available, oldest first
			// tenant after tenant (the first pass holds the 5 back), and
			// every worker busy.
			_, err := db.Pool.Exec(ctx, `
				INSERT INTO river_job (kind, args, queue, priority, state, scheduled_at, max_attempts, metadata)
				SELECT 'fair_test', '{}', $1, 2, 'available', now() - interval '1 hour' + i * interval '1 millisecond', 25,
				       jsonb_build_object('tierq:tenant', 't' || i / $3::int)
				FROM generate_series(0, $2::int * $3::int - 1) AS i`, queue, tenants, window+5)
			require.NoError(b, err)
			_, err = db.Pool.Exec(ctx, `
				INSERT INTO river_job (kind, args, queue, priority, state, scheduled_at, attempted_at, attempt, max_attempts, metadata)
				SELECT 'fair_test', '{}', $1, 2, 'running', now() - interval '2 hours', now() - i * interval '10 milliseconds', 1, 25,
				       jsonb_build_object('tierq:tenant', 't' || i % $2::int)
				FROM generate_series(1, $3) AS i`, queue, tenants, passTenantsWorkers)
			require.NoError(b, err)
			a, err := fairshare.New(db.Pool, &fairshare.Config{Queues: map[string]fairshare.Queue{queue: {Workers: passTenantsWorkers, Fair: true}}})
			require.NoError(b, err)
			p, err := a.Pass(ctx, queue)
			require.NoError(b, err)
			require.Equal(b, tenants*5, p.Held)
			require.Equal(b, tenants, p.Tenants)
			// Statistics of the held queue, as autovacuum takes them after
			// a hold this size. (Taken before it, with nothing pending, the
			// EXPLAIN, planned for its arguments, read the held tenants
			// through River's fetching index, every held row per tenant:
			// 1.9 s at 1,000 tenants. The passes, which run a generic plan,
			// were not slower.)
			_, err = db.Pool.Exec(ctx, `VACUUM ANALYZE river_job`)
			require.NoError(b, err)
			// Until the yields settle: the tenants with jobs running stood
			// ahead of those that have had no turn.
			for range 5 {
				p, err = a.Pass(ctx, queue)
				require.NoError(b, err)
				require.Zero(b, p.Held+p.Admitted)
			}
			testdb.WriteExplain(b, db, fmt.Sprintf("fairshare-pass-tenants=%d.txt", tenants), fairshare.PassSQL, passArgs(passTenantsWorkers)...)
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				// The 5 oldest running jobs end (and come back held, at the
				// back of their tenants' held jobs, so that every round
				// has as many), and the first 5 of the line start: five
				// places to refill, every worker busy again.
				_, err := db.Pool.Exec(ctx, `UPDATE river_job
					SET state = 'pending', scheduled_at = now(), attempted_at = NULL, metadata = metadata || '{"tierq:held_at": "x"}'
					WHERE id IN (SELECT id FROM river_job WHERE state = 'running' AND queue = $1 ORDER BY attempted_at, id LIMIT 5)`, queue)
				require.NoError(b, err)
				_, err = db.Pool.Exec(ctx, `UPDATE river_job SET state = 'running', attempted_at = now(), attempt = attempt + 1
					WHERE id IN (SELECT id FROM river_job WHERE state = 'available' AND queue = $1 AND scheduled_at <= now()
					             ORDER BY priority, scheduled_at, id LIMIT 5)`, queue)
				require.NoError(b, err)
				b.StartTimer()
				p, err := a.Pass(ctx, queue)
				require.NoError(b, err)
				require.Equal(b, 5, p.Admitted)
			}
		})
	}
}

// passTenantsWorkers is the capacity of BenchmarkPass's tenants= queue.
const passTenantsWorkers = 50

// passArgs are the pass statement's arguments over queue with workers
// workers here, of every kind (what Admitter.Pass sends).
func passArgs(workers int) []any {
	return []any{queue, workers, true, []string{}, true}
}

// BenchmarkLoneBacklog times what a tick every 10 s costs over a queue of
// one tenant with 50,000 available jobs: a full pass (it ranks them all)
// against the check that replaces it there (it stops at the first job a
// pass would act on, here none); and what a look costs (every 2 s, and up
// to every 10 ms while jobs start and end) at another queue, empty, beside
// that backlog: planned for its queue as tierq runs it, and as a cached
// prepared statement, whose generic plan (chosen after five executions)
// read the whole table.
//
//	go test -run '^$' -bench LoneBacklog -benchtime 20x ./fairshare/
func BenchmarkLoneBacklog(b *testing.B) {
	ctx := context.Background()
	db := testdb.New(b)
	_, err := db.Pool.Exec(ctx, `
		INSERT INTO river_job (kind, args, queue, priority, state, scheduled_at, max_attempts, metadata)
		SELECT 'fair_test', '{}', $1, 4, 'available', now() - interval '1 hour' + i * interval '1 millisecond', 25, '{}'
		FROM generate_series(1, 50000) AS i`, queue)
	require.NoError(b, err)
	require.NoError(b, seed.Analyze(ctx, db.Pool))
	a, err := fairshare.New(db.Pool, &fairshare.Config{Queues: map[string]fairshare.Queue{queue: {Workers: 3, Fair: true}}})
	require.NoError(b, err)
	b.Run("pass", func(b *testing.B) {
		for range b.N {
			p, err := a.Pass(ctx, queue)
			require.NoError(b, err)
			require.True(b, p.Lone)
		}
	})
	b.Run("check", func(b *testing.B) {
		for range b.N {
			var now time.Time
			var held, act bool
			require.NoError(b, db.Pool.QueryRow(ctx, fairshare.CheckSQL, pgx.QueryExecModeCacheDescribe, queue, "", true, []string{}, true).Scan(&now, &held, &act))
			require.False(b, held || act)
		}
	})
	for _, look := range []struct {
		name string
		mode pgx.QueryExecMode
	}{{"look", pgx.QueryExecModeCacheDescribe}, {"look as a cached statement", pgx.QueryExecModeCacheStatement}} {
		b.Run(look.name, func(b *testing.B) {
			conn, err := db.Pool.Acquire(ctx) // one connection: its cached statement goes generic
			require.NoError(b, err)
			defer conn.Release()
			run := func() {
				var now time.Time
				var held, newcomer bool
				var alone *string
				require.NoError(b, conn.QueryRow(ctx, fairshare.LoneCheckSQL, look.mode, "fair_other", time.Now().Add(-time.Second), nil, []string{}, true).
					Scan(&now, &held, &newcomer, &alone))
				require.False(b, held || newcomer)
			}
			for range 6 { // past PostgreSQL's five custom plans
				run()
			}
			b.ResetTimer()
			for range b.N {
				run()
			}
		})
	}
}

// BenchmarkFirstHold times the pass that holds a lone tenant's backlog back
// to its window when a second tenant's first job arrives: one statement
// that moves every job of the backlog but the window to pending. Its cost
// should follow the backlog; it grew with its square while the statement
// joined the jobs it held with river_job (a nested loop over a CTE
// estimated at one row: 10,000 jobs took 35 s, 20,000 took 2 min 28 s, with
// 300,000 finished jobs in the table; the jobs being held are locked
// meanwhile, so workers idled).
//
//	go test -run '^$' -bench FirstHold -benchtime 3x ./fairshare/
func BenchmarkFirstHold(b *testing.B) {
	for _, backlog := range []int{5_000, 20_000} {
		b.Run(fmt.Sprintf("backlog=%d", backlog), func(b *testing.B) {
			ctx := context.Background()
			db := testdb.New(b)
			testdb.SeedFinished(b, db, 100_000)
			a, err := fairshare.New(db.Pool, &fairshare.Config{Queues: map[string]fairshare.Queue{queue: {Workers: 4, Fair: true}}})
			require.NoError(b, err)
			for range b.N {
				b.StopTimer()
				_, err := db.Pool.Exec(ctx, `DELETE FROM river_job WHERE queue = $1`, queue)
				require.NoError(b, err)
				_, err = db.Pool.Exec(ctx, `
					INSERT INTO river_job (kind, args, queue, priority, state, scheduled_at, max_attempts, metadata)
					SELECT 'fair_test', '{}', $1, 4, 'available', now() - interval '1 hour' + i * interval '1 millisecond', 25,
					       CASE WHEN i = $2 THEN '{"tierq:tenant": "newcomer"}'::jsonb ELSE '{"tierq:tenant": "flood"}'::jsonb END
					FROM generate_series(1, $2) AS i`, queue, backlog)
				require.NoError(b, err)
				require.NoError(b, seed.Analyze(ctx, db.Pool))
				b.StartTimer()
				p, err := a.Pass(ctx, queue)
				require.NoError(b, err)
				require.Equal(b, backlog-3, p.Held) // windows of 2: the flood keeps 2, the newcomer its 1
			}
		})
	}
}
