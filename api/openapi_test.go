package api_test

import (
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/api"
)

// TestOpenAPIDescribesEveryRoute keeps the document, its copy in docs/ and
// the router in step.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	t.Parallel()

	inDocs, err := os.ReadFile("../docs/openapi.json")
	require.NoError(t, err)
	require.Equal(t, string(api.OpenAPI()), string(inDocs), "docs/openapi.json must be a copy of api/openapi.json")

	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(api.OpenAPI(), &doc))
	require.True(t, strings.HasPrefix(doc.OpenAPI, "3."))

	// River UI, when served, is not part of the JSON API: Patterns leaves it
	// out, and the document does not describe it.
	server := api.New(api.Config{RiverUI: http.NotFoundHandler()}, nil, nil, api.NewMetrics(nil, nil, nil), nil)
	documented := 0
	for _, pattern := range server.Patterns() {
		method, path, ok := strings.Cut(pattern, " ")
		require.True(t, ok, pattern)
		ops, ok := doc.Paths[path]
		require.True(t, ok, "%s is not in openapi.json", path)
		_, ok = ops[strings.ToLower(method)]
		require.True(t, ok, "%s is not in openapi.json", pattern)
		documented++
	}
	operations := 0
	for _, ops := range doc.Paths {
		operations += len(ops)
	}
	require.Equal(t, documented, operations, "openapi.json describes a route the server does not have")
}
