package jobmeta_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/jobmeta"
	"github.com/tierq/tierq/tiers"
)

func TestReadIgnoresWhatItCannotRead(t *testing.T) {
	t.Parallel()
	for _, metadata := range []string{`null`, `[]`, `"tierq:tier"`, `7`, `{`, ``,
		`{"tierq:tier": 5, "tierq:tenant": ["u"], "tierq:base_priority": "2", "tierq:moves": {"kind": "aging"}}`} {
		require.Equal(t, jobmeta.Info{}, jobmeta.Read([]byte(metadata)), metadata)
	}
	// A move that is not an object is passed over; the others are read.
	info := jobmeta.Read([]byte(`{"tierq:moves": [1, {"kind": "replay", "to_queue": "q", "dead_letter_id": 7}]}`))
	require.Equal(t, []jobmeta.Move{{Kind: "replay", ToQueue: "q", DeadLetterID: 7}}, info.Moves)
}

func TestReadPrefersPrefixedKeys(t *testing.T) {
	t.Parallel()
	info := jobmeta.Read([]byte(`{"tierq:base_priority": 2, "tierq_base_priority": 3,
		"tierq_replay_of": 11, "tierq_replay_of_job_id": 12}`))
	require.Equal(t, jobmeta.Info{BasePriority: 2, ReplayOf: 11, ReplayOfJobID: 12}, info)
}

func TestTierOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name           string
		metadata, args string
		want           tiers.Tier
		wantOK         bool
	}{
		{"metadata", `{"tierq:tier": "pro"}`, `{}`, tiers.Pro, true},
		{"metadata wins over args", `{"tierq:tier": "free"}`, `{"tier": "enterprise"}`, tiers.Free, true},
		{"args when metadata has none", `{}`, `{"tier": "pro_plus"}`, tiers.ProPlus, true},
		{"args when metadata's is no tier", `{"tierq:tier": "gold"}`, `{"tier": "enterprise"}`, tiers.Enterprise, true},
		{"metadata not an object", `["tierq:tier"]`, `{"tier": "pro"}`, tiers.Pro, true},
		{"a number", `{"tierq:tier": 3}`, `{"tier": 2}`, 0, false},
		{"neither", `null`, `"pro"`, 0, false},
		{"empty", ``, ``, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := jobmeta.TierOf([]byte(tt.metadata), []byte(tt.args))
			require.Equal(t, tt.wantOK, ok)
			require.Equal(t, tt.want, got)
		})
	}
}

// BenchmarkTierOf is the per-job cost of reading a job's tier, which the
// worker's metrics hook pays for every job it starts (docs/benchmarks.md,
// throughput): go test -run - -bench TierOf -benchmem ./jobmeta.
func BenchmarkTierOf(b *testing.B) {
	metadata := []byte(`{"tierq:tier":"pro_plus","tierq:tenant":"u_42","tierq:original_queue":"mail_priority","tierq:original_priority":3}`)
	args := []byte(`{"to":"a@example.com","tier":"free"}`)
	b.ReportAllocs()
	for b.Loop() {
		if tier, ok := jobmeta.TierOf(metadata, args); !ok || tier.String() != "pro_plus" {
			b.Fatal(tier, ok)
		}
	}
}
