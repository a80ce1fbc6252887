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

// BenchmarkPass times one fair-share pass that admits the same 5 jobs with
// 10k and with 1M rows in river_job: mostly finished work, and a tenth of
// the rows (1k, 100k) held for 100 tenants, each with one job in line, five
// of which have just started. Its cost should follow the line, the tenants
// and the 5, not the table or the held rows.
//
//	go test -run '^$' -bench Pass -benchtime 200x ./fairshare/
//
// With TIERQ_EXPLAIN=DIR it writes EXPLAIN (ANALYZE, BUFFERS) of the pass
// to DIR/fairshare-pass-rows=N.txt.
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
			testdb.WriteExplain(b, db, fmt.Sprintf("fairshare-pass-rows=%d.txt", total), fairshare.PassSQL, queue, 100, true)

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
			require.NoError(b, db.Pool.QueryRow(ctx, fairshare.CheckSQL, pgx.QueryExecModeCacheDescribe, queue, "", true).Scan(&now, &held, &act))
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
				require.NoError(b, conn.QueryRow(ctx, fairshare.LoneCheckSQL, look.mode, "fair_other", time.Now().Add(-time.Second), nil).
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
