package jobmeta_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/jobmeta"
)

func TestCheckTenant(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		give string
		want string // the error, "" for none
	}{
		{"empty means no tenant", "", ""},
		{"plain", "u_123", ""},
		{"200 bytes", strings.Repeat("u", 200), ""},
		{"UTF-8 within 200 bytes", strings.Repeat("é", 100), ""},
		{"space and punctuation", "acme corp/team-1 <ops>", ""},
		{"U+00A0 is not a control character", "a\u00a0b", ""},
		{"201 bytes", strings.Repeat("u", 201), "invalid tenant id: 201 bytes, longer than 200"},
		{"201 bytes of two-byte characters", strings.Repeat("é", 100) + "u", "invalid tenant id: 201 bytes, longer than 200"},
		{"3,200 bytes", strings.Repeat("x", 3200), "invalid tenant id: 3200 bytes, longer than 200"},
		{"length before control characters", strings.Repeat("\x1b", 201), "invalid tenant id: 201 bytes, longer than 200"},
		{"escape", "a\x1bb", "invalid tenant id: control character U+001B at byte 1"},
		{"NUL", "\x00", "invalid tenant id: control character U+0000 at byte 0"},
		{"newline", "u_1\n", "invalid tenant id: control character U+000A at byte 3"},
		{"tab", "u\t1", "invalid tenant id: control character U+0009 at byte 1"},
		{"DEL", "u\x7f", "invalid tenant id: control character U+007F at byte 1"},
		{"C1 first", "é\u0080", "invalid tenant id: control character U+0080 at byte 2"},
		{"C1 NEL", "ab\u0085", "invalid tenant id: control character U+0085 at byte 2"},
		{"C1 last", "\u009f", "invalid tenant id: control character U+009F at byte 0"},
		{"invalid UTF-8", "ab\xffc", "invalid tenant id: invalid UTF-8 at byte 2"},
		{"a lone C1 byte is invalid UTF-8", "a\x85", "invalid tenant id: invalid UTF-8 at byte 1"},
		{"truncated sequence", "é"[:1], "invalid tenant id: invalid UTF-8 at byte 0"},
		{"an encoded surrogate", "a\xed\xa0\x80", "invalid tenant id: invalid UTF-8 at byte 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := jobmeta.CheckTenant(tt.give)
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, tt.want)
			require.ErrorIs(t, err, jobmeta.ErrInvalidTenant)
			var tenantErr *jobmeta.TenantError
			require.True(t, errors.As(err, &tenantErr))
			require.Equal(t, tt.want, "invalid tenant id: "+tenantErr.Problem)
		})
	}
}

// TestCheckTenantIn: the tenant of metadata as Insert.JSON writes it, for
// every tenant, is checked as CheckTenant checks the tenant itself; a
// tenant that is not UTF-8 is kept as it is, not replaced with U+FFFD.
func TestCheckTenantIn(t *testing.T) {
	t.Parallel()
	for _, tenant := range []string{"", "u_1", `a"b\c`, "<&>", "é", strings.Repeat("u", 200), strings.Repeat("u", 201),
		"a\x1bb", "\x00", "u\x7f", "a\u0085", "ab\xffc", "\xff\"\x01"} {
		metadata := jobmeta.Insert{Tier: "pro", Tenant: tenant, Queue: "q_priority", Priority: 4}.JSON()
		want := jobmeta.CheckTenant(tenant)
		if want == nil {
			require.NoError(t, jobmeta.CheckTenantIn(metadata), "%q", tenant)
		} else {
			require.EqualError(t, jobmeta.CheckTenantIn(metadata), want.Error(), "%q", tenant)
		}
	}

	// Valid UTF-8 is valid JSON that encoding/json reads back as it was.
	var m map[string]any
	require.NoError(t, json.Unmarshal(jobmeta.Insert{Tenant: "a\x1b\"é\u0085<", Queue: "q", Priority: 4}.JSON(), &m))
	require.Equal(t, "a\x1b\"é\u0085<", m[jobmeta.Tenant])
	// Invalid UTF-8 keeps its bytes; the rest is escaped.
	require.Equal(t, `{"tierq:tenant":"\u0001\"\\`+"\xff"+`","tierq:original_queue":"q","tierq:original_priority":4}`,
		string(jobmeta.Insert{Tenant: "\x01\"\\\xff", Queue: "q", Priority: 4}.JSON()))

	for _, metadata := range []string{``, `{}`, `null`, `[]`, `"a\u001bb"`, `{"tierq:tenant": 7}`, `{"tierq:tenant": ["a\u001bb"]}`,
		`{"tenant": "a\u001bb"}`, `{"river:tenant": "a\u001bb"}`} {
		require.NoError(t, jobmeta.CheckTenantIn([]byte(metadata)), metadata)
	}
	require.EqualError(t, jobmeta.CheckTenantIn([]byte(`{"team": "x", "tierq:tenant": "a\u001bb"}`)),
		"invalid tenant id: control character U+001B at byte 1")
}
