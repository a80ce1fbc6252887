package migrate_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/loadtest"
)

// BenchmarkFiniteTimestampsInsert is the price of migration 00010's check
// on inserts. Three schemas whose river_job holds 1,000,000 finished jobs
// (testdb.SeedFinished), one with the check and two without (dropped), get
// the same batches in turn, the order rotating from one iteration to the
// next, so that all see the same machine. Each sub-benchmark reports the
// median time of a batch with the check and without it, their ratio, and
// the ratio of the two schemas without it (the control: what the ratio is
// when nothing differs):
//
//	go test -run '^$' -bench FiniteTimestampsInsert -benchtime 100x ./migrate/
//
// The batches: River's Insert of one job, its InsertMany of 100 (the path
// of every tierq producer), and one INSERT ... SELECT of 10,000 rows (the
// statement alone, where the check's share is largest).
func BenchmarkFiniteTimestampsInsert(b *testing.B) {
	ctx := context.Background()
	dbs := []*testdb.DB{testdb.New(b), testdb.New(b), testdb.New(b)} // checked, unchecked, control
	testdb.AllowInfinite(b, dbs[1])
	testdb.AllowInfinite(b, dbs[2])
	clients := make([]*river.Client[pgx.Tx], len(dbs))
	for i, db := range dbs {
		testdb.SeedFinished(b, db, 1_000_000)
		clients[i] = db.Producer(b)
	}

	many := make([]river.InsertManyParams, 100)
	for i := range many {
		many[i] = river.InsertManyParams{Args: loadtest.Args{}, InsertOpts: &river.InsertOpts{Queue: "analysis_default"}}
	}
	batches := []struct {
		name   string
		insert func(b *testing.B, k int)
	}{
		{name: "river_insert_1", insert: func(b *testing.B, k int) {
			_, err := clients[k].Insert(ctx, loadtest.Args{}, &river.InsertOpts{Queue: "analysis_default"})
			require.NoError(b, err)
		}},
		{name: "river_insert_many_100", insert: func(b *testing.B, k int) {
			_, err := clients[k].InsertMany(ctx, many)
			require.NoError(b, err)
		}},
		{name: "sql_insert_10000", insert: func(b *testing.B, k int) {
			_, err := dbs[k].Pool.Exec(ctx, `
				INSERT INTO river_job (state, queue, priority, kind, args, max_attempts, scheduled_at)
				SELECT 'available', 'analysis_default', 4, $1, '{}', 25, now() FROM generate_series(1, 10000)`, loadtest.Kind)
			require.NoError(b, err)
		}},
	}
	for _, batch := range batches {
		b.Run(batch.name, func(b *testing.B) {
			took := make([][]time.Duration, len(dbs))
			for i := range b.N {
				for j := range dbs {
					k := (i + j) % len(dbs)
					start := time.Now()
					batch.insert(b, k)
					took[k] = append(took[k], time.Since(start))
				}
			}
			withCheck, without, control := median(took[0]), median(took[1]), median(took[2])
			b.ReportMetric(float64(withCheck.Microseconds())/1000, "checked-ms/batch")
			b.ReportMetric(float64(without.Microseconds())/1000, "unchecked-ms/batch")
			b.ReportMetric(float64(withCheck)/float64(without), "checked/unchecked")
			b.ReportMetric(float64(control)/float64(without), "control/unchecked")
		})
	}
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
