package producer_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/limits"
	"github.com/tierq/tierq/producer"
	"github.com/tierq/tierq/tiers"
)

type quotaBundle struct {
	db     *testdb.DB
	client *river.Client[pgx.Tx]
}

// quotaSetup records the analyzer's daily quotas as a scheduler whose
// environment says ANALYZER_FREE_TENANT_DAILY_QUOTA=7 and
// ANALYZER_PRO_TENANT_DAILY_QUOTA=2 would.
func quotaSetup(t *testing.T) *quotaBundle {
	t.Helper()
	db := testdb.New(t)
	require.NoError(t, limits.Record(t.Context(), db.Pool, limits.Config{Services: map[string]limits.Tiers{
		"analyzer": {tiers.Free: {DailyQuota: 7}, tiers.Pro: {DailyQuota: 2}},
	}}, testdb.Registry(t).Names(), "scheduler"))
	return &quotaBundle{db: db, client: db.Producer(t)}
}

// insert inserts one analysis of target for tenant at tier in a
// transaction of its own, committed unless the insert failed.
func (b *quotaBundle) insert(t *testing.T, tier tiers.Tier, tenant, target string) (producer.Inserted, error) {
	t.Helper()
	var out producer.Inserted
	err := pgx.BeginFunc(t.Context(), b.db.Pool, func(tx pgx.Tx) error {
		var err error
		out, err = b.insertTx(t, tx, tier, tenant, target)
		return err
	})
	return out, err
}

func (b *quotaBundle) insertTx(t *testing.T, tx pgx.Tx, tier tiers.Tier, tenant, target string) (producer.Inserted, error) {
	t.Helper()
	return producer.Insert(t.Context(), b.client, tx, producer.Job{
		Args: jobs.AnalysisArgs{Target: target}, Service: testdb.Service(t, "analyzer"), Tier: tier, Tenant: tenant,
	})
}

// jobsOf counts the tenant's jobs in river_job.
func (b *quotaBundle) jobsOf(t *testing.T, tenant string) int {
	t.Helper()
	return b.db.Count(t, `SELECT count(*) FROM river_job WHERE metadata->>'tierq:tenant' = $1`, tenant)
}

// used is the tenant's count today (UTC).
func (b *quotaBundle) used(t *testing.T, tenant string) int {
	t.Helper()
	return b.db.Count(t, `SELECT coalesce(sum(used), 0) FROM tenant_quota_usage
		WHERE service = 'analyzer' AND tenant = $1 AND day = (now() AT TIME ZONE 'UTC')::date`, tenant)
}

// TestQuotaUnderRacingInserts: 20 producers insert a job each for one free
// tenant at once against its quota of 7: exactly 7 jobs are inserted, the
// other 13 inserts return a *limits.QuotaError naming the tenant, the
// quota and the next midnight UTC, and the day's count is 7.
func TestQuotaUnderRacingInserts(t *testing.T) {
	t.Parallel()
	b := quotaSetup(t)

	var (
		start   = make(chan struct{})
		wg      sync.WaitGroup
		mu      sync.Mutex
		created int
		refused []*limits.QuotaError
	)
	for i := range 20 {
		wg.Go(func() {
			<-start
			res, err := b.insert(t, tiers.Free, "u_race", fmt.Sprintf("/srv/race/%d", i))
			mu.Lock()
			defer mu.Unlock()
			var qe *limits.QuotaError
			switch {
			case err == nil && !res.Duplicate:
				created++
			case errors.As(err, &qe) && errors.Is(err, limits.ErrQuotaExceeded):
				refused = append(refused, qe)
			default:
				t.Errorf("insert %d: %+v %v", i, res, err)
			}
		})
	}
	close(start)
	wg.Wait()

	require.Equal(t, 7, created)
	require.Len(t, refused, 13)
	require.Equal(t, 7, b.jobsOf(t, "u_race"))
	require.Equal(t, 7, b.used(t, "u_race"))
	var day time.Time
	require.NoError(t, b.db.Pool.QueryRow(t.Context(), `SELECT day FROM tenant_quota_usage WHERE tenant = 'u_race'`).Scan(&day))
	for _, qe := range refused {
		require.Equal(t, "analyzer", qe.Service)
		require.Equal(t, "u_race", qe.Tenant)
		require.Equal(t, tiers.Free, qe.Tier)
		require.Equal(t, int64(7), qe.Quota)
		require.Equal(t, day.UTC(), qe.Day)
		require.Equal(t, day.UTC().Add(24*time.Hour), qe.ResetAt)
		require.Positive(t, qe.RetryAfter)
		require.LessOrEqual(t, qe.RetryAfter, 24*time.Hour)
	}
}

// TestQuotaDedupHitsDoNotCount: a duplicate of a queued job is answered
// with the queued job and not counted, also once the tenant is at its
// quota (where it still moves the job up for a better tier); a new job is
// refused there.
func TestQuotaDedupHitsDoNotCount(t *testing.T) {
	t.Parallel()
	b := quotaSetup(t)
	two := int64(2)
	_, err := limits.SetOverride(t.Context(), b.db.Pool, "analyzer", "u_dup", limits.Override{DailyQuota: &two})
	require.NoError(t, err)

	first, err := b.insert(t, tiers.Free, "u_dup", "/srv/a")
	require.NoError(t, err)
	dup, err := b.insert(t, tiers.Free, "u_dup", "/srv/a")
	require.NoError(t, err)
	require.True(t, dup.Duplicate)
	require.Equal(t, first.Job.ID, dup.Job.ID)
	require.Equal(t, 1, b.used(t, "u_dup"), "a dedup hit does not count")

	_, err = b.insert(t, tiers.Free, "u_dup", "/srv/b")
	require.NoError(t, err)
	require.Equal(t, 2, b.used(t, "u_dup"))

	// At the quota: duplicates are still answered, a pro one moves the
	// free job up; a new job is refused and not inserted.
	dup, err = b.insert(t, tiers.Free, "u_dup", "/srv/b")
	require.NoError(t, err)
	require.True(t, dup.Duplicate)
	up, err := b.insert(t, tiers.Pro, "u_dup", "/srv/a")
	require.NoError(t, err)
	require.True(t, up.Duplicate)
	require.True(t, up.Upgraded)
	require.Equal(t, "analysis_priority", up.Job.Queue)
	_, err = b.insert(t, tiers.Free, "u_dup", "/srv/c")
	var qe *limits.QuotaError
	require.ErrorAs(t, err, &qe)
	require.Equal(t, int64(2), qe.Quota)
	require.Equal(t, 2, b.used(t, "u_dup"))
	require.Equal(t, 2, b.jobsOf(t, "u_dup"))
	require.Zero(t, b.db.Count(t, `SELECT count(*) FROM river_job WHERE args->>'target' = '/srv/c'`))
}

// TestQuotaOverrideBeatsTheTierDefault: a tenant's override is its quota
// whatever its tier's default, above or below it, and 0 lifts it; another
// tenant of the same tier keeps the default.
func TestQuotaOverrideBeatsTheTierDefault(t *testing.T) {
	t.Parallel()
	b := quotaSetup(t)
	ctx := t.Context()
	five, zero := int64(5), int64(0)
	_, err := limits.SetOverride(ctx, b.db.Pool, "analyzer", "u_big", limits.Override{DailyQuota: &five})
	require.NoError(t, err)
	_, err = limits.SetOverride(ctx, b.db.Pool, "analyzer", "u_free_for_all", limits.Override{DailyQuota: &zero})
	require.NoError(t, err)

	inserted := func(tenant string, n int) (ok int, quota int64) {
		for i := range n {
			_, err := b.insert(t, tiers.Pro, tenant, fmt.Sprintf("/srv/%s/%d", tenant, i))
			var qe *limits.QuotaError
			switch {
			case err == nil:
				ok++
			case errors.As(err, &qe):
				quota = qe.Quota
			default:
				require.NoError(t, err)
			}
		}
		return ok, quota
	}
	ok, quota := inserted("u_big", 8)
	require.Equal(t, 5, ok, "the override's 5, not pro's 2")
	require.Equal(t, int64(5), quota)
	ok, quota = inserted("u_plain", 4)
	require.Equal(t, 2, ok, "pro's default")
	require.Equal(t, int64(2), quota)
	ok, _ = inserted("u_free_for_all", 12)
	require.Equal(t, 12, ok, "0: no quota for this tenant")
	require.Zero(t, b.used(t, "u_free_for_all"), "not counted")
}

// TestQuotaRefusalLeavesTheTransactionUsable: a refused insert rolls back
// to a savepoint; the transaction's other inserts commit, and the count
// has only what was inserted.
func TestQuotaRefusalLeavesTheTransactionUsable(t *testing.T) {
	t.Parallel()
	b := quotaSetup(t)
	require.NoError(t, pgx.BeginFunc(t.Context(), b.db.Pool, func(tx pgx.Tx) error {
		for i := range 2 {
			if _, err := b.insertTx(t, tx, tiers.Pro, "u_tx", fmt.Sprintf("/srv/tx/%d", i)); err != nil {
				return err
			}
		}
		_, err := b.insertTx(t, tx, tiers.Pro, "u_tx", "/srv/tx/refused")
		require.ErrorIs(t, err, limits.ErrQuotaExceeded)
		_, err = b.insertTx(t, tx, tiers.Pro, "u_other", "/srv/tx/other")
		return err
	}))
	require.Equal(t, 2, b.jobsOf(t, "u_tx"))
	require.Equal(t, 1, b.jobsOf(t, "u_other"))
	require.Equal(t, 2, b.used(t, "u_tx"))
	require.Zero(t, b.db.Count(t, `SELECT count(*) FROM river_job WHERE args->>'target' = '/srv/tx/refused'`))

	// A transaction rolled back takes its count with it.
	tx, err := b.db.Pool.Begin(t.Context())
	require.NoError(t, err)
	_, err = b.insertTx(t, tx, tiers.Pro, "u_rolled", "/srv/rolled")
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(context.Background()))
	require.Zero(t, b.used(t, "u_rolled"))
}

// TestQuotaCountsTheUTCDay: a full count of yesterday (UTC) refuses
// nothing today, and a job without a tenant is not counted. (The day's
// edge, 23:59:59.999 against 00:00 UTC, is limits' TestChargeRollsOverAtMidnightUTC,
// whose charges carry their clock.)
func TestQuotaCountsTheUTCDay(t *testing.T) {
	t.Parallel()
	b := quotaSetup(t)
	_, err := b.db.Pool.Exec(t.Context(), `INSERT INTO tenant_quota_usage (service, tenant, day, used)
		VALUES ('analyzer', 'u_day', (now() AT TIME ZONE 'UTC')::date - 1, 7)`)
	require.NoError(t, err)
	_, err = b.insert(t, tiers.Free, "u_day", "/srv/day")
	require.NoError(t, err)
	require.Equal(t, 1, b.used(t, "u_day"))

	for i := range 10 {
		_, err := b.insert(t, tiers.Free, "", fmt.Sprintf("/srv/anon/%d", i))
		require.NoError(t, err)
	}
	require.Zero(t, b.db.Count(t, `SELECT count(*) FROM tenant_quota_usage WHERE tenant = ''`))
}
