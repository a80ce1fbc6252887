package dlq_test

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/dlq"
	"github.com/tierq/tierq/internal/jobmetasql"
	"github.com/tierq/tierq/internal/testdb"
)

// TestFilterByTierAndTenant: the drain writes every dead letter's tier and
// tenant (migration 00016's generated columns), whatever the shape of its
// metadata, and List, CountReplayable and ReplayAll filter by them.
func TestFilterByTierAndTenant(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()

	// 150 two-byte characters: 300 bytes, over jobmeta.MaxTenantBytes.
	long := strings.Repeat("é", 150)
	sum := md5.Sum([]byte(long))
	longKey := long + "#md5:" + hex.EncodeToString(sum[:])
	jobs := []struct{ kind, metadata, args string }{
		{"meta_pro_acme", `{"tierq:tier": "pro", "tierq:tenant": "acme"}`, `{}`},
		{"args_enterprise", `{}`, `{"tier": "enterprise"}`},
		{"meta_array", `[1, 2]`, `{"tier": "free"}`},
		{"meta_string", `"tierq:tenant"`, `[]`},
		{"meta_null", `null`, `{}`},
		{"bad_meta_tier_args_free_acme", `{"tierq:tier": "gold", "tierq:tenant": "acme"}`, `{"tier": "free"}`},
		{"long_tenant", fmt.Sprintf(`{"tierq:tier": "free", "tierq:tenant": %q}`, long), `{}`},
		{"number_tenant", `{"tierq:tenant": 42}`, `{}`},
		{"meta_upper_tier", `{"tierq:tier": "PRO", "tierq:tenant": "beta"}`, `{}`},
	}
	for _, j := range jobs {
		testdb.InsertRaw(t, db, testdb.RawJob{State: "discarded", Queue: "analysis_default", Kind: j.kind, Metadata: j.metadata, Args: j.args})
	}
	res, err := dlq.Drain(ctx, db.Pool, 100)
	require.NoError(t, err)
	require.Equal(t, 9, res.Moved)

	type row struct{ Kind, Tier, Tenant string }
	rows, err := db.Pool.Query(ctx, `SELECT kind, tier, tenant FROM dead_letter_jobs ORDER BY id`)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	require.NoError(t, err)
	require.Equal(t, []row{
		{"meta_pro_acme", "pro", "acme"},
		{"args_enterprise", "enterprise", ""},
		{"meta_array", "free", ""},
		{"meta_string", "unknown", ""},
		{"meta_null", "unknown", ""},
		{"bad_meta_tier_args_free_acme", "free", "acme"},
		{"long_tenant", "free", longKey},
		{"number_tenant", "unknown", "42"},
		{"meta_upper_tier", "unknown", "beta"},
	}, got)
	// The columns are jobmetasql's rules, as fair share and the console's
	// queue page apply them to river_job.
	require.Equal(t, 0, db.Count(t, `SELECT count(*) FROM dead_letter_jobs AS d
		WHERE d.tier IS DISTINCT FROM `+jobmetasql.TierSQL("d")+` OR d.tenant IS DISTINCT FROM `+jobmetasql.TenantKeySQL("d")))

	// A listed dead letter carries the same two values.
	list, err := dlq.List(ctx, db.Pool, dlq.Filter{}, dlq.Page{Limit: 100})
	require.NoError(t, err)
	listed := []row{}
	for i := len(list) - 1; i >= 0; i-- { // newest first: back to id order
		listed = append(listed, row{list[i].Kind, list[i].Tier, list[i].Tenant})
	}
	require.Equal(t, got, listed)

	kinds := func(f dlq.Filter) []string {
		t.Helper()
		list, err := dlq.List(ctx, db.Pool, f, dlq.Page{Limit: 100})
		require.NoError(t, err)
		out := []string{}
		for _, d := range list {
			out = append(out, d.Kind)
		}
		return out
	}
	require.Equal(t, []string{"meta_pro_acme"}, kinds(dlq.Filter{Tier: "pro"}))
	require.Equal(t, []string{"meta_upper_tier", "number_tenant", "meta_null", "meta_string"}, kinds(dlq.Filter{Tier: "unknown"}))
	require.Equal(t, []string{"long_tenant", "bad_meta_tier_args_free_acme", "meta_array"}, kinds(dlq.Filter{Tier: "free"}))
	require.Equal(t, []string{"bad_meta_tier_args_free_acme", "meta_pro_acme"}, kinds(dlq.Filter{Tenant: "acme"}))
	require.Equal(t, []string{"bad_meta_tier_args_free_acme"}, kinds(dlq.Filter{Tenant: "acme", Tier: "free"}))
	require.Equal(t, []string{"long_tenant"}, kinds(dlq.Filter{Tenant: long}), "a long tenant id by its key")
	require.Equal(t, []string{}, kinds(dlq.Filter{Tenant: longKey}), "the key is no tenant id")
	require.Equal(t, []string{"number_tenant"}, kinds(dlq.Filter{Tenant: "42"}))
	require.Equal(t, []string{}, kinds(dlq.Filter{Tenant: "ACME"}))
	require.Equal(t, []string{"meta_pro_acme"}, kinds(dlq.Filter{Tenant: "acme", Queue: "analysis_default", Kind: "meta_pro_acme"}))

	for _, tt := range []struct {
		name string
		give dlq.Filter
		want string
	}{
		{"tier unknown to tierq", dlq.Filter{Tier: "gold"}, "invalid dead-letter request: the tier is one of free, pro, pro_plus, enterprise or unknown"},
		{"tier in capitals", dlq.Filter{Tier: "Pro"}, "invalid dead-letter request: the tier is one of free, pro, pro_plus, enterprise or unknown"},
		{"tenant too long", dlq.Filter{Tenant: strings.Repeat("t", 65537)}, "invalid dead-letter request: the tenant is at most 65536 bytes"},
		{"tenant with NUL", dlq.Filter{Tenant: "a\x00b"}, "invalid dead-letter request: the tenant must be UTF-8 without NUL"},
		{"tenant not UTF-8", dlq.Filter{Tenant: "a\xffb"}, "invalid dead-letter request: the tenant must be UTF-8 without NUL"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := dlq.List(ctx, db.Pool, tt.give, dlq.Page{Limit: 10})
			require.EqualError(t, err, tt.want)
			require.ErrorIs(t, err, dlq.ErrInvalid)
		})
	}
	_, err = dlq.List(ctx, db.Pool, dlq.Filter{Tenant: strings.Repeat("t", 65536)}, dlq.Page{Limit: 10})
	require.NoError(t, err, "64 KiB is allowed")

	// The bulk replay of a filter replays that filter's rows, and only them.
	queues := testdb.Registry(t).Queues()
	n, err := dlq.CountReplayable(ctx, db.Pool, queues, dlq.Filter{Tenant: "acme"}, dlq.ReplayOptions{})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	all, err := dlq.ReplayAll(ctx, db.Producer(t), db.Pool, queues, dlq.Filter{Tenant: "acme", Tier: "pro"},
		dlq.ReplayOptions{Actor: "alice"}, 10, nil)
	require.NoError(t, err)
	require.Equal(t, 1, all.Replayed)
	require.Equal(t, []string{"meta_pro_acme"}, kinds(dlq.Filter{Replayed: true}))
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'meta_pro_acme'`))
}

// TestFilterPlans: on 20,000 dead letters over 200 tenants and the tiers
// (1% enterprise), the newest-first page of a tenant or a rare tier reads
// its index
// (dead_letter_jobs_tenant_id_idx, dead_letter_jobs_tier_id_idx), never
// the whole table; a tenant id longer than 200 bytes too, by its key. The
// plans are written to $TIERQ_EXPLAIN when set.
func TestFilterPlans(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `
		INSERT INTO dead_letter_jobs (job_id, kind, queue, priority, args, metadata, attempt, max_attempts, created_at, finalized_at, moved_at)
		SELECT i, 'analysis', 'analysis_default', 4, '{}',
		       jsonb_build_object('tierq:tenant', 't' || i % 200, 'tierq:tier', CASE WHEN i % 100 = 0 THEN 'enterprise' ELSE (ARRAY['free', 'pro'])[1 + i % 2] END),
		       1, 1, now(), now(), now()
		FROM generate_series(1, 20000) AS i;
		ANALYZE dead_letter_jobs`)
	require.NoError(t, err)
	for _, tt := range []struct {
		name  string
		give  dlq.Filter
		index string
	}{
		{"tenant", dlq.Filter{Tenant: "t7"}, "dead_letter_jobs_tenant_id_idx"},
		{"long tenant", dlq.Filter{Tenant: strings.Repeat("t", 300)}, "dead_letter_jobs_tenant_id_idx"},
		{"pending tenant", dlq.Filter{Tenant: "t7", Pending: true}, "dead_letter_jobs_tenant_id_idx"},
		{"rare tier", dlq.Filter{Tier: "enterprise"}, "dead_letter_jobs_tier_id_idx"},
		// Every other row: walking the primary key backward finds 50 at
		// once, which the planner may prefer.
		{"common tier", dlq.Filter{Tier: "pro"}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, page := range []dlq.Page{{Limit: 50}, {Limit: 50, BeforeID: 10_000}} {
				sql, args := dlq.ListSQL(tt.give, page)
				rows, err := db.Pool.Query(ctx, "EXPLAIN "+sql, args...)
				require.NoError(t, err)
				lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
				require.NoError(t, err)
				plan := strings.Join(lines, "\n")
				if tt.index != "" {
					require.Contains(t, plan, tt.index, plan)
				}
				require.NotContains(t, plan, "Seq Scan", plan)
				if page.BeforeID == 0 {
					testdb.WriteExplain(t, db, "dlq-list-"+strings.ReplaceAll(tt.name, " ", "-")+".txt", sql, args...)
				}
			}
		})
	}
}
