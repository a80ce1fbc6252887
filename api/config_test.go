package api_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/api"
	"github.com/tierq/tierq/service"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	registry, err := service.NewRegistry()
	require.NoError(t, err)

	tests := []struct {
		name string
		give api.Config
		want []string // each a line of the error; none: valid
	}{
		{name: "defaults", give: api.Config{Token: producerToken, AdminToken: adminToken, Registry: registry}},
		{name: "same tokens", give: api.Config{Token: producerToken, AdminToken: producerToken, Registry: registry},
			want: []string{"api: AdminToken must differ from Token"}},
		{name: "every problem at once", give: api.Config{Token: "short", MaxAttempts: 1001, RequestTimeout: -time.Second, Addr: "8081"},
			want: []string{
				"api: Token must be at least 16 characters",
				"api: AdminToken must be at least 16 characters",
				"api: Registry is required",
				"api: MaxAttempts is 1001: must be between 1 and 1000",
				"api: RequestTimeout is -1s: must not be negative",
				`api: Addr "8081" is not a listen address (host:port, e.g. 127.0.0.1:8081 or :8081)`,
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			before := tt.give
			err := tt.give.Validate()
			require.Equal(t, before, tt.give, "Validate changes nothing")
			if len(tt.want) == 0 {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, strings.Join(tt.want, "\n"))
		})
	}
}
