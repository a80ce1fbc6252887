package tiers_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/tiers"
)

func TestParse(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		give    string
		want    tiers.Tier
		wantErr bool
	}{
		{name: "free", give: "free", want: tiers.Free},
		{name: "pro", give: "pro", want: tiers.Pro},
		{name: "pro_plus", give: "pro_plus", want: tiers.ProPlus},
		{name: "enterprise", give: "enterprise", want: tiers.Enterprise},
		{name: "upper case", give: "ENTERPRISE", want: tiers.Enterprise},
		{name: "mixed case", give: "Pro_Plus", want: tiers.ProPlus},
		{name: "surrounding spaces", give: "  pro\t\n", want: tiers.Pro},
		{name: "empty", give: "", wantErr: true},
		{name: "only spaces", give: "   ", wantErr: true},
		{name: "hyphen is not underscore", give: "pro-plus", wantErr: true},
		{name: "space inside", give: "pro plus", wantErr: true},
		{name: "camel case name", give: "ProPlus", wantErr: true},
		{name: "unknown", give: "gold", wantErr: true},
		{name: "prefix of a name", give: "ent", wantErr: true},
		{name: "number", give: "2", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			got, err := tiers.Parse(tt.give)
			if tt.wantErr {
				require.ErrorIs(t, err, tiers.ErrUnknownTier)
				require.Contains(t, err.Error(), `"`+tt.give+`"`)
				require.Zero(t, got)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestStringRoundTrip(t *testing.T) {
	t.Parallel()

	want := map[tiers.Tier]string{
		tiers.Free: "free", tiers.Pro: "pro", tiers.ProPlus: "pro_plus", tiers.Enterprise: "enterprise",
	}
	require.Len(t, tiers.All(), len(want))
	for _, tier := range tiers.All() {
		require.Equal(t, want[tier], tier.String())
		parsed, err := tiers.Parse(tier.String())
		require.NoError(t, err)
		require.Equal(t, tier, parsed)
		require.True(t, tier.Valid())
	}
	require.Equal(t, "unknown(0)", tiers.Tier(0).String())
	require.Equal(t, "unknown(42)", tiers.Tier(42).String())
	require.False(t, tiers.Tier(0).Valid())
	require.False(t, tiers.Free.Paid())
	require.True(t, tiers.Pro.Paid())
}

func TestJSON(t *testing.T) {
	t.Parallel()

	type payload struct {
		Tier tiers.Tier `json:"tier"`
	}

	var p payload
	require.NoError(t, json.Unmarshal([]byte(`{"tier":" Pro_Plus "}`), &p))
	require.Equal(t, tiers.ProPlus, p.Tier)

	out, err := json.Marshal(payload{Tier: tiers.Enterprise})
	require.NoError(t, err)
	require.JSONEq(t, `{"tier":"enterprise"}`, string(out))

	err = json.Unmarshal([]byte(`{"tier":"platinum"}`), &p)
	require.ErrorIs(t, err, tiers.ErrUnknownTier)

	_, err = json.Marshal(payload{})
	require.ErrorIs(t, err, tiers.ErrUnknownTier)
}

// BenchmarkParse parses every tier name, a differently cased one and an
// unknown one (go test -run '^$' -bench . -benchmem ./tiers/).
func BenchmarkParse(b *testing.B) {
	names := []string{"free", "pro", "pro_plus", "enterprise", "Enterprise", "platinum"}
	b.ReportAllocs()
	var i int
	for b.Loop() {
		_, _ = tiers.Parse(names[i%len(names)])
		i++
	}
}
