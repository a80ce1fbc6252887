package config_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/config"
)

func baseAPIEnv() []string {
	return []string{
		"DATABASE_URL=postgres://tierq:s3cret@127.0.0.1:5432/tierq",
		"API_TOKEN=producer-token-0123456789",
		"API_ADMIN_TOKEN=admin-token-0123456789",
	}
}

func TestAPIDefaults(t *testing.T) {
	t.Parallel()

	cfg, err := config.Load[config.API](baseAPIEnv())
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:8081", cfg.Addr)
	require.Equal(t, 10, cfg.MaxAttempts)
}

func TestAPIBadValues(t *testing.T) {
	t.Parallel()

	runBadValues[config.API](t, baseAPIEnv(), []badValue{
		{name: "no producer token", omit: "API_TOKEN", wantVar: "API_TOKEN", wantReason: "required"},
		{name: "no admin token", omit: "API_ADMIN_TOKEN", wantVar: "API_ADMIN_TOKEN", wantReason: "required"},
		{name: "empty token", give: []string{"API_TOKEN="}, wantVar: "API_TOKEN", wantReason: "empty"},
		{name: "short token, value redacted", give: []string{"API_TOKEN=abc"}, wantVar: "API_TOKEN", wantValue: "[redacted]", wantReason: "at least 16"},
		{name: "same tokens", give: []string{"API_ADMIN_TOKEN=producer-token-0123456789"}, wantVar: "API_ADMIN_TOKEN", wantValue: "[redacted]", wantReason: "differ"},
		{name: "bad addr", give: []string{"API_ADDR=localhost"}, wantVar: "API_ADDR", wantValue: "localhost", wantReason: "listen address"},
		{name: "bad port", give: []string{"API_ADDR=:99999"}, wantVar: "API_ADDR", wantValue: ":99999", wantReason: "listen address"},
		{name: "max attempts", give: []string{"MAX_ATTEMPTS=0"}, wantVar: "MAX_ATTEMPTS", wantValue: "0", wantReason: "between 1 and 1000"},
	})
}
