package config_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/config"
)

// TestDatabaseURLSecretsRedacted: a DATABASE_URL that is refused is quoted
// in the error without its password, wherever pgx would read one from: the
// user info, the query (password, sslpassword) or a keyword/value string.
func TestDatabaseURLSecretsRedacted(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name      string
		give      string
		wantValue string
	}{
		{name: "user info", give: "postgres://tierq:hunter2@db/tierq?sslmode=bogus",
			wantValue: "postgres://tierq:xxxxx@db/tierq?sslmode=bogus"},
		{name: "password in query", give: "postgres://tierq@db/tierq?password=hunter2&sslmode=bogus",
			wantValue: "postgres://tierq@db/tierq?password=xxxxx&sslmode=bogus"},
		{name: "sslpassword in query", give: "postgres://tierq@db/tierq?sslmode=bogus&sslpassword=hunter2",
			wantValue: "postgres://tierq@db/tierq?sslmode=bogus&sslpassword=xxxxx"},
		{name: "query that does not parse", give: "postgres://tierq@db/tierq?password=hunter2%zz&sslmode=bogus",
			wantValue: "[redacted]"},
		{name: "keyword/value", give: "host=db password=hunter2 sslmode=bogus", wantValue: "[redacted]"},
		{name: "not a URL", give: "postgres://tierq:hunter2@db:port/x", wantValue: "[redacted]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := config.Load[config.CLI]([]string{"DATABASE_URL=" + tt.give})
			var errs config.Errors
			require.ErrorAs(t, err, &errs)
			require.Len(t, errs, 1)
			require.Equal(t, "DATABASE_URL", errs[0].Var)
			require.Equal(t, tt.wantValue, errs[0].Value)
			require.NotContains(t, err.Error(), "hunter2")
		})
	}
}

// TestDatabaseSchemaIsAPlainIdentifier: DATABASE_SCHEMA reaches SQL text
// (River writes it into its queries and LISTEN channel names; migrate
// quotes it in CREATE SCHEMA), so only a plain lower-case identifier passes.
func TestDatabaseSchemaIsAPlainIdentifier(t *testing.T) {
	t.Parallel()

	tests := []struct {
		give string
		ok   bool
	}{
		{give: "tenant_a", ok: true},
		{give: "_t1", ok: true},
		{give: strings.Repeat("s", 63), ok: true},
		{give: strings.Repeat("s", 64)},
		{give: "1tenant"},
		{give: "Tenant"},
		{give: `t"; DROP TABLE river_job; --`},
		{give: "public.river_job"},
		{give: "tenant a"},
		{give: "tenant-a"},
		{give: "tenänt"},
		{give: "t\x00"},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			t.Parallel()
			_, err := config.Load[config.CLI]([]string{"DATABASE_URL=postgres://db/x", "DATABASE_SCHEMA=" + tt.give})
			if tt.ok {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, config.ErrInvalid)
			require.ErrorContains(t, err, "DATABASE_SCHEMA")
		})
	}
}
