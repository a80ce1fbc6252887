package limits_test

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// BenchmarkCapTrigger measures what migration 00013's and 00015's
// triggers (caps and rates) cost an insert: 1,000 available jobs of 1,000
// tenants per statement (one op), into a service's queue beside 10,000 such
// jobs, analyzed: with both triggers off; on with no limit set anywhere
// (the default: nocaps); on with caps set for the service's free tier but
// not for these pro tenants (uncapped); for capped tenants (enterprise,
// capped at 1,000 each: each row takes its tenant's lock and counts its
// jobs); and for rate-limited tenants (pro at 1,000,000 an hour: each row
// takes the lock, looks for a job waiting to start, and the first of each
// tenant takes a token from its bucket).
//
//	go test -run '^$' -bench CapTrigger -benchtime 20x ./limits/
func BenchmarkCapTrigger(b *testing.B) {
	cases := []struct {
		name, tier, trigger, extra string
	}{
		{"off", "pro", "DISABLE", ""},
		{"rated", "pro", "ENABLE", "UPDATE tier_limits SET rate_count = 1000000, rate_interval = interval '1 hour' WHERE tier = 'pro'"},
		{"uncapped", "pro", "ENABLE", ""},
		{"nocaps", "pro", "ENABLE", "UPDATE tier_limits SET max_running = 0"},
		{"capped", "enterprise", "ENABLE", ""},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			bb := setupCapsB(b)
			_, err := bb.db.Pool.Exec(b.Context(), `ALTER TABLE river_job `+c.trigger+` TRIGGER tierq_tenant_cap, `+c.trigger+` TRIGGER tierq_tenant_rate`)
			require.NoError(b, err)
			if c.extra != "" {
				_, err = bb.db.Pool.Exec(b.Context(), c.extra)
				require.NoError(b, err)
			}
			// 10,000 jobs of 1,000 tenants already there, and statistics.
			_, err = bb.db.Pool.Exec(b.Context(), `
				INSERT INTO river_job (kind, args, queue, priority, state, max_attempts, metadata)
				SELECT 'mail', '{}', 'mailer_default', 2, 'available', 25,
				       jsonb_build_object('tierq:tier', $1::text, 'tierq:tenant', 'u' || (g % 1000)::text)
				FROM generate_series(1, 10000) AS g`, c.tier)
			require.NoError(b, err)
			_, err = bb.db.Pool.Exec(b.Context(), `ANALYZE river_job`)
			require.NoError(b, err)
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				_, err := bb.db.Pool.Exec(b.Context(), `
					INSERT INTO river_job (kind, args, queue, priority, state, max_attempts, metadata)
					SELECT 'mail', '{}', 'mailer_default', 2, 'available', 25,
					       jsonb_build_object('tierq:tier', $1::text, 'tierq:tenant', 'u' || (g % 1000)::text)
					FROM generate_series(1, 1000) AS g`, c.tier)
				require.NoError(b, err)
			}
		})
	}
}
