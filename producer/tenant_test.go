package producer_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/jobmeta"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/producer"
	"github.com/tierq/tierq/routing"
	"github.com/tierq/tierq/tiers"
)

// TestInsertRefusesBadTenants: producer.Insert refuses a tenant that breaks
// jobmeta.CheckTenant before it sends anything: nothing is inserted, and a
// queued duplicate is neither moved nor given the tenant.
func TestInsertRefusesBadTenants(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	client := db.Producer(t)
	analyzer := testdb.Service(t, "analyzer")

	insert := func(tier tiers.Tier, tenant string) (producer.Inserted, error) {
		var res producer.Inserted
		err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			var err error
			res, err = producer.Insert(ctx, client, tx, producer.Job{
				Args: jobs.AnalysisArgs{Target: "/srv/repo"}, Service: analyzer, Tier: tier, Tenant: tenant,
			})
			return err
		})
		return res, err
	}

	tests := []struct {
		name    string
		tenant  string
		wantErr string
	}{
		{"201 bytes", strings.Repeat("t", 201), "insert analysis job: invalid tenant id: 201 bytes, longer than 200"},
		{"3,200 bytes", strings.Repeat("t", 3200), "insert analysis job: invalid tenant id: 3200 bytes, longer than 200"},
		{"escape", "a\x1bb", "insert analysis job: invalid tenant id: control character U+001B at byte 1"},
		{"C1", "a\u0085", "insert analysis job: invalid tenant id: control character U+0085 at byte 1"},
		{"invalid UTF-8", "a\xffb", "insert analysis job: invalid tenant id: invalid UTF-8 at byte 1"},
	}
	for _, tt := range tests {
		_, err := insert(tiers.Enterprise, tt.tenant)
		require.EqualError(t, err, tt.wantErr, tt.name)
		require.ErrorIs(t, err, jobmeta.ErrInvalidTenant, tt.name)
	}
	require.Zero(t, db.Count(t, `SELECT count(*) FROM river_job`), "nothing inserted")

	// A queued free job for the target: a paid duplicate with a bad tenant
	// does not move it or write its tenant.
	free, err := insert(tiers.Free, "u_free")
	require.NoError(t, err)
	_, err = insert(tiers.Enterprise, "a\x1bb")
	require.ErrorIs(t, err, jobmeta.ErrInvalidTenant)
	require.Equal(t, []testdb.Job{{ID: free.Job.ID, Kind: "analysis", Queue: "analysis_default", State: "available", Priority: 4}},
		db.Jobs(t, "true"))
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM river_job WHERE metadata->>'tierq:tenant' = 'u_free' AND args->>'user_id' = 'u_free'`))
	require.Zero(t, db.Count(t, `SELECT count(*) FROM job_escalations`))

	// The empty tenant is no tenant, and 200 bytes is allowed.
	_, err = insert(tiers.Enterprise, "")
	require.NoError(t, err)
	var other producer.Inserted
	require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		other, err = producer.Insert(ctx, client, tx, producer.Job{
			Args: jobs.AnalysisArgs{Target: "/srv/other"}, Service: analyzer, Tier: tiers.Pro, Tenant: strings.Repeat("t", 200),
		})
		return err
	}))
	require.Equal(t, strings.Repeat("t", 200), jobmeta.Read(other.Job.Metadata).Tenant)
}

// TestTenantHook: a River client made from ClientConfig refuses, at insert,
// a job whose insert options (routing.InsertOptsFor, routing.InsertMetadata,
// Service.InsertOpts) carry a tenant that breaks jobmeta.CheckTenant: River
// runs the hook on the metadata they made, before writing anything, and
// returns its error. A client made without the hook inserts it.
func TestTenantHook(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	client := db.Producer(t)
	args := jobs.LoadTestArgs{}
	longTenant := strings.Repeat("t", 201)

	_, err := client.Insert(ctx, args, routing.InsertOptsFor("analysis", tiers.Pro, longTenant, false))
	require.EqualError(t, err, "loadtest job: invalid tenant id: 201 bytes, longer than 200")
	require.ErrorIs(t, err, jobmeta.ErrInvalidTenant)

	_, err = client.Insert(ctx, args, testdb.Service(t, "analyzer").InsertOpts(tiers.Free, "a\x1bb", true))
	require.EqualError(t, err, "loadtest job: invalid tenant id: control character U+001B at byte 1")

	// Bytes that are not UTF-8 reach the hook as they are.
	_, err = client.Insert(ctx, args, &river.InsertOpts{
		Queue: "analysis_default", Metadata: routing.InsertMetadata(tiers.Free, "ab\xff", "analysis_default", 4),
	})
	require.EqualError(t, err, "loadtest job: invalid tenant id: invalid UTF-8 at byte 2")

	// In a batch, and in a transaction: the whole batch is refused.
	err = pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		_, err := client.InsertManyTx(ctx, tx, []river.InsertManyParams{
			{Args: args, InsertOpts: routing.InsertOptsFor("analysis", tiers.Pro, "u_1", false)},
			{Args: args, InsertOpts: routing.InsertOptsFor("analysis", tiers.Pro, "a\u0085", false)},
		})
		return err
	})
	require.EqualError(t, err, "loadtest job: invalid tenant id: control character U+0085 at byte 1")
	require.Zero(t, db.Count(t, `SELECT count(*) FROM river_job`), "nothing inserted")

	// No tenant, metadata of another shape, and a good tenant pass.
	for _, opts := range []*river.InsertOpts{
		routing.InsertOptsFor("analysis", tiers.Pro, "", false),
		{Queue: "analysis_default"},
		{Queue: "analysis_default", Metadata: []byte(`{"team": "payments", "tierq:tenant": 7}`)},
		routing.InsertOptsFor("analysis", tiers.Pro, strings.Repeat("é", 100), false),
	} {
		_, err := client.Insert(ctx, args, opts)
		require.NoError(t, err)
	}
	require.Equal(t, 4, db.Count(t, `SELECT count(*) FROM river_job`))

	// A client made without ClientConfig, and without the hook, inserts
	// the job (routing.InsertOptsFor's doc says to add the hook).
	bare, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{Schema: db.Schema})
	require.NoError(t, err)
	_, err = bare.Insert(ctx, args, routing.InsertOptsFor("analysis", tiers.Pro, longTenant, false))
	require.NoError(t, err)
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM river_job WHERE metadata->>'tierq:tenant' = $1`, longTenant))
}
