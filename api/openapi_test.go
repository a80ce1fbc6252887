package api_test

import (
	"encoding/json"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/api"
	"github.com/tierq/tierq/internal/testdb"
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

// TestOpenAPIKindsAreTheRegistrys keeps the document's POST /v1/jobs in step
// with the reference app's registry: its kinds are the registry's kinds,
// and each kind's args schema lists exactly the args type's fields but
// those the server sets (tier, user_id).
func TestOpenAPIKindsAreTheRegistrys(t *testing.T) {
	t.Parallel()
	var doc struct {
		Components struct {
			Schemas struct {
				CreateJob struct {
					Properties struct {
						Kind struct {
							Enum []string `json:"enum"`
						} `json:"kind"`
						Args struct {
							OneOf []struct {
								Kind       string                     `json:"x-kind"`
								Properties map[string]json.RawMessage `json:"properties"`
							} `json:"oneOf"`
						} `json:"args"`
					} `json:"properties"`
				} `json:"CreateJob"`
			} `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(api.OpenAPI(), &doc))
	create := doc.Components.Schemas.CreateJob.Properties
	registry := testdb.Registry(t)
	require.Equal(t, registry.KindNames(), create.Kind.Enum)
	require.Len(t, create.Args.OneOf, len(registry.KindNames()))

	serverSets := map[string]bool{"tier": true, "user_id": true}
	for _, schema := range create.Args.OneOf {
		_, kind, ok := registry.ForKind(schema.Kind)
		require.True(t, ok, "x-kind %q is not a registered kind", schema.Kind)
		var want []string
		for _, f := range kind.ArgsFields() {
			if !serverSets[f] {
				want = append(want, f)
			}
		}
		require.ElementsMatch(t, want, slices.Collect(maps.Keys(schema.Properties)), "args of %s", schema.Kind)
	}
}
