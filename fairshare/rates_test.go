package fairshare_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/fairshare"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/limits"
	"github.com/tierq/tierq/tiers"
)

// setupRates is fair share over the priority and default queues of
// service fair, 5 workers each, where pro tenants may start 2 jobs a
// minute and free tenants are not limited.
func setupRates(t *testing.T) *capsBundle {
	t.Helper()
	db := testdb.New(t)
	_, err := db.Pool.Exec(t.Context(), `
		INSERT INTO tierq_services (name, base_queue, queues, kinds, recorded_by)
		VALUES ('fair', 'fair', '{fair_priority,fair_default,fair_scheduled}', '[]', 'test')`)
	require.NoError(t, err)
	require.NoError(t, limits.Record(t.Context(), db.Pool, limits.Config{Services: map[string]limits.Tiers{
		"fair": {tiers.Pro: {Rate: limits.Rate{Count: 2, Per: time.Minute}}},
	}}, []string{"fair"}, "scheduler"))
	a, err := fairshare.New(db.Pool, &fairshare.Config{Queues: map[string]fairshare.Queue{
		queue:          {Workers: 5, Fair: true},
		"fair_default": {Workers: 5, Fair: true},
	}})
	require.NoError(t, err)
	b := &capsBundle{&bundle{db: db, admitter: a}}
	b.beat(t) // a job waits to start only where a live worker fetches it
	return b
}

func TestPassWithRates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupRates(t)

	// Pro tenant p (2 a minute) has 10 jobs at priority 1: one available,
	// 9 held by the rate. Free tenant f has 20 at priority 3.
	b.insertTier(t, queue, "pro", "p", 1, 10)
	require.Equal(t, map[string]int{"p/available": 1, "p/pending": 9}, b.counts(t))
	b.insertTier(t, queue, "free", "f", 3, 20)

	// p's one job waits to start: p has no room, and no token is awaited
	// (its start wakes the passes). Its held jobs are no demand: f has the
	// rest of the capacity.
	p, err := b.admitter.Pass(ctx, queue)
	require.NoError(t, err)
	require.Equal(t, fairshare.Pass{Ran: true, Held: 16, Tenants: 2, HeldTenants: 1, Capacity: 5, RateLimited: 1}, p)

	// It starts; p has a token left: the pass admits one job of p's.
	require.Equal(t, []string{"p"}, b.fetch(t, 1))
	p, err = b.admitter.Pass(ctx, queue)
	require.NoError(t, err)
	require.Equal(t, 1, p.Admitted)
	require.Equal(t, 0, p.RateLimited)
	require.Equal(t, map[string]int{"p/running": 1, "p/available": 1, "p/pending": 8, "f/available": 4, "f/pending": 16}, b.counts(t))

	// That one starts too, and the burst is spent: the next token is due
	// in about 30 s (2 a minute), which the pass reports for its loop.
	require.Equal(t, []string{"p"}, b.fetch(t, 1))
	p, err = b.admitter.Pass(ctx, queue)
	require.NoError(t, err)
	require.Equal(t, 1, p.Admitted) // f's: f alone has the whole capacity, 5 places
	require.Equal(t, 1, p.RateLimited)
	require.Equal(t, 1, p.Tenants)
	require.Greater(t, p.RateWait, 20*time.Second) // 30 s less the time since the token was taken
	require.LessOrEqual(t, p.RateWait, 30*time.Second+time.Millisecond)
	require.Equal(t, map[string]int{"p/running": 2, "p/pending": 8, "f/available": 5, "f/pending": 15}, b.counts(t))

	// 30 s later (the bucket's clock moved back): one token, one job.
	b.exec(t, `UPDATE tenant_rate_buckets SET at = at - interval '30 seconds'`)
	p, err = b.admitter.Pass(ctx, queue)
	require.NoError(t, err)
	require.Equal(t, 1, p.Admitted)
	require.Equal(t, 1, b.counts(t)["p/available"])
	require.Equal(t, 3, b.db.Count(t, `SELECT count(*) FROM river_job WHERE metadata->>'tierq:tenant' = 'p' AND state <> 'pending'`))
	require.Equal(t, 0, b.db.Count(t, `SELECT count(*) FROM river_job WHERE state <> 'pending' AND metadata ? 'tierq:rate_held_at'`))
}
