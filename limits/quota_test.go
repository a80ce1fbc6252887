package limits_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/limits"
	"github.com/tierq/tierq/tiers"
)

type bundle struct {
	db *testdb.DB
}

// setup gives the test a schema of its own with tierq's migrations, where
// the scheduler recorded quotas for service mailer: free 7 a day, pro 20,
// the other tiers none.
func setup(t *testing.T) *bundle {
	t.Helper()
	db := testdb.NewCore(t)
	require.NoError(t, limits.Record(t.Context(), db.Pool, limits.Config{Services: map[string]limits.Tiers{
		"mailer": {tiers.Free: {DailyQuota: 7}, tiers.Pro: {DailyQuota: 20}},
	}}, []string{"mailer"}, "scheduler"))
	return &bundle{db: db}
}

// charge charges one job in a transaction of its own, committed unless the
// charge failed.
func (b *bundle) charge(t *testing.T, job limits.Job) (limits.Charged, error) {
	t.Helper()
	var out limits.Charged
	err := pgx.BeginFunc(t.Context(), b.db.Pool, func(tx pgx.Tx) error {
		var err error
		out, err = limits.Charge(t.Context(), tx, job)
		return err
	})
	return out, err
}

func (b *bundle) used(t *testing.T, tenant string, day string) int {
	t.Helper()
	return b.db.Count(t, `SELECT coalesce(sum(used), 0) FROM tenant_quota_usage WHERE service = 'mailer' AND tenant = $1 AND day = $2::date`, tenant, day)
}

// TestChargeRacesNeverOvershoot: 20 transactions charge one tenant at once
// against a quota of 7, each holding its count until it commits: exactly 7
// are counted, the other 13 get a *QuotaError, and the count is 7.
func TestChargeRacesNeverOvershoot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

	var (
		start   = make(chan struct{})
		wg      sync.WaitGroup
		mu      sync.Mutex
		counted int
		refused []*limits.QuotaError
	)
	for range 20 {
		wg.Go(func() {
			<-start
			_, err := b.charge(t, limits.Job{Service: "mailer", Tier: tiers.Free, Tenant: "u_race", At: at})
			mu.Lock()
			defer mu.Unlock()
			var qe *limits.QuotaError
			switch {
			case err == nil:
				counted++
			case errors.As(err, &qe):
				refused = append(refused, qe)
			default:
				t.Errorf("charge: %v", err)
			}
		})
	}
	close(start)
	wg.Wait()

	require.Equal(t, 7, counted)
	require.Len(t, refused, 13)
	require.Equal(t, 7, b.used(t, "u_race", "2026-12-01"))
	require.Equal(t, &limits.QuotaError{
		Service: "mailer", Tenant: "u_race", Tier: tiers.Free, Quota: 7,
		Day:        time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC),
		ResetAt:    time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC),
		RetryAfter: 12 * time.Hour,
	}, refused[0])
	require.EqualError(t, refused[0], `daily quota reached: tenant "u_race" has inserted its 7 jobs of service mailer for 2026-12-01 (UTC); the quota resets at 2026-12-02T00:00:00Z`)
	require.ErrorIs(t, refused[0], limits.ErrQuotaExceeded)
}

// TestChargeCountsInTheTransaction: a charge rolled back with its
// transaction is not counted; a refund gives a counted job back, and a
// refused charge counts nothing.
func TestChargeCountsInTheTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	job := limits.Job{Service: "mailer", Tier: tiers.Free, Tenant: "u_tx", At: at}

	tx, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	charged, err := limits.Charge(ctx, tx, job)
	require.NoError(t, err)
	require.Equal(t, limits.Charged{Service: "mailer", Tenant: "u_tx", Quota: 7, Used: 1,
		Day: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), ResetAt: time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)}, charged)
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, 0, b.used(t, "u_tx", "2026-12-01"))

	for range 3 {
		_, err := b.charge(t, job)
		require.NoError(t, err)
	}
	err = pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		charged, err := limits.Charge(ctx, tx, job)
		if err != nil {
			return err
		}
		require.Equal(t, int64(4), charged.Used)
		return limits.Refund(ctx, tx, charged)
	})
	require.NoError(t, err)
	require.Equal(t, 3, b.used(t, "u_tx", "2026-12-01"))

	for range 4 {
		_, err := b.charge(t, job)
		require.NoError(t, err)
	}
	_, err = b.charge(t, job)
	require.ErrorIs(t, err, limits.ErrQuotaExceeded)
	require.Equal(t, 7, b.used(t, "u_tx", "2026-12-01"))
}

// TestChargeRollsOverAtMidnightUTC: the day is the UTC day of the clock,
// whatever the clock's zone: a tenant at its quota at 23:59:59.999 UTC is
// refused until 00:00:00 UTC, and counts from 1 again then.
func TestChargeRollsOverAtMidnightUTC(t *testing.T) {
	t.Parallel()
	b := setup(t)
	job := func(at time.Time) limits.Job {
		return limits.Job{Service: "mailer", Tier: tiers.Free, Tenant: "u_night", At: at}
	}
	lastInstant := time.Date(2026, 12, 1, 23, 59, 59, 999_000_000, time.UTC)
	for range 7 {
		_, err := b.charge(t, job(lastInstant))
		require.NoError(t, err)
	}
	_, err := b.charge(t, job(lastInstant))
	var qe *limits.QuotaError
	require.ErrorAs(t, err, &qe)
	require.Equal(t, time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC), qe.ResetAt)
	require.Equal(t, time.Second, qe.RetryAfter, "a millisecond before midnight: at least a second")

	// 01:30 in UTC+2 is still 23:30 UTC of the 1st.
	_, err = b.charge(t, job(time.Date(2026, 12, 2, 1, 30, 0, 0, time.FixedZone("UTC+2", 2*3600))))
	require.ErrorAs(t, err, &qe)
	require.Equal(t, 30*time.Minute, qe.RetryAfter)

	charged, err := b.charge(t, job(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)))
	require.NoError(t, err)
	require.Equal(t, int64(1), charged.Used)
	require.Equal(t, time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC), charged.Day)
	require.Equal(t, 7, b.used(t, "u_night", "2026-12-01"))
	require.Equal(t, 1, b.used(t, "u_night", "2026-12-02"))
}

// TestChargeOverrideBeatsTheTier: a tenant's override of the daily quota
// applies whatever its tier's default, 0 is no quota for that tenant, and
// unsetting it brings the tier's back; without a tenant, or a quota,
// nothing is counted.
func TestChargeOverrideBeatsTheTier(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	at := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	job := limits.Job{Service: "mailer", Tier: tiers.Free, Tenant: "u_vip", At: at}

	three := int64(3)
	_, err := limits.SetOverride(ctx, b.db.Pool, "mailer", "u_vip", limits.Override{DailyQuota: &three})
	require.NoError(t, err)
	for range 3 {
		charged, err := b.charge(t, job)
		require.NoError(t, err)
		require.Equal(t, int64(3), charged.Quota)
	}
	_, err = b.charge(t, job)
	var qe *limits.QuotaError
	require.ErrorAs(t, err, &qe)
	require.Equal(t, int64(3), qe.Quota)

	zero := int64(0)
	_, err = limits.SetOverride(ctx, b.db.Pool, "mailer", "u_vip", limits.Override{DailyQuota: &zero})
	require.NoError(t, err)
	for range 10 {
		charged, err := b.charge(t, job)
		require.NoError(t, err)
		require.False(t, charged.Counted(), "no quota: nothing counted")
	}
	require.Equal(t, 3, b.used(t, "u_vip", "2026-12-03"))

	had, err := limits.UnsetOverride(ctx, b.db.Pool, "mailer", "u_vip", limits.KindDailyQuota)
	require.NoError(t, err)
	require.True(t, had)
	charged, err := b.charge(t, job)
	require.NoError(t, err)
	require.Equal(t, limits.Charged{Service: "mailer", Tenant: "u_vip", Quota: 7, Used: 4,
		Day: time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC), ResetAt: time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)}, charged)

	// A tier without a quota, a service nothing recorded, no tenant.
	for _, j := range []limits.Job{
		{Service: "mailer", Tier: tiers.Enterprise, Tenant: "u_vip", At: at},
		{Service: "other", Tier: tiers.Free, Tenant: "u_vip", At: at},
		{Service: "mailer", Tier: tiers.Free, At: at},
	} {
		charged, err := b.charge(t, j)
		require.NoError(t, err)
		require.False(t, charged.Counted(), "%+v", j)
	}
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM tenant_quota_usage`))

	// A tier that is not one of the four is charged as free.
	charged, err = b.charge(t, limits.Job{Service: "mailer", Tier: 0, Tenant: "u_unknown", At: at})
	require.NoError(t, err)
	require.Equal(t, int64(7), charged.Quota)
}

// TestChargePurgesOldCounts: a tenant's charge deletes its counts older
// than UsageRetentionDays before the charged day, and keeps the others;
// Record deletes every tenant's.
func TestChargePurgesOldCounts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	_, err := b.db.Pool.Exec(ctx, `
		INSERT INTO tenant_quota_usage (service, tenant, day, used) VALUES
		('mailer', 'u_old', '2026-10-31', 5), ('mailer', 'u_old', '2026-11-01', 6),
		('mailer', 'u_other', (now() AT TIME ZONE 'UTC')::date - 40, 1),
		('mailer', 'u_other', (now() AT TIME ZONE 'UTC')::date - 31, 1)`)
	require.NoError(t, err)
	_, err = b.charge(t, limits.Job{Service: "mailer", Tier: tiers.Free, Tenant: "u_old", At: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)})
	require.NoError(t, err)
	require.Equal(t, 0, b.used(t, "u_old", "2026-10-31"), "32 days before")
	require.Equal(t, 6, b.used(t, "u_old", "2026-11-01"), "31 days before")
	require.Equal(t, 2, b.db.Count(t, `SELECT count(*) FROM tenant_quota_usage WHERE tenant = 'u_other'`), "another tenant's")

	require.NoError(t, limits.Record(ctx, b.db.Pool, limits.Config{}, []string{"mailer"}, "scheduler"))
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM tenant_quota_usage WHERE tenant = 'u_other'`), "kept: 31 days before today")
}

func TestChargeRefusesBadKeys(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tests := []struct {
		name string
		job  limits.Job
		want string
	}{
		{"NUL", limits.Job{Service: "mailer", Tenant: "u\x00"}, "tenant: invalid tenant id: control character U+0000 at byte 1"},
		{"not UTF-8", limits.Job{Service: "mailer", Tenant: "u\xff"}, "tenant: invalid tenant id: invalid UTF-8 at byte 1"},
		{"too long", limits.Job{Service: "mailer", Tenant: string(make([]byte, 201))}, "tenant: invalid tenant id: 201 bytes, longer than 200"},
		{"service", limits.Job{Service: "Mailer", Tenant: "u"}, `service "Mailer" is not a service name (1 to 40 lower-case letters, digits and underscores, a letter first)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := limits.Charge(context.Background(), b.db.Pool, tt.job)
			require.EqualError(t, err, tt.want)
			require.ErrorIs(t, err, limits.ErrInvalid)
		})
	}
}
